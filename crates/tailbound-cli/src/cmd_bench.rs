//! `tailbound bench`: each paper's experiment, run side by side against the kernel's conventional
//! path on this machine, printed as a Markdown table, with `--json` and `--svg` outputs.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tailbound::bench::experiments::blockdev::KernelSched;
use tailbound::bench::experiments::cleaner::{self, CleanerBench};
use tailbound::bench::experiments::delete::DeleteBench;
use tailbound::bench::experiments::fairness::{self, FairnessBench, IoOp, TenantSpec};
use tailbound::bench::experiments::fileserver::{self, FileserverBench, System};
use tailbound::bench::experiments::loopfs::LoopFs;
use tailbound::bench::experiments::priority::{CopySpec, PriorityBench, Rate};
use tailbound::bench::experiments::record::{self, RecordBench};
use tailbound::bench::experiments::recovery::{
    self, ChildSpec, CrashKind, RecoveryBench, Workload,
};
use tailbound::bench::experiments::sync_write::{self, SyncWriteBench};
use tailbound::bench::plot::{grouped_bar_svg, latency_boxplot_svg};
use tailbound::bench::report::write_json;
use tailbound::bench::workload::{Params, Workload as FsWorkload};
use tailbound::units::{parse_bytes, parse_duration};

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
    /// LD_PRELOAD shim, in one run. For the native runs it also reports what the engine did:
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
    /// (fileserver, 20 and 50 threads, 60 s, six systems) takes about 13 minutes; --quick
    /// (1,000 files, 20 threads, 1 s) takes seconds. Systems that cannot run here are reported
    /// as unavailable with the reason. The targets (tbfs-shim >= 1.73x xfs-ram and >= 1.3x
    /// tmpfs at fileserver, 20 threads, 128 KiB; > 90 % user CPU; tbfs-fuse >= 0.7x ext4-ram)
    /// follow the tables.
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
    /// sync is durable as the kernel side's is; the copy a thread at best-effort level 7 making
    /// each 1 MiB write durable, the writer appending with fdatasync; the scheduler's profile
    /// calibrated on the loop file system for --latency-goal first). Needs root.
    ///
    /// Reports min, p50, p99, p99.9, p99.99, p99.9999 and max of write() and the copy's MB/s alone
    /// (before and after the writer) and under the writer. First the writer runs alone at each
    /// rate, with no copy (on the kernel path and in a tbfs pool): the device's own floor in the
    /// same run, which the targets' lines quote. The copy uses O_DIRECT 1 MiB
    /// requests, so its priority reaches the block layer. The paper's run is 1,000,000 writes per case (about 2.5 hours per case at
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
    /// Shipping to Apache Kafka (issue 44): backlog MB/s to a local broker it starts, the
    /// broker's own ceiling with Kafka's ProducerPerformance in the same run, and the recorder's
    /// write() latency with live shipping off and on. `--faults N` runs the fault loop instead.
    Ship(crate::cmd_ship::BenchShipArgs),
}

