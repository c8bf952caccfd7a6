//! `tailbound doctor`: what a directory's file system, its device and the kernel's writeback
//! settings mean for `write()` latency, and what to change.
//!
//! Reads `/proc/self/mountinfo`, `/proc/sys/vm/*`, `/sys/dev/block/*` and `statfs`; its only write
//! is the optional probe, one temporary file in the directory, removed afterwards. The parsers are
//! pure functions over text, so odd input is "unknown", never a panic.

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::record::hygiene::{self, Hygiene};
use crate::sys::file::{sync_file_range, SyncRange};
use crate::sys::fs::{cachestat, statfs};
use crate::units::Bytes;

/// Why the diagnosis could not be made at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DoctorError {
    #[error("{path}: {source}")]
    Path {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no mount found for it in /proc/self/mountinfo")]
    NoMount { path: PathBuf },
}

/// What to look at.
#[derive(Debug, Clone, Copy)]
pub struct DoctorOptions {
    /// Run the live `sync_file_range` probe (writes and removes a 4 MiB file).
    pub probe: bool,
}

/// One line of `/proc/self/mountinfo`, the parts that matter here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MountInfo {
    pub mount_point: String,
    /// `major:minor` of the device.
    pub device_number: String,
    pub fs_type: String,
    pub source: String,
    /// Per-mount and per-superblock options together.
    pub options: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one mountinfo line; `None` if it is not one.
pub fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 3 {
        return None;
    }
    let mut options: Vec<String> = l[5].split(',').map(str::to_string).collect();
    for o in r[2].split(',') {
        if !options.iter().any(|x| x == o) {
            options.push(o.to_string());
        }
    }
    Some(MountInfo {
        mount_point: unescape(l[4]),
        device_number: l[2].to_string(),
        fs_type: r[0].to_string(),
        source: unescape(r[1]),
        options,
    })
}

/// The mount holding `path` (already canonical): the longest mount point that contains it, the
/// last one listed winning among equals (it is mounted on top).
pub fn find_mount(mountinfo: &str, path: &Path) -> Option<MountInfo> {
    let mut best: Option<MountInfo> = None;
    for m in mountinfo.lines().filter_map(parse_mountinfo_line) {
        let mp = Path::new(&m.mount_point);
        if path.starts_with(mp)
            && best
                .as_ref()
                .is_none_or(|b| m.mount_point.len() >= b.mount_point.len())
        {
            best = Some(m);
        }
    }
    best
}

/// The selected scheduler in a `queue/scheduler` line such as `none [mq-deadline] kyber bfq`.
pub fn parse_scheduler(line: &str) -> Option<String> {
    let start = line.find('[')?;
    let end = line[start..].find(']')? + start;
    Some(line[start + 1..end].to_string())
}

/// The kernel's writeback settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Writeback {
    pub dirty_ratio: Option<u64>,
    pub dirty_background_ratio: Option<u64>,
    pub dirty_bytes: Option<u64>,
    pub dirty_background_bytes: Option<u64>,
    /// In 1/100 s.
    pub dirty_expire_centisecs: Option<u64>,
    /// In 1/100 s.
    pub dirty_writeback_centisecs: Option<u64>,
    /// Ratios 100 and expiry of 300000 or more: the paper's "flusher off".
    pub flusher_off: bool,
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Reads the writeback settings from a `/proc/sys/vm`-like directory.
pub fn read_writeback(vm: &Path) -> Writeback {
    let get = |n: &str| read_u64(&vm.join(n));
    let dirty_ratio = get("dirty_ratio");
    let dirty_background_ratio = get("dirty_background_ratio");
    let dirty_expire_centisecs = get("dirty_expire_centisecs");
    Writeback {
        dirty_ratio,
        dirty_background_ratio,
        dirty_bytes: get("dirty_bytes"),
        dirty_background_bytes: get("dirty_background_bytes"),
        dirty_expire_centisecs,
        dirty_writeback_centisecs: get("dirty_writeback_centisecs"),
        flusher_off: dirty_ratio == Some(100)
            && dirty_background_ratio == Some(100)
            && dirty_expire_centisecs.is_some_and(|e| e >= 300_000),
    }
}

/// The block device behind the mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    pub name: String,
    pub scheduler: Option<String>,
    pub rotational: Option<bool>,
    /// For a loop device, the file behind it.
    pub backing_file: Option<String>,
}

