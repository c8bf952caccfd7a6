//! sched: a user-space I/O scheduler in front of a [`Device`](crate::dev::Device).
//!
//! Every request carries a tenant, a priority class (RT, BE, IDLE with levels 0–7, as Linux ioprio)
//! and a weight. The policy logic lives in [`queue::Queue`], a pure object driven by explicit
//! `now` times, so the deterministic simulator ([`sim`]) and the real executor ([`Scheduler`]) run
//! exactly the same code.
//!
//! Policies ([`Policy`]):
//! - `fifo`: arrival order, no splitting, no merging (the baseline).
//! - `priority`: class first (RT > BE > IDLE), FIFO within a class across tenants; adjacent
//!   requests of the same class and operation merge, at most `merge_cap` merges per dispatch for
//!   BE/IDLE (RT uncapped); bounded aging.
//! - `fair`: all tenants in one weighted-fair group regardless of class (WF2Q+ start/finish tags and
//!   virtual time); requests split to `max_io`, each piece charged its device cost.
//! - `default`: strict classes RT > BE > IDLE with aging, `fair` within each class.
//!
//! Splitting applies to every policy but `fifo`; `max_io` comes from [`Config::max_io`] or else
//! the device profile (read and write apart). Merges never build a dispatch larger than that.
//!
//! Aging: when the request at the head of a tenant's queue has waited `aging` (default 10 s) while
//! a higher class kept the device busy, it is dispatched next regardless of class, so a tenant of a
//! starved class still moves at least one piece per `aging` interval.
//!
//! Owns ordering, splitting, merging, accounting and the dispatch depth; it never interprets the
//! bytes it moves.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod calibrate;
mod exec;
pub mod inherit;
pub mod queue;
pub mod sim;
#[cfg(test)]
mod tests;

pub use exec::{set_thread_tenant, thread_tenant, Charge, Charged, SchedDevice, Scheduler};

/// A Linux-style I/O priority class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Class {
    /// Real time: served before everything else.
    Rt,
    /// Best effort: the default class.
    Be,
    /// Idle: served when nothing else waits (and through aging).
    Idle,
}

impl Class {
    /// Index 0 (RT), 1 (BE), 2 (IDLE): lower is served first.
    pub fn rank(self) -> usize {
        match self {
            Class::Rt => 0,
            Class::Be => 1,
            Class::Idle => 2,
        }
    }

    /// The short name used in messages and tenant names: `rt`, `be`, `idle`.
    pub fn name(self) -> &'static str {
        match self {
            Class::Rt => "rt",
            Class::Be => "be",
            Class::Idle => "idle",
        }
    }
}

/// A class and a level within it, 0 (highest) to 7, as `ionice -c CLASS -n LEVEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prio {
    pub class: Class,
    pub level: u8,
}

/// The highest level number (lowest priority) within a class.
pub const LEVEL_MAX: u8 = 7;

impl Prio {
    /// Best effort at level 4, what the kernel gives a thread with nice 0.
    pub const DEFAULT: Prio = Prio {
        class: Class::Be,
        level: 4,
    };

    /// The calling thread's kernel I/O priority. A thread without an explicit class follows its
    /// nice value (best effort, level `(nice + 20) / 5`), as the kernel does; if the kernel cannot
    /// be asked, best effort level 4.
    pub fn of_current_thread() -> Prio {
        match crate::sys::ioprio::get_current_thread() {
            Ok((class, level)) => Prio::from_kernel(class, level),
            Err(_) => Prio::DEFAULT,
        }
    }

    /// A priority from the kernel's numbering (`ioprio_get`); class 0 ("none") follows the calling
    /// thread's nice value.
    pub fn from_kernel(class: u32, level: u32) -> Prio {
        use crate::sys::ioprio;
        let level = level.min(u32::from(LEVEL_MAX)) as u8;
        match class {
            ioprio::IOPRIO_CLASS_RT => Prio {
                class: Class::Rt,
                level,
            },
            ioprio::IOPRIO_CLASS_IDLE => Prio {
                class: Class::Idle,
                level,
            },
            ioprio::IOPRIO_CLASS_BE => Prio {
                class: Class::Be,
                level,
            },
            _ => {
                let nice = ioprio::current_nice().unwrap_or(0).clamp(-20, 19);
                Prio {
                    class: Class::Be,
                    level: ((nice + 20) / 5) as u8,
                }
            }
        }
    }

    /// Sets the calling thread's kernel I/O priority to this one (`ioprio_set`), so I/O the thread
    /// issues outside the scheduler is ordered by the kernel the same way.
    pub fn apply_to_current_thread(&self) -> io::Result<()> {
        use crate::sys::ioprio;
        let class = match self.class {
            Class::Rt => ioprio::IOPRIO_CLASS_RT,
            Class::Be => ioprio::IOPRIO_CLASS_BE,
            Class::Idle => ioprio::IOPRIO_CLASS_IDLE,
        };
        ioprio::set_current_thread(class, u32::from(self.level.min(LEVEL_MAX))).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("ioprio_set to {}/{}: {e}", self.class.name(), self.level),
            )
        })
    }

    /// The weight a tenant made from this priority gets: 8 for level 0 down to 1 for level 7.
    pub fn default_weight(&self) -> u32 {
        u32::from(LEVEL_MAX + 1 - self.level.min(LEVEL_MAX))
    }
}

