//! One server per state directory (issue 21): a second `Server::new` on a directory
//! another instance holds is refused with the holder's PID; once the first is dropped
//! the directory is free again.

mod common;

use common::memory_config;
use txnfs_server::server::ServerError;
use txnfs_server::Server;

#[test]
fn a_second_server_on_one_state_directory_is_refused_and_names_the_holder() {
    let tmp = std::env::temp_dir().join(format!("txnfs-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let first = Server::new(memory_config(&tmp, false)).expect("the first server starts");
    let epoch = std::fs::read_to_string(tmp.join("boot-epoch")).unwrap();
    let err = match Server::new(memory_config(&tmp, false)) {
        Err(e) => e,
        Ok(_) => panic!("a second server started on a state directory in use"),
    };
    assert!(matches!(err, ServerError::StateDirInUse(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("PID {}", std::process::id())),
        "names the holder: {msg}"
    );
    assert!(
        msg.contains(&tmp.display().to_string()),
        "names the directory: {msg}"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.join("boot-epoch")).unwrap(),
        epoch,
        "the refused server wrote nothing"
    );
    drop(first);
    let third = Server::new(memory_config(&tmp, false)).expect("free once the first is gone");
    drop(third);
    std::fs::remove_dir_all(&tmp).unwrap();
}
