//! A client's requests charged to its thread's cgroup and class, in a real blkio cgroup.

use std::path::Path;
use std::sync::Arc;

use super::{Client, Server, ServerOptions};
use crate::dev::sim::SimDevice;
use crate::dev::Device;
use crate::sched::clients::scaled_weight;
use crate::sched::{Class, Prio, SchedDevice, Scheduler};
use crate::tbfs::{Config, Fs, OpenFlags};

/// The weighted blkio cgroup a test makes, removed when dropped (its threads moved out first).
struct Group(std::path::PathBuf);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A client thread in a blkio cgroup of weight 300, at best effort level 6, writes and syncs
/// through a server whose pool has a scheduler: the scheduler shows that I/O under the tenant
/// of that cgroup at that priority, with the cgroup's weight.
#[test]
fn a_clients_io_is_charged_to_its_threads_cgroup_and_class() {
    let blkio = Path::new("/sys/fs/cgroup/blkio");
    if !crate::sys::proc::is_root() || !blkio.is_dir() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI runs as root with cgroup v1 blkio and must run this test"
        );
        eprintln!("skipped: needs root and cgroup v1 blkio");
        return;
    }
    let group = Group(blkio.join(format!("tailbound-caller-{}", std::process::id())));
    std::fs::create_dir(&group.0).unwrap();
    assert!(
        std::fs::write(group.0.join("blkio.bfq.weight"), "300").is_ok(),
        "no blkio.bfq.weight: load the bfq scheduler (modprobe bfq)"
    );
    let sched = Scheduler::new(
        Arc::new(SimDevice::new(64 << 20)),
        crate::sched::Config::default(),
    )
    .unwrap();
    let dev: Arc<dyn Device> = Arc::new(SchedDevice::new(sched.clone()));
    let fs = Arc::new(
        Fs::format(
            dev,
            &Config {
                segment_bytes: 1 << 20,
                ..Config::default()
            },
        )
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pool.sock");
    let server = Server::start(fs.clone(), &socket, ServerOptions::default()).unwrap();
    let prio = Prio {
        class: Class::Be,
        level: 6,
    };
    let data = vec![0x5au8; 256 << 10];
    let tasks = group.0.join("tasks");
    let written = std::thread::scope(|s| {
        s.spawn(|| {
            let tid = crate::sys::proc::thread_id().to_string();
            std::fs::write(&tasks, &tid).unwrap();
            prio.apply_to_current_thread().unwrap();
            let written = (|| {
                let c = Client::connect(&socket)?;
                let f = c.open_file("/charged", OpenFlags::create())?;
                f.pwrite(&data, 0)?;
                f.fsync()
            })();
            // Back to the root group, so the test's group can be removed.
            std::fs::write(blkio.join("tasks"), &tid).unwrap();
            written
        })
        .join()
        .unwrap()
    });
    drop(server);
    written.unwrap();
    let stats = sched.stats();
    let name = group.0.display().to_string();
    let theirs: Vec<_> = stats.iter().filter(|t| t.name.contains(&name)).collect();
    let names: Vec<_> = stats.iter().map(|t| &t.name).collect();
    assert_eq!(
        theirs.len(),
        1,
        "one tenant for the client's cgroup: {names:?}"
    );
    let t = theirs[0];
    assert_eq!(t.prio, prio, "{}", t.name);
    assert_eq!(t.weight, scaled_weight(300), "{}", t.name);
    assert!(
        t.bytes >= data.len() as u64,
        "{} carried {} bytes of the client's {}",
        t.name,
        t.bytes,
        data.len()
    );
}
