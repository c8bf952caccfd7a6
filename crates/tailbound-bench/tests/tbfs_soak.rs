//! The soak (`tailbound_bench::experiments::soak`), short: a 256 MiB pool on the simulated
//! device, held at 60, 75 and 85 % live by threads that create, write, append, overwrite, rename,
//! replace, truncate and delete files of mixed sizes, fsync, sync, and take and drop snapshots,
//! with power cuts at random points. It checks the targets as they stand: no panic or
//! error, no `NoSpace` below 90 % of the pool (live + pinned + in flight), every acknowledged
//! write and everything durable reads back, fsck clean after each power cut and at the end.
//!
//! The work is counted in operations, not time. `TBFS_SOAK_SEED=<n>` replays a seed (each
//! thread makes the same choices; the threads' interleaving is the machine's);
//! `TBFS_SOAK_OPS=<n>` sets the operations per thread and level once it is reached;
//! `TBFS_SOAK_THREADS`, `TBFS_SOAK_CUTS` and `TBFS_SOAK_BACKGROUND_GC=0` (writers clean instead
//! of the background cleaner) help tell one failure from another.
//! `tailbound bench soak` runs the long version.

use tailbound_bench::experiments::soak::{self, Budget, SoakConfig};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn soak_holds_60_75_85_percent_live_through_power_cuts() {
    let mut cfg = SoakConfig::new(
        256 << 20,
        vec![0.60, 0.75, 0.85],
        Budget::Ops(env_u64("TBFS_SOAK_OPS", 120)),
    );
    cfg.threads = env_u64("TBFS_SOAK_THREADS", 2) as usize;
    cfg.power_cuts = env_u64("TBFS_SOAK_CUTS", 3) as u32;
    cfg.seed = env_u64("TBFS_SOAK_SEED", 0x50a4_0001);
    cfg.background_gc = env_u64("TBFS_SOAK_BACKGROUND_GC", 1) != 0;
    let report = soak::run(&cfg, &|line| eprintln!("soak: {line}")).expect("the pool formats");
    let summary = report.to_markdown();
    eprintln!("{summary}");
    assert!(
        report.levels.len() == 3,
        "seed {:#x}: every level ran\n{summary}",
        cfg.seed
    );
    assert!(
        report.full_checks >= 3 && report.files_checked > 0 && report.fsck_runs >= 1,
        "seed {:#x}: the checks ran\n{summary}",
        cfg.seed
    );
    assert!(
        report.passed(),
        "seed {:#x} failed (replay: TBFS_SOAK_SEED={}):\n{summary}",
        cfg.seed,
        cfg.seed
    );
}
