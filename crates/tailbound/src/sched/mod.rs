//! sched: a user-space I/O scheduler in front of a [`Device`](crate::dev::Device).
//!
//! Every request carries a tenant, a priority class (RT, BE, IDLE with levels 0–7, as Linux ioprio)
//! and a weight. The policy logic lives in [`queue::Queue`], a pure object driven by explicit
//! `now` times, so the deterministic simulator ([`sim`]) and the real executor ([`Scheduler`]) run
//! exactly the same code.
//!
//! Policies ([`Policy`]):
//! - `fifo`: arrival order, no splitting, no merging (the baseline).
//! - `priority`: class first (RT > BE > IDLE), FIFO within a class across tenants; adjacent
//!   requests of the same class and operation merge, at most `merge_cap` merges per dispatch for
//!   BE/IDLE (RT uncapped); bounded aging.
//! - `fair`: all tenants in one weighted-fair group regardless of class (WF2Q+ start/finish tags and
//!   virtual time); requests split to `max_io`, each piece charged its device cost.
//! - `default`: strict classes RT > BE > IDLE with aging, `fair` within each class.
//!
//! Splitting applies to every policy but `fifo`; `max_io` comes from [`Config::max_io`] or else
//! the device profile (read and write apart). Merges never build a dispatch larger than that.
//!
//! Real-time guard ([`Config::rt_window`], `priority` and `default`): while a real-time tenant is
//! active (a request of it queued or in the device, or one arrived or completed within the
//! window), lower classes are dispatched in pieces of at most [`DeviceProfile::guard_piece`], the
//! size whose transfer costs [`RT_GUARD_TRANSFER`] times a request's fixed cost, and at a depth
//! of 2 or more they leave one slot free: a real-time request waits for at most one such piece,
//! or none. Once the tenant has been quiet a window long, they go back to full pieces.
//!
//! Aging: when the request at the head of a tenant's queue has waited `aging` (default 10 s) while
//! a higher class kept the device busy, it is dispatched next regardless of class, so a tenant of a
//! starved class still moves at least one piece per `aging` interval.
//!
//! Owns ordering, splitting, merging, accounting and the dispatch depth; it never interprets the
//! bytes it moves.

use std::io;
use std::path::Path;
use std::sync::Arc;

pub mod calibrate;
pub mod clients;
mod exec;
#[cfg(test)]
mod guard_tests;
pub mod inherit;
mod model;
pub mod queue;
pub mod sim;
#[cfg(test)]
mod tests;
pub mod turns;

pub use exec::{
    current_prio, set_thread_tenant, thread_tenant, Charge, Charged, Held, SchedDevice, Scheduler,
};
pub use model::{
    Class, Config, DeviceProfile, Op, Policy, Prio, TenantId, TenantStats, AGING_DEFAULT,
    DEPTH_DEFAULT, DEPTH_MAX, FLUSH_DEBT_MAX, FLUSH_OVERHEAD_INVERSE, LEVEL_MAX, MERGE_CAP_DEFAULT,
    RT_GUARD_TRANSFER, RT_WINDOW_DEFAULT,
};

impl Config {
    /// The default configuration with the profile `tailbound calibrate` stored for `target` at
    /// its default place, or the conservative profile if there is none.
    pub fn for_device(target: &Path) -> Config {
        Config::with_profile(calibrate::profile_for(target))
    }
}

/// Puts `dev` behind a scheduler with the default configuration and the profile stored for
/// `target` ([`Config::for_device`]): how tbfs's file and block-device pools are opened, so every
/// read, write and flush goes through it with the tenant of the calling thread (its kernel ioprio
/// unless [`set_thread_tenant`] chose one).
pub fn scheduled(
    dev: Arc<dyn crate::dev::Device>,
    target: &Path,
) -> io::Result<Arc<dyn crate::dev::Device>> {
    let sched = Scheduler::new(dev, Config::for_device(target))?;
    Ok(Arc::new(SchedDevice::new(sched)))
}
