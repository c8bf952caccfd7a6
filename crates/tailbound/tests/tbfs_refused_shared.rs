//! Writers sharing files, each in a region of its own, while snapshots come and go in a pool
//! kept full: a write refused with `NoSpace` changes nothing in its writer's region, every
//! region reads back as acknowledged, and once the writers are done the snapshots still held
//! are dropped.
//!
//! Ignored: in some runs the final drop is still refused for room, with more buffered at the
//! end than the free space beside the reserve holds (docs/results/soak.md, 2026-12-02
//! 07:35).

mod common;
use common::{data, memory_fs, on_threads, Rng};

use tailbound::tbfs::{Config, Error, Fs, OpenFlags, Ordering};

const FILES: usize = 6;
const REGION: usize = 1 << 20;

fn region_of(fs: &Fs, path: &str, t: usize) -> Vec<u8> {
    let f = fs.open_file(path, OpenFlags::read_only()).unwrap();
    let mut got = vec![0u8; REGION];
    let n = f.pread(&mut got, (t * REGION) as u64).unwrap();
    // Past the end reads nothing; the model holds zeros there.
    got[n..].fill(0);
    got
}

fn writer(fs: &Fs, t: usize, ops: usize) -> (u64, u64, Vec<u64>) {
    let mut rng = Rng(0x5a_4ed + t as u64);
    let mut model = vec![vec![0u8; REGION]; FILES];
    let (mut written, mut refused) = (0, 0);
    let mut snaps = Vec::new();
    for op in 0..ops {
        let k = rng.below(FILES as u64) as usize;
        let path = format!("/f{k}");
        let roll = rng.below(100);
        if t == 0 && roll < 4 {
            if snaps.len() >= 2 {
                let n = snaps.remove(0);
                match fs.set_snapshot(n, false) {
                    Ok(()) => {}
                    Err(Error::NoSpace(_)) => snaps.insert(0, n),
                    Err(e) => panic!("dropping snapshot {n}: {e}"),
                }
            } else {
                match fs.snapshot(None) {
                    Ok(n) => snaps.push(n),
                    Err(Error::NoSpace(_)) => {}
                    Err(e) => panic!("snapshot: {e}"),
                }
            }
            continue;
        }
        let f = fs.open_file(&path, OpenFlags::create()).unwrap();
        if roll < 12 {
            match f.fsync() {
                Ok(()) | Err(Error::NoSpace(_)) => {}
                Err(e) => panic!("fsync {path}: {e}"),
            }
            continue;
        }
        let len = if roll < 60 {
            1 + rng.below(16 << 10) as usize
        } else {
            1 + rng.below(REGION as u64 / 2) as usize
        };
        let at = rng.below((REGION - len) as u64 + 1) as usize;
        let bytes = data(rng.next(), len);
        let direct = roll >= 92;
        match f.pwrite_as(&bytes, (t * REGION + at) as u64, direct) {
            Ok(n) => {
                assert!(n == len || (direct && n > 0), "{path}: {n} of {len}");
                model[k][at..at + n].copy_from_slice(&bytes[..n]);
                written += 1;
            }
            Err(Error::NoSpace(_)) => {
                refused += 1;
                let got = region_of(fs, &path, t);
                if let Some(i) = got.iter().zip(&model[k]).position(|(a, b)| a != b) {
                    panic!(
                        "{path}: region {t} byte {i} reads {:#04x} after op {op}, a refused write \
                         of {at}..{}; acknowledged {:#04x}",
                        got[i],
                        at + len,
                        model[k][i]
                    );
                }
            }
            Err(e) => panic!("write {path}: {e}"),
        }
    }
    for (k, want) in model.iter().enumerate() {
        let got = region_of(fs, &format!("/f{k}"), t);
        assert!(got == *want, "/f{k}: region {t} after the run");
    }
    (written, refused, snaps)
}

fn run(ordering: Ordering) {
    let config = Config {
        ordering,
        dirty_bytes_max: 2 << 20,
        ..Config::memory_pool()
    };
    let fs = memory_fs(28 << 20, config);
    let counts = on_threads(4, |t| writer(&fs, t, 1200));
    let written: u64 = counts.iter().map(|c| c.0).sum();
    let refused: u64 = counts.iter().map(|c| c.1).sum();
    eprintln!("{ordering:?}: {written} writes answered, {refused} refused");
    // With the writers done, the snapshots still held are dropped, and a sync is taken.
    for n in counts.iter().flat_map(|c| &c.2) {
        if let Err(e) = fs.set_snapshot(*n, false) {
            panic!("{ordering:?}: dropping snapshot {n} after the run: {e}");
        }
    }
    fs.sync().unwrap();
    fs.close().unwrap();
}

#[test]
#[ignore = "in some runs the final drop is refused for room: docs/results/soak.md, 2026-12-02"]
fn shared_files_relaxed() {
    run(Ordering::Relaxed);
}

#[test]
#[ignore = "in some runs the final drop is refused for room: docs/results/soak.md, 2026-12-02"]
fn shared_files_strict() {
    run(Ordering::Strict);
}
