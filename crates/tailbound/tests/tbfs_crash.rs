//! Crash-safety proof for tbfs on the simulated device, through the public API only.
//!
//! A seeded workload (create, write anywhere, truncate, rename, unlink of open files, mkdir, rmdir,
//! fsync, fdatasync, `Fs::sync`, reopening handles) runs against a model that keeps every namespace
//! state and every version of every file, and what was acknowledged durable. At random points the
//! simulated device is crashed, either between operations or in the middle of one (power cut after a
//! random number of writes); the crash image is recovered with `Fs::open` and checked:
//!
//! - (a) the tree equals the model's tree at some point no older than the last durable one, so a
//!   rename is atomic and nothing durable is undone;
//! - (b) every file's size is the size of one of its versions no older than the last durable one,
//!   and each 4 KiB block holds that block of such a version (no byte that was never written);
//! - (c) every file whose data and name were acknowledged durable is there;
//! - (d) the recovered pool keeps working: more operations, a sync, a crash, and all of it is there;
//! - (e) opening the recovered pool again, cleanly or after a crash, gives the same tree.
//!
//! Every other workload (odd seeds) runs on a device that says its writes are memory copies, as the
//! memory pool does, so the engine writes each log block in place and the log's summary last.
//!
//! What "acknowledged durable" means depends on the barrier policy: with `Barrier::EveryLog` every
//! successful fsync, fdatasync, O_SYNC/O_DSYNC write and `Fs::sync`; with any other policy only
//! `Fs::sync` (an fsync may be acknowledged from the volatile cache there, as documented).
//!
//! A second test crashes the device in the middle of `gc`, `snapshot`, `set_snapshot(.., false)`
//! and writes that make writers clean, on a pool holding snapshots over half-dead segments, and
//! checks that the recovered tree is the one before (or after) the operation and that every listed
//! snapshot reads exactly as the files were when it was taken.
//!
//! Replay one failing run with `TBFS_CRASH_SEED=<seed> cargo test -p tailbound --test tbfs_crash
//! <test> -- --exact`; scale the number of crash states per test with `TBFS_CRASH_STATES=<n>`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::SeekFrom;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailbound::dev::sim::{SimDevice, SimFaults};
use tailbound::dev::BLOCK_SIZE;
use tailbound::tbfs::{
    Barrier, Clock, Config, Error, File, FileKind, Fs, OpenFlags, OpenOptions, Ordering, SyncMode,
};

const BLOCK: usize = BLOCK_SIZE as usize;
const DEVICE_BYTES: u64 = 8 << 20;
const SEGMENT_BYTES: u64 = 256 << 10;
const SUPERBLOCK_EVERY_BYTES: u64 = 512 << 10;
/// Files never grow past this, so live data stays far below the device size.
const FILE_BYTES_MAX: u64 = 256 << 10;
const WRITE_BYTES_MAX: u64 = 64 << 10;
/// ... except sparse files written far out, past what one map node covers (511 blocks).
const SPARSE_BYTES_MAX: u64 = 3 << 20;
/// A file bigger than this (in any test here) is a garbage size: refuse to allocate it.
const READ_BYTES_MAX: u64 = 2 * DEVICE_BYTES;
const FILES_MAX: usize = 10;
const DIRS_MAX: usize = 5;
const HANDLES_MAX: usize = 6;
/// Deepest directory that gets children: `/d0/d1` holds files but no further directories.
const DIR_DEPTH_MAX: usize = 2;
const FILE_NAMES: [&str; 5] = ["f0", "f1", "f2", "f3", "f4"];
const DIR_NAMES: [&str; 3] = ["d0", "d1", "d2"];
/// Operations of one workload before its final crash.
const RUN_OPS_MIN: u64 = 24;
const RUN_OPS_MAX: u64 = 72;
/// One workload in this many is long enough to write the device over several times, so segments
/// are reused and superblocks refreshed many times before its crashes.
const LONG_RUN_EVERY: u64 = 4;
const LONG_RUN_OPS_MIN: u64 = 1200;
const LONG_RUN_OPS_MAX: u64 = 2400;
/// Crash images checked between operations in one workload, on average.
const RUN_BETWEEN_STATES: u64 = 6;
/// Writes let through after `cut_power_after` is armed, at most.
const CUT_WRITES_MAX: u64 = 24;
/// Operations issued after the first failure of a power-cut run (results ignored).
const AFTER_FAILURE_OPS: u64 = 6;
/// Operations run on a recovered pool before its own sync and crash (check d).
const AFTER_RECOVERY_OPS: u64 = 10;
/// One crash state in this many also crashes during its first recovery.
const CRASH_IN_RECOVERY_EVERY: u64 = 4;
/// Writes recovery gets through before that crash, at most.
const CRASH_IN_RECOVERY_WRITES_MAX: u64 = 6;
/// One crash state in this many also gets the checks on the recovered pool (d, e).
const DEEP_CHECK_EVERY: u64 = 3;
/// Crash states per test when `TBFS_CRASH_STATES` is not set.
const STATES_DEFAULT: u64 = 400;
/// Operations shown before a failure.
const LOG_TAIL_LINES: usize = 120;
/// An inode number the model does not know (the operation that would have told it failed).
const INO_UNKNOWN: u64 = u64::MAX;

// ---------------------------------------------------------------------------------------------
// Random numbers: SplitMix64, so one seed replays one run on any machine.

#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c908)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`; `n` > 0.
    fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Bytes a write puts down: seeded, and never a run of zeros, so a hole or a lost block shows.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&(rng.next_u64() | 0x0101_0101_0101_0101).to_le_bytes());
    }
    out.truncate(len);
    out
}

// ---------------------------------------------------------------------------------------------
// The model.

type FileId = usize;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir { ino: u64 },
    File { id: FileId, ino: u64 },
}

/// A namespace state: every path below the root (`/a`, `/a/b`) and what it names.
type Tree = BTreeMap<String, Node>;

#[derive(Clone, Debug)]
struct FileModel {
    /// Contents after each write or truncate; version 0 is the content at creation.
    versions: Vec<Rc<Vec<u8>>>,
    /// Index of the last version acknowledged durable (0 for a new file: no promise yet).
    durable: usize,
}

#[derive(Clone, Debug)]
struct Model {
    /// The namespace after each namespace operation; `trees[0]` is the starting tree.
    trees: Vec<Rc<Tree>>,
    /// Index of the last namespace state acknowledged durable.
    ns_durable: usize,
    files: Vec<FileModel>,
}

/// What had been done and acknowledged at one instant. The model only ever appends, so lengths
/// are enough to look back at it.
#[derive(Clone, Debug)]
struct Mark {
    trees: usize,
    ns_durable: usize,
    /// Per file: versions so far, and the last durable one.
    files: Vec<(usize, usize)>,
}

impl Model {
    fn new(tree: Tree, files: Vec<FileModel>) -> Model {
        Model {
            trees: vec![Rc::new(tree)],
            ns_durable: 0,
            files,
        }
    }

    /// A model whose starting state is `snap`, all of it durable.
    fn from_snapshot(snap: &Snapshot) -> Model {
        let mut tree = Tree::new();
        let mut files = Vec::new();
        for (path, e) in snap {
            let node = match e {
                Entry::Dir { ino } => Node::Dir { ino: *ino },
                Entry::File { ino, data } => {
                    files.push(FileModel {
                        versions: vec![Rc::new(data.clone())],
                        durable: 0,
                    });
                    Node::File {
                        id: files.len() - 1,
                        ino: *ino,
                    }
                }
            };
            tree.insert(path.clone(), node);
        }
        Model::new(tree, files)
    }

    fn tree(&self) -> &Tree {
        self.trees.last().expect("the model always has a tree")
    }

    fn push_tree(&mut self, tree: Tree) {
        self.trees.push(Rc::new(tree));
    }

    fn content(&self, id: FileId) -> &Rc<Vec<u8>> {
        self.files[id]
            .versions
            .last()
            .expect("a file has a version")
    }

    fn new_file(&mut self) -> FileId {
        self.files.push(FileModel {
            versions: vec![Rc::new(Vec::new())],
            durable: 0,
        });
        self.files.len() - 1
    }

    fn push_version(&mut self, id: FileId, data: Vec<u8>) {
        self.files[id].versions.push(Rc::new(data));
    }

    fn sync_file(&mut self, id: FileId) {
        let f = &mut self.files[id];
        f.durable = f.versions.len() - 1;
        // No later check looks before the durable version: keep the indices, free the bytes.
        let gone = Rc::new(Vec::new());
        for v in &mut f.versions[..f.durable] {
            *v = gone.clone();
        }
    }

