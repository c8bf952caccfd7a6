//! Logs: the summary block and its descriptors, and the nodes of a block map.

use super::*;

/// What a descriptor says its blocks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DescKind {
    Data = 1,
    MapNode = 2,
    InodePage = 3,
    InodeMapNode = 4,
    Root = 5,
    Attr = 6,
    /// A page of one of the checkpoint's tables (`ino` is the table id, `offset` the page).
    TablePage = 7,
    /// A map node of one of the checkpoint's tables (`ino` is the table id).
    TableNode = 8,
    /// File data placed for the next checkpoint, which roll-forward does not replay: the data
    /// of a file with a change only a checkpoint records (created, renamed, linked, its
    /// attributes or size set) when it was written. The newest checkpoint before the log may
    /// not hold that file, or hold another file under its number (version 2).
    Placed = 9,
    /// In a checkpoint's logs, no blocks: file `ino` has a change in this checkpoint that its
    /// later data-only logs build on (a change only a checkpoint records, or buffered data the
    /// checkpoint wrote). Recovery replays none of those logs of the file over an older
    /// checkpoint when this one is incomplete (version 4).
    Depends = 10,
    /// In a pad log, no blocks: the log chain goes on at block `offset` instead of after the
    /// pad (version 5). Moves the chain between the writers' log head and the cleaner's.
    Jump = 11,
}

impl DescKind {
    fn from_u8(v: u8) -> Option<DescKind> {
        Some(match v {
            1 => DescKind::Data,
            2 => DescKind::MapNode,
            3 => DescKind::InodePage,
            4 => DescKind::InodeMapNode,
            5 => DescKind::Root,
            6 => DescKind::Attr,
            7 => DescKind::TablePage,
            8 => DescKind::TableNode,
            9 => DescKind::Placed,
            10 => DescKind::Depends,
            11 => DescKind::Jump,
            _ => return None,
        })
    }
}

/// One extent (or attribute record) of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub kind: DescKind,
    pub level: u8,
    pub blocks: u32,
    pub ino: u64,
    /// First file block (data), node index (nodes), page index (inode pages); size for `Attr`.
    pub offset: u64,
    /// mtime for `Attr`, else 0.
    pub extra: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub flags: u16,
    pub payload_blocks: u32,
    pub pool_id: [u8; 16],
    pub sequence: u64,
    pub checkpoint: u64,
    pub segment_next: u64,
    pub prev_crc: u32,
    pub payload_crc: u32,
    pub time_ns: i64,
    pub descriptors: Vec<Descriptor>,
}

impl Summary {
    /// Encodes into `b` (one block) and returns the summary CRC.
    pub fn encode_into(&self, b: &mut [u8]) -> u32 {
        assert!(
            self.descriptors.len() <= DESCRIPTORS_MAX,
            "descriptor count bounded by the writer"
        );
        b[..BLOCK].fill(0);
        b[0..8].copy_from_slice(LOG_MAGIC);
        put_u16(b, 8, VERSION as u16);
        put_u16(b, 10, self.flags);
        put_u32(b, 12, self.payload_blocks);
        b[16..32].copy_from_slice(&self.pool_id);
        put_u64(b, 32, self.sequence);
        put_u64(b, 40, self.checkpoint);
        put_u64(b, 48, self.segment_next);
        put_u32(b, 56, self.descriptors.len() as u32);
        put_u32(b, 60, self.prev_crc);
        put_u32(b, 64, self.payload_crc);
        put_u64(b, 72, self.time_ns as u64);
        for (i, d) in self.descriptors.iter().enumerate() {
            let at = SUMMARY_HEADER_BYTES + i * DESCRIPTOR_BYTES;
            b[at] = d.kind as u8;
            b[at + 1] = d.level;
            put_u32(b, at + 4, d.blocks);
            put_u64(b, at + 8, d.ino);
            put_u64(b, at + 16, d.offset);
            put_u64(b, at + 24, d.extra as u64);
        }
        let c = crc(&b[..BLOCK]);
        put_u32(b, 68, c);
        c
    }

