//! Tests of the real-time guard ([`Config::rt_window`]): lower classes' pieces while a real-time
//! tenant is active, the slot left free for it, and aging under it. Driven by explicit times, so
//! nothing here depends on a clock.

use std::time::Duration;

use proptest::prelude::*;

use super::queue::{Dispatch, Queue};
use super::tests::{prio, write};
use super::*;
use crate::dev::BLOCK_SIZE;

const MS: u64 = 1_000_000;
const MIB: u64 = 1 << 20;

fn queue(policy: Policy, depth: usize) -> Queue {
    Queue::new(&Config {
        policy,
        depth,
        ..Config::default()
    })
}

/// Pops and completes one dispatch at a time, `step` apart from `now` on, until nothing is
/// queued; returns the dispatches and the time after the last.
fn drain(q: &mut Queue, mut now: u64, step: u64) -> (Vec<Dispatch>, u64) {
    let mut out = Vec::new();
    while q.queued() > 0 {
        let d = q.pop(now).expect("a dispatch with the device empty");
        now += step;
        q.complete(now, &d);
        out.push(d);
    }
    (out, now)
}

fn lens(ds: &[Dispatch]) -> Vec<u64> {
    ds.iter().map(|d| d.len).collect()
}

#[test]
fn the_guard_piece_is_what_transfers_in_four_fixed_costs() {
    let profile = |io_ns: f64, byte_ns: f64| DeviceProfile {
        write_io_ns: io_ns,
        write_byte_ns: byte_ns,
        max_io_write: 4 * MIB,
        ..DeviceProfile::conservative()
    };
    // 100 µs + 1 ns/byte: 400,000 bytes transfer in four fixed costs; whole blocks below that.
    let p = profile(100_000.0, 1.0);
    let g = p.guard_piece(Op::Write);
    assert_eq!(g, 400_000 / BLOCK_SIZE * BLOCK_SIZE);
    assert!(g as f64 * p.write_byte_ns <= RT_GUARD_TRANSFER * p.write_io_ns);
    assert!((g + BLOCK_SIZE) as f64 * p.write_byte_ns > RT_GUARD_TRANSFER * p.write_io_ns);
    // The conservative profile (200 µs + 4 ns/byte): 192 KiB.
    assert_eq!(
        DeviceProfile::conservative().guard_piece(Op::Write),
        192 << 10
    );
    // Never above the full split size, never below a block; bytes that cost nothing: full size.
    assert_eq!(profile(1e9, 1.0).guard_piece(Op::Write), 4 * MIB);
    assert_eq!(profile(1.0, 1.0).guard_piece(Op::Write), BLOCK_SIZE);
    assert_eq!(profile(100_000.0, 0.0).guard_piece(Op::Write), 4 * MIB);
    // Reads by their own costs.
    let r = DeviceProfile {
        read_io_ns: 50_000.0,
        read_byte_ns: 0.5,
        ..DeviceProfile::conservative()
    };
    assert_eq!(r.guard_piece(Op::Read), 400_000 / BLOCK_SIZE * BLOCK_SIZE);
}

#[test]
fn with_a_real_time_tenant_active_lower_pieces_stay_within_the_guard() {
    for policy in [Policy::Priority, Policy::Default] {
        let mut q = queue(policy, 1);
        let rt = q.add_tenant("rt", prio(Class::Rt), 1);
        let be = q.add_tenant("be", prio(Class::Be), 1);
        let idle = q.add_tenant("idle", prio(Class::Idle), 1);
        let guard = q.guard_size(Op::Write).expect("writes are split");
        let full = q.split_size(Op::Write).expect("writes are split");
        assert!(
            guard < full,
            "{policy:?}: the guard {guard} is not below {full}"
        );
        q.push(0, write(rt, 0, BLOCK_SIZE));
        q.push(0, write(be, 1 << 30, 8 * MIB));
        q.push(0, write(idle, 2 << 30, 2 * MIB));
        // Adjacent requests of 64 KiB would merge up to the full size; under the guard only to
        // it (three of them).
        for k in 0..64 {
            q.push(0, write(be, (3 << 30) + k * (64 << 10), 64 << 10));
        }
        let (ds, _) = drain(&mut q, 0, MS);
        assert_eq!(ds[0].class, Class::Rt, "{policy:?}: real time first");
        let mut moved = 0;
        for d in &ds[1..] {
            assert!(
                d.len <= guard,
                "{policy:?}: a {} dispatch of {} bytes with real time active (guard {guard})",
                d.class.name(),
                d.len
            );
            moved += d.len;
        }
        assert_eq!(moved, 14 * MIB, "{policy:?}: every byte once");
        assert!(
            ds.iter()
                .any(|d| d.len == guard && d.pieces.len() > 1 && d.class == Class::Be),
            "{policy:?}: the adjacent writes did not merge up to the guard"
        );
    }
}

