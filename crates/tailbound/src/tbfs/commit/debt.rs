//! The checkpoint debt of the state held (`tbfs/debt.rs` bounds it from the parts and values
//! passed in: the state's, the dirty set's, the budget's widest map), and paying it: a change
//! that needs room may take a checkpoint first, which touches every part, so it is
//! orchestration.

use crate::tbfs::commit::checkpoint::{map_nodes_bound, pinned_pages_as_written};
use crate::tbfs::debt::{exact_bound, quick_bound};
use crate::tbfs::directories::bound_blocks;
use crate::tbfs::format::BLOCK_U64;
use crate::tbfs::inode::InodeState;
use crate::tbfs::limits::{
    CHANGE_BLOCKS, CHECKPOINT_FLOOR_BLOCKS, DELETES_ALLOWANCE_BLOCKS, DELETES_PAGES_ALLOWANCE,
};
use crate::tbfs::space::copies_debt::CopiesDebt;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, Result};

impl Engine {
    /// An upper bound on the blocks the next checkpoint writes beyond unsealed file data.
    /// `exact` counts inode by inode and entry by entry (a walk of every changed inode,
    /// [`exact_bound`]); otherwise the bound comes from totals ([`quick_bound`]). Reads the
    /// state held, the inodes the write path dirtied and the widest map the budget has seen.
    pub(in crate::tbfs) fn checkpoint_debt(&self, m: &State, exact: bool) -> u64 {
        let tables = m.table_estimate();
        let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if !exact {
            let widest = self.budget.widest();
            return quick_bound(
                dirty.all().len(),
                &m.dirs,
                &m.changes,
                &m.ifile,
                widest,
                tables,
            );
        }
        // Copied, so the set's lock is not held while the walk takes the inodes' locks.
        let work = dirty.all().clone();
        drop(dirty);
        let exact = exact_bound(work, &m.inodes, &m.dirs, &m.changes, &m.ifile, tables);
        // Writers keep room by the bound from totals: it must hold what the walk counts.
        // Counted second, it sees whatever writers added after the walk, so it only grows.
        if cfg!(debug_assertions) {
            let quick = self.checkpoint_debt(m, false);
            assert!(
                quick >= exact,
                "the checkpoint debt's bound from totals {quick} is below the walk's {exact}"
            );
        }
        exact
    }

    /// What a light pass's copies may add to the next checkpoint ([`CopiesDebt`]): a walk of
    /// every inode, once after each checkpoint (until the next one a file's map grows only by
    /// writes, which dirty what they add), and none while no map the pool has had is wide
    /// enough for leaves under a root (the commit path asks after every checkpoint).
    pub(in crate::tbfs) fn copies_debt(&self, m: &State) -> CopiesDebt {
        let widest = self.budget.widest();
        if !CopiesDebt::has_leaves_under_a_root(widest) {
            return CopiesDebt::none();
        }
        let newest = m.ckpt.newest();
        if let Some(d) = m.cleaning.copies_debt_since(newest) {
            return d;
        }
        let len = (m.ifile.map().blocks.len() as u64).max(m.ifile.pages()) + 1;
        let d = CopiesDebt::of(&m.inodes, widest, len);
        m.cleaning.keep_copies_debt(newest, d);
        d
    }

    /// Makes room for a new name in directory `dir` before it is made: the checkpoint that
    /// records it rewrites the directory (unless a change pending already does), a page of
    /// inodes and the inode file's map. A pool whose room that would take answers `NoSpace`,
    /// after paying the debt with a checkpoint if that is what stands in the way.
    pub(in crate::tbfs) fn make_room_for_change(&self, m: &mut State, dir: u64) -> Result<()> {
        let _work = crate::phases::meta_work(crate::phases::MetaWork::RoomForChange);
        let dir_blocks = if m.dirs.dirty().contains(&dir) {
            0
        } else {
            m.dirs.get(dir).map_or(1, |e| bound_blocks(e.len() + 1))
        };
        let blocks = dir_blocks + CHANGE_BLOCKS;
        match self.ensure_space(m, blocks) {
            // With nothing changed since the newest checkpoint there is no debt to pay.
            Err(Error::NoSpace(_)) if self.changed_since_checkpoint(m) => {
                self.commit_checkpoint(m)?;
                self.ensure_space(m, blocks)
            }
            r => r,
        }
    }

    /// What a truncate of a file in state `st` adds to the checkpoint debt that no total the
    /// deletes' probe reads holds: its map nodes and its buffered blocks (the kept tail block
    /// a truncate buffers). Taken before and after the truncate; the difference is charged.
    pub(in crate::tbfs) fn truncate_debt(st: &InodeState) -> u64 {
        map_nodes_bound(st, 0) + st.dirty().len() as u64
    }

    /// A truncate took its file's debt from `before` blocks to what state `st` now owes
    /// ([`Engine::truncate_debt`]): the rise is charged against the deletes' allowance.
    pub(in crate::tbfs) fn charge_truncate(m: &mut State, before: u64, st: &InodeState) {
        if Self::keeps_dropped(m) {
            m.deletes_debt
                .charge(Self::truncate_debt(st).saturating_sub(before));
        }
    }

