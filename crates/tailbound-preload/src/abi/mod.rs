//! The interposed C symbols, one file per family of calls. Each symbol turns raw pointers into
//! Rust values, asks [`crate::vfs`] whether the path or descriptor is a library one, and either
//! serves it there or calls the real libc function ([`crate::real`]).
//!
//! Every exported symbol is made by `hooks!`, which owns what all of them share:
//!
//! - `#[no_mangle] pub unsafe extern "C"`, with the contract of the libc function of the same name;
//! - the panic boundary ([`base::boundary`]): a panic fails the call with the function's error
//!   value and `errno` EIO and poisons the open pools;
//! - a failpoint `shim.<symbol>` for each symbol with a body of its own, so a test can make it
//!   panic (on a library path or descriptor for the routed forms, on entry of a call the program
//!   makes for the others);
//! - routing: `fd` and `path` take the re-entrancy guard, count the call (`TAILBOUND_REPORT=1`)
//!   and serve a library descriptor or path, else pass the call through;
//! - the pass-through `pass!()`, the one place that calls `real::<symbol>` with the program's
//!   arguments unchanged;
//! - the family's `EXPORTED` list, which `tests/boundary.rs` holds against the library's dynamic
//!   symbols (`nm -D`).
//!
//! Layer: above [`crate::guard`], [`crate::real`] and [`crate::vfs`]. Inside, `base` is named by
//! every family; `streams` (stdio streams on library descriptors) by `fds` and `stdio`; `paths`
//! and `fds` by `stdio`. No family names one that names it.

