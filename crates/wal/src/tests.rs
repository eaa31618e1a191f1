//! Crash tests of the log: torn and corrupt tails, empty files, group commit.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use crate::*;

const HEAD: &[u8] = b"HEAD0001";

/// The payloads of the records in `data` after `start`, and how the scan ended.
fn records(data: &[u8], start: usize) -> (Vec<Vec<u8>>, Recovery) {
    let mut out = Vec::new();
    let r = scan(data, start, |p| {
        out.push(p.to_vec());
        true
    });
    (out, r)
}

fn payload(i: usize) -> Vec<u8> {
    format!("record {i} {}", "x".repeat(i * 7)).into_bytes()
}

/// A log file at `p`: `HEAD` and `n` records, synced. Returns the offset where each
/// record ends.
fn write_log(p: &Path, n: usize, mode: Mode) -> Vec<u64> {
    let log = Log::create(p, HEAD, mode).unwrap();
    let mut ends = Vec::new();
    let mut last = Lsn::default();
    for i in 0..n {
        last = log.append(&payload(i)).unwrap();
        ends.push(log.len());
    }
    log.wait(last).unwrap();
    ends
}

#[test]
fn a_torn_last_record_is_cut_at_every_byte_and_appends_follow_the_valid_prefix() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    let ends = write_log(&p, 3, Mode::WriteThrough);
    let full = fs::read(&p).unwrap();
    assert_eq!(full.len() as u64, ends[2]);
    for cut in ends[1]..ends[2] {
        fs::write(&p, &full[..cut as usize]).unwrap();
        let (got, r) = records(&fs::read(&p).unwrap(), HEAD.len());
        assert_eq!(got, vec![payload(0), payload(1)], "cut at {cut}");
        let want = if cut == ends[1] {
            Tail::Clean
        } else {
            Tail::Torn
        };
        assert_eq!(
            (r.end, r.records, r.tail),
            (ends[1], 2, want),
            "cut at {cut}"
        );
        // Re-open at the valid prefix: the tail goes, the next record follows.
        let log = Log::open(&p, r.end, true, Mode::WriteThrough).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), ends[1]);
        let t = log.append(b"after the tear").unwrap();
        log.wait(t).unwrap();
        drop(log);
        let (got, r) = records(&fs::read(&p).unwrap(), HEAD.len());
        assert_eq!(
            got,
            vec![payload(0), payload(1), b"after the tear".to_vec()],
            "cut at {cut}"
        );
        assert_eq!(r.tail, Tail::Clean);
    }
}

#[test]
fn a_truncated_frame_header_is_a_torn_record() {
    let mut data = HEAD.to_vec();
    frame(&mut data, b"whole");
    let whole = data.len();
    frame(&mut data, b"second");
    for cut in whole + 1..whole + FRAME_HEADER {
        let (got, r) = records(&data[..cut], HEAD.len());
        assert_eq!(got, vec![b"whole".to_vec()]);
        assert_eq!((r.end, r.tail), (whole as u64, Tail::Torn), "cut at {cut}");
    }
    // A start past the end of the data (a header cut short): torn, nothing read.
    let r = scan(&data[..4], HEAD.len(), |_| true);
    assert_eq!(
        (r.end, r.records, r.tail),
        (HEAD.len() as u64, 0, Tail::Torn)
    );
}

#[test]
fn a_corrupt_record_in_the_middle_ends_the_valid_prefix_there() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    let ends = write_log(&p, 5, Mode::Buffered);
    let clean = fs::read(&p).unwrap();
    // A payload byte of record 2, then a checksum byte of it.
    for at in [ends[1] as usize + FRAME_HEADER + 3, ends[1] as usize + 6] {
        let mut data = clean.clone();
        data[at] ^= 0x20;
        let (got, r) = records(&data, HEAD.len());
        assert_eq!(got, vec![payload(0), payload(1)]);
        assert_eq!((r.end, r.tail), (ends[1], Tail::Corrupt));
        // Truncating there and appending: the corrupt record and those after it go.
        fs::write(&p, &data).unwrap();
        let log = Log::open(&p, r.end, true, Mode::Buffered).unwrap();
        let t = log.append(b"new").unwrap();
        log.wait(t).unwrap();
        drop(log);
        let (got, r) = records(&fs::read(&p).unwrap(), HEAD.len());
        assert_eq!(got, vec![payload(0), payload(1), b"new".to_vec()]);
        assert_eq!(r.tail, Tail::Clean);
    }
}

