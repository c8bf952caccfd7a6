//! What a check or a repair reports: findings with their severity and location, the verdict,
//! and the counts.

use std::fmt;

pub(super) use crate::tbfs::inode::ROOT_INO;
/// Where `repair` reattaches inodes it cannot reach from the root.
pub const LOST_FOUND: &str = "lost+found";

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, not damage: a torn log tail after a crash, an orphan the next open frees.
    Note,
    /// Damage: something the pool should hold is wrong or missing.
    Damage,
}

/// Where a finding is. Every field that applies is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    /// Superblock copy (0 or 1).
    pub superblock: Option<u8>,
    pub segment: Option<u64>,
    /// Sequence number of the log concerned.
    pub log: Option<u64>,
    pub block: Option<u64>,
    pub checkpoint: Option<u64>,
    pub inode: Option<u64>,
    pub path: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(c) = self.superblock {
            parts.push(format!("superblock {c}"));
        }
        if let Some(s) = self.segment {
            parts.push(format!("segment {s}"));
        }
        if let Some(l) = self.log {
            parts.push(format!("log {l}"));
        }
        if let Some(b) = self.block {
            parts.push(format!("block {b}"));
        }
        if let Some(c) = self.checkpoint {
            parts.push(format!("checkpoint {c}"));
        }
        match (self.inode, &self.path) {
            (Some(i), Some(p)) => parts.push(format!("inode {i} ({p})")),
            (Some(i), None) => parts.push(format!("inode {i}")),
            (None, Some(p)) => parts.push(p.clone()),
            (None, None) => {}
        }
        if parts.is_empty() {
            parts.push("pool".into());
        }
        f.write_str(&parts.join(", "))
    }
}

/// One thing fsck found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub location: Location,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.severity {
            Severity::Note => "note",
            Severity::Damage => "damage",
        };
        write!(f, "{s}: {}: {}", self.location, self.message)
    }
}

/// The overall result of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No damage (notes are possible).
    Clean,
    /// Damage that [`repair`](super::repair()) can salvage around.
    Damaged,
    /// No checkpoint with a usable root directory: nothing to salvage.
    Unrecoverable,
}

/// What was looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FsckStats {
    pub superblocks_valid: u32,
    pub generation: u64,
    pub segments: u64,
    pub segments_in_use: u64,
    /// Logs found in the segments (including stale ones of earlier passes).
    pub logs: u64,
    /// Logs in the roll-forward chain after the superblock's checkpoint.
    pub chain_logs: u64,
    /// Why the roll-forward chain ends.
    pub chain_end: String,
    /// Retained checkpoints checked.
    pub checkpoints: Vec<u64>,
    /// Of the newest checkpoint checked:
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub file_bytes: u64,
}

/// What [`check`](super::check()) found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FsckReport {
    pub verdict: Verdict,
    pub findings: Vec<Finding>,
    pub stats: FsckStats,
}

impl FsckReport {
    pub fn damage(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Damage)
    }
}

/// How [`repair`](super::repair()) went about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairMethod {
    /// Nothing to repair.
    None,
    /// Recovery with tolerate-tail plus ordinary writes, in place.
    InPlace,
    /// A new pool built from what could be salvaged, written over the device.
    Rebuilt,
}

/// What [`repair`](super::repair()) did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    pub method: RepairMethod,
    /// Steps taken.
    pub actions: Vec<String>,
    /// What is gone (files, blocks, logs, history).
    pub lost: Vec<String>,
    /// The check before the repair and the one after it.
    pub before: FsckReport,
    pub after: FsckReport,
}

// ---------------------------------------------------------------------------------------------
// Reading
