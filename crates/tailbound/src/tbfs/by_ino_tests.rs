//! Tests of the inode-number API (`by_ino`): each call against what the path API and a reopened
//! pool then see.

use std::sync::Arc;
use std::time::Duration;

use super::by_ino::ROOT;
use super::*;
use crate::dev::sim::SimDevice;
use crate::dev::Device;

const OWNER: (u32, u32) = (1234, 567);

fn config() -> Config {
    Config {
        segment_bytes: 64 << 10,
        superblock_every_bytes: 256 << 10,
        superblock_every: Duration::from_secs(3600),
        checkpoint_every: None,
        dirty_bytes_max: 1 << 20,
        protection_period: Duration::ZERO,
        background_gc: false,
        ..Config::default()
    }
}

fn pool() -> (Arc<SimDevice>, Fs) {
    let dev = Arc::new(SimDevice::new(16 << 20));
    let fs = Fs::format(dev.clone(), &config()).unwrap();
    (dev, fs)
}

/// The pool as a crash now would leave it, after fsck found it clean.
fn reopened(dev: &SimDevice) -> Fs {
    let image: Arc<dyn Device> = Arc::new(SimDevice::from_image(dev.image()));
    let report = fsck::check(&*image).unwrap();
    assert_eq!(report.verdict, fsck::Verdict::Clean, "{report:#?}");
    Fs::open(image, &OpenOptions::default()).unwrap()
}

fn rw() -> OpenFlags {
    OpenFlags {
        read: true,
        write: true,
        mode: 0o640,
        ..OpenFlags::default()
    }
}

