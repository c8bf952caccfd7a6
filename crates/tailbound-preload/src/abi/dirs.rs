//! Directory streams (`opendir`, `readdir`, `scandir`...) and `getdents64`. A `DIR` of a library
//! directory is this module's own `LibDir`, told from glibc's by a registry of the pointers it
//! handed out.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, c_long, c_void, size_t, ssize_t};

use crate::abi::base::{count, eio_number, int, lib_path, shim, size, slice_mut};
use crate::guard::enter;
use crate::real::{errno, set_errno, DirCompare, DirFilter};

hooks! {
    fn opendir(path: *const c_char) -> *mut libc::DIR
        => (path "opendir", libc::AT_FDCWD, path, |loc| match loc.and_then(|l| {
            shim().open(&l, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)
        }) {
            Ok(fd) => new_lib_dir(fd),
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        });

    fn fdopendir(fd: c_int) -> *mut libc::DIR => (fd "fdopendir", fd, |o| {
        if !o.dir {
            set_errno(libc::ENOTDIR);
            return std::ptr::null_mut();
        }
        new_lib_dir(fd)
    });

    fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 => {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                count("readdir", true);
                return next_dirent(d, fd);
            }
        }
        pass!()
    }

    // `dirent` and `dirent64` have the same layout on 64-bit Linux.
    fn readdir(d: *mut libc::DIR) -> *mut libc::dirent64 => (same_as readdir64);

    fn readdir64_r(
        d: *mut libc::DIR,
        e: *mut libc::dirent64,
        r: *mut *mut libc::dirent64,
    ) -> c_int, or eio_number => {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                count("readdir_r", true);
                let saved = errno();
                set_errno(0);
                let p = next_dirent(d, fd);
                let err = errno();
                set_errno(saved);
                if p.is_null() {
                    // SAFETY: the caller's result pointer.
                    unsafe { *r = std::ptr::null_mut() };
                    return err;
                }
                // SAFETY: `e` is the caller's entry buffer; `p` our filled entry.
                unsafe {
                    std::ptr::copy_nonoverlapping(p, e, 1);
                    *r = e;
                }
                return 0;
            }
        }
        pass!()
    }

    fn readdir_r(
        d: *mut libc::DIR,
        e: *mut libc::dirent64,
        r: *mut *mut libc::dirent64,
    ) -> c_int, or eio_number => {
        // SAFETY: the program's own arguments, to the hook with the same contract: `dirent` and
        // `dirent64` have the same layout on 64-bit Linux.
        unsafe { readdir64_r(d, e, r) }
    }

    fn closedir(d: *mut libc::DIR) -> c_int => {
        if let Some(g) = enter() {
            if let Some(fd) = lib_dir(d) {
                count("closedir", true);
                DIRS.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                    .map(|s| s.remove(&(d as usize)));
                NDIRS.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: made by Box::into_raw in new_lib_dir, now unregistered.
                drop(unsafe { Box::from_raw(d as *mut LibDir) });
                let r = shim().close(fd).unwrap_or(Err(libc::EBADF));
                drop(g);
                return int(r);
            }
        }
        pass!()
    }

    fn dirfd(d: *mut libc::DIR) -> c_int => {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                return fd;
            }
        }
        pass!()
    }

    fn rewinddir(d: *mut libc::DIR) -> () => {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                if let Some(o) = shim().ofd(fd) {
                    o.dir_seek(0);
                }
                return;
            }
        }
        pass!()
    }

    fn telldir(d: *mut libc::DIR) -> c_long => {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                return shim().ofd(fd).map_or(-1, |o| o.dir_tell() as c_long);
            }
        }
        pass!()
    }

    fn seekdir(d: *mut libc::DIR, at: c_long) -> () => {
        if let Some(_g) = enter() {
            if let Some(fd) = lib_dir(d) {
                if let Some(o) = shim().ofd(fd) {
                    o.dir_seek(at.max(0) as u64);
                }
                return;
            }
        }
        pass!()
    }

    /// `scandir` reads with glibc-internal calls, so a library directory is listed here.
    fn scandir64(
        path: *const c_char,
        list: *mut *mut *mut libc::dirent64,
        filter: DirFilter,
        compar: DirCompare,
    ) -> c_int => {
        // SAFETY: scandir64's caller passes its path arguments NUL-terminated (or NULL); they are
        // only read.
        let lib = unsafe { lib_path("scandir", libc::AT_FDCWD, path) }.is_some();
        if !lib {
            return pass!();
        }
        // SAFETY: `path` is NUL-terminated, as scandir(3) requires; the DIR made is ours.
        let d = unsafe { opendir(path) };
        if d.is_null() {
            return -1;
        }
        let mut out: Vec<*mut libc::dirent64> = Vec::new();
        loop {
            // SAFETY: our DIR.
            let e = unsafe { readdir64(d) };
            if e.is_null() {
                break;
            }
            // SAFETY: `e` is our filled entry; `filter` is the caller's.
            if let Some(f) = filter {
                if unsafe { f(e) } == 0 {
                    continue;
                }
            }
            let size = std::mem::size_of::<libc::dirent64>();
            // SAFETY: a plain allocation the caller frees, filled with a copy of the entry.
            let copy = unsafe { libc::malloc(size) } as *mut libc::dirent64;
            if copy.is_null() {
                for p in out {
                    // SAFETY: allocated above.
                    unsafe { libc::free(p.cast()) };
                }
                // SAFETY: our DIR.
                unsafe { closedir(d) };
                set_errno(libc::ENOMEM);
                return -1;
            }
            // SAFETY: both are entries of `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(e, copy, 1) };
            out.push(copy);
        }
        // SAFETY: our DIR.
        unsafe { closedir(d) };
        let n = out.len();
        // SAFETY: an array of `n` pointers the caller frees.
        let arr = unsafe { libc::malloc(n.max(1) * std::mem::size_of::<*mut libc::dirent64>()) }
            as *mut *mut libc::dirent64;
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return -1;
        }
        // SAFETY: `arr` has room for `n` pointers.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), arr, n) };
        if let Some(c) = compar {
            // SAFETY: qsort over the caller's comparison, which takes pointers to entry pointers.
            unsafe {
                libc::qsort(
                    arr.cast(),
                    n,
                    std::mem::size_of::<*mut libc::dirent64>(),
                    Some(std::mem::transmute::<
                        unsafe extern "C" fn(
                            *mut *const libc::dirent64,
                            *mut *const libc::dirent64,
                        ) -> c_int,
                        unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
                    >(c)),
                )
            };
        }
        // SAFETY: the caller's result pointer.
        unsafe { *list = arr };
        n as c_int
    }

    // `dirent` and `dirent64` have the same layout on 64-bit Linux.
    fn scandir(
        path: *const c_char,
        list: *mut *mut *mut libc::dirent64,
        filter: DirFilter,
        compar: DirCompare,
    ) -> c_int => (same_as scandir64);

    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t => (fd "getdents64", fd, |o| {
        // SAFETY: getdents64's caller passes `buf` writable for `n` bytes.
        size(o.getdents(unsafe { slice_mut(buf, n) }))
    });
}

