//! Device calibration for the scheduler's cost model: times `O_DIRECT` reads and writes of sizes
//! from 4 KiB to 64 MiB, fits a per-I/O plus per-byte cost to the medians (reads and writes apart),
//! and picks `max_io` as the largest measured size whose median service time stays within the
//! latency goal. Where it may write, it also times flushes after 0 to 16 MiB written, for what a
//! flush costs per byte the device cached. `tailbound calibrate` is the front end.
//!
//! Safety of the data: reads are always fine; writes go only to a file this run created (and
//! removes again), or to an existing file or device when the caller says it is scratch. Without
//! that, writes are not measured and the write half of the profile stays conservative.
//!
//! Owns the calibration run; the profile format is [`DeviceProfile`].

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{DeviceProfile, Op};
use crate::dev::file::FileDevice;
use crate::dev::{Device, BLOCK_SIZE};

/// The sizes measured by default, 4 KiB to 64 MiB by factors of 4.
pub const SIZES_DEFAULT: [u64; 9] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
];

/// Bytes written before each timed flush (those above the largest size measured are left out).
pub const FLUSH_CACHED: [u64; 4] = [0, 1 << 20, 4 << 20, 16 << 20];

/// What to calibrate and how.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    pub path: PathBuf,
    pub latency_goal: Duration,
    /// The existing file or device may be overwritten.
    pub write_scratch: bool,
    /// Sizes to time (multiples of 4 KiB).
    pub sizes: Vec<u64>,
    /// Timed requests per size and operation (after one untimed warm-up); the median is kept.
    pub samples: usize,
    /// Size of the file made when `path` does not exist.
    pub create_bytes: u64,
}

impl CalibrateOptions {
    pub fn new(path: impl Into<PathBuf>) -> CalibrateOptions {
        CalibrateOptions {
            path: path.into(),
            latency_goal: Duration::from_millis(50),
            write_scratch: false,
            sizes: SIZES_DEFAULT.to_vec(),
            samples: 5,
            create_bytes: 256 << 20,
        }
    }
}

/// One measured size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub op: Op,
    /// Bytes per request; for a flush, bytes written since the previous flush.
    pub size: u64,
    pub median_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl Point {
    /// The point of `samples` timed requests (nanoseconds, in any order).
    fn from_times(op: Op, size: u64, mut samples: Vec<u64>) -> Point {
        samples.sort_unstable();
        Point {
            op,
            size,
            median_ns: samples[samples.len() / 2],
            min_ns: samples[0],
            max_ns: samples[samples.len() - 1],
        }
    }
}

/// Runs `once` an untimed warm-up plus `samples` times (passing the run's number, the warm-up's
/// 0) and returns the nanoseconds each timed run reported.
fn timed_runs(
    samples: usize,
    mut once: impl FnMut(u64) -> io::Result<u64>,
) -> io::Result<Vec<u64>> {
    once(0)?;
    (1..=samples as u64).map(once).collect()
}

fn ns_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The outcome of [`calibrate`].
#[derive(Debug, Clone)]
pub struct Calibration {
    pub profile: DeviceProfile,
    pub points: Vec<Point>,
    /// Writes were measured (otherwise the write half of the profile is conservative).
    pub wrote: bool,
    /// `O_DIRECT` was in effect (tmpfs, for one, refuses it).
    pub direct: bool,
    /// The file was made by this run (and has been removed).
    pub created: bool,
}

