//! Keeps the kernel's caches of a mount true to changes made by another front end of the same
//! pool (the socket server beside the mount): the kernel trusts names and attributes for the
//! mount's time-to-live and keeps file pages across opens, so what a socket client changes is
//! dropped from its caches as soon as the pool has applied it.

use std::ffi::OsStr;
use std::sync::{Arc, OnceLock};

use fuser::{INodeNo, Notifier};
use tailbound::serve::{Change, Observer};

use crate::ops::Keeper;

/// Tells the kernel of a mount what changed behind its back. It does nothing until
/// [`crate::serve`] has mounted and given it the mount's channel.
#[derive(Default)]
pub struct Invalidator {
    notifier: OnceLock<Notifier>,
    keeper: OnceLock<Keeper>,
}

impl Invalidator {
    /// The server's [`Observer`], calling [`Invalidator::changed`].
    pub fn observer(self: &Arc<Self>) -> Observer {
        let me = self.clone();
        Arc::new(move |c: &Change<'_>| me.changed(c))
    }

    pub(crate) fn attach(&self, notifier: Notifier, keeper: Keeper) {
        let _ = self.notifier.set(notifier);
        let _ = self.keeper.set(keeper);
    }

    /// Drops what the kernel caches about `change`. An inode or name the kernel does not hold
    /// is nothing to drop; a mount that is gone has no caches left: both errors are ignored.
    pub fn changed(&self, change: &Change<'_>) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        match *change {
            Change::Unlinking { ino } => {
                if let Some(k) = self.keeper.get() {
                    k.keep(ino);
                }
            }
            Change::Written { ino, offset, data } => {
                let len = i64::try_from(data.len()).unwrap_or(i64::MAX);
                let _ = n.inval_inode(INodeNo(ino), i64::try_from(offset).unwrap_or(0), len);
                // With the writeback cache the kernel owns a cached file's size and ignores the
                // pool's: storing the last byte written makes it grow the size to cover it.
                if let Some(last) = data.last() {
                    let at = offset + data.len() as u64 - 1;
                    let _ = n.store(INodeNo(ino), at, std::slice::from_ref(last));
                }
            }
            Change::Inode { ino } => {
                let _ = n.inval_inode(INodeNo(ino), 0, 0);
            }
            Change::Name { parent, name } => {
                let _ = n.inval_entry(INodeNo(parent), OsStr::new(name));
            }
        }
    }
}