#[test]
fn without_a_real_time_tenant_lower_pieces_are_full_size_and_come_back_after_the_window() {
    let mut q = queue(Policy::Default, 1);
    let rt = q.add_tenant("rt", prio(Class::Rt), 1);
    let be = q.add_tenant("be", prio(Class::Be), 1);
    let full = q.split_size(Op::Write).expect("writes are split");
    let guard = q.guard_size(Op::Write).expect("writes are split");
    // A real-time tenant that exists but never issued guards nothing.
    q.push(0, write(be, 0, 4 * full));
    assert!(!q.rt_active(0));
    let (ds, now) = drain(&mut q, 0, MS);
    assert_eq!(lens(&ds), vec![full; 4]);

    // One real-time write; the copy's next pieces are cut to the guard while it is recent.
    q.push(now, write(rt, 1 << 40, BLOCK_SIZE));
    let d = q.pop(now).expect("the real-time write");
    let done = now + MS;
    q.complete(done, &d);
    q.push(done, write(be, 4 * full, 2 * full));
    let d = q.pop(done).expect("the copy");
    assert_eq!(d.len, guard);
    q.complete(done + MS, &d);
    let window = RT_WINDOW_DEFAULT.as_nanos() as u64;
    assert!(q.rt_active(done + window - 1));
    assert!(!q.rt_active(done + window));
    // A window after the real-time completion: the rest of the cut piece, then full pieces.
    let (ds, _) = drain(&mut q, done + window, MS);
    assert_eq!(lens(&ds), vec![full - guard, full]);
}

#[test]
fn fifo_and_fair_do_not_guard() {
    for (policy, expect) in [(Policy::Fifo, vec![8 * MIB]), (Policy::Fair, vec![MIB; 8])] {
        let mut q = queue(policy, 1);
        let rt = q.add_tenant("rt", prio(Class::Rt), 1);
        let be = q.add_tenant("be", prio(Class::Be), 1);
        q.push(0, write(rt, 1 << 40, BLOCK_SIZE));
        q.push(0, write(be, 0, 8 * MIB));
        assert!(!q.rt_active(0), "{policy:?}");
        let (ds, _) = drain(&mut q, 0, MS);
        let be_lens: Vec<u64> = ds
            .iter()
            .filter(|d| d.class == Class::Be)
            .map(|d| d.len)
            .collect();
        assert_eq!(be_lens, expect, "{policy:?}");
    }
}

#[test]
fn at_depth_two_a_slot_stays_free_for_real_time_while_it_is_active() {
    let mut q = queue(Policy::Default, 2);
    let rt = q.add_tenant("rt", prio(Class::Rt), 1);
    let be = q.add_tenant("be", prio(Class::Be), 1);
    // No real time yet: the copy fills both slots.
    q.push(0, write(be, 0, 8 * MIB));
    let a = q.pop(0).expect("first slot");
    let b = q.pop(0).expect("second slot");
    assert!(q.pop(0).is_none(), "a third dispatch at depth 2");
    q.complete(MS, &a);
    q.complete(MS, &b);
    // A real-time write: from now on the copy keeps to one slot.
    q.push(MS, write(rt, 1 << 40, BLOCK_SIZE));
    let r = q.pop(MS).expect("the real-time write");
    assert_eq!(r.class, Class::Rt);
    q.complete(2 * MS, &r);
    let c = q.pop(2 * MS).expect("the copy's one slot");
    assert_eq!(c.class, Class::Be);
    assert!(
        q.pop(2 * MS).is_none(),
        "the copy took the slot kept for real time"
    );
    // The next real-time write goes at once, beside the copy's piece.
    q.push(3 * MS, write(rt, (1 << 40) + BLOCK_SIZE, BLOCK_SIZE));
    let r = q.pop(3 * MS).expect("real time waited behind the copy");
    assert_eq!(r.class, Class::Rt);
    assert_eq!(q.in_flight(), 2);
    q.complete(4 * MS, &r);
    q.complete(4 * MS, &c);
    // After the window, both slots again.
    let later = 4 * MS + RT_WINDOW_DEFAULT.as_nanos() as u64;
    let a = q.pop(later).expect("first slot after the window");
    let b = q.pop(later).expect("second slot after the window");
    assert_eq!((a.class, b.class), (Class::Be, Class::Be));
}

