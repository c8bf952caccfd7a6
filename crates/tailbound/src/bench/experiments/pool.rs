//! Where experiments get a tbfs pool on the file backend: one place that creates (zero-filling once)
//! and reopens the pool file, so every experiment measures the same backend.

use std::io;
use std::path::Path;

use crate::tbfs::DeviceRef;

/// Creates a pool file of `len_bytes` at `path` (zero-filled once) on the file backend.
pub fn create_file_pool(path: &Path, len_bytes: u64) -> io::Result<DeviceRef> {
    let _ = (path, len_bytes);
    Err(not_yet(path))
}

/// Opens an existing pool file on the file backend.
pub fn open_file_pool(path: &Path) -> io::Result<DeviceRef> {
    Err(not_yet(path))
}

fn not_yet(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "pool {}: the file backend (dev::file::FileDevice) is not built into this tailbound yet",
            path.display()
        ),
    )
}
