//! `tailbound fs` end to end: a round trip through every file command on both backends, fsck's
//! exit codes and messages on damaged pools, and the JSON schemas.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tailbound() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailbound"))
}

fn run(args: &[&str]) -> Output {
    tailbound().args(args).output().expect("running tailbound")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A directory for a memory pool: /dev/shm when it exists (so the backend is detected), else a
/// temporary directory with `--backend memory`.
fn shm_dir() -> (tempfile::TempDir, bool) {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(d) => (d, true),
        Err(_) => (tempfile::tempdir().unwrap(), false),
    }
}

fn round_trip(pool: &Path, backend: &str, host: &Path) {
    let p = s(pool);
    let b = ["--backend", backend];
    let out = ok(&[&["fs", "mkfs", p, "--size", "64MiB"][..], &b].concat());
    assert!(out.contains(&format!("{backend} pool")), "{out}");
    let data = content(3_000_123, 1);
    let src = host.join("in.bin");
    std::fs::write(&src, &data).unwrap();
    ok(&[&["fs", "mkdir", "-p", p, "/a/b"][..], &b].concat());
    ok(&[&["fs", "put", p, s(&src), "/a/b"][..], &b].concat());
    ok(&[&["fs", "put", p, s(&src), "/a/second"][..], &b].concat());
    let ls = ok(&[&["fs", "ls", p, "/a/b"][..], &b].concat());
    assert_eq!(ls, "in.bin\n");
    let ls = ok(&[&["fs", "ls", "-l", p, "/a"][..], &b].concat());
    assert!(
        ls.contains(" 3000123 ") && ls.contains("second") && ls.contains("b/"),
        "{ls}"
    );
    let cat = run(&[&["fs", "cat", p, "/a/b/in.bin"][..], &b].concat());
    assert!(cat.status.success(), "{}", text(&cat));
    assert!(cat.stdout == data, "cat returns the bytes put");
    let back = host.join("out.bin");
    ok(&[&["fs", "get", p, "/a/b/in.bin", s(&back)][..], &b].concat());
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get returns the bytes put"
    );
    ok(&[&["fs", "mv", p, "/a/b/in.bin", "/moved"][..], &b].concat());
    assert_eq!(ok(&[&["fs", "ls", p, "/a/b"][..], &b].concat()), "");
    let o = run(&[&["fs", "rm", p, "/a"][..], &b].concat());
    assert!(!o.status.success());
    assert!(
        text(&o).contains("/a (use -r): directory not empty"),
        "{}",
        text(&o)
    );
    ok(&[&["fs", "rm", "-r", p, "/a"][..], &b].concat());
    assert_eq!(ok(&[&["fs", "ls", p][..], &b].concat()), "moved\n");
    let df = ok(&[&["fs", "df", p][..], &b].concat());
    // 255 segments of 256 KiB (`fs format` gives a pool under 2 GiB at least 256).
    assert!(
        df.contains("free") && df.contains("available") && df.contains("63.8 MiB"),
        "{df}"
    );
    let stat = ok(&[&["fs", "stat", p, "/moved"][..], &b].concat());
    assert!(stat.contains("size: 3000123"), "{stat}");
    let fsck = ok(&[&["fs", "fsck", p][..], &b].concat());
    assert!(fsck.contains("clean: 0 damage"), "{fsck}");
    let info = ok(&[&["fs", "info", p][..], &b].concat());
    assert!(
        info.contains("tbfs version 5") && info.contains("ordering relaxed"),
        "{info}"
    );
    let back2 = host.join("out2.bin");
    ok(&[&["fs", "get", p, "/moved", s(&back2)][..], &b].concat());
    assert!(std::fs::read(&back2).unwrap() == data);
}

