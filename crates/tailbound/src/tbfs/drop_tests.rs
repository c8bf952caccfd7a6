//! A snapshot's drop and pruning: the checkpoint being dropped is released only by the
//! checkpoint that records the drop, so a drop refused for room can be put back whole.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::tbfs::checkpoints::Checkpoints;
use crate::tbfs::retention::{Retained, Retention};
use crate::tbfs::state::State;
use crate::tbfs::Clock;

const SEGMENT_BLOCKS: u64 = 64;

/// Checkpoints 3 and 4 retained, both plain and past a zero protection period; 5 the newest.
fn state() -> State {
    let mut life = Retention::new(4, SEGMENT_BLOCKS, Duration::ZERO, Clock::wall());
    let plain = || Retained {
        time_ns: 1,
        root: 100,
        snapshot: false,
        name: None,
    };
    life.load_retained(BTreeMap::from([(3, plain()), (4, plain()), (5, plain())]));
    State {
        life,
        ckpt: Checkpoints::loaded(5, 100, 1),
        ..State::default()
    }
}

#[test]
fn a_prune_outside_a_commit_keeps_the_snapshot_being_dropped() {
    let mut m = state();
    m.life.set_dropping(Some(4));
    // The cleaner's prune, as a drop's space check runs it before the drop is durable.
    assert_eq!(
        m.prune(1, SEGMENT_BLOCKS, false),
        1,
        "3 goes, 4 and the newest stay"
    );
    assert!(m.life.retained(3).is_none());
    assert!(
        m.life.retained(4).is_some(),
        "a refused drop must find its checkpoint to put back"
    );
    // The checkpoint that records the drop releases it.
    assert_eq!(
        m.prune(1, SEGMENT_BLOCKS, true),
        2,
        "4 and 5 go in the commit"
    );
    assert!(m.life.retained(4).is_none());
}

#[test]
fn without_a_drop_the_same_prune_releases_it() {
    let mut m = state();
    assert_eq!(
        m.prune(1, SEGMENT_BLOCKS, false),
        2,
        "3 and 4 go, the newest stays"
    );
    assert!(m.life.retained(4).is_none());
}
