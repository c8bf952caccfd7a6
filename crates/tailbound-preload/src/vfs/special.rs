//! The kernel's ends of a pool's FIFOs and device nodes: a pool keeps only their inodes, and
//! opening one through the shim opens the kernel's pipe or device.

use crate::real;
use crate::vfs::ofd::VfsResult;

/// The kernel's end of a special file of a pool, opened with the program's `flags`: a FIFO is
/// the kernel's FIFO named after its inode in the pool's FIFO directory
/// ([`tailbound::serve::fifo_dir`], made by the pool's server, or here with mode 0700 for a pool
/// of this process alone), so every process that opens the node meets in one pipe; a device node
/// is the node in `/dev` with its number, which the kernel then checks the caller against (a
/// device nobody has a node for is `ENXIO`). `None` for every other kind.
pub fn open_special(
    pool: &std::path::Path,
    st: &tailbound::tbfs::Stat,
    flags: i32,
) -> Option<VfsResult<libc::c_int>> {
    use tailbound::tbfs::FileKind;
    let path = match st.kind {
        FileKind::Fifo => kernel_fifo(pool, st.ino),
        FileKind::CharDevice | FileKind::BlockDevice => device_node(st),
        _ => return None,
    };
    Some(path.and_then(|p| real::kernel_open(&p, flags)))
}

fn kernel_fifo(pool: &std::path::Path, ino: u64) -> VfsResult<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    let dir = tailbound::serve::fifo_dir(pool);
    let c = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| libc::ENAMETOOLONG)
    };
    real::kernel_make(&c(&dir)?, true, 0o700)?;
    let fifo = c(&dir.join(ino.to_string()))?;
    // Anyone who reaches the directory may use a FIFO in it: the pool's node is what the open
    // was checked against.
    real::kernel_make(&fifo, false, 0o666)?;
    Ok(fifo)
}

fn device_node(st: &tailbound::tbfs::Stat) -> VfsResult<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let want = crate::vfs::ofd::split_dev(st.rdev);
    let block = st.kind == tailbound::tbfs::FileKind::BlockDevice;
    let matches = |p: &std::path::Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| {
            let t = m.file_type();
            let kind = if block {
                t.is_block_device()
            } else {
                t.is_char_device()
            };
            kind && (libc::major(m.rdev()), libc::minor(m.rdev())) == want
        })
    };
    let mut dirs = vec![std::path::PathBuf::from("/dev")];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if matches(&p) {
                return std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| libc::ENXIO);
            }
            // One level below /dev (`/dev/input`, `/dev/net`, ...), not the device trees.
            if d.as_os_str() == "/dev" && e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(p);
            }
        }
    }
    Err(libc::ENXIO)
}