#[derive(Args)]
struct DeleteArgs {
    /// 16 and 64 MiB files, one run each.
    #[arg(long)]
    quick: bool,
    /// Comma-separated file sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    sizes: Vec<u64>,
    /// Runs of every size.
    #[arg(long)]
    repeats: Option<u32>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct CleanerArgs {
    /// A 64 MiB pool, 256 KiB segments, 1 + 2 capacities, one repeat: seconds.
    #[arg(long)]
    quick: bool,
    /// Pool size. Default 256MiB (64MiB with --quick).
    #[arg(long, value_parser = parse_bytes)]
    pool_size: Option<u64>,
    /// Segment size. Default 1MiB (256KiB with --quick).
    #[arg(long, value_parser = parse_bytes)]
    segment_size: Option<u64>,
    /// Comma-separated utilisations, fractions of the pool the live data fills.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.8,0.9")]
    utilisation: Vec<f64>,
    /// Comma-separated workloads: uniform, hot-cold, mixed.
    #[arg(long, value_delimiter = ',', default_value = "uniform,hot-cold,mixed")]
    workload: Vec<String>,
    /// Pool capacities overwritten before measuring.
    #[arg(long)]
    warmup: Option<f64>,
    /// Pool capacities overwritten while measuring.
    #[arg(long)]
    measure: Option<f64>,
    /// Runs of every case; each case reports its median.
    #[arg(long)]
    repeats: Option<u32>,
    #[arg(long, default_value_t = 0xc1ea)]
    seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct FairnessArgs {
    /// 2:1 at 1 and 10 MiB, reads and writes, every system, a 1 s window (seconds in all).
    #[arg(long)]
    quick: bool,
    /// Comma-separated systems: tbfs (a tbfs pool behind tailbound's fair scheduler, each tenant a
    /// thread reading its own file or writing it direct, tbfs's O_DIRECT), tbfs-fifo (the same
    /// behind fifo: the throughput baseline), bfq, none. Default: all four.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Weight sets, separated by commas, weights by colons (e.g. 2:1,3:2:2:1). Default: 2:1,3:2,3:2:2:1
    /// (2:1 with --quick).
    #[arg(long, value_delimiter = ',')]
    weights: Vec<String>,
    /// Comma-separated operations: read, write.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Comma-separated block sizes in MiB. Default: 1,10,30,50,100 (1,10 with --quick).
    #[arg(long, value_delimiter = ',')]
    block_mb: Vec<u64>,
    /// The shortest measurement window per case. Default: 4s (1s with --quick).
    #[arg(long, value_parser = parse_duration)]
    window: Option<Duration>,
    /// Lengthen a case's window to hold about this many blocks of its lightest tenant, at most
    /// 60 s; 0 keeps every window at --window. Default: 10 (0 with --quick).
    #[arg(long)]
    min_blocks: Option<u32>,
    /// Time from the start of the tenants until the window opens. Default: 1s (300ms with --quick).
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Directory on the disk to measure for the loop device's scratch file (default: /var/tmp).
    /// The file is removed when the run ends.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write grouped bars of each case's ratio error as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Run as one tenant (internal).
    #[arg(long, hide = true, requires_all = ["device", "region_offset", "region_bytes", "op", "block_bytes"])]
    child: bool,
    #[arg(long, hide = true)]
    device: Option<PathBuf>,
    #[arg(long, hide = true)]
    region_offset: Option<u64>,
    #[arg(long, hide = true)]
    region_bytes: Option<u64>,
    #[arg(long, hide = true)]
    op: Option<String>,
    #[arg(long, hide = true)]
    block_bytes: Option<u64>,
}

#[derive(Args)]
struct PriorityArgs {
    /// 200 writes per case and a 64 MiB copy (seconds in all).
    #[arg(long)]
    quick: bool,
    /// Writes per case. Default: 1000000 (the paper's), or 200 with --quick.
    #[arg(long)]
    writes: Option<u64>,
    /// Comma-separated writer rates: N/s (e.g. 111/s) or flat-out.
    #[arg(long, value_delimiter = ',', default_value = "111/s,flat-out")]
    rates: Vec<String>,
    /// Comma-separated kernel schedulers: none, mq-deadline, kyber, bfq.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,mq-deadline,kyber,bfq"
    )]
    schedulers: Vec<String>,
    /// Comma-separated policies of tailbound's scheduler for the tbfs cases (fifo, priority,
    /// fair, default); `none` runs no tbfs case.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    policies: Vec<String>,
    /// Size of the file the background process copies. Default: 2GiB, or 64MiB with --quick.
    #[arg(long, value_parser = parse_bytes)]
    copy_size: Option<u64>,
    /// How long the copy runs alone before the writer starts, and again after it ends (its
    /// speed alone is measured on both sides). Default: 5s (500ms with --quick).
    #[arg(long, value_parser = parse_duration)]
    copy_alone: Option<Duration>,
    /// Latency goal for tbfs's scheduler: before the cases, the loop file system is calibrated
    /// (as `tailbound calibrate --latency-goal`) and the tbfs cases split requests to the largest
    /// size served within it and flush after as many bytes as a flush writes back within a
    /// write piece's time.
    #[arg(long, value_parser = parse_duration, default_value = "5ms")]
    latency_goal: Duration,
    /// Skip the writer-alone runs (no copy) made before the cases.
    #[arg(long)]
    no_writer_alone: bool,
    /// Directory on the disk to measure for the loop device's image (default: /var/tmp). Removed
    /// when the run ends.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a box plot of write() latency per case (log scale) as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Run as the background copy (internal).
    #[arg(long, hide = true, requires_all = ["src", "dst_dir", "chunk_bytes"])]
    child: bool,
    #[arg(long, hide = true)]
    src: Option<PathBuf>,
    #[arg(long, hide = true)]
    dst_dir: Option<PathBuf>,
    #[arg(long, hide = true)]
    chunk_bytes: Option<u64>,
}

#[derive(Args)]
struct FileserverArgs {
    /// 1,000 files, 20 threads (fileserver) and 1 s per case: seconds in all.
    #[arg(long)]
    quick: bool,
    /// fileserver, varmail or webserver.
    #[arg(long, default_value = "fileserver")]
    workload: String,
    /// Comma-separated thread counts. Default: 20,50 for fileserver (20 with --quick), 16 for
    /// varmail, 100 for webserver.
    #[arg(long, value_delimiter = ',')]
    threads: Vec<u32>,
    /// Comma-separated mean file sizes (the paper: 64KiB,128KiB,256KiB). Default: 128KiB for
    /// fileserver, 16KiB for varmail and webserver.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    mean_size: Vec<u64>,
    /// How long each case runs. Default: 60s, or 1s with --quick.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Files in the fileset. Default: the workload's (10,000 or 1,000), or 1,000 with --quick.
    #[arg(long)]
    files: Option<u64>,
    /// Comma-separated systems: tmpfs, xfs-ram, ext4-ram, tbfs-native, tbfs-shim, tbfs-fuse (root).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tmpfs,xfs-ram,ext4-ram,tbfs-native,tbfs-shim,tbfs-fuse"
    )]
    systems: Vec<String>,
    /// Runs of every case; each case reports its median run.
    #[arg(long, default_value_t = 1)]
    repeats: u32,
    /// Seed of the file sizes and the random choices.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// The tbfs pool's size. Default: four times the fileset's largest size, plus 1 GiB.
    #[arg(long, value_parser = parse_bytes)]
    pool_size: Option<u64>,
    /// Where the tmpfs directories, loop images and pools go: a directory on tmpfs, so every
    /// system runs on memory.
    #[arg(long, default_value = fileserver::SHM_DIR)]
    shm_dir: PathBuf,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write bars of ops/s per case and system as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Run one case on POSIX calls under --dir and print its result as JSON (internal: the child
    /// the tbfs-shim system runs under the shim).
    #[arg(long, hide = true, requires = "dir")]
    child: bool,
    /// The child's directory (internal).
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
}

