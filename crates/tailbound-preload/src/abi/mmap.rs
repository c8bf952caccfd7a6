//! Memory mappings of library files: a private mapping is a copy of the file's bytes in anonymous
//! memory; a shared one maps the memfd that backs every shared mapping of the inode (see
//! `vfs::maps`), written back on `msync`, `munmap` and `fsync`.

use std::sync::Arc;

use libc::{c_int, c_void, off_t, size_t};

use crate::abi::base::{count, eio_and, fail, int, lib_fd, shim, SHIM};
use crate::guard::enter;
use crate::real::{self, errno, set_errno};
use crate::vfs::Ofd;

hooks! {
    fn mmap64(
        addr: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: off_t,
    ) -> *mut c_void, or eio_and(libc::MAP_FAILED) => {
        if flags & libc::MAP_ANONYMOUS == 0 {
            if let Some((_g, o)) = lib_fd("mmap", fd) {
                // SAFETY: mmap64's caller asks for a mapping the kernel checks (address hint,
                // length, protection); only memory this call maps is written.
                return unsafe { map_library(&o, addr, len, prot, flags, off) };
            }
        }
        pass!()
    }

    fn mmap(
        addr: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: off_t,
    ) -> *mut c_void, or eio_and(libc::MAP_FAILED) => {
        // SAFETY: the program's own arguments, to the hook `mmap64` with the same contract.
        unsafe { mmap64(addr, len, prot, flags, fd, off) }
    }

    fn munmap(addr: *mut c_void, len: size_t) -> c_int => {
        let r = pass!();
        if r == 0 {
            if let Some(_g) = enter() {
                if let Some(s) = SHIM.get() {
                    if s.maps.is_mapped(addr as usize) {
                        count("munmap", true);
                        if let Err(e) = s.maps.munmap(addr as usize, len) {
                            return fail(e);
                        }
                    }
                }
            }
        }
        r
    }

    fn msync(addr: *mut c_void, len: size_t, fl: c_int) -> c_int => {
        let r = pass!();
        if r == 0 {
            if let Some(_g) = enter() {
                if let Some(s) = SHIM.get() {
                    if s.maps.is_mapped(addr as usize) {
                        count("msync", true);
                        return int(s.maps.msync(addr as usize, len));
                    }
                }
            }
        }
        r
    }
}

unsafe fn map_library(
    o: &Arc<Ofd>,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off_t,
) -> *mut c_void {
    let s = shim();
    let bad = |e: i32| {
        set_errno(e);
        libc::MAP_FAILED
    };
    if o.dir || o.acc == libc::O_PATH || o.acc == libc::O_WRONLY {
        return bad(libc::EACCES);
    }
    if off < 0 || len == 0 {
        return bad(libc::EINVAL);
    }
    let shared = flags & libc::MAP_SHARED != 0;
    if shared {
        if prot & libc::PROT_WRITE != 0 && o.acc != libc::O_RDWR {
            return bad(libc::EACCES);
        }
        let b = match s.maps.backing_for_map(o) {
            Ok(b) => b,
            Err(e) => return bad(e),
        };
        // SAFETY: mapping the memfd with the caller's arguments.
        let p = unsafe { real::mmap64(addr, len, prot, flags, b.memfd, off) };
        if p != libc::MAP_FAILED {
            s.maps.mapped(p as usize, len, b);
        }
        return p;
    }
    // A private mapping is a copy of the file's bytes in anonymous memory.
    let anon_flags = (flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping with the caller's address hint.
    let p = unsafe {
        real::mmap64(
            addr,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            anon_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return p;
    }
    // SAFETY: `p` is a fresh writable mapping of `len` bytes.
    let view = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
    let mut done = 0;
    while done < len {
        match s.pread(o, &mut view[done..], off as u64 + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) => {
                // SAFETY: our own mapping.
                unsafe { real::munmap(p, len) };
                return bad(e);
            }
        }
    }
    // SAFETY: our own mapping.
    if unsafe { libc::mprotect(p, len, prot) } != 0 {
        let e = errno();
        // SAFETY: our own mapping.
        unsafe { real::munmap(p, len) };
        return bad(e);
    }
    p
}
