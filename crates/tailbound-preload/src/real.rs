//! The real libc functions behind every interposed symbol, found with `dlsym(RTLD_NEXT, name)` on
//! first use, and a few safe wrappers the rest of the shim uses for its own kernel calls.
//!
//! A symbol this libc does not have (an older glibc without `statx` or `close_range`) makes the
//! call fail with `ENOSYS` instead of crashing.
//!
//! Layer: above [`crate::guard`] only (each call lets the thread's system calls through in the
//! catch-all mode); everything else in the shim calls the kernel through here.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_char, c_int, c_long, c_uint, c_void, mode_t, off_t, size_t, ssize_t};

use crate::guard;

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid and aligned for
    // as long as the thread lives.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: as in `errno`: the thread's own slot.
    unsafe { *libc::__errno_location() = e };
}

thread_local! {
    /// Pages this thread found mapped lately ([`readable_cstr`]), round robin.
    static MAPPED: std::cell::Cell<([usize; 16], usize)> =
        const { std::cell::Cell::new(([usize::MAX; 16], 0)) };
}

/// Whether the page at `page` (page-aligned) can be read: the thread's recent answers first,
/// then a one-byte `process_vm_readv(2)` from it into this process, which the kernel answers
/// with `EFAULT` for an unmapped page and for one the program made unreadable (`PROT_NONE`),
/// without a fault. Where that call is refused (a seccomp filter), `mincore(2)` says whether
/// the page is mapped at least.
fn page_mapped(page: usize, page_size: usize) -> bool {
    let (mut seen, next) = MAPPED.with(|m| m.get());
    if seen.contains(&page) {
        return true;
    }
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: page as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: the kernel writes at most one byte, into `byte`, and reads `page` through the
    // process's own page tables, answering EFAULT instead of faulting.
    let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    let readable = if r == 1 {
        true
    } else if errno() == libc::EFAULT {
        false
    } else {
        let mut vec = [0u8; 1];
        // SAFETY: `mincore` only inspects the range's mapping and writes one byte per page
        // into `vec`, which holds one: the range is exactly one page.
        (unsafe { libc::mincore(page as *mut c_void, page_size, vec.as_mut_ptr()) }) == 0
    };
    if readable {
        seen[next] = page;
        MAPPED.with(|m| m.set((seen, (next + 1) % seen.len())));
    }
    readable
}

/// Whether a C string argument can be read: non-null, and every page up to its NUL readable. A
/// program that passes a pointer to nowhere or to a `PROT_NONE` page gets the kernel's `EFAULT`
/// (its call is passed through) rather than a fault inside the shim. A page this thread read
/// lately and the program unmapped or protected since is not noticed.
pub fn readable_cstr(p: *const c_char) -> bool {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let mut page_size = PAGE.load(Ordering::Relaxed);
    if page_size == 0 {
        // SAFETY: sysconf has no preconditions.
        page_size = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize;
        PAGE.store(page_size, Ordering::Relaxed);
    }
    if p.is_null() {
        return false;
    }
    let mut at = p as usize;
    loop {
        let page = at & !(page_size - 1);
        if !page_mapped(page, page_size) {
            return false;
        }
        let left = page + page_size - at;
        // SAFETY: `[at, at + left)` lies in one page that `page_mapped` found mapped.
        let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, left) };
        if bytes.contains(&0) {
            return true;
        }
        at = page + page_size;
    }
}

/// `scandir`'s filter, as `<dirent.h>` declares it.
pub type DirFilter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
/// `scandir`'s comparison, as `<dirent.h>` declares it.
pub type DirCompare =
    Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;

/// Looks a symbol up in the libraries after this one; 0 if there is none.
fn lookup(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated literal; dlsym with RTLD_NEXT only reads it.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

/// The failure value of a C return type.
pub trait Fail {
    fn fail() -> Self;
}
macro_rules! fail_as_minus_one {
    ($($t:ty),*) => { $(impl Fail for $t { fn fail() -> $t { -1 as _ } })* };
}
fail_as_minus_one!(i32, i64, isize, u32);
impl Fail for () {
    fn fail() {}
}

fn missing<R: Fail>() -> R {
    set_errno(libc::ENOSYS);
    R::fail()
}

macro_rules! real {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty ; )*) => { $(
        /// The libc function of the same name.
        ///
        /// # Safety
        /// The same contract as the libc function.
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = lookup(&SLOT, concat!(stringify!($name), "\0").as_bytes());
            if p == 0 {
                return missing();
            }
            // SAFETY: `p` is libc's own definition of this symbol, whose C prototype is the one
            // written here.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(p) };
            // The hooks call libc only for what is the kernel's: in the catch-all mode its system
            // calls need not trap to be checked again.
            let prev = guard::allow();
            // SAFETY: the caller keeps the libc function's contract.
            let r = unsafe { f($($arg),*) };
            guard::restore(prev);
            r
        }
    )* };
}

