//! A session's calls on an inode whose memory clients share (`shmem`): answered from that
//! memory, so a process that reads, writes or sizes the file with calls sees what another
//! stored through its mapping, and the other way round. Handle and path calls that carry data
//! or the size; everything else is the pool's as usual.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Session;
use crate::serve::codec::IO_MAX;
use crate::serve::descs::{read_reply, Desc, STATUS_APPEND};
use crate::serve::observe::Change;
use crate::serve::protocol::{Reply, Request};
use crate::serve::shmem::SharedFile;
use crate::tbfs::{Error, Result};

impl Session<'_> {
    /// The reply from shared memory, or `None` when `req` is not about an inode that has it.
    pub(super) fn through_shared_memory(&self, req: &Request) -> Result<Option<Reply>> {
        use Request as R;
        let shmem = &self.shared.shmem;
        if !shmem.any() {
            return Ok(None);
        }
        let of = |handle: &u64| -> Option<(Arc<Desc>, Arc<SharedFile>)> {
            let d = self.desc(*handle).ok()?;
            let sf = shmem.get(d.file.ino())?;
            Some((d, sf))
        };
        Ok(Some(match req {
            // Stores through a mapping reach the memory, not the pool, and raise no word: no
            // lease while the inode has shared memory.
            R::Read {
                handle,
                offset,
                len,
            }
            | R::ReadLeased {
                handle,
                offset,
                len,
            } => {
                let Some((_, sf)) = of(handle) else {
                    return Ok(None);
                };
                let data = read_reply((*len as usize).min(IO_MAX), |buf| sf.read(buf, *offset))?;
                match req {
                    R::ReadLeased { .. } => Reply::LeasedData {
                        data: data.into(),
                        lease: None,
                    },
                    _ => Reply::Data(data),
                }
            }
            R::ReadOn { handle, len } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let mut pos = d.pos();
                let buf = read_reply((*len as usize).min(IO_MAX), |buf| sf.read(buf, *pos))?;
                *pos += buf.len() as u64;
                Reply::Data(buf)
            }
            R::Write {
                handle,
                offset,
                data,
            } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let n = sf.write(data, *offset)?;
                self.wrote(&d, *offset, data);
                Reply::Number(n as u64)
            }
            R::Append { handle, data } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let _one = sf.appending.lock().unwrap_or_else(|p| p.into_inner());
                let at = sf.size()?;
                sf.write(data, at)?;
                self.wrote(&d, at, data);
                Reply::Number(at + data.len() as u64)
            }
            R::WriteOn { handle, data } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let mut pos = d.pos();
                let at = if d.status.load(Ordering::Relaxed) & STATUS_APPEND != 0 {
                    let _one = sf.appending.lock().unwrap_or_else(|p| p.into_inner());
                    let at = sf.size()?;
                    sf.write(data, at)?;
                    at
                } else {
                    sf.write(data, *pos)?;
                    *pos
                };
                *pos = at + data.len() as u64;
                drop(pos);
                self.wrote(&d, at, data);
                Reply::Number(at)
            }
            R::Seek {
                handle,
                offset,
                whence: 2,
            } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let mut pos = d.pos();
                let size = sf.size()? as i64;
                let target = size
                    .checked_add(*offset)
                    .filter(|t| *t >= 0)
                    .ok_or_else(|| Error::Invalid(format!("seek to {size}{offset:+}")))?;
                *pos = target as u64;
                Reply::Number(target as u64)
            }
            R::SetLen { handle, len } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                sf.set_len(*len)?;
                self.changed(&Change::Inode { ino: d.file.ino() });
                Reply::Done
            }
            R::Allocate {
                handle,
                offset,
                len,
            } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let end = offset.saturating_add(*len);
                if end > sf.size()? {
                    sf.set_len(end)?;
                    self.changed(&Change::Inode { ino: d.file.ino() });
                }
                Reply::Done
            }
            R::Fstat { handle } | R::FstatLeased { handle } => {
                let Some((d, sf)) = of(handle) else {
                    return Ok(None);
                };
                let mut st = d.file.stat()?;
                st.size = sf.size()?;
                unleased_stat(req, st)
            }
            R::Stat { path, follow } | R::StatLeased { path, follow } => {
                let st = if *follow {
                    self.fs.stat(path)
                } else {
                    self.fs.lstat(path)
                };
                let Some((mut st, sf)) = st.ok().and_then(|st| Some((st, shmem.get(st.ino)?)))
                else {
                    return Ok(None);
                };
                st.size = sf.size()?;
                unleased_stat(req, st)
            }
            R::Truncate { path, len } => {
                let Some((ino, sf)) = self
                    .fs
                    .stat(path)
                    .ok()
                    .and_then(|st| Some((st.ino, shmem.get(st.ino)?)))
                else {
                    return Ok(None);
                };
                sf.set_len(*len)?;
                self.changed(&Change::Inode { ino });
                Reply::Done
            }
            _ => return Ok(None),
        }))
    }

    fn wrote(&self, d: &Desc, offset: u64, data: &[u8]) {
        self.changed(&Change::Written {
            ino: d.file.ino(),
            offset,
            data,
        });
    }
}

/// A stat answered from shared memory: as asked, with no words for a leased one (the client
/// keeps nothing of it).
fn unleased_stat(req: &Request, stat: crate::tbfs::Stat) -> Reply {
    match req {
        Request::StatLeased { .. } | Request::FstatLeased { .. } => {
            Reply::LeasedStat(crate::serve::lease::LeasedStat {
                stat,
                words: Vec::new(),
            })
        }
        _ => Reply::Stat(stat),
    }
}