    fn sync_all(&mut self) {
        self.ns_durable = self.trees.len() - 1;
        for id in 0..self.files.len() {
            self.sync_file(id);
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            trees: self.trees.len(),
            ns_durable: self.ns_durable,
            files: self
                .files
                .iter()
                .map(|f| (f.versions.len(), f.durable))
                .collect(),
        }
    }

    /// The tree and contents a clean open must show once everything is durable.
    fn expected(&self) -> Snapshot {
        self.tree()
            .iter()
            .map(|(path, node)| {
                let e = match node {
                    Node::Dir { ino } => Entry::Dir { ino: *ino },
                    Node::File { id, ino } => Entry::File {
                        ino: *ino,
                        data: self.content(*id).to_vec(),
                    },
                };
                (path.clone(), e)
            })
            .collect()
    }
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.matches('/').count()
    }
}

fn children<'a>(tree: &'a Tree, dir: &'a str) -> impl Iterator<Item = &'a String> + 'a {
    tree.keys()
        .filter(move |p| p.as_str() != "/" && parent_of(p) == dir)
}

fn is_under(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

fn file_paths(tree: &Tree) -> Vec<String> {
    tree.iter()
        .filter(|(_, n)| matches!(n, Node::File { .. }))
        .map(|(p, _)| p.clone())
        .collect()
}

fn dir_paths(tree: &Tree) -> Vec<String> {
    tree.iter()
        .filter(|(_, n)| matches!(n, Node::Dir { .. }))
        .map(|(p, _)| p.clone())
        .collect()
}

/// Applies `rename(from, to)` to a tree: `to` (a file or an empty directory) is replaced, and a
/// directory takes its whole subtree along.
fn renamed(tree: &Tree, from: &str, to: &str) -> Tree {
    let mut out = Tree::new();
    for (path, node) in tree {
        if path == to || is_under(path, to) {
            continue;
        }
        if path == from {
            out.insert(to.to_string(), node.clone());
        } else if is_under(path, from) {
            out.insert(format!("{to}{}", &path[from.len()..]), node.clone());
        } else {
            out.insert(path.clone(), node.clone());
        }
    }
    out
}

/// `data` with `buf` written at `offset` (a gap past the end reads as zeros).
fn written(data: &[u8], offset: u64, buf: &[u8]) -> Vec<u8> {
    let end = offset as usize + buf.len();
    let mut out = resized(data, end.max(data.len()) as u64);
    out[offset as usize..end].copy_from_slice(buf);
    out
}

fn resized(data: &[u8], len: u64) -> Vec<u8> {
    // Zeroed allocation and one copy: `Vec::resize` is a byte loop in debug builds.
    let mut out = vec![0u8; len as usize];
    let keep = data.len().min(out.len());
    out[..keep].copy_from_slice(&data[..keep]);
    out
}

// ---------------------------------------------------------------------------------------------
// What a pool holds, read through the public API.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Dir { ino: u64 },
    File { ino: u64, data: Vec<u8> },
}

type Snapshot = BTreeMap<String, Entry>;

fn snapshot(fs: &Fs) -> Result<Snapshot, String> {
    let mut out = Snapshot::new();
    let mut todo = vec!["/".to_string()];
    while let Some(dir) = todo.pop() {
        let entries = fs
            .readdir(&dir)
            .map_err(|e| format!("readdir {dir}: {e}"))?;
        for e in entries {
            let path = join(&dir, &e.name);
            let st = fs.stat(&path).map_err(|e| format!("stat {path}: {e}"))?;
            if st.ino != e.ino || st.kind != e.kind {
                return Err(format!(
                    "{path}: readdir says ino {} {:?}, stat says ino {} {:?}",
                    e.ino, e.kind, st.ino, st.kind
                ));
            }
            match e.kind {
                FileKind::Dir => {
                    out.insert(path.clone(), Entry::Dir { ino: e.ino });
                    todo.push(path);
                }
                FileKind::File => {
                    let f = fs
                        .open_file(&path, OpenFlags::read_only())
                        .map_err(|e| format!("open {path}: {e}"))?;
                    let data = read_all(&f, st.size).map_err(|e| format!("read {path}: {e}"))?;
                    out.insert(path, Entry::File { ino: e.ino, data });
                }
                other => {
                    return Err(format!("{path}: a {other:?} the workload never made"));
                }
            }
        }
    }
    Ok(out)
}

/// Reads a file of `size` bytes whole, and checks nothing reads past its end.
fn read_all(f: &File, size: u64) -> Result<Vec<u8>, String> {
    if size > READ_BYTES_MAX {
        return Err(format!(
            "size {size} is larger than any file the workloads write"
        ));
    }
    let mut data = vec![0u8; size as usize];
    let mut done = 0;
    while done < data.len() {
        let n = f
            .pread(&mut data[done..], done as u64)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("short read: {done} of {size} bytes"));
        }
        done += n;
    }
    let mut extra = [0u8; 16];
    let n = f.pread(&mut extra, size).map_err(|e| e.to_string())?;
    if n != 0 {
        return Err(format!("{n} bytes read past the end ({size})"));
    }
    Ok(data)
}

