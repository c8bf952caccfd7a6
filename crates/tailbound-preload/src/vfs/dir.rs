//! A directory description's cursor: the listing `readdir` and `getdents64` walk, made on the
//! first read and dropped by a rewind.

use tailbound::tbfs::FileKind;

use crate::vfs::ofd::{lock, Ent, Ofd, VfsResult};

impl Ofd {
    fn entries(&self) -> VfsResult<Vec<Ent>> {
        let parent = match self.rel.rfind('/') {
            Some(i) => &self.rel[..i],
            None => "",
        };
        let parent_ino = if self.rel.is_empty() {
            self.ino
        } else {
            self.fs.stat(parent).map(|s| s.ino).unwrap_or(self.ino)
        };
        let mut out = vec![
            Ent {
                ino: self.ino,
                name: ".".into(),
                dtype: libc::DT_DIR,
            },
            Ent {
                ino: parent_ino,
                name: "..".into(),
                dtype: libc::DT_DIR,
            },
        ];
        for e in self.fs.readdir(&self.rel).map_err(|e| e.errno())? {
            out.push(Ent {
                ino: e.ino,
                name: e.name,
                dtype: match e.kind {
                    FileKind::Dir => libc::DT_DIR,
                    FileKind::File => libc::DT_REG,
                    FileKind::Symlink => libc::DT_LNK,
                    FileKind::Fifo => libc::DT_FIFO,
                    FileKind::CharDevice => libc::DT_CHR,
                    FileKind::BlockDevice => libc::DT_BLK,
                    FileKind::Socket => libc::DT_SOCK,
                },
            });
        }
        Ok(out)
    }

    /// The next entry of a directory descriptor and the position after it; `None` at the end.
    pub fn next_entry(&self) -> VfsResult<Option<(Ent, u64)>> {
        if !self.dir {
            return Err(libc::ENOTDIR);
        }
        let mut pos = lock(&self.pos);
        let mut listing = lock(&self.listing);
        if listing.is_none() {
            *listing = Some(self.entries()?);
        }
        let l = listing.as_ref().expect("filled above");
        match l.get(*pos as usize) {
            Some(e) => {
                *pos += 1;
                Ok(Some((e.clone(), *pos)))
            }
            None => Ok(None),
        }
    }

    /// Puts an entry back (it did not fit the caller's buffer).
    pub fn unread_entry(&self) {
        let mut pos = lock(&self.pos);
        *pos = pos.saturating_sub(1);
    }

    pub fn dir_tell(&self) -> u64 {
        *lock(&self.pos)
    }

    pub fn dir_seek(&self, at: u64) {
        *lock(&self.pos) = at;
        if at == 0 {
            *lock(&self.listing) = None;
        }
    }

    /// `getdents64`: packs `struct linux_dirent64` records into `buf`.
    pub fn getdents(&self, buf: &mut [u8]) -> VfsResult<usize> {
        let mut at = 0usize;
        while let Some((e, next)) = self.next_entry()? {
            let reclen = (19 + e.name.len() + 1).div_ceil(8) * 8;
            if at + reclen > buf.len() {
                self.unread_entry();
                if at == 0 {
                    return Err(libc::EINVAL);
                }
                break;
            }
            let rec = &mut buf[at..at + reclen];
            rec.fill(0);
            rec[0..8].copy_from_slice(&e.ino.to_ne_bytes());
            rec[8..16].copy_from_slice(&(next as i64).to_ne_bytes());
            rec[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
            rec[18] = e.dtype;
            rec[19..19 + e.name.len()].copy_from_slice(e.name.as_bytes());
            at += reclen;
        }
        Ok(at)
    }
}
