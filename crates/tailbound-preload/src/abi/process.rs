//! The process: `_exit` and `_Exit` (which flush the pools first, as a kernel file system's page
//! cache would keep the data), and `umask`.

use libc::{c_int, mode_t};

use crate::abi::base::{boundary, eio_and, flush_at_exit, shim};
use crate::guard::enter;

hooks! {
    fn umask(mask: mode_t) -> mode_t, or eio_and(0) => {
        let old = pass!();
        // The mask is the kernel's already: a panic below must not change what the call returns.
        boundary(|| {
            if let Some(_g) = enter() {
                shim().set_umask(mask);
            }
        });
        old
    }

    fn _exit(code: c_int) -> ! => (exit_after {
        // Buffered pool data is written like a kernel file system's page cache would keep it.
        flush_at_exit(false)
    });

    fn _Exit(code: c_int) -> ! => (exit_after { flush_at_exit(false) });
}
