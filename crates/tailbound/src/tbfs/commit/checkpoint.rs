//! Checkpoints: laying out every changed inode, directory and map, the tables and the root.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::tbfs::dense::DenseSet;
use crate::tbfs::format::{self, *};
use crate::tbfs::inode::*;
use crate::tbfs::limits::*;
use crate::tbfs::log::data::unsealed_count;
use crate::tbfs::log::Release;
use crate::tbfs::map::BlockMap;
use crate::tbfs::state::{Engine, Section, State};
use crate::tbfs::{Barrier, Result};

/// A checkpoint's root as its log holds it: the checkpoint's number, the root's address, the
/// sequence of the log the root ends, and the checkpoint's time.
struct RootLogged {
    number: u64,
    addr: u64,
    root_seq: u64,
    time_ns: i64,
}

impl Engine {
    /// Debug builds: every slot of cached inode page `p` that this checkpoint does not write
    /// holds its inode's current record, or that inode changed after the checkpoint took the
    /// dirty set (a writer marks the inode dirty under the same lock hold as its change, and
    /// nothing takes the dirty set while `meta` is held), so the next checkpoint writes it. A
    /// checkpoint nested in another's cleaning is not checked: it finds the inodes the outer
    /// one took and has not written yet changed, and their cached records, matching the maps
    /// on the device, are the right ones to write there.
    fn check_cached_page(&self, m: &State, page: &format::Block, p: u64, records: &Records) {
        for slot in 0..INODES_PER_PAGE {
            let ino = p * INODES_PER_PAGE as u64 + slot as u64;
            if records.get(ino).is_some() || m.ifile.freed_slots().contains(&ino) {
                continue;
            }
            let mut fresh = [0u8; INODE_BYTES];
            current_record(m, ino).encode_into(&mut fresh);
            debug_assert!(
                fresh[..] == page[slot * INODE_BYTES..(slot + 1) * INODE_BYTES]
                    || self
                        .dirty
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .all()
                        .contains(&ino),
                "inode {ino} changed and is in no checkpoint's work"
            );
        }
    }

    /// Tests: a checkpoint's two bounds for the inodes it would write now, quick and counted.
    #[cfg(test)]
    pub(in crate::tbfs) fn checkpoint_inode_bounds(&self, m: &State) -> (u64, u64) {
        let work = checkpoint_work(m, self.dirty.lock().unwrap().all().clone());
        let dir_blocks = encode_changed_dirs(m, &work);
        (
            self.quick_inode_bound(&work, &dir_blocks),
            self.counted_inode_bound(m, &work, &dir_blocks, false).0,
        )
    }

    /// An upper bound on the blocks a checkpoint writes for the inodes of `work` (their
    /// buffered blocks and map nodes, and a slot each), from totals alone: every block buffered
    /// (`Engine::dirty_bytes`, sealed ones included, and [`QUICK_BOUND_SLACK_BLOCKS`] for writes
    /// being buffered meanwhile), and for every inode the whole tree of the widest map the
    /// pool has had (`BufferBudget::widest`). It visits no inode: counting inode by inode
    /// ([`Engine::counted_inode_bound`]) takes a cache miss or more per inode, all of it holding
    /// `meta`.
    pub(in crate::tbfs) fn quick_inode_bound(
        &self,
        work: &DenseSet,
        dir_blocks: &HashMap<u64, Vec<crate::tbfs::blocks::FreshBlock>>,
    ) -> u64 {
        let widest_dir = dir_blocks
            .values()
            .map(|b| b.len() as u64)
            .max()
            .unwrap_or(0);
        let widest = self.budget.widest();
        // An inode's slot is in its page, counted apart.
        let per_inode = crate::tbfs::map::tree_nodes(widest.max(widest_dir));
        let buffered = self.budget.buffered().div_ceil(BLOCK_U64);
        buffered + QUICK_BOUND_SLACK_BLOCKS + work.len() as u64 * per_inode
    }

    /// Whether the space check for `blocks` would find room at once, without refreshing,
    /// cleaning or waiting ([`Engine::ensure_space`]'s first test).
    fn space_is_ample(&self, m: &State, blocks: u64) -> bool {
        let (reserve, low_water) = self.space_margins(m);
        let want = self.space_needed(blocks) + reserve + low_water;
        self.free_blocks_up_to(m, want) >= want
    }