    /// Called before a delete, a truncate, a rename that replaces a name or a directory's
    /// removal changes anything: while a snapshot or a view keeps what deletes drop and a
    /// charge is still past half the allowance (the checkpoint meant to pay it after an
    /// earlier change found no room), if the free blocks no longer hold the next checkpoint
    /// with a change's few blocks beside it and a checkpoint's floor (what a close after this
    /// change writes, which is more than a drop), the debt is paid now; if that checkpoint finds
    /// no room either and the pool is full by the rule (90 % live + pinned), the change is
    /// refused with `NoSpace`, nothing changed. Otherwise deletes would go on adding to a debt
    /// nothing pays (pinned-table pages above all) until a close with the snapshot held, or
    /// its drop, no longer fit. Below 90 % the change goes on with the debt unpaid, so there
    /// the bound holds only while cleaning keeps up.
    ///
    /// Without a snapshot or a view nothing is refused, and what the change in directories
    /// `dirs` adds is kept writable instead: see `Engine::record_deletes_first`.
    pub(in crate::tbfs) fn pay_deletes_debt_first(
        &self,
        m: &mut State,
        dirs: &[u64],
    ) -> Result<()> {
        if !Self::keeps_dropped(m) {
            return self.record_deletes_first(m, dirs);
        }
        if !self.deletes_debt_due(m) {
            return Ok(());
        }
        let debt = pinned_pages_as_written(m, self.checkpoint_debt(m, true));
        let close = self
            .space_needed(debt + self.budget.buffered().div_ceil(BLOCK_U64) + CHANGE_BLOCKS)
            + CHECKPOINT_FLOOR_BLOCKS;
        if self.free_blocks_up_to(m, close) >= close {
            return Ok(());
        }
        match self.commit_checkpoint(m) {
            Ok(()) => {
                self.count(|c| c.deletes_debt_checkpoints += 1);
                Ok(())
            }
            Err(Error::NoSpace(_)) if !self.full_by_the_rule(m) => {
                // Below the rule's 90 % the pool is not full: the change goes on, its debt
                // left unpaid, rather than answer `NoSpace` while a tenth of the pool is dead
                // (the cleaner, or a later checkpoint's release, gives it back).
                self.count(|c| c.deletes_debt_unpaid += 1);
                m.deletes_debt.left_unpaid();
                Ok(())
            }
            Err(Error::NoSpace(e)) => {
                self.count(|c| c.deletes_refused += 1);
                Err(Error::NoSpace(format!(
                    "a snapshot keeps what this change would free, and what earlier deletes under it added has to be written first, which finds no room: {e}"
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Before a delete, a truncate, a replacing rename or a directory's removal in directories
    /// `dirs` with nothing keeping what it drops: if the free blocks no longer hold the next
    /// checkpoint with this change's own blocks (its inode page and map path, its directories'
    /// rewrites), a cleaning cycle and a checkpoint's floor, the checkpoint is written first,
    /// keeping only the cycle (`Engine::checkpoint_floor`). Such changes are never refused, and
    /// what they give back is reusable only once a checkpoint records them, so that checkpoint
    /// must always fit: the deletes' room (`Engine::deletes_reserve`) holds one rewrite of every
    /// inode page, but `rm -rf` of files spread over the pages, with checkpoints falling
    /// between its deletes, rewrites them once per checkpoint while the pages each supersedes
    /// lie among live data; the debt then outgrew the free room, no checkpoint (a cleaning
    /// pass's included) fitted again, and the deletes never reached the device
    /// (`tests/tbfs_delete_all_full.rs`). A checkpoint that finds no room, or a debt already
    /// past what a checkpoint's floor admits, leaves the change to go on
    /// (`FsCounters::deletes_debt_unpaid`).
    fn record_deletes_first(&self, m: &mut State, dirs: &[u64]) -> Result<()> {
        m.deletes_debt.charge_pages(1 + dirs.len() as u64);
        if !self.changed_since_checkpoint(m) {
            return Ok(());
        }
        // The room keeps only an allowance of inode pages for deletes: past half of it, the
        // checkpoint comes first unless the free room holds every page.
        if self.deletes_pages_due(m) {
            self.count(|c| c.deletes_pages_checkpoints += 1);
            return self.write_deletes_first(m);
        }
        let own = CHANGE_BLOCKS
            + dirs
                .iter()
                .filter(|d| !m.dirs.dirty().contains(d))
                .map(|&d| m.dirs.get(d).map_or(1, |e| bound_blocks(e.len())))
                .sum::<u64>();
        let buffered = self.budget.buffered().div_ceil(BLOCK_U64);
        let beside = buffered + own;
        let room = |debt: u64| {
            self.space_needed(debt + beside) + self.cycle_room(m) + CHECKPOINT_FLOOR_BLOCKS
        };
        // The bound from totals first: it is above the count, and costs no walk of the inodes.
        let quick = room(pinned_pages_as_written(m, self.checkpoint_debt(m, false)));
        if self.free_blocks_up_to(m, quick) >= quick {
            return Ok(());
        }
        let debt = pinned_pages_as_written(m, self.checkpoint_debt(m, true));
        let counted = room(debt);
        let free = self.free_blocks_up_to(m, counted);
        if free >= counted {
            return Ok(());
        }
        // Past what a checkpoint's floor admits (buffered data a full buffer's seal could not
        // write), trying on every delete would only clean for nothing: the close, or cleaning
        // once more is freed, writes it.
        if free < self.space_needed(debt + buffered) + CHECKPOINT_FLOOR_BLOCKS {
            self.count(|c| c.deletes_debt_unpaid += 1);
            return Ok(());
        }
        self.write_deletes_first(m)
    }

    /// The checkpoint a delete with nothing keeping what it drops writes first; one that finds
    /// no room leaves the delete to go on (`FsCounters::deletes_debt_unpaid`).
    fn write_deletes_first(&self, m: &mut State) -> Result<()> {
        match self.commit_checkpoint(m) {
            Ok(()) => {
                self.count(|c| c.deletes_debt_checkpoints += 1);
                Ok(())
            }
            Err(Error::NoSpace(_)) => {
                self.count(|c| c.deletes_debt_unpaid += 1);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a delete with nothing keeping what it drops must write the checkpoint first for
    /// the inode pages: the pool's inode file holds more pages than the room keeps for deletes
    /// (`Engine::deletes_reserve`), the deletes since the debt was last counted may have
    /// dirtied past half of them (a page for each change's inode and one for each of its
    /// directories), and the free blocks do not hold the pages the room no longer keeps beside
    /// the next checkpoint and the margins. Where they do, deletes may dirty every page, as
    /// before the room kept fewer, and need no checkpoint of their own.
    fn deletes_pages_due(&self, m: &State) -> bool {
        let pages = m.ifile.pages();
        if pages <= DELETES_PAGES_ALLOWANCE
            || m.deletes_debt.pages_charged() <= DELETES_PAGES_ALLOWANCE / 2
        {
            return false;
        }
        let (reserve, _) = self.space_margins(m);
        let debt = self.checkpoint_debt(m, false) + self.budget.buffered().div_ceil(BLOCK_U64);
        let room = self.space_needed(debt) + reserve + (pages - DELETES_PAGES_ALLOWANCE);
        self.free_blocks_up_to(m, room) < room
    }

    /// Whether the deletes' debt is due to be paid: a snapshot or a view keeps what deletes
    /// drop, their charge is past half the allowance, and something changed since the last
    /// checkpoint. At half, not the whole: the checkpoint that pays must keep the whole
    /// allowance beside a cycle (`Engine::checkpoint_floor`), and near full it found that room
    /// less often when the charge had taken all of it (writes were refused below 90 % live +
    /// pinned).
    fn deletes_debt_due(&self, m: &State) -> bool {
        Self::keeps_dropped(m)
            && m.deletes_debt.charged(Self::deletes_probe(m)) > DELETES_ALLOWANCE_BLOCKS / 2
            && self.changed_since_checkpoint(m)
    }

    /// Whether live data and what snapshots pin fill 90 % of the pool or more: the pool is
    /// full by the rule `NoSpace` answers keep (issue 38), and a change under a snapshot that
    /// frees nothing may be refused.
    fn full_by_the_rule(&self, m: &State) -> bool {
        let space = self.space_report(m);
        (space.live + space.pinned_by_snapshots) * 10 >= space.size * 9
    }

    /// Called once a delete, a truncate, a rename that replaced a name or a directory's
    /// removal is made: while a snapshot or a view keeps what deletes drop, if what such
    /// changes added to the checkpoint debt since it was last counted is past half the
    /// allowance the room keeps for it ([`DELETES_ALLOWANCE_BLOCKS`]), the debt is paid with a
    /// checkpoint now. So the debt beyond what the last space check counted stays within the
    /// inode pages, the allowance and one change's own, and the checkpoints that must not be
    /// refused (a snapshot's drop above all) find it in the room kept. The change itself is
    /// made and stands: a checkpoint that finds no room (a pool full of live and pinned
    /// blocks, which cleaning cannot give back) leaves the debt unpaid (counted in
    /// `FsCounters::deletes_debt_unpaid`) until the next space check counts it, and this never
    /// answers `NoSpace`.
    pub(in crate::tbfs) fn settle_deletes_debt(&self, m: &mut State) -> Result<()> {
        if !self.deletes_debt_due(m) {
            return Ok(());
        }
        match self.commit_checkpoint(m) {
            Ok(()) => {
                self.count(|c| c.deletes_debt_checkpoints += 1);
                assert!(
                    m.deletes_debt.charged(Self::deletes_probe(m)) == 0,
                    "a checkpoint left the deletes' debt charged"
                );
                Ok(())
            }
            Err(Error::NoSpace(_)) => {
                self.count(|c| c.deletes_debt_unpaid += 1);
                m.deletes_debt.left_unpaid();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
