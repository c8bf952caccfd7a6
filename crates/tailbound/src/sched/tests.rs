//! Tests of the queue's invariants (proptest) and of the real executor on simulated and memory
//! devices.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::queue::{Queue, Request};
use super::*;
use crate::dev::sim::{SimDevice, SimFaults};
use crate::dev::{Device, BLOCK_SIZE};

pub(super) fn prio(class: Class) -> Prio {
    Prio { class, level: 4 }
}

fn class_of(i: u8) -> Class {
    match i % 3 {
        0 => Class::Rt,
        1 => Class::Be,
        _ => Class::Idle,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the policy and requests: every byte of every request is dispatched exactly once,
    /// each tenant's pieces leave in submission order, no dispatch is larger than the split size
    /// (or the merge maximum), merges join only adjacent pieces of one operation (and one class),
    /// and BE/IDLE dispatches hold at most `merge_cap` merges.
    #[test]
    fn split_and_merge_invariants(
        policy in prop::sample::select(Policy::ALL.to_vec()),
        max_io_blocks in 1u64..8,
        merge_cap in 0usize..4,
        depth in 1usize..4,
        tenants in prop::collection::vec((0u8..3, 1u32..5), 1..4),
        reqs in prop::collection::vec((0usize..4, 0u8..3, 0u64..6, 0u64..20, any::<bool>()), 1..40),
    ) {
        let max_io = max_io_blocks * BLOCK_SIZE;
        let mut q = Queue::new(&Config {
            policy,
            max_io: Some(max_io),
            depth,
            merge_cap,
            aging: Duration::from_nanos(50),
            ..Config::default()
        });
        for (i, &(class, weight)) in tenants.iter().enumerate() {
            q.add_tenant(&format!("t{i}"), prio(class_of(class)), weight);
        }
        let mut expect: HashMap<u64, (TenantId, u64)> = HashMap::new();
        let mut now = 0;
        // Requests may be adjacent (sequential "cursor") so merges happen.
        let mut cursor = 0u64;
        for &(t, op, blocks, gap, adjacent) in &reqs {
            let t = TenantId((t % tenants.len()) as u32);
            let op = match op { 0 => Op::Read, 1 => Op::Write, _ => Op::Flush };
            let len = if op == Op::Flush { 0 } else { blocks * BLOCK_SIZE };
            if !adjacent {
                cursor += gap * BLOCK_SIZE;
            }
            let id = q.push(now, Request { tenant: t, op, offset: cursor, len });
            cursor += len;
            expect.insert(id, (t, len));
            now += 10;
        }
        let mut covered: HashMap<u64, u64> = HashMap::new();
        let mut last: HashMap<TenantId, (u64, u64)> = HashMap::new();
        let mut in_flight = Vec::new();
        let mut completed = 0usize;
        while q.queued() > 0 || !in_flight.is_empty() {
            now += 7;
            while let Some(d) = q.pop(now) {
                prop_assert!(q.in_flight() <= depth);
                prop_assert!(policy == Policy::Fifo || d.len <= max_io);
                if d.class != Class::Rt {
                    prop_assert!(d.pieces.len() <= merge_cap + 1);
                }
                let mut at = d.offset;
                for p in &d.pieces {
                    prop_assert_eq!(p.op, d.op);
                    prop_assert_eq!(p.offset, at);
                    at += p.len;
                    if policy != Policy::Priority {
                        prop_assert_eq!(p.tenant, d.pieces[0].tenant);
                    }
                    prop_assert_eq!(q.tenant_prio(p.tenant).class, d.class);
                    prop_assert!(p.len <= max_io || policy == Policy::Fifo);
                    let c = covered.entry(p.req).or_default();
                    prop_assert_eq!(*c, p.req_offset, "pieces of a request leave in order");
                    *c += p.len;
                    let key = (p.req, p.req_offset);
                    if let Some(prev) = last.insert(p.tenant, key) {
                        prop_assert!(prev < key, "tenant order {:?} then {:?}", prev, key);
                    }
                }
                prop_assert_eq!(at, d.offset + d.len);
                in_flight.push(d);
            }
            // Complete the oldest dispatch.
            if !in_flight.is_empty() {
                let d = in_flight.remove(0);
                completed += q.complete(now, &d).len();
            }
        }
        prop_assert_eq!(completed, expect.len());
        for (id, (_, len)) in &expect {
            prop_assert_eq!(covered.get(id).copied(), Some(*len));
        }
        let stats = q.stats();
        let bytes: u64 = stats.iter().map(|s| s.bytes).sum();
        let ops: u64 = stats.iter().map(|s| s.ops).sum();
        prop_assert_eq!(bytes, expect.values().map(|v| v.1).sum::<u64>());
        prop_assert_eq!(ops, expect.len() as u64);
        prop_assert_eq!(q.outstanding(), 0);
    }
}

#[test]
fn priority_serves_classes_first_and_fifo_within() {
    let mut q = Queue::new(&Config {
        policy: Policy::Priority,
        depth: 1,
        ..Config::default()
    });
    let idle = q.add_tenant("idle", prio(Class::Idle), 1);
    let be1 = q.add_tenant("be1", prio(Class::Be), 1);
    let be2 = q.add_tenant("be2", prio(Class::Be), 8);
    let rt = q.add_tenant("rt", prio(Class::Rt), 1);
    let mut order = Vec::new();
    let mut push = |q: &mut Queue, t, offset: u64| {
        let id = q.push(
            0,
            Request {
                tenant: t,
                op: Op::Write,
                offset: offset * 1_000_000 * BLOCK_SIZE,
                len: BLOCK_SIZE,
            },
        );
        order.push((id, t));
        id
    };
    let i0 = push(&mut q, idle, 1);
    let b1 = push(&mut q, be1, 2);
    let b2 = push(&mut q, be2, 3);
    let b3 = push(&mut q, be1, 4);
    let r0 = push(&mut q, rt, 5);
    let mut served = Vec::new();
    while let Some(d) = q.pop(1) {
        served.push(d.pieces[0].req);
        q.complete(2, &d);
    }
    // Weight does not matter to `priority`: BE requests go in arrival order.
    assert_eq!(served, vec![r0, b1, b2, b3, i0]);
}

#[test]
fn priority_merges_adjacent_requests_up_to_the_cap() {
    for (class, cap, expect_pieces) in [(Class::Be, 3usize, 4usize), (Class::Rt, 3, 10)] {
        let mut q = Queue::new(&Config {
            policy: Policy::Priority,
            depth: 1,
            merge_cap: cap,
            max_io: Some(1 << 30),
            ..Config::default()
        });
        let a = q.add_tenant("a", prio(class), 1);
        let b = q.add_tenant("b", prio(class), 1);
        let other = q.add_tenant("other", prio(Class::Idle), 1);
        // Ten adjacent 4 KiB writes alternating between two tenants of one class, and one
        // adjacent write of another class that must not merge.
        for i in 0..10u64 {
            let t = if i % 2 == 0 { a } else { b };
            q.push(
                0,
                Request {
                    tenant: t,
                    op: Op::Write,
                    offset: i * BLOCK_SIZE,
                    len: BLOCK_SIZE,
                },
            );
        }
        q.push(
            0,
            Request {
                tenant: other,
                op: Op::Write,
                offset: 10 * BLOCK_SIZE,
                len: BLOCK_SIZE,
            },
        );
        let d = q.pop(0).expect("a dispatch");
        assert_eq!(d.pieces.len(), expect_pieces, "{class:?}");
        assert_eq!(d.len, expect_pieces as u64 * BLOCK_SIZE);
        let merges: u64 = q.stats().iter().map(|s| s.merges).sum();
        assert_eq!(merges, expect_pieces as u64 - 1);
    }
}

#[test]
fn default_is_weighted_within_a_class() {
    let mut q = Queue::new(&Config {
        policy: Policy::Default,
        depth: 1,
        ..Config::default()
    });
    let heavy = q.add_tenant("heavy", prio(Class::Be), 3);
    let light = q.add_tenant("light", prio(Class::Be), 1);
    for i in 0..400u64 {
        for (t, base) in [(heavy, 0u64), (light, 1u64 << 40)] {
            q.push(
                0,
                Request {
                    tenant: t,
                    op: Op::Read,
                    offset: base + i * 2 * BLOCK_SIZE,
                    len: BLOCK_SIZE,
                },
            );
        }
    }
    let mut first = [0u32; 2];
    for _ in 0..200 {
        let d = q.pop(0).expect("queued");
        first[d.pieces[0].tenant.0 as usize] += 1;
        q.complete(0, &d);
    }
    assert_eq!(first, [150, 50], "the first 200 dispatches split 3:1");
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

fn check_executor(policy: Policy) {
    let dev = Arc::new(SimDevice::new(64 << 20));
    let sched = Scheduler::new(
        dev.clone(),
        Config {
            policy,
            depth: 3,
            max_io: Some(64 << 10),
            ..Config::default()
        },
    )
    .expect("scheduler");
    let tenants: Vec<TenantId> = [Class::Rt, Class::Be, Class::Be, Class::Idle]
        .iter()
        .enumerate()
        .map(|(i, &c)| sched.add_tenant(&format!("t{i}"), prio(c), i as u32 + 1))
        .collect();
    let region = 8u64 << 20;
    let sizes = [4096usize, 64 << 10, 200 << 10, 1 << 20];
    std::thread::scope(|s| {
        for (i, &t) in tenants.iter().enumerate() {
            let sched = &sched;
            s.spawn(move || {
                let base = i as u64 * region;
                let mut offset = base;
                for (k, &size) in sizes.iter().cycle().take(24).enumerate() {
                    let data = pattern((i * 1000 + k) as u64, size);
                    sched.write_at(t, offset, &data).expect("write");
                    let mut back = vec![0u8; size];
                    sched.read_at(t, offset, &mut back).expect("read");
                    assert!(
                        back == data,
                        "{policy:?} tenant {i} request {k}: data differs"
                    );
                    offset += size as u64;
                }
                sched.flush(t).expect("flush");
            });
        }
    });
    // What the device holds matches what was written, read directly.
    for i in 0..tenants.len() {
        let mut offset = i as u64 * region;
        for (k, &size) in sizes.iter().cycle().take(24).enumerate() {
            let mut back = vec![0u8; size];
            dev.read_at(offset, &mut back).expect("direct read");
            assert!(back == pattern((i * 1000 + k) as u64, size));
            offset += size as u64;
        }
    }
    let per_tenant_bytes: u64 = 2 * sizes
        .iter()
        .cycle()
        .take(24)
        .map(|&s| s as u64)
        .sum::<u64>();
    let stats = sched.stats();
    assert_eq!(stats.len(), 4);
    for s in &stats {
        assert_eq!(s.bytes, per_tenant_bytes, "{policy:?} {}", s.name);
        assert_eq!(s.ops, 24 * 2 + 1, "{policy:?} {}", s.name);
        assert_eq!(s.queue_ns.len(), s.ops);
        assert_eq!(s.service_ns.len(), s.ops);
        // 200 KiB splits into 4 pieces of 64 KiB, 1 MiB into 16; reads and writes alike.
        let expect_splits = if policy == Policy::Fifo {
            0
        } else {
            2 * 6 * (3 + 15)
        };
        assert_eq!(s.splits, expect_splits, "{policy:?} {}", s.name);
    }
    // Four flushes asked for; one asked for while another is in the device with no write
    // completed since it was dispatched rides on it.
    let flushes = dev.stats().flushes;
    assert!((1..=4).contains(&flushes), "{policy:?}: {flushes} flushes");
}

#[test]
fn executor_keeps_data_and_stats_under_every_policy() {
    for policy in Policy::ALL {
        check_executor(policy);
    }
}

#[test]
fn executor_reports_device_errors_and_bad_requests() {
    let dev = Arc::new(SimDevice::new(1 << 20));
    dev.set_faults(SimFaults {
        fail_writes_after: Some(2),
        ..SimFaults::default()
    });
    let sched = Scheduler::new(dev, Config::default()).expect("scheduler");
    let t = sched.add_tenant("t", Prio::DEFAULT, 1);
    let block = vec![7u8; 4096];
    sched.write_at(t, 0, &block).expect("first write");
    sched.write_at(t, 4096, &block).expect("second write");
    let err = sched
        .write_at(t, 8192, &block)
        .expect_err("third write fails");
    assert!(err.to_string().contains("injected EIO"), "{err}");
    let err = sched.write_at(t, 100, &block).expect_err("unaligned");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let err = sched
        .read_at(t, 1 << 20, &mut [0u8; 4096])
        .expect_err("past the end");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let err = sched.flush(TenantId(9)).expect_err("unknown tenant");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(Scheduler::new(
        Arc::new(SimDevice::new(1 << 20)),
        Config {
            depth: 0,
            ..Config::default()
        }
    )
    .is_err());
}

#[test]
fn sched_device_uses_the_thread_tenant_or_the_thread_ioprio() {
    let dev = Arc::new(SimDevice::new(1 << 20));
    let sched = Scheduler::new(dev, Config::default()).expect("scheduler");
    let explicit = sched.add_tenant("explicit", prio(Class::Rt), 1);
    let sdev = SchedDevice::new(sched.clone());
    assert_eq!(sdev.len(), 1 << 20);
    std::thread::scope(|s| {
        s.spawn(|| {
            set_thread_tenant(Some(explicit));
            sdev.write_at(0, &[1u8; 8192]).expect("write");
            set_thread_tenant(None);
        });
        s.spawn(|| {
            // An idle thread's requests land in the tenant made for its ioprio.
            Prio {
                class: Class::Idle,
                level: 0,
            }
            .apply_to_current_thread()
            .expect("any thread may lower itself to idle");
            sdev.write_at(8192, &[2u8; 4096]).expect("write");
            let mut back = [0u8; 4096];
            sdev.read_at(8192, &mut back).expect("read");
            assert_eq!(back, [2u8; 4096]);
        });
    });
    let stats = sched.stats();
    assert_eq!(stats.len(), 2);
    assert_eq!(
        (stats[0].name.as_str(), stats[0].bytes, stats[0].ops),
        ("explicit", 8192, 1)
    );
    assert_eq!(stats[1].name, "ioprio idle/0");
    assert_eq!(stats[1].prio.class, Class::Idle);
    assert_eq!((stats[1].bytes, stats[1].ops), (8192, 2));
}

#[test]
fn ioprio_round_trips_on_the_calling_thread() {
    std::thread::spawn(|| {
        for p in [
            Prio {
                class: Class::Be,
                level: 6,
            },
            Prio {
                class: Class::Be,
                level: 7,
            },
            Prio {
                class: Class::Idle,
                level: 0,
            },
        ] {
            p.apply_to_current_thread()
                .expect("lowering one's own priority is allowed");
            assert_eq!(Prio::of_current_thread(), p);
        }
    })
    .join()
    .expect("thread");
}

#[test]
fn device_profile_saves_loads_and_rejects_nonsense() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p/dev.json");
    let mut p = DeviceProfile::conservative();
    p.max_io_read = 8 << 20;
    p.save(&path).expect("save");
    assert_eq!(DeviceProfile::load(&path).expect("load"), p);
    std::fs::write(&path, "{ not json").expect("write");
    let err = DeviceProfile::load(&path).expect_err("garbage");
    assert!(err.to_string().contains("dev.json"), "{err}");
    p.max_io_write = 1000;
    p.save(&path).expect("save");
    assert!(DeviceProfile::load(&path).is_err());
}

#[test]
fn a_holder_issues_its_io_at_the_lent_priority_while_it_is_lent() {
    let dev = Arc::new(SimDevice::new(1 << 20));
    let sched = Scheduler::new(dev, Config::default()).expect("scheduler");
    let sdev = SchedDevice::new(sched.clone());
    let cell = inherit::Inheritance::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            Prio {
                class: Class::Idle,
                level: 7,
            }
            .apply_to_current_thread()
            .expect("lowering to idle");
            let _hold = cell.hold();
            sdev.write_at(0, &[1u8; 4096]).expect("write");
            let lend = cell.lend(Prio {
                class: Class::Be,
                level: 0,
            });
            sdev.write_at(4096, &[2u8; 8192]).expect("write");
            drop(lend);
            sdev.write_at(16384, &[3u8; 4096]).expect("write");
        });
    });
    let by_name: HashMap<String, (u64, u64)> = sched
        .stats()
        .into_iter()
        .map(|s| (s.name, (s.bytes, s.ops)))
        .collect();
    assert_eq!(
        by_name.get("ioprio idle/7"),
        Some(&(8192, 2)),
        "{by_name:?}"
    );
    assert_eq!(by_name.get("ioprio be/0"), Some(&(8192, 1)), "{by_name:?}");
}