impl std::fmt::Display for Prio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.class.name(), self.level)
    }
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    Read,
    Write,
    Flush,
}

/// How a scheduler orders requests; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Policy {
    Fifo,
    Priority,
    Fair,
    #[default]
    Default,
}

impl Policy {
    /// Every policy, in the order `--help` lists them.
    pub const ALL: [Policy; 4] = [
        Policy::Fifo,
        Policy::Priority,
        Policy::Fair,
        Policy::Default,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Priority => "priority",
            Policy::Fair => "fair",
            Policy::Default => "default",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown policy {s:?} (expected fifo, priority, fair or default)")
            })
    }
}

/// The cost model of a device: the time one request takes, per I/O plus per byte, reads and
/// writes apart, and the largest request each may be split to. Made by `tailbound calibrate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// What was measured (a path), or `conservative`.
    pub device: String,
    pub read_io_ns: f64,
    pub read_byte_ns: f64,
    pub write_io_ns: f64,
    pub write_byte_ns: f64,
    /// The time a cache flush takes.
    pub flush_ns: f64,
    /// Largest read the scheduler issues; larger reads are split.
    pub max_io_read: u64,
    /// Largest write the scheduler issues; larger writes are split.
    pub max_io_write: u64,
    /// The latency goal `max_io_*` were chosen for.
    pub latency_goal_ns: u64,
}

impl DeviceProfile {
    /// A profile for a device nobody measured: a modest SSD (100 µs + 2 ns/byte reads, 200 µs +
    /// 4 ns/byte writes), split to 4 MiB reads and 1 MiB writes, which keeps one piece well under
    /// 10 ms even on slow storage.
    pub fn conservative() -> DeviceProfile {
        DeviceProfile {
            device: "conservative".to_string(),
            read_io_ns: 100_000.0,
            read_byte_ns: 2.0,
            write_io_ns: 200_000.0,
            write_byte_ns: 4.0,
            flush_ns: 1_000_000.0,
            max_io_read: 4 << 20,
            max_io_write: 1 << 20,
            latency_goal_ns: 50_000_000,
        }
    }

    /// The modelled service time of one request, in nanoseconds.
    pub fn cost_ns(&self, op: Op, len: u64) -> f64 {
        match op {
            Op::Read => self.read_io_ns + self.read_byte_ns * len as f64,
            Op::Write => self.write_io_ns + self.write_byte_ns * len as f64,
            Op::Flush => self.flush_ns,
        }
    }

    /// The split size for `op` (flushes are never split).
    pub fn max_io(&self, op: Op) -> u64 {
        match op {
            Op::Read => self.max_io_read,
            Op::Write | Op::Flush => self.max_io_write,
        }
    }

    /// Reads a profile saved by [`DeviceProfile::save`].
    pub fn load(path: &Path) -> io::Result<DeviceProfile> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("device profile {}: reading: {e}", path.display()),
            )
        })?;
        let profile: DeviceProfile = serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("device profile {}: not a profile: {e}", path.display()),
            )
        })?;
        profile.validate().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("device profile {}: {e}", path.display()),
            )
        })?;
        Ok(profile)
    }

    /// Writes the profile as JSON, creating parent directories.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let wrap = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("device profile {}: writing: {e}", path.display()),
            )
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(wrap)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        std::fs::write(path, text + "\n").map_err(wrap)
    }

    /// Checks that costs are finite and non-negative and split sizes are whole blocks.
    pub fn validate(&self) -> Result<(), String> {
        let costs = [
            self.read_io_ns,
            self.read_byte_ns,
            self.write_io_ns,
            self.write_byte_ns,
            self.flush_ns,
        ];
        if costs.iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err("costs must be finite and not negative".into());
        }
        let block = crate::dev::BLOCK_SIZE;
        for (name, v) in [
            ("max_io_read", self.max_io_read),
            ("max_io_write", self.max_io_write),
        ] {
            if v == 0 || v % block != 0 {
                return Err(format!(
                    "{name} = {v} is not a positive multiple of {block}"
                ));
            }
        }
        Ok(())
    }

    /// Where `tailbound calibrate` stores profiles by default:
    /// `$XDG_CONFIG_HOME/tailbound/profiles/` (or `~/.config/tailbound/profiles/`).
    pub fn default_dir() -> Option<std::path::PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".config"))
            })?;
        Some(base.join("tailbound").join("profiles"))
    }
}

impl Default for DeviceProfile {
    fn default() -> DeviceProfile {
        DeviceProfile::conservative()
    }
}

