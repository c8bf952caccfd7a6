//! What the soak ([`super::soak`]) expects the pool to hold: every file's acknowledged content,
//! kept compactly as the write ("stamp") that last wrote each byte range, and the size mix its
//! files are drawn from.
//!
//! A stamp's bytes are a function of the stamp and the file offset, so a file of any size costs a
//! few map entries, not its bytes, and a read is checked against bytes generated on the spot.

use std::collections::BTreeMap;

use crate::rng::SplitMix64;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// File sizes as real trees hold them: many small files, fewer medium ones, a few large ones,
/// log-uniform within each band, from 4 KiB to 8 MiB.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeMix {
    /// (weight, smallest, largest) of each band.
    pub bands: [(u32, u64, u64); 3],
}

impl Default for SizeMix {
    fn default() -> SizeMix {
        SizeMix {
            bands: [
                (70, 4 * KIB, 64 * KIB),
                (22, 64 * KIB, MIB),
                (8, MIB, 8 * MIB),
            ],
        }
    }
}

impl SizeMix {
    /// The largest size the mix draws.
    pub fn max(&self) -> u64 {
        self.bands.iter().map(|b| b.2).max().unwrap_or(0)
    }

    /// The mean size, for sizing a run.
    pub fn mean(&self) -> f64 {
        let total: u32 = self.bands.iter().map(|b| b.0).sum();
        self.bands
            .iter()
            .map(|&(w, lo, hi)| {
                let (lo, hi) = (lo as f64, hi as f64);
                let mean = if hi > lo {
                    (hi - lo) / (hi / lo).ln()
                } else {
                    lo
                };
                w as f64 * mean
            })
            .sum::<f64>()
            / total.max(1) as f64
    }

    /// One size: a band by weight, then log-uniform in it. Not always block-aligned: programs
    /// write odd lengths.
    pub fn draw(&self, rng: &mut SplitMix64) -> u64 {
        let total: u32 = self.bands.iter().map(|b| b.0).sum();
        let mut pick = rng.below(total.max(1) as u64) as u32;
        let mut band = self.bands[0];
        for b in self.bands {
            if pick < b.0 {
                band = b;
                break;
            }
            pick -= b.0;
        }
        let (lo, hi) = (band.1 as f64, band.2 as f64);
        let u = rng.below(1 << 30) as f64 / (1u64 << 30) as f64;
        let size = (lo * (hi / lo).powf(u)) as u64;
        if rng.below(2) == 0 {
            // Half the files are whole blocks, as copies of block-sized data are.
            size.div_ceil(4 * KIB) * 4 * KIB
        } else {
            size.max(1)
        }
        .clamp(band.1, band.2)
    }
}

/// The byte a write with `stamp` puts at file offset `off`; stamp 0 is a hole (zeros). Never zero
/// otherwise, so a lost block shows.
#[inline]
pub fn stamp_byte(stamp: u64, off: u64) -> u8 {
    (stamp_word(stamp, off >> 3) >> ((off & 7) * 8)) as u8 | 1
}

#[inline]
fn stamp_word(stamp: u64, word: u64) -> u64 {
    let mut z = stamp
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(word.wrapping_mul(0xd1b5_4a32_d192_ed03));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with what `stamp` writes at file offset `off`, a word at a time (this runs over
/// every byte the soak writes and reads, in debug builds too).
pub fn fill(stamp: u64, off: u64, buf: &mut [u8]) {
    if stamp == 0 {
        buf.fill(0);
        return;
    }
    const ONES: u64 = 0x0101_0101_0101_0101;
    // The unaligned head, byte by byte.
    let head = (((8 - (off & 7)) & 7) as usize).min(buf.len());
    for (i, b) in buf[..head].iter_mut().enumerate() {
        *b = stamp_byte(stamp, off + i as u64);
    }
    let mut word = (off + head as u64) >> 3;
    let mut chunks = buf[head..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&(stamp_word(stamp, word) | ONES).to_le_bytes());
        word += 1;
    }
    let tail = chunks.into_remainder();
    let bytes = (stamp_word(stamp, word) | ONES).to_le_bytes();
    let n = tail.len();
    tail.copy_from_slice(&bytes[..n]);
}

/// A file's content: its size and, per byte range, the stamp that last wrote it. Ranges are
/// disjoint and cover `0..len`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Content {
    len: u64,
    /// start -> (end, stamp).
    runs: BTreeMap<u64, (u64, u64)>,
}

