//! What real-time settings this machine permits a recorder: locking memory, prefaulting windows
//! ahead, pinning to a CPU with the flush thread on another, SCHED_FIFO, and background threads that
//! never preempt the recording thread. `tailbound doctor` reports it; the demo uses it.
//!
//! Each setting is tried for real on a short-lived thread or undone at once, so probing changes
//! nothing for the caller.

use std::fmt;

use serde::Serialize;

use crate::sys::mmap::SharedMapping;
use crate::sys::proc;

/// Whether a setting works here, and why not when it does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Permit {
    pub permitted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

impl Permit {
    fn from(r: std::io::Result<()>, needs: &str) -> Permit {
        match r {
            Ok(()) => Permit {
                permitted: true,
                why_not: None,
            },
            Err(e) => Permit {
                permitted: false,
                why_not: Some(format!("{e} ({needs})")),
            },
        }
    }
}

impl fmt::Display for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why_not {
            None => write!(f, "yes"),
            Some(why) => write!(f, "no: {why}"),
        }
    }
}

/// The machine's answer for each setting.
#[derive(Debug, Clone, Serialize)]
pub struct Hygiene {
    /// `mlockall` (`--mlockall`): the ring and the windows ahead stay resident.
    pub lock_memory: Permit,
    /// `RLIMIT_MEMLOCK` in bytes; `None` when unlimited.
    pub memlock_limit: Option<u64>,
    /// `MADV_POPULATE_WRITE`: the flush thread faults the next windows in before the writer gets
    /// there (Linux 5.14 and later); without it the recorder makes `write()` calls.
    pub prefault_windows: Permit,
    /// `SCHED_FIFO` for the recording thread (`--rt-priority`).
    pub rt_priority: Permit,
    /// `kernel.sched_rt_runtime_us`: real-time threads may use this much of each second (-1: all).
    pub rt_runtime_us: Option<i64>,
    /// `SCHED_BATCH` for the flush and writer threads: their wake-ups never preempt the recording
    /// thread.
    pub batch_background: Permit,
    /// CPUs this process may use.
    pub cpus: usize,
    /// The CPU the demo pins recording threads to (`--cpu`), with the flush thread kept off it,
    /// when there are at least two: the one that has served the fewest block-device completions
    /// (`BLOCK` softirqs), since those run on whatever thread has that CPU, and the last CPU when
    /// they cannot be read.
    pub suggested_cpu: Option<usize>,
    /// `BLOCK` softirqs each CPU has served since boot (`/proc/softirqs`), when readable.
    pub block_softirqs: Vec<u64>,
    /// `/sys/devices/system/cpu/isolated`: CPUs kept free of other work, if any.
    pub isolated_cpus: String,
}

/// Tries each setting on a thread of its own (undone or discarded with the thread).
pub fn probe() -> Hygiene {
    let on_thread = |f: fn() -> std::io::Result<()>| {
        std::thread::spawn(f)
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the probe thread panicked")))
    };
    // A process that locked memory already (a recording with `mlockall`) is not probed: unlocking
    // would undo it.
    let locked_already = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmLck:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .is_some_and(|kib| kib > 0);
    let lock = if locked_already {
        Ok(())
    } else {
        proc::lock_all_memory().and_then(|()| proc::unlock_all_memory())
    };
    let prefault = SharedMapping::anonymous(4096).and_then(|m| m.populate_write(0, 4096));
    let cpus = proc::online_cpus();
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string());
    let block_softirqs = read("/proc/softirqs")
        .map(|s| block_softirqs(&s))
        .unwrap_or_default();
    Hygiene {
        lock_memory: Permit::from(lock, "needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK"),
        memlock_limit: proc::memlock_limit().ok().flatten(),
        prefault_windows: Permit::from(prefault, "needs Linux 5.14 or later"),
        rt_priority: Permit::from(
            on_thread(|| proc::set_fifo_priority(1)),
            "needs root or CAP_SYS_NICE",
        ),
        rt_runtime_us: read("/proc/sys/kernel/sched_rt_runtime_us")
            .ok()
            .and_then(|s| s.parse().ok()),
        batch_background: Permit::from(on_thread(proc::set_batch_policy), "SCHED_BATCH"),
        cpus,
        suggested_cpu: suggest_cpu(cpus, &block_softirqs),
        block_softirqs,
        isolated_cpus: read("/sys/devices/system/cpu/isolated").unwrap_or_default(),
    }
}

