//! Where experiments get a tbfs pool on the file backend: one place that creates (zero-filling once)
//! and reopens the pool file, so every experiment measures the same backend.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::dev::file::FileDevice;

/// Creates a pool file of `len_bytes` at `path` (zero-filled once) on the file backend.
pub fn create_file_pool(path: &Path, len_bytes: u64) -> io::Result<Arc<FileDevice>> {
    FileDevice::create(path, len_bytes).map(Arc::new)
}

/// Opens an existing pool file on the file backend.
pub fn open_file_pool(path: &Path) -> io::Result<Arc<FileDevice>> {
    FileDevice::open(path).map(Arc::new)
}

/// How the backend does its I/O, for reports: `O_DIRECT` or buffered, io_uring or `pwrite`.
pub fn describe(dev: &FileDevice) -> String {
    format!(
        "{}, {}",
        if dev.direct() { "O_DIRECT" } else { "buffered" },
        if dev.uses_io_uring() {
            "io_uring"
        } else {
            "pwrite"
        }
    )
}