#[test]
fn lookup_and_stat_by_inode_agree_with_the_path_api() {
    let (_dev, fs) = pool();
    fs.mkdir("/d", 0o755).unwrap();
    fs.open_file("/d/f", OpenFlags::create())
        .unwrap()
        .pwrite(b"hello", 0)
        .unwrap();
    let d = fs.lookup_in(ROOT, "d").unwrap();
    assert_eq!(d, fs.stat("/d").unwrap());
    let f = fs.lookup_in(d.ino, "f").unwrap();
    assert_eq!((f.kind, f.size), (FileKind::File, 5));
    assert_eq!(fs.stat_ino(f.ino).unwrap(), fs.stat("/d/f").unwrap());
    assert_eq!(fs.lookup_in(d.ino, ".").unwrap().ino, d.ino);
    assert_eq!(fs.lookup_in(d.ino, "..").unwrap().ino, ROOT);
    assert_eq!(
        fs.lookup_in(d.ino, "nope").unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(fs.lookup_in(f.ino, "x").unwrap_err().errno(), libc::ENOTDIR);
    let long = "n".repeat(256);
    assert_eq!(
        fs.lookup_in(ROOT, &long).unwrap_err().errno(),
        libc::ENAMETOOLONG
    );
    assert_eq!(fs.stat_ino(9999).unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn create_open_and_truncate_by_inode() {
    let (dev, fs) = pool();
    let f = fs.create_in(ROOT, "a", rw(), OWNER).unwrap();
    f.pwrite(b"0123456789", 0).unwrap();
    let st = f.stat().unwrap();
    assert_eq!((st.uid, st.gid, st.mode), (OWNER.0, OWNER.1, 0o640));
    let excl = OpenFlags {
        create: true,
        exclusive: true,
        ..rw()
    };
    assert_eq!(
        fs.create_in(ROOT, "a", excl, OWNER).unwrap_err().errno(),
        libc::EEXIST
    );
    // Without O_EXCL an existing name is opened, and O_TRUNC empties it.
    let again = fs
        .create_in(
            ROOT,
            "a",
            OpenFlags {
                truncate: true,
                ..rw()
            },
            OWNER,
        )
        .unwrap();
    assert_eq!(again.ino(), f.ino());
    assert_eq!(fs.stat("/a").unwrap().size, 0);
    again.pwrite(b"abc", 0).unwrap();
    let r = fs.open_ino(f.ino(), OpenFlags::read_only()).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(r.pread(&mut buf, 0).unwrap(), 3);
    assert_eq!(&buf[..3], b"abc");
    assert_eq!(fs.set_len_ino(f.ino(), 1).unwrap().size, 1);
    assert_eq!(
        fs.open_ino(ROOT, rw()).unwrap_err().errno(),
        libc::EISDIR,
        "a directory opens for reading only"
    );
    assert_eq!(
        fs.create_in(ROOT, "a/b", rw(), OWNER).unwrap_err().errno(),
        libc::EINVAL
    );
    drop((f, again, r));
    fs.sync().unwrap();
    assert_eq!(reopened(&dev).stat("/a").unwrap().size, 1);
}

#[test]
fn mkdir_symlink_link_unlink_and_rmdir_by_inode() {
    let (dev, fs) = pool();
    let d = fs.mkdir_in(ROOT, "d", 0o750, OWNER).unwrap();
    assert_eq!(
        (d.kind, d.mode, d.nlink, d.uid),
        (FileKind::Dir, 0o750, 2, OWNER.0)
    );
    assert_eq!(fs.stat_ino(ROOT).unwrap().nlink, 3);
    assert_eq!(
        fs.mkdir_in(ROOT, "d", 0o750, OWNER).unwrap_err().errno(),
        libc::EEXIST
    );
    let l = fs.symlink_in(d.ino, "l", "../t", OWNER).unwrap();
    assert_eq!((l.kind, l.size), (FileKind::Symlink, 4));
    assert_eq!(fs.readlink_ino(l.ino).unwrap(), "../t");
    let f = fs.create_in(d.ino, "f", rw(), OWNER).unwrap();
    let linked = fs.link_in(f.ino(), ROOT, "g").unwrap();
    assert_eq!((linked.ino, linked.nlink), (f.ino(), 2));
    assert_eq!(
        fs.link_in(d.ino, ROOT, "dd").unwrap_err().errno(),
        libc::EPERM,
        "no hard link to a directory"
    );
    let names: Vec<String> = fs
        .readdir_ino(d.ino)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["f", "l"]);
    assert_eq!(fs.rmdir_in(ROOT, "d").unwrap_err().errno(), libc::ENOTEMPTY);
    assert_eq!(fs.unlink_in(ROOT, "d").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.rmdir_in(ROOT, "g").unwrap_err().errno(), libc::ENOTDIR);
    fs.unlink_in(d.ino, "f").unwrap();
    fs.unlink_in(d.ino, "l").unwrap();
    assert_eq!(fs.stat("/g").unwrap().nlink, 1);
    fs.rmdir_in(ROOT, "d").unwrap();
    assert_eq!(fs.stat_ino(ROOT).unwrap().nlink, 2);
    assert_eq!(fs.stat_ino(d.ino).unwrap_err().errno(), libc::ENOENT);
    // The unlinked file's open handle still works; its last name is gone once `g` goes too.
    fs.unlink_in(ROOT, "g").unwrap();
    f.pwrite(b"still here", 0).unwrap();
    assert_eq!(fs.stat_ino(f.ino()).unwrap().nlink, 0);
    assert_eq!(
        fs.link_in(f.ino(), ROOT, "back").unwrap_err().errno(),
        libc::ENOENT,
        "an unlinked file gets no new name"
    );
    drop(f);
    fs.sync().unwrap();
    assert!(reopened(&dev).readdir("/").unwrap().is_empty());
}

#[test]
fn special_files_keep_their_kind_and_device_number_across_a_reopen() {
    let (dev, fs) = pool();
    let rdev = (8 << 8) | 3; // major 8, minor 3
    let fifo = fs
        .mknod_in(ROOT, "fifo", FileKind::Fifo, 0o600, 77, OWNER)
        .unwrap();
    assert_eq!(
        (fifo.kind, fifo.rdev),
        (FileKind::Fifo, 0),
        "only devices keep rdev"
    );
    let blk = fs
        .mknod_in(ROOT, "blk", FileKind::BlockDevice, 0o660, rdev, OWNER)
        .unwrap();
    fs.mknod_in(ROOT, "chr", FileKind::CharDevice, 0o666, rdev + 1, OWNER)
        .unwrap();
    fs.mknod_in(ROOT, "sock", FileKind::Socket, 0o755, 0, OWNER)
        .unwrap();
    let reg = fs
        .mknod_in(ROOT, "reg", FileKind::File, 0o644, 0, OWNER)
        .unwrap();
    assert_eq!((reg.kind, reg.size), (FileKind::File, 0));
    assert_eq!(
        fs.mknod_in(ROOT, "dir", FileKind::Dir, 0o755, 0, OWNER)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.open_ino(blk.ino, OpenFlags::read_only())
            .unwrap_err()
            .errno(),
        libc::EINVAL,
        "a special file's I/O is the kernel's"
    );
    fs.sync().unwrap();
    let again = reopened(&dev);
    let kinds: Vec<(String, FileKind)> = again
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("blk".to_string(), FileKind::BlockDevice),
            ("chr".to_string(), FileKind::CharDevice),
            ("fifo".to_string(), FileKind::Fifo),
            ("reg".to_string(), FileKind::File),
            ("sock".to_string(), FileKind::Socket),
        ]
    );
    let st = again.lstat("/chr").unwrap();
    assert_eq!((st.rdev, st.mode, st.uid), (rdev + 1, 0o666, OWNER.0));
    assert_eq!(again.lstat("/blk").unwrap().rdev, rdev);
    again.unlink("/blk").unwrap();
    again.sync().unwrap();
}

