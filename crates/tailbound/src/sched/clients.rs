//! Client processes as tenants. A pool server does I/O for other processes; each request is
//! charged to a tenant made from its client's identity, as the kernel's BFQ charges a bio to its
//! task's cgroup and I/O priority:
//!
//! - a process in a weighted I/O cgroup (v1 `blkio`, v2 `io`; not the root) is scheduled with the
//!   other processes of that cgroup as one tenant per I/O priority, weighted by the cgroup's
//!   weight (`blkio.bfq.weight`/`io.bfq.weight`, else `blkio.weight`/`io.weight`);
//! - any other process is scheduled by the calling thread's I/O priority, as the server's own
//!   threads are ([`Scheduler::tenant_for_prio`]).
//!
//! A cgroup's weight is scaled so that the kernel's default (100) equals the weight of the default
//! priority's tenant ([`Prio::default_weight`]), and both kinds share one weighted-fair group.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::exec::{Charge, Scheduler};
use super::model::{Class, Prio, TenantId};

/// The kernel's default cgroup I/O weight.
pub const CGROUP_WEIGHT_DEFAULT: u32 = 100;
/// Processes whose cgroup a [`ClientTenants`] remembers; past it, it starts over (a pid may have
/// been reused by then).
const REMEMBERED_MAX: usize = 4096;

/// A weighted I/O cgroup a process is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedCgroup {
    /// The cgroup's directory.
    pub dir: PathBuf,
    /// Its weight in the kernel's scale (1-10000, default 100).
    pub weight: u32,
}

/// The `(controllers, path)` of each line of a `/proc/PID/cgroup` file.
pub fn parse_proc_cgroup(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some((controllers, path))
        })
        .collect()
}

/// A weight file's default weight: `"100"` or `"default 100"` (with per-device lines after it).
pub fn parse_weight(text: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        match (words.next()?, words.next()) {
            ("default", Some(w)) => w.parse().ok(),
            (w, None) => w.parse().ok(),
            _ => None,
        }
    })
}

/// The weighted I/O cgroup process `pid` is in, looked up under `root` (`/sys/fs/cgroup`);
/// `None` in the root group, without an I/O controller, or when the process is gone.
pub fn weighted_cgroup(root: &Path, pid: u32) -> Option<WeightedCgroup> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    weighted_cgroup_of(root, &text)
}

/// The weighted I/O cgroup a `/proc/PID/cgroup` text names, its weight read under `root`.
pub fn weighted_cgroup_of(root: &Path, proc_cgroup: &str) -> Option<WeightedCgroup> {
    let lines = parse_proc_cgroup(proc_cgroup);
    let v1 = lines
        .iter()
        .find(|(c, _)| c.split(',').any(|c| c == "blkio"))
        .map(|(_, p)| (root.join("blkio"), *p, ["blkio.bfq.weight", "blkio.weight"]));
    let v2 = lines
        .iter()
        .find(|(c, _)| c.is_empty())
        .map(|(_, p)| (root.join("unified"), *p, ["io.bfq.weight", "io.weight"]));
    for (base, path, files) in v1.into_iter().chain(v2) {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() {
            continue;
        }
        let dir = base.join(rel);
        for f in files {
            if let Some(weight) = std::fs::read_to_string(dir.join(f))
                .ok()
                .as_deref()
                .and_then(parse_weight)
            {
                return Some(WeightedCgroup { dir, weight });
            }
        }
    }
    None
}

/// A cgroup weight in the scheduler's scale: the default weight (100) is the default priority's.
pub fn scaled_weight(cgroup_weight: u32) -> u32 {
    let unit = u64::from(Prio::DEFAULT.default_weight());
    let w = (u64::from(cgroup_weight) * unit + u64::from(CGROUP_WEIGHT_DEFAULT) / 2)
        / u64::from(CGROUP_WEIGHT_DEFAULT);
    w.clamp(1, u64::from(u32::MAX)) as u32
}

