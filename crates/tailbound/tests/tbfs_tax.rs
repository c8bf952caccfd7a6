//! Who pays the cleaning (issue 43, fairness at 1 s windows): two tenants of weights 2 and 1
//! overwrite their own files at random offsets with direct writes on a pool behind the scheduler, in the order
//! a 2:1 share gives them (two writes of the heavier for each of the lighter), on one thread
//! and with only writers cleaning, so the run is the same each time and nothing depends on
//! timing. Counted per tenant from `Fs::tenant_writes`: the blocks written and the blocks its
//! writers copied cleaning inline.
//!
//! Cleaning is paid in proportion to what each tenant writes when, over every stretch of the
//! run as long as a few cleaning pieces, each tenant's share of the copies is near its share of
//! the blocks written. Before the cleaning tax (`tbfs::tax`) the writer that found room short
//! cleaned until there was room again, in passes of as many victims as fitted, and so paid
//! for several writes' worth of everyone's at once.

use std::sync::Arc;
use std::time::Duration;

use tailbound::dev::sim::SimDevice;
use tailbound::sched::{set_thread_tenant, Prio, SchedDevice, Scheduler, TenantId};
use tailbound::tbfs::{Barrier, Clock, Config, Fs, OpenFlags, Ordering, WriterKey};

const SEGMENT: u64 = 512 << 10;
const POOL: u64 = 32 << 20;
const FILE: u64 = 10 << 20;
const WRITE: u64 = 256 << 10;

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::default(),
        segment_bytes: SEGMENT,
        superblock_every_bytes: 8 << 20,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 0,
        clock: Clock::stepped(1_000_000_000, Duration::from_millis(1)),
    }
}

/// One write's tenant, and the blocks it wrote, copied cleaning (every kind), and copied
/// cleaning until there was room.
struct Step {
    tenant: usize,
    written: u64,
    copied: u64,
    room: u64,
}

/// The blocks `key`'s writers copied cleaning so far, and of those cleaning until there was
/// room.
fn copied(fs: &Fs, key: WriterKey) -> (u64, u64) {
    fs.tenant_writes()
        .iter()
        .find(|t| t.key == key)
        .map_or((0, 0), |t| (t.clean_blocks, t.room_clean_blocks))
}

/// `rounds` rounds of the heavier tenant's two writes and the lighter's one, of `sizes`
/// bytes (heavier, lighter).
fn run(rounds: usize, sizes: [u64; 2]) -> Vec<Step> {
    let sched = Scheduler::new(
        Arc::new(SimDevice::new(POOL)),
        tailbound::sched::Config::default(),
    )
    .expect("scheduler");
    let fs = Fs::format(Arc::new(SchedDevice::new(Arc::clone(&sched))), &config()).unwrap();
    let tenants: Vec<TenantId> = [2, 1]
        .iter()
        .enumerate()
        .map(|(i, &w)| sched.add_tenant(&format!("tenant {i}"), Prio::DEFAULT, w))
        .collect();
    let data: Vec<u8> = (0..sizes[0].max(sizes[1]).max(WRITE))
        .map(|i| (i % 251) as u8)
        .collect();
    let files: Vec<_> = (0..2)
        .map(|i| {
            let f = fs
                .open_file(
                    &format!("/tenant-{i}"),
                    OpenFlags {
                        direct: true,
                        ..OpenFlags::create()
                    },
                )
                .unwrap();
            for k in 0..FILE / WRITE {
                f.pwrite(&data[..WRITE as usize], k * WRITE).unwrap();
            }
            f.fsync().unwrap();
            f
        })
        .collect();
    // Overwrites at offsets from a fixed stream: every segment keeps some live blocks, so
    // cleaning copies.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut steps = Vec::new();
    for _ in 0..rounds {
        for tenant in [0, 0, 1] {
            set_thread_tenant(Some(tenants[tenant]));
            let key = WriterKey::Tenant(tenants[tenant].0);
            let before = copied(&fs, key);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = sizes[tenant];
            let at = x % (FILE / size) * size;
            files[tenant].pwrite(&data[..size as usize], at).unwrap();
            let after = copied(&fs, key);
            steps.push(Step {
                tenant,
                written: size / 4096,
                copied: after.0 - before.0,
                room: after.1 - before.1,
            });
        }
    }
    set_thread_tenant(None);
    steps
}

