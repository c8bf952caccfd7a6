//! The server's side of the leases (`lease.rs`): the generation table, raising its words, and
//! granting leases.
//!
//! Why a lease can never answer stale:
//! - A thread of the server holds the table's liveness word as a robust futex: when the server
//!   stops, or dies however it dies, the kernel marks the word and clients answer nothing from
//!   what they kept.
//! - A change made through a session raises the changed inode's word (a directory's for a name
//!   made, removed or moved in it) once the pool has applied it and before its reply goes
//!   (the server's observer, `observe.rs`). A grant reads the words it hands out *before* it
//!   reads what they guard, so a change it missed raises a word after the value it handed out.
//! - A read that sets an access time raises the inode's word from inside the engine, and so
//!   does freeing an inode: every lease of it is revoked before its number names a new file
//!   (leases are kept by inode number, across a client's handles).
//! - A block named by a data lease keeps its bytes until its segment is written again: tbfs
//!   never writes over a live block, and the engine raises the segment's word when it picks
//!   the segment as the next to fill (`Watcher::segment_reused`), before a byte of it changes.
//!   A grant reads a block's segment word under the inode's lock, while the block is live in
//!   that segment, so the segment cannot have been picked since.

use std::fs::File as StdFile;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};

use super::codec::IO_MAX;
use super::lease::{
    inode_word, segment_word, table_bytes, DataLease, LeaseTableInfo, LeasedStat, Words,
    INODE_SLOTS, LEASE_BLOCKS, LIVENESS_AT, SEGMENT_SLOTS,
};
use super::lease_shm::{hold_liveness, reopen_read_only, Map};
use super::messages::Payload;
use super::observe::Change;
use crate::dev::BLOCK_SIZE;
use crate::tbfs::{Error, File, FileKind, Fs, Result, Watcher, ASK};

/// One pool's generation table, shared read-only with every leasing client.
pub(super) struct LeaseTable {
    map: Arc<Map>,
    /// Stops the thread that holds the liveness word, and the thread.
    live: Mutex<Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>>,
    file: StdFile,
    /// The pool read-only, for clients that may read it whole; its length.
    pool: Option<(StdFile, u64)>,
}

impl LeaseTable {
    pub fn new(fs: &Fs) -> io::Result<LeaseTable> {
        let (file, map) = Map::table(table_bytes(INODE_SLOTS, SEGMENT_SLOTS))?;
        let map = Arc::new(map);
        let (stop, stopped) = mpsc::channel();
        let thread = hold_liveness(map.clone(), LIVENESS_AT, stopped)?;
        let dev = fs.inner.dev();
        let pool = match dev.share_read_only() {
            Some(Ok(f)) => Some((f, dev.len())),
            Some(Err(e)) => {
                eprintln!("tailbound serve: no direct reads of the pool: {e}");
                None
            }
            None => None,
        };
        Ok(LeaseTable {
            map,
            live: Mutex::new(Some((stop, thread))),
            file,
            pool,
        })
    }

    fn load(&self, at: usize) -> u64 {
        self.map.word(at).map_or(0, |w| w.load(Ordering::Acquire))
    }