/// Rewrites both superblock copies of the pool file at `pool` as format version `version`, their
/// CRCs made to match.
fn set_superblock_versions(pool: &Path, version: u32) {
    use tailbound::tbfs::format::{crc_blocks, BLOCK};
    let mut image = std::fs::read(pool).unwrap();
    for copy in 0..2 {
        let b = &mut image[copy * BLOCK..(copy + 1) * BLOCK];
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc_blocks(&b[..BLOCK - 4]);
        b[BLOCK - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(pool, image).unwrap();
}

#[test]
fn info_reports_an_older_pools_version_until_a_write_upgrades_it() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("old.tbfs");
    let p = s(&pool);
    let b = ["--backend", "file"];
    let with = |args: &[&str]| ok(&[args, &b[..]].concat());
    let run_with = |args: &[&str]| run(&[args, &b[..]].concat());
    with(&["fs", "mkfs", p, "--size", "64MiB"]);
    let data = content(100_000, 3);
    let src = dir.path().join("in.bin");
    std::fs::write(&src, &data).unwrap();
    with(&["fs", "put", p, s(&src), "/f"]);
    // Labelled version 1 (its records are this build's; what is checked is the label and the
    // upgrade).
    set_superblock_versions(&pool, 1);
    let info = with(&["fs", "info", p]);
    assert!(info.contains("tbfs version 1"), "{info}");
    // Reading leaves it as it is; a write upgrades both copies first.
    let cat = run_with(&["fs", "cat", p, "/f"]);
    assert!(cat.status.success() && cat.stdout == data, "{}", text(&cat));
    let info = with(&["fs", "info", p]);
    assert!(info.contains("tbfs version 1"), "{info}");
    with(&["fs", "mkdir", "-p", p, "/d"]);
    let info = with(&["fs", "info", p]);
    assert!(info.contains("tbfs version 5"), "{info}");
    let cat = run_with(&["fs", "cat", p, "/f"]);
    assert!(cat.status.success() && cat.stdout == data, "{}", text(&cat));
    // A version this build does not know is refused with the reason.
    set_superblock_versions(&pool, 6);
    for cmd in [&["fs", "info", p][..], &["fs", "ls", p][..]] {
        let o = run_with(cmd);
        assert!(!o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains("format version 6, this build reads 1 to 5"),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn round_trip_on_a_memory_pool() {
    let (dir, _) = shm_dir();
    let host = tempfile::tempdir().unwrap();
    round_trip(&dir.path().join("p.tbfs"), "memory", host.path());
}

#[test]
fn round_trip_on_a_file_pool() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(&dir.path().join("p.tbfs"), "file", dir.path());
}

#[test]
fn the_backend_is_detected_from_where_the_pool_lives() {
    let (dir, is_shm) = shm_dir();
    if !is_shm {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has /dev/shm and must run this test"
        );
        eprintln!("skipping: no /dev/shm to detect a memory pool in");
        return;
    }
    let pool = dir.path().join("p.tbfs");
    let out = ok(&["fs", "mkfs", s(&pool), "--size", "16MiB"]);
    assert!(out.contains("memory pool"), "{out}");
    assert!(ok(&["fs", "info", s(&pool)]).contains("memory backend"));
    let disk = tempfile::tempdir().unwrap();
    let pool = disk.path().join("p.tbfs");
    let out = ok(&["fs", "mkfs", s(&pool), "--size", "16MiB"]);
    assert!(out.contains("file pool"), "{out}");
    // A pool is not overwritten by accident.
    let o = run(&["fs", "mkfs", s(&pool), "--size", "16MiB"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("already holds a tbfs pool (use --force"),
        "{}",
        text(&o)
    );
    ok(&["fs", "mkfs", s(&pool), "--size", "16MiB", "--force"]);
}

/// A file pool holding one file whose bytes are easy to find in the pool file.
fn damaged_setup(dir: &Path) -> (PathBuf, Vec<u8>) {
    let pool = dir.join("p.tbfs");
    ok(&[
        "fs",
        "mkfs",
        s(&pool),
        "--size",
        "32MiB",
        "--backend",
        "file",
    ]);
    let data = content(200_000, 7);
    let src = dir.join("src.bin");
    std::fs::write(&src, &data).unwrap();
    ok(&[
        "fs",
        "put",
        s(&pool),
        s(&src),
        "/data.bin",
        "--backend",
        "file",
    ]);
    (pool, data)
}

fn flip_at(pool: &Path, offset: usize) {
    let mut image = std::fs::read(pool).unwrap();
    image[offset] ^= 0x10;
    std::fs::write(pool, image).unwrap();
}

#[test]
fn fsck_finds_damaged_file_data_and_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, data) = damaged_setup(dir.path());
    let p = s(&pool);
    let image = std::fs::read(&pool).unwrap();
    let needle = &data[8192..8192 + 64];
    let at = image.windows(64).position(|w| w == needle).unwrap();
    flip_at(&pool, at + 5);
    let o = run(&["fs", "fsck", p, "--backend", "file"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("payload CRC mismatch in a log holding live blocks"),
        "{out}"
    );
    assert!(out.contains("damaged: "), "{out}");
    let report = dir.path().join("fsck.json");
    let o = run(&[
        "fs",
        "fsck",
        p,
        "--backend",
        "file",
        "--repair",
        "--json",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("repair (in place)") && out.contains("/data.bin: blocks"),
        "{out}"
    );
    let j = json(&report);
    assert_eq!(j["verdict"], "clean");
    assert!(j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["severity"] == "damage"
            && f["location"]["block"].is_u64()
            && f["message"].as_str().unwrap().contains("payload CRC")));
    assert_eq!(j["repair"]["method"], "in-place");
    // The block's bytes may be damaged; the plain checkpoints of the protection period that
    // still used them are released.
    let lost: Vec<&str> = j["repair"]["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    assert!(
        lost[0].starts_with("/data.bin: blocks") && lost[1].contains("plain checkpoints"),
        "{lost:?}"
    );
    // Clean now; the file kept its bytes as read.
    let o = run(&["fs", "fsck", p, "--backend", "file"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let back = dir.path().join("back.bin");
    ok(&["fs", "get", p, "/data.bin", s(&back), "--backend", "file"]);
    let mut expect = data.clone();
    expect[8192 + 5] ^= 0x10;
    assert!(std::fs::read(&back).unwrap() == expect);
}

#[test]
fn fsck_reports_superblock_damage_and_unrecoverable_pools_with_distinct_codes() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, data) = damaged_setup(dir.path());
    let p = s(&pool);
    flip_at(&pool, 300);
    let o = run(&["fs", "fsck", p, "--backend", "file"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("damage: superblock 0, block 0: invalid: CRC mismatch"),
        "{}",
        text(&o)
    );
    let o = run(&["fs", "fsck", "--repair", p, "--backend", "file"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("lost: nothing"), "{}", text(&o));
    ok(&["fs", "fsck", p, "--backend", "file"]);
    let back = dir.path().join("back.bin");
    ok(&["fs", "get", p, "/data.bin", s(&back), "--backend", "file"]);
    assert!(std::fs::read(&back).unwrap() == data);

    // Nothing left of the pool: unrecoverable, exit 2, with or without --repair.
    let len = std::fs::metadata(&pool).unwrap().len();
    std::fs::write(&pool, vec![0u8; len as usize]).unwrap();
    for repair in [false, true] {
        let mut args = vec!["fs", "fsck", p, "--backend", "file"];
        if repair {
            args.push("--repair");
        }
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("unrecoverable"), "{}", text(&o));
    }
    // No pool at all: fsck could not run.
    let o = run(&[
        "fs",
        "fsck",
        s(&dir.path().join("missing")),
        "--backend",
        "file",
    ]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("No such file"), "{}", text(&o));
    // Other commands say what to do.
    let o = run(&["fs", "ls", p, "--backend", "file"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("no valid superblock") && text(&o).contains("fs fsck"),
        "{}",
        text(&o)
    );
}

#[test]
fn listings_write_their_json_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _) = damaged_setup(dir.path());
    let p = s(&pool);
    ok(&["fs", "mkdir", p, "/d", "--backend", "file"]);
    let ls = dir.path().join("ls.json");
    ok(&["fs", "ls", p, "/", "--json", s(&ls), "--backend", "file"]);
    let j = json(&ls);
    assert_eq!(j["path"], "/");
    let entries = j["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let e = &entries[0];
    assert_eq!(e["name"], "d");
    assert_eq!(e["kind"], "dir");
    for key in ["ino", "size", "mode", "nlink", "mtime_ns"] {
        assert!(e[key].is_u64() || e[key].is_i64(), "{key}: {e}");
    }
    assert_eq!(entries[1]["size"], 200_000);
    let st = dir.path().join("stat.json");
    ok(&[
        "fs",
        "stat",
        p,
        "/data.bin",
        "--json",
        s(&st),
        "--backend",
        "file",
    ]);
    assert_eq!(json(&st)["size"], 200_000);
    let df = dir.path().join("df.json");
    ok(&["fs", "df", p, "--json", s(&df), "--backend", "file"]);
    let j = json(&df);
    let part = |k: &str| j[k].as_u64().unwrap();
    assert_eq!(
        part("size"),
        part("live") + part("pinned_by_snapshots") + part("reclaimable") + part("free")
    );
    assert!(part("live") >= 200_000);
    let ck = dir.path().join("ck.json");
    ok(&["fs", "snapshot", p, "--backend", "file"]);
    ok(&[
        "fs",
        "checkpoints",
        p,
        "--json",
        s(&ck),
        "--backend",
        "file",
    ]);
    let j = json(&ck);
    let list = j["checkpoints"].as_array().unwrap();
    assert!(!list.is_empty());
    assert_eq!(j.as_object().unwrap().len(), 1);
    for c in list {
        let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["number", "pinned_bytes", "snapshot", "time"], "{c}");
        assert!(c["number"].is_u64() && c["pinned_bytes"].is_u64() && c["snapshot"].is_boolean());
        let t = c["time"].as_str().unwrap();
        assert!(
            t.len() == 24 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
    }
    assert!(list.iter().any(|c| c["snapshot"] == true));
    let info = dir.path().join("info.json");
    ok(&["fs", "info", p, "--json", s(&info), "--backend", "file"]);
    let j = json(&info);
    assert_eq!(j["format_version"], 5);
    assert_eq!(j["backend"], "file");
    let fsck = dir.path().join("fsck.json");
    ok(&["fs", "fsck", p, "--json", s(&fsck), "--backend", "file"]);
    let j = json(&fsck);
    assert_eq!(j["verdict"], "clean");
    assert_eq!(j["findings"].as_array().unwrap().len(), 0);
    assert!(j["repair"].is_null());
    assert_eq!(j["stats"]["files"], 1);
}

#[test]
fn snapshots_keep_old_versions_that_ls_cat_get_and_restore_reach() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.tbfs");
    let p = s(&pool);
    let b = ["--backend", "file"];
    let with = |args: &[&str]| ok(&[args, &b[..]].concat());
    with(&["fs", "mkfs", p, "--size", "32MiB"]);
    let v1 = content(150_000, 1);
    let v2 = content(90_000, 2);
    let src1 = dir.path().join("v1");
    let src2 = dir.path().join("v2");
    std::fs::write(&src1, &v1).unwrap();
    std::fs::write(&src2, &v2).unwrap();
    with(&["fs", "mkdir", "-p", p, "/docs/sub"]);
    with(&["fs", "put", p, s(&src1), "/docs/file"]);
    with(&["fs", "put", p, s(&src1), "/docs/sub/deep"]);
    let out = with(&["fs", "snapshot", p, "--name", "before"]);
    let n: u64 = out
        .trim()
        .strip_prefix("snapshot ")
        .and_then(|r| r.split(' ').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    with(&["fs", "put", p, s(&src2), "/docs/file"]);
    with(&["fs", "rm", "-r", p, "/docs/sub"]);
    let list = with(&["fs", "checkpoints", p]);
    assert!(
        list.lines()
            .any(|l| l.contains(&n.to_string()) && l.contains("snapshot") && l.contains("before")),
        "{list}"
    );

    // The live tree has v2 and no sub; checkpoint n has v1 and sub.
    let at = n.to_string();
    let cat = run(&[&["fs", "cat", p, "/docs/file"][..], &b].concat());
    assert!(cat.stdout == v2);
    let cat = run(&[&["fs", "cat", p, "/docs/file", "--at", &at][..], &b].concat());
    assert!(cat.status.success(), "{}", text(&cat));
    assert!(cat.stdout == v1, "cat --at shows the old version");
    assert_eq!(with(&["fs", "ls", p, "/docs"]), "file\n");
    assert_eq!(with(&["fs", "ls", p, "/docs", "--at", &at]), "file\nsub/\n");
    let old = dir.path().join("old");
    with(&["fs", "get", p, "/docs/sub/deep", s(&old), "--at", &at]);
    assert!(std::fs::read(&old).unwrap() == v1);
    assert!(with(&["fs", "stat", p, "/docs/file", "--at", &at]).contains("size: 150000"));
    let o = run(&[&["fs", "cat", p, "/docs/file", "--at", "999999"][..], &b].concat());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("checkpoint 999999 (not retained"),
        "{}",
        text(&o)
    );

    // Restore a file over the live one, a deleted directory, and a file to a new name.
    let out = with(&["fs", "restore", p, "--at", &at, "/docs/file"]);
    assert!(out.contains("1 files"), "{out}");
    assert!(run(&[&["fs", "cat", p, "/docs/file"][..], &b].concat()).stdout == v1);
    with(&["fs", "restore", p, "--at", &at, "/docs/sub"]);
    assert!(run(&[&["fs", "cat", p, "/docs/sub/deep"][..], &b].concat()).stdout == v1);
    with(&[
        "fs",
        "restore",
        p,
        "--at",
        &at,
        "/docs/file",
        "--to",
        "/copy",
    ]);
    assert!(run(&[&["fs", "cat", p, "/copy"][..], &b].concat()).stdout == v1);
    assert_eq!(with(&["fs", "ls", p, "/docs"]), "file\nsub/\n");

    // Drop the snapshot; gc runs and the pool stays clean.
    let out = with(&["fs", "snapshot", p, "--drop", &at]);
    assert!(out.contains("plain checkpoint again"), "{out}");
    let list = with(&["fs", "checkpoints", p]);
    assert!(
        !list
            .lines()
            .any(|l| l.contains("snapshot") && l.contains("before")),
        "{list}"
    );
    let out = with(&["fs", "gc", p, "--target-free", "50%"]);
    assert!(
        out.contains("cleaned") && out.contains("target 50.0%"),
        "{out}"
    );
    assert!(with(&["fs", "fsck", p]).contains("clean: 0 damage"));
    let o = run(&[&["fs", "gc", p, "--target-free", "150%"][..], &b].concat());
    assert!(!o.status.success());
}

#[test]
fn info_says_which_scheduler_profile_a_file_pool_uses() {
    let dir = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.tbfs");
    let p = s(&pool);
    ok(&["fs", "mkfs", p, "--size", "16MiB", "--backend", "file"]);
    let info = |json: &Path| {
        let o = tailbound()
            .args(["fs", "info", p, "--backend", "file", "--json", s(json)])
            .env("XDG_CONFIG_HOME", config.path())
            .output()
            .expect("running tailbound");
        assert!(o.status.success(), "{}", text(&o));
        (String::from_utf8(o.stdout).unwrap(), self::json(json))
    };
    let profiles = config.path().join("tailbound").join("profiles");
    let stored = profiles.join(tailbound::sched::calibrate::profile_file_name(&pool));
    let out = dir.path().join("info.json");

    let (text_out, j) = info(&out);
    assert!(
        text_out.contains("scheduler:   conservative profile (none at"),
        "{text_out}"
    );
    assert_eq!(j["scheduler"]["profile"], "missing");
    assert_eq!(j["scheduler"]["profile_path"], s(&stored));
    assert_eq!(j["scheduler"]["max_io_write"], 1 << 20);
    assert!(j["scheduler"]["flush_debt"].is_null());

    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        &stored,
        r#"{"device":"test","read_io_ns":50000,"read_byte_ns":1.6,"write_io_ns":60000,
            "write_byte_ns":1.6,"flush_ns":100000,"flush_byte_ns":1.6,
            "max_io_read":1048576,"max_io_write":1048576,"latency_goal_ns":5000000}"#,
    )
    .unwrap();
    let (text_out, j) = info(&out);
    assert!(
        text_out.contains("writes to 1 MiB, a flush after 1 MiB written"),
        "{text_out}"
    );
    assert_eq!(j["scheduler"]["profile"], "stored");
    assert_eq!(j["scheduler"]["flush_debt"], 1 << 20);

    std::fs::write(&stored, "{\"device\": 1}").unwrap();
    let (text_out, j) = info(&out);
    assert!(text_out.contains("it is not used"), "{text_out}");
    assert_eq!(j["scheduler"]["profile"], "unreadable");
    assert!(j["scheduler"]["problem"]
        .as_str()
        .unwrap()
        .contains("not a profile"));

    // A memory pool does no I/O: no scheduler.
    let (shm, _) = shm_dir();
    let mem = shm.path().join("m.tbfs");
    ok(&[
        "fs",
        "mkfs",
        s(&mem),
        "--size",
        "16MiB",
        "--backend",
        "memory",
    ]);
    ok(&[
        "fs",
        "info",
        s(&mem),
        "--json",
        s(&out),
        "--backend",
        "memory",
    ]);
    assert!(json(&out)["scheduler"].is_null());
}

