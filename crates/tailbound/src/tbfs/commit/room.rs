//! Room: the space check every commit makes before it writes ([`Engine::ensure_space`]), which
//! cleans when room is short, and the margins it keeps. The free-space counts themselves are
//! `space`'s, of the segment table and the inputs gathered here from the other parts.

use crate::tbfs::format::*;
use crate::tbfs::limits::{
    CHECKPOINT_FLOOR_BLOCKS, CLEAN_ROOM_SEGMENTS, DELETES_ALLOWANCE_BLOCKS,
    DELETES_PAGES_ALLOWANCE, FULL_PASS_ROOM_SEGMENTS, LOW_WATER_DIVISOR, MIN_RECLAIMABLE,
    RESERVE_BLOCKS_MIN,
};
use crate::tbfs::state::{Engine, State, StateGuard};
use crate::tbfs::{Error, Result};

impl Engine {
    /// Blocks the writer can still fill without reusing anything not yet reclaimable
    /// ([`Engine::free_blocks_in`]).
    pub(in crate::tbfs) fn free_blocks(&self, m: &State) -> u64 {
        self.free_blocks_up_to(m, u64::MAX)
    }

    /// Like `free_blocks`, but stops counting segments once `enough` blocks are found, so the
    /// check on every sync does not walk the whole segment table.
    pub(in crate::tbfs) fn free_blocks_up_to(&self, m: &State, enough: u64) -> u64 {
        self.free_blocks_in(&m.seg, m.writer.place(), &m.bg_clean.reading, enough)
    }

    /// Segments that would be free after the next durable superblock.
    pub(in crate::tbfs) fn pending_free_segments(&self, m: &State) -> usize {
        self.pending_free_in(&m.seg, m.writer.place(), &m.bg_clean.reading)
    }

    /// What [`Engine::ensure_space`] wants free beyond what is written: the reserve kept for the
    /// checkpoints that make dead segments reusable (and for recovery's), and the low-water mark
    /// below which the writer cleans (and waits for it) while there is still room for the
    /// cleaner to work in (see `low_water`). A refresh may use both.
    pub(in crate::tbfs) fn space_margins(&self, m: &State) -> (u64, u64) {
        if self.recovering(m) {
            (0, 0)
        } else {
            (
                self.cycle_reserve(m) + Self::deletes_reserve(m),
                self.low_water(m),
            )
        }
    }

    /// The reserve, and if more, what the cleaning cycle of a full segment's live blocks takes
    /// with what its copies add to the next checkpoint (`CopiesDebt::beyond_runs`): the reserve is
    /// the room the cleaner works in, and copies of blocks scattered under a large file's leaves
    /// dirty about a leaf each.
    fn cycle_reserve(&self, m: &State) -> u64 {
        self.reserve_blocks()
            .max(self.cycle_cost_in(m, self.segment_blocks()))
    }

    /// [`cycle_cost`] of a victim with `live` live blocks, with what its copies may add beyond
    /// a node per run (`CopiesDebt::beyond_runs`).
    fn cycle_cost_in(&self, m: &State, live: u64) -> u64 {
        cycle_cost(live) + self.copies_debt(m).beyond_runs(live)
    }

    /// The checkpoint debt a writer keeps room for: the bound from totals, and what the
    /// cleaner's copies may add to it before the checkpoint that pays it (`CopiesDebt::ceiling`).
    /// Kept only for the bound, a pool whose overwrites are scattered over large files' maps
    /// cleaned until its copies had dirtied more nodes than the checkpoint after them found room
    /// for.
    pub(in crate::tbfs) fn writers_debt(&self, m: &State) -> u64 {
        self.checkpoint_debt(m, false) + self.copies_debt(m).ceiling()
    }

    /// Room kept for a checkpoint of deletes: every inode page (with nothing keeping what
    /// deletes drop, at most [`DELETES_PAGES_ALLOWANCE`] of them) and the inode file's map; while
    /// a snapshot or a view keeps what deletes drop, the allowance for the rest of what they
    /// add ([`DELETES_ALLOWANCE_BLOCKS`]); and while a pin may outlive a snapshot's drop, every
    /// page of the pinned table (`drop_pinned_room`). Deletes and truncates answer `NoSpace`
    /// only under a snapshot or a view in a pool full by the 90 % rule, when what earlier ones
    /// added cannot be paid (`Engine::pay_deletes_debt_first`), and add to the next checkpoint
    /// without a space check: files deleted all over the tree rewrite every page holding one
    /// of them, and under a snapshot the pinned-table pages of the blocks they pin, their
    /// directories and a truncated file's map. Inode pages
    /// are bounded by the inode file; the rest is charged as it is added (`DeletesDebt`), and
    /// a change that takes the charge past half the allowance pays the debt with a checkpoint
    /// (`Engine::settle_deletes_debt`). So the debt a checkpoint (a sync's, a snapshot drop's)
    /// finds beyond what the last space check counted is at most the inode pages, the
    /// allowance and one change's own, while those checkpoints find room; in a pool full of
    /// live and pinned blocks they do not, and what a drop must then write of the pinned table
    /// is held by its own part. Without a snapshot or a view deletes give their blocks back
    /// with the checkpoint that writes their debt, and nothing is charged.
    pub(in crate::tbfs) fn deletes_reserve(m: &State) -> u64 {
        let (inodes, allowance, pins) = Self::deletes_reserve_parts(m);
        inodes + allowance + pins
    }

