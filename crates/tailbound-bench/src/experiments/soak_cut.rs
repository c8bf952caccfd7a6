//! The soak's check of the files after a power cut (or a reopen): what was durable must read
//! back; what was not may be gone, or be any state the model knows, and what the model cannot
//! vouch for is removed, so the run goes on from a known state. Each file lands in exactly one
//! count, so a report tells lost acknowledged data (a failure) from changes the cut was allowed
//! to take.

use super::trace::{lost_block, LostBlock};
use super::*;

/// What the check after one power cut (or reopen) found among the model's files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CutCheck {
    /// Files the model held at the cut, and the bytes their content holds.
    pub files: u64,
    pub bytes: u64,
    /// Files made durable (an fsync under a policy where it is, or a sync) and not changed
    /// since, and their bytes: each must read back exactly.
    pub durable: u64,
    pub durable_bytes: u64,
    /// Of those, the ones that did not (missing, or other bytes): lost acknowledged data.
    pub durable_lost: u64,
    pub durable_lost_bytes: u64,
    /// Files not durable, found as last acknowledged: kept.
    pub acknowledged_kept: u64,
    /// ... found as they were last made durable (the cut took the change since): kept.
    pub rolled_back: u64,
    /// ... found in a state the model does not know (part of a change): removed.
    pub removed: u64,
    pub removed_bytes: u64,
    /// ... not there (a create or a rename the cut took).
    pub absent: u64,
    pub absent_bytes: u64,
    /// Where the lost durable files' first wrong blocks are.
    pub lost_blocks: Vec<LostBlock>,
}

impl CutCheck {
    /// Adds another check's counts to these.
    pub fn add(&mut self, o: &CutCheck) {
        self.files += o.files;
        self.bytes += o.bytes;
        self.durable += o.durable;
        self.durable_bytes += o.durable_bytes;
        self.durable_lost += o.durable_lost;
        self.durable_lost_bytes += o.durable_lost_bytes;
        self.acknowledged_kept += o.acknowledged_kept;
        self.rolled_back += o.rolled_back;
        self.removed += o.removed;
        self.removed_bytes += o.removed_bytes;
        self.absent += o.absent;
        self.absent_bytes += o.absent_bytes;
        self.lost_blocks.extend(o.lost_blocks.iter().cloned());
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "{} files ({:.1} MiB) in the model; {} durable ({:.1} MiB), {} of them lost ({:.1} MiB); not durable: {} kept as acknowledged, {} rolled back to their durable state, {} removed as not durable ({:.1} MiB), {} absent ({:.1} MiB)",
            self.files,
            mib(self.bytes),
            self.durable,
            mib(self.durable_bytes),
            self.durable_lost,
            mib(self.durable_lost_bytes),
            self.acknowledged_kept,
            self.rolled_back,
            self.removed,
            mib(self.removed_bytes),
            self.absent,
            mib(self.absent_bytes)
        )
    }
}

