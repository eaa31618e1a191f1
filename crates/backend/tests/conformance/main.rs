//! One conformance suite run against every backend: each `check_*` function takes a fresh
//! backend and asserts outcomes; `conformance!` instantiates all of them per backend.

#[path = "../common/mod.rs"]
mod common;
mod dirs;
mod files;
mod fixture;
mod namespace;
mod rename_self;

use dirs::*;
use files::*;
use fixture::{layered, local, local_table, memory};
use namespace::*;
use rename_self::*;

macro_rules! conformance {
    ($modname:ident, $fixture:path) => {
        mod $modname {
            use super::*;

            macro_rules! case {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        let f = $fixture();
                        super::$name(&f.b);
                    }
                };
            }

            case!(check_root);
            case!(check_create_write_read);
            case!(check_sync_write_commit);
            case!(check_setattr);
            case!(check_create_modes);
            case!(check_make_node);
            case!(check_link);
            case!(check_rename);
            case!(check_remove);
            case!(check_hold);
            case!(check_readdir_paging);
            case!(check_change);
            case!(check_bad_names);
            case!(check_symlink_not_followed);
            case!(check_statfs);
            case!(check_create_attrs);
            case!(check_concurrent);
            case!(check_setgid_dirs);
            case!(check_dir_change);
            case!(check_clone_range);
            case!(check_rename_onto_itself);
        }
    };
}

conformance!(memory_backend, memory);
conformance!(local_backend, local);
conformance!(layered_backend, layered);
conformance!(local_table_backend, local_table);