fn read_device(device_number: &str) -> Option<Device> {
    let sys = PathBuf::from(format!("/sys/dev/block/{device_number}"));
    let real = std::fs::canonicalize(&sys).ok()?;
    let name = real.file_name()?.to_string_lossy().into_owned();
    // A partition has no queue of its own: use its disk's.
    let queue_dir = if real.join("partition").exists() {
        real.parent()?.join("queue")
    } else {
        real.join("queue")
    };
    let scheduler = std::fs::read_to_string(queue_dir.join("scheduler"))
        .ok()
        .and_then(|l| parse_scheduler(&l));
    let rotational = read_u64(&queue_dir.join("rotational")).map(|r| r == 1);
    let backing_file = std::fs::read_to_string(real.join("loop/backing_file"))
        .ok()
        .map(|s| s.trim().to_string());
    Some(Device {
        name,
        scheduler,
        rotational,
        backing_file,
    })
}

/// What the live probe found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeResult {
    /// Dirty pages went to writeback or were cleaned by `sync_file_range`.
    StartsWriteback,
    /// Nothing changed: the data lives in memory (tmpfs) or the call is a no-op here.
    NoEffect,
    /// The probe could not tell, with the reason.
    Unknown(String),
    /// Not run (`--no-probe`, or the directory is not writable).
    Skipped(String),
}

/// Free space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Space {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub available_bytes: u64,
}

/// One piece of advice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    pub topic: &'static str,
    pub message: String,
    pub command: Option<String>,
}

/// Everything `doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    pub path: String,
    pub mount: MountInfo,
    /// `noatime`, `relatime` or `strictatime`.
    pub atime: &'static str,
    pub lazytime: bool,
    /// ext4's `data=` mode (ordered when not shown).
    pub journal_mode: Option<String>,
    pub device: Option<Device>,
    pub writeback: Writeback,
    pub space: Space,
    pub sync_file_range: ProbeResult,
    pub root: bool,
    /// The real-time settings a recorder may use here.
    pub hygiene: Hygiene,
    pub advice: Vec<Advice>,
}

fn atime_mode(options: &[String]) -> &'static str {
    if options.iter().any(|o| o == "noatime") {
        "noatime"
    } else if options.iter().any(|o| o == "strictatime") {
        "strictatime"
    } else {
        "relatime"
    }
}

const PROBE_BYTES: u64 = 4 << 20;

/// Writes 4 MiB to a temporary file in `dir`, and asks whether `sync_file_range(WRITE)` moves its
/// dirty pages to writeback (or clean) — `cachestat(2)` counts them.
fn probe(dir: &Path) -> ProbeResult {
    let mut tmp = match tempfile::Builder::new()
        .prefix(".tailbound-doctor-")
        .tempfile_in(dir)
    {
        Ok(t) => t,
        Err(e) => return ProbeResult::Skipped(format!("cannot write here: {e}")),
    };
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..PROBE_BYTES / (1 << 20) {
        if let Err(e) = tmp.write_all(&chunk) {
            return ProbeResult::Unknown(format!("writing the probe file: {e}"));
        }
    }
    let file: &File = tmp.as_file();
    let before = match cachestat(file, 0, PROBE_BYTES) {
        Ok(c) => c,
        Err(e) => return ProbeResult::Unknown(format!("cachestat is not available: {e}")),
    };
    if before.nr_dirty == 0 {
        return ProbeResult::NoEffect;
    }
    if let Err(e) = sync_file_range(file, 0, PROBE_BYTES, SyncRange::StartWrite) {
        return ProbeResult::Unknown(format!("sync_file_range failed: {e}"));
    }
    let after = match cachestat(file, 0, PROBE_BYTES) {
        Ok(c) => c,
        Err(e) => return ProbeResult::Unknown(format!("cachestat failed: {e}")),
    };
    if after.nr_dirty < before.nr_dirty {
        ProbeResult::StartsWriteback
    } else {
        ProbeResult::NoEffect
    }
}

