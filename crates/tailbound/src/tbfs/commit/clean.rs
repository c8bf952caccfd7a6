//! The cleaner's pass that moves blocks: every live block of the victims is made dirty again
//! (file data, a directory, a map node, an inode page, a table page) or, in a light pass, copied
//! at once into a data-only log. It names the segment table, the inodes, the directories, the
//! inode file, the retention tables and the log writer, so it is orchestration; choosing the
//! victims and counting the passes stay in `space::cleaner`.

use crate::tbfs::format::{self, DescKind, Summary, BLOCK, BLOCK_U64, FANOUT};
use crate::tbfs::inode::DirtyBlock;
use crate::tbfs::map::BlockMap;
use crate::tbfs::state::{Engine, State};
use crate::tbfs::{Error, FileKind, Result};

/// Marks the map node at `level`/`index` (and the path above it) to be rewritten.
fn dirty_node(map: &mut BlockMap, level: u8, index: u64) -> bool {
    let Some(nodes) = map.nodes.get(level as usize - 1) else {
        return false;
    };
    if index as usize >= nodes.len() {
        return false;
    }
    let leaf = (index as usize).saturating_mul(FANOUT.pow(level as u32 - 1));
    if leaf >= map.blocks.len().div_ceil(FANOUT) {
        map.all_dirty = true;
    } else {
        map.dirty_leaves.insert(leaf as u64);
    }
    true
}

/// A live block of a regular file a light pass copies: the file, its block, and where it is.
#[derive(Debug, Clone, Copy)]
struct Copy {
    ino: u64,
    index: u64,
    a: u64,
}

/// A copy that waits for the other log head, with the bytes read from its victim.
type Waiting = (Copy, std::sync::Arc<crate::tbfs::format::Block>);

/// What [`Engine::copy_file_block`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copied {
    Yes,
    /// The file no longer maps the block there (or is gone): nothing to copy.
    Gone,
    /// Not a regular file's: the block is moved as metadata.
    NotAFile,
    /// The file's write rate sends it to the other log head.
    Elsewhere,
}

/// How a light pass routes copies by their file's write rate (`WriteRate`): as of host clock
/// `now`, a file whose blocks live less than `short_below` host blocks is short-lived.
#[derive(Debug, Clone, Copy)]
struct FileRoute {
    now: u64,
    short_below: u64,
}

impl Engine {
    /// The span of host writes, in blocks, over which a file's write rate is counted before
    /// it is halved (`WriteRate::note`): a pool's worth, about as long as cold data outlives
    /// a cleaning cycle.
    pub(in crate::tbfs) fn rate_window(&self) -> u64 {
        self.segment_blocks() * self.segment_count()
    }

