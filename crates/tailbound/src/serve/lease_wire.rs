//! The leases' bytes on the wire (`lease.rs`; docs/PROTOCOL.md, "Leases").

use super::codec::{Dec, Enc, WireResult};
use super::lease::{DataLease, LeaseTableInfo, LeasedStat, Words};
use super::messages::Payload;
use super::protocol_fields::{stat_dec, stat_enc};

pub(super) fn words_enc(e: &mut Enc, words: &Words) {
    e.u32(words.len() as u32);
    for (at, v) in words {
        e.u32(*at).u64(*v);
    }
}

pub(super) fn words_dec(d: &mut Dec<'_>) -> WireResult<Words> {
    let n = d.count("lease words", 12)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push((d.u32("word")?, d.u64("generation")?));
    }
    Ok(out)
}

pub(super) fn table_enc(e: &mut Enc, t: &LeaseTableInfo) {
    e.u32(t.inode_slots).u32(t.segment_slots).u64(t.pool_bytes);
}

pub(super) fn table_dec(d: &mut Dec<'_>) -> WireResult<LeaseTableInfo> {
    Ok(LeaseTableInfo {
        inode_slots: d.u32("inode slots")?,
        segment_slots: d.u32("segment slots")?,
        pool_bytes: d.u64("pool bytes")?,
    })
}

pub(super) fn stat_lease_enc(e: &mut Enc, s: &LeasedStat) {
    stat_enc(e, &s.stat);
    words_enc(e, &s.words);
}

pub(super) fn stat_lease_dec(d: &mut Dec<'_>) -> WireResult<LeasedStat> {
    Ok(LeasedStat {
        stat: stat_dec(d)?,
        words: words_dec(d)?,
    })
}

pub(super) fn data_enc(e: &mut Enc, data: &[u8], lease: Option<&DataLease>) {
    e.bytes(data);
    data_lease_enc(e, lease);
}

/// What follows a leased read's data on the wire: whether a lease came, and the lease.
pub(super) fn data_lease_enc(e: &mut Enc, lease: Option<&DataLease>) {
    e.bool(lease.is_some());
    if let Some(l) = lease {
        e.u32(l.inode.0)
            .u64(l.inode.1)
            .u64(l.size)
            .u64(l.first)
            .u32(l.blocks.len() as u32);
        for (addr, at, g) in &l.blocks {
            e.u64(*addr).u32(*at).u64(*g);
        }
    }
}

/// A leased read's data and lease. With `data_at` given, the data is left out (empty) and its
/// place in the body put there, for the caller to keep the body instead of copying it.
pub(super) fn data_dec(
    d: &mut Dec<'_>,
    data_at: Option<&mut Option<(usize, usize)>>,
) -> WireResult<(Payload, Option<DataLease>)> {
    let bytes = d.bytes("data")?;
    let data = match data_at {
        Some(at) => {
            let end = d.position();
            *at = Some((end - bytes.len(), end));
            Payload::default()
        }
        None => Payload::from(bytes),
    };
    if !d.bool("lease")? {
        return Ok((data, None));
    }
    let inode = (d.u32("inode word")?, d.u64("inode generation")?);
    let size = d.u64("size")?;
    let first = d.u64("first block")?;
    let n = d.count("leased blocks", 20)?;
    let mut blocks = Vec::with_capacity(n);
    for _ in 0..n {
        blocks.push((
            d.u64("address")?,
            d.u32("segment word")?,
            d.u64("segment generation")?,
        ));
    }
    Ok((
        data,
        Some(DataLease {
            inode,
            size,
            first,
            blocks,
        }),
    ))
}
