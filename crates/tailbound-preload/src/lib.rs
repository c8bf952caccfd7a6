//! `libtailbound_preload.so`: an `LD_PRELOAD` library that serves unmodified programs' file calls
//! under mount prefixes from tbfs pools, in the program's own process.
//!
//! ```text
//! TAILBOUND_MOUNT=/mnt/fast=/dev/shm/app.pool LD_PRELOAD=libtailbound_preload.so PROGRAM
//! ```
//! (`tailbound run --mount /mnt/fast=/dev/shm/app.pool -- PROGRAM` sets this up.)
//!
//! - [`vfs`]: mounts, path resolution, the library descriptor table and every operation (safe).
//! - [`hooks`]: the interposed C symbols (raw pointers in, errno out).
//! - [`real`]: libc's own functions, found with `dlsym(RTLD_NEXT)`.
//! - [`catchall`]: the Syscall User Dispatch mode for calls no symbol hook sees.
//!
//! Environment: `TAILBOUND_MOUNT=DIR=POOL[:DIR=POOL...]`, `TAILBOUND_BACKEND=memory|file`,
//! `TAILBOUND_REPORT=1` (per-call counts at exit), `TAILBOUND_STRICT=1` (abort on an
//! unsupported call on a library file instead of failing it), `TAILBOUND_CATCH_ALL=1` (the
//! catch-all mode, x86_64), `TAILBOUND_FAILPOINTS=shim.write` (a failpoint that makes the next
//! call there panic, to test the panic boundary: see `tailbound::failpoint`).
//!
//! No panic unwinds into the program: each hook catches one, fails its call with EIO and
//! poisons the open pools ([`hooks::boundary`]).

#[cfg(target_arch = "x86_64")]
pub mod catchall;
#[cfg(not(target_arch = "x86_64"))]
/// Syscall User Dispatch is used on x86_64 only; elsewhere the guard has nothing to switch.
pub mod catchall {
    pub fn allow() -> u8 {
        0
    }
    pub fn restore(_prev: u8) {}
}
pub mod hooks;
#[allow(non_snake_case)]
pub mod real;
pub mod vfs;