    /// Decodes a summary block, checking everything that needs no payload. Returns the summary
    /// and its CRC.
    pub fn decode(b: &[u8]) -> Result<(Summary, u32), Invalid> {
        if b.len() != BLOCK {
            return invalid("summary is not one block");
        }
        if &b[0..8] != LOG_MAGIC {
            return invalid("no log summary (bad magic)");
        }
        let stored = get_u32(b, 68);
        let mut copy = [0u8; BLOCK];
        copy.copy_from_slice(b);
        put_u32(&mut copy, 68, 0);
        if crc(&copy) != stored {
            return invalid("summary CRC mismatch");
        }
        if !(VERSION_OLDEST..=VERSION).contains(&(get_u16(b, 8) as u32)) {
            return invalid("unknown log version");
        }
        let flags = get_u16(b, 10);
        if flags & !FLAGS_KNOWN != 0 {
            return invalid(format!("unknown log flags {flags:#x}"));
        }
        let count = get_u32(b, 56) as usize;
        if count > DESCRIPTORS_MAX {
            return invalid(format!("{count} descriptors (at most {DESCRIPTORS_MAX})"));
        }
        let mut descriptors = Vec::with_capacity(count);
        let mut blocks_total: u64 = 0;
        for i in 0..count {
            let at = SUMMARY_HEADER_BYTES + i * DESCRIPTOR_BYTES;
            let Some(kind) = DescKind::from_u8(b[at]) else {
                return invalid(format!("descriptor {i}: unknown kind {}", b[at]));
            };
            let d = Descriptor {
                kind,
                level: b[at + 1],
                blocks: get_u32(b, at + 4),
                ino: get_u64(b, at + 8),
                offset: get_u64(b, at + 16),
                extra: get_u64(b, at + 24) as i64,
            };
            let blockless = matches!(kind, DescKind::Attr | DescKind::Depends | DescKind::Jump);
            if blockless != (d.blocks == 0) {
                return invalid(format!(
                    "descriptor {i}: block count {} for {kind:?}",
                    d.blocks
                ));
            }
            if d.offset.checked_add(d.blocks as u64).is_none() {
                return invalid(format!("descriptor {i}: offset overflows"));
            }
            blocks_total += d.blocks as u64;
            descriptors.push(d);
        }
        let payload_blocks = get_u32(b, 12);
        if blocks_total != payload_blocks as u64 {
            return invalid(format!(
                "descriptors cover {blocks_total} blocks, summary says {payload_blocks}"
            ));
        }
        let s = Summary {
            flags,
            payload_blocks,
            pool_id: b[16..32].try_into().expect("16 bytes"),
            sequence: get_u64(b, 32),
            checkpoint: get_u64(b, 40),
            segment_next: get_u64(b, 48),
            prev_crc: get_u32(b, 60),
            payload_crc: get_u32(b, 64),
            time_ns: get_u64(b, 72) as i64,
            descriptors,
        };
        let jumps = s
            .descriptors
            .iter()
            .filter(|d| d.kind == DescKind::Jump)
            .count();
        if jumps > 0 && (s.flags & FLAG_PAD == 0 || s.payload_blocks != 0 || count != 1) {
            return invalid("a jump that is not the only record of a pad log");
        }
        if s.flags & FLAG_CHECKPOINT != 0
            && s.descriptors
                .last()
                .is_none_or(|d| d.kind != DescKind::Root || d.blocks != 1)
        {
            return invalid("checkpoint log does not end with its root");
        }
        Ok((s, stored))
    }

    /// Where the chain goes on after this log when it is a jump ([`DescKind::Jump`]): the
    /// block its next log starts at.
    pub fn jump_to(&self) -> Option<u64> {
        self.descriptors
            .iter()
            .find(|d| d.kind == DescKind::Jump)
            .map(|d| d.offset)
    }
}

/// Encodes a block-map node into `b`, which holds zeros: `FANOUT` child addresses at `level`
/// (1: children are data blocks).
pub fn encode_node_into(b: &mut Block, level: u8, children: &[u64]) {
    debug_assert!(children.len() <= FANOUT);
    b[4] = level;
    for (i, &c) in children.iter().enumerate() {
        put_u64(&mut b[..], 8 + i * 8, c);
    }
    let c = crc(&b[4..]);
    put_u32(&mut b[..], 0, c);
}

pub fn decode_node(b: &[u8], level: u8) -> Result<Vec<u64>, Invalid> {
    if b.len() != BLOCK || get_u32(b, 0) != crc(&b[4..BLOCK]) {
        return invalid("map node CRC mismatch");
    }
    if b[4] != level {
        return invalid(format!("map node has level {}, expected {level}", b[4]));
    }
    Ok((0..FANOUT).map(|i| get_u64(b, 8 + i * 8)).collect())
}

/// The least height whose tree covers `blocks` blocks.
pub fn height_for(blocks: u64) -> u8 {
    let mut h = 0u8;
    let mut cover: u64 = 1;
    while cover < blocks {
        cover = cover.saturating_mul(FANOUT as u64);
        h += 1;
    }
    h
}
