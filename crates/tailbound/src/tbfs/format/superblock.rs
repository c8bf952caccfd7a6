//! The superblock: where the pool starts, and where roll-forward starts.

use super::*;

/// Where roll-forward starts: the log after the superblock's checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogPosition {
    pub block: u64,
    pub sequence: u64,
    pub prev_crc: u32,
    /// The segment that follows the one holding `block`.
    pub segment_next: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// The format version it was read with ([`VERSION`] for one made by this build); encoding
    /// always writes [`VERSION`].
    pub version: u32,
    pub pool_id: [u8; 16],
    pub generation: u64,
    pub pool_bytes: u64,
    pub segment_blocks: u64,
    pub segment_count: u64,
    pub ordering: u8,
    pub barrier: u8,
    pub superblock_every_bytes: u64,
    pub superblock_every_ms: u64,
    pub checkpoint_every_ms: u64,
    pub dirty_bytes_max: u64,
    pub checkpoint: u64,
    pub checkpoint_root: u64,
    pub checkpoint_sequence: u64,
    pub next: LogPosition,
    pub created_ns: i64,
    pub written_ns: i64,
    /// How long plain checkpoints are kept, in ms.
    pub protection_ms: u64,
    pub background_gc: bool,
    pub gc_free_percent: u8,
}

/// Where the CRC of the superblock's first sector (bytes `0..SUPER_SECTOR_CRC`) is kept.
pub const SUPER_SECTOR_CRC: usize = crate::dev::SECTOR_SIZE as usize - 4;

impl Superblock {
    pub fn encode(&self) -> Box<Block> {
        let mut b = Box::new([0u8; BLOCK]);
        b[0..8].copy_from_slice(SUPER_MAGIC);
        put_u32(&mut b[..], 8, VERSION);
        put_u32(&mut b[..], 12, BLOCK as u32);
        b[16..32].copy_from_slice(&self.pool_id);
        put_u64(&mut b[..], 32, self.generation);
        put_u64(&mut b[..], 40, self.pool_bytes);
        put_u64(&mut b[..], 48, self.segment_blocks);
        put_u64(&mut b[..], 56, self.segment_count);
        put_u64(&mut b[..], 64, FIRST_SEGMENT_BLOCK);
        b[72] = self.ordering;
        b[73] = self.barrier;
        put_u64(&mut b[..], 80, self.superblock_every_bytes);
        put_u64(&mut b[..], 88, self.superblock_every_ms);
        put_u64(&mut b[..], 96, self.checkpoint_every_ms);
        put_u64(&mut b[..], 104, self.dirty_bytes_max);
        put_u64(&mut b[..], 112, self.checkpoint);
        put_u64(&mut b[..], 120, self.checkpoint_root);
        put_u64(&mut b[..], 128, self.checkpoint_sequence);
        put_u64(&mut b[..], 136, self.next.block);
        put_u64(&mut b[..], 144, self.next.sequence);
        put_u32(&mut b[..], 152, self.next.prev_crc);
        put_u64(&mut b[..], 160, self.next.segment_next);
        put_u64(&mut b[..], 168, self.created_ns as u64);
        put_u64(&mut b[..], 176, self.written_ns as u64);
        put_u64(&mut b[..], 184, self.protection_ms);
        b[192] = u8::from(self.background_gc);
        b[193] = self.gc_free_percent;
        // The first sector's own CRC: a write torn at sector granularity then leaves the copy
        // old or new, never invalid, since every field lives in that sector. The block's CRC
        // keeps it readable by builds that check only that one.
        assert!(
            b[SUPER_SECTOR_CRC..].iter().all(|&x| x == 0),
            "every superblock field lies in its first sector"
        );
        let c = crc(&b[..SUPER_SECTOR_CRC]);
        put_u32(&mut b[..], SUPER_SECTOR_CRC, c);
        let c = crc(&b[..BLOCK - 4]);
        put_u32(&mut b[..], BLOCK - 4, c);
        b
    }

