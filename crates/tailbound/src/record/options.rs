//! What a recording is made with: allocation, flushing, flusher, framing, decoupling, hygiene.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::record::RecordError;
use crate::units::{parse_bytes, parse_duration};

macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value's name as options and the command line spell it.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = RecordError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let names: Vec<&str> = $name::ALL.iter().map(|v| v.name()).collect();
                    RecordError::Options(format!(
                        "{} {s:?} is not one of {}",
                        stringify!($name).to_lowercase(),
                        names.join(", ")
                    ))
                })
            }
        }
    };
}

named_enum! {
    /// How the recording's blocks are allocated.
    Allocation {
        /// Plain appends: the file system allocates beside every write (the conventional design).
        Append = "append",
        /// `fallocate` the expected size up front (the paper); the unused tail is cut at the end.
        /// Mode 0 (the file's size grows to the expected size at once), not `KEEP_SIZE`: with
        /// `KEEP_SIZE` every append would still change the inode's size, a journalled update.
        Fallocate = "fallocate",
        /// Write the expected size with zeros before recording, so writeback never converts
        /// unwritten extents and flushed data is readable after power loss.
        ZeroFill = "zero-fill",
        /// Take a fully written file from a pool prepared ahead of time: no `fallocate` or
        /// `ftruncate` beside the recording; a trailer marks the end.
        Recycle = "recycle",
    }
}

named_enum! {
    /// How the background thread flushes each window of `flush_every_bytes`.
    FlushMode {
        /// `fdatasync` (the paper's S_ALL).
        Fdatasync = "fdatasync",
        /// `sync_file_range` write-and-wait on the window: data only (the paper's S_DATA).
        SyncFileRange = "sync-file-range",
        /// Start writeback of window N, wait for N−1 and drop it from the page cache.
        Pipelined = "pipelined",
        /// No flushing until `finish`.
        None = "none",
    }
}

named_enum! {
    /// Whether the kernel's writeback flusher may run during the recording.
    Flusher {
        On = "on",
        /// Dirty ratios 100 and a 3,000 s expiry for the recording (root), restored afterwards.
        Off = "off",
    }
}

named_enum! {
    /// How records are laid out in the file.
    Framing {
        /// A file header and a checksummed frame per record (see docs/FORMAT.md).
        Framed = "framed",
        /// The bytes as written, nothing else.
        Raw = "raw",
    }
}

named_enum! {
    /// What a decoupled recorder does when its ring is full.
    Overflow {
        /// Wait for room (counted as `blocked`).
        Block = "block",
        /// Discard the new record (counted as `dropped`).
        Drop = "drop",
        /// Discard the oldest records not yet written (counted as `overwritten`).
        Overwrite = "overwrite",
    }
}

/// The decoupled mode: a ring between the producer and a writer thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoupledOptions {
    pub ring_bytes: u64,
    pub overflow: Overflow,
}

/// Largest record a recorder accepts.
pub const RECORD_BYTES_MAX: u64 = 64 << 20;
/// Smallest flush window.
pub const FLUSH_EVERY_BYTES_MIN: u64 = 4096;

/// Everything a recording is made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderOptions {
    pub allocation: Allocation,
    pub flush: FlushMode,
    /// Flush window, default 2 MiB.
    pub flush_every_bytes: u64,
    pub flusher: Flusher,
    pub framing: Framing,
    /// Bytes to preallocate (payload plus framing) for `fallocate` and `zero-fill`; a recording that
    /// outgrows it (or its recycled file) is extended ahead of need by the background thread, with
    /// one `fallocate` of the starting size (at least 16 MiB) per extension: a metadata change beside the
    /// recording and unwritten extents (see docs/FORMAT.md). Default 100 MiB.
    pub expected_bytes: u64,
    /// The pool directory for `recycle`.
    pub recycle_pool: Option<PathBuf>,
    pub decoupled: Option<DecoupledOptions>,
    /// Lock the whole process in memory (`mlockall`).
    pub mlockall: bool,
    /// SCHED_FIFO priority for the thread that makes the `write()` calls: the writer thread when
    /// decoupled, else the thread calling `create` (which keeps it after `finish`).
    pub rt_priority: Option<u8>,
    /// CPU for the thread that makes the `write()` calls (as for `rt_priority`).
    pub cpu: Option<usize>,
    /// Record each `write()` system call's latency in the summary's histogram.
    pub measure_writes: bool,
    /// Store records through a shared mapping of the preallocated file instead of `write()` calls
    /// (fallocate, zero-fill and recycle; append always uses `write()`; default on). The
    /// background thread faults the pages ahead in writable (`MADV_POPULATE_WRITE`), so a store
    /// takes no page fault and updates no timestamp — on ext4 a journalled inode change that can
    /// wait behind a commit for tens of milliseconds. Where the file cannot be mapped or faulted
    /// in ahead (Linux before 5.14, some file systems), the recorder makes `write()` calls instead.
    pub mapped: bool,
    /// Trace every recording call slower than this: its index and offset, what the background
    /// thread was doing, the page faults and context switches it took and the CPUs it ran on
    /// (see [`crate::record::SlowTrace`]; returned by `finish`).
    pub trace_slow: Option<Duration>,
}