    /// The inodes' part of a checkpoint's estimate, counted inode by inode: unsealed buffers,
    /// and the map nodes that change (the whole tree if its shape changes, else the paths above
    /// the leaves whose children change). With `hold`, each inode counted is held
    /// (`InodeState::held`) until the checkpoint lets the returned cells go ([`unhold_all`]).
    fn counted_inode_bound(
        &self,
        m: &State,
        work: &DenseSet,
        dir_blocks: &HashMap<u64, Vec<crate::tbfs::blocks::FreshBlock>>,
        hold: bool,
    ) -> (u64, Vec<Arc<InodeCell>>) {
        let mut estimate = 0;
        let mut held = Vec::new();
        for ino in work.iter() {
            let cell = &m.inodes[&ino];
            let mut st = cell.lock();
            let dir_len = dir_blocks.get(&ino).map_or(0, |b| b.len());
            // Buffers already in a sealed log stay there (see the sealing below). The inode's
            // slot is in its page, counted apart.
            estimate += unsealed_count(&st) as u64 + map_nodes_bound(&st, dir_len);
            if hold {
                st.hold();
                held.push(cell.clone());
            }
        }
        (estimate, held)
    }

    /// Writes every buffered block, every changed directory, block map and inode, and a new
    /// checkpoint root, as one or more logs ending in a checkpoint log.
    pub(crate) fn commit_checkpoint(&self, m: &mut State) -> Result<()> {
        let _laying_out = crate::phases::enter(crate::phases::Phase::Checkpoint);
        let _work = crate::phases::meta_work(crate::phases::MetaWork::Checkpoint);
        crate::phases::count(|t| t.checkpoints += 1);
        m.ckpt.enter();
        let result = self.in_section(m, Section::Checkpoint, |m| {
            self.commit_checkpoint_at_depth(m)
        });
        m.ckpt.leave();
        result
    }

    /// [`Engine::commit_checkpoint`]; `Checkpoints::depth` says whether it runs inside another
    /// (through the space check's cleaning).
    fn commit_checkpoint_at_depth(&self, m: &mut State) -> Result<()> {
        let taken: DenseSet = self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take_all();
        let mut work = checkpoint_work(m, taken);

        // An upper bound on what this checkpoint writes, checked before anything changes (the
        // directories are encoded here, for the sealing below).
        let mut dir_blocks = encode_changed_dirs(m, &work);
        let (estimate, pages_paid, held) = self.checkpoint_estimate(m, &work, &dir_blocks);
        let passes = m.cleaning.passes();
        m.cleaning.checkpoint_checks_space(pages_paid);
        let space = self.ensure_space(m, estimate);
        if space.is_err() || m.cleaning.passes() != passes {
            unhold_all(&held);
            // Nothing was written: the files taken from the dirty set stay in it, or a later
            // sync would not see their buffered data.
            self.dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put_back(work.iter());
            space?;
            // The space check cleaned: the passes changed maps and marked blocks this
            // checkpoint must write, so it starts over with them (without cleaning again if
            // it comes to that twice: a space check cleans only outside cleaning).
            m.cleaning.start();
            let again = self.commit_checkpoint(m);
            m.cleaning.end();
            return again;
        }
        // `ensure_space` may have run a checkpoint of its own; whatever it wrote is no longer dirty.
        work.retain(|ino| m.inodes.contains(*ino));

        self.log_open(m, FLAG_BEGIN);
        let seq = m.writer.seq();
        let now = self.now_ns();
        let sealed = self.checkpoint_inodes(m, &work, &mut dir_blocks, seq, now);
        unhold_all(&held);
        let (records, written, changed) = sealed?;
        self.checkpoint_inode_pages(m, &records, seq, now)?;
        let depends: Vec<u64> = changed.iter().map(|c| c.ino).collect();
        let root = self.checkpoint_root_log(m, seq, written, &depends)?;
        self.checkpoint_written(m, root, changed);
        self.count(|c| c.checkpoints += 1);
        Ok(())
    }

