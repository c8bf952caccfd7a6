use super::*;
use proptest::prelude::*;

proptest! {
    #[test]
    fn a_payload_crc_put_together_from_block_crcs_is_the_crc_of_the_bytes(
        blocks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), BLOCK), 0..5)
    ) {
        let whole = blocks.iter().fold(0, |c, b| crc_append(c, b));
        let combined = blocks.iter().fold(0, |c, b| crc_extend_block(c, crc_blocks(b)));
        prop_assert_eq!(whole, combined);
    }
}

fn sample_sb() -> Superblock {
    Superblock {
        version: VERSION,
        pool_id: [7; 16],
        generation: 3,
        pool_bytes: 64 << 20,
        segment_blocks: 256,
        segment_count: 60,
        ordering: 1,
        barrier: 1,
        superblock_every_bytes: 64 << 20,
        superblock_every_ms: 5000,
        checkpoint_every_ms: 5000,
        dirty_bytes_max: 32 << 20,
        checkpoint: 9,
        checkpoint_root: 100,
        checkpoint_sequence: 40,
        next: LogPosition {
            block: 101,
            sequence: 41,
            prev_crc: 0xdead,
            segment_next: 2,
        },
        created_ns: 1,
        written_ns: 2,
        protection_ms: 3_600_000,
        background_gc: true,
        gc_free_percent: 20,
    }
}

#[test]
fn superblock_round_trips_and_rejects_damage() {
    let sb = sample_sb();
    let b = sb.encode();
    assert_eq!(Superblock::decode(&b[..], 64 << 20).unwrap(), sb);
    let mut bad = b.clone();
    bad[200] ^= 1;
    assert!(Superblock::decode(&bad[..], 64 << 20)
        .unwrap_err()
        .0
        .contains("CRC"));
    assert!(Superblock::decode(&b[..], 1 << 20)
        .unwrap_err()
        .0
        .contains("device has only"));
}

#[test]
fn a_superblock_write_torn_by_sectors_leaves_the_old_copy_or_the_new() {
    let old = sample_sb();
    let new = Superblock {
        generation: old.generation + 2,
        checkpoint: old.checkpoint + 5,
        written_ns: old.written_ns + 1,
        ..old.clone()
    };
    let (a, b) = (old.encode(), new.encode());
    let sectors = BLOCK / crate::dev::SECTOR_SIZE as usize;
    for applied in 0u32..1 << sectors {
        let mut torn = a.clone();
        for i in (0..sectors).filter(|i| applied & (1 << i) != 0) {
            let at =
                i * crate::dev::SECTOR_SIZE as usize..(i + 1) * crate::dev::SECTOR_SIZE as usize;
            torn[at.clone()].copy_from_slice(&b[at]);
        }
        let got = Superblock::decode(&torn[..], 64 << 20)
            .unwrap_or_else(|e| panic!("sectors {applied:#b} applied: {}", e.0));
        assert_eq!(
            got,
            if applied & 1 != 0 {
                new.clone()
            } else {
                old.clone()
            }
        );
    }
}

#[test]
fn a_superblock_with_only_the_block_crc_is_read() {
    // As builds before the sector CRC wrote it.
    let sb = sample_sb();
    let mut b = sb.encode();
    put_u32(&mut b[..], SUPER_SECTOR_CRC, 0);
    let c = crc(&b[..BLOCK - 4]);
    put_u32(&mut b[..], BLOCK - 4, c);
    assert_eq!(Superblock::decode(&b[..], 64 << 20).unwrap(), sb);
    b[100] ^= 1;
    assert!(Superblock::decode(&b[..], 64 << 20)
        .unwrap_err()
        .0
        .contains("CRC"));
}