impl Content {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ranges (start, end, stamp) in order.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.runs.iter().map(|(&s, &(e, st))| (s, e, st))
    }

    /// Cuts the run that straddles `at`, so a run starts there (unless `at` is the end).
    fn split_at(&mut self, at: u64) {
        let Some((&s, &(e, st))) = self.runs.range(..at).next_back() else {
            return;
        };
        if s < at && at < e {
            self.runs.insert(s, (at, st));
            self.runs.insert(at, (e, st));
        }
    }

    /// Replaces `start..end` by one run of `stamp`.
    fn put(&mut self, start: u64, end: u64, stamp: u64) {
        if start >= end {
            return;
        }
        self.split_at(start);
        self.split_at(end);
        let inside: Vec<u64> = self.runs.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            self.runs.remove(&s);
        }
        self.runs.insert(start, (end, stamp));
    }

    /// A write of `len` bytes of `stamp` at `off`; a gap past the old end reads as zeros.
    pub fn write(&mut self, off: u64, len: u64, stamp: u64) {
        if len == 0 {
            return;
        }
        if off > self.len {
            let from = self.len;
            self.put(from, off, 0);
        }
        self.put(off, off + len, stamp);
        self.len = self.len.max(off + len);
    }

    /// `set_len`: cut, or extended with zeros.
    pub fn set_len(&mut self, len: u64) {
        if len > self.len {
            let from = self.len;
            self.put(from, len, 0);
        } else {
            self.split_at(len);
            let past: Vec<u64> = self.runs.range(len..).map(|(&s, _)| s).collect();
            for s in past {
                self.runs.remove(&s);
            }
        }
        self.len = len;
    }

    /// Where `got` (the whole file as read) first differs from this content, if it does: `None`
    /// when it matches.
    pub fn mismatch(&self, got: &[u8]) -> Option<Mismatch> {
        if got.len() as u64 != self.len {
            return Some(Mismatch {
                offset: got.len().min(self.len as usize) as u64,
                detail: format!("size {} where {} was acknowledged", got.len(), self.len),
            });
        }
        for (s, e, stamp) in self.runs() {
            let part = &got[s as usize..e as usize];
            let mut want = vec![0u8; part.len()];
            fill(stamp, s, &mut want);
            if part != &want[..] {
                let at = part
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Some(Mismatch {
                    offset: s + at as u64,
                    detail: format!(
                        "byte {} reads {:#04x}, the write (stamp {stamp:#x}) of {s}..{e} put {:#04x}{}",
                        s + at as u64,
                        part[at],
                        want[at],
                        if part[at] == 0 { " (a hole or a lost block)" } else { "" }
                    ),
                });
            }
        }
        None
    }

    /// Where `got`, read at `off` (as far as the file reaches), first differs from this
    /// content, if it does: what a write refused for room must have left as it was.
    pub fn mismatch_at(&self, off: u64, got: &[u8]) -> Option<Mismatch> {
        let end = off + got.len() as u64;
        if end > self.len {
            return Some(Mismatch {
                offset: self.len.max(off),
                detail: format!(
                    "{} bytes read at {off}, past the size {}",
                    got.len(),
                    self.len
                ),
            });
        }
        let mut want = vec![0u8; got.len()];
        for (s, e, stamp) in self.runs() {
            let (a, b) = (s.max(off), e.min(end));
            if a < b {
                fill(stamp, a, &mut want[(a - off) as usize..(b - off) as usize]);
            }
        }
        let at = got.iter().zip(&want).position(|(g, w)| g != w)?;
        Some(Mismatch {
            offset: off + at as u64,
            detail: format!(
                "byte {} reads {:#04x} where {:#04x} was acknowledged",
                off + at as u64,
                got[at],
                want[at]
            ),
        })
    }
}

/// Where a read first differs from the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: u64,
    pub detail: String,
}

/// Every write the run made, to name whose bytes a wrong read returned.
#[derive(Debug, Default)]
pub struct WriteLog {
    /// (stamp, offset, length, the file's path then).
    writes: Vec<(u64, u64, u64, String)>,
}

impl WriteLog {
    pub fn push(&mut self, stamp: u64, off: u64, len: u64, path: &str) {
        self.writes.push((stamp, off, len, path.to_string()));
    }

    /// Which write put the bytes `got` read at file offset `at`: a block is where the pool keeps
    /// data, so the candidates are every write's bytes at the same offset within a block.
    pub fn whose(&self, got: &[u8], at: u64) -> String {
        const B: u64 = 4096;
        let n = got.len().min(16).min((B - at % B) as usize);
        if n == 0 {
            return "nothing read there".into();
        }
        if got[..n].iter().all(|&b| b == 0) {
            return "zeros there: a hole or a block never written".into();
        }
        let mut want = [0u8; 16];
        for (stamp, off, len, path) in self.writes.iter().rev() {
            let mut o = off.div_ceil(B) * B + at % B;
            if o >= B && o - B >= *off {
                o -= B;
            }
            while o + n as u64 <= off + len {
                fill(*stamp, o, &mut want[..n]);
                if want[..n] == got[..n] {
                    return format!(
                        "the bytes there are those the write (stamp {stamp:#x}) of {off}..{} put at offset {o} of {path}",
                        off + len
                    );
                }
                o += B;
            }
        }
        "the bytes there are no write's the run made".into()
    }
}

/// One file a soak thread owns.
#[derive(Debug, Clone)]
pub struct FileModel {
    pub path: String,
    /// What a read must return now.
    pub content: Content,
    /// What a power cut must leave at `path`, if the file has been made durable and neither its
    /// content nor its name changed since.
    pub durable: Option<Content>,
    /// The content it had when last made durable at `path`, changed since or not: a state a
    /// power cut may leave (it may also leave the acknowledged `content`).
    pub last_durable: Option<Content>,
}