fn describe_snapshot(s: &Snapshot) -> String {
    let items: Vec<String> = s
        .iter()
        .map(|(p, e)| match e {
            Entry::Dir { ino } => format!("{p}/ (ino {ino})"),
            Entry::File { ino, data } => format!("{p} (ino {ino}, {} B)", data.len()),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn describe_tree(t: &Tree) -> String {
    let items: Vec<String> = t
        .iter()
        .map(|(p, n)| match n {
            Node::Dir { ino } => format!("{p}/ (ino {})", show_ino(*ino)),
            Node::File { id, ino } => format!("{p} (file #{id}, ino {})", show_ino(*ino)),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn show_ino(ino: u64) -> String {
    if ino == INO_UNKNOWN {
        "?".to_string()
    } else {
        ino.to_string()
    }
}

fn ino_matches(model: u64, found: u64) -> bool {
    model == INO_UNKNOWN || model == found
}

fn tree_matches(tree: &Tree, snap: &Snapshot) -> bool {
    tree.len() == snap.len()
        && tree
            .iter()
            .all(|(path, node)| match (node, snap.get(path)) {
                (Node::Dir { ino }, Some(Entry::Dir { ino: found })) => ino_matches(*ino, *found),
                (Node::File { ino, .. }, Some(Entry::File { ino: found, .. })) => {
                    ino_matches(*ino, *found)
                }
                _ => false,
            })
}

/// Check (b): `data` is made of versions no older than the durable one, block by block.
fn content_ok(versions: &[Rc<Vec<u8>>], data: &[u8]) -> Result<(), String> {
    if !versions.iter().any(|v| v.len() == data.len()) {
        let sizes: BTreeSet<usize> = versions.iter().map(|v| v.len()).collect();
        return Err(format!(
            "size {} is none of the sizes since the last durable version {sizes:?}",
            data.len()
        ));
    }
    for lo in (0..data.len()).step_by(BLOCK) {
        let hi = (lo + BLOCK).min(data.len());
        let got = &data[lo..hi];
        let from_some_version = versions.iter().any(|v| {
            if v.len() >= hi {
                v[lo..hi] == *got
            } else {
                // The block is this version's last: its bytes, then zeros.
                v.len() > lo
                    && v[lo..] == got[..v.len() - lo]
                    && got[v.len() - lo..].iter().all(|&b| b == 0)
            }
        });
        if !from_some_version {
            let newest = versions.last().expect("at least one version");
            let want: Vec<u8> = (lo..hi.min(lo + 8))
                .map(|i| newest.get(i).copied().unwrap_or(0))
                .collect();
            return Err(format!(
                "block {} (bytes {lo}..{hi}) is in none of the {} versions since the last durable \
                 one: found {:02x?}..., newest has {:02x?}...",
                lo / BLOCK,
                versions.len(),
                &got[..got.len().min(8)],
                want
            ));
        }
    }
    Ok(())
}

/// Checks (a), (b) and (c) of a recovered pool against what the model had done by `mark`.
fn check_recovered(model: &Model, mark: &Mark, snap: &Snapshot) -> Result<(), String> {
    let trees = &model.trees[..mark.trees];
    let durable_tree = &trees[mark.ns_durable];
    // (c) A file durable by name (in every state since the last durable one) and by data.
    for (path, node) in durable_tree.iter() {
        let Node::File { id, .. } = node else {
            continue;
        };
        if trees[mark.ns_durable..]
            .iter()
            .all(|t| t.get(path) == Some(node))
            && !snap.contains_key(path)
        {
            return Err(format!(
                "(c) {path} (file #{id}) was durable by name and data but is gone; recovered \
                 tree {}",
                describe_snapshot(snap)
            ));
        }
    }
    // (a) The namespace is one the model went through, no older than the last durable one.
    let matching: Vec<usize> = (mark.ns_durable..mark.trees)
        .filter(|&k| tree_matches(&trees[k], snap))
        .collect();
    if matching.is_empty() {
        return Err(format!(
            "(a) recovered tree {} is none of the {} namespace states since the last durable one \
             (#{}); durable: {}; newest: {}",
            describe_snapshot(snap),
            mark.trees - mark.ns_durable,
            mark.ns_durable,
            describe_tree(durable_tree),
            describe_tree(&trees[mark.trees - 1])
        ));
    }
    // (b) Each file holds blocks of its versions since the last durable one.
    for (path, e) in snap {
        let Entry::File { data, .. } = e else {
            continue;
        };
        let ids: BTreeSet<FileId> = matching
            .iter()
            .filter_map(|&k| match trees[k].get(path) {
                Some(Node::File { id, .. }) => Some(*id),
                _ => None,
            })
            .collect();
        let mut why = Vec::new();
        let ok = ids.iter().any(|&id| {
            let (len, durable) = mark.files[id];
            match content_ok(&model.files[id].versions[durable..len], data) {
                Ok(()) => true,
                Err(e) => {
                    why.push(format!(
                        "file #{id} (versions {durable}..{len}, durable {durable}): {e}"
                    ));
                    false
                }
            }
        });
        if !ok {
            return Err(format!("(b) {path}: {}", why.join("; ")));
        }
    }
    Ok(())
}

/// Whether a recovered pool shows exactly the newest state the model had at `mark`.
fn is_newest(model: &Model, mark: &Mark, snap: &Snapshot) -> bool {
    let newest = &model.trees[mark.trees - 1];
    tree_matches(newest, snap)
        && newest
            .iter()
            .all(|(path, node)| match (node, snap.get(path)) {
                (Node::File { id, .. }, Some(Entry::File { data, .. })) => {
                    **model.files[*id].versions[..mark.files[*id].0]
                        .last()
                        .expect("a version")
                        == *data
                }
                _ => true,
            })
}

fn diff_snapshots(want: &Snapshot, got: &Snapshot) -> String {
    let mut out = Vec::new();
    for (p, e) in want {
        match got.get(p) {
            None => out.push(format!("{p} missing")),
            Some(g) if g != e => match (e, g) {
                (Entry::File { ino, data }, Entry::File { ino: gi, data: gd }) => {
                    let first = data.iter().zip(gd.iter()).position(|(a, b)| a != b);
                    out.push(format!(
                        "{p}: ino {ino} -> {gi}, size {} -> {}, first differing byte {first:?}",
                        data.len(),
                        gd.len()
                    ))
                }
                _ => out.push(format!("{p}: {e:?} -> {g:?}")),
            },
            _ => {}
        }
    }
    for p in got.keys().filter(|p| !want.contains_key(*p)) {
        out.push(format!("{p} unexpected"));
    }
    out.join("; ")
}

fn same_snapshot(what: &str, want: &Snapshot, got: &Snapshot) -> Result<(), String> {
    if want == got {
        Ok(())
    } else {
        Err(format!("{what}: {}", diff_snapshots(want, got)))
    }
}

// ---------------------------------------------------------------------------------------------
// The workload.

thread_local! {
    /// What the current run did, shown when it fails (also after a panic in the engine).
    static OP_LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

struct Handle {
    file: File,
    id: FileId,
    sync: SyncMode,
}

/// Why a step did not succeed: the engine said no, or it said yes and did something else.
#[derive(Debug)]
enum StepError {
    Engine(Error),
    Mismatch(String),
}

impl From<Error> for StepError {
    fn from(e: Error) -> StepError {
        StepError::Engine(e)
    }
}

struct Harness {
    fs: Fs,
    model: Model,
    handles: Vec<Handle>,
    /// `Barrier::EveryLog`: file syncs are durability promises too.
    file_syncs_durable: bool,
    /// After a failure under a power cut: the engine's state is unknown, so acknowledge nothing and
    /// check nothing, only keep issuing calls.
    blind: bool,
    rng: Rng,
    /// Put before every line this harness logs.
    log_prefix: &'static str,
}

/// What a step does to the model whether or not the engine acknowledged it (a failed operation
/// may still have reached the device); acknowledgements are applied only on success.
impl Harness {
    fn new(fs: Fs, model: Model, config: &Config, rng: Rng) -> Harness {
        Harness {
            fs,
            model,
            handles: Vec::new(),
            file_syncs_durable: config.barrier == Barrier::EveryLog,
            blind: false,
            rng,
            log_prefix: "",
        }
    }

    fn note(&mut self, line: String) {
        OP_LOG.with(|log| log.borrow_mut().push(format!("{}{line}", self.log_prefix)));
    }

    fn ack_file(&mut self, id: FileId) {
        if self.file_syncs_durable && !self.blind {
            self.model.sync_file(id);
        }
    }

    fn sync_flags(&mut self) -> SyncMode {
        match self.rng.below(20) {
            0 => SyncMode::Full,
            1 | 2 => SyncMode::Data,
            _ => SyncMode::None,
        }
    }

    /// Runs one random operation.
    fn step(&mut self) -> Result<(), StepError> {
        loop {
            let done = match self.rng.below(100) {
                0..=29 => self.op_pwrite(),
                30..=37 => self.op_append(),
                38..=42 => self.op_set_len(),
                43..=45 => self.op_truncate_path(),
                46..=53 => self.op_create(),
                54..=58 => self.op_open(),
                59..=63 => self.op_close(),
                64..=70 => self.op_rename(),
                71..=75 => self.op_unlink(),
                76..=79 => self.op_mkdir(),
                80..=82 => self.op_rmdir(),
                83..=87 => self.op_fsync(false),
                88..=91 => self.op_fsync(true),
                92..=95 => self.op_sync_all(),
                _ => self.op_check(),
            };
            if let Some(result) = done {
                return result;
            }
        }
    }

    fn pick_handle(&mut self) -> Option<usize> {
        if self.handles.is_empty() {
            None
        } else {
            Some(self.rng.below(self.handles.len() as u64) as usize)
        }
    }

    fn write_len(&mut self) -> u64 {
        match self.rng.below(10) {
            0..=3 => self.rng.range(1, 512),
            4..=6 => self.rng.range(512, 8 << 10),
            _ => self.rng.range(8 << 10, WRITE_BYTES_MAX),
        }
    }

    fn op_pwrite(&mut self) -> Option<Result<(), StepError>> {
        let h = self.pick_handle()?;
        let id = self.handles[h].id;
        let size = self.model.content(id).len() as u64;
        let len = self.write_len();
        let mut limit = FILE_BYTES_MAX;
        let offset = match self.rng.below(40) {
            0..=11 => size,
            12..=23 => self.rng.below(size + 1),
            24..=31 => size + self.rng.range(1, WRITE_BYTES_MAX),
            32..=38 => self.rng.below(size / BLOCK_SIZE + 2) * BLOCK_SIZE,
            _ => {
                // Far out, leaving a hole: the block map needs more than one level.
                limit = SPARSE_BYTES_MAX;
                self.rng
                    .range(FILE_BYTES_MAX, SPARSE_BYTES_MAX - WRITE_BYTES_MAX)
            }
        };
        if offset + len > limit {
            return None;
        }
        let seed = self.rng.next_u64();
        let buf = pattern(seed, len as usize);
        self.note(format!(
            "pwrite h{h} (file #{id}) {len} B at {offset} (pattern {seed:#x})"
        ));
        let r = self.handles[h].file.pwrite(&buf, offset);
        let data = written(self.model.content(id), offset, &buf);
        self.model.push_version(id, data);
        let sync = self.handles[h].sync;
        match r {
            Ok(n) if n == buf.len() => {
                if sync != SyncMode::None {
                    self.ack_file(id);
                }
                Some(Ok(()))
            }
            Ok(n) => Some(Err(StepError::Mismatch(format!(
                "pwrite wrote {n} of {len} bytes"
            )))),
            Err(e) => Some(Err(e.into())),
        }
    }

    fn op_append(&mut self) -> Option<Result<(), StepError>> {
        let h = self.pick_handle()?;
        let id = self.handles[h].id;
        let size = self.model.content(id).len() as u64;
        let len = self.write_len();
        if size + len > FILE_BYTES_MAX {
            return None;
        }
        let seed = self.rng.next_u64();
        let buf = pattern(seed, len as usize);
        self.note(format!(
            "seek end + write h{h} (file #{id}) {len} B at {size} (pattern {seed:#x})"
        ));
        let r = (|| -> Result<(), StepError> {
            let at = self.handles[h].file.seek(SeekFrom::End(0))?;
            if at != size && !self.blind {
                return Err(StepError::Mismatch(format!(
                    "seek to end gave {at}, model size {size}"
                )));
            }
            let n = self.handles[h].file.write(&buf)?;
            if n != buf.len() {
                return Err(StepError::Mismatch(format!("wrote {n} of {len} bytes")));
            }
            Ok(())
        })();
        let data = written(self.model.content(id), size, &buf);
        self.model.push_version(id, data);
        if r.is_ok() && self.handles[h].sync != SyncMode::None {
            self.ack_file(id);
        }
        Some(r)
    }

    fn new_len(&mut self, size: u64) -> u64 {
        match self.rng.below(4) {
            0 => 0,
            1 => self.rng.below(size + 1),
            _ => (size + self.rng.range(1, WRITE_BYTES_MAX)).min(FILE_BYTES_MAX),
        }
    }

    fn op_set_len(&mut self) -> Option<Result<(), StepError>> {
        let h = self.pick_handle()?;
        let id = self.handles[h].id;
        let size = self.model.content(id).len() as u64;
        let len = self.new_len(size);
        self.note(format!("set_len h{h} (file #{id}) {size} -> {len}"));
        let r = self.handles[h].file.set_len(len);
        let data = resized(self.model.content(id), len);
        self.model.push_version(id, data);
        Some(r.map_err(StepError::from))
    }

    fn op_truncate_path(&mut self) -> Option<Result<(), StepError>> {
        let files = file_paths(self.model.tree());
        if files.is_empty() {
            return None;
        }
        let path = self.rng.pick(&files).clone();
        let Some(Node::File { id, .. }) = self.model.tree().get(&path).cloned() else {
            unreachable!("file_paths lists files");
        };
        let size = self.model.content(id).len() as u64;
        let len = self.new_len(size);
        self.note(format!("truncate {path} (file #{id}) {size} -> {len}"));
        let r = self.fs.truncate(&path, len);
        let data = resized(self.model.content(id), len);
        self.model.push_version(id, data);
        Some(r.map_err(StepError::from))
    }

    /// Directories that may get a child, the root included.
    fn parents(&self, for_dir: bool) -> Vec<String> {
        let mut out = vec!["/".to_string()];
        out.extend(dir_paths(self.model.tree()));
        out.retain(|d| depth(d) < DIR_DEPTH_MAX || !for_dir && depth(d) == DIR_DEPTH_MAX);
        out
    }

    fn free_name(&mut self, for_dir: bool) -> Option<String> {
        let parents = self.parents(for_dir);
        let parent = self.rng.pick(&parents).clone();
        let names: &[&str] = if for_dir { &DIR_NAMES } else { &FILE_NAMES };
        let name = *self.rng.pick(names);
        let path = join(&parent, name);
        if self.model.tree().contains_key(&path) {
            None
        } else {
            Some(path)
        }
    }

    fn keep_handle(&mut self, file: File, id: FileId, sync: SyncMode) {
        if self.handles.len() >= HANDLES_MAX {
            let h = self.rng.below(self.handles.len() as u64) as usize;
            self.note(format!("  (close h{h} to make room)"));
            self.handles.swap_remove(h);
        }
        self.handles.push(Handle { file, id, sync });
    }

    fn op_create(&mut self) -> Option<Result<(), StepError>> {
        if file_paths(self.model.tree()).len() >= FILES_MAX {
            return None;
        }
        let path = self.free_name(false)?;
        let sync = self.sync_flags();
        let flags = OpenFlags {
            exclusive: true,
            sync,
            ..OpenFlags::create()
        };
        let id = self.model.new_file();
        self.note(format!("create {path} (file #{id}, {sync:?})"));
        let r = self.fs.open_file(&path, flags);
        let ino = r.as_ref().map(|f| f.ino()).unwrap_or(INO_UNKNOWN);
        let mut tree = self.model.tree().clone();
        tree.insert(path, Node::File { id, ino });
        self.model.push_tree(tree);
        match r {
            Ok(file) => {
                if self.rng.chance(4, 5) {
                    self.keep_handle(file, id, sync);
                    self.note(format!("  -> h{}", self.handles.len() - 1));
                }
                Some(Ok(()))
            }
            Err(e) => Some(Err(e.into())),
        }
    }

    fn op_open(&mut self) -> Option<Result<(), StepError>> {
        let files = file_paths(self.model.tree());
        if files.is_empty() {
            return None;
        }
        let path = self.rng.pick(&files).clone();
        let Some(Node::File { id, ino }) = self.model.tree().get(&path).cloned() else {
            unreachable!("file_paths lists files");
        };
        let truncate = self.rng.chance(1, 6);
        let sync = self.sync_flags();
        let flags = OpenFlags {
            truncate,
            sync,
            ..OpenFlags::create()
        };
        self.note(format!(
            "open {path} (file #{id}, {sync:?}{})",
            if truncate { ", truncate" } else { "" }
        ));
        let r = self.fs.open_file(&path, flags);
        if truncate {
            self.model.push_version(id, Vec::new());
        }
        match r {
            Ok(file) => {
                if file.ino() != ino && ino != INO_UNKNOWN && !self.blind {
                    return Some(Err(StepError::Mismatch(format!(
                        "open {path}: ino {} but created as {ino}",
                        file.ino()
                    ))));
                }
                self.keep_handle(file, id, sync);
                self.note(format!("  -> h{}", self.handles.len() - 1));
                Some(Ok(()))
            }
            Err(e) => Some(Err(e.into())),
        }
    }

    fn op_close(&mut self) -> Option<Result<(), StepError>> {
        let h = self.pick_handle()?;
        self.note(format!("close h{h} (file #{})", self.handles[h].id));
        self.handles.swap_remove(h);
        Some(Ok(()))
    }

    fn op_rename(&mut self) -> Option<Result<(), StepError>> {
        let tree = self.model.tree().clone();
        let all: Vec<String> = tree.keys().cloned().collect();
        if all.is_empty() {
            return None;
        }
        let from = self.rng.pick(&all).clone();
        let from_is_dir = matches!(tree[&from], Node::Dir { .. });
        // Half the time onto an existing name of the same kind, else onto a free one.
        let to = if self.rng.chance(1, 2) {
            let same_kind: Vec<String> = all
                .iter()
                .filter(|p| {
                    matches!(tree[*p], Node::Dir { .. }) == from_is_dir
                        && (!from_is_dir || children(&tree, p).next().is_none())
                })
                .cloned()
                .collect();
            if same_kind.is_empty() {
                return None;
            }
            self.rng.pick(&same_kind).clone()
        } else {
            self.free_name(from_is_dir)?
        };
        if to == from || is_under(&to, &from) {
            return None;
        }
        if from_is_dir {
            // The moved subtree must stay within the depth limit.
            let deepest = all
                .iter()
                .filter(|p| is_under(p, &from))
                .map(|p| depth(p) - depth(&from))
                .max()
                .unwrap_or(0);
            if depth(&to) + deepest > DIR_DEPTH_MAX + 1 {
                return None;
            }
        }
        self.note(format!(
            "rename {from} -> {to}{}",
            if tree.contains_key(&to) {
                " (replacing)"
            } else {
                ""
            }
        ));
        let r = self.fs.rename(&from, &to);
        self.model.push_tree(renamed(&tree, &from, &to));
        Some(r.map_err(StepError::from))
    }

    fn op_unlink(&mut self) -> Option<Result<(), StepError>> {
        let files = file_paths(self.model.tree());
        if files.is_empty() {
            return None;
        }
        let path = self.rng.pick(&files).clone();
        let open = self
            .handles
            .iter()
            .filter(|h| matches!(self.model.tree()[&path], Node::File { id, .. } if id == h.id))
            .count();
        self.note(format!("unlink {path} ({open} open handles)"));
        let r = self.fs.unlink(&path);
        let mut tree = self.model.tree().clone();
        tree.remove(&path);
        self.model.push_tree(tree);
        Some(r.map_err(StepError::from))
    }

    fn op_mkdir(&mut self) -> Option<Result<(), StepError>> {
        if dir_paths(self.model.tree()).len() >= DIRS_MAX {
            return None;
        }
        let path = self.free_name(true)?;
        self.note(format!("mkdir {path}"));
        let r = self.fs.mkdir(&path, 0o755);
        let ino = match &r {
            Ok(()) => match self.fs.stat(&path) {
                Ok(st) => st.ino,
                Err(_) => INO_UNKNOWN,
            },
            Err(_) => INO_UNKNOWN,
        };
        let mut tree = self.model.tree().clone();
        tree.insert(path, Node::Dir { ino });
        self.model.push_tree(tree);
        Some(r.map_err(StepError::from))
    }

    fn op_rmdir(&mut self) -> Option<Result<(), StepError>> {
        let tree = self.model.tree().clone();
        let empty: Vec<String> = dir_paths(&tree)
            .into_iter()
            .filter(|d| children(&tree, d).next().is_none())
            .collect();
        if empty.is_empty() {
            return None;
        }
        let path = self.rng.pick(&empty).clone();
        self.note(format!("rmdir {path}"));
        let r = self.fs.rmdir(&path);
        let mut tree = tree;
        tree.remove(&path);
        self.model.push_tree(tree);
        Some(r.map_err(StepError::from))
    }

    fn op_fsync(&mut self, data_only: bool) -> Option<Result<(), StepError>> {
        let h = self.pick_handle()?;
        let id = self.handles[h].id;
        let what = if data_only { "fdatasync" } else { "fsync" };
        self.note(format!("{what} h{h} (file #{id})"));
        let file = &self.handles[h].file;
        let r = if data_only {
            file.fdatasync()
        } else {
            file.fsync()
        };
        if r.is_ok() {
            self.ack_file(id);
        }
        Some(r.map_err(StepError::from))
    }

    fn op_sync_all(&mut self) -> Option<Result<(), StepError>> {
        self.note("Fs::sync".to_string());
        let r = self.fs.sync();
        if r.is_ok() && !self.blind {
            self.model.sync_all();
        }
        Some(r.map_err(StepError::from))
    }

    /// Reads a file back through an open handle and compares with the model.
    fn op_check(&mut self) -> Option<Result<(), StepError>> {
        if self.blind {
            return None;
        }
        let h = self.pick_handle()?;
        let id = self.handles[h].id;
        let want = self.model.content(id).clone();
        self.note(format!("check h{h} (file #{id}, {} B)", want.len()));
        let r = (|| -> Result<(), StepError> {
            let st = self.handles[h].file.stat()?;
            if st.size != want.len() as u64 {
                return Err(StepError::Mismatch(format!(
                    "stat size {} but {} bytes written",
                    st.size,
                    want.len()
                )));
            }
            let got = read_all(&self.handles[h].file, st.size).map_err(StepError::Mismatch)?;
            if got != *want {
                let at = got
                    .iter()
                    .zip(want.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(StepError::Mismatch(format!(
                    "reads back differently from byte {at} (block {})",
                    at / BLOCK
                )));
            }
            Ok(())
        })();
        Some(r)
    }
}

// ---------------------------------------------------------------------------------------------
// Crashes and their checks.

fn config_for(ordering: Ordering, barrier: Barrier, rng: &mut Rng) -> Config {
    Config {
        ordering,
        barrier,
        segment_bytes: SEGMENT_BYTES,
        superblock_every_bytes: SUPERBLOCK_EVERY_BYTES,
        // Time never triggers anything: runs are decided by the seed alone.
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: *rng.pick(&[64 << 10, 256 << 10, 32 << 20]),
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    }
}

fn open(dev: &Arc<SimDevice>, what: &str) -> Result<Fs, String> {
    Fs::open(dev.clone(), &OpenOptions::default()).map_err(|e| format!("{what}: Fs::open: {e}"))
}

/// Totals over one test, for its summary line.
#[derive(Default)]
struct Totals {
    runs: u64,
    states: u64,
    mid_op: u64,
    deep: u64,
    in_recovery: u64,
    ops: u64,
    /// Crash states that came back older than the newest state (some unsynced work lost).
    behind: u64,
    /// Bytes the engine wrote to the device over all workloads.
    bytes_written: u64,
}

/// Recovers a crash image and checks it against the model; sometimes also checks (d) and (e).
fn check_crash(
    image: Vec<u8>,
    model: &Model,
    mark: &Mark,
    config: &Config,
    rng: &mut Rng,
    totals: &mut Totals,
) -> Result<(), String> {
    totals.states += 1;
    if rng.chance(1, CRASH_IN_RECOVERY_EVERY) {
        // The power goes out again while recovery writes its checkpoint; the next recovery
        // must show a state just as valid.
        totals.in_recovery += 1;
        let first = SimDevice::from_image(image.clone());
        let writes = rng.below(CRASH_IN_RECOVERY_WRITES_MAX + 1);
        first.cut_power_after(writes);
        let first = Arc::new(first);
        if let Ok(fs) = Fs::open(first.clone(), &OpenOptions::default()) {
            let _ = fs.close();
        }
        let seed = rng.next_u64();
        let dev = Arc::new(SimDevice::from_image(first.crash_image(seed)));
        let what = format!("recovering a crash {writes} writes into recovery (image {seed:#x})");
        let fs = open(&dev, &what)?;
        let recovered = snapshot(&fs).map_err(|e| format!("{what}: {e}"))?;
        check_recovered(model, mark, &recovered).map_err(|e| format!("{what}: {e}"))?;
        close(fs, &what)?;
    }
    let dev = Arc::new(SimDevice::from_image(image));
    let fs = open(&dev, "recovering the crash image")?;
    let recovered = snapshot(&fs).map_err(|e| format!("reading the recovered pool: {e}"))?;
    check_recovered(model, mark, &recovered)?;
    if !is_newest(model, mark, &recovered) {
        totals.behind += 1;
    }
    if !rng.chance(1, DEEP_CHECK_EVERY) {
        return close(fs, "the recovered pool");
    }
    totals.deep += 1;
    // (e) A crash right after recovery, and a clean reopen, show the same tree.
    let after_open = Arc::new(SimDevice::from_image(dev.crash_image(rng.next_u64())));
    fs.close()
        .map_err(|e| format!("closing the recovered pool: {e}"))?;
    {
        let again = open(&after_open, "(e) recovering a crash right after recovery")?;
        same_snapshot(
            "(e) crash right after recovery",
            &recovered,
            &snapshot(&again)?,
        )?;
        close(
            again,
            "the pool recovered after a crash right after recovery",
        )?;
    }
    let fs = open(&dev, "(e) reopening the recovered pool")?;
    same_snapshot(
        "(e) reopening the recovered pool",
        &recovered,
        &snapshot(&fs)?,
    )?;
    // (d) The pool keeps working: more operations, a sync, a crash, and it is all there.
    let mut h = Harness::new(
        fs,
        Model::from_snapshot(&recovered),
        config,
        Rng::new(rng.next_u64()),
    );
    h.log_prefix = "  [on the recovered pool] ";
    for _ in 0..AFTER_RECOVERY_OPS {
        if let Err(e) = h.step() {
            return Err(format!("(d) operation on the recovered pool failed: {e:?}"));
        }
    }
    h.fs.sync()
        .map_err(|e| format!("(d) Fs::sync on the recovered pool: {e}"))?;
    h.model.sync_all();
    let image = dev.crash_image(rng.next_u64());
    let Harness {
        fs, handles, model, ..
    } = h;
    drop(handles);
    close(fs, "(d) the recovered pool after more operations")?;
    let dev = Arc::new(SimDevice::from_image(image));
    let fs = open(&dev, "(d) recovering after ops on the recovered pool")?;
    same_snapshot(
        "(d) synced state after ops on the recovered pool",
        &model.expected(),
        &snapshot(&fs)?,
    )?;
    close(fs, "(d) the pool recovered after more operations")
}

/// Closes a pool (rather than dropping it) so nothing it started outlives the check.
fn close(fs: Fs, what: &str) -> Result<(), String> {
    fs.close().map_err(|e| format!("closing {what}: {e}"))
}

/// One workload from `seed`: crash states between operations, then a final crash either between
/// operations or in the middle of one.
fn run_one(
    ordering: Ordering,
    barrier: Barrier,
    seed: u64,
    totals: &mut Totals,
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let config = config_for(ordering, barrier, &mut rng);
    let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
    dev.set_writes_are_copies(seed % 2 == 1);
    let fs = match Fs::format(dev.clone(), &config) {
        Ok(fs) => fs,
        Err(e) => return Err(format!("Fs::format: {e}")),
    };
    let mut h = Harness::new(
        fs,
        Model::new(Tree::new(), Vec::new()),
        &config,
        Rng::new(rng.next_u64()),
    );
    h.note(format!("{config:?}"));
    let ops = if rng.chance(1, LONG_RUN_EVERY) {
        rng.range(LONG_RUN_OPS_MIN, LONG_RUN_OPS_MAX)
    } else {
        rng.range(RUN_OPS_MIN, RUN_OPS_MAX)
    };
    let cut_at = if rng.chance(1, 2) {
        Some(rng.below(ops))
    } else {
        None
    };
    totals.runs += 1;
    let mut frozen: Option<Mark> = None;
    let mut after_failure = 0;
    for i in 0..ops {
        totals.ops += 1;
        if Some(i) == cut_at {
            let writes = rng.below(CUT_WRITES_MAX + 1);
            dev.cut_power_after(writes);
            h.note(format!("-- power cut after {writes} more writes"));
        }
        let power_cut = cut_at.is_some_and(|c| i >= c);
        if !power_cut && rng.chance(RUN_BETWEEN_STATES, ops) {
            let crash_seed = rng.next_u64();
            h.note(format!("-- crash image {crash_seed:#x} checked here"));
            let mark = h.model.mark();
            let image = dev.crash_image(crash_seed);
            if let Err(e) = check_crash(image, &h.model, &mark, &config, &mut rng, totals) {
                return Err(format!("crash between ops (image {crash_seed:#x}): {e}"));
            }
        }
        match h.step() {
            Ok(()) => {}
            Err(StepError::Mismatch(m)) if !h.blind => return Err(m),
            Err(StepError::Engine(e)) if !power_cut => {
                return Err(format!("operation failed on a healthy device: {e}"))
            }
            Err(StepError::Engine(e)) if frozen.is_none() => {
                if !matches!(e, Error::Io { .. } | Error::Poisoned(_)) {
                    return Err(format!("power cut surfaced as a non-I/O error: {e}"));
                }
                h.note(format!("  -> failed: {e}"));
                frozen = Some(h.model.mark());
                h.blind = true;
            }
            Err(e) => h.note(format!("  -> failed: {e:?}")),
        }
        if frozen.is_some() {
            after_failure += 1;
            if after_failure > AFTER_FAILURE_OPS {
                break;
            }
        }
    }
    if cut_at.is_some() && frozen.is_none() {
        // Make the cut matter: a sync either gets through (and is a promise) or fails.
        h.note("Fs::sync (end of a power-cut run)".to_string());
        match h.fs.sync() {
            Ok(()) => h.model.sync_all(),
            Err(e) => {
                h.note(format!("  -> failed: {e}"));
                frozen = Some(h.model.mark());
            }
        }
    }
    let mark = frozen.unwrap_or_else(|| h.model.mark());
    let crash_seed = rng.next_u64();
    h.note(format!("-- final crash image {crash_seed:#x}"));
    let image = dev.crash_image(crash_seed);
    if cut_at.is_some() {
        totals.mid_op += 1;
    }
    if let Err(e) = check_crash(image, &h.model, &mark, &config, &mut rng, totals) {
        return Err(format!("final crash (image {crash_seed:#x}): {e}"));
    }
    // The device is past its crash; closing may fail (power cut) and changes nothing checked.
    let Harness { fs, handles, .. } = h;
    drop(handles);
    totals.bytes_written += fs.counters().bytes_written;
    let _ = fs.close();
    Ok(())
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// Runs workloads for one ordering × barrier until enough crash states were checked; stops at the
/// first failure with its seed, the operations and the command that replays it.
fn crash_test(test: &str, ordering: Ordering, barrier: Barrier, salt: u64) {
    let replay = env_u64("TBFS_CRASH_SEED");
    let states_min = env_u64("TBFS_CRASH_STATES").unwrap_or(STATES_DEFAULT);
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut seeds = Rng::new(salt);
    loop {
        let seed = replay.unwrap_or_else(|| seeds.next_u64());
        OP_LOG.with(|log| log.borrow_mut().clear());
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            run_one(ordering, barrier, seed, &mut totals)
        }));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(msg)) => Some(msg),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(non-string panic)".to_string());
                Some(format!("panic: {msg}"))
            }
        };
        if let Some(msg) = failure {
            let log = OP_LOG.with(|log| log.take());
            let skipped = log.len().saturating_sub(LOG_TAIL_LINES);
            let tail: Vec<String> = log[skipped..]
                .iter()
                .enumerate()
                .map(|(i, l)| format!("  {:4} {l}", skipped + i))
                .collect();
            panic!(
                "{test}: seed {seed:#x} ({ordering:?} ordering, {barrier:?} barrier): {msg}\n\
                 operations ({skipped} earlier not shown):\n{}\n\
                 replay: TBFS_CRASH_SEED={seed:#x} cargo test -p tailbound --test tbfs_crash \
                 {test} -- --exact --nocapture",
                tail.join("\n")
            );
        }
        if replay.is_some() || totals.states >= states_min {
            break;
        }
    }
    println!(
        "{test}: {} crash states ({} deep, {} crashed again in recovery, {} after a power cut, \
         {} lost unsynced work) over {} runs, {} ops, {} MiB written, {:.1} s",
        totals.states,
        totals.deep,
        totals.in_recovery,
        totals.mid_op,
        totals.behind,
        totals.runs,
        totals.ops,
        totals.bytes_written >> 20,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn crash_relaxed_every_log() {
    crash_test(
        "crash_relaxed_every_log",
        Ordering::Relaxed,
        Barrier::EveryLog,
        1,
    );
}

#[test]
fn crash_strict_every_log() {
    crash_test(
        "crash_strict_every_log",
        Ordering::Strict,
        Barrier::EveryLog,
        2,
    );
}

#[test]
fn crash_relaxed_every_checkpoint() {
    crash_test(
        "crash_relaxed_every_checkpoint",
        Ordering::Relaxed,
        Barrier::EveryCheckpoint,
        3,
    );
}

#[test]
fn crash_strict_every_checkpoint() {
    crash_test(
        "crash_strict_every_checkpoint",
        Ordering::Strict,
        Barrier::EveryCheckpoint,
        4,
    );
}

#[test]
fn crash_relaxed_superblock() {
    crash_test(
        "crash_relaxed_superblock",
        Ordering::Relaxed,
        Barrier::Superblock,
        5,
    );
}

#[test]
fn crash_strict_superblock() {
    crash_test(
        "crash_strict_superblock",
        Ordering::Strict,
        Barrier::Superblock,
        6,
    );
}

// ---------------------------------------------------------------------------------------------
// Error paths.

fn small_config(barrier: Barrier) -> Config {
    Config {
        ordering: Ordering::Relaxed,
        barrier,
        segment_bytes: SEGMENT_BYTES,
        superblock_every_bytes: SUPERBLOCK_EVERY_BYTES,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 256 << 10,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    }
}

/// A few directories and files of several sizes, synced; returns what a reopen must show.
fn populate(fs: &Fs) -> Snapshot {
    fs.mkdir("/logs", 0o755).expect("mkdir /logs");
    fs.mkdir("/logs/old", 0o755).expect("mkdir /logs/old");
    for (i, (path, len)) in [
        ("/a", 1u64),
        ("/logs/b", 5000),
        ("/logs/old/c", 70 << 10),
        ("/d", 0),
    ]
    .iter()
    .enumerate()
    {
        let f = fs.open_file(path, OpenFlags::create()).expect("create");
        f.pwrite(&pattern(i as u64, *len as usize), 0)
            .expect("pwrite");
    }
    fs.sync().expect("Fs::sync");
    snapshot(fs).expect("snapshot")
}

#[test]
fn failing_writes_return_errors_and_keep_what_was_acknowledged() {
    for barrier in [
        Barrier::EveryLog,
        Barrier::EveryCheckpoint,
        Barrier::Superblock,
    ] {
        for fail_after in [0u64, 1, 2, 3, 5, 8, 13, 21] {
            let what = format!("{barrier:?}, writes fail after {fail_after}");
            let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
            let fs = Fs::format(dev.clone(), &small_config(barrier)).expect("format");
            let synced = populate(&fs);
            let Some(Entry::File { data, .. }) = synced.get("/logs/b") else {
                unreachable!("populate makes /logs/b");
            };
            // Versions of /logs/b from here on, and the last one acknowledged durable.
            let mut versions = vec![Rc::new(data.clone())];
            let mut durable = 0;
            // The device counts writes since it was made.
            dev.set_faults(SimFaults {
                fail_writes_after: Some(dev.stats().writes + fail_after),
                ..SimFaults::default()
            });
            // Keep going until something fails; every call must return, none may panic.
            let mut first_error = None;
            {
                let f = fs.open_file("/logs/b", OpenFlags::create()).expect("open");
                for i in 0..64u64 {
                    let buf = pattern(100 + i, 9000);
                    let next = written(versions.last().expect("a version"), i * 7000, &buf);
                    versions.push(Rc::new(next));
                    let r = f
                        .pwrite(&buf, i * 7000)
                        .map(|_| ())
                        .and_then(|()| f.fsync())
                        .map(|()| {
                            if barrier == Barrier::EveryLog {
                                durable = versions.len() - 1;
                            }
                        })
                        .and_then(|()| fs.rename("/a", "/a2"))
                        .and_then(|()| fs.rename("/a2", "/a"))
                        .and_then(|()| fs.sync())
                        .map(|()| durable = versions.len() - 1);
                    if let Err(e) = r {
                        first_error = Some(e);
                        break;
                    }
                }
                // Later calls fail too or succeed, but return.
                let _ = f.fsync();
                let _ = fs.sync();
                let _ = fs.mkdir("/late", 0o755);
            }
            let e = first_error.unwrap_or_else(|| panic!("{what}: no operation failed"));
            assert!(
                matches!(e, Error::Io { .. } | Error::Poisoned(_)),
                "{what}: a failed device write surfaced as {e:?}"
            );
            let _ = fs.close();
            // A crash now, faults gone: what was acknowledged before the failure is intact.
            let crashed = Arc::new(SimDevice::from_image(dev.crash_image(fail_after)));
            let fs = open(&crashed, &what).unwrap_or_else(|e| panic!("{e}"));
            let mut got = snapshot(&fs).unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut want = synced.clone();
            match got.remove("/logs/b") {
                Some(Entry::File { data, .. }) => content_ok(&versions[durable..], &data)
                    .unwrap_or_else(|e| panic!("{what}: /logs/b: {e}")),
                other => panic!("{what}: /logs/b is {other:?}"),
            }
            want.remove("/logs/b");
            got.remove("/late");
            if let Some(a2) = got.remove("/a2") {
                // The first rename may have reached the device before the failure.
                assert!(!got.contains_key("/a"), "{what}: both /a and /a2");
                got.insert("/a".to_string(), a2);
            }
            same_snapshot(&what, &want, &got).unwrap_or_else(|e| panic!("{e}"));
            fs.close().expect("close");
            // The device that failed, without a crash, opens too once the faults are gone.
            dev.set_faults(SimFaults::default());
            let fs = open(&dev, &what).unwrap_or_else(|e| panic!("{e}"));
            snapshot(&fs).unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
}

#[test]
fn failing_reads_return_errors() {
    let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
    let fs = Fs::format(dev.clone(), &small_config(Barrier::EveryLog)).expect("format");
    let synced = populate(&fs);
    fs.close().expect("close");
    for fail_after in [0u64, 1, 2, 4, 8, 16] {
        // The device counts reads since it was made.
        dev.set_faults(SimFaults {
            fail_reads_after: Some(dev.stats().reads + fail_after),
            ..SimFaults::default()
        });
        // Opening may fail or not; reading may fail or not; nothing panics.
        if let Ok(fs) = Fs::open(dev.clone(), &OpenOptions::default()) {
            let _ = snapshot(&fs);
            let _ = fs.close();
        }
        dev.set_faults(SimFaults::default());
        let fs = open(&dev, "after read faults").unwrap_or_else(|e| panic!("{e}"));
        same_snapshot(
            &format!("reads failed after {fail_after}"),
            &synced,
            &snapshot(&fs).expect("snapshot"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        fs.close().expect("close");
    }
}

#[test]
fn running_out_of_space_is_an_error_not_a_panic() {
    let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
    let fs = Fs::format(dev.clone(), &small_config(Barrier::EveryLog)).expect("format");
    let synced = populate(&fs);
    let err = {
        let f = fs.open_file("/big", OpenFlags::create()).expect("create");
        let chunk = pattern(7, 256 << 10);
        let mut offset = 0u64;
        loop {
            match f.pwrite(&chunk, offset).and_then(|_| f.fsync()) {
                Ok(()) => offset += chunk.len() as u64,
                Err(e) => break e,
            }
            assert!(
                offset <= 2 * DEVICE_BYTES,
                "wrote twice the device size without an error"
            );
        }
    };
    assert!(matches!(err, Error::NoSpace(_)), "expected NoSpace: {err}");
    fs.unlink("/big").expect("unlink after ENOSPC");
    fs.sync().expect("sync after ENOSPC");
    fs.close().expect("close");
    let fs = open(&dev, "after ENOSPC").unwrap_or_else(|e| panic!("{e}"));
    same_snapshot("after ENOSPC", &synced, &snapshot(&fs).expect("snapshot"))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A synced, closed pool and the image of it.
fn closed_pool() -> (Snapshot, Vec<u8>) {
    let dev = Arc::new(SimDevice::new(DEVICE_BYTES));
    let fs = Fs::format(dev.clone(), &small_config(Barrier::EveryCheckpoint)).expect("format");
    let synced = populate(&fs);
    fs.close().expect("close");
    (synced, dev.durable_image())
}

fn flip(image: &mut [u8], block: usize) {
    let base = block * BLOCK;
    for i in (0..BLOCK).step_by(97) {
        image[base + i] ^= 0x5a;
    }
}

#[test]
fn one_corrupt_superblock_copy_opens_from_the_other() {
    for block in SUPERBLOCK_BLOCKS {
        let (synced, mut image) = closed_pool();
        flip(&mut image, block);
        let dev = Arc::new(SimDevice::from_image(image));
        let fs = open(&dev, &format!("superblock block {block} corrupt"))
            .unwrap_or_else(|e| panic!("{e}"));
        same_snapshot(
            &format!("superblock block {block} corrupt"),
            &synced,
            &snapshot(&fs).expect("snapshot"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn both_superblock_copies_corrupt_is_an_error_naming_the_superblock() {
    let (_, mut image) = closed_pool();
    for block in SUPERBLOCK_BLOCKS {
        flip(&mut image, block);
    }
    let dev = Arc::new(SimDevice::from_image(image));
    match Fs::open(dev, &OpenOptions::default()) {
        Ok(_) => panic!("a pool with both superblock copies corrupt opened"),
        Err(e) => assert!(
            e.to_string().to_lowercase().contains("superblock"),
            "the error does not name the superblock: {e}"
        ),
    }
    let zeros = Arc::new(SimDevice::new(DEVICE_BYTES));
    let e = Fs::open(zeros, &OpenOptions::default()).expect_err("an all-zero device opened");
    assert!(
        e.to_string().to_lowercase().contains("superblock"),
        "the error does not name the superblock: {e}"
    );
}

/// The blocks holding the two superblock copies.
const SUPERBLOCK_BLOCKS: [usize; 2] = [0, 1];

#[test]
fn the_model_accepts_only_real_versions() {
    let v = |d: &[u8]| Rc::new(d.to_vec());
    let a = vec![1u8; BLOCK * 2];
    let mut b = a.clone();
    b[BLOCK..].fill(2);
    let versions = [v(&a), v(&b)];
    assert!(content_ok(&versions, &a).is_ok());
    assert!(content_ok(&versions, &b).is_ok());
    let mut mixed = a.clone();
    mixed[..BLOCK].fill(1);
    mixed[BLOCK..].fill(2);
    assert!(content_ok(&versions, &mixed).is_ok());
    let mut zeroed = a.clone();
    zeroed[BLOCK..].fill(0);
    assert!(
        content_ok(&versions, &zeroed).is_err(),
        "zeros never written"
    );
    assert!(content_ok(&versions, &a[..10]).is_err(), "size never seen");
    // A block that exists only past the end of an older version is not that version's.
    let short = vec![1u8; 100];
    let grown = written(&short, BLOCK as u64 * 2, &[3u8; 10]);
    assert!(content_ok(&[v(&short), v(&grown)], &grown).is_ok());
    let mut lost = grown.clone();
    lost[BLOCK * 2..].fill(0);
    assert!(content_ok(&[v(&short), v(&grown)], &lost).is_err());

    let mut t = Tree::new();
    t.insert("/d".into(), Node::Dir { ino: 2 });
    t.insert("/d/x".into(), Node::File { id: 0, ino: 3 });
    t.insert("/dz".into(), Node::File { id: 1, ino: 4 });
    let r = renamed(&t, "/d", "/e");
    assert_eq!(
        r.keys().cloned().collect::<Vec<_>>(),
        vec!["/dz".to_string(), "/e".into(), "/e/x".into()]
    );
    let r = renamed(&t, "/dz", "/d/x");
    assert_eq!(r.get("/d/x"), Some(&Node::File { id: 1, ino: 4 }));
    assert_eq!(r.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Crashes while the cleaner runs and while snapshots are made and dropped.

/// Every file below `/` with its contents, read through `read` (the live tree or a view).
fn contents_of(
    readdir: &dyn Fn(&str) -> tailbound::tbfs::Result<Vec<tailbound::tbfs::DirEntry>>,
    read: &dyn Fn(&str) -> tailbound::tbfs::Result<Vec<u8>>,
) -> tailbound::tbfs::Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        for e in readdir(if dir.is_empty() { "/" } else { &dir })? {
            let path = format!("{dir}/{}", e.name);
            match e.kind {
                FileKind::Dir => dirs.push(path),
                FileKind::File => {
                    out.insert(path.clone(), read(&path)?);
                }
                // This workload makes none.
                _ => {}
            }
        }
    }
    Ok(out)
}

fn live_contents(fs: &Fs) -> tailbound::tbfs::Result<BTreeMap<String, Vec<u8>>> {
    contents_of(&|p| fs.readdir(p), &|p| {
        let f = fs.open_file(p, OpenFlags::read_only())?;
        let mut buf = vec![0u8; f.stat()?.size as usize];
        let n = f.pread(&mut buf, 0)?;
        buf.truncate(n);
        Ok(buf)
    })
}

fn view_contents(fs: &Fs, number: u64) -> tailbound::tbfs::Result<BTreeMap<String, Vec<u8>>> {
    let view = fs.at(number)?;
    contents_of(&|p| view.readdir(p), &|p| view.read_file(p))
}

/// One crash state: a pool with a snapshot and half-dead segments, then a power cut somewhere in
/// `gc`, `snapshot`, `set_snapshot(.., false)` or writes that make writers clean; the recovered
/// pool must hold the live files as they were before or after the interrupted operation, and every
/// snapshot it lists must read exactly as the files were when it was taken.
fn lifecycle_crash_state(seed: u64, barrier: Barrier) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let dev = Arc::new(SimDevice::new(4 << 20));
    let config = Config {
        ordering: Ordering::Relaxed,
        barrier,
        segment_bytes: 128 << 10,
        superblock_every_bytes: 1 << 20,
        superblock_every: Duration::from_secs(1 << 30),
        checkpoint_every: None,
        dirty_bytes_max: 64 << 10,
        protection_period: Duration::ZERO,
        background_gc: false,
        gc_free_percent: 20,
        clock: Clock::wall(),
    };
    let err = |what: &str, e: Error| format!("seed {seed:#x}: {what}: {e}");
    let fs = Fs::format(dev.clone(), &config).map_err(|e| err("format", e))?;
    fs.mkdir("/d", 0o755).map_err(|e| err("mkdir", e))?;
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let write = |fs: &Fs, model: &mut BTreeMap<String, Vec<u8>>, path: &str, data: Vec<u8>| {
        let f = fs.open_file(path, OpenFlags::create())?;
        f.set_len(0)?;
        f.pwrite(&data, 0)?;
        model.insert(path.to_string(), data);
        Ok::<(), Error>(())
    };
    for i in 0..24u64 {
        let len = 1 + rng.below(40 << 10) as usize;
        let path = format!("/d/f{i}");
        write(&fs, &mut model, &path, pattern(rng.next_u64(), len)).map_err(|e| err("write", e))?;
    }
    fs.sync().map_err(|e| err("sync", e))?;
    let mut snapshots: BTreeMap<u64, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    let s1 = fs.snapshot(Some("first")).map_err(|e| err("snapshot", e))?;
    snapshots.insert(s1, model.clone());
    // Half the files change or go: their old blocks are dead (or pinned by the snapshot).
    for i in (0..24u64).step_by(2) {
        let path = format!("/d/f{i}");
        if rng.chance(1, 2) {
            fs.unlink(&path).map_err(|e| err("unlink", e))?;
            model.remove(&path);
        } else {
            let len = 1 + rng.below(40 << 10) as usize;
            write(&fs, &mut model, &path, pattern(rng.next_u64(), len))
                .map_err(|e| err("rewrite", e))?;
        }
    }
    fs.sync().map_err(|e| err("sync", e))?;
    let s2 = fs.snapshot(None).map_err(|e| err("snapshot", e))?;
    snapshots.insert(s2, model.clone());
    let before = model.clone();

    // The interrupted operation.
    let op = rng.below(4);
    dev.cut_power_after(rng.below(40));
    let mut after = before.clone();
    let mut new_snapshot = None;
    let result: tailbound::tbfs::Result<()> = (|| {
        match op {
            0 => {
                fs.gc(0.9)?;
            }
            1 => {
                new_snapshot = Some(fs.snapshot(Some("during"))?);
            }
            2 => fs.set_snapshot(s1, false)?,
            _ => {
                for i in 0..40u64 {
                    let path = format!("/d/g{}", i % 6);
                    let data = pattern(seed ^ i, 1 + (i as usize * 7919) % (48 << 10));
                    write(&fs, &mut after, &path, data)?;
                }
                fs.sync()?;
            }
        }
        Ok(())
    })();
    let acknowledged = result.is_ok();
    drop(fs);
    let image = dev.crash_image(seed);
    let fs = Fs::open(
        Arc::new(SimDevice::from_image(image)),
        &OpenOptions::default(),
    )
    .map_err(|e| err(&format!("recovery after op {op}"), e))?;
    let live = live_contents(&fs).map_err(|e| err("reading the recovered tree", e))?;
    // Writes without a sync may be lost; the files that were synced must be as before, or as
    // after when the op was acknowledged (its sync made it durable).
    let expected_ok = if op == 3 {
        live == before
            || live == after
            || (!acknowledged
                && live.iter().all(|(p, d)| {
                    before.get(p) == Some(d) || after.get(p) == Some(d) || p.starts_with("/d/g")
                })
                && before.keys().all(|p| live.contains_key(p)))
    } else {
        live == before
    };
    if !expected_ok {
        return Err(format!(
            "seed {seed:#x}: op {op} (acknowledged: {acknowledged}): the live tree is neither before nor after"
        ));
    }
    if op == 3 && acknowledged && live != after {
        return Err(format!("seed {seed:#x}: synced writes lost"));
    }
    let listed = fs.checkpoints().map_err(|e| err("checkpoints", e))?;
    for c in listed.iter().filter(|c| c.snapshot) {
        let want = match snapshots.get(&c.number) {
            Some(w) => w,
            None if Some(c.number) == new_snapshot
                || (op == 1 && c.name.as_deref() == Some("during")) =>
            {
                &before
            }
            None => return Err(format!("seed {seed:#x}: unknown snapshot {c:?}")),
        };
        let got =
            view_contents(&fs, c.number).map_err(|e| err(&format!("snapshot {}", c.number), e))?;
        if &got != want {
            return Err(format!(
                "seed {seed:#x}: op {op}: snapshot {} does not read as when it was taken",
                c.number
            ));
        }
    }
    let has = |n: u64| listed.iter().any(|c| c.number == n && c.snapshot);
    if !has(s2) || (op != 2 && !has(s1)) || (op == 2 && acknowledged && has(s1)) {
        return Err(format!("seed {seed:#x}: op {op} (acknowledged: {acknowledged}): snapshots {listed:?}, expected {s1} and {s2}"));
    }
    if op == 1
        && acknowledged
        && !listed
            .iter()
            .any(|c| c.snapshot && c.name.as_deref() == Some("during"))
    {
        return Err(format!("seed {seed:#x}: an acknowledged snapshot is gone"));
    }
    // The recovered pool cleans and keeps everything.
    fs.gc(0.9).map_err(|e| err("gc after recovery", e))?;
    if live_contents(&fs).map_err(|e| err("reading after gc", e))? != live {
        return Err(format!(
            "seed {seed:#x}: gc after recovery changed the files"
        ));
    }
    Ok(())
}

#[test]
fn crashes_during_cleaning_and_snapshot_create_and_drop_keep_the_tree_and_every_snapshot() {
    let states = env_u64("TBFS_CRASH_STATES").unwrap_or(60);
    let base = env_u64("TBFS_CRASH_SEED").unwrap_or(0x11fe);
    let mut failures = Vec::new();
    for i in 0..states {
        let barrier = [
            Barrier::EveryLog,
            Barrier::EveryCheckpoint,
            Barrier::Superblock,
        ][i as usize % 3];
        if let Err(e) = lifecycle_crash_state(base + i, barrier) {
            failures.push(format!("{barrier:?}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {states} crash states failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