#[derive(Args)]
struct RecoveryArgs {
    /// 64 MiB written per trial and 2 trials per row, a few seconds in all.
    #[arg(long)]
    quick: bool,
    /// Trials (crashes) per kind and barrier. Default: 5, or 2 with --quick.
    #[arg(long)]
    trials: Option<u32>,
    /// MB (2^20 bytes) written before the crash point's range ends. Default: 1024, or 64 with --quick.
    #[arg(long)]
    written_mb: Option<u64>,
    /// The pool's size in MB (2^20 bytes). Default: twice what is written, plus 64.
    #[arg(long)]
    pool_mb: Option<u64>,
    /// Bytes per write of the workload.
    #[arg(long, value_parser = parse_bytes, default_value = "64KiB")]
    buffer: u64,
    /// Comma-separated barrier policies: superblock, every-checkpoint, every-log.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "superblock,every-checkpoint"
    )]
    barriers: Vec<String>,
    /// Comma-separated kinds of crash: sim (power cut on the simulated device), kill (SIGKILL of a
    /// child writing through the file backend).
    #[arg(long, value_delimiter = ',', default_value = "sim,kill")]
    kinds: Vec<String>,
    /// Seed of the crash points.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Directory for the kill trials' pool file (default: a new temporary directory under
    /// /var/tmp, removed afterwards). The pool file is removed when the run ends.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run as the child of a kill trial (internal).
    #[arg(long, hide = true, requires = "pool")]
    child: bool,
    /// The child's pool file (internal).
    #[arg(long, hide = true)]
    pool: Option<PathBuf>,
    /// The child's exact bytes to write (internal).
    #[arg(long, hide = true)]
    written_bytes: Option<u64>,
}

#[derive(Args)]
struct SyncWriteArgs {
    /// An 8 MiB file instead of 128 MiB (every case, both buffer sizes), well under a minute.
    #[arg(long)]
    quick: bool,
    /// File size (a whole number of buffers). Default: 128MiB, or 8MiB with --quick.
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// Comma-separated buffer sizes (multiples of 4 KiB).
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes, default_value = "4KiB,64KiB")]
    buffers: Vec<u64>,
    /// Comma-separated configurations to run: an id (ext4, tbfs-relaxed-superblock, ...) or a
    /// leading part of one (tbfs, tbfs-strict). See --list.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// List every configuration and exit.
    #[arg(long)]
    list: bool,
    /// Seed of the random-rewrite order and the data written.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// The tbfs pool file's size. Default: large enough for every case without a cleaner.
    #[arg(long, value_parser = parse_bytes)]
    pool_size: Option<u64>,
    /// Directory for the ext4 file and the tbfs pool file (default: a new temporary directory
    /// under /var/tmp, removed afterwards). Both files are removed when the run ends.
    #[arg(long, conflicts_with = "loop_ext4")]
    dir: Option<PathBuf>,
    /// Put the ext4 file and the tbfs pool file on a fresh loop-mounted ext4 (noatime,lazytime),
    /// sharing one disk (root only). The loop device and mount are removed afterwards.
    #[arg(long)]
    loop_ext4: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write grouped bars of MB/s per pattern and buffer size as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[derive(Args)]