/// Checks one thread's files in the recovered pool `fs`, keeps in the model those found in a
/// state it knows (marked durable: the pool was synced after), unlinks the others, and then
/// every name in the thread's directories the model does not know. `at` names the cut in
/// failures; each lost durable file is one.
pub(super) fn check_thread(
    fs: &Fs,
    cfg: &SoakConfig,
    m: &mut ThreadModel,
    writes: &Mutex<WriteLog>,
    at: &str,
    fail: &dyn Fn(String),
) -> Result<CutCheck, Error> {
    let mut c = CutCheck::default();
    let mut kept: Vec<FileModel> = Vec::new();
    for f in std::mem::take(&mut m.files) {
        // A pool that stops while being checked fails every later read: the caller says so.
        fs.statvfs()?;
        let bytes = f.content.len();
        c.files += 1;
        c.bytes += bytes;
        let got = read_all(fs, &f.path, cfg.pool_bytes);
        if let Some(want) = &f.durable {
            c.durable += 1;
            c.durable_bytes += want.len();
            let lost = match &got {
                Ok(read) => want.mismatch(read).map(|bad| {
                    let why = explain(writes, read, &bad);
                    match lost_block(fs, &f.path, bad.offset) {
                        Ok(l) => {
                            let at = format!(
                                "{why} (inode {}, its block {} at block {} of the pool)",
                                l.ino, l.block, l.addr
                            );
                            c.lost_blocks.push(l);
                            at
                        }
                        Err(e) => format!("{why} (its block's address: {e})"),
                    }
                }),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = lost {
                c.durable_lost += 1;
                c.durable_lost_bytes += want.len();
                fail(format!("{at}: {} was durable: {why}", f.path));
            }
        }
        match got {
            Ok(read) if f.content.mismatch(&read).is_none() => {
                if f.durable.is_none() {
                    c.acknowledged_kept += 1;
                }
                kept.push(FileModel {
                    durable: Some(f.content.clone()),
                    ..f
                });
            }
            Ok(read)
                if f.durable.is_none()
                    && f.last_durable
                        .as_ref()
                        .is_some_and(|d| d.mismatch(&read).is_none()) =>
            {
                c.rolled_back += 1;
                let d = f.last_durable.clone().unwrap_or_default();
                kept.push(FileModel {
                    content: d.clone(),
                    durable: Some(d),
                    ..f
                });
            }
            Ok(_) => {
                // What the crash left of a change not made durable: as a program would after
                // a crash, remove it (a durable one that differs is counted lost above).
                if f.durable.is_none() {
                    c.removed += 1;
                    c.removed_bytes += bytes;
                }
                if let Err(e) = fs.unlink(&f.path) {
                    fail(format!("{at}: unlinking {}: {e}", f.path));
                }
            }
            Err(Error::NotFound(_)) => {
                if f.durable.is_none() {
                    c.absent += 1;
                    c.absent_bytes += bytes;
                }
            }
            Err(e) => {
                if f.durable.is_none() {
                    fail(format!("{at}: reading {}: {e}", f.path));
                }
            }
        }
    }
    // Names the model does not know (a replace's temporary, a create cut short) go too.
    let keep: std::collections::HashSet<&str> = kept.iter().map(|f| f.path.as_str()).collect();
    for dir in [m.dir(), format!("{}/sub", m.dir())] {
        match fs.readdir(&dir) {
            Ok(list) => {
                for e in list.into_iter().filter(|e| e.name != "sub") {
                    let p = format!("{dir}/{}", e.name);
                    if m.gone_durable.contains(&p) {
                        fail(format!("{at}: {p} was deleted durably and is back"));
                    }
                    if !keep.contains(p.as_str()) {
                        if let Err(e) = fs.unlink(&p) {
                            fail(format!("{at}: unlinking {p}: {e}"));
                        }
                    }
                }
            }
            Err(e) => fail(format!("{at}: readdir {dir}: {e}")),
        }
    }
    drop(keep);
    m.files = kept;
    m.gone.clear();
    m.gone_durable.clear();
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool with one thread's directories and `n` files of 20,000 bytes (stamps 1..=n),
    /// synced, and the model that says so.
    fn pool_with_files(n: u64) -> (Fs, SoakConfig, ThreadModel) {
        let cfg = SoakConfig::new(16 << 20, vec![0.5], Budget::Ops(1));
        let dev = Arc::new(SimDevice::new(cfg.pool_bytes));
        let config = Config {
            segment_bytes: 64 << 10,
            background_gc: false,
            ..Config::memory_pool()
        };
        let fs = Fs::format(dev, &config).unwrap();
        fs.mkdir("/t0", 0o755).unwrap();
        fs.mkdir("/t0/sub", 0o755).unwrap();
        let mut m = ThreadModel::new(0, 1);
        for stamp in 1..=n {
            let path = format!("/t0/f{stamp}");
            let f = fs.open_file(&path, OpenFlags::create()).unwrap();
            f.pwrite(&data(stamp, 0, 20_000), 0).unwrap();
            let mut content = Content::default();
            content.write(0, 20_000, stamp);
            m.files.push(FileModel {
                path,
                content: content.clone(),
                durable: Some(content.clone()),
                last_durable: Some(content),
            });
        }
        fs.sync().unwrap();
        (fs, cfg, m)
    }

    fn check(fs: &Fs, cfg: &SoakConfig, m: &mut ThreadModel) -> (CutCheck, Vec<String>) {
        let failures = Mutex::new(Vec::new());
        let c = check_thread(fs, cfg, m, &Mutex::default(), "cut", &|msg| {
            failures.lock().push(msg)
        })
        .unwrap();
        (c, failures.into_inner())
    }

    #[test]
    fn every_durable_file_read_back_passes() {
        let (fs, cfg, mut m) = pool_with_files(3);
        let (c, failures) = check(&fs, &cfg, &mut m);
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!((c.files, c.durable, c.durable_lost), (3, 3, 0));
        assert_eq!(m.files.len(), 3);
    }

    #[test]
    fn a_lost_durable_file_fails_the_check() {
        let (fs, cfg, mut m) = pool_with_files(3);
        // Injected losses: one durable file gone, another with other bytes in a block.
        fs.unlink("/t0/f1").unwrap();
        let f = fs.open_file("/t0/f2", OpenFlags::create()).unwrap();
        f.pwrite(&data(99, 4096, 4096), 4096).unwrap();
        let (c, failures) = check(&fs, &cfg, &mut m);
        assert_eq!((c.durable, c.durable_lost), (3, 2), "{c:?}");
        assert_eq!(c.durable_lost_bytes, 40_000);
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].contains("/t0/f1 was durable"), "{failures:?}");
        assert!(
            failures[1].contains("/t0/f2 was durable") && failures[1].contains("byte 4096 reads"),
            "{failures:?}"
        );
        // The wrong block is named where the pool keeps it; the missing file has none.
        assert_eq!(c.lost_blocks.len(), 1, "{c:?}");
        let l = &c.lost_blocks[0];
        assert_eq!((l.path.as_str(), l.block), ("/t0/f2", 1), "{l:?}");
        let at = format!("its block 1 at block {} of the pool", l.addr);
        assert!(failures[1].contains(&at), "{failures:?}");
        // Neither counts as a change the cut was allowed to take.
        assert_eq!((c.removed, c.absent, c.rolled_back), (0, 0, 0));
        assert_eq!(m.files.len(), 1);
    }

    #[test]
    fn changes_not_made_durable_are_counted_apart_and_do_not_fail() {
        let (fs, cfg, mut m) = pool_with_files(4);
        // f1: an acknowledged change the cut kept; f2: one it took (the file reads as it was
        // made durable); f3: a part of one (a state the model does not know); f4: a create it
        // took.
        let durable: Vec<Content> = m.files.iter().map(|f| f.content.clone()).collect();
        for (i, stamp) in [(0usize, 11u64), (1, 12), (2, 13)] {
            m.files[i].content.write(0, 8192, stamp);
            m.files[i].durable = None;
        }
        let f = fs.open_file("/t0/f1", OpenFlags::create()).unwrap();
        f.pwrite(&data(11, 0, 8192), 0).unwrap();
        let f = fs.open_file("/t0/f3", OpenFlags::create()).unwrap();
        f.pwrite(&data(13, 0, 4096), 0).unwrap();
        m.files[3].durable = None;
        m.files[3].last_durable = None;
        fs.unlink("/t0/f4").unwrap();
        let (c, failures) = check(&fs, &cfg, &mut m);
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(
            (
                c.durable,
                c.acknowledged_kept,
                c.rolled_back,
                c.removed,
                c.absent
            ),
            (0, 1, 1, 1, 1),
            "{c:?}"
        );
        assert_eq!((c.removed_bytes, c.absent_bytes), (20_000, 20_000));
        assert!(fs.open_file("/t0/f3", OpenFlags::read_only()).is_err());
        let kept: Vec<(&str, &Content)> = m
            .files
            .iter()
            .map(|f| (f.path.as_str(), &f.content))
            .collect();
        assert_eq!(kept.len(), 2);
        assert!(kept.contains(&("/t0/f2", &durable[1])), "{kept:?}");
    }
}