    /// Makes every live block of the victims dirty, so the next checkpoint writes it elsewhere.
    /// Returns how many blocks will move, and how many of them were marked dirty and so wait for
    /// a checkpoint (in a light pass, all but regular files' data).
    ///
    /// With `light`, regular files' data is not made dirty but copied at once into data-only
    /// logs (no attribute records: a copy changes no size), which roll-forward replays; the
    /// caller makes them durable. Buffered data stays buffered, so a pass needs room only for
    /// its copies.
    pub(in crate::tbfs) fn move_live(
        &self,
        m: &mut State,
        victims: &[usize],
        light: bool,
    ) -> Result<(u64, u64)> {
        let sb = self.segment_blocks();
        let mut buf = Vec::new();
        let (mut moved, mut metadata) = (0u64, 0u64);
        // Whether the copies go to the cleaner's own log head.
        let mut apart = false;
        if light {
            let live: u64 = victims.iter().map(|&v| m.seg.live(v) as u64).sum();
            let copies = live + live / 64 + 2;
            // The copies keep room for the checkpoint they add to (`Engine::copies_floor`),
            // less what their victims give back once the copies are durable.
            m.cleaning.set_gain(victims.len() as u64 * sb);
            let mut room = Err(crate::tbfs::Error::NoSpace(String::new()));
            if let Some(head) = self.copy_head_room(m) {
                // In a head of their own the copies may take a whole segment more of the free
                // space than they fill, and its two jumps: without that room, they go with the
                // writers' logs. Routed by their files, they may make one run more (a summary,
                // and a pad where a run ends one block short of its segment's end).
                m.cleaning.copies_check_space();
                room = self.ensure_space(m, copies + head + 2 + 2);
                apart = room.is_ok();
            }
            if matches!(room, Err(Error::NoSpace(_))) {
                m.cleaning.copies_check_space();
                room = self.ensure_space(m, copies);
            }
            m.cleaning.set_gain(0);
            room?;
        }
        let mut open = false;
        let mut logs_written = false;
        // On a device whose reads are memory copies, a victim not read ahead is read a block at
        // a time: its summaries, and only the file data still live in it (a victim is mostly
        // dead, and copying all of it under `meta` was most of a pass).
        let by_block = self.dev().writes_are_copies();
        let mut one = vec![0u8; BLOCK];
        // An error part-way (a victim that cannot be read) leaves the copies so far in an
        // open log: it is closed below as a run cut short, not left for the next log to find.
        // While host writes are parted by expected lifetime, a victim's copies go to the head
        // that wrote it: short-lived data's to the writers' head, the rest to the cleaner's.
        // Those victims first, so the chain enters the cleaner's head once.
        let by_lifetime = apart && m.cleaning.ages_differ();
        // And while they do, a copy goes by its file's write rate where the file has one
        // (`WriteRate`): a file whose blocks live less than half the live blocks' count in host
        // writes to the writers' head, any other to the cleaner's, whichever head wrote the
        // victim. Victims hold both, so the copies for the head the pass is not in wait in
        // `elsewhere` and go after the walk, in one run per head.
        let route = by_lifetime.then(|| FileRoute {
            now: m.seg.host_clock(),
            short_below: m.seg.used_blocks() / 2,
        });
        // For the writers' head, then for the cleaner's.
        let mut elsewhere: [Vec<Waiting>; 2] = [Vec::new(), Vec::new()];
        let mut order = victims.to_vec();
        if by_lifetime {
            order.sort_by_key(|&v| !m.seg.short_lived(v));
        }
        let mut open_apart = false;
        let mut walk = || -> Result<()> {
            for &s in &order {
                let here = apart && !(by_lifetime && m.seg.short_lived(s));
                if open && here != open_apart {
                    // The copies so far end their run where they are.
                    self.log_close(m, format::FLAG_END)?;
                    open = false;
                }
                open_apart = here;
                let start = format::FIRST_SEGMENT_BLOCK + s as u64 * sb;
                let whole = if let Some(read) = m.bg_clean.read.remove(&s) {
                    buf = read;
                    true
                } else {
                    if !logs_written {
                        // The victims are read from the device: every log in them must be on it.
                        // Only those: writing every log sealed so far, other writers' payloads
                        // included, took about a fifth of a memory pool's passes under `meta`.
                        let newest = victims
                            .iter()
                            .map(|&v| m.seg.last_seq(v))
                            .max()
                            .unwrap_or(0);
                        self.write_logs_until((newest + 1).min(m.writer.seq()))?;
                        logs_written = true;
                    }
                    if !by_block {
                        buf.resize((sb * BLOCK_U64) as usize, 0);
                        self.read_segment(s, &mut buf)?;
                    }
                    !by_block
                };
                let mut pos = 0u64;
                while pos < sb {
                    let at = (pos * BLOCK_U64) as usize;
                    let head = if whole {
                        &buf[at..at + BLOCK]
                    } else {
                        self.read_block_of(s, start + pos, &mut one)?;
                        &one[..]
                    };
                    // The logs tile the segment; the first that does not decode ends what was written.
                    let Ok((summary, _)) = Summary::decode(head) else {
                        break;
                    };
                    let end = pos + 1 + summary.payload_blocks as u64;
                    if summary.pool_id != self.pool_id() || end > sb {
                        break;
                    }
                    let mut addr = start + pos + 1;
                    for d in &summary.descriptors {
                        // Placed data is file data like any other once the live tree maps it.
                        let kind = match d.kind {
                            DescKind::Placed => DescKind::Data,
                            k => k,
                        };
                        if kind == DescKind::Data
                            && !self.any_block_live(m, d.ino, d.offset, addr, d.blocks)
                        {
                            // A deleted file's data (most of a victim), or data its file no longer
                            // maps there (the number may belong to a newer file): none of it is
                            // live. One look under the inode lock, not one per block.
                            addr += d.blocks as u64;
                            continue;
                        }
                        for i in 0..d.blocks as u64 {
                            let a = addr + i;
                            let data = if whole {
                                let off = ((a - start) * BLOCK_U64) as usize;
                                &buf[off..off + BLOCK]
                            } else if kind == DescKind::Data
                                && self.live_file_block(m, d.ino, d.offset + i, a)
                            {
                                self.read_block_of(s, a, &mut one)?;
                                &one[..]
                            } else {
                                // Not read: neither `copy_file_block` nor `move_block` uses the
                                // bytes of anything but a live block of a file or symbolic link.
                                &[][..]
                            };
                            if light && kind == DescKind::Data {
                                let copy = Copy {
                                    ino: d.ino,
                                    index: d.offset + i,
                                    a,
                                };
                                match self.copy_file_block(m, copy, data, &mut open, here, route)? {
                                    Copied::Yes => {
                                        moved += 1;
                                        continue;
                                    }
                                    Copied::Gone => continue,
                                    Copied::Elsewhere => {
                                        let data = crate::tbfs::blocks::shared_copy(data);
                                        elsewhere[usize::from(!here)].push((copy, data));
                                        continue;
                                    }
                                    Copied::NotAFile => {}
                                }
                            }
                            if self.move_block(m, kind, d.ino, d.level, d.offset + i, a, data) {
                                moved += 1;
                                metadata += 1;
                                if light {
                                    self.count(|c| match kind {
                                        DescKind::MapNode => c.victim_meta_maps += 1,
                                        DescKind::InodePage | DescKind::InodeMapNode => {
                                            c.victim_meta_inodes += 1
                                        }
                                        DescKind::TablePage | DescKind::TableNode => {
                                            c.victim_meta_tables += 1
                                        }
                                        DescKind::Data => c.victim_meta_dirs += 1,
                                        _ => c.victim_meta_other += 1,
                                    });
                                }
                            }
                        }
                        addr += d.blocks as u64;
                    }
                    pos = end;
                }
                // What the writer left unwritten in the victim (a segment it left early).
                let unwritten = sb - pos.min(sb);
                self.count(|c| c.victim_unwritten_blocks += unwritten);
            }
            // The copies routed away from their victim's head: the cleaner's first (the
            // chain is there or enters it), then, after the jump back, the writers'.
            let [for_writers, for_cleaner] = &mut elsewhere;
            for (to_cleaner, waiting) in [(true, for_cleaner), (false, for_writers)] {
                if waiting.is_empty() {
                    continue;
                }
                if open && !(to_cleaner && m.writer.in_copies()) {
                    self.log_close(m, format::FLAG_END)?;
                    open = false;
                }
                if !to_cleaner {
                    self.copies_leave(m)?;
                }
                let mut copied = 0u64;
                for (copy, data) in waiting.drain(..) {
                    let done =
                        self.copy_file_block(m, copy, &data[..], &mut open, to_cleaner, None)?;
                    copied += u64::from(done == Copied::Yes);
                }
                moved += copied;
                self.count(|c| c.copies_by_file += copied);
            }
            Ok(())
        };
        let walked = walk();
        // Without its last log's end flag when cut short: recovery leaves the run out, and
        // what it superseded waits for a checkpoint (`SoftDead::run_begins`).
        let closed = if open {
            let end = if walked.is_ok() { format::FLAG_END } else { 0 };
            self.log_close(m, end)
        } else {
            Ok(())
        };
        // Back to the writers' head, whose next logs are theirs again.
        let left = closed.and_then(|()| self.copies_leave(m));
        walked?;
        left?;
        Ok((moved, metadata))
    }

