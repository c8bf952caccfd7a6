//! TEMPORARY (hc13): a light pass's copies routed by their file's host write rate. Not to be
//! merged.

use std::collections::HashMap;
use std::sync::Mutex;

struct X {
    clock: u64,
    files: HashMap<u64, (u64, u64)>,
}

static S: Mutex<Option<X>> = Mutex::new(None);

pub(crate) fn on() -> bool {
    static D: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *D.get_or_init(|| std::env::var_os("TB_HC13_FILEROUTE").is_some())
}

/// `blocks` of file `ino` sealed by the host.
pub(crate) fn sealed(ino: u64, blocks: u64) {
    if !on() || blocks == 0 {
        return;
    }
    let mut g = S.lock().unwrap_or_else(|p| p.into_inner());
    let x = g.get_or_insert_with(|| X {
        clock: 0,
        files: HashMap::new(),
    });
    let since = x.clock;
    x.clock += blocks;
    let e = x.files.entry(ino).or_insert((0, since));
    e.0 += blocks;
}

/// Whether the blocks of file `ino` (`file_blocks` of them), overwritten at the rate its seals
/// tell, live less than `than` host blocks.
pub(crate) fn short(ino: u64, file_blocks: u64, than: u64) -> bool {
    let g = S.lock().unwrap_or_else(|p| p.into_inner());
    let Some(x) = g.as_ref() else {
        return false;
    };
    let Some(&(n, since)) = x.files.get(&ino) else {
        return false;
    };
    let elapsed = x.clock - since;
    n > 0
        && elapsed > 0
        && u128::from(file_blocks) * u128::from(elapsed) < u128::from(than) * u128::from(n)
}