/// Pointer results report a missing symbol as NULL.
macro_rules! real_ptr {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty ; )*) => { $(
        /// The libc function of the same name.
        ///
        /// # Safety
        /// The same contract as the libc function.
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = lookup(&SLOT, concat!(stringify!($name), "\0").as_bytes());
            if p == 0 {
                set_errno(libc::ENOSYS);
                return std::ptr::null_mut();
            }
            // SAFETY: as in `real!`.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(p) };
            let prev = guard::allow();
            // SAFETY: the caller keeps the libc function's contract.
            let r = unsafe { f($($arg),*) };
            guard::restore(prev);
            r
        }
    )* };
}

pub type Stat = libc::stat64;

real! {
    fn close(fd: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn preadv64(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t;
    fn pwritev64(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t;
    fn preadv64v2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t;
    fn pwritev64v2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, fl: c_int) -> ssize_t;
    fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t;
    fn fstat64(fd: c_int, st: *mut Stat) -> c_int;
    fn stat64(path: *const c_char, st: *mut Stat) -> c_int;
    fn lstat64(path: *const c_char, st: *mut Stat) -> c_int;
    fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut Stat, flags: c_int) -> c_int;
    fn __fxstat64(ver: c_int, fd: c_int, st: *mut Stat) -> c_int;
    fn __xstat64(ver: c_int, path: *const c_char, st: *mut Stat) -> c_int;
    fn __lxstat64(ver: c_int, path: *const c_char, st: *mut Stat) -> c_int;
    fn __fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, st: *mut Stat, fl: c_int) -> c_int;
    fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, st: *mut libc::statx) -> c_int;
    fn access(path: *const c_char, mode: c_int) -> c_int;
    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    fn euidaccess(path: *const c_char, mode: c_int) -> c_int;
    fn mkdir(path: *const c_char, mode: mode_t) -> c_int;
    fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int;
    fn rmdir(path: *const c_char) -> c_int;
    fn unlink(path: *const c_char) -> c_int;
    fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn remove(path: *const c_char) -> c_int;
    fn rename(a: *const c_char, b: *const c_char) -> c_int;
    fn renameat(da: c_int, a: *const c_char, db: c_int, b: *const c_char) -> c_int;
    fn renameat2(da: c_int, a: *const c_char, db: c_int, b: *const c_char, fl: c_uint) -> c_int;
    fn closedir(d: *mut libc::DIR) -> c_int;
    fn dirfd(d: *mut libc::DIR) -> c_int;
    fn rewinddir(d: *mut libc::DIR) -> ();
    fn seekdir(d: *mut libc::DIR, loc: c_long) -> ();
    fn telldir(d: *mut libc::DIR) -> c_long;
    fn readdir_r(d: *mut libc::DIR, e: *mut libc::dirent, r: *mut *mut libc::dirent) -> c_int;
    fn readdir64_r(d: *mut libc::DIR, e: *mut libc::dirent64, r: *mut *mut libc::dirent64) -> c_int;
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn scandir64(
        p: *const c_char,
        list: *mut *mut *mut libc::dirent64,
        filter: DirFilter,
        compar: DirCompare
    ) -> c_int;
    fn fsync(fd: c_int) -> c_int;
    fn fdatasync(fd: c_int) -> c_int;
    fn syncfs(fd: c_int) -> c_int;
    fn sync_file_range(fd: c_int, off: off_t, n: off_t, fl: c_uint) -> c_int;
    fn ftruncate64(fd: c_int, len: off_t) -> c_int;
    fn truncate64(path: *const c_char, len: off_t) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(a: c_int, b: c_int) -> c_int;
    fn dup3(a: c_int, b: c_int, fl: c_int) -> c_int;
    fn chdir(path: *const c_char) -> c_int;
    fn fchdir(fd: c_int) -> c_int;
    fn utimensat(dirfd: c_int, path: *const c_char, t: *const libc::timespec, fl: c_int) -> c_int;
    fn futimens(fd: c_int, t: *const libc::timespec) -> c_int;
    fn utimes(path: *const c_char, t: *const libc::timeval) -> c_int;
    fn lutimes(path: *const c_char, t: *const libc::timeval) -> c_int;
    fn futimes(fd: c_int, t: *const libc::timeval) -> c_int;
    fn futimesat(dirfd: c_int, path: *const c_char, t: *const libc::timeval) -> c_int;
    fn utime(path: *const c_char, t: *const libc::utimbuf) -> c_int;
    fn chmod(path: *const c_char, mode: mode_t) -> c_int;
    fn fchmod(fd: c_int, mode: mode_t) -> c_int;
    fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, fl: c_int) -> c_int;
    fn chown(path: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int;
    fn lchown(path: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int;
    fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int;
    fn fchownat(dirfd: c_int, path: *const c_char, u: libc::uid_t, g: libc::gid_t, fl: c_int) -> c_int;
    fn symlink(target: *const c_char, path: *const c_char) -> c_int;
    fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int;
    fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn link(a: *const c_char, b: *const c_char) -> c_int;
    fn linkat(da: c_int, a: *const c_char, db: c_int, b: *const c_char, fl: c_int) -> c_int;
    fn statfs64(path: *const c_char, st: *mut libc::statfs64) -> c_int;
    fn fstatfs64(fd: c_int, st: *mut libc::statfs64) -> c_int;
    fn statvfs64(path: *const c_char, st: *mut libc::statvfs64) -> c_int;
    fn fstatvfs64(fd: c_int, st: *mut libc::statvfs64) -> c_int;
    fn flock(fd: c_int, op: c_int) -> c_int;
    fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int;
    fn munmap(addr: *mut c_void, len: size_t) -> c_int;
    fn msync(addr: *mut c_void, len: size_t, fl: c_int) -> c_int;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
    fn copy_file_range(a: c_int, ao: *mut off_t, b: c_int, bo: *mut off_t, n: size_t, fl: c_uint) -> ssize_t;
    fn splice(a: c_int, ao: *mut off_t, b: c_int, bo: *mut off_t, n: size_t, fl: c_uint) -> ssize_t;
    fn fallocate64(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int;
    fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int;
    fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int;
    fn isatty(fd: c_int) -> c_int;
    fn close_range(first: c_uint, last: c_uint, fl: c_int) -> c_int;
    fn closefrom(low: c_int) -> ();
    fn umask(mask: mode_t) -> mode_t;
    fn mkstemp(t: *mut c_char) -> c_int;
    fn mkostemp(t: *mut c_char, fl: c_int) -> c_int;
    fn mkstemps(t: *mut c_char, n: c_int) -> c_int;
    fn mkostemps(t: *mut c_char, n: c_int, fl: c_int) -> c_int;
    fn getxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fn lgetxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fn fgetxattr(fd: c_int, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t;
    fn setxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    fn lsetxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    fn fsetxattr(fd: c_int, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int;
    fn listxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t;
    fn llistxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t;
    fn flistxattr(fd: c_int, l: *mut c_char, s: size_t) -> ssize_t;
    fn removexattr(p: *const c_char, n: *const c_char) -> c_int;
    fn lremovexattr(p: *const c_char, n: *const c_char) -> c_int;
    fn fremovexattr(fd: c_int, n: *const c_char) -> c_int;
    fn mknod(p: *const c_char, m: mode_t, d: libc::dev_t) -> c_int;
    fn mknodat(dirfd: c_int, p: *const c_char, m: mode_t, d: libc::dev_t) -> c_int;
    fn mkfifo(p: *const c_char, m: mode_t) -> c_int;
    fn mkfifoat(dirfd: c_int, p: *const c_char, m: mode_t) -> c_int;
    fn bind(fd: c_int, a: *const libc::sockaddr, n: libc::socklen_t) -> c_int;
    fn connect(fd: c_int, a: *const libc::sockaddr, n: libc::socklen_t) -> c_int;
    fn pathconf(p: *const c_char, name: c_int) -> c_long;
    fn fpathconf(fd: c_int, name: c_int) -> c_long;
    fn execve(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int;
    fn execv(p: *const c_char, a: *const *const c_char) -> c_int;
    fn execvp(p: *const c_char, a: *const *const c_char) -> c_int;
    fn execvpe(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int;
    fn fexecve(fd: c_int, a: *const *const c_char, e: *const *const c_char) -> c_int;
    fn fork() -> libc::pid_t;
    fn system(cmd: *const c_char) -> c_int;
    fn pclose(f: *mut libc::FILE) -> c_int;
    fn posix_spawn(pid: *mut libc::pid_t, p: *const c_char, fa: *const libc::posix_spawn_file_actions_t, at: *const libc::posix_spawnattr_t, a: *const *mut c_char, e: *const *mut c_char) -> c_int;
    fn posix_spawnp(pid: *mut libc::pid_t, p: *const c_char, fa: *const libc::posix_spawn_file_actions_t, at: *const libc::posix_spawnattr_t, a: *const *mut c_char, e: *const *mut c_char) -> c_int;
    fn posix_spawn_file_actions_adddup2(fa: *mut libc::posix_spawn_file_actions_t, fd: c_int, to: c_int) -> c_int;
    fn posix_spawn_file_actions_init(fa: *mut libc::posix_spawn_file_actions_t) -> c_int;
    fn posix_spawn_file_actions_destroy(fa: *mut libc::posix_spawn_file_actions_t) -> c_int;
    fn _exit(code: c_int) -> ();
    fn pthread_create(t: *mut libc::pthread_t, attr: *const libc::pthread_attr_t, f: extern "C" fn(*mut c_void) -> *mut c_void, arg: *mut c_void) -> c_int;
    fn fileno(f: *mut libc::FILE) -> c_int;
    fn fileno_unlocked(f: *mut libc::FILE) -> c_int;
    fn _Exit(code: c_int) -> ();
}

real_ptr! {
    fn opendir(path: *const c_char) -> *mut libc::DIR;
    fn fdopendir(fd: c_int) -> *mut libc::DIR;
    fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64;
    fn readdir(d: *mut libc::DIR) -> *mut libc::dirent;
    fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char;
    fn get_current_dir_name() -> *mut c_char;
    fn getwd(buf: *mut c_char) -> *mut c_char;
    fn mmap64(a: *mut c_void, n: size_t, prot: c_int, fl: c_int, fd: c_int, off: off_t) -> *mut c_void;
    fn realpath(p: *const c_char, out: *mut c_char) -> *mut c_char;
    fn canonicalize_file_name(p: *const c_char) -> *mut c_char;
    fn tmpfile() -> *mut libc::FILE;
    fn fopen(p: *const c_char, m: *const c_char) -> *mut libc::FILE;
    fn fopen64(p: *const c_char, m: *const c_char) -> *mut libc::FILE;
    fn fdopen(fd: c_int, m: *const c_char) -> *mut libc::FILE;
    fn popen(cmd: *const c_char, m: *const c_char) -> *mut libc::FILE;
    fn freopen(p: *const c_char, m: *const c_char, f: *mut libc::FILE) -> *mut libc::FILE;
    fn freopen64(p: *const c_char, m: *const c_char, f: *mut libc::FILE) -> *mut libc::FILE;
    fn tmpfile64() -> *mut libc::FILE;
    fn mkdtemp(t: *mut c_char) -> *mut c_char;
}

// ---- the variadic ones, declared as such ----

/// `openat(2)` through libc.
///
/// # Safety
/// `path` is a NUL-terminated string.
pub unsafe fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, b"openat64\0");
    if p == 0 {
        return missing();
    }
    // SAFETY: libc's openat64, declared variadic as in <fcntl.h>.
    let f: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int =
        unsafe { std::mem::transmute(p) };
    let prev = guard::allow();
    // SAFETY: the caller's contract.
    let r = unsafe { f(dirfd, path, flags, mode) };
    guard::restore(prev);
    r
}

/// `fcntl(2)` through libc, its third argument passed pointer-sized as glibc reads it.
///
/// # Safety
/// `arg` is what `cmd` expects.
pub unsafe fn fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, b"fcntl64\0");
    if p == 0 {
        return missing();
    }
    // SAFETY: libc's fcntl64, declared variadic as in <fcntl.h>.
    let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int = unsafe { std::mem::transmute(p) };
    let prev = guard::allow();
    // SAFETY: the caller's contract.
    let r = unsafe { f(fd, cmd, arg) };
    guard::restore(prev);
    r
}

/// `ioctl(2)` through libc.
///
/// # Safety
/// `arg` is what `request` expects.
pub unsafe fn ioctl(fd: c_int, request: libc::c_ulong, arg: *mut c_void) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, b"ioctl\0");
    if p == 0 {
        return missing();
    }
    // SAFETY: libc's ioctl, declared variadic as in <sys/ioctl.h>.
    let f: unsafe extern "C" fn(c_int, libc::c_ulong, ...) -> c_int =
        unsafe { std::mem::transmute(p) };
    let prev = guard::allow();
    // SAFETY: the caller's contract.
    let r = unsafe { f(fd, request, arg) };
    guard::restore(prev);
    r
}

