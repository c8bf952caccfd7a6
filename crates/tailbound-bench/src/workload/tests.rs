use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use tailbound::dev::memory::MemoryPool;
use tailbound::tbfs::{Config, Fs};

/// A small fileserver: 200 files of mean 8 KiB in directories of width 5, 64 KiB I/O.
fn small(workload: Workload) -> Params {
    Params {
        files: 200,
        dir_width: 5,
        mean_file_bytes: 8 << 10,
        io_bytes: 64 << 10,
        mean_append_bytes: 2 << 10,
        threads: 4,
        loops_max: Some(40),
        verify: true,
        ..Params::for_workload(workload)
    }
}

fn tbfs_native(pool_bytes: u64) -> TbfsFs {
    let dev = Arc::new(MemoryPool::anonymous(pool_bytes).unwrap());
    TbfsFs::new(Fs::format(dev, &Config::default()).unwrap())
}

/// Reads every existing entry through `fs` and compares it with the pattern and its length.
fn check_files<F: WorkFs>(fs: &F, set: &Fileset, p: &Params) -> Result<usize, String> {
    let pattern = Pattern::new(p.io_bytes);
    let present: Vec<u32> = set.pools.lock().unwrap().present.clone();
    let mut buf = vec![0u8; p.io_bytes as usize];
    for &i in &present {
        let e = &set.entries[i as usize];
        let mut f = fs.open(&e.path).map_err(|e| e.to_string())?;
        let mut at = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            if buf[..n] != *pattern.at(e.salt, at, n) {
                return Err(format!("{}: bytes at {at} differ", e.path));
            }
            at += n as u64;
        }
        let len = e.len.load(Ordering::Relaxed);
        if at != len {
            return Err(format!("{}: {at} bytes, expected {len}", e.path));
        }
    }
    Ok(present.len())
}

#[test]
fn the_fileset_has_the_files_the_tree_and_the_size_distribution_asked_for() {
    for mean_kib in [64u64, 128, 256] {
        let p = Params {
            mean_file_bytes: mean_kib << 10,
            ..Params::fileserver()
        };
        let set = Fileset::new(&PosixFs::new("/x"), &p);
        assert_eq!(set.len(), 10_000);
        let paths: std::collections::HashSet<&str> = (0..set.len()).map(|i| set.path(i)).collect();
        assert_eq!(paths.len(), 10_000, "paths are unique");
        // 500 leaf directories of 20 files under 25 and 2 parents.
        let mut per_dir: HashMap<&str, usize> = HashMap::new();
        for p in &paths {
            assert!(p.starts_with("/x/d"), "{p}");
            *per_dir.entry(&p[..p.rfind('/').unwrap()]).or_default() += 1;
        }
        assert_eq!(per_dir.len(), 500);
        assert!(per_dir.values().all(|&n| n == 20));
        assert_eq!(set.dirs().len(), 2 + 25 + 500);
        for d in set.dirs() {
            let parent = &d[..d.rfind('/').unwrap()];
            assert!(
                parent == "/x"
                    || set.dirs().iter().position(|x| x == parent)
                        < set.dirs().iter().position(|x| x == d),
                "{d} comes after its parent"
            );
        }
        // Gamma, shape 1.5: the mean within 3 % (its standard error here is 0.8 %), and the
        // spread of shape 1.5 (standard deviation = mean / sqrt(1.5)) within 10 %.
        let sizes: Vec<f64> = set.sizes().map(|s| s as f64).collect();
        let mean = sizes.iter().sum::<f64>() / sizes.len() as f64;
        let want = (mean_kib << 10) as f64;
        assert!((mean / want - 1.0).abs() < 0.03, "mean {mean} for {want}");
        let sd =
            (sizes.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / sizes.len() as f64).sqrt();
        let want_sd = want / 1.5f64.sqrt();
        assert!((sd / want_sd - 1.0).abs() < 0.1, "sd {sd} for {want_sd}");
    }
    // One seed, one fileset; another seed, other sizes.
    let a: Vec<u64> = Fileset::new(&PosixFs::new("/x"), &Params::fileserver())
        .sizes()
        .collect();
    let b: Vec<u64> = Fileset::new(&PosixFs::new("/x"), &Params::fileserver())
        .sizes()
        .collect();
    assert_eq!(a, b);
    let other = Params {
        seed: 1,
        ..Params::fileserver()
    };
    assert_ne!(
        a,
        Fileset::new(&PosixFs::new("/x"), &other)
            .sizes()
            .collect::<Vec<_>>()
    );
}