struct RecordArgs {
    /// The representative subset (NONE, ALL, tailbound, tailbound-decoupled; no load and the
    /// buffered writer), 1 set of 2,000 writes.
    #[arg(long)]
    quick: bool,
    /// Sets per case (the worst set is reported). Default: 5, or 1 with --quick.
    #[arg(long)]
    sets: Option<u32>,
    /// Writes per set. Default: 10000, or 2000 with --quick.
    #[arg(long)]
    writes: Option<u64>,
    /// Period between writes.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    period: Duration,
    /// Bytes per write.
    #[arg(long, default_value = "16KiB", value_parser = parse_bytes)]
    size: u64,
    /// Flush window of the recorder's background flush thread.
    #[arg(long, default_value = "2MiB", value_parser = parse_bytes)]
    flush_every: u64,
    /// Comma-separated cases to run: a name (every load it runs under: NONE, ALL, tailbound, …) or
    /// NAME@load (e.g. NONE@buffered-writer). See --list.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// List every case and exit.
    #[arg(long)]
    list: bool,
    /// Directory to record in (default: a new temporary directory, removed afterwards).
    #[arg(long, conflicts_with = "loop_ext4")]
    dir: Option<PathBuf>,
    /// Record on a fresh loop-mounted ext4 (noatime,lazytime) like the paper's setup (root only).
    #[arg(long)]
    loop_ext4: bool,
    /// Run the periodic (measuring) thread of every case in SCHED_FIFO at this priority (1-99,
    /// root), so deadline misses come from I/O rather than from waiting for a CPU.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=99))]
    rt_priority: Option<u8>,
    /// Pin every case's periodic (measuring) thread to this CPU; tailbound's flush thread keeps
    /// off it.
    #[arg(long)]
    cpu: Option<usize>,
    /// Lock tailbound's recorders in memory (mlockall; the mapped windows ahead are mlocked).
    #[arg(long)]
    mlock: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a box plot of the latencies (log scale) as SVG to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
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
        Experiment::Ship(args) => crate::cmd_ship::run_bench(args),
    }
}

fn run_cleaner(args: CleanerArgs) -> CliResult {
    let mut bench = if args.quick {
        CleanerBench::quick()
    } else {
        CleanerBench::full()
    };
    if let Some(v) = args.pool_size {
        bench.pool_bytes = v;
    }
    if let Some(v) = args.segment_size {
        bench.segment_bytes = v;
    }
    if let Some(v) = args.warmup {
        bench.warmup = v;
    }
    if let Some(v) = args.measure {
        bench.measure = v;
    }
    if let Some(v) = args.repeats {
        bench.repeats = v.max(1);
    }
    bench.seed = args.seed;
    if let Some(bad) = args
        .utilisation
        .iter()
        .find(|u| !(0.05..=0.95).contains(*u))
    {
        return Err(format!("--utilisation {bad}: a fraction between 0.05 and 0.95").into());
    }
    bench.utilisations = args.utilisation.clone();
    bench.workloads = args
        .workload
        .iter()
        .map(|w| {
            cleaner::Access::parse(w)
                .ok_or_else(|| format!("--workload {w}: uniform, hot-cold or mixed"))
        })
        .collect::<Result<_, _>>()?;
    let cases = (bench.workloads.len() * bench.utilisations.len()) as u64 * bench.repeats as u64;
    eprintln!(
        "bench cleaner: {cases} runs on a {} MiB memory pool of {} KiB segments, {} + {} capacities each",
        bench.pool_bytes >> 20,
        bench.segment_bytes >> 10,
        bench.warmup,
        bench.measure
    );
    run_with_progress(
        cases,
        "cleaner",
        args.json.as_deref(),
        |p| bench.run(p),
        |r| r.to_markdown(),
    )
}

/// Runs an experiment of `runs` steps behind a progress bar, prints its report and writes it as
/// JSON to `json` if given.
fn run_with_progress<R: serde::Serialize>(
    runs: u64,
    label: &str,
    json: Option<&Path>,
    run: impl FnOnce(&tailbound::bench::progress::Progress) -> Result<R, String>,
    markdown: impl FnOnce(&R) -> String,
) -> CliResult {
    let progress = tailbound::bench::progress::Progress::new(runs, label);
    let report = run(&progress)?;
    progress.finish();
    println!("{}", markdown(&report));
    if let Some(path) = json {
        write_json(path, &report)?;
    }
    Ok(())
}

fn run_delete(args: DeleteArgs) -> CliResult {
    let mut bench = if args.quick {
        DeleteBench::quick()
    } else {
        DeleteBench::full()
    };
    if !args.sizes.is_empty() {
        bench.sizes = args.sizes.clone();
    }
    if let Some(v) = args.repeats {
        bench.repeats = v.max(1);
    }
    let runs = 2 * bench.sizes.len() as u64 * u64::from(bench.repeats);
    eprintln!("bench delete: {runs} runs, each on a memory pool of its own");
    run_with_progress(
        runs,
        "delete",
        args.json.as_deref(),
        |p| bench.run(p),
        |r| r.to_markdown(),
    )
}

/// Where experiments put their files when not told: /var/tmp, which is on disk where /tmp may be
/// a tmpfs.
fn scratch_parent() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A directory an experiment works in, and what must be undone when it is done with.
enum WorkDir {
    Loop(LoopFs),
    Given(PathBuf),
    Scratch(tempfile::TempDir),
}