    /// An upper bound on the blocks a checkpoint of `work` writes: the directories (already
    /// encoded in `dir_blocks`), the inode pages, the inode file's map and the tables, and each
    /// inode's buffered blocks and map nodes.
    ///
    /// Also returns the inode pages and inode-file map nodes among them: what of the deletes'
    /// room (`Engine::deletes_reserve`) this checkpoint pays (`Engine::checkpoint_floor`).
    fn checkpoint_estimate(
        &self,
        m: &State,
        work: &DenseSet,
        dir_blocks: &HashMap<u64, Vec<crate::tbfs::blocks::FreshBlock>>,
    ) -> (u64, u64, Vec<Arc<InodeCell>>) {
        // A freed inode costs its slot's page, counted with the pages: deleting many files must
        // not look like writing a block per file, or a full pool could not take the deletes
        // that make room.
        let mut estimate = 2 + dir_blocks.values().map(|b| b.len() as u64).sum::<u64>();
        let pages = m.ifile.pages_to_write(work.iter());
        // The inode file's map: a path per page written, and never more than its whole tree.
        let ifile_len =
            (m.ifile.map().blocks.len() as u64 + 1).max(pages.last().map_or(0, |&p| p + 1));
        let ifile_nodes = ((height_for(ifile_len) as u64 + 1) * pages.len().max(1) as u64)
            .min(crate::tbfs::map::tree_nodes(ifile_len) + 1);
        let pages_paid = pages.len() as u64 + ifile_nodes;
        // Pages left holes are paid without a block (`checkpoint_inode_pages`).
        let holes = pages
            .iter()
            .filter(|&&p| inode_page_left_hole(m, p))
            .count() as u64;
        estimate += pages_paid - holes + 4;
        estimate += m.table_estimate();
        // The inodes' part: a bound from totals when the free space covers it with room to
        // spare, else one counted inode by inode.
        // Debug builds check the quick bound against the count at every checkpoint. Writers
        // buffer without `meta`, so the count comes first: a block buffered between the two
        // raises the quick bound too, where counted second it would be counted alone.
        #[cfg(debug_assertions)]
        let counted_first = self.counted_inode_bound(m, work, dir_blocks, false).0;
        let quick = self.quick_inode_bound(work, dir_blocks);
        #[cfg(debug_assertions)]
        assert!(
            quick >= counted_first,
            "the quick bound {quick} is below the count {counted_first}"
        );
        // The quick bound keeps slack for what writers buffer meanwhile; the count keeps none,
        // so the inodes it counts are held until they are sealed.
        let (estimate, held) = if self.space_is_ample(m, estimate + quick) {
            (estimate + quick, Vec::new())
        } else {
            let (counted, held) = self.counted_inode_bound(m, work, dir_blocks, true);
            (estimate + counted, held)
        };
        (pinned_pages_as_written(m, estimate), pages_paid, held)
    }

    /// Seals each inode of `work` into the checkpoint's logs: its unsealed buffered blocks, its
    /// directory blocks, its map nodes. Returns their records, the buffers the written logs
    /// release, and the inodes with a change only a checkpoint records (their next sync waits
    /// for this one).
    #[allow(clippy::type_complexity)]
    fn checkpoint_inodes(
        &self,
        m: &mut State,
        work: &DenseSet,
        dir_blocks: &mut HashMap<u64, Vec<crate::tbfs::blocks::FreshBlock>>,
        seq: u64,
        now: i64,
    ) -> Result<(Records, Vec<Release>, Vec<Arc<InodeCell>>)> {
        let mut records = Records::default();
        let mut written: Vec<Release> = Vec::new();
        // Inodes with a change only a checkpoint records, or buffered data it writes: their
        // later data-only logs build on this checkpoint (`DescKind::Depends`), so their next
        // sync waits for it, and for every payload it needs to count.
        let mut changed: Vec<Arc<InodeCell>> = Vec::new();
        let flush = self.config().barrier != Barrier::Superblock;
        for ino in work.iter() {
            let cell = m.inodes[&ino].clone();
            let mut guard = cell.lock();
            let st = &mut *guard;
            // Blocks already in a sealed log stay there: the map names that copy, and this
            // checkpoint is written after it. One pass over the buffers seals the others.
            let mut done = Vec::new();
            let mut overwrites = 0u64;
            let (map, dirty) = st.map_and_dirty_mut();
            for (&block, d) in dirty.iter_mut().filter(|(_, d)| d.sealed_in.is_none()) {
                let addr = self.log_add_shared(
                    m,
                    DescKind::Data,
                    ino,
                    0,
                    block,
                    d.share_with_log(),
                    Some(d.crc()),
                )?;
                d.sealed_in = Some((m.writer.seq(), flush));
                let old = map.set(block, addr);
                m.seg_inc(addr, self.segment_blocks());
                if old != 0 {
                    m.seg_dec_at(old, seq, self.segment_blocks(), now);
                    overwrites += 1;
                }
                done.push((block, d.gen));
            }
            if !done.is_empty() {
                st.note_writes(m.seg.host_clock(), overwrites, self.rate_window());
            }
            if let Some(blocks) = dir_blocks.remove(&ino) {
                let count = blocks.len() as u64;
                for (i, b) in blocks.into_iter().enumerate() {
                    let addr =
                        self.log_add_shared(m, DescKind::Data, ino, 0, i as u64, b.0, None)?;
                    let old = st.map_mut().set(i as u64, addr);
                    m.seg_inc(addr, self.segment_blocks());
                    if old != 0 {
                        m.seg_dec_at(old, seq, self.segment_blocks(), now);
                    }
                }
                let trimmed = st.truncate(count * BLOCK_U64);
                debug_assert_eq!(trimmed.dropped, 0, "a directory holds no buffered blocks");
                for old in trimmed.unmapped {
                    m.seg_dec_at(old, seq, self.segment_blocks(), now);
                }
                // A directory's map is as wide as its blocks until the next rewrite: the quick
                // bound must know it, as it knows files' (`BufferBudget::widest`).
                self.note_width(count);
            }
            let mut map = std::mem::take(st.map_mut());
            let result = self.write_map(m, DescKind::MapNode, ino, &mut map);
            *st.map_mut() = map;
            result?;
            st.attr_logged();
            records.push(ino, st.record(ino));
            drop(guard);
            if m.changes.only_checkpoint_records(ino) || !done.is_empty() {
                changed.push(cell.clone());
            }
            written.push((cell, done));
        }

        Ok((records, written, changed))
    }