/// Where a server of `pool` leaves a note (`.serving`, `.sync-failed`).
fn note(pool: &Path, suffix: &str) -> PathBuf {
    let mut p = pool.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Leaves the notes of a server that was killed after its final sync failed, as no live
/// process: nothing holds the pool's lock.
fn leave_dead_servers_notes(pool: &Path) {
    std::fs::write(
        note(pool, ".serving"),
        "pid 4194999, serving on gone.sock\n",
    )
    .unwrap();
    std::fs::write(note(pool, ".sync-failed"), "fsync: EIO (test)").unwrap();
}

#[test]
fn mkfs_over_a_pool_removes_the_notes_its_last_server_left() {
    let (dir, _) = shm_dir();
    let pool = dir.path().join("p.tbfs");
    let p = s(&pool);
    let b = ["--backend", "memory"];
    ok(&[&["fs", "mkfs", p, "--size", "16MiB"][..], &b].concat());
    leave_dead_servers_notes(&pool);
    // Refused without --force: the old pool and its notes stay.
    let o = run(&[&["fs", "mkfs", p, "--size", "16MiB"][..], &b].concat());
    assert!(!o.status.success(), "{}", text(&o));
    assert!(note(&pool, ".serving").exists() && note(&pool, ".sync-failed").exists());
    let o = run(&[&["fs", "mkfs", p, "--size", "16MiB", "--force"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for suffix in [".serving", ".sync-failed"] {
        assert!(!note(&pool, suffix).exists(), "{suffix} stayed: {err}");
        assert!(
            err.contains(&format!("removed {}", s(&note(&pool, suffix)))),
            "{err}"
        );
    }
    assert!(err.contains("pid 4194999"), "{err}");
    // Nothing of the old server is left to warn of.
    let o = run(&[&["fs", "mkdir", p, "/d"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        text(&o)
    );

    // Notes beside a pool that was deleted go with the new pool made there.
    std::fs::remove_file(&pool).unwrap();
    leave_dead_servers_notes(&pool);
    let o = run(&[&["fs", "mkfs", p, "--size", "16MiB"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(!note(&pool, ".serving").exists() && !note(&pool, ".sync-failed").exists());
}

#[test]
fn a_command_that_writes_a_pool_warns_once_of_what_a_dead_server_left() {
    let (dir, _) = shm_dir();
    let pool = dir.path().join("p.tbfs");
    let p = s(&pool);
    let b = ["--backend", "memory"];
    ok(&[&["fs", "mkfs", p, "--size", "16MiB"][..], &b].concat());
    leave_dead_servers_notes(&pool);
    // A listing changes nothing and leaves the notes to a command that writes.
    let o = run(&[&["fs", "ls", p, "/"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(note(&pool, ".serving").exists() && note(&pool, ".sync-failed").exists());
    let o = run(&[&["fs", "mkdir", p, "/d"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("ended without confirming its final sync")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("pid 4194999"), "{err}");
    assert_eq!(err.matches("final sync failed").count(), 1, "{err}");
    assert!(err.contains("fsync: EIO (test)"), "{err}");
    assert!(!note(&pool, ".serving").exists() && !note(&pool, ".sync-failed").exists());
    let o = run(&[&["fs", "mkdir", p, "/e"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        text(&o)
    );

    // `fsck --repair` changes the pool too; plain `fsck` only reads it.
    leave_dead_servers_notes(&pool);
    let o = run(&[&["fs", "fsck", p][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(note(&pool, ".serving").exists(), "{}", text(&o));
    let o = run(&[&["fs", "fsck", p, "--repair"][..], &b].concat());
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ended without confirming its final sync"),
        "{err}"
    );
    assert!(!note(&pool, ".serving").exists() && !note(&pool, ".sync-failed").exists());
}