#[test]
fn tbfs_runs_through_the_scheduler_with_data_and_stats_intact() {
    use crate::tbfs::{Config as FsConfig, Fs, OpenFlags, OpenOptions};
    let dev = Arc::new(SimDevice::new(16 << 20));
    let sched = Scheduler::new(
        dev.clone(),
        Config {
            policy: Policy::Default,
            max_io: Some(64 << 10),
            ..Config::default()
        },
    )
    .expect("scheduler");
    let sdev: Arc<dyn Device> = Arc::new(SchedDevice::new(sched.clone()));
    let cfg = FsConfig {
        checkpoint_every: None,
        segment_bytes: 256 << 10,
        superblock_every_bytes: 1 << 20,
        ..FsConfig::default()
    };
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("/f{i}"), pattern(i, 50_000 + i as usize * 70_000)))
        .collect();
    {
        let fs = Fs::format(sdev.clone(), &cfg).expect("format");
        // The idle-class writers run first and alone: with a best-effort writer beside them, its
        // fsync may commit their data (or boost the commit they are in) before they get to it, and
        // no request would carry the idle class. Then the rest write concurrently.
        for idle_phase in [true, false] {
            std::thread::scope(|s| {
                for (k, (path, data)) in files.iter().enumerate() {
                    if (k % 2 == 0) != idle_phase {
                        continue;
                    }
                    let fs = &fs;
                    s.spawn(move || {
                        if idle_phase {
                            Prio {
                                class: Class::Idle,
                                level: 7,
                            }
                            .apply_to_current_thread()
                            .expect("lowering to idle");
                        }
                        let f = fs.open_file(path, OpenFlags::create()).expect("create");
                        f.pwrite(data, 0).expect("write");
                        f.fsync().expect("fsync");
                    });
                }
            });
        }
    }
    let fs = Fs::open(sdev, &OpenOptions::default()).expect("reopen");
    for (path, data) in &files {
        let f = fs.open_file(path, OpenFlags::read_only()).expect("open");
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.pread(&mut back, 0).expect("read"), data.len());
        assert!(&back == data, "{path} differs");
    }
    drop(fs);
    let stats = sched.stats();
    let written: u64 = dev.stats().bytes_written;
    let sched_bytes: u64 = stats.iter().map(|s| s.bytes).sum();
    let reads_and_writes = dev.stats().reads + dev.stats().writes + dev.stats().flushes;
    let dispatched_ops: u64 = stats.iter().map(|s| s.ops).sum();
    // Every device write went through the scheduler (reads are counted in its bytes too).
    assert!(
        sched_bytes >= written,
        "scheduler saw {sched_bytes} bytes, device wrote {written}"
    );
    assert!(dispatched_ops > 0 && reads_and_writes > 0);
    assert!(
        stats
            .iter()
            .any(|s| s.prio.class == Class::Idle && s.ops > 0),
        "{stats:?}"
    );
}

