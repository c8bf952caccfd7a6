//! The `fuse-passthrough` baseline of `bench fileserver`: a directory served through FUSE, the
//! calls filebench's workloads make, checked against what lands in the backing directory.
//!
//! It needs root (or fusermount3) and /dev/fuse. Under CI (`CI` set) a test that cannot mount
//! fails; elsewhere it says why and passes without running.

use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use tailbound_bench::experiments::fileserver::passthrough;

/// A passthrough mount served by threads of this process, unmounted when dropped.
struct Served {
    backing: tempfile::TempDir,
    dir: tempfile::TempDir,
    server: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Served {
    fn new(test: &str) -> Option<Served> {
        if let Err(why) = tailbound_fuse::can_mount() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: cannot mount through FUSE under CI: {why}"
            );
            eprintln!("skipping {test}: cannot mount through FUSE: {why}");
            return None;
        }
        let backing = tempfile::Builder::new()
            .prefix("tb-passthrough-data-")
            .tempdir()
            .unwrap();
        let dir = tempfile::Builder::new()
            .prefix("tb-passthrough-mnt-")
            .tempdir()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let (b, d) = (backing.path().to_path_buf(), dir.path().to_path_buf());
        let server = std::thread::spawn(move || {
            passthrough::serve(&b, &d, || {
                let _ = tx.send(());
            })
        });
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let err = server.join().unwrap();
            panic!("{test}: the passthrough did not mount: {err:?}");
        }
        Some(Served {
            backing,
            dir,
            server: Some(server),
        })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn backing(&self, rel: &str) -> PathBuf {
        self.backing.path().join(rel)
    }

    fn unmount(mut self) {
        self.stop(false);
    }

    fn stop(&mut self, lazy: bool) {
        if self.server.is_none() {
            return;
        }
        let unmounted = tailbound::sys::fs::unmount(self.dir.path(), lazy);
        if !lazy {
            unmounted.expect("unmounting the passthrough");
        }
        if let Some(server) = self.server.take() {
            let ended = server.join();
            // Dropped while a failed test unwinds: no second panic.
            if !lazy {
                ended.unwrap().expect("the passthrough's session");
            }
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop(true);
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn the_passthrough_serves_the_fileserver_calls_from_its_backing_directory() {
    let Some(m) = Served::new("passthrough") else {
        return;
    };
    // Create, write (larger than one request), close; append; read back whole.
    let data = pattern(3 << 20 | 123, 7);
    std::fs::write(m.path("f"), &data).unwrap();
    let tail = pattern(5000, 9);
    std::fs::OpenOptions::new()
        .append(true)
        .open(m.path("f"))
        .unwrap()
        .write_all(&tail)
        .unwrap();
    let mut want = data.clone();
    want.extend_from_slice(&tail);
    assert_eq!(std::fs::read(m.path("f")).unwrap(), want);
    assert_eq!(
        std::fs::metadata(m.path("f")).unwrap().len(),
        want.len() as u64
    );
    // What the mount wrote is in the backing file once synced.
    std::fs::File::open(m.path("f"))
        .unwrap()
        .sync_all()
        .unwrap();
    assert_eq!(std::fs::read(m.backing("f")).unwrap(), want);

    // Directories, a rename, a listing, modes and truncation.
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/b"), b"bee").unwrap();
    std::fs::rename(m.path("d/b"), m.path("d/c")).unwrap();
    assert_eq!(names(&m.path("d")), ["c"]);
    assert_eq!(std::fs::read(m.path("d/c")).unwrap(), b"bee");
    std::fs::set_permissions(m.path("d/c"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        std::fs::metadata(m.backing("d/c")).unwrap().mode() & 0o7777,
        0o600
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("d/c"))
        .unwrap();
    f.set_len(1).unwrap();
    drop(f);
    assert_eq!(std::fs::read(m.path("d/c")).unwrap(), b"b");
    assert_eq!(names(m.dir.path()), ["d", "f"]);
    // Inode numbers match between stat and the listing.
    let listed = std::fs::read_dir(m.dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name() == "f")
        .unwrap();
    use std::os::unix::fs::DirEntryExt;
    assert_eq!(listed.ino(), std::fs::metadata(m.path("f")).unwrap().ino());
    // An entry keeps its directory open.
    drop(listed);

    // A file unlinked while open keeps its data for the open file, whenever the kernel writes
    // its cached pages back: one made through the mount, and one the mount first saw by a
    // lookup (made in the backing directory).
    std::fs::write(m.backing("seen"), b"").unwrap();
    for name in ["gone", "seen"] {
        let mut g = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(m.path(name))
            .unwrap();
        g.write_all(b"kept").unwrap();
        std::fs::remove_file(m.path(name)).unwrap();
        g.write_all(b" after unlink").unwrap();
        g.sync_all().unwrap();
        g.rewind().unwrap();
        let mut got = String::new();
        g.read_to_string(&mut got).unwrap();
        assert_eq!(got, "kept after unlink", "{name}");
        drop(g);
        assert!(!m.backing(name).exists());
    }

    // `rm -rf`, as the process model runs it, empties the tree.
    let status = std::process::Command::new("rm")
        .arg("-rf")
        .arg(m.path("d"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_file(m.path("f")).unwrap();
    assert!(names(m.dir.path()).is_empty());
    assert!(names(m.backing.path()).is_empty());
    m.unmount();
}