#[test]
fn varmail_uses_one_directory_and_webserver_a_tree() {
    let set = Fileset::new(&tbfs_native(64 << 20), &Params::varmail());
    assert_eq!(set.len(), 1_000);
    assert_eq!(set.dirs().len(), 1);
    let set = Fileset::new(&PosixFs::new("/w"), &Params::webserver());
    assert_eq!(set.dirs().len(), 50 + 3);
}

#[test]
fn setup_creates_the_preallocated_share_with_their_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let fs = PosixFs::new(dir.path());
    let p = small(Workload::Fileserver);
    let set = Fileset::new(&fs, &p);
    setup(&fs, &set, &p).unwrap();
    assert_eq!(set.present(), 160, "80 % of 200");
    let mut on_disk = 0;
    for i in 0..set.len() {
        match std::fs::metadata(set.path(i)) {
            Ok(m) => {
                on_disk += 1;
                assert_eq!(m.len(), set.entries[i].size);
            }
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        }
    }
    assert_eq!(on_disk, 160);
    assert_eq!(check_files(&fs, &set, &p), Ok(160));
}

#[test]
fn the_checker_notices_a_changed_byte_and_a_wrong_length() {
    let dir = tempfile::tempdir().unwrap();
    let fs = PosixFs::new(dir.path());
    let p = small(Workload::Fileserver);
    let set = Fileset::new(&fs, &p);
    setup(&fs, &set, &p).unwrap();
    let present = set.pools.lock().unwrap().present.clone();
    let i = present
        .into_iter()
        .map(|i| i as usize)
        .find(|&i| set.entries[i].size > 0)
        .unwrap();
    let path = set.path(i).to_string();
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(!bytes.is_empty());
    bytes[0] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    assert!(check_files(&fs, &set, &p).unwrap_err().contains("differ"));
    bytes[0] ^= 1;
    bytes.pop();
    std::fs::write(&path, &bytes).unwrap();
    assert!(check_files(&fs, &set, &p).unwrap_err().contains("expected"));
}

/// Runs `loops` loops on one thread and returns the flowop names in the order they ran.
fn trace_one_thread<F: WorkFs>(fs: &F, p: &Params) -> (RunResult, Vec<&'static str>) {
    let set = Fileset::new(fs, p);
    setup(fs, &set, p).unwrap();
    let mut names = Vec::new();
    let mut record = |t: u32, name: &'static str| {
        assert_eq!(t, 0);
        names.push(name);
    };
    let result = run_loops(fs, &set, p, 0.0, Some(&mut record)).unwrap();
    assert_eq!(check_files(fs, &set, p).map(|n| n > 0), Ok(true));
    (result, names)
}

#[test]
fn each_thread_runs_the_flowops_in_filebench_order_and_each_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    for workload in Workload::ALL {
        let p = Params {
            threads: 1,
            loops_max: Some(5),
            ..small(workload)
        };
        let names: Vec<&str> = workload.flowops().iter().map(|f| f.name).collect();
        let posix = PosixFs::new(dir.path().join(workload.name()));
        std::fs::create_dir(dir.path().join(workload.name())).unwrap();
        let native = tbfs_native(64 << 20);
        for (result, trace) in [trace_one_thread(&posix, &p), trace_one_thread(&native, &p)] {
            assert_eq!(trace, names.repeat(5), "{}", workload.name());
            assert_eq!(result.ops, 5 * names.len() as u64);
            for f in &result.flowops {
                assert_eq!(f.ops, 5, "{}", f.name);
            }
            let written: u64 = result
                .flowops
                .iter()
                .filter(|f| f.name.starts_with("wrt") || f.name.starts_with("append"))
                .map(|f| f.bytes)
                .sum();
            assert!(written > 0);
            assert!(result.ops_per_s > 0.0 && result.mb_per_s > 0.0);
        }
    }
    // Fileserver names, spelled out once against filebench's fileserver.f.
    let names: Vec<&str> = Workload::Fileserver
        .flowops()
        .iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(
        names,
        [
            "createfile1",
            "wrtfile1",
            "closefile1",
            "openfile1",
            "appendfilerand1",
            "closefile2",
            "openfile2",
            "readfile1",
            "closefile3",
            "deletefile1",
            "statfile1"
        ]
    );
}