impl WorkDir {
    /// A fresh loop-mounted ext4 of `loop_bytes` when `loop_ext4`, else `dir` (created if missing),
    /// else a new temporary directory under [`scratch_parent`].
    fn new(
        loop_ext4: bool,
        loop_bytes: u64,
        dir: Option<PathBuf>,
    ) -> Result<WorkDir, Box<dyn std::error::Error + Send + Sync>> {
        if loop_ext4 {
            let fs = LoopFs::create_ext4(&scratch_parent(), loop_bytes)?;
            eprintln!(
                "working on ext4 (noatime,lazytime) on {} at {}",
                fs.device().unwrap_or("a loop device"),
                fs.mount_point().display()
            );
            Ok(WorkDir::Loop(fs))
        } else if let Some(dir) = dir {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            Ok(WorkDir::Given(dir))
        } else {
            let scratch = tempfile::Builder::new()
                .prefix("tailbound-bench-")
                .tempdir_in(scratch_parent())
                .map_err(|e| format!("creating a temporary directory: {e}"))?;
            Ok(WorkDir::Scratch(scratch))
        }
    }

    fn path(&self) -> &Path {
        match self {
            WorkDir::Loop(fs) => fs.mount_point(),
            WorkDir::Given(dir) => dir,
            WorkDir::Scratch(dir) => dir.path(),
        }
    }
}