impl Default for RecorderOptions {
    /// tailbound's default mode: zero-filled file, pipelined flushing every 2 MiB, framed records,
    /// the kernel flusher left alone (no root needed).
    fn default() -> Self {
        RecorderOptions {
            allocation: Allocation::ZeroFill,
            flush: FlushMode::Pipelined,
            flush_every_bytes: 2 << 20,
            flusher: Flusher::On,
            framing: Framing::Framed,
            expected_bytes: 100 << 20,
            recycle_pool: None,
            decoupled: None,
            mlockall: false,
            rt_priority: None,
            cpu: None,
            measure_writes: false,
            mapped: true,
            trace_slow: None,
        }
    }
}

impl RecorderOptions {
    /// The paper's conventional design (NONE): append, `fdatasync`, flusher on, raw bytes.
    pub fn conventional() -> RecorderOptions {
        RecorderOptions {
            allocation: Allocation::Append,
            flush: FlushMode::Fdatasync,
            framing: Framing::Raw,
            mapped: false,
            ..RecorderOptions::default()
        }
    }

    /// The paper's design (ALL): `fallocate`, `sync_file_range`, flusher off, raw bytes.
    pub fn paper() -> RecorderOptions {
        RecorderOptions {
            allocation: Allocation::Fallocate,
            flush: FlushMode::SyncFileRange,
            flusher: Flusher::Off,
            framing: Framing::Raw,
            mapped: false,
            ..RecorderOptions::default()
        }
    }

