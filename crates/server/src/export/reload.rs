//! Live reconfiguration of the export table (ADR 0048): a new configuration's set is
//! built and checked completely, then swapped in at once; the diff says what changed.
//! Exports whose name, directory and layers stay keep their backend (and with it every
//! open file and held object) and take the new rules from the next request on.

use super::build::{self, Sources};
use super::{Export, ExportError, ExportSet, Exports};
use crate::config::ExportConfig;
use std::collections::BTreeMap;
use std::sync::Arc;
use txnfs_backend::layer::LayerRegistry;

/// An export whose rules (or read-only flag) a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesChange {
    pub name: String,
    pub before: String,
    pub after: String,
}

/// What a reload changed, by export name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<RulesChange>,
    /// Exports kept exactly as they were.
    pub unchanged: usize,
}

/// An export's access as the administrator wrote it: `read_only` and its client specs.
fn access_of(e: &Export) -> String {
    let specs: Vec<String> = e.clients.rules().iter().map(|r| r.describe()).collect();
    let specs = if e.config.clients.is_empty() {
        format!("this host only ({})", specs.join(" "))
    } else {
        specs.join(" ")
    };
    if e.read_only {
        format!("read_only, {specs}")
    } else {
        specs
    }
}

impl ReloadDiff {
    /// The difference between the set `old` and its successor `new`.
    pub fn between(old: &ExportSet, new: &ExportSet) -> ReloadDiff {
        let by_name = |s: &ExportSet| -> BTreeMap<String, Arc<Export>> {
            s.exports
                .values()
                .map(|e| (e.name.clone(), e.clone()))
                .collect()
        };
        let (old, new) = (by_name(old), by_name(new));
        let mut d = ReloadDiff::default();
        for (name, e) in &new {
            match old.get(name) {
                None => d.added.push(name.clone()),
                Some(o) => {
                    let (before, after) = (access_of(o), access_of(e));
                    if before == after {
                        d.unchanged += 1;
                    } else {
                        d.changed.push(RulesChange {
                            name: name.clone(),
                            before,
                            after,
                        });
                    }
                }
            }
        }
        d.removed = old
            .keys()
            .filter(|n| !new.contains_key(*n))
            .cloned()
            .collect();
        d
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// One line per change, as the log and `txnfs reload` print them.
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .added
            .iter()
            .map(|n| format!("export {n} added"))
            .collect();
        v.extend(self.changed.iter().map(|c| {
            format!(
                "export {} rules changed: {} -> {}",
                c.name, c.before, c.after
            )
        }));
        v.extend(self.removed.iter().map(|n| format!("export {n} removed")));
        v
    }
}

impl std::fmt::Display for ReloadDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for l in self.lines() {
            writeln!(f, "{l}")?;
        }
        writeln!(
            f,
            "{} export(s) unchanged{}",
            self.unchanged,
            if self.is_empty() {
                "; nothing to apply"
            } else {
                ""
            }
        )
    }
}

