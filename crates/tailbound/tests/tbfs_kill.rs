//! `kill -9` of a real process writing to a tbfs pool on a [`FileDevice`], through the public API.
//!
//! The test binary runs itself again as a child (selected by `TBFS_KILL_CHILD`) that opens the pool
//! with `Barrier::EveryLog`, appends records to a few files and fsyncs each, and prints one line per
//! acknowledged fsync: file, offset, length and CRC32C of the bytes. The parent kills it with SIGKILL
//! after a number of acknowledged lines (never after a time), reopens the pool and checks that every
//! acknowledged record is there byte for byte. Several rounds share one pool, so each round also
//! recovers what the previous kills left.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use tailbound::dev::file::FileDevice;
use tailbound::tbfs::{Barrier, Config, Fs, OpenFlags, OpenOptions, Ordering};

const TEST_NAME: &str = "kill_nine_loses_no_acknowledged_fsync";
const CHILD_ENV: &str = "TBFS_KILL_CHILD";
const ACK_PREFIX: &str = "TBFS-ACK";
const POOL_BYTES: u64 = 64 << 20;
const ROUNDS: u64 = 4;
/// Acknowledged records before the kill, per round (varied so kills land in different places).
const ACKS_BEFORE_KILL: [u64; ROUNDS as usize] = [40, 97, 23, 151];
const FILES: [&str; 3] = ["/rec0", "/dir/rec1", "/dir/rec2"];
const RECORD_BYTES_MAX: u64 = 20 << 10;
/// A child that has not been killed after this many records has missed its kill: stop it.
const RECORDS_MAX: u64 = 100_000;

/// A record's bytes: a function of round and sequence only, so either side can make them.
fn record(round: u64, seq: u64) -> Vec<u8> {
    let mut x = (round << 32 | seq).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let len = 1 + x % RECORD_BYTES_MAX;
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

fn config() -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier: Barrier::EveryLog,
        segment_bytes: 1 << 20,
        superblock_every_bytes: 4 << 20,
        checkpoint_every: None,
        ..Config::default()
    }
}

/// Child: append and fsync records until killed; one line on stdout per acknowledged fsync.
fn child(pool: &Path, round: u64) {
    let fs = if round == 0 {
        let dev = FileDevice::create(pool, POOL_BYTES).expect("child: create the pool file");
        let fs = Fs::format(Arc::new(dev), &config()).expect("child: format");
        fs.mkdir("/dir", 0o755).expect("child: mkdir");
        fs.sync().expect("child: sync");
        fs
    } else {
        let dev = FileDevice::open(pool).expect("child: open the pool file");
        Fs::open(Arc::new(dev), &OpenOptions::default()).expect("child: Fs::open")
    };
    let files: Vec<_> = FILES
        .iter()
        .map(|p| fs.open_file(p, OpenFlags::create()).expect("child: open"))
        .collect();
    let mut out = std::io::stdout().lock();
    for seq in 0..RECORDS_MAX {
        let i = (seq % FILES.len() as u64) as usize;
        let data = record(round, seq);
        let offset = files[i].stat().expect("child: stat").size;
        files[i].pwrite(&data, offset).expect("child: pwrite");
        // Every fifth record stays un-synced until the next one on that file: not acknowledged.
        if seq % 5 == 4 {
            continue;
        }
        if seq % 7 == 0 {
            files[i].fdatasync().expect("child: fdatasync");
        } else {
            files[i].fsync().expect("child: fsync");
        }
        writeln!(
            out,
            "{ACK_PREFIX} {} {offset} {} {:08x}",
            FILES[i],
            data.len(),
            crc32c::crc32c(&data)
        )
        .and_then(|()| out.flush())
        .expect("child: stdout");
    }
    panic!("child: never killed after {RECORDS_MAX} records");
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ack {
    path: String,
    offset: u64,
    len: u64,
    crc: u32,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let mut it = line.strip_prefix(ACK_PREFIX)?.split_whitespace();
    let ack = Ack {
        path: it.next()?.to_string(),
        offset: it.next()?.parse().ok()?,
        len: it.next()?.parse().ok()?,
        crc: u32::from_str_radix(it.next()?, 16).ok()?,
    };
    it.next().is_none().then_some(ack)
}

/// Runs one child round; returns the records it acknowledged before it died.
fn run_round(pool: &Path, round: u64) -> Vec<Ack> {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}:{round}", pool.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut stdout = BufReader::new(child.stdout.take().expect("child stdout"));
    let mut acks = Vec::new();
    let kill_after = ACKS_BEFORE_KILL[round as usize];
    let mut line = String::new();
    while (acks.len() as u64) < kill_after {
        line.clear();
        let n = stdout
            .read_line(&mut line)
            .expect("read the child's stdout");
        if n == 0 {
            let mut err = String::new();
            let _ = child
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut err);
            panic!(
                "round {round}: the child ended after {} acknowledged records: {}\n{err}",
                acks.len(),
                child.wait().expect("wait")
            );
        }
        acks.extend(parse_ack(line.trim_end()));
    }
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("wait for the child");
    assert!(
        !status.success(),
        "round {round}: the child exited by itself"
    );
    // Lines already in the pipe were acknowledged before the kill; a cut-off last line was not.
    let mut rest = String::new();
    stdout
        .read_to_string(&mut rest)
        .expect("drain the child's stdout");
    let complete = rest.rfind('\n').map_or("", |i| &rest[..i]);
    acks.extend(complete.lines().filter_map(parse_ack));
    acks
}

