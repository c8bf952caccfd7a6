//! `execl`, `execlp` and `execle`, whose arguments are a variable list: libc's own call its
//! internal `execve`, which no hook sees, so a program (or a library, such as awk's `cmd |
//! getline`) that uses them would hand nothing over. Each is a small stub that lays the list
//! out as an array and calls the hooked `execv`, `execvp` or `execve`.
//!
//! x86_64 only: the System V calling convention passes the first six arguments in registers
//! and the rest on the stack, one 8-byte slot each. Each stub takes the return address off the
//! stack, pushes the five argument registers after the path (so they precede the caller's stack
//! slots and `arg0, arg1, ...` is one array), puts the return address back (the stack is then
//! 16-byte aligned for the call), calls `exec_list`, and undoes the pushes if it returns.
//! Elsewhere libc's own are used (no hand-over).

use libc::{c_char, c_int};

use crate::abi::spawn::{execv, execve, execvp};

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

hooks! {
    fn execl() -> c_int => (naked
        "pop r10", "push r9", "push r8", "push rcx", "push rdx", "push rsi", "mov rsi, rsp",
        "mov edx, {how}", "push r10", "call {list}", "pop r10", "add rsp, 40", "push r10", "ret",
        how = const LIST, list = sym exec_list);

    fn execlp() -> c_int => (naked
        "pop r10", "push r9", "push r8", "push rcx", "push rdx", "push rsi", "mov rsi, rsp",
        "mov edx, {how}", "push r10", "call {list}", "pop r10", "add rsp, 40", "push r10", "ret",
        how = const SEARCH, list = sym exec_list);

    fn execle() -> c_int => (naked
        "pop r10", "push r9", "push r8", "push rcx", "push rdx", "push rsi", "mov rsi, rsp",
        "mov edx, {how}", "push r10", "call {list}", "pop r10", "add rsp, 40", "push r10", "ret",
        how = const WITH_ENV, list = sym exec_list);
}