#[test]
fn a_length_past_the_end_is_torn_not_an_allocation() {
    let mut data = HEAD.to_vec();
    data.extend_from_slice(&u32::MAX.to_be_bytes());
    data.extend_from_slice(&[0; 8]);
    let r = scan(&data, HEAD.len(), |_| true);
    assert_eq!((r.end, r.tail), (HEAD.len() as u64, Tail::Torn));
}

#[test]
fn a_zero_length_file_is_an_empty_log() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    fs::write(&p, b"").unwrap();
    let (got, r) = records(&fs::read(&p).unwrap(), 0);
    assert!(got.is_empty());
    assert_eq!((r.end, r.records, r.tail), (0, 0, Tail::Clean));
    let log = Log::open(&p, r.end, true, Mode::WriteThrough).unwrap();
    assert!(log.is_empty());
    let t = log.append(b"first").unwrap();
    log.wait(t).unwrap();
    let (got, _) = records(&fs::read(&p).unwrap(), 0);
    assert_eq!(got, vec![b"first".to_vec()]);
}

#[test]
fn a_refused_record_ends_the_valid_prefix() {
    let mut data = Vec::new();
    for p in [&b"gen1 a"[..], b"gen1 b", b"gen0 stale", b"gen1 after"] {
        frame(&mut data, p);
    }
    let mut seen = 0;
    let r = scan(&data, 0, |p| {
        seen += 1;
        p.starts_with(b"gen1")
    });
    assert_eq!((r.records, r.tail, seen), (2, Tail::Refused, 3));
    assert_eq!(r.end, 2 * framed_len(6) as u64);
}

#[test]
fn without_truncation_the_tail_stays_and_appends_overwrite_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    let ends = write_log(&p, 3, Mode::WriteThrough);
    let log = Log::open(&p, ends[0], false, Mode::WriteThrough).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().len(), ends[2], "tail kept");
    let t = log.append(&payload(1)).unwrap();
    log.wait(t).unwrap();
    assert_eq!(fs::read(&p).unwrap().len() as u64, ends[2]);
}

/// Every waiter returns only after an fsync that covers its record, and concurrent
/// waiters share fsyncs.
#[test]
fn concurrent_waiters_are_acknowledged_only_after_the_fsync_covering_them() {
    for mode in [Mode::WriteThrough, Mode::Buffered] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        let log = Arc::new(Log::create(&p, HEAD, mode).unwrap());
        let synced = Arc::new(AtomicU64::new(0));
        let s = synced.clone();
        *log.sync_hook.lock().unwrap() = Some(Box::new(move |upto| {
            // A slow disk: others append while this sync runs.
            std::thread::sleep(std::time::Duration::from_millis(2));
            s.fetch_max(upto, Ordering::SeqCst);
            Ok(())
        }));
        const THREADS: usize = 8;
        const EACH: usize = 25;
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let log = log.clone();
                let synced = synced.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let lsn = log.append(format!("{t}:{i}").as_bytes()).unwrap();
                        log.wait(lsn).unwrap();
                        assert!(
                            synced.load(Ordering::SeqCst) >= lsn.0,
                            "{mode:?}: acknowledged before an fsync covered it"
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let syncs = log.stats().syncs.load(Ordering::Relaxed);
        let total = (THREADS * EACH) as u64;
        assert_eq!(log.stats().records.load(Ordering::Relaxed), total);
        assert!(
            syncs < total,
            "{mode:?}: {syncs} syncs for {total} records: no group commit"
        );
        drop(log);
        let (got, r) = records(&fs::read(&p).unwrap(), HEAD.len());
        assert_eq!((got.len() as u64, r.tail), (total, Tail::Clean), "{mode:?}");
        for t in 0..THREADS {
            let mine: Vec<_> = got
                .iter()
                .filter_map(|g| {
                    let s = String::from_utf8(g.clone()).unwrap();
                    let (who, i) = s.split_once(':').unwrap();
                    (who == t.to_string()).then(|| i.parse::<usize>().unwrap())
                })
                .collect();
            assert_eq!(mine, (0..EACH).collect::<Vec<_>>(), "{mode:?}: in order");
        }
    }
}