#[test]
fn many_threads_read_back_exactly_what_was_written_on_every_file_system() {
    let dir = tempfile::tempdir().unwrap();
    for workload in Workload::ALL {
        let p = small(workload);
        let root = dir.path().join(workload.name());
        std::fs::create_dir(&root).unwrap();
        let posix = PosixFs::new(&root);
        let native = tbfs_native(256 << 20);
        for (name, fs) in [("kernel", &posix as &dyn RunOn), ("tbfs", &native)] {
            let (result, checked) = fs.run_and_check(&p, name);
            assert!(checked > 0);
            // Every thread ran every loop: one op per flowop per loop, bar skipped steps.
            let loops = p.threads as u64 * 40;
            let first = &result.flowops[0];
            assert_eq!(first.ops, loops, "{} {}", workload.name(), first.name);
            assert!(result.ops <= loops * workload.flowops().len() as u64);
            assert!(result.ops >= loops * (workload.flowops().len() as u64 - 1));
        }
    }
}

/// Object-safe access to a run and a check, so one loop covers both implementations.
trait RunOn {
    fn run_and_check(&self, p: &Params, name: &str) -> (RunResult, usize);
}

impl<F: WorkFs> RunOn for F {
    fn run_and_check(&self, p: &Params, name: &str) -> (RunResult, usize) {
        let set = Fileset::new(self, p);
        setup(self, &set, p).unwrap();
        let result = run_loops(self, &set, p, 0.0, None)
            .unwrap_or_else(|e| panic!("{} on {name}: {e}", p.workload.name()));
        (result, check_files(self, &set, p).unwrap())
    }
}

#[test]
fn a_timed_run_stops_and_reports_cpu_time() {
    let native = tbfs_native(64 << 20);
    let p = Params {
        loops_max: None,
        duration: Duration::from_millis(200),
        ..small(Workload::Fileserver)
    };
    let r = run(&native, &p).unwrap();
    // Whether an operation ends inside 200 ms depends on the machine's load, so the count is not
    // checked here: the loop-bounded runs check it exactly. A timed run lasts its duration.
    assert!(r.elapsed_s >= 0.2);
    // The process's rusage also counts the other tests running beside this one, so the share
    // is checked against its own definition rather than against a bound on the whole machine.
    assert!(r.cpus > 0);
    assert!(r.user_cpu_s + r.sys_cpu_s > 0.0, "a timed run used no CPU");
    let capacity = r.elapsed_s * r.cpus as f64;
    assert!((r.user_cpu_pct - 100.0 * r.user_cpu_s / capacity).abs() < 1e-9);
    assert!((r.sys_cpu_pct - 100.0 * r.sys_cpu_s / capacity).abs() < 1e-9);
}

#[test]
fn bad_parameters_are_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let fs = PosixFs::new(dir.path());
    for p in [
        Params {
            files: 0,
            ..Params::fileserver()
        },
        Params {
            threads: 0,
            ..Params::fileserver()
        },
        Params {
            io_bytes: 0,
            ..Params::fileserver()
        },
        Params {
            gamma_shape: 0.0,
            ..Params::fileserver()
        },
        Params {
            prealloc_pct: 101,
            ..Params::fileserver()
        },
    ] {
        assert!(matches!(run(&fs, &p), Err(WorkloadError::Invalid(_))));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert_eq!(Workload::parse("VarMail"), Some(Workload::Varmail));
    assert_eq!(Workload::parse("mail"), None);
}