    /// Copies block `copy.index` of regular file `copy.ino` from `copy.a` into the open
    /// data-only log (opening one if `open` is false, in the cleaner's own log head if `apart`)
    /// if the file still maps it there. With `route`, a file whose write rate sends its blocks
    /// to the other head is left for the caller ([`Copied::Elsewhere`]).
    fn copy_file_block(
        &self,
        m: &mut State,
        copy: Copy,
        data: &[u8],
        open: &mut bool,
        apart: bool,
        route: Option<FileRoute>,
    ) -> Result<Copied> {
        let Copy { ino, index, a } = copy;
        let Some(cell) = m.inodes.get(ino).cloned() else {
            return Ok(Copied::Gone);
        };
        let mut st = cell.lock();
        if st.kind() != FileKind::File {
            return Ok(Copied::NotAFile);
        }
        if st.map().get(index) != a {
            return Ok(Copied::Gone);
        }
        if let Some(r) = route {
            let rate = st.writes();
            let blocks = st.size().div_ceil(BLOCK_U64);
            if rate.known() && rate.lives_less_than(r.now, blocks, r.short_below) == apart {
                return Ok(Copied::Elsewhere);
            }
        }
        if !*open {
            if apart && !m.writer.in_copies() {
                self.copies_enter(m)?;
            }
            self.log_open(m, format::FLAG_BEGIN | format::FLAG_DATA_ONLY);
            *open = true;
        }
        let copy = crate::tbfs::blocks::shared_copy(data);
        let addr = self.log_add_shared(m, DescKind::Data, ino, 0, index, copy.clone(), None)?;
        self.copies.note(addr, m.writer.seq(), copy);
        st.map_mut().set(index, addr);
        drop(st);
        m.seg_inc(addr, self.segment_blocks());
        let seq = m.writer.seq();
        m.seg_supersede(a, seq, self.segment_blocks());
        m.changes.changed(ino);
        Ok(Copied::Yes)
    }