fn advise(d: &Diagnosis) -> Vec<Advice> {
    let mut a = Vec::new();
    let mp = &d.mount.mount_point;
    let memory_fs = matches!(d.mount.fs_type.as_str(), "tmpfs" | "ramfs");
    if memory_fs {
        a.push(Advice {
            topic: "durability",
            message: format!(
                "{} keeps data in memory: a recording here is lost at power off or reboot",
                d.mount.fs_type
            ),
            command: None,
        });
    } else {
        if !d.lazytime || d.atime != "noatime" {
            a.push(Advice {
                topic: "timestamps",
                message: "mount with noatime,lazytime so timestamp updates stay out of write() and the journal".into(),
                command: Some(format!("mount -o remount,noatime,lazytime {mp}")),
            });
        }
        if d.journal_mode.as_deref() == Some("journal") {
            a.push(Advice {
                topic: "journal",
                message: "data=journal writes every block twice; data=ordered is the usual choice for recordings".into(),
                command: None,
            });
        }
        if d.mount.options.iter().any(|o| o == "discard") {
            a.push(Advice {
                topic: "discard",
                message: "online discard adds work to every commit; prefer periodic fstrim".into(),
                command: Some("systemctl enable --now fstrim.timer".into()),
            });
        }
    }
    if !d.writeback.flusher_off && !memory_fs {
        a.push(Advice {
            topic: "flusher",
            message: "the kernel flusher is on: it can write back beside a recording; tailbound can turn it off for the recording and restore it".into(),
            command: Some("tailbound record --flusher off ... (as root), or the default --allocation zero-fill --flush pipelined without root".into()),
        });
    }
    if d.writeback.flusher_off {
        a.push(Advice {
            topic: "flusher",
            message: "the flusher is off system-wide (dirty ratios 100): fine during a recording, but if no recording runs, a killed recorder may have left it so".into(),
            command: Some("sysctl vm.dirty_ratio=20 vm.dirty_background_ratio=10 vm.dirty_expire_centisecs=3000".into()),
        });
    }
    match &d.sync_file_range {
        ProbeResult::NoEffect if !memory_fs => a.push(Advice {
            topic: "flushing",
            message: "sync_file_range did not start writeback here: use --flush fdatasync".into(),
            command: None,
        }),
        _ => {}
    }
    if let Some(dev) = &d.device {
        if dev.rotational == Some(true) && dev.scheduler.as_deref() == Some("none") {
            a.push(Advice {
                topic: "scheduler",
                message: format!("{} is rotational with no I/O scheduler: mq-deadline bounds how long a write can wait", dev.name),
                command: Some(format!("echo mq-deadline > /sys/block/{}/queue/scheduler", dev.name)),
            });
        }
    }
    let h = &d.hygiene;
    if h.rt_priority.permitted || h.lock_memory.permitted {
        let mut flags = Vec::new();
        if h.rt_priority.permitted {
            flags.push("--rt-priority 50".to_string());
        }
        if h.lock_memory.permitted {
            flags.push("--mlockall".to_string());
        }
        if let Some(cpu) = h.suggested_cpu {
            flags.push(format!("--cpu {cpu}"));
        }
        a.push(Advice {
            topic: "real-time",
            message: "this machine permits the recorder's real-time settings: a recording thread in SCHED_FIFO, pinned, with its memory locked, waits for no other thread and no page".into(),
            command: Some(format!("tailbound record {} ...", flags.join(" "))),
        });
    }
    let avail = d.space.available_bytes;
    if avail < (1 << 30) || avail.saturating_mul(10) < d.space.total_bytes {
        a.push(Advice {
            topic: "space",
            message: format!(
                "only {} available: preallocation and recycle pools need room",
                Bytes(avail)
            ),
            command: None,
        });
    }
    a
}