#[test]
fn a_failed_write_of_buffered_records_fails_the_log_for_good() {
    let d = tempfile::tempdir().unwrap();
    let log = Log::create(&d.path().join("log"), HEAD, Mode::Buffered).unwrap();
    *log.sync_hook.lock().unwrap() = Some(Box::new(|_| Err(io::Error::other("disk gone"))));
    let t = log.append(b"a").unwrap();
    // The leader that lost the records learns it at once, as does everyone after.
    assert!(matches!(log.wait(t), Err(LogError::Failed { .. })));
    *log.sync_hook.lock().unwrap() = None;
    assert!(matches!(log.wait(t), Err(LogError::Failed { .. })));
    assert!(matches!(log.append(b"b"), Err(LogError::Failed { .. })));
    assert!(matches!(log.wait(Lsn::NEVER), Err(LogError::Failed { .. })));
}

#[test]
fn a_failed_sync_of_written_records_is_reported_and_retried() {
    let d = tempfile::tempdir().unwrap();
    let log = Log::create(&d.path().join("log"), HEAD, Mode::WriteThrough).unwrap();
    let fail = Arc::new(AtomicU64::new(1));
    let f = fail.clone();
    *log.sync_hook.lock().unwrap() = Some(Box::new(move |_| {
        if f.fetch_sub(1, Ordering::SeqCst) == 1 {
            Err(io::Error::other("transient"))
        } else {
            Ok(())
        }
    }));
    let t = log.append(b"a").unwrap();
    assert!(matches!(log.wait(t), Err(LogError::Io { .. })));
    log.wait(t).unwrap();
    let t = log.append(b"b").unwrap();
    log.wait(t).unwrap();
}

#[test]
fn a_replacement_stands_for_earlier_records_and_later_ones_follow_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    let log = Log::create(&p, HEAD, Mode::Buffered).unwrap();
    let _ = log.append(b"old 1").unwrap();
    let before = log.append(b"old 2").unwrap();
    let mut compacted = HEAD.to_vec();
    frame(&mut compacted, b"live");
    log.replace(compacted);
    let after = log.append(b"new").unwrap();
    log.wait(before).unwrap();
    log.wait(after).unwrap();
    assert_eq!(log.stats().rewrites.load(Ordering::Relaxed), 1);
    let t = log.append(b"newer").unwrap();
    log.wait(t).unwrap();
    let data = fs::read(&p).unwrap();
    assert_eq!(data.len() as u64, log.len());
    assert_eq!(&data[..HEAD.len()], HEAD);
    let (got, r) = records(&data, HEAD.len());
    assert_eq!(
        got,
        vec![b"live".to_vec(), b"new".to_vec(), b"newer".to_vec()]
    );
    assert_eq!(r.tail, Tail::Clean);
}

