//! Running a program stored in a mount. The kernel runs only a file it can open, so `exec` and
//! `posix_spawn` of a library path get a kernel copy of the image: a memfd holding the file's
//! bytes, named to the exec as `/proc/self/fd/N`. The memfd is not close-on-exec, since a
//! script's interpreter opens that path after the exec.

use std::ffi::CString;

use crate::real;
use crate::vfs::ofd::{VfsResult, Where};
use crate::vfs::Shim;

/// Bytes copied per read of the image.
const CHUNK: usize = 1 << 20;

/// A kernel copy of a program image; closed when dropped (after an exec that failed, or by a
/// spawning parent once the child has it).
pub struct ExecImage {
    fd: i32,
    path: CString,
}

impl ExecImage {
    /// The path to give the exec instead of the library path.
    pub fn path(&self) -> &CString {
        &self.path
    }
}

impl Drop for ExecImage {
    fn drop(&mut self) {
        real::release_fd(self.fd);
    }
}

impl Shim {
    /// For an exec of `path` (relative to the working directory): a kernel copy when it names a
    /// file in a mount, `None` when the kernel should resolve it itself. Refused with `EACCES`
    /// unless it is a regular file with an execute bit, as the kernel refuses.
    pub fn exec_image(&self, path: &[u8]) -> Option<VfsResult<ExecImage>> {
        let loc = match self.resolve(libc::AT_FDCWD, path) {
            Where::Kernel => return None,
            Where::Refused(e) => return Some(Err(e)),
            Where::Lib(loc) => loc,
        };
        Some(self.copy_image(&loc))
    }

    fn copy_image(&self, loc: &crate::vfs::LibPath) -> VfsResult<ExecImage> {
        let attr = self.stat(loc)?;
        if attr.mode & libc::S_IFMT != libc::S_IFREG || attr.mode & 0o111 == 0 {
            return Err(libc::EACCES);
        }
        let lib_fd = self.open(loc, libc::O_RDONLY | libc::O_CLOEXEC, 0)?;
        let copied = self.copy_into_memfd(lib_fd);
        if let Some(r) = self.close(lib_fd) {
            r?;
        }
        let fd = copied?;
        let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EINVAL)?;
        Ok(ExecImage { fd, path })
    }

    fn copy_into_memfd(&self, lib_fd: i32) -> VfsResult<i32> {
        let o = self.ofd(lib_fd).ok_or(libc::EBADF)?;
        let fd = real::memfd_inheritable(c"tailbound-exec")?;
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        loop {
            let n = match self.pread(&o, &mut buf, off) {
                Ok(n) => n,
                Err(e) => {
                    real::release_fd(fd);
                    return Err(e);
                }
            };
            if n == 0 {
                return Ok(fd);
            }
            if let Err(e) = real::kernel_pwrite(fd, &buf[..n], off) {
                real::release_fd(fd);
                return Err(e);
            }
            off += n as u64;
        }
    }
}