#[test]
fn a_tbfs_commit_an_urgent_thread_waits_for_runs_at_its_priority() {
    use crate::tbfs::{Config as FsConfig, Fs};
    let dev = Arc::new(SimDevice::new(16 << 20));
    let sched = Scheduler::new(dev, Config::default()).expect("scheduler");
    let sdev: Arc<dyn Device> = Arc::new(SchedDevice::new(sched.clone()));
    let cfg = FsConfig {
        checkpoint_every: None,
        segment_bytes: 256 << 10,
        superblock_every_bytes: 1 << 20,
        ..FsConfig::default()
    };
    let fs = Fs::format(sdev, &cfg).expect("format");
    let idle = Prio {
        class: Class::Idle,
        level: 7,
    };
    let urgent = Prio {
        class: Class::Be,
        level: 0,
    };
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let fs = &fs;
        s.spawn(move || {
            idle.apply_to_current_thread().expect("lowering to idle");
            // Seal a checkpoint's logs (the raw lock: a guard would write them on release),
            // then hold the log writer as a thread writing them does.
            fs.inner
                .commit_checkpoint(&mut fs.inner.lock_meta_raw())
                .expect("checkpoint");
            let mut w = fs.inner.logs.lock_writer();
            let hold = fs.inner.logs.inheritance().hold();
            locked_tx.send(()).expect("signal");
            // Wait (without a clock) until the other thread is blocked on the log writer.
            while fs.inner.logs.inheritance().highest().is_none() {
                std::thread::yield_now();
            }
            fs.inner.write_queued(&mut w, u64::MAX).expect("write");
            assert_eq!(
                Prio::of_current_thread(),
                urgent,
                "kernel ioprio raised while lent"
            );
            drop(hold);
            drop(w);
            assert_eq!(Prio::of_current_thread(), idle, "restored after the commit");
        });
        s.spawn(move || {
            urgent
                .apply_to_current_thread()
                .expect("best effort level 0");
            locked_rx.recv().expect("holder locked");
            // Waits for the checkpoint's logs (as an fsync behind them would).
            fs.inner.write_logs_until(u64::MAX).expect("logs written");
        });
    });
    let stats = sched.stats();
    let urgent_ops: u64 = stats
        .iter()
        .filter(|s| s.prio == urgent)
        .map(|s| s.ops)
        .sum();
    let idle_ops: u64 = stats.iter().filter(|s| s.prio == idle).map(|s| s.ops).sum();
    assert!(
        urgent_ops > 0,
        "the commit's writes ran at the waiter's priority: {stats:?}"
    );
    assert_eq!(idle_ops, 0, "none at the holder's own: {stats:?}");
}