/// Whether process `pid` may put a thread in the real-time I/O class (`CAP_SYS_NICE` or
/// `CAP_SYS_ADMIN` in its effective set, as `ioprio_set` asks); `false` when it cannot be told.
pub fn may_take_rt(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .as_deref()
        .and_then(effective_caps)
        .is_some_and(|caps| caps & (CAP_SYS_ADMIN | CAP_SYS_NICE) != 0)
}

const CAP_SYS_ADMIN: u64 = 1 << 21;
const CAP_SYS_NICE: u64 = 1 << 23;

/// The `CapEff` mask of a `/proc/PID/status` text.
pub fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// The priority a client's request runs at: the one its thread claims, unless that is real
/// time and the process may not take it ([`may_take_rt`]). Then it is the thread's own as the
/// kernel has it (`own`: `None` when the thread is not the client's), for a privileged process
/// may have put it there; failing that, best effort at the claimed level.
pub fn allowed_prio(claim: Prio, may_rt: bool, own: impl FnOnce() -> Option<Prio>) -> Prio {
    if claim.class != Class::Rt || may_rt {
        return claim;
    }
    match own() {
        Some(p) if p.class == Class::Rt => p,
        _ => Prio {
            class: Class::Be,
            level: claim.level,
        },
    }
}

/// Tenants of one scheduler for the requests of client processes.
pub struct ClientTenants {
    sched: Arc<Scheduler>,
    cgroup_root: PathBuf,
    state: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    cgroup_of: HashMap<u32, Option<WeightedCgroup>>,
    tenants: HashMap<(PathBuf, Prio), TenantId>,
}

impl ClientTenants {
    pub fn new(sched: Arc<Scheduler>) -> ClientTenants {
        ClientTenants::with_cgroup_root(sched, Path::new("/sys/fs/cgroup"))
    }

    /// With the cgroup file systems mounted under `root` instead of `/sys/fs/cgroup`.
    pub fn with_cgroup_root(sched: Arc<Scheduler>, root: &Path) -> ClientTenants {
        ClientTenants {
            sched,
            cgroup_root: root.to_path_buf(),
            state: Mutex::new(Remembered::default()),
        }
    }

    /// The tenant for a request of thread `tid` of process `pid`: its cgroup's at the thread's
    /// I/O priority, or the priority's own.
    pub fn tenant_for(&self, pid: u32, tid: u32) -> TenantId {
        let prio = Prio::of_thread(tid);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.cgroup_of.len() >= REMEMBERED_MAX && !state.cgroup_of.contains_key(&pid) {
            state.cgroup_of.clear();
        }
        let cgroup = state
            .cgroup_of
            .entry(pid)
            .or_insert_with(|| weighted_cgroup(&self.cgroup_root, pid))
            .clone();
        drop(state);
        self.tenant_in(cgroup.as_ref(), prio)
    }

    /// The tenant of requests made at `prio` by a thread in `cgroup` (`None`: in no weighted
    /// cgroup, so the priority's own tenant).
    pub fn tenant_in(&self, cgroup: Option<&WeightedCgroup>, prio: Prio) -> TenantId {
        let Some(cgroup) = cgroup else {
            return self.sched.tenant_for_prio(prio);
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *state
            .tenants
            .entry((cgroup.dir.clone(), prio))
            .or_insert_with(|| {
                self.sched.add_tenant(
                    &format!("cgroup {} {prio}", cgroup.dir.display()),
                    prio,
                    scaled_weight(cgroup.weight),
                )
            })
    }

    /// The charge for requests made at `prio` by a thread in `cgroup`.
    pub fn charge_in(&self, cgroup: Option<&WeightedCgroup>, prio: Prio) -> Charge {
        Charge::to(self.tenant_in(cgroup, prio), prio)
    }

    /// The weighted cgroup thread `tid` of process `pid` is in (a v1 `blkio` group holds
    /// threads, not processes, as the kernel charges a thread's I/O); `None` when `tid` is not a
    /// thread of `pid` (or is gone), `Some(None)` when it is in no weighted group.
    pub fn thread_cgroup(&self, pid: u32, tid: u32) -> Option<Option<WeightedCgroup>> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup")).ok()?;
        Some(weighted_cgroup_of(&self.cgroup_root, &text))
    }

