//! The client's side of the leases (`lease.rs`): stats kept while their words hold, and reads
//! of a memory pool's bytes through a read-only mapping under a data lease. Nothing here is
//! trusted beyond the words: every answer kept is given again only after its words are read
//! unchanged, and a read from the pool is kept only if its words are unchanged after the copy
//! (a seqlock); anything else crosses to the server, which grants a new lease with its answer.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use super::conn::{Conn, Transport};
use super::lease::{DataLease, LeasedStat, Words, LIVENESS_AT};
use super::lease_shm::{recv_on, Map, OWNER_DIED};
use super::protocol::{Reply, Request};
use crate::dev::BLOCK_SIZE;
use crate::tbfs::{Result, Stat, ASK};

/// Kept answers per kind beyond which the oldest are all dropped (a bound, not a policy).
const KEPT_MAX: usize = 16 << 10;

/// How often this client answered itself and how often it crossed to the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseCounters {
    pub stats_kept: u64,
    pub stats_asked: u64,
    pub reads_kept: u64,
    pub reads_asked: u64,
}

/// The table (and the pool) as this client maps them.
struct Tables {
    table: Map,
    pool: Option<Map>,
}

/// One session's leases, shared by its `Client` clones and open files.
pub(super) struct ClientLeases {
    off: AtomicBool,
    tables: OnceLock<Option<Tables>>,
    stats: [RwLock<HashMap<String, LeasedStat>>; 2],
    fstats: RwLock<HashMap<u64, LeasedStat>>,
    data: RwLock<HashMap<u64, Arc<DataLease>>>,
    counts: [AtomicU64; 4],
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

fn keep<K: std::hash::Hash + Eq, V>(map: &RwLock<HashMap<K, V>>, k: K, v: V) {
    let mut m = write(map);
    if m.len() >= KEPT_MAX {
        m.clear();
    }
    m.insert(k, v);
}

impl ClientLeases {
    /// `TAILBOUND_NO_LEASES=1` turns them off (every call crosses), to compare.
    pub fn new() -> ClientLeases {
        ClientLeases {
            off: AtomicBool::new(std::env::var_os("TAILBOUND_NO_LEASES").is_some_and(|v| v == "1")),
            tables: OnceLock::new(),
            stats: Default::default(),
            fstats: Default::default(),
            data: Default::default(),
            counts: Default::default(),
        }
    }

    pub fn counters(&self) -> LeaseCounters {
        let c = |i: usize| self.counts[i].load(Ordering::Relaxed);
        LeaseCounters {
            stats_kept: c(0),
            stats_asked: c(1),
            reads_kept: c(2),
            reads_asked: c(3),
        }
    }

    /// The data lease kept for inode `ino` (tests).
    #[cfg(test)]
    pub fn data_lease(&self, ino: u64) -> Option<Arc<DataLease>> {
        read(&self.data).get(&ino).cloned()
    }

    /// Leases used from now on or not (every call crosses).
    pub fn set_on(&self, on: bool) {
        self.off.store(!on, Ordering::Relaxed);
    }

    /// Drops every kept answer (the next call of each kind crosses).
    pub fn forget(&self) {
        for m in &self.stats {
            write(m).clear();
        }
        write(&self.fstats).clear();
        write(&self.data).clear();
    }