/// Diagnoses the directory (or file) at `path`.
pub fn diagnose(path: &Path, options: &DoctorOptions) -> Result<Diagnosis, DoctorError> {
    let canonical = std::fs::canonicalize(path).map_err(|source| DoctorError::Path {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = if canonical.is_dir() {
        canonical.clone()
    } else {
        canonical
            .parent()
            .map_or(canonical.clone(), Path::to_path_buf)
    };
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| DoctorError::Path {
            path: PathBuf::from("/proc/self/mountinfo"),
            source,
        })?;
    let mount = find_mount(&mountinfo, &canonical).ok_or_else(|| DoctorError::NoMount {
        path: canonical.clone(),
    })?;
    let st = statfs(&dir).map_err(|source| DoctorError::Path {
        path: dir.clone(),
        source,
    })?;
    let journal_mode = if mount.fs_type == "ext4" || mount.fs_type == "ext3" {
        Some(
            mount
                .options
                .iter()
                .find_map(|o| o.strip_prefix("data=").map(str::to_string))
                .unwrap_or_else(|| "ordered".to_string()),
        )
    } else {
        None
    };
    let device = if mount.device_number.starts_with("0:") {
        None
    } else {
        read_device(&mount.device_number)
    };
    let sync_file_range = if options.probe {
        probe(&dir)
    } else {
        ProbeResult::Skipped("--no-probe".into())
    };
    let mut d = Diagnosis {
        path: canonical.display().to_string(),
        atime: atime_mode(&mount.options),
        lazytime: mount.options.iter().any(|o| o == "lazytime"),
        journal_mode,
        device,
        writeback: read_writeback(Path::new("/proc/sys/vm")),
        space: Space {
            total_bytes: st.blocks_total * st.block_size,
            free_bytes: st.blocks_free * st.block_size,
            available_bytes: st.blocks_available * st.block_size,
        },
        sync_file_range,
        root: crate::sys::proc::is_root(),
        hygiene: hygiene::probe(),
        advice: Vec::new(),
        mount,
    };
    d.advice = advise(&d);
    Ok(d)
}

fn opt<T: fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("unknown".to_string(), |v| v.to_string())
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "tailbound doctor: {}", self.path)?;
        writeln!(f, "\nFile system")?;
        writeln!(
            f,
            "  {} on {} ({}), mounted at {}",
            self.mount.fs_type, self.mount.source, self.mount.device_number, self.mount.mount_point
        )?;
        writeln!(f, "  options: {}", self.mount.options.join(","))?;
        writeln!(
            f,
            "  atime: {}, lazytime: {}{}",
            self.atime,
            if self.lazytime { "yes" } else { "no" },
            self.journal_mode
                .as_ref()
                .map_or(String::new(), |j| format!(", journal: data={j}"))
        )?;
        writeln!(f, "\nDevice")?;
        match &self.device {
            Some(d) => {
                writeln!(
                    f,
                    "  {}: scheduler {}, {}",
                    d.name,
                    opt(&d.scheduler),
                    match d.rotational {
                        Some(true) => "rotational",
                        Some(false) => "non-rotational",
                        None => "rotational: unknown",
                    }
                )?;
                if let Some(b) = &d.backing_file {
                    writeln!(f, "  loop device backed by {b}")?;
                }
            }
            None => writeln!(f, "  no block device ({})", self.mount.fs_type)?,
        }
        let w = &self.writeback;
        writeln!(f, "\nWriteback (vm.*)")?;
        writeln!(
            f,
            "  dirty_ratio {}  dirty_background_ratio {}  dirty_bytes {}  dirty_background_bytes {}",
            opt(&w.dirty_ratio),
            opt(&w.dirty_background_ratio),
            opt(&w.dirty_bytes),
            opt(&w.dirty_background_bytes)
        )?;
        writeln!(
            f,
            "  dirty_expire_centisecs {} (1/100 s)  dirty_writeback_centisecs {}",
            opt(&w.dirty_expire_centisecs),
            opt(&w.dirty_writeback_centisecs)
        )?;
        writeln!(
            f,
            "  flusher: {}",
            if w.flusher_off {
                "off (paper's F_OFF)"
            } else {
                "on"
            }
        )?;
        writeln!(f, "\nSpace")?;
        writeln!(
            f,
            "  {} total, {} free, {} available",
            Bytes(self.space.total_bytes),
            Bytes(self.space.free_bytes),
            Bytes(self.space.available_bytes)
        )?;
        writeln!(f, "\nsync_file_range probe")?;
        let probe = match &self.sync_file_range {
            ProbeResult::StartsWriteback => "starts writeback here".to_string(),
            ProbeResult::NoEffect => "no effect here".to_string(),
            ProbeResult::Unknown(why) => format!("unknown: {why}"),
            ProbeResult::Skipped(why) => format!("skipped: {why}"),
        };
        writeln!(f, "  {probe}")?;
        writeln!(
            f,
            "\nRoot: {} (needed for --flusher off and loop mounts)",
            if self.root { "yes" } else { "no" }
        )?;
        writeln!(
            f,
            "\nReal-time hygiene (tailbound record; each is optional)"
        )?;
        write!(f, "{}", self.hygiene)?;
        writeln!(f, "\nAdvice")?;
        if self.advice.is_empty() {
            writeln!(f, "  nothing to change")?;
        }
        for a in &self.advice {
            writeln!(f, "  - [{}] {}", a.topic, a.message)?;
            if let Some(c) = &a.command {
                writeln!(f, "      {c}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
30 27 0:30 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw
41 27 7:3 / /mnt/my\\040disk rw,noatime master:4 - ext4 /dev/loop3 rw,lazytime,data=journal
bogus line without separator
";

    #[test]
    fn mountinfo_lines_parse_with_optional_fields_and_escapes() {
        let m = parse_mountinfo_line(MOUNTINFO.lines().nth(3).unwrap()).unwrap();
        assert_eq!(m.mount_point, "/mnt/my disk");
        assert_eq!(m.device_number, "7:3");
        assert_eq!(m.fs_type, "ext4");
        assert_eq!(m.source, "/dev/loop3");
        assert!(m.options.contains(&"noatime".to_string()));
        assert!(m.options.contains(&"lazytime".to_string()));
        assert!(m.options.contains(&"data=journal".to_string()));
        assert!(parse_mountinfo_line("bogus line without separator").is_none());
        assert!(parse_mountinfo_line("").is_none());
        assert!(parse_mountinfo_line(" - ").is_none());
        assert_eq!(unescape("a\\040b\\134c\\0"), "a b\\c\\0");
    }

    #[test]
    fn the_longest_mount_point_wins() {
        let m = find_mount(MOUNTINFO, Path::new("/mnt/my disk/rec")).unwrap();
        assert_eq!(m.mount_point, "/mnt/my disk");
        let m = find_mount(MOUNTINFO, Path::new("/dev/shm/x")).unwrap();
        assert_eq!(m.fs_type, "tmpfs");
        let m = find_mount(MOUNTINFO, Path::new("/home/u")).unwrap();
        assert_eq!(m.mount_point, "/");
        assert!(find_mount("", Path::new("/")).is_none());
    }

    #[test]
    fn scheduler_lines_parse() {
        assert_eq!(
            parse_scheduler("none [mq-deadline] kyber bfq\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(
            parse_scheduler("[none] mq-deadline").as_deref(),
            Some("none")
        );
        assert_eq!(parse_scheduler("none"), None);
        assert_eq!(parse_scheduler("]["), None);
    }

    #[test]
    fn writeback_values_are_read_and_flusher_off_detected() {
        let dir = tempfile::tempdir().unwrap();
        for (n, v) in [
            ("dirty_ratio", "100"),
            ("dirty_background_ratio", "100"),
            ("dirty_expire_centisecs", "300000"),
            ("dirty_bytes", "0"),
            ("dirty_writeback_centisecs", "garbage"),
        ] {
            std::fs::write(dir.path().join(n), format!("{v}\n")).unwrap();
        }
        let w = read_writeback(dir.path());
        assert!(w.flusher_off);
        assert_eq!(w.dirty_bytes, Some(0));
        assert_eq!(w.dirty_writeback_centisecs, None);
        assert_eq!(w.dirty_background_bytes, None);
    }

    #[test]
    fn a_disk_directory_is_diagnosed_and_its_probe_starts_writeback() {
        let _serial = crate::VM_SYSCTL_TEST_LOCK
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let d = diagnose(dir.path(), &DoctorOptions { probe: true }).unwrap();
        let vm = read_writeback(Path::new("/proc/sys/vm"));
        assert_eq!(d.writeback, vm);
        assert!(d.space.total_bytes > 0);
        if d.device.is_some() && d.mount.fs_type != "tmpfs" {
            assert_eq!(d.sync_file_range, ProbeResult::StartsWriteback, "{d}");
        }
        // The probe file is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let text = d.to_string();
        assert!(text.contains("Writeback"), "{text}");
    }

    #[test]
    fn tmpfs_has_no_device_and_loses_data_at_power_off() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let d = diagnose(dir.path(), &DoctorOptions { probe: true }).unwrap();
        assert_eq!(d.mount.fs_type, "tmpfs");
        assert!(d.device.is_none());
        assert_eq!(d.sync_file_range, ProbeResult::NoEffect);
        assert!(
            d.advice.iter().any(|a| a.message.contains("power off")),
            "{d}"
        );
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it() {
        let e = diagnose(
            Path::new("/nonexistent/tb"),
            &DoctorOptions { probe: false },
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tb"), "{e}");
    }
}