/// Each CPU's count on the `BLOCK:` line of `/proc/softirqs`; empty when there is none.
pub fn block_softirqs(softirqs: &str) -> Vec<u64> {
    softirqs
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("BLOCK:"))
        .map(|counts| {
            counts
                .split_whitespace()
                .map_while(|c| c.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The CPU to pin a recording thread to, among `cpus` (at least two): the one that served the
/// fewest block completions, the last of equals; the last CPU without counts.
pub fn suggest_cpu(cpus: usize, block_softirqs: &[u64]) -> Option<usize> {
    if cpus < 2 {
        return None;
    }
    let quietest = (0..cpus.min(block_softirqs.len()))
        .rev()
        .min_by_key(|&c| block_softirqs[c]);
    Some(quietest.unwrap_or(cpus - 1))
}

impl fmt::Display for Hygiene {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.memlock_limit.map_or("unlimited".to_string(), |l| {
            crate::units::Bytes(l).to_string()
        });
        writeln!(
            f,
            "  lock memory (--mlockall): {} (RLIMIT_MEMLOCK {limit})",
            self.lock_memory
        )?;
        writeln!(
            f,
            "  prefault the next windows (MADV_POPULATE_WRITE, always on when mapped): {}",
            self.prefault_windows
        )?;
        writeln!(
            f,
            "  SCHED_FIFO (--rt-priority P): {}{}",
            self.rt_priority,
            self.rt_runtime_us
                .map_or(String::new(), |r| format!(" (sched_rt_runtime_us {r})"))
        )?;
        writeln!(
            f,
            "  flush and writer threads in SCHED_BATCH (always): {}",
            self.batch_background
        )?;
        match self.suggested_cpu {
            Some(cpu) => writeln!(
                f,
                "  pinning (--cpu N): {} CPUs; --cpu {cpu} ({}) keeps the flush thread on the others{}",
                self.cpus,
                match self.block_softirqs.get(cpu) {
                    Some(n) => format!(
                        "served {n} of {} block completions",
                        self.block_softirqs.iter().sum::<u64>()
                    ),
                    None => "block completions per CPU unknown".to_string(),
                },
                if self.isolated_cpus.is_empty() {
                    " (no CPU is isolated: isolcpus= keeps other work off one)".to_string()
                } else {
                    format!(" (isolated: {})", self.isolated_cpus)
                }
            ),
            None => writeln!(
                f,
                "  pinning (--cpu N): one CPU only, the flush thread shares it"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suggested_cpu_serves_the_fewest_block_completions() {
        let softirqs = "                    CPU0       CPU1       CPU2\n\
                      TIMER:     298487     370357     1\n\
                      BLOCK:      14360    2092648     14360\n";
        assert_eq!(block_softirqs(softirqs), [14360, 2092648, 14360]);
        assert_eq!(suggest_cpu(3, &block_softirqs(softirqs)), Some(2));
        assert_eq!(suggest_cpu(2, &[14360, 2092648]), Some(0));
        assert_eq!(suggest_cpu(2, &[]), Some(1));
        assert_eq!(suggest_cpu(1, &[5]), None);
        assert!(block_softirqs("garbage\nBLOCK: x y").is_empty());
        assert!(block_softirqs("").is_empty());
    }

    #[test]
    fn probing_reports_every_setting_and_changes_nothing() {
        // The calling thread's scheduling policy, field 41 of its stat line (after the name).
        let policy = || {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            let after_name = &stat[stat.rfind(')').unwrap() + 2..];
            after_name.split(' ').nth(38).map(str::to_string)
        };
        let before = policy();
        let h = probe();
        assert_eq!(policy(), before);
        assert!(h.batch_background.permitted, "{h}");
        assert!(h.cpus >= 1);
        assert_eq!(h.suggested_cpu.is_some(), h.cpus >= 2);
        if crate::sys::proc::is_root() {
            assert!(h.rt_priority.permitted, "{h}");
            assert!(h.lock_memory.permitted, "{h}");
        }
        let text = h.to_string();
        for needle in [
            "--mlockall",
            "MADV_POPULATE_WRITE",
            "--rt-priority",
            "--cpu",
        ] {
            assert!(text.contains(needle), "{text}");
        }
    }
}