    /// If the live tree references block `a` (described by a summary as `kind`, `ino`, `level`,
    /// `index`), marks what holds it dirty and returns true.
    #[allow(clippy::too_many_arguments)]
    fn move_block(
        &self,
        m: &mut State,
        kind: DescKind,
        ino: u64,
        level: u8,
        index: u64,
        a: u64,
        data: &[u8],
    ) -> bool {
        match kind {
            DescKind::Data | DescKind::Placed => {
                let Some(cell) = m.inodes.get(ino).cloned() else {
                    return false;
                };
                let mut st = cell.lock();
                if st.map().get(index) != a {
                    return false;
                }
                if st.kind() == FileKind::Dir {
                    // Directories are rewritten whole.
                    drop(st);
                    m.dirs.mark_dirty(ino);
                    m.changes.changed(ino);
                    return true;
                }
                // A newer version may be buffered already; either way the next checkpoint must
                // write this inode (a commit in progress may have taken it from the dirty set).
                if !st.dirty().contains_key(&index) {
                    assert_eq!(
                        data.len(),
                        BLOCK,
                        "the cleaner read no bytes for live block {index} of inode {ino} at {a}"
                    );
                    let gen = st.take_gen();
                    let data = crate::tbfs::blocks::shared_copy(data);
                    st.dirty_mut().insert(index, DirtyBlock::new(gen, data));
                    self.budget.add(BLOCK_U64);
                }
                drop(st);
                m.changes.changed(ino);
                self.dirty
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(ino);
                true
            }
            DescKind::MapNode => {
                let Some(cell) = m.inodes.get(ino).cloned() else {
                    return false;
                };
                let mut st = cell.lock();
                let l = level as usize;
                if level == 0
                    || st
                        .map()
                        .nodes
                        .get(l - 1)
                        .and_then(|n| n.get(index as usize))
                        != Some(&a)
                {
                    return false;
                }
                dirty_node(st.map_mut(), level, index);
                drop(st);
                m.changes.changed(ino);
                true
            }
            DescKind::InodePage => {
                if m.ifile.map().get(index) != a {
                    return false;
                }
                m.ifile.page_moved(index);
                true
            }
            DescKind::InodeMapNode => {
                let l = level as usize;
                if level == 0
                    || m.ifile
                        .map()
                        .nodes
                        .get(l - 1)
                        .and_then(|n| n.get(index as usize))
                        != Some(&a)
                {
                    return false;
                }
                dirty_node(m.ifile.map_mut(), level, index);
                true
            }
            DescKind::Root => a == m.ckpt.root(),
            DescKind::TablePage => {
                let t = ino as usize;
                if !(1..=format::TABLES).contains(&t) || m.life.table(t - 1).get(index) != a {
                    return false;
                }
                match ino as u8 {
                    format::TABLE_USAGE => {
                        m.life.mark_usage_page_dirty(index);
                    }
                    format::TABLE_PINNED => {
                        m.life.mark_pinned_page_dirty(index);
                    }
                    _ => m.life.mark_snapshots_dirty(),
                }
                true
            }
            DescKind::TableNode => {
                let t = ino as usize;
                let l = level as usize;
                if level == 0
                    || !(1..=format::TABLES).contains(&t)
                    || m.life
                        .table(t - 1)
                        .nodes
                        .get(l - 1)
                        .and_then(|n| n.get(index as usize))
                        != Some(&a)
                {
                    return false;
                }
                dirty_node(m.life.table_mut(t - 1), level, index);
                if ino as u8 == format::TABLE_SNAPSHOTS {
                    m.life.mark_snapshots_dirty();
                }
                true
            }
            DescKind::Attr | DescKind::Depends | DescKind::Jump => false,
        }
    }

