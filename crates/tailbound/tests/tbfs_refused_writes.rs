//! A write the pool refuses with `NoSpace` changed nothing: the file's size and every byte of
//! it read back as before the call, whichever ordering, with writers, syncs, truncates and
//! deletes beside it in a pool kept near full. A direct write may be short: then exactly the
//! bytes it answered are in the file.

mod common;
use common::{data, memory_fs, on_threads, Rng};

use tailbound::tbfs::{Config, Error, Fs, OpenFlags, Ordering};

/// One file a thread owns and what it must read back.
struct Owned {
    path: String,
    bytes: Vec<u8>,
}

/// What a thread did: writes answered, writes refused (each checked unchanged).
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    written: u64,
    refused: u64,
    short: u64,
}

fn check(fs: &Fs, file: &Owned, what: &str) {
    let f = fs.open_file(&file.path, OpenFlags::read_only()).unwrap();
    let size = f.stat().unwrap().size as usize;
    assert_eq!(
        size,
        file.bytes.len(),
        "{}: size after {what} differs from every acknowledged write's",
        file.path
    );
    let mut got = vec![0u8; size];
    assert_eq!(f.pread(&mut got, 0).unwrap(), size);
    if let Some(at) = got.iter().zip(&file.bytes).position(|(a, b)| a != b) {
        panic!(
            "{}: byte {at} reads {:#04x} after {what}, acknowledged {:#04x}",
            file.path, got[at], file.bytes[at]
        );
    }
}

/// A write's length: mostly small, some as large as the buffer's write-behind and beyond.
fn write_len(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=5 => 1 + rng.below(16 << 10) as usize,
        6..=8 => (16 << 10) + rng.below(240 << 10) as usize,
        _ => (256 << 10) + rng.below(1792 << 10) as usize,
    }
}

fn writer(fs: &Fs, t: u64, ops: usize) -> Tally {
    let mut rng = Rng(0x5e_f05e + t);
    let mut files: Vec<Owned> = Vec::new();
    let mut tally = Tally::default();
    let mut made = 0;
    for op in 0..ops {
        let roll = rng.below(100);
        if files.is_empty() || (roll < 8 && files.len() < 12) {
            made += 1;
            let path = format!("/t{t}/f{made}");
            match fs.open_file(&path, OpenFlags::create()) {
                Ok(_) => files.push(Owned {
                    path,
                    bytes: Vec::new(),
                }),
                Err(Error::NoSpace(_)) => {}
                Err(e) => panic!("create {path}: {e}"),
            }
            continue;
        }
        let k = rng.below(files.len() as u64) as usize;
        if roll < 14 {
            // Deletes keep the pool near full rather than past it.
            let gone = files.swap_remove(k);
            match fs.unlink(&gone.path) {
                Ok(()) => {}
                Err(e) => panic!("unlink {}: {e}", gone.path),
            }
            continue;
        }
        let file = &mut files[k];
        if roll < 18 {
            let len = rng.below(file.bytes.len() as u64 + 1) as usize;
            match fs.truncate(&file.path, len as u64) {
                Ok(()) => file.bytes.truncate(len),
                Err(e) => panic!("truncate {} to {len}: {e}", file.path),
            }
            continue;
        }
        let f = fs.open_file(&file.path, OpenFlags::create()).unwrap();
        if roll < 24 {
            match f.fsync() {
                Ok(()) | Err(Error::NoSpace(_)) => {}
                Err(e) => panic!("fsync {}: {e}", file.path),
            }
            continue;
        }
        let len = write_len(&mut rng);
        let bytes = data(rng.next(), len);
        let append = roll < 50;
        let offset = if append {
            file.bytes.len()
        } else {
            rng.below(file.bytes.len() as u64 + (64 << 10)) as usize
        };
        // Some writes are direct (`O_DIRECT`): those go out in pieces, and one that runs out of
        // room after its first piece is a short write.
        let direct = !append && roll < 32;
        let r = if append {
            f.append(&bytes).map(|end| {
                assert_eq!(end as usize, offset + len, "{}: append's end", file.path);
                len
            })
        } else {
            f.pwrite_as(&bytes, offset as u64, direct)
        };
        match r {
            Ok(n) => {
                assert!(
                    n == len || (direct && n > 0 && n < len),
                    "{}: a write of {len} bytes (direct: {direct}) answered {n}",
                    file.path
                );
                if file.bytes.len() < offset + n {
                    file.bytes.resize(offset + n, 0);
                }
                file.bytes[offset..offset + n].copy_from_slice(&bytes[..n]);
                if n < len {
                    tally.short += 1;
                    check(fs, file, &format!("op {op}: a short direct write"));
                }
                tally.written += 1;
            }
            Err(Error::NoSpace(_)) => {
                tally.refused += 1;
                let what = format!("op {op}: a refused write of {offset}..{}", offset + len);
                check(fs, file, &what);
            }
            Err(e) => panic!("write {}: {e}", file.path),
        }
    }
    for file in &files {
        check(fs, file, "the run");
    }
    // The pool stays usable: deletes are taken, and once they emptied it a sync is too.
    for file in &files {
        if let Err(e) = fs.unlink(&file.path) {
            panic!("unlink {} after the run: {e}", file.path);
        }
    }
    tally
}