impl FileModel {
    /// A file just created at `path`, holding nothing durable.
    pub fn new(path: String) -> FileModel {
        FileModel {
            path,
            content: Content::default(),
            durable: None,
            last_durable: None,
        }
    }

    /// An fsync (under a policy where it is durable) or a sync returned: the content as it is
    /// now must survive a power cut.
    pub fn made_durable(&mut self) {
        self.durable = Some(self.content.clone());
        self.last_durable = self.durable.clone();
    }

    /// Bytes the file's data holds in the pool, counted in whole blocks.
    pub fn bytes(&self) -> u64 {
        self.content.len().div_ceil(4 * KIB) * 4 * KIB
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(c: &Content) -> Vec<u8> {
        let mut out = vec![0u8; c.len() as usize];
        for (s, e, st) in c.runs() {
            fill(st, s, &mut out[s as usize..e as usize]);
        }
        out
    }

    #[test]
    fn a_range_read_back_is_checked_against_the_content_it_covers() {
        let mut c = Content::default();
        c.write(0, 10_000, 5);
        c.write(3_000, 2_000, 9);
        c.set_len(12_000);
        let plain = bytes_of(&c);
        for (off, end) in [
            (0, 12_000),
            (2_500, 5_500),
            (4_999, 5_001),
            (11_000, 12_000),
        ] {
            assert_eq!(c.mismatch_at(off, &plain[off as usize..end as usize]), None);
        }
        let mut bad = plain[2_000..6_000].to_vec();
        bad[1_500] ^= 0x40;
        assert_eq!(c.mismatch_at(2_000, &bad).map(|m| m.offset), Some(3_500));
        // A range reaching past the size is a mismatch at the size.
        let past = vec![0u8; 10];
        assert_eq!(c.mismatch_at(11_995, &past).map(|m| m.offset), Some(12_000));
    }

    #[test]
    fn content_follows_writes_truncates_and_extensions_byte_for_byte() {
        let mut rng = SplitMix64::new(3);
        let mut c = Content::default();
        let mut plain: Vec<u8> = Vec::new();
        for stamp in 1..400u64 {
            match rng.below(4) {
                0 => {
                    let len = rng.range(0, plain.len() as u64 + 5000);
                    c.set_len(len);
                    plain.resize(len as usize, 0);
                }
                _ => {
                    let off = rng.range(0, plain.len() as u64 + 3000);
                    let len = rng.range(1, 9000);
                    c.write(off, len, stamp);
                    let end = (off + len) as usize;
                    if plain.len() < end {
                        plain.resize(end, 0);
                    }
                    fill(stamp, off, &mut plain[off as usize..end]);
                }
            }
            assert_eq!(bytes_of(&c), plain, "after stamp {stamp}");
            assert_eq!(c.mismatch(&plain), None);
        }
        assert!(!plain.is_empty());
        let mut bad = plain.clone();
        let at = bad.len() / 2;
        bad[at] = 0;
        assert_eq!(c.mismatch(&bad).map(|m| m.offset), Some(at as u64));
        assert!(c.mismatch(&plain[..plain.len() - 1]).is_some());
    }

    #[test]
    fn the_write_log_names_whose_bytes_a_block_holds() {
        let mut log = WriteLog::default();
        log.push(5, 100, 20_000, "/a");
        log.push(6, 0, 8192, "/b");
        let mut buf = vec![0u8; 4096];
        fill(5, 12_288, &mut buf);
        let who = log.whose(&buf[10..], 4096 + 10);
        assert!(
            who.contains("stamp 0x5") && who.contains("offset 12298 of /a"),
            "{who}"
        );
        assert!(log.whose(&[0u8; 8], 0).contains("zeros"));
        assert!(log.whose(&[7u8; 8], 0).contains("no write"));
    }

    #[test]
    fn fill_matches_stamp_byte_at_any_offset() {
        for off in 0..20u64 {
            for len in 0..40 {
                let mut buf = vec![0u8; len];
                fill(9, off, &mut buf);
                for (i, b) in buf.iter().enumerate() {
                    assert_eq!(*b, stamp_byte(9, off + i as u64), "off {off} len {len}");
                    assert_ne!(*b, 0);
                }
            }
        }
    }

    #[test]
    fn the_size_mix_is_skewed_to_small_files_and_stays_in_range() {
        let mix = SizeMix::default();
        let mut rng = SplitMix64::new(1);
        let sizes: Vec<u64> = (0..10_000).map(|_| mix.draw(&mut rng)).collect();
        assert!(sizes.iter().all(|&s| (4 * KIB..=8 * MIB).contains(&s)));
        let small = sizes.iter().filter(|&&s| s <= 64 * KIB).count();
        let large = sizes.iter().filter(|&&s| s > MIB).count();
        assert!(
            small > 6_000 && large < 1_500 && large > 300,
            "{small} {large}"
        );
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        assert!(
            (mean / mix.mean() - 1.0).abs() < 0.2,
            "{mean} {}",
            mix.mean()
        );
    }
}
