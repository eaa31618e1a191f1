//! `handles` (ADR 0050): from TOML, and onto each export's `local` layer.

use txnfs_server::config::HandleChoice;
use txnfs_server::{Config, LayerStack};

fn names(s: &LayerStack) -> Vec<String> {
    s.names().iter().map(|n| n.to_string()).collect()
}

#[test]
fn handles_reach_the_local_layer_only() {
    let local = LayerStack::of(["txn", "local"]);
    assert_eq!(
        names(&HandleChoice::Table.apply(&local)),
        ["txn", "local:handles=table"]
    );
    assert_eq!(
        names(&HandleChoice::Kernel.apply(&LayerStack::Local)),
        ["local:handles=kernel"]
    );
    // auto leaves stacks as written; memory has no handles; a layer's own choice wins.
    assert_eq!(names(&HandleChoice::Auto.apply(&local)), ["txn", "local"]);
    assert_eq!(
        names(&HandleChoice::Table.apply(&LayerStack::Memory)),
        ["memory"]
    );
    let own = LayerStack::of(["local:handles=kernel"]);
    assert_eq!(
        names(&HandleChoice::Table.apply(&own)),
        ["local:handles=kernel"]
    );
    // Every result is a stack the built-in registry accepts.
    for s in [
        HandleChoice::Table.apply(&local),
        HandleChoice::Kernel.apply(&LayerStack::Local),
    ] {
        s.check_builtin().unwrap();
    }
}

#[test]
fn handles_from_toml_and_flags() {
    let cfg: Config = toml::from_str("handles = \"table\"").unwrap();
    assert_eq!(cfg.handles, HandleChoice::Table);
    assert_eq!(Config::default().handles, HandleChoice::Auto);
    assert!(toml::from_str::<Config>("handles = \"inode\"").is_err());
    assert_eq!("kernel".parse::<HandleChoice>(), Ok(HandleChoice::Kernel));
    assert!("Table".parse::<HandleChoice>().is_err());
}