// ---- safe wrappers for the shim's own kernel calls ----

/// The descriptor every reserved one is duplicated from (-1 until the first reservation):
/// duplicating skips the path walk and the new open file of an `openat` per library `open`
/// (through the shim, the two system calls of each open and close were about 4 % of the CPU
/// time in `bench fileserver`).
static TEMPLATE: AtomicI32 = AtomicI32::new(-1);

/// Reserves a kernel descriptor number to back a library descriptor: an `O_PATH` descriptor,
/// close-on-exec, of an inode only the shim has (an empty memfd, reopened `O_PATH` through
/// `/proc/self/fd`), or of `/dev/null` where that cannot be made (no `/proc`). Any call that
/// reaches the kernel with it fails with `EBADF` (`read`, `write`, `mmap`, `ioctl`...), so
/// nothing the shim misses touches a random file.
///
/// It is a duplicate of `TEMPLATE`, checked to be a reservation still (`is_reservation`):
/// the program may have closed that number behind the shim's back (a raw `close` or
/// `close_range` system call) and opened a file that took it, or `dup2`'d onto it. Then the
/// template is forgotten (the number is the program's now) and a fresh one made.
///
/// A number a library `close` parked ([`park_fd`]) is taken first, checked the same way: one
/// system call instead of four (the duplication, the check, and the close).
pub fn reserve_fd() -> Result<c_int, i32> {
    while let Some(fd) = unpark_any() {
        if is_reservation(fd) {
            return Ok(fd);
        }
        // Closed behind the shim's back and taken again: the number is the program's now.
    }
    let t = TEMPLATE.load(Ordering::Acquire);
    if t >= 0 {
        if let Ok(fd) = reserve_dup(t, 0) {
            if is_reservation(fd) {
                return Ok(fd);
            }
            release_fd(fd);
        }
        let _ = TEMPLATE.compare_exchange(t, -1, Ordering::AcqRel, Ordering::Acquire);
    }
    let fd = open_reservation()?;
    if TEMPLATE.load(Ordering::Acquire) < 0 {
        if let Ok(t) = reserve_dup(fd, 0) {
            if TEMPLATE
                .compare_exchange(-1, t, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                release_fd(t);
            }
        }
    }
    Ok(fd)
}

