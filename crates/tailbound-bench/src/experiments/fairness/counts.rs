//! Where a tbfs case's writers spent their time, by tenant: the pool's own counts
//! ([`tailbound::tbfs::Fs::tenant_writes`]) and the scheduler's, over the case (warm-up and
//! window), so a ratio off its weights can be traced to the wait that set it.

use serde::Serialize;
use tailbound::sched::Scheduler;
use tailbound::tbfs::{Fs, TenantWrites, WriterKey};

/// One tenant's (or, without one, one priority's) writes over a case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriterCounts {
    /// The scheduler tenant's name, or the priority (`idle 7`: the pool's background thread).
    pub writer: String,
    /// Its weight in the scheduler (0: not a tenant of its own).
    pub weight: u32,
    /// File data its writers wrote, in MiB, and how many writes.
    pub written_mb: f64,
    pub writes: u64,
    /// What the scheduler moved for it (its data, and any cleaning it did), in MiB.
    pub device_mb: f64,
    /// Milliseconds its writers waited for `meta`, cleaned inline (and the blocks copied),
    /// and waited for their payloads.
    pub meta_wait_ms: f64,
    pub clean_ms: f64,
    pub clean_blocks: u64,
    /// The part of `clean_ms` and `clean_blocks` spent cleaning until there was room (below
    /// the floor) rather than in the cleaning tax's pieces.
    pub room_clean_ms: f64,
    pub room_clean_blocks: u64,
    pub payload_wait_ms: f64,
    /// Milliseconds its writers waited under `meta` for every sealed log, space being short.
    pub logs_wait_ms: f64,
}

/// The pool's and the scheduler's counts at one moment.
pub(super) struct Snapshot {
    writes: Vec<TenantWrites>,
    device_bytes: Vec<u64>,
}

impl Snapshot {
    pub(super) fn take(fs: &Fs, sched: &Scheduler) -> Snapshot {
        Snapshot {
            writes: fs.tenant_writes(),
            device_bytes: sched.stats().iter().map(|t| t.bytes).collect(),
        }
    }

    /// What happened between `self` (earlier) and `later`, tenant by tenant.
    pub(super) fn until(&self, later: &Snapshot, sched: &Scheduler) -> Vec<WriterCounts> {
        let stats = sched.stats();
        let ms = |ns: u64| ns as f64 / 1e6;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        later
            .writes
            .iter()
            .map(|now| {
                let zero = TenantWrites::new(now.key);
                let was = self
                    .writes
                    .iter()
                    .find(|t| t.key == now.key)
                    .unwrap_or(&zero);
                let (writer, weight, device) = match now.key {
                    WriterKey::Tenant(id) => {
                        let i = id as usize;
                        let name = stats
                            .get(i)
                            .map_or(format!("tenant {id}"), |t| t.name.clone());
                        let weight = stats.get(i).map_or(0, |t| t.weight);
                        let bytes = later.device_bytes.get(i).copied().unwrap_or(0)
                            - self.device_bytes.get(i).copied().unwrap_or(0);
                        (name, weight, bytes)
                    }
                    WriterKey::Prio(class, level) => (format!("{} {level}", class.name()), 0, 0),
                };
                WriterCounts {
                    writer,
                    weight,
                    written_mb: mib(now.bytes - was.bytes),
                    writes: now.writes - was.writes,
                    device_mb: mib(device),
                    meta_wait_ms: ms(now.meta_wait_ns - was.meta_wait_ns),
                    clean_ms: ms(now.clean_ns - was.clean_ns),
                    clean_blocks: now.clean_blocks - was.clean_blocks,
                    room_clean_ms: ms(now.room_clean_ns - was.room_clean_ns),
                    room_clean_blocks: now.room_clean_blocks - was.room_clean_blocks,
                    payload_wait_ms: ms(now.payload_wait_ns - was.payload_wait_ns),
                    logs_wait_ms: ms(now.logs_wait_ns - was.logs_wait_ns),
                }
            })
            .collect()
    }
}