#[test]
fn summary_round_trips_and_checks_counts() {
    let s = Summary {
        flags: FLAG_BEGIN | FLAG_END | FLAG_DATA_ONLY,
        payload_blocks: 3,
        pool_id: [1; 16],
        sequence: 5,
        checkpoint: 2,
        segment_next: 4,
        prev_crc: 77,
        payload_crc: 99,
        time_ns: 12,
        descriptors: vec![
            Descriptor {
                kind: DescKind::Data,
                level: 0,
                blocks: 3,
                ino: 9,
                offset: 10,
                extra: 0,
            },
            Descriptor {
                kind: DescKind::Attr,
                level: 0,
                blocks: 0,
                ino: 9,
                offset: 52000,
                extra: 4,
            },
        ],
    };
    let mut b = [0u8; BLOCK];
    let c = s.encode_into(&mut b);
    let (d, c2) = Summary::decode(&b).unwrap();
    assert_eq!((d, c2), (s, c));
    // A payload count that disagrees with the descriptors is refused even with a fresh CRC.
    put_u32(&mut b, 12, 4);
    put_u32(&mut b, 68, 0);
    let c = crc(&b);
    put_u32(&mut b, 68, c);
    assert!(Summary::decode(&b).unwrap_err().0.contains("cover"));
}

#[test]
fn nodes_inodes_dirs_and_roots_round_trip() {
    let children: Vec<u64> = (0..FANOUT as u64).map(|i| i * 3).collect();
    let mut n = [0u8; BLOCK];
    encode_node_into(&mut n, 2, &children);
    assert_eq!(decode_node(&n[..], 2).unwrap(), children);
    assert!(decode_node(&n[..], 1).is_err());

    let r = InodeRecord {
        ino: 5,
        mode: S_IFREG | 0o644,
        nlink: 1,
        size: 9,
        mtime_ns: 1,
        ctime_ns: 2,
        root: 77,
        height: 1,
        uid: 1000,
        gid: 100,
        atime_ns: 3,
        extents: Extents::default(),
        rdev: 0,
    };
    let mut b = [0u8; INODE_BYTES];
    r.encode_into(&mut b);
    assert_eq!(InodeRecord::decode(&b).unwrap(), Some(r));
    assert_eq!(InodeRecord::decode(&[0u8; INODE_BYTES]).unwrap(), None);

    // A map in the record: fifteen runs (holes among them) fill it to its CRC.
    let blocks: Vec<u64> = (0..15u64)
        .flat_map(|i| {
            let start = if i % 4 == 3 { 0 } else { 1000 + 100 * i };
            (0..i + 1).map(move |k| if start == 0 { 0 } else { start + k })
        })
        .collect();
    let extents = Extents::of(&blocks).expect("fifteen runs fit");
    assert_eq!(extents.runs().len(), EXTENTS_MAX);
    assert_eq!(extents.expand(), blocks);
    let inline = InodeRecord {
        root: 0,
        height: 0,
        extents,
        ..r
    };
    inline.encode_into(&mut b);
    assert_eq!(InodeRecord::decode(&b).unwrap(), Some(inline));
    let mut more = blocks.clone();
    more.push(1);
    assert!(Extents::of(&more).is_none(), "a sixteenth run does not fit");
    // Runs and a tree at once, or a run of no blocks, are malformed.
    InodeRecord { root: 77, ..inline }.encode_into(&mut b);
    assert!(InodeRecord::decode(&b).is_err());
    let mut empty_run = inline;
    empty_run.extents.runs[3].1 = 0;
    empty_run.encode_into(&mut b);
    assert!(InodeRecord::decode(&b).is_err());

    let entries: Vec<DirRecord> = (0..500)
        .map(|i| DirRecord {
            ino: i + 2,
            is_dir: i % 3 == 0,
            name: format!("entry-{i:05}-{}", "x".repeat(i as usize % 40)),
        })
        .collect();
    let blocks = encode_dir(&entries);
    assert!(blocks.len() > 1);
    let mut back = Vec::new();
    for b in &blocks {
        decode_dir_block(&b[..], &mut back).unwrap();
    }
    assert_eq!(back, entries);

    let root = CheckpointRoot {
        number: 4,
        sequence: 8,
        time_ns: 1,
        ifile_root: 50,
        ifile_height: 0,
        ifile_pages: 1,
        next_ino: 3,
        inodes: 2,
        prev_root: 49,
        oldest_protected: 2,
        tables: [
            TableRef {
                root: 60,
                height: 0,
            },
            TableRef {
                root: 61,
                height: 1,
            },
            TableRef { root: 0, height: 0 },
        ],
    };
    assert_eq!(CheckpointRoot::decode(&root.encode()[..]).unwrap(), root);

    let usage = vec![
        UsageEntry {
            born: 3,
            written_ns: 99,
        },
        UsageEntry {
            born: 7,
            written_ns: -1,
        },
    ];
    let page = encode_usage_page(&usage);
    assert_eq!(decode_usage_page(&page[..]).unwrap(), usage);
    assert!(
        decode_pinned_page(&page[..]).is_err(),
        "a page of another table"
    );
    let pinned: Vec<PinnedEntry> = (0..table_entries_per_page(TABLE_PINNED) as u64)
        .map(|i| PinnedEntry {
            block: 100 + i,
            born: i,
            died: i + 2,
        })
        .collect();
    let page = encode_pinned_page(&pinned);
    assert_eq!(decode_pinned_page(&page[..]).unwrap(), pinned);
    let snaps = vec![
        SnapshotEntry {
            number: 4,
            root: 9,
            time_ns: 5,
            name: Some("before-upgrade".into()),
        },
        SnapshotEntry {
            number: 8,
            root: 19,
            time_ns: 6,
            name: None,
        },
    ];
    let mut page = encode_snapshot_page(&snaps);
    assert_eq!(decode_snapshot_page(&page[..]).unwrap(), snaps);
    page[100] ^= 1;
    assert!(decode_snapshot_page(&page[..]).is_err());
}

