//! `DIR/.snapshots/NAME/…`: each snapshot of the pool as a read-only tree, by the snapshot's name
//! (its checkpoint number when it has none).
//!
//! `.snapshots` is not listed in the root (so `find`, `du` and `tar` of the mount do not walk every
//! snapshot), but it is there when named. A snapshot's inodes get inode numbers of their own: the
//! view's slot and the inode's number in the checkpoint. A view, once looked up, stays open (and
//! its checkpoint retained) while the pool is mounted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fuser::Errno;
use tailbound::tbfs::{self, Fs, Snapshot, Stat};

/// The name of the snapshots directory in the root.
pub const NAME: &str = ".snapshots";
/// The snapshots directory's inode number, above every live one.
pub const DIR_INO: u64 = 1 << 62;
/// Set in the inode number of every inode of a view.
const VIEW_BIT: u64 = 1 << 63;
/// Bits of a view's inode number that hold the inode's number in its checkpoint.
const INO_BITS: u32 = 40;

/// What a FUSE inode number names.
pub enum Place {
    Live(u64),
    Dir,
    /// A view, and the inode's number in it.
    View(Arc<Snapshot>, u64),
}

#[derive(Default)]
pub struct Views {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Checkpoint number → slot.
    slots: HashMap<u64, u64>,
    /// By slot.
    views: Vec<Arc<Snapshot>>,
}

fn errno(e: &tbfs::Error) -> Errno {
    Errno::from_i32(e.errno())
}

impl Views {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn place(&self, ino: u64) -> Result<Place, Errno> {
        if ino < DIR_INO {
            return Ok(Place::Live(ino));
        }
        if ino == DIR_INO {
            return Ok(Place::Dir);
        }
        let slot = ((ino & !VIEW_BIT) >> INO_BITS) as usize;
        let inner = ino & ((1 << INO_BITS) - 1);
        match self.table().views.get(slot) {
            Some(v) if ino & VIEW_BIT != 0 => Ok(Place::View(v.clone(), inner)),
            _ => Err(Errno::ENOENT),
        }
    }

    /// A view's inode number as the mount shows it.
    pub fn outer_ino(&self, view: &Snapshot, ino: u64) -> Result<u64, Errno> {
        if ino >= 1 << INO_BITS {
            return Err(Errno::from_i32(libc::EOVERFLOW));
        }
        let slot = self
            .table()
            .slots
            .get(&view.number())
            .copied()
            .ok_or(Errno::ENOENT)?;
        Ok(ino | VIEW_BIT | (slot << INO_BITS))
    }

    /// A view's stat with its inode number as the mount shows it.
    /// Without write permission: the kernel opens files without asking the server (no-open), so
    /// its permission check is what refuses a writer other than root at open.
    pub fn outer(&self, view: &Snapshot, mut st: Stat) -> Result<Stat, Errno> {
        st.ino = self.outer_ino(view, st.ino)?;
        st.mode &= !0o222;
        Ok(st)
    }

    /// The snapshots directory's attributes: the root's owner and times, read-only.
    pub fn dir_stat(&self, fs: &Fs) -> Result<Stat, Errno> {
        let mut st = fs.stat_ino(tbfs::by_ino::ROOT).map_err(|e| errno(&e))?;
        st.ino = DIR_INO;
        st.mode = 0o555;
        st.nlink = 2;
        st.size = 0;
        st.blocks = 0;
        Ok(st)
    }

    /// Every snapshot as `(name, checkpoint number)`, oldest first.
    pub fn list(&self, fs: &Fs) -> Result<Vec<(String, u64)>, Errno> {
        let all = fs.checkpoints().map_err(|e| errno(&e))?;
        Ok(all
            .into_iter()
            .filter(|c| c.snapshot)
            .map(|c| {
                let name = c
                    .name
                    .filter(|n| !n.contains('/') && n != "." && n != "..")
                    .unwrap_or_else(|| c.number.to_string());
                (name, c.number)
            })
            .collect())
    }

    /// The root of the snapshot named `name`, opening its view.
    pub fn root(&self, fs: &Fs, name: &str) -> Result<Stat, Errno> {
        let number = self
            .list(fs)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, number)| number)
            .ok_or(Errno::ENOENT)?;
        let view = self.open(fs, number)?;
        let st = view.stat_ino(tbfs::by_ino::ROOT).map_err(|e| errno(&e))?;
        self.outer(&view, st)
    }

    pub fn open(&self, fs: &Fs, number: u64) -> Result<Arc<Snapshot>, Errno> {
        {
            let t = self.table();
            if let Some(&slot) = t.slots.get(&number) {
                return Ok(t.views[slot as usize].clone());
            }
        }
        let view = Arc::new(fs.at(number).map_err(|e| errno(&e))?);
        let mut t = self.table();
        if let Some(&slot) = t.slots.get(&number) {
            return Ok(t.views[slot as usize].clone());
        }
        let slot = t.views.len() as u64;
        if slot >= 1 << (63 - INO_BITS - 1) {
            return Err(Errno::from_i32(libc::EMFILE));
        }
        t.views.push(view.clone());
        t.slots.insert(number, slot);
        Ok(view)
    }
}