/// Every acknowledged record is in the pool with exactly its bytes.
fn check_pool(pool: &Path, acks: &[Ack], round: u64, new: usize) {
    let dev = FileDevice::open(pool).expect("parent: open the pool file");
    let fs = Fs::open(Arc::new(dev), &OpenOptions::default())
        .unwrap_or_else(|e| panic!("round {round}: Fs::open after SIGKILL: {e}"));
    let mut files = BTreeMap::new();
    for (n, ack) in acks.iter().enumerate() {
        let f = files.entry(ack.path.clone()).or_insert_with(|| {
            fs.open_file(&ack.path, OpenFlags::read_only())
                .unwrap_or_else(|e| panic!("round {round}: acknowledged {} is gone: {e}", ack.path))
        });
        let mut buf = vec![0u8; ack.len as usize];
        let got = f
            .pread(&mut buf, ack.offset)
            .unwrap_or_else(|e| panic!("round {round}: pread {}: {e}", ack.path));
        assert_eq!(
            (got, crc32c::crc32c(&buf)),
            (ack.len as usize, ack.crc),
            "round {round}: acknowledged record #{n} {ack:?} does not read back \
             (bytes read, CRC32C); recovery: {:?}",
            fs.recovery_report()
        );
    }
    let r = fs.recovery_report();
    println!(
        "round {round}: {new} records acknowledged before SIGKILL, all {} so far read back; \
         recovery rolled forward {} logs ({} bytes) and stopped at: {}",
        acks.len(),
        r.logs_rolled_forward,
        r.bytes_rolled_forward,
        r.stop_reason
    );
    fs.close().expect("parent: close");
}

#[test]
fn kill_nine_loses_no_acknowledged_fsync() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (pool, round) = spec
            .rsplit_once(':')
            .expect("TBFS_KILL_CHILD is pool:round");
        child(Path::new(pool), round.parse().expect("round"));
        return;
    }
    // O_DIRECT needs a real file system: the target directory, not a tmpfs /tmp.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let pool = dir.path().join("pool");
    let mut acked = Vec::new();
    for round in 0..ROUNDS {
        let acks = run_round(&pool, round);
        assert!(
            acks.len() as u64 >= ACKS_BEFORE_KILL[round as usize],
            "round {round}: too few acknowledgements"
        );
        let new = acks.len();
        acked.extend(acks);
        check_pool(&pool, &acked, round, new);
    }
}

#[test]
fn ack_lines_parse() {
    let a = Ack {
        path: "/dir/rec1".into(),
        offset: 4096,
        len: 17,
        crc: 0xdead_beef,
    };
    let line = format!(
        "{ACK_PREFIX} {} {} {} {:08x}",
        a.path, a.offset, a.len, a.crc
    );
    assert_eq!(parse_ack(&line), Some(a));
    assert_eq!(parse_ack("TBFS-ACK /x 1 2"), None);
    assert_eq!(parse_ack("running 1 test"), None);
    assert_eq!(record(1, 2), record(1, 2));
    assert_ne!(record(1, 2), record(2, 1));
}
