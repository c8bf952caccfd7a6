//! `tailbound bench`: each paper's experiment, run side by side against the kernel's conventional
//! path on this machine, printed as a Markdown table, with `--json` and `--svg` outputs.

use clap::{Args, Subcommand};

use crate::cmd_bench_fileserver::{run_fileserver, FileserverArgs};
use crate::cmd_bench_record::{run_record, RecordArgs};
use crate::cmd_bench_sched::{run_fairness, run_priority, FairnessArgs, PriorityArgs};
use crate::cmd_bench_tbfs::{
    run_cleaner, run_delete, run_recovery, run_sync_write, CleanerArgs, DeleteArgs, RecoveryArgs,
    SyncWriteArgs,
};
use crate::CliResult;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Subcommand)]
enum Experiment {
    /// Real-time recording (seed 000, Table 1): write() latency of 16 KiB every 5 ms for the paper's
    /// designs and tailbound's recorder modes, under background loads.
    ///
    /// Each case records `--writes` records per set, `--sets` times, and reports the worst set (the
    /// one with the largest maximum), like the paper. The full run (5 sets x 10,000 writes x 47 cases)
    /// takes about three and a half hours; `--quick` takes about two minutes. Cases that turn the kernel flusher
    /// off need root and are reported as skipped otherwise. FLOOR is the same loop with no I/O: the
    /// machine's own noise.
    Record(RecordArgs),
    /// O_SYNC throughput (Table 2, Fig. 6-7): an iozone-like write, rewrite and random-rewrite of
    /// one file opened with O_SYNC, in MB/s, for tbfs {strict, relaxed} x {every-checkpoint,
    /// superblock} (and relaxed x every-log) on the file backend, and for ext4, in one run.
    ///
    /// Each case (a configuration and a buffer size) writes the file three times: `write` creates
    /// it, `rewrite` writes it again in order, `random-rewrite` writes every buffer-sized block once
    /// in a seeded random order. MB/s (MB = 2^20 bytes) is bytes over the time of the writes only.
    /// The tbfs pool file and the ext4 file sit in one directory, so on one disk; with --loop-ext4
    /// both sit on a fresh loop-mounted ext4 (root). The full run (128 MiB, 6 configurations x 2
    /// buffers) took 2 to 4 minutes on a VM disk and takes longer where flushes are slow; --quick
    /// writes 8 MiB. Ratios (relaxed/strict, tbfs relaxed/ext4) and the targets follow
    /// the table.
    SyncWrite(SyncWriteArgs),
    /// Recovery time after a crash: a pool with 1 GB written (relaxed ordering) is crashed at
    /// random points and the wall time of opening it (superblock, checkpoint, roll-forward) is
    /// reported as mean and max over the trials, for the superblock barrier policy and, for
    /// comparison, every-checkpoint.
    ///
    /// Two kinds of crash: `sim` cuts the power of the simulated device (in memory: the pool takes
    /// its size in RAM, one trial at a time) a random number of writes after a random point;
    /// `kill` runs the workload in a child `tailbound` process on the file backend and kills it
    /// with SIGKILL at a random point. The workload writes 32 MiB files with O_SYNC, then rewrites
    /// each in place, 64 KiB per write; the crash falls in the second half of the bytes written.
    /// The full run (1 GB, 5 trials x 2 kinds x 2 barriers) writes 20 GB, about 2 minutes on a VM
    /// disk; --quick writes 64 MiB per trial.
    Recovery(RecoveryArgs),
    /// File-system throughput under filebench's workloads (seed 002): ops/s, MB/s, mean latency
    /// per flowop and the user/system CPU split, for tmpfs, XFS and ext4 on DRAM (loop devices
    /// backed by /dev/shm, root), tbfs's native API on a memory pool, and tbfs through the
    /// LD_PRELOAD shim (tbfs-shim through the pool's server, tbfs-shim-private in the program's
    /// own process with `run --private`), in one run. For the native runs it also reports what the engine did:
    /// checkpoints, data-only log runs, placed data, cleaning, and the share of the time its
    /// metadata lock was held, split into checkpoints, cleaning, sealing buffered data, and the
    /// namespace with the rest.
    ///
    /// fileserver: 10,000 files (gamma-distributed sizes, shape 1.5) in directories of width 20,
    /// 80 % created before the clock starts; each thread loops create, write whole, close, open,
    /// append, close, open, read whole, close, delete, stat, with 1 MiB I/O and 16 KiB mean
    /// appends. varmail: 1,000 files of 16 KiB in one directory, 16 threads, appends with fsync.
    /// webserver: 1,000 files of 16 KiB, 100 threads, ten open/read/close and a log append (the
    /// log is cut to zero each time it passes 256 MiB, so a long run fits every system's room).
    /// Every flowop counts as one operation, as filebench counts them.
    ///
    /// Each system runs on a fresh file system that is removed afterwards. With --repeats the
    /// systems take turns each round and each case reports its median run. The default run
    /// (fileserver, 20 and 50 threads, 60 s, seven systems) takes about 15 minutes; --quick
    /// (1,000 files, 20 threads, 1 s) takes seconds. Systems that cannot run here are reported
    /// as unavailable with the reason. The targets follow the tables: tbfs-shim-private at
    /// least 1.73x xfs-ram and 1.3x tmpfs at fileserver, 20 threads, 128 KiB, with more than
    /// 90 % user CPU; tbfs-fuse at least 0.7x ext4-ram; with --processes, tbfs-shim at least
    /// 1.0x tmpfs and 1.5x xfs-ram at 1 x 20, and 1.0x tmpfs at 4 x 5.
    Fileserver(FileserverArgs),
    /// Weighted fair shares (seed 003): tenants with weights 2:1, 3:2 and 3:2:2:1, each a
    /// separate process streaming O_DIRECT reads (then writes) of 1, 10, 30, 50 or 100 MiB
    /// through its own region of a loop device, under the kernel's bfq with cgroup v1
    /// blkio.bfq.weight = 100 x weight, and under none. Needs root.
    ///
    /// The loop device (--direct-io=on) sits over a scratch file on the disk under --dir,
    /// written once in full so reads really reach the disk. All tenants start together; after
    /// --warmup the window opens and it closes when they are stopped, so every tenant is active
    /// throughout. A tenant's MB/s is its bytes in the window over its length (a request
    /// partly inside counted in proportion); ratio_error is the largest relative deviation of a
    /// tenant's share from its weight's share. A window is longer than --window where that
    /// would hold fewer than --min-blocks blocks of the lightest tenant at the last total
    /// measured for the same operation (at most 60 s). The loop device, the cgroups and the
    /// scheduler setting are removed or restored afterwards, also on errors and Ctrl-C. The
    /// full run (120 cases, a 4 GiB scratch file) takes about 25 minutes: about 4 per kernel
    /// system, and about 7 per tbfs system, whose files are written before each case; --quick
    /// runs 2:1 at 1 and 10 MiB in about 15 seconds.
    Fairness(FairnessArgs),
    /// Priority under a background copy (seed 004): 4 KiB O_SYNC appends of a real-time I/O
    /// class writer (ioprio_set, as `ionice -c1`) at 111/s and flat out, while a separate process
    /// at best-effort level 7 copies a multi-GB file, on ext4 on a loop device, under the kernel
    /// schedulers none, mq-deadline, kyber and bfq; and the same inside a tbfs pool on that loop
    /// file system behind tailbound's scheduler (--policies; the pool flushes every log, so each
    /// sync is durable as the kernel side's is; the copy a thread at best-effort level 7, the
    /// writer appending with fdatasync; the scheduler's profile calibrated on the loop file
    /// system for --latency-goal first). Needs root.
    ///
    /// Reports min, p50, p99, p99.9, p99.99, p99.9999 and max of write() and the copy's MB/s alone
    /// (before and after the writer) and under the writer. First the writer runs alone at each
    /// rate, with no copy (on the kernel path and in a tbfs pool): the device's own floor in the
    /// same run, which the targets' lines quote. --copy buffered (the default, the seed's load)
    /// runs coreutils' cp through the page cache, whose writeback and journal commits (ext4's
    /// default data=ordered) reach the disk outside the copy's priority; on the tbfs side the
    /// copy writes through the pool's buffered path with no sync. --copy direct uses O_DIRECT
    /// 1 MiB requests (on the tbfs side each 1 MiB write made durable), so the copy's priority
    /// reaches the block layer. The paper's run is 1,000,000 writes per case (about 2.5 hours per case at
    /// 111/s); --writes sizes a shorter run, and --quick takes 200 writes and a 64 MiB copy
    /// (seconds). The scheduler setting and the loop file system are restored and removed
    /// afterwards, also on errors and Ctrl-C.
    Priority(PriorityArgs),
    /// tbfs cleaner: sustained write throughput and write amplification (bytes the engine writes
    /// per byte the workload writes, cleaning, metadata and checkpoints included, the metadata's
    /// share shown apart) at 50, 70, 80 and 90 % pool utilisation, for uniform-random 4 KiB
    /// overwrites, a hot/cold workload (90 % of the writes to 10 % of the data), after the LFS
    /// paper's cleaner evaluation, and a mixed one (files of 4 KiB to 8 MiB created, appended
    /// to, truncated and deleted, with overwrites in the large ones).
    ///
    /// Each case formats a memory pool (no disk involved: the measure is amplification), fills the
    /// utilisation with files, writes until `--warmup` pool capacities are written, then
    /// measures over `--measure` more. Writers wait for the cleaner; the protection period is
    /// zero and the background cleaner off, so every copy is one the workload caused.
    /// Amplification is a count (the same for a seed on any machine); MB/s is wall time and
    /// depends on the machine. With --repeats each case reports its median run. The default run
    /// (256 MiB pool, 1 MiB segments, 2 + 4 capacities, 3 repeats) takes minutes in a release
    /// build; --quick (64 MiB) takes seconds. The targets (uniform <= 1.9 / 2.8 / 5.5 at
    /// 70 / 80 / 90 %, hot/cold <= 1.5 / 2.0 / 3.5) follow the table.
    Cleaner(CleanerArgs),
    Soak(crate::cmd_bench_soak::SoakArgs),
    /// tbfs deletes: how long unlinking a large file (64 MiB, 256 MiB and 1 GiB by default) holds
    /// the metadata lock every other writer needs, and how long the sync that records it holds
    /// it, on a memory pool with the background thread off (nothing else takes the lock). Each
    /// case writes and syncs the file, then unlinks it and syncs; each size runs as is and with a
    /// snapshot taken before the delete (which keeps the blocks). The target (1 GiB: < 10 ms,
    /// every run) follows the table. --quick: 16 and 64 MiB, one run (seconds).
    Delete(DeleteArgs),
    SchedOverhead(crate::cmd_bench_overhead::SchedOverheadArgs),
    ServeCall(crate::cmd_bench_serve_call::ServeCallArgs),
    /// Shipping to Apache Kafka (issue 44): backlog MB/s to a local broker it starts, the
    /// broker's own ceiling with Kafka's ProducerPerformance in the same run, and the recorder's
    /// write() latency with live shipping off and on. `--faults N` runs the fault loop instead.
    Ship(crate::cmd_ship::BenchShipArgs),
}

pub fn run(args: BenchArgs) -> CliResult {
    match args.experiment {
        Experiment::Record(args) => run_record(args),
        Experiment::SyncWrite(args) => run_sync_write(args),
        Experiment::Recovery(args) => run_recovery(args),
        Experiment::Fairness(args) => run_fairness(args),
        Experiment::Priority(args) => run_priority(args),
        Experiment::Fileserver(args) => run_fileserver(args),
        Experiment::Cleaner(args) => run_cleaner(args),
        Experiment::Soak(args) => crate::cmd_bench_soak::run(args),
        Experiment::Delete(args) => run_delete(args),
        Experiment::SchedOverhead(args) => crate::cmd_bench_overhead::run(args),
        Experiment::ServeCall(args) => crate::cmd_bench_serve_call::run(args),
        Experiment::Ship(args) => crate::cmd_ship::run_bench(args),
    }
}