/// Runs the writers in a fresh pool and returns it with every file deleted.
fn run(ordering: Ordering, background_gc: bool) -> Fs {
    let config = Config {
        ordering,
        background_gc,
        dirty_bytes_max: 2 << 20,
        ..Config::memory_pool()
    };
    let fs = memory_fs(32 << 20, config);
    let threads = 3;
    for t in 0..threads {
        fs.mkdir(&format!("/t{t}"), 0o755).unwrap();
    }
    let tallies = on_threads(threads as usize, |t| writer(&fs, t as u64, 1500));
    let refused: u64 = tallies.iter().map(|t| t.refused).sum();
    let written: u64 = tallies.iter().map(|t| t.written).sum();
    let short: u64 = tallies.iter().map(|t| t.short).sum();
    eprintln!("{ordering:?}: {written} writes answered ({short} short), {refused} refused");
    // The pool was full often enough for refusals to be what was checked.
    assert!(
        refused >= 20 && written >= 100,
        "{ordering:?}: {written} writes answered, {refused} refused"
    );
    fs
}

/// The pool, emptied, takes a sync and closes.
fn sync_and_close(fs: Fs) {
    if let Err(e) = fs.sync() {
        panic!(
            "sync after every file was deleted: {e}\ncensus {:?}\ncounters {:?}",
            fs.space_census(),
            fs.counters()
        );
    }
    fs.close().unwrap();
}

#[test]
fn refused_writes_change_nothing_in_relaxed_ordering() {
    sync_and_close(run(Ordering::Relaxed, true));
}

#[test]
fn refused_writes_change_nothing_in_strict_ordering() {
    sync_and_close(run(Ordering::Strict, true));
}

#[test]
fn refused_writes_change_nothing_without_the_background_cleaner() {
    // The emptied pool's sync is the ignored test below's: its refusal is a known defect.
    let fs = run(Ordering::Relaxed, false);
    let _ = fs.close();
}

/// Without the background cleaner, the pool emptied after the run sometimes refuses its sync:
/// every segment waits for a checkpoint to be reused, and there is no room for that checkpoint
/// (about one run in 25; docs/results/soak.md, 2026-12-02).
#[test]
#[ignore = "an emptied pool without the background cleaner may refuse its sync: docs/results/soak.md, 2026-12-02"]
fn the_emptied_pool_without_the_background_cleaner_syncs() {
    sync_and_close(run(Ordering::Relaxed, false));
}

/// A direct write goes out in pieces; as room comes back a block at a time, one whose first
/// piece fits and whose next does not answers a short write, and exactly its bytes are in the
/// file; one refused whole leaves the file empty.
#[test]
fn a_direct_write_short_of_room_is_short_and_exact() {
    let config = Config {
        background_gc: false,
        ..Config::memory_pool()
    };
    let fs = memory_fs(24 << 20, config);
    // Small synced files until the pool refuses one.
    let mut small = Vec::new();
    for i in 0.. {
        let path = format!("/s{i}");
        let bytes = data(i, 64 << 10);
        let f = match fs.open_file(&path, OpenFlags::create()) {
            Ok(f) => f,
            Err(Error::NoSpace(_)) => break,
            Err(e) => panic!("create {path}: {e}"),
        };
        if f.pwrite(&bytes, 0).and_then(|_| f.fsync()).is_err() {
            drop(f);
            fs.unlink(&path).unwrap();
            break;
        }
        small.push(path);
    }
    let want = data(7, 3 << 20);
    let mut answers = Vec::new();
    for path in small.iter().rev() {
        fs.unlink(path).unwrap();
        let f = fs.open_file("/d", OpenFlags::create()).unwrap();
        match f.pwrite_as(&want, 0, true) {
            Ok(n) => {
                answers.push(n);
                assert_eq!(
                    f.stat().unwrap().size,
                    n as u64,
                    "after a direct write of {n}"
                );
                let mut got = vec![0u8; n];
                assert_eq!(f.pread(&mut got, 0).unwrap(), n);
                assert!(
                    got == want[..n],
                    "a direct write answered {n}: its bytes differ"
                );
                if n == want.len() {
                    break;
                }
            }
            Err(Error::NoSpace(_)) => {
                assert_eq!(
                    f.stat().unwrap().size,
                    0,
                    "a refused direct write grew the file"
                );
            }
            Err(e) => panic!("direct write: {e}"),
        }
        drop(f);
        fs.unlink("/d").unwrap();
    }
    eprintln!("direct writes of 3 MiB answered, as room came back: {answers:?}");
    assert!(
        answers.iter().any(|&n| n > 0 && n < want.len()),
        "no short direct write met as room came back (answers: {answers:?})"
    );
    fs.close().unwrap();
}