/// The inodes (device and inode number) of the memfds [`open_reservation`] made, newest last; a
/// slot of zeroes is empty. Almost always one: another is made only when the program took the
/// template's number. Past [`RESERVED_INODES`] the oldest is forgotten, and a parked number of
/// it fails the check and is left open (the program's, as far as the shim can tell).
static RESERVED: [(AtomicU64, AtomicU64); RESERVED_INODES] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; RESERVED_INODES];
static RESERVED_NEXT: AtomicUsize = AtomicUsize::new(0);
const RESERVED_INODES: usize = 8;

/// A fresh reservation: an `O_PATH` descriptor of a new empty memfd (its inode noted in
/// [`RESERVED`]), or of `/dev/null` if that cannot be made.
fn open_reservation() -> Result<c_int, i32> {
    match open_path_memfd() {
        Some((fd, dev, ino)) => {
            let slot = RESERVED_NEXT.fetch_add(1, Ordering::AcqRel) % RESERVED_INODES;
            RESERVED[slot].0.store(dev, Ordering::Release);
            RESERVED[slot].1.store(ino, Ordering::Release);
            Ok(fd)
        }
        None => open_dev_null(),
    }
}

/// An `O_PATH`, close-on-exec descriptor of a new empty memfd, and its device and inode number.
fn open_path_memfd() -> Option<(c_int, u64, u64)> {
    let m = memfd(c"tailbound-reserved").ok()?;
    let fd = reopen_o_path(m);
    release_fd(m);
    if fd < 0 {
        return None;
    }
    match stat_of(fd) {
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => Some((fd, st.st_dev, st.st_ino)),
        _ => {
            release_fd(fd);
            None
        }
    }
}