    /// [`Engine::deletes_reserve`] in its three parts: the inode pages with the inode file's
    /// map, the allowance for what deletes charge (none while nothing keeps what they drop),
    /// and the pinned table a drop may write (`drop_pinned_room`).
    fn deletes_reserve_parts(m: &State) -> (u64, u64, u64) {
        let allowance = if Self::keeps_dropped(m) {
            DELETES_ALLOWANCE_BLOCKS
        } else {
            0
        };
        // Without a snapshot or a view, deletes past half an allowance of pages write their
        // checkpoint first (`Engine::record_deletes_first`): room for that allowance is enough.
        let pages = m.ifile.pages();
        let kept = if Self::keeps_dropped(m) {
            pages
        } else {
            pages.min(DELETES_PAGES_ALLOWANCE)
        };
        (
            kept + crate::tbfs::map::tree_nodes(pages) + 1,
            allowance,
            Self::drop_pinned_room(m),
        )
    }

    /// The pinned-table pages a snapshot's drop may write, whatever deletes mark before it:
    /// those holding a pin that outlives the drop. A pin outlives it only if a checkpoint the
    /// drop does not release references its block: another snapshot, one a view holds, or a
    /// plain checkpoint inside a protection period. With a single snapshot (or the one being
    /// made), no view and no protection period, the drop's checkpoint releases every pin, each
    /// page it empties becomes a hole, and it writes none (`State::pinned_pages_after_prune`): the
    /// pages deletes mark are then only debt for plain checkpoints, charged and paid as they
    /// go. Otherwise every page of the table with its map: deletes may mark all of them after
    /// the last checkpoint that found room, and a drop must still be written. (The pages
    /// holding a pin are no bound there: near full the checkpoints that pay deletes' charge
    /// find no room, and deletes go on adding pins to new pages.) Recovery after a power cut
    /// writes only the pages its roll-forward changes (`commit::open`), which the debt
    /// counted before the cut, so under a single snapshot it needs none of the table's room.
    fn drop_pinned_room(m: &State) -> u64 {
        let keepers =
            m.life.snapshot_count() + m.life.held_count() + usize::from(m.life.snapshot_coming());
        if keepers == 0 || keepers == 1 && m.life.protection().is_zero() {
            0
        } else {
            let pages = m.seg.live_counts().len() as u64 * m.life.pinned_pages_per_segment();
            pages + crate::tbfs::map::tree_nodes(pages) + 1
        }
    }

    /// Whether a snapshot, a view or the snapshot being made keeps what deletes drop, so they
    /// pin it and give nothing back.
    pub(in crate::tbfs) fn keeps_dropped(m: &State) -> bool {
        m.life.snapshot_count() > 0 || m.life.held_count() > 0 || m.life.snapshot_coming()
    }

    /// The totals the deletes' charge is read from: the pinned-table pages marked and the
    /// dirty directories' bound, both part of the checkpoint debt (`State::table_estimate`,
    /// `Directories::dirty_bound`).
    pub(in crate::tbfs) fn deletes_probe(m: &State) -> u64 {
        m.life.pins().dirty_page_count() as u64 + m.dirs.dirty_bound().0
    }

    /// The whole debt was counted with the allowance kept beyond it (an admitted write or
    /// name) or paid (a checkpoint): the deletes' charge starts again.
    pub(in crate::tbfs) fn deletes_debt_counted(m: &mut State) {
        let probe = Self::deletes_probe(m);
        m.deletes_debt.counted(probe);
    }

    /// A refresh outside cleaning: the checkpoint and superblocks of `format` and of recovery,
    /// which may use every free block (nothing else can run before them).
    fn recovering(&self, m: &State) -> bool {
        m.refresh.running() && !m.cleaning.running()
    }

