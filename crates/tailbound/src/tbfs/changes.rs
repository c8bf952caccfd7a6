//! The changes not yet in a checkpoint: which inodes the next checkpoint must write, which of
//! them changed in a way only a checkpoint records, and whether the namespace changed at all.
//! Changed only through [`Changes`]'s methods, under the `meta` lock; only a written checkpoint
//! clears them.

use crate::tbfs::dense::DenseSet;

/// The namespace changes not yet checkpointed.
///
/// Rule: an inode changed in a way only a checkpoint records (`ns_changed`) makes the
/// namespace dirty until a checkpoint is written, so the next commit of many files is a
/// checkpoint rather than data-only logs.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Inodes whose record, data or map must go into the next checkpoint.
    pending: DenseSet,
    /// Inodes whose record changed, since the last checkpoint, in a way only a checkpoint
    /// records (creation, names and links, attributes or size set): the checkpoint that writes
    /// one marks it (`InodeState::ckpt_seq`) for its file's syncs to wait for. A freed inode
    /// stays here until then: its number, handed out again, names a file only a checkpoint
    /// records.
    ns_changed: DenseSet,
    /// A namespace or size change of some file not yet in a checkpoint: buffered data of many
    /// files goes out in a checkpoint rather than data-only logs (a sync of one file looks at
    /// that file's own changes, `ns_changed`).
    ns_dirty: bool,
}

impl Changes {
    /// The changes of a pool as recovery loaded it: `pending` are the inodes whose loaded
    /// records differ from the checkpoint's (a link count found wrong, data rolled forward).
    pub(crate) fn loaded(pending: DenseSet) -> Changes {
        Changes {
            pending,
            ..Changes::default()
        }
    }

    /// `ino`'s record, data or map changed: the next checkpoint writes it.
    pub(crate) fn changed(&mut self, ino: u64) {
        self.pending.insert(ino);
    }

    /// `ino`'s record changed in a way only a checkpoint records (creation, a name or link, an
    /// attribute or size set).
    pub(crate) fn namespace_changed(&mut self, ino: u64) {
        self.pending.insert(ino);
        self.ns_changed.insert(ino);
        self.ns_dirty = true;
    }

    /// A pool was just laid out: its root goes into the first checkpoint.
    pub(crate) fn formatted(&mut self, root: u64) {
        self.pending.insert(root);
        self.ns_dirty = true;
    }

    /// `ino` was freed: it has nothing more for a checkpoint to write, but its absence is a
    /// namespace change.
    pub(crate) fn freed(&mut self, ino: u64) {
        self.pending.remove(&ino);
        self.ns_dirty = true;
    }

    /// A checkpoint holding every change so far was written.
    pub(crate) fn checkpointed(&mut self) {
        self.check();
        self.pending.clear();
        self.ns_changed.clear();
        self.ns_dirty = false;
    }

    /// The inodes the next checkpoint must write.
    pub(crate) fn pending(&self) -> &DenseSet {
        &self.pending
    }

    /// Whether `ino` changed, since the last checkpoint, in a way only a checkpoint records.
    pub(crate) fn only_checkpoint_records(&self, ino: u64) -> bool {
        self.ns_changed.contains(&ino)
    }

    /// Whether a namespace or size change of some file is not yet in a checkpoint.
    pub(crate) fn namespace_dirty(&self) -> bool {
        self.check();
        self.ns_dirty
    }

    /// Whether anything waits for the next checkpoint.
    pub(crate) fn any(&self) -> bool {
        !self.pending.is_empty() || self.namespace_dirty()
    }

    fn check(&self) {
        assert!(
            self.ns_dirty || self.ns_changed.is_empty(),
            "{} inodes changed in a way only a checkpoint records, and the namespace is not dirty",
            self.ns_changed.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Changes;

    #[test]
    fn a_checkpoint_clears_what_waited_for_it_and_a_freed_inode_stays_a_namespace_change() {
        let mut c = Changes::default();
        assert!(!c.any());
        c.changed(5);
        assert!(c.any() && !c.namespace_dirty() && !c.only_checkpoint_records(5));
        c.namespace_changed(6);
        assert!(c.namespace_dirty() && c.only_checkpoint_records(6));
        c.freed(6);
        assert!(!c.pending().contains(&6) && c.only_checkpoint_records(6));
        assert_eq!(c.pending().iter().collect::<Vec<_>>(), vec![5]);
        c.checkpointed();
        assert!(!c.any() && !c.only_checkpoint_records(6));
    }

    #[test]
    #[should_panic(expected = "the namespace is not dirty")]
    fn a_namespace_change_with_the_namespace_clean_is_caught() {
        let mut c = Changes::default();
        c.namespace_changed(3);
        // As a bug clearing the flag alone leaves it.
        c.ns_dirty = false;
        c.namespace_dirty();
    }
}