    /// The weighted cgroup of process `pid` (its main thread's).
    pub fn process_cgroup(&self, pid: u32) -> Option<WeightedCgroup> {
        weighted_cgroup(&self.cgroup_root, pid)
    }

    /// The charge for such a request ([`Charge::apply`] it on the thread that does the work).
    pub fn charge_for(&self, pid: u32, tid: u32) -> Charge {
        let tenant = self.tenant_for(pid, tid);
        let prio = self.sched.tenant_prio(tenant).unwrap_or(Prio::DEFAULT);
        Charge::to(tenant, prio)
    }

    /// Forgets what was read of process `pid` (its session ended: the pid may be reused).
    pub fn forget(&self, pid: u32) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cgroup_of
            .remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_cgroup_lines_of_both_versions_parse() {
        let text = "9:name=systemd:/\n7:blkio:/tenants/a\n4:memory:/x:y\n0::/user.slice\n";
        let lines = parse_proc_cgroup(text);
        assert_eq!(
            lines,
            vec![
                ("name=systemd", "/"),
                ("blkio", "/tenants/a"),
                ("memory", "/x:y"),
                ("", "/user.slice"),
            ]
        );
    }

    #[test]
    fn effective_capabilities_parse() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000a00000\n";
        assert_eq!(effective_caps(status), Some(0xa0_0000));
        assert_eq!(effective_caps("Name:\tx\n"), None);
        assert_eq!(effective_caps("CapEff:\tzz\n"), None);
    }

    #[test]
    fn a_real_time_claim_holds_only_with_the_right_to_it() {
        let rt = Prio {
            class: Class::Rt,
            level: 2,
        };
        let be7 = Prio {
            class: Class::Be,
            level: 7,
        };
        let idle = Prio {
            class: Class::Idle,
            level: 7,
        };
        assert_eq!(allowed_prio(rt, true, || None), rt, "a privileged process");
        assert_eq!(
            allowed_prio(be7, false, || None),
            be7,
            "no privilege needed"
        );
        assert_eq!(allowed_prio(idle, false, || Some(rt)), idle);
        assert_eq!(
            allowed_prio(rt, false, || Some(be7)),
            Prio {
                class: Class::Be,
                level: 2
            },
            "the thread is not real time: best effort at the claimed level"
        );
        assert_eq!(
            allowed_prio(rt, false, || None),
            Prio {
                class: Class::Be,
                level: 2
            }
        );
        let rt0 = Prio {
            class: Class::Rt,
            level: 0,
        };
        assert_eq!(
            allowed_prio(rt0, false, || Some(rt)),
            rt,
            "real time as the kernel has it, not as claimed"
        );
    }

    #[test]
    fn a_thread_of_another_process_has_no_cgroup_here() {
        let dev = Arc::new(crate::dev::sim::SimDevice::new(1 << 20));
        let sched = Scheduler::new(dev, crate::sched::Config::default()).unwrap();
        let clients = ClientTenants::new(sched);
        let me = std::process::id();
        let tid = crate::sys::proc::thread_id() as u32;
        assert!(clients.thread_cgroup(me, tid).is_some());
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let theirs = clients.thread_cgroup(me, child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            theirs, None,
            "the child's thread is not one of this process"
        );
    }

    #[test]
    fn weight_files_of_both_forms_parse() {
        assert_eq!(parse_weight("300\n"), Some(300));
        assert_eq!(parse_weight("default 200\n8:0 500\n"), Some(200));
        assert_eq!(parse_weight(""), None);
        assert_eq!(parse_weight("8:0 500\n"), None);
    }

    #[test]
    fn the_default_cgroup_weight_is_the_default_priority_weight() {
        assert_eq!(scaled_weight(100), Prio::DEFAULT.default_weight());
        assert_eq!(scaled_weight(300), 3 * Prio::DEFAULT.default_weight());
        assert_eq!(scaled_weight(1), 1);
        assert!(scaled_weight(10_000) > scaled_weight(1_000));
    }

    #[test]
    fn the_weight_comes_from_the_blkio_cgroup_else_the_unified_one() {
        let root = tempfile::tempdir().unwrap();
        let text = "7:blkio:/tenants/a\n0::/svc\n";
        assert_eq!(
            weighted_cgroup_of(root.path(), text),
            None,
            "no weight files yet"
        );
        let v2 = root.path().join("unified/svc");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("io.weight"), "default 50\n").unwrap();
        assert_eq!(
            weighted_cgroup_of(root.path(), text),
            Some(WeightedCgroup {
                dir: v2.clone(),
                weight: 50
            })
        );
        let v1 = root.path().join("blkio/tenants/a");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("blkio.weight"), "500\n").unwrap();
        assert_eq!(weighted_cgroup_of(root.path(), text).unwrap().weight, 500);
        std::fs::write(v1.join("blkio.bfq.weight"), "default 300\n").unwrap();
        assert_eq!(
            weighted_cgroup_of(root.path(), text),
            Some(WeightedCgroup {
                dir: v1,
                weight: 300
            }),
            "BFQ's weight first"
        );
        assert_eq!(
            weighted_cgroup_of(root.path(), "7:blkio:/\n0::/\n"),
            None,
            "the root groups carry no weight"
        );
    }

    /// A real blkio cgroup with BFQ's weight, a child process in it, and the tenant the
    /// scheduler gives that child's requests.
    #[test]
    fn a_client_in_a_weighted_blkio_cgroup_is_its_cgroups_tenant() {
        let blkio = Path::new("/sys/fs/cgroup/blkio");
        if !crate::sys::proc::is_root() || !blkio.is_dir() {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI runs as root with cgroup v1 blkio and must run this test"
            );
            eprintln!("skipped: needs root and cgroup v1 blkio");
            return;
        }
        let dir = blkio.join(format!("tailbound-clients-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let cleanup = |dir: &Path| {
            let _ = std::fs::remove_dir(dir);
        };
        if std::fs::write(dir.join("blkio.bfq.weight"), "300").is_err() {
            cleanup(&dir);
            panic!("no blkio.bfq.weight: load the bfq scheduler (modprobe bfq)");
        }
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        let dev = Arc::new(crate::dev::sim::SimDevice::new(1 << 20));
        let sched = Scheduler::new(dev, crate::sched::Config::default()).unwrap();
        let clients = ClientTenants::new(sched.clone());
        let t = clients.tenant_for(child.id(), child.id());
        let own = clients.tenant_for(std::process::id(), std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        cleanup(&dir);
        let stats = sched.stats();
        let theirs = &stats[t.0 as usize];
        assert_eq!(theirs.weight, scaled_weight(300), "{}", theirs.name);
        assert!(
            theirs.name.contains("tailbound-clients-"),
            "{}",
            theirs.name
        );
        assert_ne!(t, own, "this process is in the root group");
        assert_eq!(own, sched.tenant_for_prio(Prio::of_current_thread()));
    }

    #[test]
    fn another_threads_priority_is_read_as_its_own() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            Prio {
                class: crate::sched::Class::Idle,
                level: 7,
            }
            .apply_to_current_thread()
            .unwrap();
            tx.send(crate::sys::proc::thread_id() as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let seen = Prio::of_thread(tid);
        done_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(
            seen,
            Prio {
                class: crate::sched::Class::Idle,
                level: 7
            }
        );
        assert_eq!(
            Prio::of_thread(crate::sys::proc::thread_id() as u32),
            Prio::of_current_thread()
        );
    }
}