    /// Blocks one cleaning cycle of the best victim needs: its live blocks copied, their
    /// summaries, and the map nodes and inode pages the copies add to the next checkpoint. The
    /// best victim is the emptiest segment the writer does not hold with nothing pinned in it
    /// and enough dead to be worth cleaning, among those the cleaner may clean now; only when
    /// retention keeps every such segment from it (a snapshot or a protection period), among
    /// all of them, since the drop or the end of the period that frees the space also makes
    /// them victims. A nearly empty segment a snapshot locks does not stand for the cycle the
    /// cleaner must run meanwhile. None (0): nothing is left to clean, and no cycle needs room.
    pub(in crate::tbfs) fn cycle_room(&self, m: &State) -> u64 {
        let sb = self.segment_blocks();
        let now = self.now_ns();
        let victims = (0..self.segment_count() as usize).filter(|&s| {
            !m.writer.holds_segment(s as u64)
                && m.seg.pinned(s) == 0
                && m.seg.live(s) > 0
                && (sb - u64::from(m.seg.live(s))) as f64 >= sb as f64 * MIN_RECLAIMABLE
        });
        let (mut now_best, mut later_best) = (None::<u64>, None::<u64>);
        for s in victims {
            let live = u64::from(m.seg.live(s));
            later_best = Some(later_best.map_or(live, |b| b.min(live)));
            if m.cleanable(s, now) {
                now_best = Some(now_best.map_or(live, |b| b.min(live)));
            }
        }
        now_best
            .or(later_best)
            .map_or(0, |live| self.cycle_cost_in(m, live))
    }

    /// The buffered blocks a seal of `blocks` of the buffer leaves for the next checkpoint.
    fn buffered_beside(&self, blocks: u64) -> u64 {
        self.buffered_bytes()
            .div_ceil(BLOCK_U64)
            .saturating_sub(blocks)
    }

    /// What the next checkpoint writes: its counted debt and the buffered data it carries.
    fn next_checkpoint_blocks(&self, m: &State) -> u64 {
        self.checkpoint_debt(m, true) + self.budget.buffered().div_ceil(BLOCK_U64)
    }

    /// What a checkpoint writing `paid` inode pages and inode-file map nodes must leave free:
    /// while a snapshot or a view keeps what deletes drop (without one, deletes that would
    /// outgrow the free room write their checkpoint first, `Engine::record_deletes_first`,
    /// and none of this is kept), the deletes' room (`Engine::deletes_reserve`), its inode
    /// pages' part less those (not
    /// less the checkpoint's whole size: a sync's checkpoint carrying buffered data would then
    /// spend the room of the inode pages deletes dirty later, and a pool emptied by deletes
    /// could write no checkpoint again, `tests/tbfs_delete_all_full.rs`), and
    /// its allowance and pinned-table part whole (the checkpoint pays what deletes charged and
    /// the pages they marked, and they may charge and mark as much again before the next
    /// checkpoint, a snapshot's drop, must write it); and the
    /// room of the next cleaning cycle, less the whole segments the checkpoint makes reusable
    /// (those waiting only for it and its superblock, and a full pass's victims), never less
    /// than a checkpoint with nothing changed takes ([`CHECKPOINT_FLOOR_BLOCKS`]); nothing at
    /// all for a checkpoint a superblock follows at once, with nothing keeping what deletes
    /// drop, when the segments it gives back hold that cycle, that floor and the deletes'
    /// inode pages (a pool emptied by deletes after its room was spent). It pays the
    /// debt, so that is all the invariant asks of it. A snapshot's drop keeps only the floor:
    /// it gives back what the snapshot held, which the cleaner could not reach before, and
    /// must not be refused; every other checkpoint leaving the deletes' room is what makes
    /// that hold. Under a single snapshot the pinned table's pages need no room of their own
    /// (`drop_pinned_room`): those deletes mark are charged against the allowance, and the
    /// drop's release empties them. A close keeps only the floor, as a drop does: nothing but
    /// its superblock follows it.
    fn checkpoint_floor(&self, m: &State, paid: u64) -> u64 {
        let least = CHECKPOINT_FLOOR_BLOCKS;
        if m.life.drop_in_progress() || m.ckpt.closing() {
            return least;
        }
        let given_back =
            self.pending_free_segments(m) as u64 * self.segment_blocks() + m.cleaning.gain();
        let (inodes, allowance, pins) = Self::deletes_reserve_parts(m);
        // Counted once: a stepped clock moves on each reading of the time it takes.
        let cycle = self.cycle_room(m);
        if !Self::keeps_dropped(m)
            && m.writer.refreshing()
            && given_back >= cycle.max(least) + inodes
        {
            // Once the superblock that follows at once is written, the segments given back
            // hold a cleaning cycle, a checkpoint's floor and a rewrite of the inode pages
            // deletes may dirty: a pool emptied by deletes writes the checkpoint that frees it
            // in whatever is free beside them.
            return 0;
        }
        // With nothing keeping what deletes drop, a delete that would take the debt past what
        // is free writes the checkpoint first (`Engine::record_deletes_first`): no room is
        // kept for them here.
        let inodes = if Self::keeps_dropped(m) {
            inodes.saturating_sub(paid)
        } else {
            0
        };
        cycle.saturating_sub(given_back).max(least) + inodes + allowance + pins
    }

