//! The output log against its promises: order, gaps, budgets, restarts and damage.

use super::*;

fn read_all(log: &OutputLog, from: u64) -> (Vec<Piece>, u64) {
    let mut c = Cursor::at(from);
    let mut out = Vec::new();
    loop {
        match log.read(&mut c, 1 << 20).unwrap() {
            Piece::End => return (out, c.at),
            p => out.push(p),
        }
    }
}

fn joined(pieces: &[Piece]) -> Vec<(Stream, u8)> {
    let mut out = Vec::new();
    for p in pieces {
        if let Piece::Data { stream, bytes, .. } = p {
            out.extend(bytes.iter().map(|b| (*stream, *b)));
        }
    }
    out
}

#[test]
fn reads_both_streams_in_order_from_any_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), 1 << 20).unwrap();
    log.append(Stream::Stdout, b"hello ").unwrap();
    log.append(Stream::Stderr, b"oops").unwrap();
    log.append(Stream::Stdout, b"world").unwrap();
    assert_eq!((log.start(), log.end()), (0, 15));
    let (pieces, at) = read_all(&log, 0);
    assert_eq!(at, 15);
    assert_eq!(
        pieces[1],
        Piece::Data {
            offset: 6,
            stream: Stream::Stderr,
            bytes: b"oops".to_vec()
        }
    );
    // From the middle of a record.
    let (pieces, _) = read_all(&log, 8);
    assert_eq!(
        pieces[0],
        Piece::Data {
            offset: 8,
            stream: Stream::Stderr,
            bytes: b"ps".to_vec()
        }
    );
    assert_eq!(read_all(&log, 15).0, vec![]);
}

#[test]
fn records_of_one_stream_are_read_as_one_piece_up_to_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), 1 << 20).unwrap();
    for i in 0..10u8 {
        log.append(Stream::Stdout, &[i; 100]).unwrap();
    }
    log.append(Stream::Stderr, b"err").unwrap();
    log.append(Stream::Stdout, b"out").unwrap();
    let mut c = Cursor::at(50);
    let Piece::Data {
        offset,
        stream,
        bytes,
    } = log.read(&mut c, 400).unwrap()
    else {
        panic!("no data");
    };
    assert_eq!((offset, stream, bytes.len()), (50, Stream::Stdout, 400));
    assert_eq!(&bytes[..50], &[0u8; 50][..]);
    assert_eq!(&bytes[350..], &[4u8; 50][..]);
    // The rest of stdout stops at the stderr record, then each stream comes on its own.
    let Piece::Data { offset, bytes, .. } = log.read(&mut c, 1 << 20).unwrap() else {
        panic!("no data");
    };
    assert_eq!((offset, bytes.len()), (450, 550));
    assert_eq!(
        log.read(&mut c, 1 << 20).unwrap(),
        Piece::Data {
            offset: 1000,
            stream: Stream::Stderr,
            bytes: b"err".to_vec()
        }
    );
    assert_eq!(
        log.read(&mut c, 1 << 20).unwrap(),
        Piece::Data {
            offset: 1003,
            stream: Stream::Stdout,
            bytes: b"out".to_vec()
        }
    );
    assert_eq!(log.read(&mut c, 1 << 20).unwrap(), Piece::End);
}

#[test]
fn a_small_budget_drops_the_oldest_and_readers_get_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), MIN_SEGMENT).unwrap();
    let chunk = vec![7u8; 4000];
    for _ in 0..100 {
        log.append(Stream::Stdout, &chunk).unwrap();
    }
    assert_eq!(log.end(), 400_000);
    assert!(log.start() > 0, "nothing was dropped");
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(on_disk <= 2 * MIN_SEGMENT + 8000, "{on_disk} bytes kept");
    let (pieces, at) = read_all(&log, 10);
    assert_eq!(
        pieces[0],
        Piece::Gap {
            from: 10,
            to: log.start()
        }
    );
    assert_eq!(at, 400_000);
    assert_eq!(joined(&pieces).len() as u64, 400_000 - log.start());
}