    /// Inode pages: every page holding a changed or freed inode, then the inode file's map.
    fn checkpoint_inode_pages(
        &self,
        m: &mut State,
        records: &Records,
        seq: u64,
        now: i64,
    ) -> Result<()> {
        let mut pages: BTreeSet<u64> = records
            .inos()
            .map(|ino| ino / INODES_PER_PAGE as u64)
            .collect();
        pages.extend(
            m.ifile
                .freed_slots()
                .iter()
                .map(|ino| ino / INODES_PER_PAGE as u64),
        );
        pages.extend(m.ifile.take_pages_dirty());
        for &p in &pages {
            if inode_page_left_hole(m, p) {
                // Left a hole, which recovery and fsck read as a page of free slots: deletes
                // that empty whole pages (an `rm -rf`, a pool emptied) then cost their
                // checkpoint no page.
                drop(m.ifile.take_cached(p));
                let old = m.ifile.map_mut().set(p, 0);
                if old != 0 {
                    m.seg_dec_at(old, seq, self.segment_blocks(), now);
                }
                continue;
            }
            let first = p * INODES_PER_PAGE as u64;
            let slots = first..first + INODES_PER_PAGE as u64;
            let encode_slot = |page: &mut format::Block, ino: u64, r: &InodeRecord| {
                let slot = (ino - first) as usize;
                r.encode_into(&mut page[slot * INODE_BYTES..(slot + 1) * INODE_BYTES]);
            };
            // A page this process wrote before is updated in place: only the slots of the
            // inodes this checkpoint writes (or frees) are encoded again, since every change to
            // an inode's record puts the inode in the work (checked in debug builds).
            // The log shares the page with the cache: the next change to it copies the page
            // only if the log is not written by then.
            let page = match m.ifile.take_cached(p) {
                Some(mut shared) => {
                    if cfg!(debug_assertions) && m.ckpt.depth() == 1 {
                        self.check_cached_page(m, &shared, p, records);
                    }
                    let page = Arc::make_mut(&mut shared);
                    for (ino, r) in records.range(slots.clone()) {
                        encode_slot(page, ino, r);
                    }
                    for ino in m.ifile.freed_slots().range(slots.clone()) {
                        if records.get(ino).is_none() {
                            // Freed, or freed and its number taken again since.
                            encode_slot(page, ino, &current_record(m, ino));
                        }
                    }
                    shared
                }
                None => crate::tbfs::blocks::new_block(|page| {
                    for ino in slots {
                        let record = match records.get(ino) {
                            Some(&r) => r,
                            None => current_record(m, ino),
                        };
                        encode_slot(page, ino, &record);
                    }
                }),
            };
            let addr = self.log_add_shared(m, DescKind::InodePage, 0, 0, p, page.clone(), None);
            m.ifile.cache(p, page);
            let addr = addr?;
            let old = m.ifile.map_mut().set(p, addr);
            m.seg_inc(addr, self.segment_blocks());
            if old != 0 {
                m.seg_dec_at(old, seq, self.segment_blocks(), now);
            }
        }
        let next_ino = m.inodes.next_ino();
        m.ifile.cover(next_ino);
        let mut ifile = m.ifile.take_map();
        let result = self.write_map(m, DescKind::InodeMapNode, 0, &mut ifile);
        m.ifile.put_map(ifile);
        result?;

        Ok(())
    }

