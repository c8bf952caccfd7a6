//! `execl`, `execlp` and `execle`, whose arguments are a variable list: libc's own call its
//! internal `execve`, which no hook sees, so a program (or a library, such as awk's `cmd |
//! getline`) that uses them would hand nothing over. Each is a small stub that lays the list
//! out as an array and calls the hooked `execv`, `execvp` or `execve`.
//!
//! x86_64 only: the System V calling convention passes the first six arguments in registers
//! and the rest on the stack, one 8-byte slot each, so pushing the five argument registers
//! after the path below the caller's stack slots makes `arg0, arg1, ...` one array. Elsewhere
//! libc's own are used (no hand-over).

use libc::{c_char, c_int};

use crate::abi::spawn::{execv, execve, execvp};

/// The exported symbols this file defines.
pub const EXPORTED: &[&str] = &["execl", "execlp", "execle"];

const LIST: c_int = 0;
const SEARCH: c_int = 1;
const WITH_ENV: c_int = 2;

/// The stubs' common part: `args` is `arg0, arg1, ..., NULL` (for `execle`, the environment
/// after the NULL), as the program passed them.
///
/// # Safety
/// `args` points at a NULL-terminated list of pointers, followed for `WITH_ENV` by an
/// environment pointer, as the exec's caller promises.
unsafe extern "C" fn exec_list(
    path: *const c_char,
    args: *const *const c_char,
    how: c_int,
) -> c_int {
    let mut n = 0;
    // SAFETY: the list is NULL-terminated, per the contract.
    while !unsafe { *args.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the arguments are one array (the stub made them so), so `args` is an argv; the
    // environment, for execle, is the slot after its NULL.
    unsafe {
        match how {
            SEARCH => execvp(path, args),
            WITH_ENV => execve(path, args, *args.add(n + 1).cast::<*const *const c_char>()),
            _ => execv(path, args),
        }
    }
}

/// One stub: keeps the return address, pushes the argument registers after the path so they
/// precede the caller's stack arguments, calls [`exec_list`] (the stack 16-byte aligned at the
/// call), and takes the pushes back.
macro_rules! stub {
    ($name:ident, $how:expr) => {
        /// The libc function of the same name, handing served descriptors over.
        ///
        /// # Safety
        /// The libc function's contract: a path and a NULL-terminated list of strings (and,
        /// for `execle`, an environment after the NULL).
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() -> c_int {
            core::arch::naked_asm!(
                "pop r10",
                "push r9",
                "push r8",
                "push rcx",
                "push rdx",
                "push rsi",
                "mov rsi, rsp",
                "mov edx, {how}",
                "push r10",
                "call {list}",
                "pop r10",
                "add rsp, 40",
                "push r10",
                "ret",
                how = const $how,
                list = sym exec_list,
            )
        }
    };
}

stub!(execl, LIST);
stub!(execlp, SEARCH);
stub!(execle, WITH_ENV);
