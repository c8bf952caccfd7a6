//! Where a lost durable block is: the address the recovered pool maps it to, and the logs whose
//! summaries the device still holds that wrote that address or the file, so a failure names
//! which log put the bytes there and which one last wrote the file's block.

use super::*;
use tailbound::tbfs::format::{self, Summary, BLOCK_U64};

/// Summaries of the file's logs listed per lost block, at most (the newest).
const FILE_LOGS_MAX: usize = 8;

/// A durable file's block that read other bytes after a cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostBlock {
    pub path: String,
    pub ino: u64,
    /// The file's block (4 KiB) where the first wrong byte is.
    pub block: u64,
    /// The pool's block the recovered map names for it (0: a hole).
    pub addr: u64,
}

/// The block of `path` holding byte `offset`, as the recovered pool `fs` maps it.
pub(super) fn lost_block(fs: &Fs, path: &str, offset: u64) -> Result<LostBlock, Error> {
    let f = fs.open_file(path, OpenFlags::read_only())?;
    let block = offset / BLOCK_U64;
    let lease = f.lease_blocks(block, 1, &mut |_| {})?;
    Ok(LostBlock {
        path: path.to_string(),
        ino: f.ino(),
        block,
        addr: lease.blocks.first().copied().unwrap_or(0),
    })
}

/// What the device's summaries say of `lost` (`image`: the device's bytes): each log that laid
/// out the block at its address, and the newest logs holding the file's block.
pub(super) fn who_wrote(image: &[u8], lost: &LostBlock) -> Vec<String> {
    let block_at = |pos: u64| &image[(pos * BLOCK_U64) as usize..((pos + 1) * BLOCK_U64) as usize];
    let mut at_addr = Vec::new();
    let mut of_file: Vec<(u64, String)> = Vec::new();
    for pos in format::FIRST_SEGMENT_BLOCK..image.len() as u64 / BLOCK_U64 {
        let Ok((s, _)) = Summary::decode(block_at(pos)) else {
            continue;
        };
        let log = format!(
            "log {} at block {pos} (flags {:#x}, checkpoint {})",
            s.sequence, s.flags, s.checkpoint
        );
        if pos == lost.addr {
            at_addr.push(format!("block {} is the summary of {log}", lost.addr));
        }
        let mut payload = pos + 1;
        for d in &s.descriptors {
            let n = u64::from(d.blocks);
            if (payload..payload + n).contains(&lost.addr) {
                at_addr.push(format!(
                    "{log} put {:?} of inode {} (index {}) at block {}",
                    d.kind,
                    d.ino,
                    d.offset + (lost.addr - payload),
                    lost.addr
                ));
            }
            let holds = d.ino == lost.ino && (d.offset..d.offset + n).contains(&lost.block);
            if holds && matches!(d.kind, format::DescKind::Data | format::DescKind::Placed) {
                of_file.push((
                    s.sequence,
                    format!(
                        "{log} put {:?} of inode {} block {} at block {}",
                        d.kind,
                        d.ino,
                        lost.block,
                        payload + (lost.block - d.offset)
                    ),
                ));
            }
            payload += n;
        }
    }
    of_file.sort_by_key(|&(seq, _)| std::cmp::Reverse(seq));
    at_addr
        .into_iter()
        .chain(of_file.into_iter().take(FILE_LOGS_MAX).map(|(_, l)| l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_block_is_named_with_the_log_that_wrote_its_address() {
        let dev = Arc::new(SimDevice::new(16 << 20));
        let config = Config {
            segment_bytes: 256 << 10,
            background_gc: false,
            checkpoint_every: None,
            ..Config::memory_pool()
        };
        let fs = Fs::format(dev.clone(), &config).unwrap();
        let f = fs.open_file("/f", OpenFlags::create()).unwrap();
        f.pwrite(&[3u8; 3 * 4096], 0).unwrap();
        fs.sync().unwrap();
        let l = lost_block(&fs, "/f", 4096 + 100).unwrap();
        assert_eq!((l.path.as_str(), l.ino, l.block), ("/f", f.ino(), 1));
        assert!(l.addr >= format::FIRST_SEGMENT_BLOCK, "{l:?}");
        let lines = who_wrote(&dev.image(), &l);
        let put = format!("put Data of inode {} (index 1) at block {}", l.ino, l.addr);
        assert!(lines.iter().any(|s| s.contains(&put)), "{lines:#?}");
        let newest = format!("put Data of inode {} block 1 at block {}", l.ino, l.addr);
        assert!(
            lines.iter().any(|s| s.contains(&newest)),
            "the file's log: {lines:#?}"
        );
        // A block of another file is not this one's.
        let g = fs.open_file("/g", OpenFlags::create()).unwrap();
        g.pwrite(&[4u8; 4096], 0).unwrap();
        fs.sync().unwrap();
        let other = lost_block(&fs, "/g", 0).unwrap();
        let lines = who_wrote(&dev.image(), &other);
        assert!(!lines.iter().any(|s| s.contains(&put)), "{lines:#?}");
    }
}