#[test]
fn boosting_moves_only_the_queued_pieces_of_one_request_ahead_of_lower_classes() {
    let mut q = Queue::new(&Config {
        policy: Policy::Priority,
        max_io: Some(BLOCK_SIZE),
        depth: 1,
        ..Config::default()
    });
    let idle = q.add_tenant("idle", prio(Class::Idle), 1);
    let be = q.add_tenant("be", prio(Class::Be), 1);
    let rt = q.add_tenant("rt", prio(Class::Rt), 1);
    let write = |tenant, offset: u64, blocks: u64| Request {
        tenant,
        op: Op::Write,
        offset: offset * 1_000_000 * BLOCK_SIZE,
        len: blocks * BLOCK_SIZE,
    };
    let held = q.push(0, write(idle, 1, 3));
    let other_idle = q.push(0, write(idle, 2, 1));
    let b = q.push(0, write(be, 3, 2));
    let first = q.pop(1).expect("a dispatch");
    assert_eq!(first.pieces[0].req, b, "BE goes before IDLE");
    assert_eq!(
        q.boost(2, held, rt),
        3,
        "all three pieces were still queued"
    );
    assert_eq!((q.queued_for(idle), q.queued_for(rt)), (1, 3));
    assert_eq!(q.boost(2, 999, rt), 0, "no such request");
    q.complete(3, &first);
    let mut served = Vec::new();
    while let Some(d) = q.pop(4) {
        assert!(d.pieces.iter().all(|p| p.req == d.pieces[0].req));
        served.push((d.pieces[0].req, d.class, d.len));
        q.complete(5, &d);
    }
    assert_eq!(
        served,
        vec![
            (held, Class::Rt, BLOCK_SIZE),
            (held, Class::Rt, BLOCK_SIZE),
            (held, Class::Rt, BLOCK_SIZE),
            (b, Class::Be, BLOCK_SIZE),
            (other_idle, Class::Idle, BLOCK_SIZE),
        ],
        "the boosted request goes first at its new class; the rest keep their order"
    );
    // It is still counted for the tenant that submitted it.
    let stats = q.stats();
    assert_eq!((stats[0].ops, stats[2].ops), (2, 0));
}