    /// Checks the combination; every problem is named.
    pub fn validate(&self) -> Result<(), RecordError> {
        let bad = |m: &str| Err(RecordError::Options(m.to_string()));
        if self.flush_every_bytes < FLUSH_EVERY_BYTES_MIN {
            return bad("flush-every must be at least 4 KiB");
        }
        if self.allocation == Allocation::Recycle {
            if self.recycle_pool.is_none() {
                return bad("allocation=recycle needs a pool directory (pool=DIR)");
            }
            if self.framing == Framing::Raw {
                return bad("allocation=recycle needs framing=framed: raw bytes cannot tell this lap's data from the last one's");
            }
        }
        if let Some(d) = &self.decoupled {
            if d.ring_bytes < 64 << 10 {
                return bad("the decoupled ring must be at least 64 KiB");
            }
            if d.ring_bytes > 16 << 30 {
                return bad("the decoupled ring must be at most 16 GiB");
            }
        }
        if let Some(p) = self.rt_priority {
            if !(1..=99).contains(&p) {
                return bad("rt-priority must be 1 to 99");
            }
        }
        Ok(())
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool, RecordError> {
    match value {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(RecordError::Options(format!(
            "{key}={value:?}: expected true or false"
        ))),
    }
}

fn parse_size(key: &str, value: &str) -> Result<u64, RecordError> {
    parse_bytes(value).map_err(|e| RecordError::Options(format!("{key}: {e}")))
}

fn parse_num<T: FromStr>(key: &str, value: &str) -> Result<T, RecordError> {
    value
        .parse()
        .map_err(|_| RecordError::Options(format!("{key}={value:?}: expected a number")))
}

impl FromStr for RecorderOptions {
    type Err = RecordError;

    /// Parses `key=value,key=value`: `allocation`, `flush`, `flush-every`, `flusher`, `framing`,
    /// `expected-size`, `pool`, `decoupled` (ring size), `overflow`, `mlockall`, `rt-priority`,
    /// `cpu`, `measure-writes`, `mapped`, `trace-slow` (a duration). Unnamed keys keep their defaults; an empty string is the default.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut o = RecorderOptions::default();
        let mut overflow = None;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| RecordError::Options(format!("{item:?}: expected key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "allocation" => o.allocation = value.parse()?,
                "flush" => o.flush = value.parse()?,
                "flush-every" => o.flush_every_bytes = parse_size(key, value)?,
                "flusher" => o.flusher = value.parse()?,
                "framing" => o.framing = value.parse()?,
                "expected-size" => o.expected_bytes = parse_size(key, value)?,
                "pool" => o.recycle_pool = Some(PathBuf::from(value)),
                "decoupled" => {
                    o.decoupled = Some(DecoupledOptions {
                        ring_bytes: parse_size(key, value)?,
                        overflow: Overflow::Block,
                    })
                }
                "overflow" => overflow = Some(value.parse::<Overflow>()?),
                "mlockall" => o.mlockall = parse_bool(key, value)?,
                "rt-priority" => o.rt_priority = Some(parse_num(key, value)?),
                "cpu" => o.cpu = Some(parse_num(key, value)?),
                "measure-writes" => o.measure_writes = parse_bool(key, value)?,
                "mapped" => o.mapped = parse_bool(key, value)?,
                "trace-slow" => {
                    o.trace_slow = Some(
                        parse_duration(value)
                            .map_err(|e| RecordError::Options(format!("{key}: {e}")))?,
                    )
                }
                _ => return Err(RecordError::Options(format!("unknown option {key:?}"))),
            }
        }
        if let Some(policy) = overflow {
            match o.decoupled.as_mut() {
                Some(d) => d.overflow = policy,
                None => {
                    return Err(RecordError::Options(
                        "overflow= needs decoupled=RING_SIZE".to_string(),
                    ))
                }
            }
        }
        o.validate()?;
        Ok(o)
    }
}

/// A byte count the way `parse_bytes` reads it back exactly: the largest binary unit that divides
/// it, else plain bytes.
fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

impl fmt::Display for RecorderOptions {
    /// The `key=value,...` spec that [`FromStr`] reads back to the same options (a pool path
    /// containing a comma cannot be spelled this way).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allocation={},flush={},flush-every={},flusher={},framing={},expected-size={}",
            self.allocation,
            self.flush,
            format_size(self.flush_every_bytes),
            self.flusher,
            self.framing,
            format_size(self.expected_bytes),
        )?;
        if let Some(pool) = &self.recycle_pool {
            write!(f, ",pool={}", pool.display())?;
        }
        if let Some(d) = &self.decoupled {
            write!(
                f,
                ",decoupled={},overflow={}",
                format_size(d.ring_bytes),
                d.overflow
            )?;
        }
        write!(f, ",mlockall={}", self.mlockall)?;
        if let Some(p) = self.rt_priority {
            write!(f, ",rt-priority={p}")?;
        }
        if let Some(cpu) = self.cpu {
            write!(f, ",cpu={cpu}")?;
        }
        write!(
            f,
            ",measure-writes={},mapped={}",
            self.measure_writes, self.mapped
        )?;
        if let Some(t) = self.trace_slow {
            write!(f, ",trace-slow={}ns", t.as_nanos())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_round_trip() {
        for a in Allocation::ALL {
            assert_eq!(a.name().parse::<Allocation>().unwrap(), *a);
        }
        for f in FlushMode::ALL {
            assert_eq!(f.to_string().parse::<FlushMode>().unwrap(), *f);
        }
        for o in Overflow::ALL {
            assert_eq!(o.to_string().parse::<Overflow>().unwrap(), *o);
        }
        let err = "sometimes".parse::<Flusher>().unwrap_err().to_string();
        assert!(err.contains("on, off"), "{err}");
    }

    #[test]
    fn spec_strings_set_every_option() {
        let o: RecorderOptions = "allocation=fallocate, flush=sync-file-range,flush-every=512KiB,\
            flusher=off,framing=raw,expected-size=10MiB,decoupled=4MiB,overflow=drop,mlockall=true,\
            rt-priority=50,cpu=1,measure-writes=yes,mapped=false,trace-slow=200us"
            .parse()
            .unwrap();
        assert_eq!(o.allocation, Allocation::Fallocate);
        assert_eq!(o.flush, FlushMode::SyncFileRange);
        assert_eq!(o.flush_every_bytes, 512 << 10);
        assert_eq!(o.flusher, Flusher::Off);
        assert_eq!(o.framing, Framing::Raw);
        assert_eq!(o.expected_bytes, 10 << 20);
        assert_eq!(
            o.decoupled,
            Some(DecoupledOptions {
                ring_bytes: 4 << 20,
                overflow: Overflow::Drop
            })
        );
        assert!(o.mlockall && o.measure_writes && !o.mapped);
        assert_eq!((o.rt_priority, o.cpu), (Some(50), Some(1)));
        assert_eq!(o.trace_slow, Some(Duration::from_micros(200)));
        assert_eq!(
            "".parse::<RecorderOptions>().unwrap(),
            RecorderOptions::default()
        );
    }

    #[test]
    fn bad_specs_name_the_problem() {
        for (spec, needle) in [
            ("colour=blue", "colour"),
            ("allocation", "key=value"),
            ("flush-every=lots", "flush-every"),
            ("flush-every=1KiB", "4 KiB"),
            ("overflow=drop", "decoupled"),
            ("allocation=recycle", "pool"),
            ("allocation=recycle,pool=/p,framing=raw", "framed"),
            ("rt-priority=0", "1 to 99"),
            ("mlockall=perhaps", "true or false"),
            ("decoupled=1KiB", "64 KiB"),
            ("trace-slow=200", "trace-slow"),
        ] {
            let err = spec.parse::<RecorderOptions>().unwrap_err().to_string();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }

    #[test]
    fn sizes_print_in_the_largest_exact_unit() {
        assert_eq!(format_size(2 << 20), "2MiB");
        assert_eq!(format_size(16 << 10), "16KiB");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(3 << 30), "3GiB");
    }

    fn any_options() -> impl Strategy<Value = RecorderOptions> {
        let enums = (
            prop::sample::select(Allocation::ALL),
            prop::sample::select(FlushMode::ALL),
            prop::sample::select(Flusher::ALL),
            prop::sample::select(Framing::ALL),
        );
        let decoupled = prop::option::of(
            (64u64 << 10..1 << 30, prop::sample::select(Overflow::ALL)).prop_map(
                |(ring_bytes, overflow)| DecoupledOptions {
                    ring_bytes,
                    overflow,
                },
            ),
        );
        let hygiene = (
            any::<bool>(),
            prop::option::of(1u8..=99),
            prop::option::of(0usize..1024),
            any::<bool>(),
            any::<bool>(),
            prop::option::of(0u64..1 << 40),
        );
        (
            enums,
            FLUSH_EVERY_BYTES_MIN..1 << 40,
            0u64..1 << 40,
            decoupled,
            hygiene,
        )
            .prop_map(
                |(
                    (allocation, flush, flusher, framing),
                    flush_every_bytes,
                    expected_bytes,
                    decoupled,
                    (mlockall, rt_priority, cpu, measure_writes, mapped, trace_slow),
                )| {
                    let recycle = allocation == Allocation::Recycle;
                    RecorderOptions {
                        allocation,
                        flush,
                        flush_every_bytes,
                        flusher,
                        // Recycle needs framed records and a pool; validate() says so.
                        framing: if recycle { Framing::Framed } else { framing },
                        expected_bytes,
                        recycle_pool: recycle.then(|| PathBuf::from("/var/tmp/pool=1 a")),
                        decoupled,
                        mlockall,
                        rt_priority,
                        cpu,
                        measure_writes,
                        mapped,
                        trace_slow: trace_slow.map(Duration::from_nanos),
                    }
                },
            )
    }

    proptest::proptest! {
        #[test]
        fn any_valid_options_round_trip_through_their_spec(o in any_options()) {
            let spec = o.to_string();
            let back: RecorderOptions = spec.parse().map_err(|e| {
                proptest::test_runner::TestCaseError::fail(format!("{spec}: {e}"))
            })?;
            proptest::prop_assert_eq!(back, o, "{}", spec);
        }
    }

    #[test]
    fn presets_round_trip_through_their_spec() {
        for o in [
            RecorderOptions::default(),
            RecorderOptions::conventional(),
            RecorderOptions::paper(),
        ] {
            assert_eq!(o.to_string().parse::<RecorderOptions>().unwrap(), o);
        }
        assert!(RecorderOptions::default()
            .to_string()
            .starts_with("allocation=zero-fill,flush=pipelined,flush-every=2MiB,"));
    }

    #[test]
    fn presets_match_the_paper() {
        let none = RecorderOptions::conventional();
        assert_eq!(
            (none.allocation, none.flush, none.flusher),
            (Allocation::Append, FlushMode::Fdatasync, Flusher::On)
        );
        let all = RecorderOptions::paper();
        assert_eq!(
            (all.allocation, all.flush, all.flusher),
            (
                Allocation::Fallocate,
                FlushMode::SyncFileRange,
                Flusher::Off
            )
        );
        let d = RecorderOptions::default();
        assert_eq!(
            (d.allocation, d.flush, d.flusher, d.framing),
            (
                Allocation::ZeroFill,
                FlushMode::Pipelined,
                Flusher::On,
                Framing::Framed
            )
        );
    }
}