    /// Retention, the tables, the files whose later logs build on this checkpoint (`depends`)
    /// and the checkpoint root, in the log the root closes.
    fn checkpoint_root_log(
        &self,
        m: &mut State,
        seq: u64,
        written: Vec<Release>,
        depends: &[u64],
    ) -> Result<RootLogged> {
        let number = m.ckpt.next_number();
        // Retention: release what the protection period no longer covers, then drop the old
        // root from the live tree (pinned if its checkpoint stays retained) before the pinned
        // table is written.
        let released = m.prune(seq, self.segment_blocks(), true);
        if m.life.under_pressure() {
            self.count(|c| c.protection_released += released);
        }
        let prev_root = m.ckpt.root();
        if prev_root != 0 {
            m.seg_dec(prev_root, seq, self.segment_blocks());
        }
        let tables = self.write_tables(m)?;
        self.log_add_depends(m, depends)?;
        // The root names the sequence of the log it ends: open the continuation log first if the
        // root would not fit in this one, so the sequence is final before the root is encoded.
        if !self.log_has_room(m, DescKind::Root, 0, 0, 0) {
            self.log_roll(m)?;
        }
        let time_ns = self.now_ns();
        let root = CheckpointRoot {
            number,
            sequence: m.writer.seq(),
            time_ns,
            ifile_root: m.ifile.map().root,
            ifile_height: m.ifile.map().height,
            ifile_pages: m.ifile.pages(),
            next_ino: m.inodes.next_ino(),
            inodes: m.inodes.len() as u64,
            prev_root,
            oldest_protected: m.life.oldest_protected(time_ns, number),
            tables,
        };
        let before = m.writer.seq();
        let addr = self.log_add(m, DescKind::Root, 0, 0, 0, &root.encode()[..])?;
        debug_assert_eq!(
            m.writer.seq(),
            before,
            "the root went into the log it names"
        );
        let root_seq = m.writer.seq();
        // The buffers go once the checkpoint is written.
        m.writer.hand_release(written);
        self.log_close(m, FLAG_END | FLAG_CHECKPOINT)?;
        Ok(RootLogged {
            number,
            addr,
            root_seq,
            time_ns,
        })
    }

    /// The bookkeeping once the checkpoint's logs are sealed: the root is live, retained and
    /// the newest; what waited for a checkpoint no longer does.
    fn checkpoint_written(&self, m: &mut State, root: RootLogged, changed: Vec<Arc<InodeCell>>) {
        let RootLogged {
            number,
            addr,
            root_seq,
            time_ns,
        } = root;
        m.seg_inc(addr, self.segment_blocks());
        m.life.retain(
            number,
            crate::tbfs::retention::Retained {
                time_ns,
                root: addr,
                snapshot: false,
                name: None,
            },
        );
        m.life.checkpoint_written(
            State::seg_of(m.writer.pos(), self.segment_blocks()),
            m.writer.pos(),
        );
        for cell in changed {
            cell.lock().set_ckpt_seq(root_seq);
        }
        let now_ns = self.config().clock.peek_ns();
        m.ckpt
            .written(number, addr, root_seq, m.writer.seq(), now_ns);
        m.ifile.freed_slots_written();
        m.dirs.written();
        m.changes.checkpointed();
        // The debt deletes charged is paid, and the checkpoint's space check kept their
        // allowance beyond it (`Engine::checkpoint_floor`).
        Self::deletes_debt_counted(m);
    }