#[test]
fn rename_replaces_refuses_or_exchanges_as_asked() {
    let (dev, fs) = pool();
    let a = fs.mkdir_in(ROOT, "a", 0o755, OWNER).unwrap();
    let b = fs.mkdir_in(ROOT, "b", 0o755, OWNER).unwrap();
    let x = fs.create_in(a.ino, "x", rw(), OWNER).unwrap();
    x.pwrite(b"x", 0).unwrap();
    let y = fs.create_in(b.ino, "y", rw(), OWNER).unwrap();
    y.pwrite(b"yy", 0).unwrap();
    let sub = fs.mkdir_in(a.ino, "sub", 0o755, OWNER).unwrap();

    // NOREPLACE refuses an existing name, and renames to a free one.
    assert_eq!(
        fs.rename_in(a.ino, "x", b.ino, "y", RenameMode::NoReplace)
            .unwrap_err()
            .errno(),
        libc::EEXIST
    );
    fs.rename_in(a.ino, "x", b.ino, "x2", RenameMode::NoReplace)
        .unwrap();
    assert_eq!(fs.stat("/b/x2").unwrap().ino, x.ino());
    assert!(fs.stat("/a/x").is_err());

    // EXCHANGE swaps a file and a directory in different parents, moving the `..` link.
    assert_eq!(
        fs.rename_in(a.ino, "none", b.ino, "y", RenameMode::Exchange)
            .unwrap_err()
            .errno(),
        libc::ENOENT
    );
    assert_eq!(
        fs.rename_in(b.ino, "y", a.ino, "none", RenameMode::Exchange)
            .unwrap_err()
            .errno(),
        libc::ENOENT,
        "an exchange needs both names"
    );
    fs.rename_in(a.ino, "sub", b.ino, "y", RenameMode::Exchange)
        .unwrap();
    assert_eq!(fs.stat("/a/sub").unwrap().ino, y.ino());
    assert_eq!(fs.stat("/b/y").unwrap().ino, sub.ino);
    assert_eq!(fs.stat_ino(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.stat_ino(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup_in(sub.ino, "..").unwrap().ino, b.ino);

    // A directory cannot move (or be exchanged) into itself.
    assert_eq!(
        fs.rename_in(ROOT, "b", sub.ino, "in", RenameMode::Replace)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.rename_in(b.ino, "y", ROOT, "b", RenameMode::Exchange)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );

    // Replace: a file over a file drops the old one; not a directory over a file.
    fs.rename_in(b.ino, "x2", a.ino, "sub", RenameMode::Replace)
        .unwrap();
    assert_eq!(fs.stat("/a/sub").unwrap().ino, x.ino());
    assert_eq!(fs.stat_ino(y.ino()).unwrap().nlink, 0);
    assert_eq!(
        fs.rename_in(b.ino, "y", a.ino, "sub", RenameMode::Replace)
            .unwrap_err()
            .errno(),
        libc::ENOTDIR
    );
    drop((x, y));
    fs.sync().unwrap();
    let again = reopened(&dev);
    assert_eq!(again.readdir("/a").unwrap().len(), 1);
    assert_eq!(again.stat("/b/y").unwrap().kind, FileKind::Dir);
    assert_eq!(again.stat("/b").unwrap().nlink, 3);
}

#[test]
fn attributes_change_by_inode() {
    let (_dev, fs) = pool();
    let f = fs.create_in(ROOT, "f", rw(), OWNER).unwrap();
    let before = f.stat().unwrap();
    let st = fs
        .set_attr_ino(
            f.ino(),
            &SetAttr {
                mode: Some(0o4711),
                uid: Some(1),
                mtime_ns: Some(42),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(
        (st.mode, st.uid, st.gid, st.mtime_ns),
        (0o4711, 1, OWNER.1, 42)
    );
    assert!(st.ctime_ns >= before.ctime_ns);
    assert_eq!(fs.stat("/f").unwrap(), st);
    let d = fs.mkdir_in(ROOT, "d", 0o755, OWNER).unwrap();
    assert_eq!(fs.set_len_ino(d.ino, 0).unwrap_err().errno(), libc::EISDIR);
}

#[test]
fn a_snapshot_view_answers_by_inode_as_the_tree_was() {
    let (_dev, fs) = pool();
    let d = fs.mkdir_in(ROOT, "d", 0o755, OWNER).unwrap();
    let f = fs.create_in(d.ino, "f", rw(), OWNER).unwrap();
    f.pwrite(b"before", 0).unwrap();
    fs.symlink_in(ROOT, "l", "d/f", OWNER).unwrap();
    let number = fs.snapshot(Some("one")).unwrap();
    f.pwrite(b"AFTER!", 0).unwrap();
    fs.unlink_in(ROOT, "l").unwrap();
    fs.create_in(d.ino, "new", rw(), OWNER).unwrap();

    let view = fs.at(number).unwrap();
    let vd = view.lookup_in(ROOT, "d").unwrap();
    assert_eq!(vd.kind, FileKind::Dir);
    let names: Vec<String> = view
        .readdir_ino(vd.ino)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        ["f"],
        "the file made after the snapshot is not in it"
    );
    let vf = view.lookup_in(vd.ino, "f").unwrap();
    let mut buf = [0u8; 16];
    let n = view.pread_ino(vf.ino, &mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"before");
    let vl = view.lookup_in(ROOT, "l").unwrap();
    assert_eq!(view.readlink_ino(vl.ino).unwrap(), "d/f");
    assert_eq!(view.lookup_in(vd.ino, "..").unwrap().ino, ROOT);
    assert_eq!(
        view.lookup_in(ROOT, "new").unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(view.readdir_ino(vf.ino).unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(
        view.pread_ino(vd.ino, &mut buf, 0).unwrap_err().errno(),
        libc::EINVAL
    );
    // The live tree moved on.
    let live = fs.lookup_in(d.ino, "f").unwrap();
    let r = fs.open_ino(live.ino, OpenFlags::read_only()).unwrap();
    let n = r.pread(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"AFTER!");
}