// ---- directories ----

/// A `DIR` handed out for a library directory: the descriptor and the entry `readdir` fills.
#[repr(C)]
struct LibDir {
    fd: c_int,
    ent: libc::dirent64,
}

static DIRS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

static NDIRS: AtomicUsize = AtomicUsize::new(0);

fn lib_dir(d: *mut libc::DIR) -> Option<c_int> {
    if NDIRS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
    if dirs.as_ref()?.contains(&(d as usize)) {
        // SAFETY: registered pointers are live LibDir boxes.
        Some(unsafe { (*(d as *mut LibDir)).fd })
    } else {
        None
    }
}

fn new_lib_dir(fd: c_int) -> *mut libc::DIR {
    // SAFETY: all-zero is a valid dirent64.
    let ent: libc::dirent64 = unsafe { std::mem::zeroed() };
    let p = Box::into_raw(Box::new(LibDir { fd, ent })) as usize;
    DIRS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(p);
    NDIRS.fetch_add(1, Ordering::AcqRel);
    p as *mut libc::DIR
}

/// Fills the `DIR`'s entry with the next one; null at the end (errno untouched) or on error.
fn next_dirent(d: *mut libc::DIR, fd: c_int) -> *mut libc::dirent64 {
    let s = shim();
    let Some(o) = s.ofd(fd) else {
        set_errno(libc::EBADF);
        return std::ptr::null_mut();
    };
    match o.next_entry() {
        Ok(Some((e, next))) => {
            // SAFETY: `d` is a live LibDir (checked by the caller).
            let ld = unsafe { &mut *(d as *mut LibDir) };
            ld.ent.d_ino = e.ino;
            ld.ent.d_off = next as i64;
            ld.ent.d_type = e.dtype;
            let name = e.name.as_bytes();
            let n = name.len().min(255);
            for (dst, &src) in ld.ent.d_name.iter_mut().zip(&name[..n]) {
                *dst = src as c_char;
            }
            ld.ent.d_name[n] = 0;
            ld.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
            &mut ld.ent
        }
        Ok(None) => std::ptr::null_mut(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}
