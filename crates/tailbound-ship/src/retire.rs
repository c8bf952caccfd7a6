//! Retiring a shipped recycled file: handing it back to its pool once the broker holds all of it.
//!
//! The order is what makes it safe against a crash at any point:
//!
//! 1. the ledger says every record was acknowledged (checked, never assumed);
//! 2. the ledger is rewritten, atomically and durably, in state *retired*;
//! 3. the file is renamed into the pool (and the rename made durable);
//! 4. the ledger is removed.
//!
//! A crash after 2 leaves a retired ledger beside the file: the shipper sends nothing for it and
//! `retire` goes on at 3. A crash after 3 leaves a retired ledger with no file: `retire` removes
//! it. No crash leaves a file that would be shipped again, nor a ledger that asks for a file that
//! is gone (the restart loop of shippers that unlink first and update their ledger after).

use std::path::Path;

use tailbound::record::RecyclePool;

use crate::key::check_recorder_id;
use crate::ledger::{dest_hash, ledger_path, sync_dir_of, Ledger, LedgerState};
use crate::source::{FrameReader, Next};
use crate::{io_err, KafkaUrl, ShipError};

/// The failpoint between the ledger's retired state and the rename ([`tailbound::failpoint`]).
pub const FAILPOINT_AFTER_LEDGER: &str = "ship.retire.after-ledger";
/// The failpoint between the rename and the ledger's removal.
pub const FAILPOINT_AFTER_RENAME: &str = "ship.retire.after-rename";

/// What [`retire`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// The file went back to the pool now.
    Now,
    /// An earlier, interrupted retire had already moved the file: only its ledger was left.
    Earlier,
}

/// Hands `recording` back to `pool` once its ledger for `url` and `recorder` shows every valid
/// record acknowledged; an error (and nothing changed) otherwise.
pub fn retire(
    recording: &Path,
    pool: &RecyclePool,
    url: &KafkaUrl,
    recorder: &str,
) -> Result<Retired, ShipError> {
    check_recorder_id(recorder).map_err(ShipError::Usage)?;
    let lpath = ledger_path(recording);
    let ledger = Ledger::load(&lpath)?;
    let dest = dest_hash(&url.topic, recorder);
    if !recording.exists() {
        return match ledger {
            Some(l) if l.state == LedgerState::Retired => {
                remove_ledger(&lpath)?;
                Ok(Retired::Earlier)
            }
            _ => Err(ShipError::Recording {
                path: recording.to_path_buf(),
                reason: "no such recording, and no retired ledger for it".into(),
            }),
        };
    }
    let mut reader = FrameReader::open(recording)?;
    let stream = reader.stream(recorder);
    let mut ledger = match ledger {
        Some(l) if l.is_for(&stream, dest) => l,
        _ => {
            return Err(ShipError::Recording {
                path: recording.to_path_buf(),
                reason: format!("not shipped to {url} as {recorder} (no ledger for it)"),
            })
        }
    };
    if ledger.state == LedgerState::Shipping {
        let len = reader.file_len()?;
        let mut scratch = Vec::new();
        while reader.next(len, &mut scratch)? == Next::Frame {
            scratch.clear();
        }
        let records = reader.index();
        if !reader.finished() || ledger.next_index < records {
            return Err(ShipError::Recording {
                path: recording.to_path_buf(),
                reason: format!(
                    "not retired: the broker acknowledged {} of its {records} records{}",
                    ledger.next_index,
                    if reader.finished() {
                        ""
                    } else {
                        " and it has no trailer yet"
                    }
                ),
            });
        }
        ledger.state = LedgerState::Retired;
        ledger.store(&lpath)?;
    }
    tailbound::failpoint::hit(FAILPOINT_AFTER_LEDGER);
    pool.give_back(recording)?;
    sync_dir_of(recording)?;
    sync_dir_of(&pool.dir().join("x"))?;
    tailbound::failpoint::hit(FAILPOINT_AFTER_RENAME);
    remove_ledger(&lpath)?;
    Ok(Retired::Now)
}

