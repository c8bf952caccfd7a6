//! The two per-thread switches every call into the shim turns: the re-entrancy flag, and the
//! selector byte the kernel reads in the catch-all mode.
//!
//! - While the shim works on a call ([`enter`] to the [`Guard`]'s drop), any libc call it, the
//!   engine or the allocator makes on the same thread goes straight to libc.
//! - In the catch-all mode (Syscall User Dispatch) each thread has a selector byte: `BLOCK` while
//!   the program runs, `ALLOW` while the shim works ([`allow`]/[`restore`]) and inside the
//!   `SIGSYS` handler. The catch-all module switches dispatch on and points the kernel at
//!   [`selector_ptr`]; this module only flips the byte.
//!
//! This is the bottom layer of the shim: it names no other module of the crate.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The byte the kernel reads before each system call of this thread (catch-all mode).
    static SELECTOR: Cell<u8> = const { Cell::new(SELECTOR_ALLOW) };
    /// Whether dispatch is switched on for this thread.
    static ON: Cell<bool> = const { Cell::new(false) };
}

/// The selector value that lets a thread's system calls through.
pub const SELECTOR_ALLOW: u8 = 0;
/// The selector value that turns a thread's system calls into `SIGSYS`.
pub const SELECTOR_BLOCK: u8 = 1;

/// Whether the catch-all mode is switched on in this process.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Held while the shim works on a call; a nested call on the same thread passes through. In
/// catch-all mode it also lets the thread's system calls through (the selector it found is kept).
pub struct Guard(u8);

impl Drop for Guard {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
        restore(self.0);
    }
}

/// The guard, or `None` when the shim is already working on a call on this thread.
pub fn enter() -> Option<Guard> {
    BUSY.with(|b| {
        if b.get() {
            None
        } else {
            // Calls are let through before the flag is set (and the flag cleared before they are
            // blocked again), so a signal handler that runs in between never traps while busy.
            let prev = allow();
            b.set(true);
            Some(Guard(prev))
        }
    })
}

/// Whether the shim is working on a call on this thread.
pub fn busy() -> bool {
    BUSY.with(|b| b.get())
}

/// Sets this thread's selector byte.
pub fn selector_set(v: u8) {
    SELECTOR.with(|s| {
        // SAFETY: the cell belongs to this thread and nothing holds a reference into it; a
        // volatile store so the kernel, which reads the byte at the next system call, sees it in
        // program order.
        unsafe { std::ptr::write_volatile(s.as_ptr(), v) };
    });
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

fn selector_get() -> u8 {
    SELECTOR.with(|s| {
        // SAFETY: as in `selector_set`: this thread's own cell, read without a reference.
        unsafe { std::ptr::read_volatile(s.as_ptr()) }
    })
}

/// The address of this thread's selector byte, for `prctl(PR_SET_SYSCALL_USER_DISPATCH)`.
pub fn selector_ptr() -> *mut u8 {
    SELECTOR.with(|s| s.as_ptr())
}

/// Lets this thread's system calls through while the shim works; returns what [`restore`] needs.
pub fn allow() -> u8 {
    if !active() || !on_this_thread() {
        return SELECTOR_ALLOW;
    }
    let prev = selector_get();
    selector_set(SELECTOR_ALLOW);
    prev
}

/// Puts back the selector [`allow`] found.
pub fn restore(prev: u8) {
    if prev != SELECTOR_ALLOW && on_this_thread() {
        selector_set(prev);
    }
}

/// Whether `TAILBOUND_CATCH_ALL=1` switched the mode on in this process.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Marks the catch-all mode switched on in this process.
pub fn set_active() {
    ACTIVE.store(true, Ordering::Relaxed);
}

/// Whether dispatch is switched on for the calling thread.
pub fn on_this_thread() -> bool {
    ON.with(|o| o.get())
}

/// Notes whether dispatch is switched on for the calling thread.
pub fn set_on_this_thread(on: bool) {
    ON.with(|o| o.set(on));
}