/// A device whose writes wait at a gate until it is opened, and which logs write offsets in the
/// order they reach it.
#[derive(Debug)]
struct GateDevice {
    inner: SimDevice,
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    log: std::sync::Mutex<Vec<u64>>,
}

impl Device for GateDevice {
    fn kind(&self) -> &'static str {
        "gate"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.log.lock().unwrap().push(offset);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        drop(open);
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Waits (without a deadline that could decide the outcome) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "gave up waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_request_already_queued_by_a_holder_is_raised_when_a_priority_is_lent() {
    let dev = Arc::new(GateDevice {
        inner: SimDevice::new(4 << 20),
        open: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
        log: std::sync::Mutex::new(Vec::new()),
    });
    let sched = Scheduler::new(
        dev.clone(),
        Config {
            policy: Policy::Priority,
            max_io: Some(BLOCK_SIZE),
            depth: 1,
            ..Config::default()
        },
    )
    .expect("scheduler");
    let sdev = SchedDevice::new(sched.clone());
    let idle7 = Prio {
        class: Class::Idle,
        level: 7,
    };
    let be0 = Prio {
        class: Class::Be,
        level: 0,
    };
    let be4 = prio(Class::Be);
    let (t_idle, t_be4, t_be0) = (
        sched.tenant_for_prio(idle7),
        sched.tenant_for_prio(be4),
        sched.tenant_for_prio(be0),
    );
    let cell = inherit::Inheritance::new();
    let (held_at, other_at) = (1 << 20, 2 << 20);
    std::thread::scope(|s| {
        // Occupies the one dispatch slot at the gate.
        s.spawn(|| {
            set_thread_tenant(Some(t_be4));
            sdev.write_at(0, &[1u8; 4096]).expect("write");
        });
        wait_until("the first write at the gate", || {
            dev.log.lock().unwrap().len() == 1
        });
        s.spawn(|| {
            idle7.apply_to_current_thread().expect("lowering to idle");
            let _hold = cell.hold();
            sdev.write_at(held_at, &[2u8; 8192]).expect("write");
        });
        wait_until("the holder's two pieces queued", || {
            sched.queued_for(t_idle) == 2
        });
        s.spawn(|| {
            set_thread_tenant(Some(t_be4));
            sdev.write_at(other_at, &[3u8; 4096]).expect("write");
        });
        wait_until("the best-effort write queued", || {
            sched.queued_for(t_be4) == 1
        });
        let lend = cell.lend(be0);
        wait_until("the holder's pieces moved to the lent priority", || {
            sched.queued_for(t_be0) == 2
        });
        *dev.open.lock().unwrap() = true;
        dev.opened.notify_all();
        drop(lend);
    });
    let log = dev.log.lock().unwrap().clone();
    assert_eq!(
        log,
        vec![0, held_at, held_at + BLOCK_SIZE, other_at],
        "both pieces of the holder's write went before the best-effort one"
    );
}

/// A `fair` queue of depth 1 that waits up to 8 ms for a tenant's next request.
fn anticipating_fair_queue() -> Queue {
    Queue::new(&Config {
        policy: Policy::Fair,
        depth: 1,
        anticipation: Some(Duration::from_millis(8)),
        ..Config::default()
    })
}

pub(super) fn write(tenant: TenantId, offset: u64, len: u64) -> Request {
    Request {
        tenant,
        op: Op::Write,
        offset,
        len,
    }
}

const MS: u64 = 1_000_000;

#[test]
fn fair_waits_for_a_writer_that_just_completed_but_lets_small_requests_through() {
    let mut q = anticipating_fair_queue();
    let heavy = q.add_tenant("heavy", prio(Class::Be), 100);
    let other = q.add_tenant("other", prio(Class::Be), 1);
    let small = q.add_tenant("small", prio(Class::Be), 1);
    q.push(0, write(heavy, 0, 1 << 20));
    let d = q.pop(0).expect("heavy's write");
    q.complete(MS, &d);
    // Heavy has nothing queued now; its next write is due before another tenant's large one.
    q.push(MS, write(other, 1 << 40, 1 << 20));
    assert!(
        q.pop(MS).is_none(),
        "a large write went while the writer that just completed was anticipated"
    );
    assert_eq!(q.next_timer(), Some(9 * MS), "the window's end");
    // A request costing little goes meanwhile.
    q.push(MS, write(small, 2 << 40, BLOCK_SIZE));
    let d = q.pop(MS).expect("the small write was held back");
    assert_eq!(d.pieces[0].tenant, small);
    q.complete(MS + MS / 10, &d);
    // Heavy is still the one waited for, in its own window: not the small writer after it.
    assert!(
        q.pop(2 * MS).is_none(),
        "the wait for the heavy writer ended when a small write let through completed"
    );
    assert_eq!(
        q.next_timer(),
        Some(9 * MS),
        "heavy's window, not one after the small write"
    );
    // Once the window ends, the other tenant is served.
    let d = q.pop(9 * MS).expect("the other tenant after the window");
    assert_eq!(d.pieces[0].tenant, other);
}