fn remove_ledger(path: &Path) -> Result<(), ShipError> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir_of(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path, "removing the ledger")(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ship::{ship_file, ShipOptions};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::time::Duration;
    use tailbound::record::{Allocation, FlushMode, Recorder, RecorderOptions};

    const ID: &str = "node/ring.tbr";

    /// A finished recycled recording and a ledger saying the broker acknowledged all of it.
    fn shipped(dir: &Path, pool: &Path, url: &KafkaUrl) -> std::path::PathBuf {
        let rec = dir.join("ring.tbr");
        let mut r = Recorder::create(
            &rec,
            RecorderOptions {
                allocation: Allocation::Recycle,
                recycle_pool: Some(pool.to_path_buf()),
                flush: FlushMode::Fdatasync,
                expected_bytes: 256 << 10,
                ..RecorderOptions::default()
            },
        )
        .unwrap();
        for i in 0..20u8 {
            r.write(&[i; 100]).unwrap();
        }
        let frames = r.finish().unwrap().counters.frames;
        let stream = FrameReader::open(&rec).unwrap().stream(ID);
        Ledger {
            state: LedgerState::Shipping,
            created_unix_ns: stream.created_unix_ns,
            epoch: stream.epoch,
            // The header, the frames and the trailer.
            next_index: frames + 2,
            resume_offset: 0,
            partition: 0,
            dest: dest_hash(&url.topic, ID),
        }
        .store(&ledger_path(&rec))
        .unwrap();
        rec
    }

    #[test]
    fn a_crash_at_either_step_of_retire_neither_loops_nor_ships_again() {
        let dir = tempfile::tempdir().unwrap();
        let pool_dir = dir.path().join("pool");
        let pool = RecyclePool::prepare(&pool_dir, 1, 256 << 10).unwrap();
        // No broker listens here: anything that tried to ship would fail.
        let url = KafkaUrl::parse("kafka://127.0.0.1:1/rings").unwrap();
        let mut opts = ShipOptions::new(ID);
        opts.give_up_after = Some(Duration::from_millis(200));

        // A crash after the ledger says retired, before the rename.
        let rec = shipped(dir.path(), &pool_dir, &url);
        tailbound::failpoint::arm(FAILPOINT_AFTER_LEDGER);
        assert!(catch_unwind(AssertUnwindSafe(|| retire(&rec, &pool, &url, ID))).is_err());
        assert!(rec.exists());
        // The restarted shipper sends nothing for it (and does not even connect).
        let r = ship_file(&rec, &url, &opts).unwrap();
        assert!(r.already_retired && r.sent == 0, "{r:?}");
        // The retire goes on where it stopped.
        assert_eq!(retire(&rec, &pool, &url, ID).unwrap(), Retired::Now);
        assert!(!rec.exists() && !ledger_path(&rec).exists());
        assert_eq!(pool.ready(), 1);

        // A crash after the rename, before the ledger's removal.
        let rec = shipped(dir.path(), &pool_dir, &url);
        tailbound::failpoint::arm(FAILPOINT_AFTER_RENAME);
        assert!(catch_unwind(AssertUnwindSafe(|| retire(&rec, &pool, &url, ID))).is_err());
        assert!(!rec.exists() && ledger_path(&rec).exists());
        assert_eq!(retire(&rec, &pool, &url, ID).unwrap(), Retired::Earlier);
        assert!(!ledger_path(&rec).exists());
        // Nothing is left to do: a further retire has nothing to act on, and says so.
        assert!(retire(&rec, &pool, &url, ID).is_err());
    }

    #[test]
    fn retire_refuses_a_recording_the_broker_has_not_all_of() {
        let dir = tempfile::tempdir().unwrap();
        let pool_dir = dir.path().join("pool");
        let pool = RecyclePool::prepare(&pool_dir, 1, 256 << 10).unwrap();
        let url = KafkaUrl::parse("kafka://127.0.0.1:1/rings").unwrap();
        let rec = shipped(dir.path(), &pool_dir, &url);
        let lpath = ledger_path(&rec);
        let mut l = Ledger::load(&lpath).unwrap().unwrap();
        // The trailer not yet acknowledged.
        l.next_index -= 1;
        l.store(&lpath).unwrap();
        assert!(retire(&rec, &pool, &url, ID).is_err());
        assert!(rec.exists());
        assert_eq!(
            Ledger::load(&lpath).unwrap().unwrap().state,
            LedgerState::Shipping
        );
        // Another destination's ledger does not count.
        let other = KafkaUrl::parse("kafka://127.0.0.1:1/elsewhere").unwrap();
        l.next_index += 1;
        l.store(&lpath).unwrap();
        assert!(retire(&rec, &pool, &other, ID).is_err());
        assert_eq!(retire(&rec, &pool, &url, ID).unwrap(), Retired::Now);
    }
}
