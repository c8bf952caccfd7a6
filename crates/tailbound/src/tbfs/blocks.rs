//! Block buffers: the spare buffers kept for reuse, and fresh or shared blocks.

use std::sync::{Arc, Mutex};

use crate::tbfs::format::*;
use crate::tbfs::limits::{LOCAL_SPARE_BATCH, SPARE_BLOCKS_MAX};

/// Block buffers written and released, kept for the next writes: the write buffer's memory
/// turns over every few milliseconds, and handing it back to the allocator had it trim and
/// grow its heaps a page at a time (`madvise`, `mprotect`, page faults and clearing). Shared by
/// every pool of the process, at most [`SPARE_BLOCKS_MAX`]; each thread keeps a few of its own
/// in front of it ([`LOCAL_SPARE`]).
pub(crate) static SPARE_BLOCKS: Mutex<Vec<Arc<Block>>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's spare buffers, at most 2 × [`LOCAL_SPARE_BATCH`] (512 KiB).
    static LOCAL_SPARE: std::cell::RefCell<Vec<Arc<Block>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps the buffers of `blocks` nothing else references for reuse (up to the caps); the
/// others are dropped.
pub(super) fn recycle_blocks(blocks: Vec<Arc<Block>>) {
    let mut unique = blocks
        .into_iter()
        .filter(|b| Arc::strong_count(b) == 1 && Arc::weak_count(b) == 0);
    // Into this thread's own first (none when its storage is being torn down), and what does
    // not fit to the shared spares in one go.
    let _ = LOCAL_SPARE.try_with(|local| {
        if let Ok(mut local) = local.try_borrow_mut() {
            // Room under a cache's cap: none once it is full, whatever filled it.
            let room = (2 * LOCAL_SPARE_BATCH).saturating_sub(local.len());
            local.extend(unique.by_ref().take(room));
        }
    });
    let mut rest = unique.peekable();
    if rest.peek().is_none() {
        return;
    }
    let mut spare = SPARE_BLOCKS.lock().unwrap_or_else(|p| p.into_inner());
    // As above: none once the shared spares are at their cap.
    let room = SPARE_BLOCKS_MAX.saturating_sub(spare.len());
    spare.extend(rest.take(room));
}

/// A spare buffer (this thread's, else a batch from the shared spares), if one is kept.
pub(super) fn take_spare() -> Option<Arc<Block>> {
    let local = LOCAL_SPARE.try_with(|local| {
        let mut local = local.try_borrow_mut().ok()?;
        if local.is_empty() {
            let mut spare = SPARE_BLOCKS.lock().unwrap_or_else(|p| p.into_inner());
            // A batch, or all there are if fewer.
            let from = spare.len().saturating_sub(LOCAL_SPARE_BATCH);
            local.extend(spare.drain(from..));
        }
        local.pop()
    });
    match local {
        Ok(b) => b,
        Err(_) => SPARE_BLOCKS.lock().unwrap_or_else(|p| p.into_inner()).pop(),
    }
}

/// A spare buffer with `fill` applied, if one is kept.
fn reuse_block(fill: impl FnOnce(&mut Block)) -> Option<Arc<Block>> {
    let mut b = take_spare()?;
    // Unique when it was kept, and nothing can have cloned it since.
    fill(Arc::get_mut(&mut b)?);
    Some(b)
}

/// A new block holding a copy of `data` (one block's bytes), ready to share with a log: a spare
/// buffer, else a new allocation the bytes are copied into without clearing it first.
pub(super) fn shared_copy(data: &[u8]) -> Arc<Block> {
    reuse_block(|b| b.copy_from_slice(data)).unwrap_or_else(|| {
        let block: Arc<[u8]> = Arc::from(data);
        block.try_into().expect("a block's bytes")
    })
}

/// A new block of zeros (a spare buffer cleared, or a new allocation).
pub(super) fn zeroed_block() -> Arc<Block> {
    reuse_block(|b| b.fill(0)).unwrap_or_else(|| Arc::new([0u8; BLOCK]))
}

/// A new block of zeros `fill` writes into, ready to share with a log: metadata encoded in
/// place rather than encoded and then copied.
pub(super) fn new_block(fill: impl FnOnce(&mut Block)) -> Arc<Block> {
    let mut b = FreshBlock::new();
    fill(b.as_mut());
    b.0
}

/// A block of zeros no one else holds yet, to encode into ([`format::encode_dir_entries_in`]).
pub(crate) struct FreshBlock(pub Arc<Block>);

impl FreshBlock {
    pub fn new() -> FreshBlock {
        FreshBlock(zeroed_block())
    }
}

impl AsMut<Block> for FreshBlock {
    fn as_mut(&mut self) -> &mut Block {
        // Unique when made, so no copy is made here.
        Arc::make_mut(&mut self.0)
    }
}
