//! A minimal synchronous io_uring: one request (or a linked write + fdatasync pair) submitted and
//! waited for at a time, for the file backend's commit path.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use io_uring::{opcode, squeue, types, IoUring};

/// A small ring used by one thread at a time (callers hold it behind a mutex).
pub struct Ring {
    ring: IoUring,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ring")
    }
}

fn result(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}

impl Ring {
    /// Sets up a ring; fails where io_uring is missing or forbidden (ENOSYS, EPERM, seccomp).
    pub fn new() -> io::Result<Ring> {
        Ok(Ring {
            ring: IoUring::new(8)?,
        })
    }

    /// Submits `entries` and waits for all of their completions; returns their results in order.
    fn run(&mut self, entries: &[squeue::Entry]) -> io::Result<Vec<i32>> {
        {
            let mut sq = self.ring.submission();
            for e in entries {
                // SAFETY: every buffer an entry points to is borrowed by the caller for the whole
                // call, and this call waits for every completion before returning.
                unsafe { sq.push(e) }
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
        let mut results = vec![i32::MIN; entries.len()];
        let mut done = 0;
        while done < entries.len() {
            match self.ring.submit_and_wait(entries.len() - done) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for cqe in self.ring.completion() {
                let i = cqe.user_data() as usize;
                if i < results.len() && results[i] == i32::MIN {
                    results[i] = cqe.result();
                    done += 1;
                }
            }
        }
        Ok(results)
    }

    /// One `pwrite`; may be short.
    pub fn write_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
        let e = opcode::Write::new(types::Fd(file.as_raw_fd()), buf.as_ptr(), buf.len() as u32)
            .offset(offset)
            .build()
            .user_data(0);
        result(self.run(&[e])?[0])
    }

    /// `fdatasync`.
    pub fn fdatasync(&mut self, file: &File) -> io::Result<()> {
        let e = opcode::Fsync::new(types::Fd(file.as_raw_fd()))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(0);
        result(self.run(&[e])?[0]).map(|_| ())
    }

    /// A write linked to an `fdatasync` that runs only if the write completed in full. Returns the
    /// bytes written and whether the sync ran and succeeded.
    pub fn write_then_fdatasync(
        &mut self,
        file: &File,
        buf: &[u8],
        offset: u64,
    ) -> io::Result<(usize, bool)> {
        let fd = types::Fd(file.as_raw_fd());
        let w = opcode::Write::new(fd, buf.as_ptr(), buf.len() as u32)
            .offset(offset)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(0);
        let s = opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(1);
        let r = self.run(&[w, s])?;
        let written = result(r[0])?;
        Ok((written, r[1] >= 0 && written == buf.len()))
    }
}