    /// What a checkpoint must leave free at the least while a snapshot or a view keeps what
    /// deletes drop: a checkpoint's floor for the drop after it, and the deletes' room whole
    /// (`Engine::deletes_reserve`) for what deletes add before that drop. A checkpoint whose
    /// whole floor (`checkpoint_floor`, which also keeps a cleaning cycle) does not fit is
    /// written in this: it pays the debt every later checkpoint (a cleaning pass's above all)
    /// would have to write first, so refusing it for the cycle keeps no cycle runnable, while
    /// deletes under the snapshot go on adding to the debt until not even the drop fits.
    fn drop_floor(&self, m: &State) -> u64 {
        CHECKPOINT_FLOOR_BLOCKS + Self::deletes_reserve(m)
    }

    /// What a light pass whose copies add `added` blocks to the next checkpoint (map nodes and
    /// inode pages, `CopiesDebt::beyond_runs`) must leave free: that checkpoint, with what they add,
    /// and a checkpoint's floor after it. Its
    /// victims are reusable only once the copies are durable, and those holding metadata only
    /// after that checkpoint. (Light passes run only while nothing keeps what deletes drop,
    /// and such deletes write their checkpoint first when they would outgrow the free room,
    /// `Engine::record_deletes_first`, so no room is kept for them here.)
    fn copies_floor(&self, m: &State, added: u64) -> u64 {
        self.next_checkpoint_blocks(m) + added + CHECKPOINT_FLOOR_BLOCKS
    }

    /// The room invariant, checked where writers are admitted (debug builds): with `free`
    /// blocks free after the commit being admitted and `debt` a bound of the next checkpoint's,
    /// there is room for that checkpoint, then for one cleaning cycle of the best victim and
    /// for what deletes may add to it (`Engine::deletes_reserve`), so the cleaner can always
    /// make progress and a checkpoint, a snapshot drop's above all, can always be written.
    fn debug_assert_room_kept(&self, m: &State, free: u64, debt: u64) {
        if cfg!(debug_assertions) {
            let cycle = self.cycle_room(m);
            let deletes = Self::deletes_reserve(m);
            assert!(
                free >= debt + cycle + deletes,
                "room invariant: {free} blocks free after a write, the next checkpoint's {debt}, a cleaning cycle's {cycle} and the deletes' {deletes} not kept"
            );
        }
    }