/// Over windows of `window` writes, how far the heavier tenant's share of the copies was from
/// its share of the blocks written at worst, and each window's copies (heavier / lighter).
fn worst_share_off(steps: &[Step], window: usize) -> (f64, Vec<String>) {
    let mut worst = 0.0f64;
    let mut windows = Vec::new();
    for (i, w) in steps.chunks_exact(window).enumerate() {
        let sum = |t: usize, f: fn(&Step) -> u64| -> u64 {
            w.iter().filter(|s| s.tenant == t).map(f).sum()
        };
        let c = [sum(0, |s| s.copied), sum(1, |s| s.copied)];
        let b = [sum(0, |s| s.written), sum(1, |s| s.written)];
        if c[0] + c[1] == 0 {
            continue;
        }
        let share = c[0] as f64 / (c[0] + c[1]) as f64;
        let due = b[0] as f64 / (b[0] + b[1]) as f64;
        worst = worst.max((share - due).abs());
        windows.push(format!("{i}: {} / {} ({share:.2})", c[0], c[1]));
    }
    (worst, windows)
}

#[test]
fn each_tenant_pays_cleaning_in_proportion_to_what_it_writes() {
    let steps = run(400, [WRITE, WRITE]);
    let copies: u64 = steps.iter().map(|s| s.copied).sum();
    let written: u64 = steps.iter().map(|s| s.written).sum();
    assert!(
        copies > written / 10,
        "the run cleaned too little to tell who pays: {copies} blocks copied for {written} written"
    );
    let largest = steps.iter().map(|s| s.copied).max().unwrap_or(0);
    for window in [30, 60, 120] {
        let (worst, windows) = worst_share_off(&steps, window);
        println!(
            "windows of {window} writes: worst share off by {worst:.3}; {}",
            windows.join(", ")
        );
    }
    println!("copies {copies} for {written} written; the largest one write's {largest}");
    // Windows of 60 and 120 writes (15 and 30 MiB, half the pool and all of it: a 1 s window
    // of the fairness bench writes about that much of its pool). Before the tax the heavier
    // tenant's share was off by up to 0.67 and 0.22 in this run, the lumps being whole
    // cleanings of several victims; the rest, with the tax, is a piece's worth either side.
    for (window, most) in [(60, 0.2), (120, 0.15)] {
        let (worst, windows) = worst_share_off(&steps, window);
        assert!(
            worst <= most,
            "the heavier tenant's share of the cleaning was {worst:.3} off its share of the \
             writes in a window of {window} writes: {}",
            windows.join(", ")
        );
    }
    // No write stalls for more than a couple of victims' copies (before the tax one write
    // copied 396 blocks, three segments' worth).
    let segment = SEGMENT / 4096;
    assert!(
        largest <= 2 * segment,
        "one write copied {largest} blocks cleaning, more than two segments of {segment}"
    );
}

/// The heavier tenant writes four times the blocks per write (1 MiB against 256 KiB), so its
/// writes find less free than the floor and clean until there is room. That cleaning is
/// counted apart (`TenantWrites::room_clean_blocks`), as part of all its cleaning, and only for
/// the writer that did it; the tax's pieces are not counted there.
#[test]
fn cleaning_until_there_is_room_is_counted_apart() {
    let steps = run(150, [4 * WRITE, WRITE]);
    let total = |t: usize, f: fn(&Step) -> u64| -> u64 {
        steps.iter().filter(|s| s.tenant == t).map(f).sum()
    };
    let copies = [total(0, |s| s.copied), total(1, |s| s.copied)];
    let room = [total(0, |s| s.room), total(1, |s| s.room)];
    println!("copies {copies:?}, of them until there was room {room:?}");
    assert!(
        room[0] > 0,
        "the heavier tenant never cleaned until there was room: {copies:?}"
    );
    assert!(
        room[0] < copies[0] && room[1] <= copies[1],
        "cleaning until there was room {room:?} is part of all the cleaning {copies:?}, pieces too"
    );
    for s in &steps {
        assert!(
            s.room <= s.copied,
            "a write's cleaning until there was room outgrew its cleaning"
        );
    }
}
