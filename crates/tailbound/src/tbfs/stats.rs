//! The pool's statistics: its counters, the time the `meta` lock was held (and of that, each
//! timed section's), and what recovery found when the pool was opened. Changed only through
//! [`Statistics`]'s methods.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::phases::{add_by_work, ByMetaWork};
use crate::tbfs::{FsCounters, RecoveryReport};

/// Work under `meta` whose share of the lock's hold time is counted apart
/// (`Engine::in_section`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Checkpoint = 0,
    Cleaning = 1,
    /// Sealing buffered file data as data-only logs.
    Sealing = 2,
}

#[derive(Debug, Default)]
pub(crate) struct Statistics {
    /// Counted events ([`FsCounters`]), but for the lock times below.
    counters: Mutex<FsCounters>,
    /// Nanoseconds `meta` was held, over every hold (`FsCounters::meta_held_ns`): the share of
    /// the time every operation that needs it may have to wait.
    meta_held_ns: AtomicU64,
    /// Of that, the nanoseconds of each [`Section`] (`FsCounters::meta_checkpoint_ns` and the
    /// others), in `Section` order.
    meta_section_ns: [AtomicU64; 3],
    /// Holds of `meta` that waited for the device, each wait counted, and the nanoseconds
    /// waited (`FsCounters::meta_device_waits`, `FsCounters::meta_device_wait_ns`).
    meta_device_waits: AtomicU64,
    meta_device_wait_ns: AtomicU64,
    /// Those waits by the outermost and the innermost work marked (`phases::MetaWork`).
    meta_device_by_work: Mutex<(ByMetaWork, ByMetaWork)>,
    /// What recovery found and did when the pool was opened.
    report: Mutex<RecoveryReport>,
}

impl Statistics {
    /// Changes the counters with `f`.
    pub(crate) fn count(&self, f: impl FnOnce(&mut FsCounters)) {
        f(&mut self.counters.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// A hold of `meta` ended after `ns`.
    pub(crate) fn meta_held(&self, ns: u64) {
        self.meta_held_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A hold of `meta` waited `waits` times for the device, `ns` in all, by the outermost
    /// and the innermost work marked (`outer`, `inner`).
    pub(crate) fn meta_device_waited(
        &self,
        waits: u64,
        ns: u64,
        outer: &ByMetaWork,
        inner: &ByMetaWork,
    ) {
        if waits > 0 || ns > 0 {
            self.meta_device_waits.fetch_add(waits, Ordering::Relaxed);
            self.meta_device_wait_ns.fetch_add(ns, Ordering::Relaxed);
            let mut by = self
                .meta_device_by_work
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            add_by_work(&mut by.0, outer);
            add_by_work(&mut by.1, inner);
        }
    }

    /// `section` ran for `ns` under `meta`, the sections nested in it apart.
    pub(crate) fn section_ran(&self, section: Section, ns: u64) {
        self.meta_section_ns[section as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// Starts the sections' times again from zero (recovery's checkpoint ran before `meta` was
    /// a lock: only holds count).
    pub(crate) fn reset_sections(&self) {
        for ns in &self.meta_section_ns {
            ns.store(0, Ordering::Relaxed);
        }
    }

    /// The counters, with the lock times.
    pub(crate) fn counters(&self) -> FsCounters {
        let mut c = *self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.meta_held_ns = self.meta_held_ns.load(Ordering::Relaxed);
        c.meta_device_waits = self.meta_device_waits.load(Ordering::Relaxed);
        c.meta_device_wait_ns = self.meta_device_wait_ns.load(Ordering::Relaxed);
        (c.meta_device_outer, c.meta_device_inner) = *self
            .meta_device_by_work
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let section = |s: Section| self.meta_section_ns[s as usize].load(Ordering::Relaxed);
        c.meta_checkpoint_ns = section(Section::Checkpoint);
        c.meta_cleaning_ns = section(Section::Cleaning);
        c.meta_sealing_ns = section(Section::Sealing);
        c
    }

    /// Recovery opened the pool with `report`.
    pub(crate) fn set_report(&self, report: RecoveryReport) {
        *self.report.lock().unwrap_or_else(|p| p.into_inner()) = report;
    }

    pub(crate) fn report(&self) -> RecoveryReport {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