    /// Makes sure `blocks` can be written, refreshing the superblock to release dead segments if
    /// that helps. Fails with `NoSpace` before anything is written.
    ///
    /// What each kind of commit must leave free keeps one invariant: after any admitted
    /// operation the free blocks hold the next checkpoint (its counted debt and buffered data)
    /// and one cleaning cycle of the best victim (`cycle_room`). Writes and new names keep the
    /// reserve (which covers a cycle) and the counted debt; a checkpoint pays the debt and
    /// keeps a cycle less the segments it gives back (`checkpoint_floor`); a light pass's
    /// copies keep the checkpoint they add to (`copies_floor`); recovery's and `format`'s
    /// checkpoints keep nothing.
    pub(in crate::tbfs) fn ensure_space(&self, m: &mut State, blocks: u64) -> Result<()> {
        // Taken, so the checks the cleaning below runs are their own.
        let checkpoint_pages = m.cleaning.take_checkpoint_check();
        let for_checkpoint = checkpoint_pages.is_some();
        let for_buffer = m.cleaning.take_buffer_check();
        let for_copies = m.cleaning.take_copies_check();
        let mut need = self.space_needed(blocks);
        let (reserve, low_water) = self.space_margins(m);
        // A write keeps the room the next checkpoint needs, which pays for its maps (see
        // `debt`): writers clean before the bound from totals exceeds the low-water room, and a
        // write is refused that would leave less than the reserve and the counted debt.
        let pays_debt = !for_checkpoint && !m.cleaning.running() && !m.refresh.running();
        // A seal of part of the buffer keeps room for the rest, which the next checkpoint (a
        // snapshot's drop, a sync's) carries: a seal that took it would leave that checkpoint
        // none. (Other commits do not: a write finds room for the whole buffer with its own
        // first, `make_room_for_write`, a direct write's piece counts it itself, and a name
        // asks little.)
        let beside = if pays_debt && for_buffer {
            self.buffered_beside(blocks)
        } else {
            0
        };
        let quick_debt = if pays_debt {
            self.writers_debt(m) + beside
        } else {
            0
        };
        let want = want_of(need, reserve, low_water, quick_debt);
        // Below this a write for `need` blocks cleans until there is room; above it (and below
        // `want`) it pays the cleaning tax.
        let floor_for = |need: u64| floor_of(need, reserve, low_water, quick_debt);
        // A memory pool also notes whether space is tight, for its in-flight bound
        // (`in_flight_max`), from the same count of free segments, which goes as far as a whole
        // buffer needs so it also sets the buffer limit.
        let tight_mark = self.dev().writes_are_copies().then(|| self.urgent_mark(m));
        let room_mark =
            need + self.buffer_room(m, self.config().dirty_bytes_max.div_ceil(BLOCK_U64));
        let free = self.free_blocks_up_to(m, want.max(tight_mark.unwrap_or(0)).max(room_mark));
        if let Some(mark) = tight_mark {
            self.budget.set_tight(free < mark);
        }
        // Saturating: with less free than the commit needs, nothing is left for buffers.
        self.set_buffer_limit(m, free.saturating_sub(need), reserve);
        let full = !self.light_cleaning(m);
        self.budget.set_full_passes(full);
        if pays_debt {
            self.budget.set_room_short(free < want);
        }
        // While the pool still needs cleaning, a write above the mark pays its share too
        // (`commit::tax`), and goes on as a write the tax admits does (below): once only, and
        // cleaning until there is room only if its pieces left less than the floor.
        let mut taxed_above = false;
        if free >= want
            && !for_copies
            && m.tax.needed()
            && !m.cleaning.running()
            && !m.refresh.running()
        {
            if let Some(key) = self.taxed_writer(true) {
                let floor = floor_for(need);
                let paid = self.pay_cleaning_tax(m, key, need, free, floor, want, for_buffer)?;
                need -= paid.sealed_first;
                taxed_above = true;
                let floor = floor_for(need);
                if self.free_blocks_up_to(m, floor) >= floor {
                    if pays_debt {
                        self.debug_assert_room_kept(m, self.free_blocks(m) - need, quick_debt);
                    }
                    return Ok(());
                }
            }
        }
        if free >= want && !for_copies && !taxed_above {
            if pays_debt {
                self.debug_assert_room_kept(m, free - need, quick_debt);
                Self::deletes_debt_counted(m);
            }
            return Ok(());
        }
        // When space is short, what is sealed is written first (as when logs and refreshes
        // were written under `meta`): a written superblock releases segments, and written and
        // flushed logs let superseded segments go, so the space check and the cleaner below see
        // what is reusable. (Every entry queued is below `seq + 1` while `meta` is held.) A
        // background pass does no device I/O under `meta`: what it sealed is written once it
        // lets `meta` go, and it works in the room there is now.
        if !m.bg_clean.defer_io {
            // A real-time writer's commit that finds the room above the floor (where a write
            // goes on without cleaning until there is room) does not wait here: the payloads
            // in flight may be a lower class's large ones, and every other writer waits for
            // `meta` meanwhile. It goes on as a write the tax admits, in the room there is now,
            // and leaves the wait and the cleaning (it pays no tax) to the others. So does a
            // commit a real-time thread waits on (its priority lent for `meta`): waiting here,
            // or paying its tax, it would keep that thread waiting.
            if pays_debt && !for_copies && self.leaves_space_wait_to_others() {
                let floor = floor_for(need);
                if free >= floor {
                    self.count(|c| c.space_waits_left += 1);
                    crate::phases::count(|t| t.space_waits_left += 1);
                    if self.config().background_gc {
                        self.wake_background(|w| w.clean = true);
                    }
                    self.debug_assert_room_kept(m, free - need, quick_debt);
                    return Ok(());
                }
            }
            // A writer's hold taken again after its thread waited for the logs in flight with
            // `meta` let go (`wait_for_room_outside`) counts what that wait freed: it does not
            // wait again under `meta`, where every other thread would wait with it. A check
            // inside a cleaning pass or a refresh (the pass's copies, its checkpoint) that its
            // room admits without the wait does not wait either: the wait only adds room, and
            // that pass's answer would be the same.
            let waited_outside = pays_debt && !for_copies && m.room_waited();
            let nested_fits = (m.cleaning.running() || m.refresh.running()) && {
                let keep = self.room_to_keep(m, blocks, checkpoint_pages, for_copies, reserve, 0);
                (!for_copies && free >= want)
                    || self.free_blocks_up_to(m, need + keep) >= need + keep
            };
            if !waited_outside && !nested_fits {
                self.count(|c| c.space_waits += 1);
                crate::phases::count(|t| t.space_waits += 1);
                let start = std::time::Instant::now();
                let written = {
                    let _work = crate::phases::meta_work(crate::phases::MetaWork::SpaceWait);
                    self.write_logs_until(m.writer.seq() + 1)
                };
                self.writes.waited_for_logs(
                    crate::tbfs::admission::WriterKey::of_current_thread_on(&**self.dev()),
                    start.elapsed(),
                );
                written?;
            }
            if !for_copies && self.free_blocks_up_to(m, want) >= want {
                if pays_debt {
                    self.debug_assert_room_kept(m, self.free_blocks(m) - need, quick_debt);
                    Self::deletes_debt_counted(m);
                }
                return Ok(());
            }
        }
        // A new write or name like one cleaning could not make room for, with no block freed
        // since, is refused without cleaning again (`Refusals`): near full, each attempt would
        // copy nearly whole segments and write checkpoints for nothing. Seals of data already
        // acknowledged (a sync's, a full buffer's) always clean.
        let ordinary = !for_checkpoint && !for_copies && !for_buffer;
        let asked = need;
        let futile = ordinary && m.refusals.futile(asked, || m.seg.used_blocks());
        // Only a refusal that cleaning ran for (here, or for the one it repeats) stands.
        let mut cleaned_for_it = futile;
        if !m.refresh.running() && !m.cleaning.running() && !futile {
            // Between the floor and the mark a write pays the cleaning tax, a share of cleaning
            // by the blocks it writes (`commit::tax`); below the floor it cleans until there is
            // room, the last resort.
            let floor = floor_for(need);
            let free = self.free_blocks_up_to(m, want);
            // A checkpoint a writer's commit runs pays as a write does (cleaning and refreshes
            // are outside this branch).
            let taxed = self.taxed_writer(!for_copies && !taxed_above);
            if let Some(key) = taxed.filter(|_| free >= floor && free < want) {
                let paid = self.pay_cleaning_tax(m, key, need, free, floor, want, for_buffer)?;
                need -= paid.sealed_first;
                if self.config().background_gc {
                    self.wake_background(|w| w.clean = true);
                }
                let floor = floor_for(need);
                if self.free_blocks_up_to(m, floor) >= floor {
                    if pays_debt {
                        self.debug_assert_room_kept(m, self.free_blocks(m) - need, quick_debt);
                    }
                    return Ok(());
                }
            }
            let urgent = need + reserve + low_water / 2;
            if self.config().background_gc
                && need <= low_water / 4
                && self.free_blocks_up_to(m, urgent) >= urgent
            {
                // A small write (a synchronous append, not a buffer-full commit) above half the
                // low-water mark leaves the cleaning to the background thread, woken now: it
                // does not wait for passes it does not need. Large writes still clean, so the
                // cleaner keeps room to work in.
                self.wake_background(|w| w.clean = true);
                return Ok(());
            }
            // Writers wait for the cleaner rather than fail. Cleaning that finds no room of its
            // own leaves the answer to the check below.
            m.cleaning.set_for_buffer(if for_buffer { need } else { 0 });
            let start = std::time::Instant::now();
            let cleaned = {
                let _work = crate::phases::meta_work(crate::phases::MetaWork::CleanForRoom);
                self.clean(m, want, true)
            };
            cleaned_for_it = true;
            let copied = cleaned.as_ref().map_or(0, |r| r.blocks_copied);
            self.writes.cleaned_for_room(
                crate::tbfs::admission::WriterKey::of_current_thread_on(&**self.dev()),
                start.elapsed(),
                copied,
            );
            // What the cleaner sealed of the buffer before its passes is written: a buffer seal
            // needs room only for what is left of it (never below nothing: it is counted up to
            // `need`).
            need -= m.cleaning.take_sealed_first();
            match cleaned {
                Ok(_) | Err(Error::NoSpace(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // What this commit must leave free (see the doc above).
        let debt = if pays_debt {
            self.checkpoint_debt(m, true) + beside
        } else {
            0
        };
        let keep = self.room_to_keep(m, blocks, checkpoint_pages, for_copies, reserve, debt);
        if self.free_blocks_up_to(m, need + keep) >= need + keep {
            if pays_debt {
                self.debug_assert_room_kept(m, self.free_blocks(m) - need, debt);
                Self::deletes_debt_counted(m);
            }
            return Ok(());
        }
        // A checkpoint under a snapshot that does not fit beside a cleaning cycle still pays
        // the debt if the room a drop needs after it is kept (`drop_floor`).
        if for_checkpoint && !self.recovering(m) && Self::keeps_dropped(m) {
            let floor = self.drop_floor(m);
            if floor < keep && self.free_blocks_up_to(m, need + floor) >= need + floor {
                self.count(|c| c.checkpoints_in_drop_floor += 1);
                return Ok(());
            }
        }
        if ordinary && cleaned_for_it {
            m.refusals.refused(asked, m.seg.used_blocks());
        }
        // The deletes' bound is what keeps a snapshot's drop and a close from being refused:
        // while every charge past the allowance was paid, the room kept holds what they write.
        if cfg!(debug_assertions)
            && for_checkpoint
            && (m.life.drop_in_progress() || m.ckpt.closing())
        {
            assert!(
                !m.deletes_debt.within_bound(),
                "a snapshot's drop or a close refused with the deletes' debt within its bound: {} blocks to write, {} free",
                need,
                self.free_blocks(m)
            );
        }
        let space = self.space_report(m);
        let snapshots = m.life.snapshot_count();
        let holds = m.life.held_count();
        Err(Error::NoSpace(format!(
            "{} bytes to write, {} bytes free after cleaning; live data holds {} and {} snapshot(s){} pin {} of {} bytes{}",
            need * BLOCK_U64,
            // What is free beyond the reserve, none if the reserve is not all there.
            self.free_blocks(m).saturating_sub(reserve) * BLOCK_U64,
            space.live,
            snapshots,
            if holds > 0 { format!(" and {holds} open view(s)") } else { String::new() },
            space.pinned_by_snapshots,
            space.size,
            if space.pinned_by_snapshots > space.size / 10 {
                " (drop snapshots to make room)".to_string()
            } else if space.reclaimable >= need * BLOCK_U64 {
                // The room exists, as dead blocks spread thinly over nearly full segments: each
                // pass copies almost a segment to give back a few blocks, and ran out of room.
                format!(
                    " ({} bytes are dead but spread over nearly full segments the cleaner could not empty in the room left: a larger pool, or a smaller write buffer, leaves it room)",
                    space.reclaimable
                )
            } else {
                " (the live data fills the pool)".to_string()
            }
        )))
    }

    /// What a commit of `blocks` must leave free beside them (see [`Engine::ensure_space`]):
    /// nothing for recovery's and `format`'s checkpoints, a checkpoint's floor for a checkpoint
    /// writing `checkpoint_pages` inode pages, a light pass's copies' floor, and otherwise the
    /// reserve and `debt`.
    fn room_to_keep(
        &self,
        m: &State,
        blocks: u64,
        checkpoint_pages: Option<u64>,
        for_copies: bool,
        reserve: u64,
        debt: u64,
    ) -> u64 {
        if self.recovering(m) {
            0
        } else if let Some(pages) = checkpoint_pages {
            self.checkpoint_floor(m, pages)
        } else if for_copies {
            // Below the floor (recovery may leave a pool there), a pass whose victims give
            // back more than it copies still climbs towards it: what it must leave, once its
            // victims are reusable, is the floor, and meanwhile a checkpoint's.
            let added = copies_debt(blocks) + self.copies_debt(m).beyond_runs(blocks);
            let floor = self.copies_floor(m, added);
            floor
                .saturating_sub(m.cleaning.gain().saturating_sub(added))
                .max(CHECKPOINT_FLOOR_BLOCKS)
        } else {
            reserve + debt
        }
    }

    /// The sequence below which a writer's space check for `blocks`, made now at the start of
    /// a hold (`m`), would wait for every log to be written under `meta`: room short (below
    /// what the check wants), and not a check that goes on without the wait above the floor
    /// (`leaves_space_wait_to_others`); `None` if it would not wait, or nothing is in flight
    /// to wait for. Mirrors [`Engine::ensure_space`]'s test.
    fn space_wait_due(&self, m: &State, blocks: u64) -> Option<u64> {
        if m.bg_clean.defer_io || m.cleaning.running() || m.refresh.running() || m.room_waited() {
            return None;
        }
        let need = self.space_needed(blocks);
        let (reserve, low_water) = self.space_margins(m);
        let debt = self.writers_debt(m);
        let want = want_of(need, reserve, low_water, debt);
        let free = self.free_blocks_up_to(m, want);
        if free >= want {
            return None;
        }
        if free >= floor_of(need, reserve, low_water, debt) && self.leaves_space_wait_to_others() {
            return None;
        }
        let seq = m.writer.seq() + 1;
        (self.logs.written() < seq || self.payloads_in_flight_below(seq)).then_some(seq)
    }

    /// Before a writer's commit of about `blocks` in the hold `m` (what it sealed is written
    /// as it lets go, as at any release):
    /// if its space check would wait for the logs in flight ([`Engine::space_wait_due`]), lets
    /// go of `meta`, waits for them, and takes `meta` again. The check that follows counts what
    /// they freed, in the state as it is now, and does not wait for the device under `meta`
    /// (`State::room_waited`): waiting there, a best-effort writer behind a large payload kept
    /// every other thread from `meta`, a real-time writer's sync included, for as long as the
    /// payload took. The room invariant is the check's own: it decides under `meta`, as before.
    #[track_caller]
    pub(in crate::tbfs) fn wait_for_room_outside<'a>(
        &'a self,
        m: StateGuard<'a>,
        blocks: u64,
    ) -> Result<StateGuard<'a>> {
        let Some(seq) = self.space_wait_due(&m, blocks) else {
            return Ok(m);
        };
        self.count(|c| c.space_waits_outside += 1);
        m.unlock_and_write()?;
        let start = std::time::Instant::now();
        let written = self.write_logs_until(seq);
        let key = crate::tbfs::admission::WriterKey::of_current_thread_on(&**self.dev());
        self.writes.waited_for_logs(key, start.elapsed());
        written?;
        let mut m = self.lock_meta_for_write(key);
        m.note_room_waited();
        Ok(m)
    }

    /// Whether the calling thread's space check goes on without waiting for the logs in flight
    /// while the room is above the floor: a real-time one's (as it pays no cleaning tax), or
    /// one a real-time thread waits on, lending its priority for `meta`.
    fn leaves_space_wait_to_others(&self) -> bool {
        let rt = |p: crate::sched::Prio| p.class == crate::sched::Class::Rt;
        rt(crate::sched::current_prio()) || crate::sched::inherit::inherited().is_some_and(rt)
    }

    /// Whether cleaning passes can be light (see `clean_passes`): relaxed ordering, and a newest
    /// checkpoint nothing keeps (no snapshot, open view or protection period), so the blocks
    /// the copies supersede need no pin.
    pub(in crate::tbfs) fn light_cleaning(&self, m: &State) -> bool {
        self.config().ordering == crate::tbfs::Ordering::Relaxed
            && m.life
                .only_newest_unkept(m.ckpt.newest(), m.ckpt.newest(), self.now_ns())
    }

    /// Free blocks kept, beyond what a write needs and the reserve, before writers clean: room
    /// for the cleaner to make progress. Every block kept free beyond that raises the live
    /// fraction of the segments it cleans.
    pub(in crate::tbfs) fn low_water(&self, m: &State) -> u64 {
        let sb = self.segment_blocks();
        let flush = self.config().dirty_bytes_max.div_ceil(BLOCK_U64);
        let want = if !self.light_cleaning(m) {
            // Every pass is a checkpoint with the buffered data and a pass's copies (strict
            // ordering, or a newest checkpoint something keeps).
            flush + flush / 4 + FULL_PASS_ROOM_SEGMENTS * sb
        } else {
            // A light pass needs room for one victim's copies. A victim that holds live map
            // nodes needs a checkpoint, which writes the buffered data with the nodes: room for
            // a flush, its summaries and the nodes. A namespace change pending changes nothing:
            // passes are light whatever is pending. (A flush of the least a writer buffers
            // instead lowered the victims' live fraction, but under uniform overwrites light
            // victims then held live metadata far more often and the checkpoints for it cost
            // more than that gained: docs/results/cleaner.md.)
            flush + flush / 8 + CLEAN_ROOM_SEGMENTS * sb
        };
        want.min(sb * self.segment_count() / LOW_WATER_DIVISOR)
            .max(2 * sb)
            .max(RESERVE_BLOCKS_MIN)
    }

    /// Whether segment `s` may be written again ([`Engine::segment_reusable`]).
    pub(in crate::tbfs) fn segment_free(&self, m: &State, s: usize) -> bool {
        self.segment_free_if_durable(m, s, self.logs.durable())
    }

    /// Whether segment `s` would be free once every log below `durable` is durable.
    pub(in crate::tbfs) fn segment_free_if_durable(
        &self,
        m: &State,
        s: usize,
        durable: u64,
    ) -> bool {
        self.segment_reusable(&m.seg, m.writer.place(), &m.bg_clean.reading, s, durable)
    }
}

/// What a writer's space check for `need` blocks wants free: the reserve, and the low-water
/// mark or the counted debt if more.
fn want_of(need: u64, reserve: u64, low_water: u64, debt: u64) -> u64 {
    need + reserve + low_water.max(debt)
}

/// Below this a writer's commit of `need` blocks cleans until there is room; between it and
/// [`want_of`] it pays the cleaning tax: the reserve, and half the low-water mark or the
/// counted debt if more.
fn floor_of(need: u64, reserve: u64, low_water: u64, debt: u64) -> u64 {
    need + reserve + (low_water / 2).max(debt)
}

/// The map nodes and inode pages copying `blocks` live blocks adds to the next checkpoint, at
/// most: a leaf path per run of a file's blocks, bounded as a full pass's victims are charged
/// (`Engine::choose_victims`).
pub(in crate::tbfs) fn copies_debt(blocks: u64) -> u64 {
    blocks / 4 + 8
}

/// Blocks one cleaning cycle of a victim with `live` live blocks needs: the copies, their
/// summaries and pads, and what they add to the next checkpoint ([`copies_debt`]).
pub(in crate::tbfs) fn cycle_cost(live: u64) -> u64 {
    live + live / 32 + 8 + copies_debt(live)
}