    fn raise(&self, at: usize) {
        if let Some(w) = self.map.word(at) {
            // Sequentially consistent: ordered before whatever the raiser does next (the
            // reply, or the log writer's stores into a segment picked for reuse).
            w.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Revokes every lease: the server stops (no session is left to grant another), so a
    /// client's next call crosses and learns the server is gone instead of answering from
    /// what it kept.
    pub fn revoke_all(&self) {
        self.stop_liveness();
        let words = INODE_SLOTS as usize + SEGMENT_SLOTS as usize;
        for i in 0..words {
            self.raise(super::lease::HEADER_BYTES + 8 * i);
        }
    }

    /// Ends the thread holding the liveness word: once it has exited the kernel has marked
    /// the word, and every client stops answering from what it kept.
    fn stop_liveness(&self) {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((stop, thread)) = live {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }

    pub fn inode_changed(&self, ino: u64) {
        self.raise(inode_word(INODE_SLOTS, ino));
    }

    /// A session changed something (the server's observer).
    pub fn observe(&self, change: &Change<'_>) {
        match *change {
            Change::Written { ino, .. } | Change::Inode { ino } => self.inode_changed(ino),
            Change::Name { parent, .. } => self.inode_changed(parent),
            // Told before the unlink; the `Inode` and `Name` changes after it revoke.
            Change::Unlinking { .. } => {}
        }
    }

    fn inode_lease_word(&self, ino: u64) -> (u32, u64) {
        let at = inode_word(INODE_SLOTS, ino);
        (at as u32, self.load(at))
    }

    /// Sends the table (and, with `whole_pool`, the pool) read-only on `stream`, each a byte
    /// with its descriptor; the reply that follows on the rings says what was sent.
    pub fn hand_over(&self, stream: &UnixStream, whole_pool: bool) -> Result<LeaseTableInfo> {
        let io = |e: io::Error| Error::io("handing over the lease table", e);
        let table = reopen_read_only(&self.file).map_err(io)?;
        let pool = self.pool.as_ref().filter(|_| whole_pool);
        super::ring::send_memfd(stream, Some(&table)).map_err(io)?;
        if let Some((f, _)) = pool {
            super::ring::send_memfd(stream, Some(f)).map_err(io)?;
        }
        Ok(LeaseTableInfo {
            inode_slots: INODE_SLOTS,
            segment_slots: SEGMENT_SLOTS,
            pool_bytes: pool.map_or(0, |(_, len)| *len),
        })
    }

    /// `stat` of `path` with the words it depends on: every directory on the way and the
    /// inode itself. No words (not to be kept) for a path that is not plain (`.`, `..`, a
    /// symbolic link on the way or, followed, at its end).
    pub fn stat(&self, fs: &Fs, path: &str, follow: bool) -> Result<LeasedStat> {
        let look = || {
            if follow {
                fs.stat(path)
            } else {
                fs.lstat(path)
            }
        };
        let Some(before) = self.chain(fs, path, follow) else {
            return look().map(|stat| LeasedStat {
                stat,
                words: Vec::new(),
            });
        };
        let words: Words = before
            .iter()
            .map(|&ino| self.inode_lease_word(ino))
            .collect();
        let stat = look()?;
        let after = self.chain(fs, path, follow);
        let words = if after.as_deref() == Some(&before[..]) {
            words
        } else {
            Vec::new()
        };
        Ok(LeasedStat { stat, words })
    }

    /// The inodes a plain path leads through, its own last; `None` if it is not plain.
    fn chain(&self, fs: &Fs, path: &str, follow: bool) -> Option<Vec<u64>> {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let mut inos = vec![fs.lstat("/").ok()?.ino];
        let mut prefix = String::new();
        for (i, part) in parts.iter().enumerate() {
            if *part == "." || *part == ".." {
                return None;
            }
            prefix.push('/');
            prefix.push_str(part);
            let st = fs.lstat(&prefix).ok()?;
            if st.kind == FileKind::Symlink && (follow || i + 1 < parts.len()) {
                return None;
            }
            inos.push(st.ino);
        }
        Some(inos)
    }

    /// `fstat` of an open file with its inode's word (regular files only: a directory's link
    /// count changes with no word of its own raised).
    pub fn fstat(&self, file: &File) -> Result<LeasedStat> {
        let word = self.inode_lease_word(file.ino());
        let stat = file.stat()?;
        let words = if stat.kind == FileKind::File {
            vec![word]
        } else {
            Vec::new()
        };
        Ok(LeasedStat { stat, words })
    }

    /// A read, and with `whole_pool` the blocks around it as a data lease (none under the
    /// strict access-time policy: every read must reach the server).
    pub fn read(
        &self,
        fs: &Fs,
        file: &File,
        offset: u64,
        len: u32,
        whole_pool: bool,
    ) -> Result<(Payload, Option<DataLease>)> {
        let buf =
            super::descs::read_payload((len as usize).min(IO_MAX), |b| file.pread(b, offset))?;
        if !whole_pool || self.pool.is_none() || fs.atime_strict() {
            return Ok((buf, None));
        }
        // After the read, which may have raised the word by setting the access time.
        let inode = self.inode_lease_word(file.ino());
        let first = offset / BLOCK_SIZE / LEASE_BLOCKS * LEASE_BLOCKS;
        let mut gens = Vec::new();
        let lease = file.lease_blocks(first, LEASE_BLOCKS, &mut |l| {
            gens = l
                .segments
                .iter()
                .map(|&seg| {
                    if seg == ASK {
                        (0, 0)
                    } else {
                        let at = segment_word(INODE_SLOTS, SEGMENT_SLOTS, seg);
                        (at as u32, self.load(at))
                    }
                })
                .collect();
        })?;
        Ok((
            buf,
            Some(DataLease {
                inode,
                size: lease.size,
                first,
                blocks: lease
                    .blocks
                    .into_iter()
                    .zip(gens)
                    .map(|(a, (at, g))| (a, at, g))
                    .collect(),
            }),
        ))
    }
}
impl Drop for LeaseTable {
    fn drop(&mut self) {
        self.stop_liveness();
    }
}

impl Watcher for LeaseTable {
    fn segment_reused(&self, seg: u64) {
        self.raise(segment_word(INODE_SLOTS, SEGMENT_SLOTS, seg));
    }

    fn atime_touched(&self, ino: u64) {
        self.inode_changed(ino);
    }

    fn inode_freed(&self, ino: u64) {
        self.inode_changed(ino);
    }
}