/// How a [`Scheduler`] (or a simulated one) behaves.
#[derive(Debug, Clone)]
pub struct Config {
    pub policy: Policy,
    /// Split size for reads and writes alike; `None` takes the profile's `max_io_read`/`max_io_write`.
    pub max_io: Option<u64>,
    /// Most requests in the device at once (1 = BFQ's `strict_guarantees`); also the number of
    /// dispatcher threads.
    pub depth: usize,
    /// When set, the depth in use drops (down to 1) while RT requests take longer than this from
    /// submission to completion, and climbs back to `depth` while they stay under half of it.
    pub adaptive_rt_target: Option<Duration>,
    /// Most requests merged into one BE or IDLE dispatch (RT dispatches are not capped).
    pub merge_cap: usize,
    /// How long the head request of a starved class waits before it is served anyway.
    pub aging: Duration,
    /// Anticipation for `fair` and `default` (BFQ's `slice_idle`): when the last queued read or
    /// write of a tenant completes and fair queueing would serve that tenant next, the device is
    /// held idle this long for its next request before another tenant's goes (a request costing
    /// under 1/[`SMALL_PASSES_ANTICIPATION`](queue::SMALL_PASSES_ANTICIPATION) of the completed
    /// one still goes). Without it, tenants that keep one synchronous request outstanding each are
    /// served alternately, whatever their weights. `None` keeps the scheduler work-conserving.
    pub anticipation: Option<Duration>,
    pub profile: DeviceProfile,
}

/// Default merge cap for BE and IDLE requests (seed 004 measured throughput saturating at 16).
pub const MERGE_CAP_DEFAULT: usize = 16;
/// Default aging bound.
pub const AGING_DEFAULT: Duration = Duration::from_secs(10);
/// Default dispatch depth.
pub const DEPTH_DEFAULT: usize = 2;
/// Largest depth a scheduler accepts (it runs this many dispatcher threads at most).
pub const DEPTH_MAX: usize = 64;

impl Default for Config {
    fn default() -> Config {
        Config {
            policy: Policy::Default,
            max_io: None,
            depth: DEPTH_DEFAULT,
            adaptive_rt_target: None,
            merge_cap: MERGE_CAP_DEFAULT,
            aging: AGING_DEFAULT,
            anticipation: None,
            profile: DeviceProfile::conservative(),
        }
    }
}

impl Config {
    /// Checks the configuration before a scheduler is built from it.
    pub fn validate(&self) -> Result<(), String> {
        if self.depth == 0 || self.depth > DEPTH_MAX {
            return Err(format!("depth {} is outside 1..={DEPTH_MAX}", self.depth));
        }
        if let Some(m) = self.max_io {
            if m == 0 || m % crate::dev::BLOCK_SIZE != 0 {
                return Err(format!(
                    "max_io {m} is not a positive multiple of {}",
                    crate::dev::BLOCK_SIZE
                ));
            }
        }
        self.profile.validate()
    }

    /// The default configuration with the profile `tailbound calibrate` stored for `target` at
    /// its default place, or the conservative profile if there is none.
    pub fn for_device(target: &Path) -> Config {
        Config {
            profile: calibrate::profile_for(target),
            ..Config::default()
        }
    }

    /// The split size in effect for `op`.
    pub fn max_io_for(&self, op: Op) -> u64 {
        self.max_io.unwrap_or_else(|| self.profile.max_io(op))
    }
}

/// Puts `dev` behind a scheduler with the default configuration and the profile stored for
/// `target` ([`Config::for_device`]): how tbfs's file and block-device pools are opened, so every
/// read, write and flush goes through it with the tenant of the calling thread (its kernel ioprio
/// unless [`set_thread_tenant`] chose one).
pub fn scheduled(
    dev: Arc<dyn crate::dev::Device>,
    target: &Path,
) -> io::Result<Arc<dyn crate::dev::Device>> {
    let sched = Scheduler::new(dev, Config::for_device(target))?;
    Ok(Arc::new(SchedDevice::new(sched)))
}

/// A tenant of a scheduler: a set of requests sharing a priority, a weight and statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(pub u32);

/// What one tenant got from a scheduler.
#[derive(Debug, Clone)]
pub struct TenantStats {
    pub name: String,
    pub prio: Prio,
    pub weight: u32,
    /// Bytes of completed reads and writes.
    pub bytes: u64,
    /// Completed requests (as submitted, before splitting).
    pub ops: u64,
    /// Extra pieces made by splitting (a request cut into 4 pieces counts 3).
    pub splits: u64,
    /// Pieces of this tenant that rode along in a dispatch led by another piece.
    pub merges: u64,
    /// Per request: submission to its first piece's dispatch, in nanoseconds.
    pub queue_ns: hdrhistogram::Histogram<u64>,
    /// Per request: first dispatch to last completion, in nanoseconds.
    pub service_ns: hdrhistogram::Histogram<u64>,
}