/// Least-squares fit of `t = io + byte * size` weighted by `1/t²`, so small and large sizes count
/// alike in relative terms. Returns `(io_ns, byte_ns)`, both clamped at zero.
pub fn fit(points: &[(u64, u64)]) -> (f64, f64) {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(size, ns) in points {
        let (x, y) = (size as f64, ns.max(1) as f64);
        let w = 1.0 / (y * y);
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    if points.len() < 2 || det.abs() < f64::EPSILON * sw * sxx {
        let mean = if sw > 0.0 { sy / sw } else { 0.0 };
        return (mean.max(0.0), 0.0);
    }
    let byte = (sw * sxy - sx * sy) / det;
    let io = (sy - byte * sx) / sw;
    if byte < 0.0 {
        return ((sy / sw).max(0.0), 0.0);
    }
    (io.max(0.0), byte)
}

/// The largest size whose median is within `goal`, or the smallest size measured if none is.
pub fn pick_max_io(points: &[Point], op: Op, goal: Duration) -> Option<u64> {
    let goal_ns = u64::try_from(goal.as_nanos()).unwrap_or(u64::MAX);
    let mine = points.iter().filter(|p| p.op == op);
    mine.clone()
        .filter(|p| p.median_ns <= goal_ns)
        .map(|p| p.size)
        .max()
        .or_else(|| mine.map(|p| p.size).min())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Removes the file it made when dropped, so an error midway leaves nothing behind.
struct MadeFile(Option<PathBuf>);

impl Drop for MadeFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Runs a calibration; `progress` is called after each size is measured.
pub fn calibrate(
    opts: &CalibrateOptions,
    mut progress: impl FnMut(&Point),
) -> io::Result<Calibration> {
    if opts.sizes.is_empty() || opts.sizes.iter().any(|s| *s == 0 || s % BLOCK_SIZE != 0) {
        return Err(invalid(format!(
            "calibrate: sizes must be positive multiples of {BLOCK_SIZE}"
        )));
    }
    let samples = opts.samples.max(1);
    let path = &opts.path;
    let exists = path.exists();
    let mut made = MadeFile(None);
    let dev = if exists {
        FileDevice::open(path)?
    } else {
        made.0 = Some(path.clone());
        FileDevice::create(path, opts.create_bytes)?
    };
    let may_write = !exists || opts.write_scratch;
    let mut points = Vec::new();
    let mut record = |point: Point| {
        progress(&point);
        points.push(point);
    };
    let mut ops = vec![Op::Read];
    if may_write {
        ops.insert(0, Op::Write);
    }
    for &op in &ops {
        for &size in &opts.sizes {
            if size > dev.len() {
                continue;
            }
            let mut buf = vec![0u8; size as usize];
            if op == Op::Write {
                fastrand::Rng::with_seed(size).fill(&mut buf);
            }
            let slots = dev.len() / size;
            let times = timed_runs(samples, |k| {
                // Spread requests over the target so no two in a row touch the same place.
                let offset = (k * 7919) % slots * size;
                let start = Instant::now();
                match op {
                    Op::Write => dev.write_at(offset, &buf)?,
                    _ => dev.read_at(offset, &mut buf)?,
                }
                Ok(ns_since(start))
            })?;
            record(Point::from_times(op, size, times));
        }
    }
    if may_write {
        let largest = opts.sizes.iter().copied().max().unwrap_or(0).min(dev.len());
        let chunk = (1u64 << 20).min(largest.max(BLOCK_SIZE));
        let buf = vec![0x5au8; chunk as usize];
        let slots = (dev.len() / chunk).max(1);
        let mut slot = 0u64;
        dev.flush()?;
        for cached in FLUSH_CACHED.into_iter().filter(|&c| c <= largest) {
            let times = timed_runs(samples, |_| {
                let mut written = 0;
                while written < cached {
                    slot = (slot + 7919) % slots;
                    dev.write_at(slot * chunk, &buf)?;
                    written += chunk;
                }
                let start = Instant::now();
                dev.flush()?;
                Ok(ns_since(start))
            })?;
            record(Point::from_times(Op::Flush, cached, times));
        }
    }
    let direct = dev.direct();
    drop(dev);
    let created = made.0.is_some();
    drop(made);
    Ok(Calibration {
        profile: profile_from(path, &points, opts.latency_goal),
        points,
        wrote: may_write,
        direct,
        created,
    })
}

/// Builds a profile from measured points; an operation with no points keeps the conservative
/// values.
pub fn profile_from(path: &Path, points: &[Point], goal: Duration) -> DeviceProfile {
    let mut p = DeviceProfile::conservative();
    p.device = path.display().to_string();
    p.latency_goal_ns = u64::try_from(goal.as_nanos()).unwrap_or(u64::MAX);
    let of = |op| -> Vec<(u64, u64)> {
        points
            .iter()
            .filter(|q| q.op == op)
            .map(|q| (q.size, q.median_ns))
            .collect()
    };
    let reads = of(Op::Read);
    if !reads.is_empty() {
        (p.read_io_ns, p.read_byte_ns) = fit(&reads);
        p.max_io_read = pick_max_io(points, Op::Read, goal).unwrap_or(p.max_io_read);
    }
    let writes = of(Op::Write);
    if !writes.is_empty() {
        (p.write_io_ns, p.write_byte_ns) = fit(&writes);
        p.max_io_write = pick_max_io(points, Op::Write, goal).unwrap_or(p.max_io_write);
    }
    let flushes = of(Op::Flush);
    if !flushes.is_empty() {
        (p.flush_ns, p.flush_byte_ns) = fit(&flushes);
    }
    p
}

/// The default place to store the profile of `target`: the profile directory, with
/// [`profile_file_name`].
pub fn default_profile_path(target: &Path) -> Option<PathBuf> {
    Some(DeviceProfile::default_dir()?.join(profile_file_name(target)))
}

/// The file name of `target`'s profile: its absolute path flattened (`/dev/sdb` →
/// `dev_sdb.json`).
pub fn profile_file_name(target: &Path) -> String {
    let abs = std::path::absolute(target).unwrap_or_else(|_| target.to_path_buf());
    let name: String = abs
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}.json")
}

/// The profile stored for `target` at its default place, or the conservative one if there is
/// none (or it cannot be read).
pub fn profile_for(target: &Path) -> DeviceProfile {
    profile_and_source(target).0
}

/// Where the profile the scheduler takes for a target came from.
#[derive(Debug, Clone, PartialEq)]
pub enum ProfileSource {
    /// Read from this file.
    Stored(PathBuf),
    /// None is stored at this place (`None`: no profile directory, for want of `HOME` and
    /// `XDG_CONFIG_HOME`); the conservative profile is used.
    Missing(Option<PathBuf>),
    /// A file is there but could not be used (the reason); the conservative profile is used.
    Unreadable(PathBuf, String),
}

/// [`profile_for`], and where the profile came from (for reports).
pub fn profile_and_source(target: &Path) -> (DeviceProfile, ProfileSource) {
    let Some(path) = default_profile_path(target) else {
        return (DeviceProfile::conservative(), ProfileSource::Missing(None));
    };
    if !path.exists() {
        return (
            DeviceProfile::conservative(),
            ProfileSource::Missing(Some(path)),
        );
    }
    match DeviceProfile::load(&path) {
        Ok(p) => (p, ProfileSource::Stored(path)),
        Err(e) => (
            DeviceProfile::conservative(),
            ProfileSource::Unreadable(path, e.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_an_exact_linear_cost() {
        let points: Vec<(u64, u64)> = SIZES_DEFAULT.iter().map(|&s| (s, 80_000 + 3 * s)).collect();
        let (io, byte) = fit(&points);
        assert!((io - 80_000.0).abs() < 1.0, "{io}");
        assert!((byte - 3.0).abs() < 1e-6, "{byte}");
    }

    #[test]
    fn max_io_is_the_largest_size_within_the_goal() {
        let pts: Vec<Point> = SIZES_DEFAULT
            .iter()
            .map(|&s| Point {
                op: Op::Read,
                size: s,
                median_ns: 100_000 + 4 * s,
                min_ns: 0,
                max_ns: 0,
            })
            .collect();
        // 16 MiB takes 67 ms, 4 MiB 16.9 ms.
        assert_eq!(
            pick_max_io(&pts, Op::Read, Duration::from_millis(50)),
            Some(4 << 20)
        );
        assert_eq!(
            pick_max_io(&pts, Op::Read, Duration::from_millis(300)),
            Some(64 << 20)
        );
        assert_eq!(
            pick_max_io(&pts, Op::Read, Duration::from_micros(1)),
            Some(4 << 10)
        );
        assert_eq!(
            pick_max_io(&pts, Op::Write, Duration::from_millis(50)),
            None
        );
    }

    fn small(path: &Path) -> CalibrateOptions {
        CalibrateOptions {
            sizes: vec![4 << 10, 64 << 10, 1 << 20],
            samples: 3,
            create_bytes: 8 << 20,
            ..CalibrateOptions::new(path)
        }
    }

    #[test]
    fn a_file_it_creates_is_measured_both_ways_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("scratch");
        let mut seen = 0;
        let c = calibrate(&small(&path), |_| seen += 1).expect("calibrate");
        assert!(c.created && c.wrote);
        assert_eq!(seen, 8);
        assert_eq!(c.points.len(), 8);
        // Flushes after nothing and after 1 MiB written (the larger amounts exceed the largest
        // size measured).
        let flushes: Vec<u64> = c
            .points
            .iter()
            .filter(|p| p.op == Op::Flush)
            .map(|p| p.size)
            .collect();
        assert_eq!(flushes, [0, 1 << 20]);
        assert!(!path.exists(), "the scratch file is removed");
        c.profile.validate().expect("valid profile");
        assert_eq!(c.profile.device, path.display().to_string());
    }

    #[test]
    fn an_existing_file_is_only_read_unless_it_is_scratch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let c = calibrate(&small(&path), |_| {}).expect("calibrate");
        assert!(!c.wrote && !c.created);
        assert!(c.points.iter().all(|p| p.op == Op::Read));
        let conservative = DeviceProfile::conservative();
        assert_eq!(c.profile.write_io_ns, conservative.write_io_ns);
        assert_eq!(c.profile.max_io_write, conservative.max_io_write);
        assert!(
            std::fs::read(&path).expect("read") == data,
            "data untouched"
        );
        let c = calibrate(
            &CalibrateOptions {
                write_scratch: true,
                ..small(&path)
            },
            |_| {},
        )
        .expect("calibrate");
        assert!(c.wrote && c.points.iter().any(|p| p.op == Op::Write));
        assert!(path.exists(), "a scratch file it did not make is kept");
    }

    #[test]
    fn default_profile_path_flattens_the_target() {
        let p =
            default_profile_path(Path::new("/dev/sdb")).expect("HOME or XDG_CONFIG_HOME is set");
        assert_eq!(p.file_name().and_then(|n| n.to_str()), Some("dev_sdb.json"));
        assert!(p
            .parent()
            .is_some_and(|d| d.ends_with("tailbound/profiles")));
    }
}