/// A new `O_PATH`, close-on-exec descriptor of what `fd` is open on, reopened through
/// `/proc/self/fd`; -1 if that fails.
fn reopen_o_path(fd: c_int) -> c_int {
    let path = format!("/proc/self/fd/{fd}\0");
    // SAFETY: `path` is NUL-terminated; the flags need no mode.
    unsafe {
        openat(
            libc::AT_FDCWD,
            path.as_ptr().cast(),
            libc::O_PATH | libc::O_CLOEXEC,
            0,
        )
    }
}

/// A fresh `O_PATH` descriptor of `/dev/null`, close-on-exec.
fn open_dev_null() -> Result<c_int, i32> {
    // SAFETY: a literal path; the flags need no mode.
    let fd = unsafe {
        openat(
            libc::AT_FDCWD,
            c"/dev/null".as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

fn stat_of(fd: c_int) -> Option<Stat> {
    // SAFETY: all-zero bytes are a valid `stat64`.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable.
    (unsafe { fstat64(fd, &mut st) } == 0).then_some(st)
}

/// Whether `fd` is one of the shim's reservations: a descriptor of one of its memfds, found by
/// one `fstat` (nothing else can have that inode open but through `/proc/self/fd` of a
/// reservation), or an `O_PATH` descriptor of `/dev/null` (the character device 1:3) as the
/// shim opens them without `/proc`, where a program's own `/dev/null` (a daemon's stdin, say)
/// would let a call the shim misses succeed instead of failing.
fn is_reservation(fd: c_int) -> bool {
    let Some(st) = stat_of(fd) else {
        return false;
    };
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => RESERVED.iter().any(|(dev, ino)| {
            ino.load(Ordering::Acquire) == st.st_ino && dev.load(Ordering::Acquire) == st.st_dev
        }),
        libc::S_IFCHR if st.st_rdev == libc::makedev(1, 3) => {
            // SAFETY: plain integers.
            let fl = unsafe { fcntl(fd, libc::F_GETFL, std::ptr::null_mut()) };
            fl >= 0 && fl & libc::O_PATH != 0
        }
        _ => false,
    }
}

/// Reserved descriptors of closed library descriptors, kept open for the next library open
/// instead of being closed (at most [`PARKED_MAX`]). The program sees them as closed: the `close`
/// hook fails on them with `EBADF` ([`is_parked`]), and `dup2` onto one or `close_range` over
/// one takes it off the list ([`unpark`], [`unpark_range`]). Held across `fork`
/// ([`hold_parked_for_fork`]), so a child finds the list whole and unlocked.
static PARKED: parking_lot::Mutex<Vec<c_int>> = parking_lot::const_mutex(Vec::new());

/// Parked descriptors at most; a close past that closes the descriptor.
const PARKED_MAX: usize = 256;

fn parked() -> parking_lot::MutexGuard<'static, Vec<c_int>> {
    PARKED.lock()
}

/// Before `fork`: takes the parked list's lock, so no other thread holds it when the child is
/// made ([`release_parked_after_fork`] in both processes).
pub fn hold_parked_for_fork() {
    std::mem::forget(PARKED.lock());
}

/// After `fork`, in the parent and in the child: the lock [`hold_parked_for_fork`] took.
pub fn release_parked_after_fork() {
    // SAFETY: `hold_parked_for_fork` took the lock in this thread (the child's only thread is
    // the one that forked) and leaked its guard.
    unsafe { PARKED.force_unlock() };
}

/// A library descriptor's close: its reserved number is parked for the next open, or closed
/// when `PARKED_MAX` are parked already.
pub fn park_fd(fd: c_int) {
    let mut p = parked();
    if p.len() < PARKED_MAX {
        p.push(fd);
        return;
    }
    drop(p);
    release_fd(fd);
}

fn unpark_any() -> Option<c_int> {
    parked().pop()
}

/// Whether `fd` is a parked number (closed, as the program sees it).
pub fn is_parked(fd: c_int) -> bool {
    fd >= 0 && parked().contains(&fd)
}

/// A call is about to make `fd` the program's, or a library descriptor (`dup2` onto it): it is
/// parked no more (taken off the list before the call, so no open takes it meanwhile; park it
/// again if the call fails). Whether it was parked.
pub fn unpark(fd: c_int) -> bool {
    let mut p = parked();
    match p.iter().position(|&x| x == fd) {
        Some(i) => {
            p.swap_remove(i);
            true
        }
        None => false,
    }
}

/// `close_range` (or `closefrom`) over `first..=last` closes the parked numbers there, and the
/// template if it is there.
pub fn unpark_range(first: c_uint, last: c_uint) {
    let inside = |fd: c_int| (first..=last).contains(&(fd as c_uint));
    parked().retain(|&p| !inside(p));
    let t = TEMPLATE.load(Ordering::Acquire);
    if t >= 0 && inside(t) {
        let _ = TEMPLATE.compare_exchange(t, -1, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A forked child: the parked numbers are closed (the child opens no library files).
pub fn forget_parked_in_child() {
    for fd in std::mem::take(&mut *parked()) {
        release_fd(fd);
    }
}

/// Duplicates a reserved descriptor to the lowest number ≥ `min`, close-on-exec.
pub fn reserve_dup(fd: c_int, min: c_int) -> Result<c_int, i32> {
    // SAFETY: F_DUPFD_CLOEXEC takes an int, passed in the pointer-sized slot.
    let r = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, min as usize as *mut c_void) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// Makes `new` a duplicate of `old` (closing what `new` was), close-on-exec.
pub fn reserve_dup_onto(old: c_int, new: c_int) -> Result<c_int, i32> {
    // SAFETY: plain integers.
    let r = unsafe { dup3(old, new, libc::O_CLOEXEC) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// Closes a kernel descriptor the shim reserved.
pub fn release_fd(fd: c_int) {
    // SAFETY: the shim owns `fd`.
    unsafe { close(fd) };
}

/// The kernel's current directory, or `None` if it cannot be read.
pub fn kernel_cwd() -> Option<String> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its length.
    let p = unsafe { getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if p.is_null() {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

/// Changes the kernel's current directory.
pub fn kernel_chdir(path: &str) -> Result<(), i32> {
    let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: `c` is NUL-terminated.
    if unsafe { chdir(c.as_ptr()) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Sets the umask and returns the old one.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: no pointers.
    unsafe { umask(mask) }
}

pub fn euid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

pub fn egid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getegid() }
}

pub fn pid() -> i32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getpid() }
}

/// A fresh memfd (close-on-exec) for a shared mapping's backing.
pub fn memfd(name: &std::ffi::CStr) -> Result<c_int, i32> {
    // SAFETY: `name` is NUL-terminated.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// Opens a kernel path for reading and writing, close-on-exec (another process's memfd, as
/// `/proc/PID/fd/N`).
pub fn kernel_open_rw(path: &str) -> Result<c_int, i32> {
    let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    kernel_open(&c, libc::O_RDWR | libc::O_CLOEXEC)
}

/// Opens a kernel path with a program's own open flags (a special file's kernel end); `O_CREAT`
/// and `O_EXCL` are the pool node's business and are dropped.
pub fn kernel_open(path: &std::ffi::CStr, flags: c_int) -> Result<c_int, i32> {
    let flags = flags & !(libc::O_CREAT | libc::O_EXCL);
    // SAFETY: `path` is NUL-terminated; no mode is needed without O_CREAT.
    let fd = unsafe { openat(libc::AT_FDCWD, path.as_ptr(), flags, 0) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// Makes a kernel FIFO or directory at `path` with exactly `mode` (the umask undone), or
/// keeps the one there.
pub fn kernel_make(path: &std::ffi::CStr, dir: bool, mode: u32) -> Result<(), i32> {
    // SAFETY: `path` is NUL-terminated.
    let r = unsafe {
        if dir {
            mkdir(path.as_ptr(), mode)
        } else {
            mkfifo(path.as_ptr(), mode)
        }
    };
    match (r, errno()) {
        (0, _) => {
            // SAFETY: as above.
            if unsafe { chmod(path.as_ptr(), mode) } < 0 {
                return Err(errno());
            }
            Ok(())
        }
        (_, libc::EEXIST) => Ok(()),
        (_, e) => Err(e),
    }
}

/// A fresh memfd that stays open across an exec (a program image the exec runs).
pub fn memfd_inheritable(name: &std::ffi::CStr) -> Result<c_int, i32> {
    // SAFETY: `name` is NUL-terminated.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// `pread` on a kernel descriptor into `buf`, to completion or end of file.
pub fn kernel_pread(fd: c_int, buf: &mut [u8], mut off: u64) -> Result<usize, i32> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the range is inside `buf`.
        let n = unsafe {
            pread64(
                fd,
                buf[done..].as_mut_ptr().cast(),
                buf.len() - done,
                off as off_t,
            )
        };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
        off += n as u64;
    }
    Ok(done)
}

/// `pwrite` of all of `buf` on a kernel descriptor.
pub fn kernel_pwrite(fd: c_int, buf: &[u8], mut off: u64) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the range is inside `buf`.
        let n = unsafe {
            pwrite64(
                fd,
                buf[done..].as_ptr().cast(),
                buf.len() - done,
                off as off_t,
            )
        };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
        off += n as u64;
    }
    Ok(())
}

pub fn kernel_ftruncate(fd: c_int, len: u64) -> Result<(), i32> {
    // SAFETY: no pointers.
    if unsafe { ftruncate64(fd, len as off_t) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// A kernel descriptor's size.
pub fn kernel_size(fd: c_int) -> Result<u64, i32> {
    // SAFETY: zeroed is a valid `stat64`; fstat64 fills it.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable.
    if unsafe { fstat64(fd, &mut st) } < 0 {
        Err(errno())
    } else {
        Ok(st.st_size as u64)
    }
}

/// Writes a message to standard error without going through the shim's hooks.
pub fn say(msg: &str) {
    let mut buf = msg.as_bytes();
    while !buf.is_empty() {
        // SAFETY: the range is inside `buf`.
        let n = unsafe { write(2, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Sets or clears a descriptor's close-on-exec flag.
pub fn set_kernel_cloexec(fd: c_int, on: bool) -> Result<(), i32> {
    let flag = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: F_SETFD takes an int, passed in the pointer-sized slot.
    let r = unsafe { fcntl(fd, libc::F_SETFD, flag as usize as *mut c_void) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// A reserved descriptor the previous image of this process left across `exec`: whether `fd`
/// is still one (an `O_PATH` descriptor of an empty memfd, or of `/dev/null`), and if so it is
/// noted as this image's and made close-on-exec again.
pub fn adopt_reservation(fd: c_int) -> bool {
    let Some(st) = stat_of(fd) else {
        return false;
    };
    // SAFETY: plain integers.
    let fl = unsafe { fcntl(fd, libc::F_GETFL, std::ptr::null_mut()) };
    if fl < 0 || fl & libc::O_PATH == 0 {
        return false;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG if st.st_size == 0 => {
            let known = RESERVED.iter().any(|(dev, ino)| {
                ino.load(Ordering::Acquire) == st.st_ino && dev.load(Ordering::Acquire) == st.st_dev
            });
            if !known {
                let slot = RESERVED_NEXT.fetch_add(1, Ordering::AcqRel) % RESERVED_INODES;
                RESERVED[slot].0.store(st.st_dev, Ordering::Release);
                RESERVED[slot].1.store(st.st_ino, Ordering::Release);
            }
        }
        libc::S_IFCHR if st.st_rdev == libc::makedev(1, 3) => {}
        _ => return false,
    }
    set_kernel_cloexec(fd, true).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloexec(fd: c_int) -> bool {
        // SAFETY: plain integers.
        unsafe { fcntl(fd, libc::F_GETFD, std::ptr::null_mut()) & libc::FD_CLOEXEC != 0 }
    }

    /// The tests share the template and the parked list.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn a_parked_number_is_taken_again_only_while_it_is_still_the_shims() {
        let _s = serial();
        let a = reserve_fd().unwrap();
        park_fd(a);
        assert!(is_parked(a));
        assert_eq!(reserve_fd().unwrap(), a, "the parked number comes first");
        assert!(!is_parked(a) && is_reservation(a) && cloexec(a));

        // Parked, then closed behind the shim's back and taken by a file of the program's.
        park_fd(a);
        let path = std::env::temp_dir().join(format!("tb-park-{}", std::process::id()));
        std::fs::write(&path, b"the program's own file").unwrap();
        let own = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: `a` is the shim's; `own` stays open, so dup3 only makes `a` its duplicate.
        assert_eq!(unsafe { libc::dup3(own.as_raw_fd(), a, 0) }, a);
        let b = reserve_fd().unwrap();
        assert_ne!(b, a, "the program's number was handed out");
        assert!(!is_parked(a) && is_reservation(b));
        let mut buf = [0u8; 64];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::pread(a, buf.as_mut_ptr().cast(), buf.len(), 0) };
        assert_eq!(&buf[..n as usize], b"the program's own file");

        // Taken off the list by a `dup2` onto it or a `close_range` over it.
        park_fd(b);
        assert!(unpark(b) && !unpark(b) && !is_parked(b));
        park_fd(b);
        unpark_range(b as c_uint, b as c_uint);
        assert!(!is_parked(b));
        // A range over the template (`closefrom` closes it too) forgets it.
        let t = TEMPLATE.load(Ordering::Acquire);
        assert!(t >= 0);
        unpark_range(t as c_uint, c_uint::MAX);
        assert_eq!(TEMPLATE.load(Ordering::Acquire), -1);
        release_fd(t);
        for fd in [a, b] {
            release_fd(fd);
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_reservation_is_known_by_its_inode_and_nothing_else_passes_for_one() {
        let _s = serial();
        let a = reserve_fd().unwrap();
        let st = stat_of(a).unwrap();
        // A memfd of the shim's, reopened `O_PATH`: reads and writes through it fail.
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG);
        // SAFETY: plain integers.
        let fl = unsafe { fcntl(a, libc::F_GETFL, std::ptr::null_mut()) };
        assert!(fl & libc::O_PATH != 0 && cloexec(a));
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is writable for its length.
        assert_eq!(
            unsafe { libc::read(a, buf.as_mut_ptr().cast(), buf.len()) },
            -1
        );
        // A memfd of the program's own, and an `O_PATH` descriptor of it, are not.
        let own = memfd(c"the-programs-own").unwrap();
        assert!(!is_reservation(own));
        let own_o_path = reopen_o_path(own);
        assert!(own_o_path >= 0 && !is_reservation(own_o_path));
        // Without `/proc`: an `O_PATH` descriptor of `/dev/null` is one, a readable one is not.
        let null = open_dev_null().unwrap();
        assert!(is_reservation(null));
        let readable = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        assert!(!is_reservation(readable.as_raw_fd()));
        for fd in [a, own, own_o_path, null] {
            release_fd(fd);
        }
    }

    #[test]
    fn reserved_descriptors_are_the_shims_even_after_the_template_number_is_taken() {
        let _s = serial();
        let a = reserve_fd().unwrap();
        let b = reserve_fd().unwrap();
        assert_ne!(a, b);
        for fd in [a, b] {
            assert!(is_reservation(fd) && cloexec(fd));
        }
        // The program closes the template's number behind the shim's back and a file of its
        // own takes it: the next reservation must not duplicate that file.
        let t = TEMPLATE.load(Ordering::Acquire);
        assert!(t >= 0 && is_reservation(t));
        let dir = std::env::temp_dir().join(format!("tb-reserve-{}", std::process::id()));
        std::fs::write(&dir, b"the program's own file").unwrap();
        let own = std::fs::File::open(&dir).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: `t` is the shim's; `own` stays open, so dup3 only makes `t` its duplicate.
        assert_eq!(unsafe { libc::dup3(own.as_raw_fd(), t, 0) }, t);
        assert!(!is_reservation(t));
        let c = reserve_fd().unwrap();
        assert!(is_reservation(c) && cloexec(c));
        assert_ne!(
            TEMPLATE.load(Ordering::Acquire),
            t,
            "the taken number is forgotten"
        );
        // The program's descriptor on that number is untouched.
        let mut buf = [0u8; 64];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::pread(t, buf.as_mut_ptr().cast(), buf.len(), 0) };
        assert_eq!(&buf[..n as usize], b"the program's own file");
        // Nor a `/dev/null` of the program's own, opened for reading and writing.
        let t2 = TEMPLATE.load(Ordering::Acquire);
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap();
        // SAFETY: `t2` is the shim's; `null` stays open.
        assert_eq!(unsafe { libc::dup3(null.as_raw_fd(), t2, 0) }, t2);
        let d = reserve_fd().unwrap();
        // SAFETY: plain integers.
        let fl = unsafe { fcntl(d, libc::F_GETFL, std::ptr::null_mut()) };
        assert!(
            fl & libc::O_PATH != 0,
            "a reserved descriptor must not be writable"
        );
        for fd in [a, b, c, d, t, t2] {
            release_fd(fd);
        }
        std::fs::remove_file(&dir).unwrap();
    }
}