fn run_sync_write(args: SyncWriteArgs) -> CliResult {
    if args.list {
        for config in sync_write::catalogue() {
            println!(
                "{:<32} fs={} ordering={} barrier={}",
                config.id(),
                config.fs.name(),
                config.ordering_label(),
                config.barrier_label()
            );
        }
        return Ok(());
    }
    // Everything is checked before anything is created on the machine.
    let mut bench = if args.quick {
        SyncWriteBench::quick(PathBuf::new())
    } else {
        SyncWriteBench::paper(PathBuf::new())
    };
    if let Some(size) = args.size {
        bench.file_bytes = size;
    }
    bench.buffers = args.buffers;
    bench.seed = args.seed;
    bench.pool_bytes_override = args.pool_size;
    if !args.cases.is_empty() {
        bench.configs = sync_write::select_configs(&args.cases)?;
    }
    bench.validate()?;
    // The loop file system holds the pool, the ext4 file and ext4's own overhead.
    let loop_bytes = bench.pool_bytes() + bench.file_bytes + (1 << 30);
    let work = WorkDir::new(args.loop_ext4, loop_bytes, args.dir)?;
    bench.dir = work.path().to_path_buf();
    eprintln!(
        "bench sync-write: {} configurations x {} buffer sizes x 3 patterns on a {} MiB file, \
         pool {} MiB, in {}",
        bench.configs.len(),
        bench.buffers.len(),
        bench.file_bytes >> 20,
        bench.pool_bytes() >> 20,
        bench.dir.display()
    );
    let report = bench.run(|rows| {
        let figures: Vec<String> = rows
            .iter()
            .map(|r| format!("{} {:.1} MB/s", r.pattern, r.mb_per_s))
            .collect();
        if let Some(r) = rows.first() {
            eprintln!(
                "  {} {} KiB: {}",
                r.series(),
                r.buffer_kib,
                figures.join(", ")
            );
        }
    })?;
    drop(work);
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let (groups, series) = report.bar_series();
        let title = format!("O_SYNC throughput, {} MiB file", report.file_mib);
        grouped_bar_svg(path, &title, "MB/s (MB = 2^20 bytes)", &groups, &series)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn run_record(args: RecordArgs) -> CliResult {
    if args.list {
        for case in record::catalogue() {
            println!("{:<32} {}", case.id(), case.design.label);
        }
        return Ok(());
    }
    // Checked before anything is created on the machine.
    if args.sets == Some(0) {
        return Err("--sets must be at least 1".into());
    }
    if args.writes == Some(0) {
        return Err("--writes must be at least 1".into());
    }
    if args.size < 8 {
        return Err("--size must be at least 8 bytes".into());
    }
    if args.period.is_zero() {
        return Err("--period must be more than zero".into());
    }
    let scratch;
    let loop_fs;
    let dir = if args.loop_ext4 {
        loop_fs = LoopFs::create_ext4(&std::env::temp_dir(), 4 << 30)?;
        eprintln!(
            "recording on ext4 (noatime,lazytime) on {} at {}",
            loop_fs.device().unwrap_or("a loop device"),
            loop_fs.mount_point().display()
        );
        loop_fs.mount_point().to_path_buf()
    } else if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        dir
    } else {
        scratch = tempfile::Builder::new()
            .prefix("tailbound-bench-")
            .tempdir()
            .map_err(|e| format!("creating a temporary directory: {e}"))?;
        scratch.path().to_path_buf()
    };
    let mut bench = if args.quick {
        RecordBench::quick(dir)
    } else {
        RecordBench::paper(dir)
    };
    bench.period = args.period;
    bench.record_bytes = args.size;
    bench.flush_every_bytes = args.flush_every;
    bench.rt_priority = args.rt_priority;
    bench.cpu = args.cpu;
    bench.mlock = args.mlock;
    if let Some(sets) = args.sets {
        bench.sets = sets;
    }
    if let Some(writes) = args.writes {
        bench.writes = writes;
    }
    if !args.cases.is_empty() {
        bench.cases = record::select_cases(&args.cases)?;
    }
    eprintln!(
        "bench record: {} cases x {} sets x {} writes of {} B every {:?} in {}",
        bench.cases.len(),
        bench.sets,
        bench.writes,
        bench.record_bytes,
        bench.period,
        bench.dir.display()
    );
    let report = bench.run(|rows| {
        for r in rows {
            match &r.skipped {
                Some(why) => eprintln!("  {}: skipped: {why}", r.label()),
                None => eprintln!(
                    "  {}: max {:.0} us, p99.9 {:.0} us, {} deadline misses",
                    r.label(),
                    r.latency.max_us,
                    r.latency.p999_us,
                    r.latency.deadline_misses
                ),
            }
        }
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "write() latency, {} B every {} us",
            report.record_bytes, report.period_us
        );
        latency_boxplot_svg(
            path,
            &title,
            &report.box_series(),
            Some(report.period_us as f64),
        )?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn parse_barriers(names: &[String]) -> Result<Vec<tailbound::tbfs::Barrier>, String> {
    names
        .iter()
        .map(|name| {
            recovery::parse_barrier(name).ok_or_else(|| {
                format!("unknown barrier policy {name:?} (superblock, every-checkpoint, every-log)")
            })
        })
        .collect()
}

fn run_recovery(args: RecoveryArgs) -> CliResult {
    let barriers = parse_barriers(&args.barriers)?;
    if args.child {
        return run_recovery_child(&args, &barriers);
    }
    let kinds = args
        .kinds
        .iter()
        .map(|name| {
            CrashKind::parse(name)
                .ok_or_else(|| format!("unknown kind of crash {name:?} (sim, kill)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut bench = if args.quick {
        RecoveryBench::quick(PathBuf::new())
    } else {
        RecoveryBench::paper(PathBuf::new())
    };
    if let Some(written_mb) = args.written_mb {
        bench.written_bytes = written_mb << 20;
        bench.pool_bytes = recovery::pool_bytes_for(bench.written_bytes);
    }
    if let Some(pool_mb) = args.pool_mb {
        bench.pool_bytes = pool_mb << 20;
    }
    if let Some(trials) = args.trials {
        bench.trials = trials;
    }
    bench.buffer_bytes = args.buffer;
    bench.barriers = barriers;
    bench.kinds = kinds;
    bench.seed = args.seed;
    bench.child_exe =
        Some(std::env::current_exe().map_err(|e| format!("finding the tailbound binary: {e}"))?);
    bench.validate()?;
    let work = WorkDir::new(false, 0, args.dir)?;
    bench.dir = work.path().to_path_buf();
    eprintln!(
        "bench recovery: {} trials x {} kinds x {} barriers, {} MiB written of a {} MiB pool, in {}",
        bench.trials,
        bench.kinds.len(),
        bench.barriers.len(),
        bench.written_bytes >> 20,
        bench.pool_bytes >> 20,
        bench.dir.display()
    );
    let report = bench.run(|r| {
        eprintln!(
            "  {} {}: mean {:.1} ms, max {:.1} ms over {} trials",
            r.kind, r.barrier, r.mean_ms, r.max_ms, r.trials
        );
    })?;
    drop(work);
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The child of a kill trial: writes until killed, reporting progress on stdout.
fn run_recovery_child(args: &RecoveryArgs, barriers: &[tailbound::tbfs::Barrier]) -> CliResult {
    let [barrier] = barriers else {
        return Err("--child takes exactly one barrier policy".into());
    };
    let spec = ChildSpec {
        pool: args.pool.clone().ok_or("--child needs --pool")?,
        workload: Workload {
            written_bytes: args.written_bytes.ok_or("--child needs --written-bytes")?,
            buffer_bytes: args.buffer,
            barrier: *barrier,
        },
    };
    let mut out = std::io::stdout().lock();
    spec.run(&mut out, || {
        // The parent kills the child; should the parent go away first, stdin closes and the
        // child ends too.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    })?;
    Ok(())
}

fn run_fileserver(args: FileserverArgs) -> CliResult {
    let workload = FsWorkload::parse(&args.workload).ok_or_else(|| {
        format!(
            "unknown workload {:?} (fileserver, varmail, webserver)",
            args.workload
        )
    })?;
    let base = Params::for_workload(workload);
    if args.child {
        let dir = args.dir.as_deref().ok_or("--child needs --dir")?;
        let [threads] = args.threads[..] else {
            return Err("--child takes exactly one thread count".into());
        };
        let [mean] = args.mean_size[..] else {
            return Err("--child takes exactly one mean size".into());
        };
        let p = Params {
            threads,
            mean_file_bytes: mean,
            duration: args.duration.ok_or("--child needs --duration")?,
            files: args.files.unwrap_or(base.files),
            seed: args.seed,
            ..base
        };
        p.validate()?;
        fileserver::run_child(dir, &p, &mut std::io::stdout().lock())?;
        return Ok(());
    }
    let mut bench = if args.quick {
        FileserverBench::quick()
    } else {
        FileserverBench::paper()
    };
    bench.workload = workload;
    if workload != FsWorkload::Fileserver {
        bench.threads = vec![base.threads];
        bench.mean_sizes = vec![base.mean_file_bytes];
    }
    if !args.threads.is_empty() {
        bench.threads = args.threads;
    }
    if !args.mean_size.is_empty() {
        bench.mean_sizes = args.mean_size;
    }
    if let Some(d) = args.duration {
        bench.duration = d;
    }
    if args.files.is_some() {
        bench.files = args.files;
    }
    bench.systems = args
        .systems
        .iter()
        .map(|name| {
            System::parse(name).ok_or_else(|| {
                format!(
                    "unknown system {name:?} (tmpfs, xfs-ram, ext4-ram, tbfs-native, tbfs-shim, tbfs-fuse)"
                )
            })
        })
        .collect::<Result<_, _>>()?;
    bench.repeats = args.repeats;
    bench.seed = args.seed;
    bench.shm_dir = args.shm_dir;
    bench.pool_bytes_override = args.pool_size;
    bench.exe = std::env::current_exe().ok();
    bench.validate()?;
    let cases = bench.threads.len() * bench.mean_sizes.len() * bench.systems.len();
    eprintln!(
        "bench fileserver: {} x {} threads x {} mean sizes x {} systems, {:?} per run, {} repeats          (about {} s of runs plus setup)",
        workload.name(),
        bench.threads.len(),
        bench.mean_sizes.len(),
        bench.systems.len(),
        bench.duration,
        bench.repeats,
        (cases as f64 * bench.repeats as f64 * bench.duration.as_secs_f64()).ceil()
    );
    for &s in &bench.systems {
        if let Some(why) = bench.unavailable(s) {
            eprintln!("  {}: unavailable: {why}", s.name());
        }
    }
    let report = bench.run(|system, r| {
        eprintln!(
            "  {} {} {} threads {} KiB: {:.0} ops/s, {:.1} MB/s, user {:.1} %, sys {:.1} % \
             (file system made in {:.1} s, fileset in {:.1} s)",
            system.name(),
            r.workload.name(),
            r.threads,
            r.mean_file_kib,
            r.ops_per_s,
            r.mb_per_s,
            r.user_cpu_pct,
            r.sys_cpu_pct,
            r.mkfs_s,
            r.setup_s
        );
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let (groups, series) = report.bar_series();
        let title = format!("filebench {} ops/s", workload.name());
        grouped_bar_svg(path, &title, "ops/s", &groups, &series)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// A flag SIGINT and SIGTERM set instead of killing the process, so an experiment that changed
/// the machine stops at the next check and undoes its changes on the way out.
fn interrupt_flag() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, flag.clone())
            .map_err(|e| format!("installing a handler for signal {signal}: {e}"))?;
    }
    Ok(flag)
}

fn current_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("finding the tailbound binary: {e}"))
}

/// A tenant's side: reads its orders on stdin and reports on stdout.
fn run_fairness_child(args: &FairnessArgs) -> CliResult {
    let op = args.op.as_deref().unwrap_or_default();
    let spec = TenantSpec {
        device: args.device.clone().ok_or("--child needs --device")?,
        region_offset: args.region_offset.ok_or("--child needs --region-offset")?,
        region_bytes: args.region_bytes.ok_or("--child needs --region-bytes")?,
        op: IoOp::parse(op).ok_or_else(|| format!("unknown --op {op:?} (read, write)"))?,
        block_bytes: args.block_bytes.ok_or("--child needs --block-bytes")?,
    };
    let input = std::io::BufReader::new(std::io::stdin());
    spec.run(input, &mut std::io::stdout().lock())?;
    Ok(())
}

fn parse_weight_set(text: &str) -> Result<Vec<u32>, String> {
    text.split(':')
        .map(|w| {
            w.trim()
                .parse::<u32>()
                .map_err(|_| format!("bad weight set {text:?} (e.g. 2:1 or 3:2:2:1)"))
        })
        .collect()
}

fn run_fairness(args: FairnessArgs) -> CliResult {
    if args.child {
        return run_fairness_child(&args);
    }
    let mut bench = if args.quick {
        FairnessBench::quick(PathBuf::new())
    } else {
        FairnessBench::full(PathBuf::new())
    };
    if !args.systems.is_empty() {
        bench.systems = args
            .systems
            .iter()
            .map(|s| {
                fairness::System::parse(s)
                    .ok_or_else(|| format!("unknown system {s:?} (tbfs, tbfs-fifo, bfq, none)"))
            })
            .collect::<Result<_, _>>()?;
    }
    if !args.weights.is_empty() {
        bench.weight_sets = args
            .weights
            .iter()
            .map(|w| parse_weight_set(w))
            .collect::<Result<_, _>>()?;
    }
    if !args.ops.is_empty() {
        bench.ops = args
            .ops
            .iter()
            .map(|o| IoOp::parse(o).ok_or_else(|| format!("unknown op {o:?} (read, write)")))
            .collect::<Result<_, _>>()?;
    }
    if !args.block_mb.is_empty() {
        bench.block_mibs = args.block_mb.clone();
    }
    if let Some(window) = args.window {
        bench.window = window;
    }
    if let Some(warmup) = args.warmup {
        bench.warmup = warmup;
    }
    if let Some(min_blocks) = args.min_blocks {
        bench.min_blocks = min_blocks;
    }
    bench.scratch_parent = args
        .dir
        .clone()
        .unwrap_or_else(fairness::default_scratch_parent);
    bench.child_exe = Some(current_exe()?);
    bench.validate()?;
    bench.interrupted = Some(interrupt_flag()?);
    let lengthened = if bench.min_blocks > 0 {
        format!(
            " (or long enough for {} blocks of the lightest tenant)",
            bench.min_blocks
        )
    } else {
        String::new()
    };
    eprintln!(
        "bench fairness: {} cases, {:?} warm-up + {:?} window{lengthened} each, a {} MiB loop \
         device over a file in {}",
        bench.case_count(),
        bench.warmup,
        bench.window,
        bench.device_bytes() >> 20,
        bench.scratch_parent.display()
    );
    let report = bench.run(|r| {
        eprintln!(
            "  {} {} {} {} MiB, {:.1} s window: {} MB/s, ratio {} (error {:.1} %)",
            r.system,
            fairness::weights_label(&r.weights),
            r.op,
            r.block_mb,
            r.window_s,
            r.shares_mb_per_s
                .iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" / "),
            fairness::ratio_string(&r.weights, &r.shares_mb_per_s),
            r.ratio_error * 100.0
        );
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let (groups, series) = report.bar_series();
        grouped_bar_svg(
            path,
            "Deviation of the shares from the weights",
            "ratio error (%)",
            &groups,
            &series,
        )?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The background copy's side: reads its orders on stdin and reports on stdout.
fn run_priority_child(args: &PriorityArgs) -> CliResult {
    let spec = CopySpec {
        src: args.src.clone().ok_or("--child needs --src")?,
        dst_dir: args.dst_dir.clone().ok_or("--child needs --dst-dir")?,
        chunk_bytes: args.chunk_bytes.ok_or("--child needs --chunk-bytes")?,
    };
    let input = std::io::BufReader::new(std::io::stdin());
    spec.run(input, &mut std::io::stdout().lock())?;
    Ok(())
}

fn run_priority(args: PriorityArgs) -> CliResult {
    if args.child {
        return run_priority_child(&args);
    }
    let mut bench = if args.quick {
        PriorityBench::quick(PathBuf::new())
    } else {
        PriorityBench::full(PathBuf::new())
    };
    bench.rates = args
        .rates
        .iter()
        .map(|r| Rate::parse(r).ok_or_else(|| format!("unknown rate {r:?} (N/s or flat-out)")))
        .collect::<Result<_, _>>()?;
    bench.schedulers = args
        .schedulers
        .iter()
        .map(|s| {
            KernelSched::parse(s)
                .ok_or_else(|| format!("unknown scheduler {s:?} (none, mq-deadline, kyber, bfq)"))
        })
        .collect::<Result<_, _>>()?;
    bench.tbfs_policies = args
        .policies
        .iter()
        .filter(|p| p.as_str() != "none")
        .map(|p| p.parse::<tailbound::sched::Policy>())
        .collect::<Result<_, _>>()?;
    if let Some(writes) = args.writes {
        bench.writes = writes;
    }
    if let Some(bytes) = args.copy_size {
        bench.copy_bytes = bytes;
    }
    if let Some(alone) = args.copy_alone {
        bench.copy_alone = alone;
    }
    bench.latency_goal = args.latency_goal;
    bench.writer_alone = !args.no_writer_alone;
    bench.scratch_parent = args
        .dir
        .clone()
        .unwrap_or_else(fairness::default_scratch_parent);
    bench.child_exe = Some(current_exe()?);
    bench.validate()?;
    bench.interrupted = Some(interrupt_flag()?);
    eprintln!(
        "bench priority: {} cases and {} writer-alone runs x {} writes, a {} MiB copy, about {:.0} \
         s of measuring, on ext4 on a loop device over a file in {}",
        bench.case_count(),
        bench.alone_count(),
        bench.writes,
        bench.copy_bytes >> 20,
        bench.estimate().as_secs_f64(),
        bench.scratch_parent.display()
    );
    let report = bench.run(|r| {
        if !r.with_copy {
            eprintln!(
                "  {} {} {} writer alone: p99.9 {:.0} us, max {:.0} us",
                r.system, r.scheduler, r.rate, r.p999_us, r.max_us
            );
            return;
        }
        eprintln!(
            "  {} {} {}: p99.9 {:.0} us, max {:.0} us; copy {:.1} MB/s ({:.1} alone)",
            r.system,
            r.scheduler,
            r.rate,
            r.p999_us,
            r.max_us,
            r.background_mb_per_s,
            r.background_alone_mb_per_s
        );
    })?;
    println!("{}", report.to_markdown());
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "{} B O_SYNC append latency under a {} MiB copy",
            report.write_bytes, report.copy_mb
        );
        latency_boxplot_svg(path, &title, &report.box_series(), None)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