#[test]
fn a_reader_keeps_its_open_segment_after_it_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), MIN_SEGMENT).unwrap();
    let mut all = Vec::new();
    // Within the budget: nothing has left yet when the reader starts.
    for i in 0..5u8 {
        let chunk = vec![i; 3000];
        log.append(Stream::Stdout, &chunk).unwrap();
        all.extend_from_slice(&chunk);
    }
    assert_eq!(log.start(), 0);
    let mut c = Cursor::at(0);
    let mut got = Vec::new();
    match log.read(&mut c, 100).unwrap() {
        Piece::Data { bytes, .. } => got.extend(bytes),
        other => panic!("{other:?}"),
    }
    // The writer moves on far enough to drop the segment the reader is in.
    for i in 5..40u8 {
        let chunk = vec![i; 3000];
        log.append(Stream::Stdout, &chunk).unwrap();
        all.extend_from_slice(&chunk);
    }
    assert!(log.start() > c.at);
    // The next read is a gap, never a wrong byte.
    match log.read(&mut c, 100).unwrap() {
        Piece::Gap { from, to } => assert_eq!((from, to), (100, log.start())),
        other => panic!("{other:?}"),
    }
    let (pieces, _) = read_all(&log, c.at);
    let rest: Vec<u8> = joined(&pieces).into_iter().map(|(_, b)| b).collect();
    assert_eq!(rest, all[c.at as usize..]);
    assert_eq!(got, all[..100]);
}

#[test]
fn a_log_left_behind_reads_the_same_and_stops_at_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), MIN_SEGMENT * 8).unwrap();
    for i in 0..20u8 {
        log.append(
            if i % 3 == 0 {
                Stream::Stderr
            } else {
                Stream::Stdout
            },
            &vec![i; 5000],
        )
        .unwrap();
    }
    let (before, _) = read_all(&log, 0);
    let end = log.end();
    drop(log);
    let again = OutputLog::open_finished(dir.path(), MIN_SEGMENT * 8);
    assert_eq!(again.end(), end);
    assert_eq!(read_all(&again, 0).0, before);
    // A crash mid-write leaves half a record at the end: it is not read.
    let last = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap();
    f.write_all(&[1, 100, 0, 0, 0, b'x']).unwrap();
    std::fs::write(dir.path().join("junk.seg"), b"not a segment").unwrap();
    let again = OutputLog::open_finished(dir.path(), MIN_SEGMENT * 8);
    assert_eq!(again.end(), end);
    // A record header claiming more than the limit stops the scan there.
    std::fs::write(&last, [1u8, 255, 255, 255, 255]).unwrap();
    let again = OutputLog::open_finished(dir.path(), MIN_SEGMENT * 8);
    assert!(again.end() < end);
}

#[test]
fn bytes_that_could_not_be_kept_read_as_a_gap_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), 1 << 20).unwrap();
    log.append(Stream::Stdout, b"before").unwrap();
    log.skip(10);
    log.append(Stream::Stderr, b"after").unwrap();
    log.skip(3);
    assert_eq!(log.end(), 24);
    let expect = vec![
        Piece::Data {
            offset: 0,
            stream: Stream::Stdout,
            bytes: b"before".to_vec(),
        },
        Piece::Gap { from: 6, to: 16 },
        Piece::Data {
            offset: 16,
            stream: Stream::Stderr,
            bytes: b"after".to_vec(),
        },
        Piece::Gap { from: 21, to: 24 },
    ];
    assert_eq!(read_all(&log, 0), (expect, 24));
    drop(log);
    let again = OutputLog::open_finished(dir.path(), 1 << 20);
    // The lost bytes at the very end left no trace on disk; the hole between is kept.
    let (pieces, end) = read_all(&again, 0);
    assert_eq!(end, 21);
    assert_eq!(pieces[1], Piece::Gap { from: 6, to: 16 });
    let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn matches_a_plain_model_under_random_appends_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = OutputLog::create(dir.path(), MIN_SEGMENT * 2).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut all: Vec<(Stream, u8)> = Vec::new();
    for _ in 0..400 {
        let n = (next() % 3000) as usize;
        let stream = if next() % 2 == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        let chunk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
        log.append(stream, &chunk).unwrap();
        all.extend(chunk.iter().map(|b| (stream, *b)));
        let from = next() % (log.end() + 1);
        let mut c = Cursor::at(from);
        let mut got = Vec::new();
        let mut first = true;
        loop {
            match log.read(&mut c, (next() % 5000 + 1) as usize).unwrap() {
                Piece::End => break,
                Piece::Gap { from: f, to } => {
                    assert!(first && f == from && to == log.start());
                }
                Piece::Data {
                    offset,
                    stream,
                    bytes,
                } => {
                    assert_eq!(offset, c.at - bytes.len() as u64);
                    got.extend(bytes.iter().map(|b| (stream, *b)));
                }
            }
            first = false;
        }
        let begin = from.max(log.start()) as usize;
        assert_eq!(got, all[begin..]);
    }
}