/// Defines a family's exported symbols and its `EXPORTED` list. Each item is
/// `fn NAME(ARGS) -> RET [, or FAILED] => FORM;`, where `FAILED` makes the value a panic returns
/// (default: [`base::Failed`]) and `FORM` is one of:
///
/// - `(fd "count", FD, |o| BODY)`: `BODY` serves a library descriptor (`o`, its description);
///   any other descriptor is passed through;
/// - `(path "count", DIRFD, PATH, |loc| BODY)`: `BODY` serves a library path (`loc`, its
///   location or the errno refusing it); any other path is passed through;
/// - `(same_as OTHER)` or `(same_as OTHER(ARGS))`: an alias of hook `OTHER`;
/// - `(exit_after { BODY })`: `BODY`, then the libc function, which does not return;
/// - `{ BODY }`: a body of its own, which routes itself and may end in `pass!()`;
/// - `(naked ASM...)`: a function of no arguments of its own whose whole body is `naked_asm!`
///   with these operands (the `execl` stubs, which read the caller's arguments themselves).
macro_rules! hooks {
    ($(
        $(#[$attr:meta])*
        fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) -> $r:ty $(, or $failed:expr)?
            => $how:tt $(;)?
    )*) => {
        /// The symbols this family exports, each made by `hooks!`.
        pub const EXPORTED: &[&str] = &[$(stringify!($name)),*];
        $( hook! { $(#[$attr])* fn $name($($a: $t),*) -> $r $(, or $failed)? => $how } )*
    };
}

/// One item of [`hooks!`].
macro_rules! hook {
    (@no_mangle $item:item) => {
        #[no_mangle]
        $item
    };
    (@export $(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $body:block) => {
        hook!(@no_mangle
        $(#[$attr])*
        ///
        /// # Safety
        /// The contract of the libc function of the same name.
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            #[allow(unused_macros)]
            macro_rules! pass {
                () => {
                    // SAFETY: the program's own arguments, unchanged, to the libc function this
                    // symbol stands in for: the program keeps that function's contract.
                    unsafe { $crate::real::$name($($a),*) }
                };
            }
            $body
        });
    };
    ($(#[$attr:meta])* fn $name:ident ( ) -> $r:ty => (naked $($asm:tt)*)) => {
        hook!(@no_mangle
        $(#[$attr])*
        ///
        /// # Safety
        /// The contract of the libc function of the same name.
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() -> $r {
            core::arch::naked_asm!($($asm)*)
        });
    };
    (@failed $r:ty) => { <$r as $crate::abi::base::Failed>::failed };
    (@failed $r:ty, $failed:expr) => { $failed };
    (@hit $name:ident) => { tailbound::failpoint::hit(concat!("shim.", stringify!($name))) };

    ($(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $(, or $failed:expr)?
        => (fd $count:literal, $fd:expr, |$o:ident| $body:expr)) => {
        hook!(@export $(#[$attr])* fn $name($($a: $t),*) -> $r {
            $crate::abi::base::boundary_or(hook!(@failed $r $(, $failed)?), || {
                if let Some((_guard, $o)) = $crate::abi::base::lib_fd($count, $fd) {
                    hook!(@hit $name);
                    return $body;
                }
                pass!()
            })
        });
    };
    ($(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $(, or $failed:expr)?
        => (path $count:literal, $dirfd:expr, $p:expr, |$loc:ident| $body:expr)) => {
        hook!(@export $(#[$attr])* fn $name($($a: $t),*) -> $r {
            $crate::abi::base::boundary_or(hook!(@failed $r $(, $failed)?), || {
                // SAFETY: the path argument, which the program passes NUL-terminated (or NULL), as
                // every libc path call requires; it is only read.
                let routed = unsafe { $crate::abi::base::lib_path($count, $dirfd, $p) };
                if let Some((_guard, $loc)) = routed {
                    hook!(@hit $name);
                    return $body;
                }
                pass!()
            })
        });
    };
    ($(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $(, or $failed:expr)?
        => (same_as $other:ident)) => {
        hook!(@export $(#[$attr])* fn $name($($a: $t),*) -> $r {
            $crate::abi::base::boundary_or(hook!(@failed $r $(, $failed)?), || {
                // SAFETY: the program's own arguments, unchanged, to the hook of the same contract.
                unsafe { $other($($a),*) }
            })
        });
    };
    ($(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $(, or $failed:expr)?
        => (same_as $other:ident ( $($arg:expr),* ))) => {
        hook!(@export $(#[$attr])* fn $name($($a: $t),*) -> $r {
            $crate::abi::base::boundary_or(hook!(@failed $r $(, $failed)?), || {
                // SAFETY: the program's own arguments, those `OTHER` takes, to the hook whose
                // contract this symbol's includes (the fortified `_chk` forms add a length only).
                unsafe { $other($($arg),*) }
            })
        });
    };
    ($(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty
        => (exit_after $body:block)) => {
        hook!(@export $(#[$attr])* fn $name($($a: $t),*) -> $r {
            $crate::abi::base::boundary(|| {
                hook!(@hit $name);
                $body
            });
            pass!();
            // SAFETY: reached only if the libc function returned, which it never does.
            unsafe { libc::abort() }
        });
    };
    ($(#[$attr:meta])* fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty $(, or $failed:expr)?
        => { $($body:tt)* }) => {
        hook!(@export $(#[$attr])* fn $name($($a: $t),*) -> $r {
            $crate::abi::base::boundary_or(hook!(@failed $r $(, $failed)?), || {
                // On the program's calls only: not on those the shim makes itself (the engine
                // starting a thread while a pool opens).
                if !$crate::guard::busy() {
                    hook!(@hit $name);
                }
                $($body)*
            })
        });
    };
}

// Variadic entry points:
// `open`, `openat`, `fcntl` and `ioctl` are variadic in C. On the ABIs this library builds for
// (x86_64 System V and AArch64 Linux) variadic integer and pointer arguments travel in the same
// registers as named ones, so each is defined with its full argument list; the optional argument
// is read only when the flags or command say the caller passed it, as libc itself does.

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!(
    "the shim's variadic entry points assume x86_64 or AArch64 Linux calling conventions"
);

pub mod base;

pub mod attrs;
pub mod dirs;
#[cfg(target_arch = "x86_64")]
pub mod execl;
pub mod fds;
pub mod io;
pub mod mmap;
pub mod paths;
pub mod process;
pub mod sockets;
pub mod spawn;
pub mod stat;
pub mod stdio;
pub mod streams;
pub mod xattr;