#[test]
fn fair_never_waits_for_an_idle_class_tenant() {
    let mut q = anticipating_fair_queue();
    let background = q.add_tenant("background", prio(Class::Idle), 100);
    let writer = q.add_tenant("writer", prio(Class::Be), 1);
    // The idle-class tenant has the earlier finish tag for a write like its last, but the device
    // does not idle for it: the best-effort write waiting goes as soon as the device is free.
    q.push(0, write(background, 0, BLOCK_SIZE));
    q.push(0, write(writer, 1 << 40, 1 << 20));
    let d = q.pop(0).expect("the background write");
    assert_eq!(d.pieces[0].tenant, background);
    q.complete(MS / 10, &d);
    assert_eq!(q.next_timer(), None, "a wait for the idle-class tenant");
    let d = q
        .pop(MS / 10)
        .expect("the device idled after an idle-class write");
    assert_eq!(d.pieces[0].tenant, writer);
}

#[test]
fn fair_does_not_wait_for_a_tenant_held_by_shared_work() {
    let mut q = anticipating_fair_queue();
    let a = q.add_tenant("a", prio(Class::Be), 100);
    let b = q.add_tenant("b", prio(Class::Be), 1);
    q.push(0, write(a, 0, 1 << 20));
    let d = q.pop(0).expect("a's write");
    q.complete(MS, &d);
    q.push(MS, write(b, 1 << 40, 1 << 20));
    assert!(
        q.pop(MS).is_none(),
        "a, which just completed, is waited for"
    );
    // A's thread now waits for a lock b's thread holds: a can send nothing until b goes on.
    q.hold(a);
    assert_eq!(q.next_timer(), None, "a wait for a held tenant");
    let d = q.pop(MS).expect("the device idled for a held tenant");
    assert_eq!(d.pieces[0].tenant, b);
    q.unhold(a);
}

/// Serves `a` (weight 2) alone for 30 one-piece writes while `b` (weight 1) is held by
/// shared work (or, with `held` false, just idle), then both with plenty queued: how many of
/// the next 45 dispatches are `b`'s.
fn dispatches_of_b_after_a_ran_alone(held: bool) -> u32 {
    let mut q = Queue::new(&Config {
        policy: Policy::Fair,
        depth: 1,
        ..Config::default()
    });
    let piece = q.split_size(Op::Write).expect("fair splits");
    let a = q.add_tenant("a", prio(Class::Be), 2);
    let b = q.add_tenant("b", prio(Class::Be), 1);
    let mut now = 0;
    if held {
        q.hold(b);
    }
    for i in 0..30 {
        q.push(now, write(a, i * piece, piece));
        let d = q.pop(now).expect("a alone");
        now += MS;
        q.complete(now, &d);
    }
    if held {
        q.unhold(b);
    }
    for i in 0..60 {
        q.push(now, write(a, (100 + i) * piece, piece));
        q.push(now, write(b, (1 << 40) + i * piece, piece));
    }
    let mut of_b = 0;
    for _ in 0..45 {
        let d = q.pop(now).expect("both queued");
        of_b += u32::from(d.pieces[0].tenant == b);
        now += MS;
        q.complete(now, &d);
    }
    of_b
}

#[test]
fn a_tenant_held_by_shared_work_gets_back_the_share_it_could_not_ask_for() {
    // Over all 75 dispatches 2:1 gives b 25: all its share of the time it was held comes back.
    let held = dispatches_of_b_after_a_ran_alone(true);
    assert!((24..=26).contains(&held), "b got {held} of 45 after a hold");
    // A tenant idle by its own choice gets no such windfall: a third of what follows, and the
    // credit of one piece.
    let idle = dispatches_of_b_after_a_ran_alone(false);
    assert!(idle <= 17, "b got {idle} of 45 after idling");
}

#[test]
fn work_handed_to_another_thread_counts_for_its_owner_and_start_write_queues_without_waiting() {
    let dev = Arc::new(SimDevice::new(1 << 20));
    let sched = Scheduler::new(dev.clone(), Config::default()).expect("scheduler");
    let owner = sched.add_tenant("owner", prio(Class::Be), 3);
    let helper = sched.add_tenant("helper", prio(Class::Be), 1);
    let sdev = SchedDevice::new(sched.clone());
    // The owner's charge, taken on its thread; a tenant-less thread's charge is its ioprio.
    let owned = std::thread::scope(|s| {
        s.spawn(|| {
            set_thread_tenant(Some(owner));
            Charge::of_current_thread()
        })
        .join()
        .unwrap()
    });
    let idle = std::thread::scope(|s| {
        s.spawn(|| {
            Prio {
                class: Class::Idle,
                level: 5,
            }
            .apply_to_current_thread()
            .expect("any thread may lower itself to idle");
            Charge::of_current_thread()
        })
        .join()
        .unwrap()
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            set_thread_tenant(Some(helper));
            sdev.write_at(0, &[1u8; 4096]).expect("write");
            {
                let _charged = owned.apply();
                let started: Vec<_> = (1..4u64)
                    .map(|i| sdev.start_write(i * 8192, vec![i as u8; 8192]))
                    .collect();
                for w in started {
                    w.wait().expect("write");
                }
                let _nested = idle.apply();
                sdev.write_at(65536, &[9u8; 4096]).expect("write");
            }
            // Back to its own tenant once the guard is gone.
            sdev.write_at(4096, &[2u8; 4096]).expect("write");
        });
    });
    let stats = sched.stats();
    let by_name = |n: &str| stats.iter().find(|t| t.name == n).map(|t| (t.bytes, t.ops));
    assert_eq!(by_name("owner"), Some((3 * 8192, 3)));
    assert_eq!(by_name("helper"), Some((8192, 2)));
    assert_eq!(by_name("ioprio idle/5"), Some((4096, 1)));
    let mut back = vec![0u8; 8192];
    dev.read_at(2 * 8192, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 2), "the started write landed");
}

