//! What the scheduler is told and reports: classes and priorities, operations, policies, device
//! profiles, its configuration and per-tenant statistics. Names nothing else of `sched`.

use std::io;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

    /// Thread `tid`'s kernel I/O priority (of any process), as [`Prio::of_current_thread`]
    /// reads the caller's: class "none" follows that thread's nice value.
    pub fn of_thread(tid: u32) -> Prio {
        match crate::sys::ioprio::get_thread(tid) {
            Ok((class, level)) if class != crate::sys::ioprio::IOPRIO_CLASS_NONE => {
                Prio::from_kernel(class, level)
            }
            Ok(_) => {
                let nice = crate::sys::ioprio::nice_of(tid).unwrap_or(0).clamp(-20, 19);
                Prio {
                    class: Class::Be,
                    level: ((nice + 20) / 5) as u8,
                }
            }
            Err(_) => Prio::DEFAULT,
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

impl Op {
    /// `read`, `write` or `flush`, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
        }
    }
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
    /// The time a cache flush takes with nothing written since the last one.
    pub flush_ns: f64,
    /// What a flush costs on top of that per byte written since the last flush: a device with a
    /// volatile write cache writes back at a flush what it cached (0: flushes cost the same
    /// however much was written; profiles from before it was measured read as 0).
    #[serde(default)]
    pub flush_byte_ns: f64,
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
    /// 10 ms even on slow storage. Its flushes cost the same however much was written, so it
    /// derives no flush debt: only a calibration that measured flushes growing with what was
    /// written makes the scheduler flush on its own.
    pub fn conservative() -> DeviceProfile {
        DeviceProfile {
            device: "conservative".to_string(),
            read_io_ns: 100_000.0,
            read_byte_ns: 2.0,
            write_io_ns: 200_000.0,
            write_byte_ns: 4.0,
            flush_ns: 1_000_000.0,
            flush_byte_ns: 0.0,
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

    /// How many bytes of writes the scheduler lets a device cache before it flushes on its own
    /// ([`Config::flush_debt`]): as many as make a flush cost what one `max_io_write` piece costs,
    /// so a flush holds the device no longer than a write piece does; but at least as many as
    /// take [`FLUSH_OVERHEAD_INVERSE`] times a flush's fixed cost to write, so flushing on its own
    /// costs writers at most about that fraction of their throughput (whole blocks, at least one
    /// block, at most 64 MiB). `None` if flushes do not grow with what was written.
    pub fn flush_debt(&self) -> Option<u64> {
        if self.flush_byte_ns <= 0.0 {
            return None;
        }
        let block = crate::dev::BLOCK_SIZE;
        let piece_ns = self.write_byte_ns * self.max_io_write as f64;
        let for_piece = piece_ns / self.flush_byte_ns;
        let for_overhead = if self.write_byte_ns > 0.0 {
            FLUSH_OVERHEAD_INVERSE * self.flush_ns / self.write_byte_ns
        } else {
            0.0
        };
        let bytes = for_piece
            .max(for_overhead)
            .clamp(block as f64, FLUSH_DEBT_MAX as f64);
        Some((bytes as u64 / block * block).max(block))
    }

    /// The largest piece of `op` a lower class is dispatched in while a real-time tenant is
    /// active ([`Config::rt_window`]): the size whose transfer costs [`RT_GUARD_TRANSFER`]
    /// times the request's fixed cost (whole blocks, at least one, at most [`DeviceProfile::max_io`]).
    /// A real-time request then waits for at most `1 + RT_GUARD_TRANSFER` fixed costs of device
    /// time behind one such piece, and the piece still spends at least
    /// `RT_GUARD_TRANSFER / (1 + RT_GUARD_TRANSFER)` of its time moving bytes (4/5), so a copy
    /// cut to it keeps that share of what the device gives it in the model. A profile whose
    /// bytes cost nothing gives the full size: size does not hold the device longer.
    pub fn guard_piece(&self, op: Op) -> u64 {
        let full = self.max_io(op);
        let (io_ns, byte_ns) = match op {
            Op::Read => (self.read_io_ns, self.read_byte_ns),
            Op::Write | Op::Flush => (self.write_io_ns, self.write_byte_ns),
        };
        if byte_ns <= 0.0 {
            return full;
        }
        let block = crate::dev::BLOCK_SIZE;
        let bytes = (RT_GUARD_TRANSFER * io_ns / byte_ns).min(full as f64);
        (bytes as u64 / block * block).clamp(block, full.max(block))
    }

    /// The modelled time of a flush after `cached` bytes were written since the previous one.
    pub fn flush_cost_ns(&self, cached: u64) -> f64 {
        self.flush_ns + self.flush_byte_ns * cached as f64
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
            self.flush_byte_ns,
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

/// How a [`Scheduler`](super::Scheduler) (or a simulated one) behaves.
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
    /// under 1/[`SMALL_PASSES_ANTICIPATION`](super::queue::SMALL_PASSES_ANTICIPATION) of the completed
    /// one still goes, and the wait goes on after it). Idle-class tenants are never waited for.
    /// Without it, tenants that keep one synchronous request outstanding each are served
    /// alternately, whatever their weights. `None` keeps the scheduler work-conserving.
    pub anticipation: Option<Duration>,
    /// Flush debt: after this many bytes of writes completed since the last flush, the scheduler
    /// flushes the device before the next write. A device that caches writes writes them back
    /// at its next flush, and while it does, requests behind the flush wait (measured on this
    /// project's development machine: 1.5 ms per MiB cached); bounding what is cached bounds
    /// that wait. Real-time writes go ahead of the flush until the debt is twice this. `None`
    /// never flushes unasked ([`Config::default`]); [`Config::for_device`] takes the profile's
    /// [`DeviceProfile::flush_debt`].
    pub flush_debt: Option<u64>,
    /// How long a real-time tenant counts as active after its last request arrived or
    /// completed (it is active, too, while one is queued or in the device). Meanwhile, under
    /// `priority` and `default`, lower classes are dispatched in pieces of at most
    /// [`DeviceProfile::guard_piece`] (cut when dispatched, so pieces queued before stay
    /// whole only until then), and with a depth of 2 or more they leave one slot of the device
    /// free, so a real-time request never queues behind a lower class's dispatch. `None`: no
    /// such guard. See [`RT_WINDOW_DEFAULT`].
    pub rt_window: Option<Duration>,
    pub profile: DeviceProfile,
}

/// A lower-class piece's transfer time while real time is active, in fixed costs of a request
/// ([`DeviceProfile::guard_piece`]): 4 keeps 4/5 of the copy's modelled throughput, the issue's
/// floor for what a best-effort copy keeps beside a real-time writer.
pub const RT_GUARD_TRANSFER: f64 = 4.0;

/// Default [`Config::rt_window`]. The guard costs lower classes at most a fifth of their modelled
/// throughput while it holds, so holding it long is cheap; a window of a second keeps it on for
/// any real-time tenant issuing at least once a second (a 111/s writer's gaps are 9 ms, so it
/// never lapses between its requests, when a full piece would go in first), and a tenant that
/// stopped costs the others that fifth for one second.
pub const RT_WINDOW_DEFAULT: Duration = Duration::from_secs(1);

/// Largest flush debt a profile derives.
pub const FLUSH_DEBT_MAX: u64 = 64 << 20;
/// A derived flush debt takes at least this many times a flush's fixed cost to write.
pub const FLUSH_OVERHEAD_INVERSE: f64 = 8.0;

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
            flush_debt: None,
            rt_window: Some(RT_WINDOW_DEFAULT),
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
        if self.flush_debt == Some(0) {
            return Err("flush debt 0 would flush before every write".into());
        }
        self.profile.validate()
    }

    /// The default configuration with `profile` and the flush debt it derives
    /// ([`DeviceProfile::flush_debt`]).
    pub fn with_profile(profile: DeviceProfile) -> Config {
        Config {
            flush_debt: profile.flush_debt(),
            profile,
            ..Config::default()
        }
    }

    /// The split size in effect for `op`.
    pub fn max_io_for(&self, op: Op) -> u64 {
        self.max_io.unwrap_or_else(|| self.profile.max_io(op))
    }
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