    /// Decodes and checks a superblock against the device it was read from.
    pub fn decode(b: &[u8], device_bytes: u64) -> Result<Superblock, Invalid> {
        if b.len() != BLOCK {
            return invalid(format!("is {} bytes, not {BLOCK}", b.len()));
        }
        if &b[0..8] != SUPER_MAGIC {
            return invalid("bad magic (not a tbfs pool)");
        }
        // A pool written before the sector CRC has zeros there and only the block's CRC.
        let sector_whole = get_u32(b, SUPER_SECTOR_CRC) == crc(&b[..SUPER_SECTOR_CRC]);
        if !sector_whole && get_u32(b, BLOCK - 4) != crc(&b[..BLOCK - 4]) {
            return invalid("CRC mismatch");
        }
        let version = get_u32(b, 8);
        if !(VERSION_OLDEST..=VERSION).contains(&version) {
            return invalid(format!(
                "format version {version}, this build reads {VERSION_OLDEST} to {VERSION}"
            ));
        }
        if get_u32(b, 12) as usize != BLOCK || get_u64(b, 64) != FIRST_SEGMENT_BLOCK {
            return invalid("unsupported block size or layout");
        }
        let sb = Superblock {
            version,
            pool_id: b[16..32].try_into().expect("16 bytes"),
            generation: get_u64(b, 32),
            pool_bytes: get_u64(b, 40),
            segment_blocks: get_u64(b, 48),
            segment_count: get_u64(b, 56),
            ordering: b[72],
            barrier: b[73],
            superblock_every_bytes: get_u64(b, 80),
            superblock_every_ms: get_u64(b, 88),
            checkpoint_every_ms: get_u64(b, 96),
            dirty_bytes_max: get_u64(b, 104),
            checkpoint: get_u64(b, 112),
            checkpoint_root: get_u64(b, 120),
            checkpoint_sequence: get_u64(b, 128),
            next: LogPosition {
                block: get_u64(b, 136),
                sequence: get_u64(b, 144),
                prev_crc: get_u32(b, 152),
                segment_next: get_u64(b, 160),
            },
            created_ns: get_u64(b, 168) as i64,
            written_ns: get_u64(b, 176) as i64,
            protection_ms: get_u64(b, 184),
            background_gc: b[192] == 1,
            gc_free_percent: b[193].min(90),
        };
        if sb.pool_bytes > device_bytes {
            return invalid(format!(
                "pool is {} bytes but the device has only {device_bytes}",
                sb.pool_bytes
            ));
        }
        if sb.segment_blocks < SEGMENT_BLOCKS_MIN || sb.segment_count < 3 {
            return invalid("segment geometry out of range");
        }
        let end = sb
            .segment_blocks
            .checked_mul(sb.segment_count)
            .and_then(|v| v.checked_add(FIRST_SEGMENT_BLOCK))
            .and_then(|v| v.checked_mul(BLOCK_U64));
        if end.is_none_or(|e| e > sb.pool_bytes) {
            return invalid("segments run past the end of the pool");
        }
        if sb.ordering > 1 || sb.barrier > 2 {
            return invalid("unknown ordering or barrier policy");
        }
        if !sb.contains(sb.checkpoint_root) || !sb.contains(sb.next.block) {
            return invalid("checkpoint or log position outside the segments");
        }
        if sb.next.segment_next >= sb.segment_count {
            return invalid("next segment out of range");
        }
        if sb.next.sequence <= sb.checkpoint_sequence {
            return invalid("roll-forward start is not after its checkpoint");
        }
        Ok(sb)
    }

    /// Whether `block` lies inside the segment area.
    pub fn contains(&self, block: u64) -> bool {
        block >= FIRST_SEGMENT_BLOCK
            && block < FIRST_SEGMENT_BLOCK + self.segment_blocks * self.segment_count
    }
}