    /// Whether file `ino` (of any kind) still maps any of its blocks `offset..offset + blocks`
    /// at `addr..addr + blocks`, where a data descriptor put them. A block nothing maps there
    /// is dead, whatever the file is now: no per-block step copies or moves it.
    fn any_block_live(&self, m: &State, ino: u64, offset: u64, addr: u64, blocks: u32) -> bool {
        m.inodes.get(ino).is_some_and(|c| {
            let st = c.lock();
            (0..u64::from(blocks)).any(|i| st.map().get(offset + i) == addr + i)
        })
    }

    /// Whether block `index` of file `ino` is still at `a` and its bytes are carried by
    /// [`Engine::move_block`] or [`Engine::copy_file_block`]: a regular file's or a symbolic
    /// link's (whose target is its data). Directories are rewritten whole from memory.
    fn live_file_block(&self, m: &State, ino: u64, index: u64, a: u64) -> bool {
        m.inodes.get(ino).is_some_and(|c| {
            let st = c.lock();
            st.kind() != FileKind::Dir && st.map().get(index) == a
        })
    }

    /// Reads block `a` of victim segment `s` into `out`.
    fn read_block_of(&self, s: usize, a: u64, out: &mut [u8]) -> Result<()> {
        self.dev().read_at(a * BLOCK_U64, out).map_err(|e| {
            Error::io(
                format!(
                    "{} device: cleaner reading block {a} of segment {s}",
                    self.dev().kind()
                ),
                e,
            )
        })
    }
}