#[test]
fn engine_figures_are_the_counters_differences_per_second() {
    let before = tailbound::tbfs::FsCounters {
        checkpoints: 10,
        data_only_logs: 5,
        placed_blocks: 1000,
        light_cleaning_passes: 1,
        segments_cleaned: 7,
        meta_held_ns: 3_000_000_000,
        meta_checkpoint_ns: 1_000_000_000,
        meta_cleaning_ns: 500_000_000,
        meta_sealing_ns: 200_000_000,
        ..Default::default()
    };
    let after = tailbound::tbfs::FsCounters {
        checkpoints: 30,
        data_only_logs: 45,
        placed_blocks: 1000 + 2 * 256 * 100,
        light_cleaning_passes: 5,
        segments_cleaned: 27,
        meta_held_ns: 4_000_000_000,
        meta_checkpoint_ns: 1_400_000_000,
        meta_cleaning_ns: 600_000_000,
        meta_sealing_ns: 500_000_000,
        ..Default::default()
    };
    let e = EngineFigures::between(&before, &after, 2.0);
    assert_eq!(e.checkpoints_per_s, 10.0);
    assert_eq!(e.data_only_runs_per_s, 20.0);
    // 256 blocks of 4 KiB are 1 MiB.
    assert_eq!(e.placed_mb_per_s, 100.0);
    assert_eq!(e.light_cleaning_passes_per_s, 2.0);
    assert_eq!(e.segments_cleaned_per_s, 10.0);
    // 1 s held over 2 s: 0.4 s of it checkpoints, 0.1 s cleaning, 0.3 s sealing.
    assert_eq!(e.meta_held_pct, 50.0);
    assert_eq!(e.meta_checkpoint_pct, 20.0);
    assert_eq!(e.meta_cleaning_pct, 5.0);
    assert_eq!(e.meta_sealing_pct, 15.0);
}

#[test]
fn the_webserver_log_is_cut_when_it_passes_its_bound_and_kept_whole_below_it() {
    let whole = small(Workload::Webserver);
    // A bound a few appends long: the log is cut again and again and stays near it.
    let bounded = Params {
        log_max_bytes: 16 << 10,
        ..small(Workload::Webserver)
    };
    let dir = tempfile::tempdir().unwrap();
    for (i, p) in [&whole, &bounded].into_iter().enumerate() {
        let root = dir.path().join(i.to_string());
        std::fs::create_dir(&root).unwrap();
        let posix = PosixFs::new(&root);
        let native = tbfs_native(64 << 20);
        for (name, fs) in [("kernel", &posix as &dyn LogRun), ("tbfs", &native)] {
            let (appended, first, size) = fs.run_log(p);
            if p.log_max_bytes == whole.log_max_bytes {
                // Below the bound the log holds setup's append and every appendlog.
                assert!(appended > 0, "{name}: no appends");
                assert_eq!(size, first + appended, "{name}: the log lost bytes");
            } else {
                assert!(appended > 8 * p.log_max_bytes, "{name}: too few appends");
                let slack = u64::from(p.threads) * (2 * p.mean_append_bytes);
                assert!(
                    size < p.log_max_bytes + slack,
                    "{name}: a log of {size} bytes against a bound of {}",
                    p.log_max_bytes
                );
            }
        }
    }
}

/// A webserver run on a fresh tree: bytes appendlog wrote, the log's size after setup, and its
/// size at the end.
trait LogRun {
    fn run_log(&self, p: &Params) -> (u64, u64, u64);
}

impl<F: WorkFs> LogRun for F {
    fn run_log(&self, p: &Params) -> (u64, u64, u64) {
        let set = Fileset::new(self, p);
        setup(self, &set, p).unwrap();
        let first = self.stat(&set.log_path).unwrap();
        let result = run_loops(self, &set, p, 0.0, None).unwrap();
        let appended = result
            .flowops
            .iter()
            .find(|f| f.name == "appendlog")
            .unwrap()
            .bytes;
        (appended, first, self.stat(&set.log_path).unwrap())
    }
}
