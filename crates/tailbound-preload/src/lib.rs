//! `libtailbound_preload.so`: an `LD_PRELOAD` library that serves unmodified programs' file calls
//! under mount prefixes from tbfs pools, in the program's own process.
//!
//! ```text
//! TAILBOUND_MOUNT=/mnt/fast=/dev/shm/app.pool LD_PRELOAD=libtailbound_preload.so PROGRAM
//! ```
//! (`tailbound run --mount /mnt/fast=/dev/shm/app.pool -- PROGRAM` sets this up.)
//!
//! The layers, each naming only those before it:
//!
//! - [`guard`]: the per-thread re-entrancy flag and the catch-all mode's selector byte.
//! - [`real`]: libc's own functions, found with `dlsym(RTLD_NEXT)`, and `errno`.
//! - [`vfs`]: mounts, path resolution, the library descriptor table and every operation (safe).
//! - [`abi`]: the interposed C symbols, one file per family (raw pointers in, errno out), all
//!   made by one macro that owns the panic boundary, the guard, the counters and the pass-through.
//! - [`catchall`]: the Syscall User Dispatch mode for calls no symbol hook sees (x86_64).
//!
//! Environment: `TAILBOUND_MOUNT=DIR=POOL[:DIR=POOL...]`, `TAILBOUND_BACKEND=memory|file`,
//! `TAILBOUND_REPORT=1` (per-call counts at exit), `TAILBOUND_STRICT=1` (abort on an
//! unsupported call on a library file instead of failing it), `TAILBOUND_CATCH_ALL=1` (the
//! catch-all mode, x86_64), `TAILBOUND_FAILPOINTS=shim.write` (a failpoint that makes the next
//! call there panic, to test the panic boundary: see `tailbound::failpoint`; every hook with a
//! body of its own has one, `shim.<symbol>`).
//!
//! No panic unwinds into the program: each exported symbol catches one, fails its call with EIO
//! and poisons the open pools ([`abi::base::boundary`]).

pub mod guard;
#[allow(non_snake_case)]
pub mod real;
pub mod vfs;
#[macro_use]
pub mod abi;
#[cfg(target_arch = "x86_64")]
pub mod catchall;

/// Every symbol the library exports, as the `hooks!` invocations list them: each one runs behind
/// the panic boundary. `tests/boundary.rs` checks it against the library's dynamic symbols.
pub fn exported() -> Vec<&'static str> {
    let families: &[&[&str]] = &[
        abi::attrs::EXPORTED,
        abi::dirs::EXPORTED,
        #[cfg(target_arch = "x86_64")]
        abi::execl::EXPORTED,
        abi::fds::EXPORTED,
        abi::io::EXPORTED,
        abi::mmap::EXPORTED,
        abi::paths::EXPORTED,
        abi::process::EXPORTED,
        abi::sockets::EXPORTED,
        abi::spawn::EXPORTED,
        abi::stat::EXPORTED,
        abi::stdio::EXPORTED,
        abi::xattr::EXPORTED,
        #[cfg(target_arch = "x86_64")]
        catchall::EXPORTED,
    ];
    families.iter().flat_map(|f| f.iter().copied()).collect()
}