    /// Writes the changed nodes of a block map bottom-up and updates its root.
    pub(in crate::tbfs) fn write_map(
        &self,
        m: &mut State,
        kind: DescKind,
        ino: u64,
        map: &mut BlockMap,
    ) -> Result<()> {
        if !map.is_dirty() {
            return Ok(());
        }
        let seq = m.writer.seq();
        let sb = self.segment_blocks();
        // Only the newest checkpoint's tables are read, so their old nodes pin nothing.
        let dec = |m: &mut State, a: u64| {
            if kind == DescKind::TableNode {
                m.seg_dec_unpinned(a, seq, sb)
            } else {
                m.seg_dec(a, seq, sb)
            }
        };
        // A file's or directory's map of a few runs goes in its inode record: no nodes.
        if kind == DescKind::MapNode {
            if let Some(extents) = format::Extents::of(&map.blocks) {
                for a in map.node_addrs().collect::<Vec<_>>() {
                    dec(m, a);
                }
                map.nodes.clear();
                map.root = 0;
                map.height = 0;
                map.inline = Some(extents);
                map.dirty_leaves.clear();
                map.all_dirty = false;
                return Ok(());
            }
        }
        let n = map.blocks.len();
        let h = height_for(n as u64);
        // A map that was in the record has no nodes to keep: every one is written.
        let was_inline = map.inline.take().is_some();
        let all = map.all_dirty || h != map.height || was_inline;
        if all {
            for a in map.node_addrs().collect::<Vec<_>>() {
                dec(m, a);
            }
            map.nodes.clear();
        }
        if h == 0 {
            map.nodes.clear();
            map.root = map.blocks.first().copied().unwrap_or(0);
            map.height = 0;
            map.dirty_leaves.clear();
            map.all_dirty = false;
            return Ok(());
        }
        let mut dirty: BTreeSet<usize> = if all {
            (0..n.div_ceil(FANOUT)).collect()
        } else {
            let leaves = map.dirty_leaves.iter().map(|i| i as usize).collect();
            map.dirty_leaves.clear();
            leaves
        };
        let mut levels: Vec<Vec<u64>> = Vec::with_capacity(h as usize);
        let mut width = n;
        for level in 1..=h {
            let count = width.div_ceil(FANOUT);
            let mut addrs = if all {
                Vec::new()
            } else {
                map.nodes
                    .get(level as usize - 1)
                    .cloned()
                    .unwrap_or_default()
            };
            addrs.resize(count, 0);
            let mut parents = BTreeSet::new();
            for &i in dirty.iter().filter(|&&i| i < count) {
                let children: &[u64] = if level == 1 {
                    &map.blocks
                } else {
                    &levels[level as usize - 2]
                };
                let end = ((i + 1) * FANOUT).min(children.len());
                let node = crate::tbfs::blocks::new_block(|b| {
                    format::encode_node_into(b, level, &children[i * FANOUT..end])
                });
                let addr = self.log_add_shared(m, kind, ino, level, i as u64, node, None)?;
                m.seg_inc(addr, self.segment_blocks());
                if addrs[i] != 0 {
                    dec(m, addrs[i]);
                }
                addrs[i] = addr;
                parents.insert(i / FANOUT);
            }
            levels.push(addrs);
            dirty = parents;
            width = count;
        }
        debug_assert_eq!(
            levels.last().map(Vec::len),
            Some(1),
            "the top level is one node"
        );
        map.root = levels[h as usize - 1][0];
        map.nodes = levels;
        map.height = h;
        map.dirty_leaves.clear();
        map.all_dirty = false;
        Ok(())
    }
}

/// The inodes a checkpoint writes: those `taken` from the dirty set, those with data in
/// data-only logs since the last checkpoint, and the changed directories, while they exist.
fn checkpoint_work(m: &State, mut taken: DenseSet) -> DenseSet {
    taken.extend(m.changes.pending().iter());
    taken.extend(m.dirs.dirty().iter());
    taken.retain(|ino| m.inodes.contains(*ino));
    taken
}

/// The changed directories of `work`, each encoded as directory blocks.
fn encode_changed_dirs(
    m: &State,
    work: &DenseSet,
) -> HashMap<u64, Vec<crate::tbfs::blocks::FreshBlock>> {
    m.dirs
        .dirty()
        .iter()
        .filter(|ino| work.contains(ino))
        .filter_map(|ino| {
            let entries = m.dirs.get(ino)?;
            let blocks = format::encode_dir_entries_in(
                entries
                    .iter()
                    .map(|(name, &(child, is_dir))| (child, is_dir, name.as_str())),
                crate::tbfs::blocks::FreshBlock::new,
            );
            Some((ino, blocks))
        })
        .collect()
}