impl Exports {
    /// Replaces the export set by the one of `cfgs`, or changes nothing and says why.
    /// Every check runs and every new export opens before the swap; a request that
    /// started on the old set finishes on it, the next one sees the new set. A removed
    /// export's handles answer STALE from then on.
    pub fn reload(
        &self,
        cfgs: &[ExportConfig],
        layers: &LayerRegistry,
    ) -> Result<ReloadDiff, ExportError> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.snapshot();
        let src = Sources {
            layers,
            state_dir: self.state_dir.as_deref(),
            txn: self.txn,
        };
        let new = build::build_set(cfgs, &src, &old.exports)?;
        let diff = ReloadDiff::between(&old, &new);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
        Ok(diff)
    }

    /// Checks `cfgs` as [`Exports::open`] would with the built-in layers, without
    /// opening anything: names, duplicates, nesting, overlapping directories, layer
    /// names, ids.
    pub fn check(cfgs: &[ExportConfig], txn: bool) -> Result<(), ExportError> {
        build::check_set(cfgs, &LayerRegistry::builtin(), txn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BackendKind;
    use crate::exportrules::parse_rule;

    fn local(name: &str, path: &std::path::Path, rules: &[&str]) -> ExportConfig {
        ExportConfig {
            name: name.into(),
            path: path.to_path_buf(),
            backend: BackendKind::Local,
            read_only: false,
            clients: rules.iter().map(|r| parse_rule(r).unwrap()).collect(),
            prebuilt: None,
        }
    }

    #[test]
    fn a_reload_keeps_unchanged_backends_and_reports_each_change() {
        let top = tempfile::tempdir().unwrap();
        for d in ["a", "b", "c"] {
            std::fs::create_dir(top.path().join(d)).unwrap();
        }
        let p = |d: &str| top.path().join(d);
        let layers = LayerRegistry::builtin();
        let ex = Exports::build(&[
            local("/a", &p("a"), &["127.0.0.1(rw)"]),
            local("/x/b", &p("b"), &[]),
        ])
        .unwrap();
        let before = ex.snapshot();
        let a_id = super::build::export_id("/a");
        let diff = ex
            .reload(
                &[
                    local("/a", &p("a"), &["127.0.0.1(ro)"]),
                    local("/c", &p("c"), &[]),
                ],
                &layers,
            )
            .unwrap();
        assert_eq!(diff.added, ["/c"]);
        assert_eq!(diff.removed, ["/x/b"]);
        assert_eq!(diff.changed.len(), 1);
        assert_eq!(
            diff.lines()[1],
            "export /a rules changed: 127.0.0.1(rw,root_squash) -> 127.0.0.1(ro,root_squash)"
        );
        let after = ex.snapshot();
        // The same backend instance, the same id; the old set is untouched.
        assert!(Arc::ptr_eq(
            &before.get(a_id).unwrap().backend,
            &after.get(a_id).unwrap().backend
        ));
        assert!(after.get(a_id).unwrap().clients.rules()[0].read_only);
        assert!(!before.get(a_id).unwrap().clients.rules()[0].read_only);
        assert!(ex.get(super::build::export_id("/x/b")).is_none());
        assert_eq!(after.exports.len(), 2);
        // The pseudo root keeps id 0 and lists the new names only.
        let root = after.node(0).unwrap();
        let names: Vec<&[u8]> = root.children.keys().map(|k| &k[..]).collect();
        assert_eq!(names, [&b"a"[..], b"c"]);
    }

    #[test]
    fn a_refused_reload_changes_nothing() {
        let top = tempfile::tempdir().unwrap();
        std::fs::create_dir(top.path().join("a")).unwrap();
        let a = top.path().join("a");
        let layers = LayerRegistry::builtin();
        let ex = Exports::build(&[local("/a", &a, &[])]).unwrap();
        let before = ex.snapshot();
        let missing = top.path().join("missing");
        let err = ex
            .reload(&[local("/a", &a, &[]), local("/m", &missing, &[])], &layers)
            .unwrap_err();
        assert!(matches!(err, ExportError::Open { .. }), "{err}");
        assert!(Arc::ptr_eq(&before, &ex.snapshot()));
        // Another directory under a running name is refused, naming both.
        std::fs::create_dir(top.path().join("b")).unwrap();
        let err = ex
            .reload(&[local("/a", &top.path().join("b"), &[])], &layers)
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("its path changed") && msg.contains("/b)"),
            "{msg}"
        );
        assert!(Arc::ptr_eq(&before, &ex.snapshot()));
        // Duplicates and nesting, as at start.
        assert!(matches!(
            ex.reload(&[local("/a", &a, &[]), local("/a", &a, &[])], &layers),
            Err(ExportError::Duplicate(_))
        ));
        assert!(Arc::ptr_eq(&before, &ex.snapshot()));
    }

    #[test]
    fn pseudo_directories_keep_their_ids_when_exports_come_and_go() {
        let mem = |name: &str| ExportConfig {
            backend: BackendKind::Memory,
            ..local(name, std::path::Path::new(""), &[])
        };
        let layers = LayerRegistry::builtin();
        let ex = Exports::build(&[mem("/p/q/a"), mem("/z")]).unwrap();
        let ids = |s: &ExportSet| -> Vec<(Vec<u8>, u16)> {
            let mut v: Vec<(Vec<u8>, u16)> = s
                .nodes
                .iter()
                .map(|(id, n)| (n.name.to_vec(), *id))
                .collect();
            v.sort();
            v
        };
        let before = ids(&ex.snapshot());
        ex.reload(&[mem("/b"), mem("/p/q/a"), mem("/z")], &layers)
            .unwrap();
        assert_eq!(before, ids(&ex.snapshot()));
    }
}
