//! The ledger beside a recording (`REC.ship`): how far the broker has acknowledged it.
//!
//! 64 bytes, little-endian, written to `REC.ship.tmp`, `fsync`ed, renamed over `REC.ship` and the
//! directory `fsync`ed, so a crash leaves the old ledger or the new one, whole (docs/FORMAT.md):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBSHIPLG` |
//! | 8 | 4 | version, 1 |
//! | 12 | 4 | state: 0 shipping, 1 retired (the recording may be gone) |
//! | 16 | 8 | the recording's creation time (ns), from its header |
//! | 24 | 8 | the recording's epoch |
//! | 32 | 8 | next index: records 0..next were acknowledged |
//! | 40 | 8 | resume offset: any record of this stream at an index ≥ next lies at or after it |
//! | 48 | 4 | partition |
//! | 52 | 4 | CRC32C of the topic and the recorder id (the destination) |
//! | 56 | 4 | reserved, zero |
//! | 60 | 4 | CRC32C of bytes 0..60 |

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::key::StreamId;
use crate::{io_err, ShipError};

pub const LEDGER_MAGIC: [u8; 8] = *b"TBSHIPLG";
pub const LEDGER_VERSION: u32 = 1;
pub const LEDGER_BYTES: usize = 64;
/// The ledger's name beside a recording.
pub const LEDGER_SUFFIX: &str = ".ship";

/// Whether the recording is still being shipped or was retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerState {
    Shipping,
    /// Every record was acknowledged and the recording is being, or was, handed back.
    Retired,
}

/// The ledger's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    pub state: LedgerState,
    pub created_unix_ns: u64,
    pub epoch: u64,
    pub next_index: u64,
    pub resume_offset: i64,
    pub partition: i32,
    pub dest: u32,
}

/// `REC.ship` for recording `REC`.
pub fn ledger_path(recording: &Path) -> PathBuf {
    let mut s = recording.as_os_str().to_owned();
    s.push(LEDGER_SUFFIX);
    PathBuf::from(s)
}

/// The destination's fingerprint: topic and recorder id.
pub fn dest_hash(topic: &str, recorder: &str) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(topic.as_bytes()), recorder.as_bytes())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Ledger {
    /// Whether this ledger is about `stream` shipped to `dest`.
    pub fn is_for(&self, stream: &StreamId, dest: u32) -> bool {
        self.created_unix_ns == stream.created_unix_ns
            && self.epoch == stream.epoch
            && self.dest == dest
    }

    pub fn encode(&self) -> [u8; LEDGER_BYTES] {
        let mut b = [0u8; LEDGER_BYTES];
        b[0..8].copy_from_slice(&LEDGER_MAGIC);
        b[8..12].copy_from_slice(&LEDGER_VERSION.to_le_bytes());
        let state: u32 = match self.state {
            LedgerState::Shipping => 0,
            LedgerState::Retired => 1,
        };
        b[12..16].copy_from_slice(&state.to_le_bytes());
        b[16..24].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.epoch.to_le_bytes());
        b[32..40].copy_from_slice(&self.next_index.to_le_bytes());
        b[40..48].copy_from_slice(&self.resume_offset.to_le_bytes());
        b[48..52].copy_from_slice(&self.partition.to_le_bytes());
        b[52..56].copy_from_slice(&self.dest.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a ledger; the reason when the bytes are not one.
    pub fn decode(b: &[u8]) -> Result<Ledger, String> {
        if b.len() != LEDGER_BYTES {
            return Err(format!("{} bytes, not {LEDGER_BYTES}", b.len()));
        }
        if b[0..8] != LEDGER_MAGIC {
            return Err("no ledger magic".into());
        }
        if crc32c::crc32c(&b[0..60]) != u32_at(b, 60) {
            return Err("the checksum does not match".into());
        }
        let version = u32_at(b, 8);
        if version != LEDGER_VERSION {
            return Err(format!("version {version} is not supported"));
        }
        let state = match u32_at(b, 12) {
            0 => LedgerState::Shipping,
            1 => LedgerState::Retired,
            s => return Err(format!("unknown state {s}")),
        };
        Ok(Ledger {
            state,
            created_unix_ns: u64_at(b, 16),
            epoch: u64_at(b, 24),
            next_index: u64_at(b, 32),
            resume_offset: u64_at(b, 40) as i64,
            partition: u32_at(b, 48) as i32,
            dest: u32_at(b, 52),
        })
    }

    /// Reads the ledger at `path`: `None` when there is none. A damaged ledger is an error: the
    /// tool that wrote it never leaves one (it renames a whole, flushed file into place).
    pub fn load(path: &Path) -> Result<Option<Ledger>, ShipError> {
        match std::fs::read(path) {
            Ok(b) => Ledger::decode(&b)
                .map(Some)
                .map_err(|reason| ShipError::Recording {
                    path: path.to_path_buf(),
                    reason: format!("not a ship ledger: {reason}"),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(path, "reading the ledger")(e)),
        }
    }

    /// Replaces the ledger at `path` atomically and durably.
    pub fn store(&self, path: &Path) -> Result<(), ShipError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err(&tmp, "creating"))?;
        f.write_all(&self.encode())
            .map_err(io_err(&tmp, "writing"))?;
        f.sync_all().map_err(io_err(&tmp, "flushing (fsync)"))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io_err(path, "renaming the new ledger to"))?;
        sync_dir_of(path)
    }
}

/// `fsync`s the directory holding `path`, so a rename or unlink in it is durable.
pub fn sync_dir_of(path: &Path) -> Result<(), ShipError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "flushing (fsync) the directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ledger {
        Ledger {
            state: LedgerState::Shipping,
            created_unix_ns: 5,
            epoch: 2,
            next_index: 1000,
            resume_offset: 77,
            partition: 3,
            dest: dest_hash("t", "r"),
        }
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let l = sample();
        let b = l.encode();
        assert_eq!(Ledger::decode(&b), Ok(l));
        for i in 0..LEDGER_BYTES {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert!(Ledger::decode(&bad).is_err(), "byte {i}");
        }
        assert!(Ledger::decode(&b[..63]).is_err());
    }

    #[test]
    fn store_replaces_whole_and_load_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("rec.tbr");
        let path = ledger_path(&rec);
        assert_eq!(path, dir.path().join("rec.tbr.ship"));
        assert_eq!(Ledger::load(&path).unwrap(), None);
        let mut l = sample();
        l.store(&path).unwrap();
        l.next_index = 2000;
        l.state = LedgerState::Retired;
        l.store(&path).unwrap();
        assert_eq!(Ledger::load(&path).unwrap(), Some(l));
        assert!(!dir.path().join("rec.tbr.ship.tmp").exists());
        std::fs::write(&path, b"garbage").unwrap();
        assert!(Ledger::load(&path).is_err());
    }
}