/// The inode records a checkpoint writes, in ascending inode order (its work is walked in
/// that order): a sorted list, where a B-tree took an insertion search per inode under `meta`.
#[derive(Default)]
pub(crate) struct Records(Vec<(u64, InodeRecord)>);

impl Records {
    /// Adds `ino`'s record; `ino` is above every number already in.
    pub(crate) fn push(&mut self, ino: u64, record: InodeRecord) {
        debug_assert!(self.0.last().is_none_or(|&(last, _)| last < ino));
        self.0.push((ino, record));
    }

    pub(crate) fn get(&self, ino: u64) -> Option<&InodeRecord> {
        self.0
            .binary_search_by_key(&ino, |&(i, _)| i)
            .ok()
            .map(|at| &self.0[at].1)
    }

    /// The records of the inodes in `inos`, ascending.
    pub(crate) fn range(
        &self,
        inos: std::ops::Range<u64>,
    ) -> impl Iterator<Item = (u64, &InodeRecord)> {
        let from = self.0.partition_point(|&(i, _)| i < inos.start);
        let to = self.0.partition_point(|&(i, _)| i < inos.end);
        self.0[from..to].iter().map(|(i, r)| (*i, r))
    }

    pub(in crate::tbfs) fn inos(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|&(i, _)| i)
    }
}

/// Whether a checkpoint leaves inode page `p` a hole rather than writing it: every slot is
/// free, and a later page is mapped (the inode file's height follows its page count, so its
/// last page is always written). Inodes come and go only under `meta`, which the checkpoint
/// holds, so the answer holds from its estimate to its pages.
fn inode_page_left_hole(m: &State, p: u64) -> bool {
    let first = p * INODES_PER_PAGE as u64;
    p + 1 < m.ifile.map().blocks.len() as u64
        && (first..first + INODES_PER_PAGE as u64).all(|ino| !m.inodes.contains(ino))
}

/// Inode `ino`'s record as the inode table holds it now (an empty one for a free number).
fn current_record(m: &State, ino: u64) -> InodeRecord {
    m.inodes
        .get(ino)
        .map(|c| c.lock().record(ino))
        .unwrap_or_default()
}

/// The map nodes a checkpoint writes for an inode holding `dir_len` directory blocks (0 for a
/// file): the whole tree if its shape changes, else the paths above the leaves whose children
/// change.
pub(in crate::tbfs) fn map_nodes_bound(st: &crate::tbfs::inode::InodeState, dir_len: usize) -> u64 {
    if dir_len == 0 && st.dirty().is_empty() && !st.map().is_dirty() {
        // Its record holds the map as it is (inline, or naming the nodes written last).
        return 0;
    }
    let n = st
        .map()
        .blocks
        .len()
        .max(st.dirty().keys().next_back().map_or(0, |&b| b as usize + 1))
        .max(dir_len) as u64;
    let h = height_for(n) as u64;
    let total = crate::tbfs::map::tree_nodes(n);
    if st.map().all_dirty || h != st.map().height as u64 || dir_len > 0 {
        return total;
    }
    // The leaves marked dirty plus the distinct leaves of the buffers (in order, so counted
    // without a set): an upper bound, as a leaf may be in both.
    let mut buffered = 0u64;
    let mut last = None;
    for &b in st.dirty().keys() {
        let leaf = b / FANOUT as u64;
        if last != Some(leaf) {
            buffered += 1;
            last = Some(leaf);
        }
    }
    ((st.map().dirty_leaves.len() as u64 + buffered) * h).min(total)
}

/// A checkpoint's `estimate` with its pinned-table pages counted as it will write them: the
/// table estimate counts every page marked, but the checkpoint first releases the checkpoints
/// nothing keeps any more (`State::prune`: a dropped snapshot, the newest plain checkpoint
/// past its protection period), and a page that release empties becomes a hole and takes no
/// block. So a snapshot's drop is not refused for the pages deletes under it marked, nor a
/// checkpoint after deletes of files written since the newest plain checkpoint (which pins
/// them only until this one is written). Never more than `estimate`.
pub(in crate::tbfs) fn pinned_pages_as_written(m: &State, estimate: u64) -> u64 {
    let marked = m.life.pins().dirty_page_count() as u64;
    if marked == 0 {
        return estimate;
    }
    let rest = estimate - marked;
    (rest + m.pinned_pages_after_prune(rest)).min(estimate)
}