#[test]
fn aging_still_moves_best_effort_work_under_a_real_time_backlog() {
    let aging = Duration::from_millis(10);
    let mut q = Queue::new(&Config {
        policy: Policy::Default,
        depth: 1,
        aging,
        ..Config::default()
    });
    let rt = q.add_tenant("rt", prio(Class::Rt), 1);
    let be = q.add_tenant("be", prio(Class::Be), 1);
    let full = q.split_size(Op::Write).expect("writes are split");
    q.push(0, write(be, 0, 4 * MIB));
    let mut be_bytes = 0;
    let mut now = 0;
    let mut offset = 1 << 40;
    // Real time always has a write queued; each dispatch takes 1 ms.
    while be_bytes < 4 * MIB {
        assert!(
            now < 200 * MS,
            "best effort starved: {be_bytes} of {} bytes in {now} ns",
            4 * MIB
        );
        q.push(now, write(rt, offset, BLOCK_SIZE));
        offset += BLOCK_SIZE;
        let d = q.pop(now).expect("a dispatch with the device empty");
        if d.class == Class::Be {
            assert!(
                d.aged,
                "best effort went ahead of a real-time backlog unaged"
            );
            assert_eq!(d.len, full, "aging moves a full piece");
            be_bytes += d.len;
        }
        now += MS;
        q.complete(now, &d);
    }
    // One piece per aging interval (plus the dispatch in flight when it came due).
    assert!(now <= 4 * (aging.as_nanos() as u64 + MS) + MS);
}

#[test]
fn aging_takes_the_slot_left_for_real_time_when_real_time_never_lets_go() {
    let aging = Duration::from_millis(10);
    let mut q = Queue::new(&Config {
        policy: Policy::Default,
        depth: 2,
        aging,
        ..Config::default()
    });
    let rt = q.add_tenant("rt", prio(Class::Rt), 1);
    let be = q.add_tenant("be", prio(Class::Be), 1);
    q.push(0, write(be, 0, MIB));
    // Real time keeps one write in the device at every moment, so the device is never empty.
    let mut offset = 1 << 40;
    q.push(0, write(rt, offset, BLOCK_SIZE));
    let mut rt_flight = q.pop(0).expect("the first real-time write");
    let mut now = 0;
    let mut be_done = false;
    while !be_done {
        assert!(
            now < 100 * MS,
            "best effort starved beside a busy real-time tenant"
        );
        now += MS;
        offset += BLOCK_SIZE;
        q.push(now, write(rt, offset, BLOCK_SIZE));
        q.complete(now, &rt_flight);
        let mut next_rt = None;
        while let Some(d) = q.pop(now) {
            if d.class == Class::Rt {
                next_rt = Some(d);
            } else {
                assert!(
                    d.aged,
                    "best effort took the slot kept for real time unaged"
                );
                q.complete(now, &d);
                be_done = true;
            }
        }
        rt_flight = next_rt.expect("real time always gets a slot");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Whatever arrives: a lower-class dispatch made while a real-time tenant is active is
    /// within the guard, any other within the split size; every byte goes exactly once.
    #[test]
    fn lower_dispatches_under_active_real_time_are_within_the_guard(
        policy in prop::sample::select(vec![Policy::Priority, Policy::Default]),
        depth in 1usize..4,
        window_ms in 1u64..20,
        reqs in prop::collection::vec((0u8..3, 1u64..600, 0u64..5), 1..40),
    ) {
        let mut q = Queue::new(&Config {
            policy,
            depth,
            rt_window: Some(Duration::from_millis(window_ms)),
            ..Config::default()
        });
        let tenants = [
            q.add_tenant("rt", prio(Class::Rt), 1),
            q.add_tenant("be", prio(Class::Be), 1),
            q.add_tenant("idle", prio(Class::Idle), 1),
        ];
        let guard = q.guard_size(Op::Write).expect("writes are split");
        let full = q.split_size(Op::Write).expect("writes are split");
        let mut now = 0;
        let mut offset = 0;
        let mut expected = 0;
        let mut moved = 0;
        let mut in_flight: Vec<Dispatch> = Vec::new();
        let mut pending = reqs.into_iter();
        loop {
            match pending.next() {
                Some((t, blocks, gap_ms)) => {
                    now += gap_ms * MS;
                    let len = blocks * BLOCK_SIZE;
                    q.push(now, write(tenants[t as usize], offset, len));
                    offset += len + BLOCK_SIZE;
                    expected += len;
                }
                None if q.queued() == 0 && in_flight.is_empty() => break,
                None => now += MS,
            }
            loop {
                let active = q.rt_active(now);
                let Some(d) = q.pop(now) else { break };
                let bound = if active && d.class != Class::Rt { guard } else { full };
                prop_assert!(d.len <= bound, "{} bytes of {:?}, bound {}", d.len, d.class, bound);
                moved += d.len;
                in_flight.push(d);
            }
            // The oldest dispatch completes one millisecond on.
            if !in_flight.is_empty() {
                now += MS;
                let d = in_flight.remove(0);
                q.complete(now, &d);
            }
        }
        prop_assert_eq!(moved, expected);
    }
}
