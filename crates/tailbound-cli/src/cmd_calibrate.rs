//! `tailbound calibrate DEVICE|FILE`: measure a device's service time against request size and
//! store the cost profile the I/O scheduler uses.

use std::path::PathBuf;
use std::time::Duration;

use tailbound::sched::calibrate::{
    calibrate, default_profile_path, CalibrateOptions, SIZES_DEFAULT,
};
use tailbound::sched::{DeviceProfile, Op};
use tailbound::units::{parse_bytes, parse_duration, Bytes};

use crate::CliResult;

/// Measure how long O_DIRECT reads and writes take on a device or file, from 4 KiB to 64 MiB, and
/// store a device profile for tailbound's I/O scheduler.
///
/// The scheduler charges each request a modelled cost (per I/O + per byte, reads and writes apart)
/// and splits large requests to `max_io`, the largest size whose median service time here stays
/// within --latency-goal: a higher-priority or lighter-weight tenant then never waits behind more
/// than one such piece. Without a profile the scheduler uses a conservative one (4 MiB reads,
/// 1 MiB writes).
///
/// Where it may write, it also times flushes after 0 to 16 MiB written: a device with a volatile
/// cache writes back at a flush what it cached, and requests behind the flush wait for it. The
/// scheduler then flushes on its own after the "flush debt" (the bytes whose write-back costs
/// what one max_io_write piece costs, but no fewer than take eight times a flush's fixed cost to
/// write), so no flush holds a request much longer than a piece does.
///
/// Safety: reads never change anything. Writes are timed only on a file this command creates
/// (when TARGET does not exist; it is removed afterwards) or when --write-scratch says TARGET's
/// contents may be destroyed; otherwise only reads are timed and the write half of the profile
/// stays conservative.
///
/// The profile goes to --out, or by default to $XDG_CONFIG_HOME/tailbound/profiles/ (else
/// ~/.config/tailbound/profiles/) under the target's path flattened (/dev/sdb → dev_sdb.json),
/// where the scheduler finds it.
///
/// Example: tailbound calibrate /mnt/data/calib.tmp --latency-goal 20ms
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Block device or file to measure. A path that does not exist is created as a scratch file.
    target: PathBuf,
    /// Where to store the profile (JSON). Default: the profile directory, see above.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Largest service time a single request may take; picks max_io for reads and writes.
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    latency_goal: Duration,
    /// TARGET exists and its contents may be overwritten: time writes on it too.
    #[arg(long)]
    write_scratch: bool,
    /// Timed requests per size and operation (the median is kept).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Largest request size to time.
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    max_size: u64,
    /// Size of the scratch file made when TARGET does not exist.
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    scratch_size: u64,
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

pub fn run(args: CalibrateArgs) -> CliResult {
    let out = match args.out.clone() {
        Some(p) => p,
        None => default_profile_path(&args.target)
            .ok_or("no profile directory: set XDG_CONFIG_HOME or HOME, or pass --out")?,
    };
    let sizes: Vec<u64> = SIZES_DEFAULT
        .iter()
        .copied()
        .filter(|&s| s <= args.max_size)
        .collect();
    if sizes.is_empty() {
        return Err("--max-size is below the smallest size measured (4 KiB)".into());
    }
    let opts = CalibrateOptions {
        latency_goal: args.latency_goal,
        write_scratch: args.write_scratch,
        sizes,
        samples: args.samples,
        create_bytes: args.scratch_size,
        ..CalibrateOptions::new(&args.target)
    };
    eprintln!(
        "calibrating {} ({} timed requests per size and operation)",
        args.target.display(),
        opts.samples
    );
    let c = calibrate(&opts, |p| {
        eprintln!(
            "  {:5} {:>9}{}: median {} ms",
            p.op.name(),
            Bytes(p.size).to_string(),
            if p.op == Op::Flush { " written" } else { "" },
            ms(p.median_ns)
        );
    })?;
    println!(
        "| op | size (a flush: bytes written before it) | median ms | min ms | max ms | model ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for p in &c.points {
        let model_ns = match p.op {
            Op::Flush => c.profile.flush_cost_ns(p.size),
            op => c.profile.cost_ns(op, p.size),
        };
        println!(
            "| {} | {} | {} | {} | {} | {:.3} |",
            p.op.name(),
            Bytes(p.size),
            ms(p.median_ns),
            ms(p.min_ns),
            ms(p.max_ns),
            model_ns / 1e6
        );
    }
    let prof: &DeviceProfile = &c.profile;
    println!();
    println!(
        "read:  {:.1} µs per I/O + {:.3} ns per byte ({:.0} MB/s); max_io_read {}",
        prof.read_io_ns / 1e3,
        prof.read_byte_ns,
        if prof.read_byte_ns > 0.0 {
            1e3 / prof.read_byte_ns
        } else {
            f64::INFINITY
        },
        Bytes(prof.max_io_read)
    );
    if c.wrote {
        println!(
            "write: {:.1} µs per I/O + {:.3} ns per byte ({:.0} MB/s); max_io_write {}",
            prof.write_io_ns / 1e3,
            prof.write_byte_ns,
            if prof.write_byte_ns > 0.0 {
                1e3 / prof.write_byte_ns
            } else {
                f64::INFINITY
            },
            Bytes(prof.max_io_write)
        );
    } else {
        println!(
            "write: not measured ({} exists; pass --write-scratch if its contents may be destroyed), \
             conservative values kept; max_io_write {}",
            args.target.display(),
            Bytes(prof.max_io_write)
        );
    }
    if c.wrote {
        println!(
            "flush: {:.1} µs + {:.3} ns per byte written since the last flush; flush debt {}",
            prof.flush_ns / 1e3,
            prof.flush_byte_ns,
            prof.flush_debt().map_or(
                "none (flushes do not grow with what was written)".to_string(),
                |d| { Bytes(d).to_string() }
            )
        );
    }
    if !c.direct {
        println!("note: the file system refused O_DIRECT, so these are page-cache times");
    }
    if c.created {
        println!(
            "scratch file {} made for this run and removed",
            args.target.display()
        );
    }
    prof.save(&out)?;
    println!("profile saved to {}", out.display());
    Ok(())
}