/// A device that logs what it is asked to do and fails its first flush.
#[derive(Debug)]
struct FirstFlushFails {
    inner: SimDevice,
    log: std::sync::Mutex<Vec<String>>,
}

impl Device for FirstFlushFails {
    fn kind(&self) -> &'static str {
        "first-flush-fails"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.log.lock().unwrap().push(format!("write {offset}"));
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        let mut log = self.log.lock().unwrap();
        log.push("flush".to_string());
        if log.iter().filter(|op| *op == "flush").count() == 1 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.flush()
    }
}

#[test]
fn a_flush_for_the_debt_goes_before_the_write_that_crosses_it_and_its_failure_reaches_the_next_flush(
) {
    let dev = Arc::new(FirstFlushFails {
        inner: SimDevice::new(4 << 20),
        log: std::sync::Mutex::new(Vec::new()),
    });
    let sched = Scheduler::new(
        dev.clone(),
        Config {
            depth: 1,
            flush_debt: Some(2 * BLOCK_SIZE),
            ..Config::default()
        },
    )
    .expect("scheduler");
    let sdev = SchedDevice::new(sched.clone());
    for k in 0..5 {
        sdev.write_at(k * BLOCK_SIZE, &[k as u8; 4096])
            .expect("writes succeed even when the scheduler's own flush fails");
    }
    let err = sdev
        .flush()
        .expect_err("the caller's flush reports the failed one");
    assert!(
        err.to_string()
            .contains("earlier flush made by the scheduler failed"),
        "{err}"
    );
    sdev.flush().expect("reported once");
    let log = dev.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "write 0",
            "write 4096",
            "flush",
            "write 8192",
            "write 12288",
            "flush",
            "write 16384",
            "flush",
            "flush"
        ],
        "a flush after every two blocks written, before the next write"
    );
    assert_eq!(sched.debt_flushes(), 2);
}

#[test]
fn the_flush_debt_is_what_a_flush_writes_back_in_one_write_piece_time() {
    assert_eq!(DeviceProfile::conservative().flush_debt(), None);
    let measured = DeviceProfile {
        write_byte_ns: 1.5,
        flush_ns: 0.0,
        flush_byte_ns: 3.0,
        max_io_write: 1 << 20,
        ..DeviceProfile::conservative()
    };
    assert_eq!(measured.flush_debt(), Some(512 << 10));
    // A flush whose fixed cost is 8 times that of writing 1 MiB is kept to one per 8 MiB.
    let costly = DeviceProfile {
        flush_ns: 1.5 * f64::from(1u32 << 20),
        ..measured.clone()
    };
    assert_eq!(costly.flush_debt(), Some(8 << 20));
    // Whole blocks, at least one, at most FLUSH_DEBT_MAX.
    let slow_flush = DeviceProfile {
        flush_byte_ns: 1e9,
        ..measured.clone()
    };
    assert_eq!(slow_flush.flush_debt(), Some(BLOCK_SIZE));
    let cheap_flush = DeviceProfile {
        flush_byte_ns: 1e-9,
        ..measured.clone()
    };
    assert_eq!(cheap_flush.flush_debt(), Some(FLUSH_DEBT_MAX));
    let odd = DeviceProfile {
        flush_byte_ns: 1.4,
        ..measured
    };
    assert_eq!(odd.flush_debt().map(|d| d % BLOCK_SIZE), Some(0));
    let config = Config {
        flush_debt: Some(0),
        ..Config::default()
    };
    assert!(config.validate().is_err(), "a debt of 0 is refused");
}

#[test]
fn a_flush_asked_for_during_one_no_write_completed_since_rides_on_it() {
    for policy in Policy::ALL {
        // Without the real-time guard, which would keep the second slot for `b`.
        let mut q = Queue::new(&Config {
            policy,
            depth: 2,
            rt_window: None,
            ..Config::default()
        });
        let a = q.add_tenant("a", prio(Class::Be), 1);
        let b = q.add_tenant("b", prio(Class::Rt), 1);
        let req = |tenant, op, offset| Request {
            tenant,
            op,
            offset,
            len: if op == Op::Flush { 0 } else { BLOCK_SIZE },
        };
        let w = q.push(0, req(a, Op::Write, 0));
        let d = q.pop(1).expect("the write");
        assert_eq!(q.complete(2, &d)[0].req, w);
        // A flush in the device makes that write durable...
        let f1 = q.push(3, req(a, Op::Flush, 0));
        let flush = q.pop(4).expect("the flush");
        assert_eq!(flush.op, Op::Flush);
        // ...and everything a flush asked for now needs: it is not queued, and completes with it.
        let f2 = q.push(5, req(b, Op::Flush, 0));
        assert_eq!(q.queued(), 0, "{policy:?}");
        assert_eq!(q.riders(&flush).len(), 1);
        // Once a write completes during the flush, a later flush needs a flush of its own.
        let w2 = q.push(6, req(a, Op::Write, BLOCK_SIZE));
        let d2 = q.pop(7).expect("a second request in the device");
        assert_eq!(q.complete(8, &d2)[0].req, w2);
        let f3 = q.push(9, req(b, Op::Flush, 0));
        assert_eq!(q.queued(), 1, "{policy:?}");
        let mut done: Vec<_> = q.complete(10, &flush).iter().map(|c| c.req).collect();
        done.sort_unstable();
        assert_eq!(done, [f1, f2], "{policy:?}");
        let own = q.pop(11).expect("the later flush");
        assert_eq!((own.op, own.pieces[0].req), (Op::Flush, f3));
        assert_eq!(q.complete(12, &own)[0].req, f3);
        assert_eq!(q.outstanding(), 0);
        let stats = q.stats();
        assert_eq!((stats[0].ops, stats[1].ops), (3, 2), "{policy:?}");
    }
}

