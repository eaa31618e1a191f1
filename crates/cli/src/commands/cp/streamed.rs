//! One large file copied chunk by chunk, keeping the holes of a sparse file.

use bytes::Bytes;
use std::io::{Read, Seek, SeekFrom, Write};

use super::*;
use crate::commands::stream::{RemoteReader, RemoteWriter};
use crate::commands::{describe, describe_io};

/// A chunk cut into 64 KiB pieces, each marked true where it is all zeros (a hole to
/// keep); a file that is not sparse is one data piece.
fn pieces(chunk: &Bytes, sparse: bool) -> Vec<(Bytes, bool)> {
    const BLOCK: usize = 64 << 10;
    if !sparse {
        return vec![(chunk.clone(), false)];
    }
    let mut out: Vec<(Bytes, bool)> = Vec::new();
    let mut at = 0;
    while at < chunk.len() {
        let end = (at + BLOCK).min(chunk.len());
        let hole = chunk[at..end].iter().all(|&b| b == 0);
        match out.last_mut() {
            // Neighbours of one kind go as one piece.
            Some((p, h)) if *h == hole => *p = chunk.slice(at - p.len()..end),
            _ => out.push((chunk.slice(at..end), hole)),
        }
        at = end;
    }
    out
}

impl Copier {
    /// Copy one large file chunk by chunk.
    pub(super) async fn stream(
        &mut self,
        ctx: &mut Ctx,
        it: &Item,
        idx: usize,
    ) -> anyhow::Result<()> {
        enum Src {
            Local(std::fs::File),
            Remote(RemoteReader),
        }
        enum Dst {
            Local(std::fs::File),
            Remote(RemoteWriter),
        }
        let src = match &it.src {
            End::Local(p) => match std::fs::File::open(p) {
                Ok(f) => Src::Local(f),
                Err(e) => {
                    self.fail_io(
                        ctx,
                        format!("cannot open '{}' for reading", p.display()),
                        &e,
                    );
                    return Ok(());
                }
            },
            End::Remote(u) => {
                let fs = ctx.fs(&u.server()).await?;
                match RemoteReader::open(fs.client(), &u.path).await {
                    Ok(r) => Src::Remote(r),
                    Err(e) => {
                        self.fail_nfs(ctx, format!("cannot open '{}' for reading", u.display), &e);
                        return Ok(());
                    }
                }
            }
        };
        let dst = match &it.dst {
            End::Local(p) => std::fs::File::create(p)
                .map(Dst::Local)
                .map_err(|e| describe_io(&e)),
            End::Remote(u) => {
                let fs = ctx.fs(&u.server()).await?;
                RemoteWriter::create(fs.client(), &u.path, FILE_MODE)
                    .await
                    .map(Dst::Remote)
                    .map_err(|e| describe(&e))
            }
        };
        let mut src = src;
        let mut dst = match dst {
            Ok(d) => d,
            Err(why) => {
                if let Src::Remote(r) = src {
                    let _ = r.close().await;
                }
                self.progress.interrupt();
                ctx.fail(
                    format!("cannot create regular file '{}'", it.dst.display()),
                    why,
                );
                return Ok(());
            }
        };
        let mut buf = vec![0u8; 1 << 20];
        // (what failed, why)
        let mut failure: Option<(String, String)> = None;
        loop {
            let chunk: Bytes = match &mut src {
                Src::Local(f) => match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => Bytes::copy_from_slice(&buf[..n]),
                    Err(e) => {
                        failure = Some((
                            format!("error reading '{}'", it.src.display()),
                            describe_io(&e),
                        ));
                        break;
                    }
                },
                Src::Remote(r) => match r.next().await {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    Err(e) => {
                        failure = Some((
                            format!("error reading '{}'", it.src.display()),
                            describe(&e),
                        ));
                        break;
                    }
                },
            };
            // A sparse file's zero blocks become holes: skipped, not written.
            let mut w = Ok(());
            for (piece, hole) in pieces(&chunk, it.sparse) {
                w = match (&mut dst, hole) {
                    (Dst::Local(f), true) => f
                        .seek(SeekFrom::Current(piece.len() as i64))
                        .map(|_| ())
                        .map_err(|e| describe_io(&e)),
                    (Dst::Local(f), false) => f.write_all(&piece).map_err(|e| describe_io(&e)),
                    (Dst::Remote(w), true) => {
                        w.skip(piece.len() as u64).await.map_err(|e| describe(&e))
                    }
                    (Dst::Remote(w), false) => w.write(&piece).await.map_err(|e| describe(&e)),
                };
                if w.is_err() {
                    break;
                }
            }
            if let Err(why) = w {
                failure = Some((format!("error writing '{}'", it.dst.display()), why));
                break;
            }
            self.progress.add_bytes(chunk.len() as u64);
        }
        if let Src::Remote(r) = src {
            let _ = r.close().await;
        }
        let fin = match dst {
            // A file ending in a hole gets its size.
            Dst::Local(mut f) => f
                .stream_position()
                .and_then(|end| f.set_len(end))
                .and_then(|()| f.sync_all())
                .map_err(|e| describe_io(&e)),
            Dst::Remote(w) => {
                if failure.is_some() {
                    w.abort().await;
                    Ok(())
                } else {
                    w.finish().await.map_err(|e| describe(&e))
                }
            }
        };
        if let (None, Err(why)) = (&failure, fin) {
            failure = Some((format!("error writing '{}'", it.dst.display()), why));
        }
        match failure {
            Some((what, why)) => {
                self.progress.interrupt();
                ctx.fail(what, why);
            }
            None => {
                self.done.push(idx);
                self.progress.add_files(1);
            }
        }
        Ok(())
    }
}