    fn count(&self, i: usize) {
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The tables, asked for once per session: only on the rings, where the socket carries
    /// nothing else and so can bring their descriptors.
    fn tables(&self, conn: &Conn) -> Option<&Tables> {
        if self.off.load(Ordering::Relaxed) {
            return None;
        }
        self.tables.get_or_init(|| Self::fetch(conn)).as_ref()
    }

    fn fetch(conn: &Conn) -> Option<Tables> {
        if conn.transport() != Transport::Ring {
            return None;
        }
        let fd = conn.socket_fd()?;
        let Ok(Reply::LeaseTable(info)) = conn.call(&Request::LeaseTable) else {
            return None;
        };
        let take = || -> Option<std::fs::File> {
            let (_, mut fds) = recv_on(fd).ok()??;
            (fds.len() == 1).then(|| std::fs::File::from(fds.remove(0)))
        };
        let table_file = take()?;
        let table = Map::read_only(
            &table_file,
            super::lease::table_bytes(info.inode_slots, info.segment_slots),
        )
        .ok()?;
        let pool = if info.pool_bytes > 0 {
            let f = take()?;
            usize::try_from(info.pool_bytes)
                .ok()
                .and_then(|len| Map::read_only(&f, len).ok())
        } else {
            None
        };
        Some(Tables { table, pool })
    }

    /// The server still holds the liveness word (it has not stopped or died).
    fn live(t: &Tables) -> bool {
        t.table
            .word32(LIVENESS_AT)
            .map(|w| w.load(Ordering::Acquire))
            .is_some_and(|v| v != 0 && v & OWNER_DIED == 0)
    }

    fn holds(t: &Tables, words: &Words) -> bool {
        !words.is_empty()
            && Self::live(t)
            && words.iter().all(|&(at, v)| {
                t.table
                    .word(at as usize)
                    .is_some_and(|w| w.load(Ordering::Acquire) == v)
            })
    }

    /// `stat` (`follow`) or `lstat` of `path`: kept, or asked with a lease.
    pub fn stat(&self, conn: &Conn, path: &str, follow: bool) -> Option<Result<Stat>> {
        let t = self.tables(conn)?;
        let kept = &self.stats[usize::from(follow)];
        if let Some(s) = read(kept).get(path).filter(|s| Self::holds(t, &s.words)) {
            self.count(0);
            return Some(Ok(s.stat));
        }
        self.count(1);
        let req = Request::StatLeased {
            path: path.into(),
            follow,
        };
        Some(match conn.call(&req) {
            Ok(Reply::LeasedStat(s)) => {
                let stat = s.stat;
                if !s.words.is_empty() {
                    keep(kept, path.to_string(), s);
                }
                Ok(stat)
            }
            Ok(other) => Err(conn.unexpected(&other)),
            Err(e) => Err(e),
        })
    }

    /// `fstat` of an open file: kept (by inode), or asked with a lease.
    pub fn fstat(&self, conn: &Conn, handle: u64, ino: u64) -> Option<Result<Stat>> {
        let t = self.tables(conn)?;
        if let Some(s) = read(&self.fstats)
            .get(&ino)
            .filter(|s| Self::holds(t, &s.words))
        {
            self.count(0);
            return Some(Ok(s.stat));
        }
        self.count(1);
        Some(match conn.call(&Request::FstatLeased { handle }) {
            Ok(Reply::LeasedStat(s)) => {
                let stat = s.stat;
                if !s.words.is_empty() && stat.ino == ino {
                    keep(&self.fstats, ino, s);
                }
                Ok(stat)
            }
            Ok(other) => Err(conn.unexpected(&other)),
            Err(e) => Err(e),
        })
    }

    /// An open's answer (`OpenedStat`): kept as an `fstat`'s would be, so the next `fstat` of
    /// the file is answered here while its words hold.
    pub fn opened(&self, ino: u64, s: LeasedStat) {
        if !self.off.load(Ordering::Relaxed) && !s.words.is_empty() && s.stat.ino == ino {
            keep(&self.fstats, ino, s);
        }
    }

    /// Reads up to `buf.len()` bytes at `offset` of the file open as `handle`: from the pool
    /// under the file's data lease, or (none, or revoked) from the server, which grants a new
    /// one. `None`: no leases in this session; the caller reads as before.
    pub fn pread(
        &self,
        conn: &Conn,
        handle: u64,
        ino: u64,
        buf: &mut [u8],
        offset: u64,
    ) -> Option<Result<usize>> {
        let t = self.tables(conn)?;
        let pool = t.pool.as_ref()?;
        let lease = read(&self.data).get(&ino).cloned();
        if let Some(n) = lease.and_then(|l| self.read_pool(t, pool, &l, buf, offset)) {
            self.count(2);
            return Some(Ok(n));
        }
        self.count(3);
        let want = buf.len().min(super::codec::IO_MAX);
        let req = Request::ReadLeased {
            handle,
            offset,
            len: want as u32,
        };
        Some(match conn.call_into(&req, &mut buf[..want]) {
            Ok((Reply::LeasedData { data, lease }, moved)) => {
                // Either the data came straight into the buffer, or it is in the reply.
                let n = match moved {
                    Some(n) => n,
                    None => {
                        let n = data.len().min(want);
                        buf[..n].copy_from_slice(&data[..n]);
                        n
                    }
                };
                match lease {
                    Some(l) => keep(&self.data, ino, Arc::new(l)),
                    None => {
                        write(&self.data).remove(&ino);
                    }
                }
                Ok(n)
            }
            Ok((other, _)) => Err(conn.unexpected(&other)),
            Err(e) => Err(e),
        })
    }

    /// The read from the pool, if the lease covers it and holds before and after the copy.
    fn read_pool(
        &self,
        t: &Tables,
        pool: &Map,
        l: &DataLease,
        buf: &mut [u8],
        offset: u64,
    ) -> Option<usize> {
        let inode = t.table.word(l.inode.0 as usize)?;
        if inode.load(Ordering::Acquire) != l.inode.1 || !Self::live(t) {
            return None;
        }
        if offset >= l.size {
            return Some(0);
        }
        let len = (buf.len() as u64).min(l.size - offset) as usize;
        let first = offset / BLOCK_SIZE;
        let end = (offset + len as u64).div_ceil(BLOCK_SIZE);
        let covered = l.first + l.blocks.len() as u64;
        if first < l.first || end > covered {
            return None;
        }
        let blocks = &l.blocks[(first - l.first) as usize..(end - l.first) as usize];
        let mut done = 0usize;
        for &(addr, word, gen) in blocks {
            let pos = offset + done as u64;
            let within = pos % BLOCK_SIZE;
            let n = ((BLOCK_SIZE - within) as usize).min(len - done);
            let out = &mut buf[done..done + n];
            match addr {
                ASK => return None,
                0 => out.fill(0),
                a => {
                    let w = t.table.word(word as usize)?;
                    if w.load(Ordering::Acquire) != gen
                        || !pool.copy(a.checked_mul(BLOCK_SIZE)? + within, out)
                    {
                        return None;
                    }
                }
            }
            done += n;
        }
        // The copies above before the words below: a segment written again meanwhile has
        // raised its word before its first byte changed.
        fence(Ordering::Acquire);
        let still = inode.load(Ordering::Relaxed) == l.inode.1
            && Self::live(t)
            && blocks.iter().all(|&(addr, word, gen)| {
                addr == 0
                    || t.table
                        .word(word as usize)
                        .is_some_and(|w| w.load(Ordering::Relaxed) == gen)
            });
        still.then_some(len)
    }
}