/// The session store's use: records applied to a model and appended under one lock,
/// the model written as the replacement now and then, while others append and wait.
/// The file ends up holding exactly the model's records.
#[test]
fn replacements_under_concurrent_appends_lose_nothing() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    let log = Arc::new(Log::create(&p, HEAD, Mode::Buffered).unwrap());
    let model = Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (log, model) = (log.clone(), model.clone());
            std::thread::spawn(move || {
                for i in 0..200 {
                    let rec = format!("{t}:{i}").into_bytes();
                    let lsn = {
                        let mut m = model.lock().unwrap();
                        m.push(rec.clone());
                        let lsn = log.append(&rec).unwrap();
                        if i % 37 == t {
                            let mut snap = HEAD.to_vec();
                            for r in m.iter() {
                                frame(&mut snap, r);
                            }
                            log.replace(snap);
                        }
                        lsn
                    };
                    log.wait(lsn).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(log.stats().rewrites.load(Ordering::Relaxed) > 0);
    drop(log);
    let (got, r) = records(&fs::read(&p).unwrap(), HEAD.len());
    assert_eq!(r.tail, Tail::Clean);
    assert_eq!(got, *model.lock().unwrap());
}

#[test]
fn a_restart_writes_the_header_and_appends_after_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    let log = Log::create(&p, HEAD, Mode::WriteThrough).unwrap();
    for i in 0..4 {
        let _ = log.append(&payload(i)).unwrap();
    }
    let before = log.append(b"forgotten").unwrap();
    log.restart(b"HEAD0002").unwrap();
    log.wait(before).unwrap();
    let t = log.append(b"first of 2").unwrap();
    log.wait(t).unwrap();
    let data = fs::read(&p).unwrap();
    assert_eq!(&data[..8], b"HEAD0002");
    let mut got = Vec::new();
    scan(&data, HEAD.len(), |p| {
        got.push(p.to_vec());
        p != payload(1).as_slice()
    });
    // The new record overwrote the first old one; the old ones after it remain (a
    // reader tells them apart by what they carry).
    assert_eq!(got[0], b"first of 2".to_vec());
}

#[test]
fn a_log_in_memory_writes_nothing_and_never_waits() {
    let log = Log::in_memory(20);
    let t = log.append(b"x").unwrap();
    log.wait(t).unwrap();
    assert_eq!(log.len(), 20 + framed_len(1) as u64);
    assert_eq!(log.stats().syncs.load(Ordering::Relaxed), 0);
    log.restart(&[0; 20]).unwrap();
    assert_eq!(log.len(), 20);
}

#[test]
fn the_codec_round_trips_and_refuses_short_input() {
    let mut e = Enc::new();
    e.u8(7)
        .u32(0xdead_beef)
        .u64(u64::MAX - 1)
        .i64(-3)
        .bytes(b"name")
        .fixed(&[1; 16])
        .u32s(&[1, 2, 3]);
    let v = e.into_vec();
    let mut d = Dec::copy_from(&v);
    assert_eq!(d.u8(), Ok(7));
    assert_eq!(d.u32(), Ok(0xdead_beef));
    assert_eq!(d.u64(), Ok(u64::MAX - 1));
    assert_eq!(d.i64(), Ok(-3));
    assert_eq!(d.bytes().as_deref(), Ok(&b"name"[..]));
    assert_eq!(d.fixed::<16>(), Ok([1; 16]));
    assert_eq!(d.u32s(), Ok(vec![1, 2, 3]));
    assert_eq!(d.remaining(), 0);
    for cut in 0..v.len() {
        let mut d = Dec::copy_from(&v[..cut]);
        let r = (|| -> Result<(), DecodeError> {
            d.u8()?;
            d.u32()?;
            d.u64()?;
            d.i64()?;
            d.bytes()?;
            d.fixed::<16>()?;
            d.u32s()?;
            Ok(())
        })();
        assert!(matches!(r, Err(DecodeError::Truncated { .. })), "cut {cut}");
    }
    // A count larger than the bytes present is refused before anything is allocated.
    let mut d = Dec::copy_from(&u32::MAX.to_be_bytes());
    assert!(d.u32s().is_err());
}

proptest! {
    /// Cut anywhere, the scan returns exactly the records wholly before the cut, and
    /// a log re-opened there continues cleanly.
    #[test]
    fn the_scan_returns_exactly_the_records_before_a_cut(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..12),
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut data = HEAD.to_vec();
        let mut ends = Vec::new();
        for p in &payloads {
            frame(&mut data, p);
            ends.push(data.len());
        }
        let cut = HEAD.len() + cut.index(data.len() - HEAD.len() + 1);
        let (got, r) = records(&data[..cut], HEAD.len());
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        prop_assert_eq!(&got[..], &payloads[..whole]);
        let valid = if whole == 0 { HEAD.len() } else { ends[whole - 1] };
        prop_assert_eq!(r.end, valid as u64);
        prop_assert_eq!(r.tail == Tail::Clean, valid == cut);
    }

    /// Flipping any one bit after the header: the records before the damaged one
    /// stand, and the scan stops at it.
    #[test]
    fn a_flipped_bit_stops_the_scan_at_the_damaged_record(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..32), 1..8),
        at in any::<proptest::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut data = HEAD.to_vec();
        let mut starts = Vec::new();
        for p in &payloads {
            starts.push(data.len());
            frame(&mut data, p);
        }
        let at = HEAD.len() + at.index(data.len() - HEAD.len());
        data[at] ^= 1 << bit;
        let (got, r) = records(&data, HEAD.len());
        let hit = starts.iter().filter(|&&s| s <= at).count() - 1;
        prop_assert_eq!(&got[..], &payloads[..hit]);
        prop_assert_eq!(r.end, starts[hit] as u64);
        prop_assert!(matches!(r.tail, Tail::Corrupt | Tail::Torn));
    }

    /// Any bytes at all: no panic, and the valid prefix lies within the data.
    #[test]
    fn the_scan_survives_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..256), start in 0usize..300) {
        let r = scan(&data, start, |_| true);
        prop_assert!(r.end as usize >= start);
        prop_assert!(r.end as usize <= data.len().max(start));
    }
}
