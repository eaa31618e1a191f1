//! Filebench-style personalities (seed 001 §6), scaled, with requests as a
//! client without delegations sends them.
//!
//! * fileserver: 10,000 files of ~128 KB; per iteration: create + write a
//!   new file (OPEN, WRITE, COMMIT, CLOSE), append 16 KB to an existing file
//!   (OPEN, WRITE, COMMIT, CLOSE), read an existing file whole (OPEN, READ,
//!   CLOSE), delete the new file (REMOVE), stat an existing file (LOOKUP +
//!   GETATTR).
//! * webserver: 1,000 files of ~16 KB; per iteration: read 10 random files
//!   whole, then append 16 KB to one log file shared by all threads.
//! * mailserver: 1,000 files of ~16 KB in a flat directory; per iteration:
//!   compose (create, write 16 KB, fsync = COMMIT, close), receive (open,
//!   read, append 16 KB, fsync, close), read (open, read, close), delete.

use super::common::{self, Open};
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use crate::XorShift;
use bytes::Bytes;
use txnfs_proto::nfs4::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_WRITE};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    FileServer,
    WebServer,
    MailServer,
}

pub struct Filebench {
    pub kind: Personality,
    pub files: u64,
    pub mean_size: u64,
    pub append: u64,
}

const LOG: &str = "weblog";

impl Filebench {
    pub fn new(kind: Personality, p: &Params) -> anyhow::Result<Filebench> {
        let (files, size) = match kind {
            Personality::FileServer => (10_000, 128 << 10),
            Personality::WebServer | Personality::MailServer => (1000, 16 << 10),
        };
        Ok(Filebench {
            kind,
            files: p.files_or(files),
            mean_size: p.file_size.unwrap_or(size),
            append: p.get_u64("append", 16 << 10)?,
        })
    }

    fn size_of(&self, i: u64) -> u64 {
        common::size_around(&mut XorShift::new(i + 1), self.mean_size)
    }
}

/// Append `data` at the end of `name`: OPEN (its GETATTR gives the size),
/// WRITE, COMMIT (fsync / close-to-open flush), CLOSE.
async fn append(w: &mut Worker, dir: &Bytes, name: &str, data: &Bytes) -> anyhow::Result<()> {
    let f: Open = common::open(w, dir, name, OPEN4_SHARE_ACCESS_WRITE, false, false).await?;
    let end = f.size;
    common::write(w, &f, end, data, false).await?;
    common::commit(w, &f).await?;
    common::close(w, f).await
}

impl Workload for Filebench {
    fn name(&self) -> &str {
        match self.kind {
            Personality::FileServer => "fileserver",
            Personality::WebServer => "webserver",
            Personality::MailServer => "mailserver",
        }
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "mean_file_size": self.mean_size,
                           "append_size": self.append})
    }
    fn default_ops(&self) -> u64 {
        match self.kind {
            Personality::FileServer => self.files / 10,
            _ => self.files,
        }
        .max(1)
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let mut files: Vec<(String, u64)> = (0..self.files)
                .map(|i| (format!("f{i}"), self.size_of(i)))
                .collect();
            if self.kind == Personality::WebServer {
                files.push((LOG.to_string(), 0));
            }
            common::create_files(s, &s.base_fh, &files).await
        })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let dir = w.base_fh.clone();
            let mut rng = XorShift::new(w.global_idx() as u64 + 101);
            let add = Bytes::from(crate::pattern(3, self.append as usize));
            let new_data = Bytes::from(crate::pattern(4, self.mean_size as usize));
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let mut pick = || format!("f{}", rng.next_u64() % self.files);
                match self.kind {
                    Personality::FileServer => {
                        let new = format!("n{i}");
                        common::write_file(w, &dir, &new, &new_data, false).await?;
                        let (a, r, st) = (pick(), pick(), pick());
                        append(w, &dir, &a, &add).await?;
                        let n = common::read_file(w, &dir, &r).await?;
                        w.count("read_bytes", n);
                        common::remove(w, &dir, &new).await?;
                        common::stat(w, &dir, &st).await?;
                    }
                    Personality::WebServer => {
                        for _ in 0..10 {
                            let r = pick();
                            let n = common::read_file(w, &dir, &r).await?;
                            w.count("read_bytes", n);
                        }
                        append(w, &dir, LOG, &add).await?;
                    }
                    Personality::MailServer => {
                        let new = format!("m{i}");
                        common::write_file(w, &dir, &new, &add, false).await?;
                        let (recv, read) = (pick(), pick());
                        let f = common::open(w, &dir, &recv, OPEN4_SHARE_ACCESS_BOTH, false, false)
                            .await?;
                        let n = common::read_whole(w, &f).await?;
                        common::write(w, &f, f.size, &add, false).await?;
                        common::commit(w, &f).await?;
                        common::close(w, f).await?;
                        let m = common::read_file(w, &dir, &read).await?;
                        w.count("read_bytes", n + m);
                        common::remove(w, &dir, &new).await?;
                    }
                }
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let (opens, removes, commits, stats, writes) = match self.kind {
            Personality::FileServer => (3, 1, 2, 1, 2),
            Personality::WebServer => (11, 0, 1, 0, 1),
            Personality::MailServer => (3, 1, 2, 0, 2),
        };
        let per_iteration = [
            ("WRITE", s.ops("WRITE"), writes),
            ("OPEN", s.ops("OPEN"), opens),
            ("CLOSE", s.ops("CLOSE"), opens),
            ("REMOVE", s.ops("REMOVE"), removes),
            ("COMMIT", s.ops("COMMIT"), commits),
            ("stat requests (LOOKUP)", s.requests("LOOKUP"), stats),
        ];
        let mut v: Vec<Expectation> = per_iteration
            .into_iter()
            .map(|(what, actual, n)| {
                Expectation::eq(format!("{what} == {n} × iterations"), actual, n * it)
            })
            .collect();
        let reads_min = match self.kind {
            Personality::FileServer => 1,
            Personality::WebServer => 10,
            Personality::MailServer => 2,
        };
        // A file read whole takes one READ per MiB (none when empty).
        v.push(Expectation::le(
            format!("READ <= {reads_min} × iterations (files < 1 MiB)"),
            s.ops("READ"),
            reads_min * it,
        ));
        v.push(Expectation::eq(
            "READ bytes == bytes of the files read",
            s.rec.requests.get("READ").map(|r| r.bytes).unwrap_or(0),
            s.counter("read_bytes"),
        ));
        v
    }
}