#[test]
fn heights_cover_their_blocks() {
    assert_eq!(height_for(0), 0);
    assert_eq!(height_for(1), 0);
    assert_eq!(height_for(2), 1);
    assert_eq!(height_for(511), 1);
    assert_eq!(height_for(512), 2);
    assert_eq!(height_for(511 * 511 + 1), 3);
}

proptest! {
    #[test]
    fn decoding_arbitrary_blocks_never_panics(bytes in proptest::collection::vec(any::<u8>(), BLOCK), level in 0u8..7) {
        let _ = Superblock::decode(&bytes, u64::MAX);
        let _ = Summary::decode(&bytes);
        let _ = decode_node(&bytes, level);
        let _ = InodeRecord::decode(&bytes[..INODE_BYTES]);
        let mut out = Vec::new();
        let _ = decode_dir_block(&bytes, &mut out);
        let _ = CheckpointRoot::decode(&bytes);
        let _ = decode_usage_page(&bytes);
        let _ = decode_pinned_page(&bytes);
        let _ = decode_snapshot_page(&bytes);
    }

    #[test]
    fn decoding_mutated_structures_never_panics(flips in proptest::collection::vec((0usize..BLOCK, any::<u8>()), 1..8)) {
        let mut blocks: Vec<Vec<u8>> = vec![sample_sb().encode().to_vec(), CheckpointRoot::default().encode().to_vec()];
        let entries = vec![DirRecord { ino: 2, is_dir: false, name: "a".into() }];
        blocks.push(encode_dir(&entries)[0].to_vec());
        let mut s = [0u8; BLOCK];
        Summary { flags: FLAG_END, payload_blocks: 0, pool_id: [0; 16], sequence: 1, checkpoint: 0, segment_next: 0, prev_crc: 0, payload_crc: 0, time_ns: 0, descriptors: vec![] }.encode_into(&mut s);
        blocks.push(s.to_vec());
        for mut b in blocks {
            for &(at, v) in &flips {
                b[at] ^= v;
            }
            // Re-seal the CRCs too, so the field checks behind them are reached.
            let mut resealed = b.clone();
            let c = crc(&resealed[..BLOCK - 4]);
            put_u32(&mut resealed, BLOCK - 4, c);
            for v in [&b, &resealed] {
                let _ = Superblock::decode(v, u64::MAX);
                let _ = Summary::decode(v);
                let _ = CheckpointRoot::decode(v);
                let _ = decode_usage_page(v);
                let _ = decode_pinned_page(v);
                let _ = decode_snapshot_page(v);
                let mut out = Vec::new();
                let _ = decode_dir_block(v, &mut out);
            }
        }
    }
}