/// A device whose flushes stop until resumed, then fail with `EIO` while `fail` is set.
#[derive(Debug)]
struct HeldFlush {
    inner: SimDevice,
    entered: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    resume: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    fail: std::sync::atomic::AtomicBool,
    flushes: std::sync::atomic::AtomicU32,
}

impl Device for HeldFlush {
    fn kind(&self) -> &'static str {
        "held-flush"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        self.flushes.fetch_add(1, SeqCst);
        self.entered.lock().unwrap().send(()).unwrap();
        self.resume.lock().unwrap().recv().unwrap();
        if self.fail.load(SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.flush()
    }
}

#[test]
fn a_flush_that_rode_on_another_gets_its_outcome_failure_included() {
    use std::sync::atomic::Ordering::SeqCst;
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (resume, resume_rx) = std::sync::mpsc::channel();
    let dev = Arc::new(HeldFlush {
        inner: SimDevice::new(1 << 20),
        entered: std::sync::Mutex::new(entered_tx),
        resume: std::sync::Mutex::new(resume_rx),
        fail: std::sync::atomic::AtomicBool::new(false),
        flushes: std::sync::atomic::AtomicU32::new(0),
    });
    let sched = Scheduler::new(
        dev.clone(),
        Config {
            depth: 1,
            ..Config::default()
        },
    )
    .expect("scheduler");
    let first = sched.add_tenant("first", prio(Class::Be), 1);
    let second = sched.add_tenant("second", prio(Class::Be), 1);
    for fail in [false, true] {
        dev.fail.store(fail, SeqCst);
        sched.write_at(first, 0, &[7u8; 4096]).expect("write");
        std::thread::scope(|s| {
            let one = s.spawn(|| sched.flush(first));
            entered.recv().unwrap();
            let two = s.spawn(|| sched.flush(second));
            // Once the queue has the second flush, it rides on the first: not queued.
            while sched.outstanding() < 2 {
                std::thread::yield_now();
            }
            assert_eq!(sched.queued_for(second), 0, "the second flush is queued");
            resume.send(()).unwrap();
            let (one, two) = (one.join().unwrap(), two.join().unwrap());
            assert_eq!(one.is_err(), fail, "{one:?}");
            assert_eq!(two.is_err(), fail, "{two:?}");
        });
    }
    assert_eq!(
        dev.flushes.load(SeqCst),
        2,
        "one device flush for each pair"
    );
}

/// A device that records which thread performed each write, by offset.
#[derive(Debug)]
struct WhoWrites {
    inner: SimDevice,
    by: std::sync::Mutex<HashMap<u64, std::thread::ThreadId>>,
}

impl Device for WhoWrites {
    fn kind(&self) -> &'static str {
        "who-writes"
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        let previous = self
            .by
            .lock()
            .unwrap()
            .insert(offset, std::thread::current().id());
        assert!(previous.is_none(), "each offset is written once");
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn a_lone_callers_request_runs_on_its_own_thread_and_start_write_never_does() {
    for policy in Policy::ALL {
        let dev = Arc::new(WhoWrites {
            inner: SimDevice::new(1 << 20),
            by: std::sync::Mutex::new(HashMap::new()),
        });
        let sched = Scheduler::new(
            dev.clone(),
            Config {
                policy,
                ..Config::default()
            },
        )
        .expect("scheduler");
        let t = sched.add_tenant("lone", prio(Class::Be), 1);
        sched.write_at(t, 0, &[1u8; 4096]).expect("write");
        let mut back = [0u8; 4096];
        sched.read_at(t, 0, &mut back).expect("read");
        assert_eq!(back, [1u8; 4096]);
        sched.flush(t).expect("flush");
        let pending = sched
            .start_write(t, 8192, vec![2u8; 4096])
            .expect("start_write");
        pending.wait().expect("started write");
        let by = dev.by.lock().unwrap();
        let me = std::thread::current().id();
        assert_eq!(
            by[&0],
            me,
            "{}: the write went out on the caller's thread",
            policy.name()
        );
        assert_ne!(
            by[&8192],
            me,
            "{}: start_write is a dispatcher's",
            policy.name()
        );
        let stats = sched.stats();
        assert_eq!(
            (stats[0].ops, stats[0].bytes),
            (4, 3 * 4096),
            "{}",
            policy.name()
        );
    }
}

#[test]
fn under_contention_every_write_is_its_callers_or_a_dispatchers_and_all_land() {
    let dev = Arc::new(WhoWrites {
        inner: SimDevice::new(8 << 20),
        by: std::sync::Mutex::new(HashMap::new()),
    });
    let sched = Scheduler::new(
        dev.clone(),
        Config {
            policy: Policy::Fair,
            depth: 2,
            ..Config::default()
        },
    )
    .expect("scheduler");
    const WRITERS: u64 = 4;
    const WRITES: u64 = 200;
    let owners: Vec<(std::thread::ThreadId, Vec<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let sched = &sched;
                s.spawn(move || {
                    let t = sched.add_tenant(&format!("w{w}"), prio(Class::Be), 1 + w as u32);
                    let mut mine = Vec::new();
                    for k in 0..WRITES {
                        let at = (w * WRITES + k) * 4096;
                        sched.write_at(t, at, &[w as u8 + 1; 4096]).expect("write");
                        mine.push(at);
                    }
                    (std::thread::current().id(), mine)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let by = dev.by.lock().unwrap();
    assert_eq!(
        by.len() as u64,
        WRITERS * WRITES,
        "every write reached the device once"
    );
    let callers: Vec<_> = owners.iter().map(|(id, _)| *id).collect();
    let mut inline = 0;
    for (id, offsets) in &owners {
        for at in offsets {
            let who = by[at];
            assert!(
                who == *id || !callers.contains(&who),
                "the write at {at} was performed by another caller's thread"
            );
            inline += usize::from(who == *id);
        }
    }
    assert!(inline > 0, "some writes went out on their caller's thread");
    for w in 0..WRITERS {
        let mut back = [0u8; 4096];
        dev.read_at(w * WRITES * 4096, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == w as u8 + 1));
    }
}
