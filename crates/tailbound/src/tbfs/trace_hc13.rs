//! TEMPORARY (hc13): what hot/cold victims hold and who took them. Not to be merged.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Mutex;

#[derive(Default)]
struct Trace {
    on: bool,
    /// ino -> file index, blocks per file, hot blocks (the bench's hot/cold layout).
    files: HashMap<u64, u64>,
    per_file: u64,
    hot_blocks: u64,
    /// Per segment: data blocks written since entered, by (copies?, cleaner's head?).
    written: HashMap<usize, [u64; 5]>,
    taker: usize,
    /// Per taker (0 inline, 1 tax piece, 2 background) and light (0/1): sums.
    passes: [[u64; 2]; 3],
    victims: [[u64; 2]; 3],
    live: [[u64; 2]; 3],
    reach: [[u64; 2]; 3],
    greedy: [[u64; 2]; 3],
    /// Per taker: hot data, cold data, metadata moved; victims' written mix.
    kinds: [[u64; 3]; 3],
    mix: [[u64; 5]; 3],
    /// Victims by class of what they held when written: writers' head host only, cleaner head,
    /// mixed; live sums and counts. Also the live fraction histogram.
    by_class: HashMap<&'static str, (u64, u64, u64, u64, u64)>,
    ages_differ: [u64; 2],
    hist: [u64; 11],
    hot_hist: [u64; 11],
    /// Current victim's counts.
    cur: [u64; 3],
    /// Segments at each pass: how many hold mostly hot live data, and their live.
    pass_hot_segs: u64,
    pass_hot_live: u64,
    pass_cold_segs: u64,
    pass_cold_live: u64,
    pass_count: u64,
    light: bool,
    differ: bool,
    /// Victims by [short][by_lifetime][apart].
    flags: [[[u64; 2]; 2]; 2],
    /// Copies [hot, cold][writers', cleaner's].
    dests: [[u64; 2]; 2],
}

static T: Mutex<Option<Trace>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Trace) -> R) -> Option<R> {
    let mut g = T.lock().unwrap_or_else(|p| p.into_inner());
    let t = g.as_mut()?;
    if !t.on {
        return None;
    }
    Some(f(t))
}

/// The bench's layout: the files' inode numbers in order, blocks per file, hot blocks.
pub fn start(inos: &[u64], per_file: u64, hot_blocks: u64) {
    let mut g = T.lock().unwrap_or_else(|p| p.into_inner());
    let written = g.take().map(|t| t.written).unwrap_or_default();
    *g = Some(Trace {
        on: true,
        files: inos
            .iter()
            .enumerate()
            .map(|(i, &n)| (n, i as u64))
            .collect(),
        per_file,
        hot_blocks,
        written,
        ..Trace::default()
    });
}

/// Written segments are tracked from the pool's start (before `start`).
pub fn arm() {
    let mut g = T.lock().unwrap_or_else(|p| p.into_inner());
    *g = Some(Trace {
        on: true,
        ..Trace::default()
    });
}

pub(crate) fn set_taker(taker: usize) {
    with(|t| t.taker = taker);
}

pub(crate) fn entered(s: usize) {
    with(|t| {
        t.written.insert(s, [0; 5]);
    });
}

/// `blocks` data written into `s` (copies? in the cleaner's head?); `meta` other blocks.
pub(crate) fn wrote(s: usize, blocks: u64, meta: u64, copies: bool, apart: bool) {
    with(|t| {
        let w = t.written.entry(s).or_insert([0; 5]);
        w[usize::from(copies) * 2 + usize::from(apart)] += blocks;
        w[4] += meta;
    });
}

pub(crate) fn set_light(light: bool, differ: bool) {
    with(|t| {
        t.light = light;
        t.differ = differ;
    });
}

pub(crate) fn pass(victims: u64, live: u64, reach: u64, greedy: u64) {
    with(|t| {
        let (k, l) = (t.taker, usize::from(t.light));
        let differ = t.differ;
        t.passes[k][l] += 1;
        t.victims[k][l] += victims;
        t.live[k][l] += live;
        t.reach[k][l] += reach;
        t.greedy[k][l] += greedy;
        t.ages_differ[usize::from(differ)] += 1;
    });
}

/// Segments not free and their live, at a pass: hot-written vs cold.
pub(crate) fn pool(live: &[u32]) {
    with(|t| {
        t.pass_count += 1;
        for (s, &l) in live.iter().enumerate() {
            if l == 0 {
                continue;
            }
            let w = t.written.get(&s).copied().unwrap_or([0; 5]);
            if w[0] > (w[1] + w[2] + w[3]) {
                t.pass_hot_segs += 1;
                t.pass_hot_live += u64::from(l);
            } else {
                t.pass_cold_segs += 1;
                t.pass_cold_live += u64::from(l);
            }
        }
    });
}

pub(crate) fn victim_begin(short: bool, by_lifetime: bool, apart: bool) {
    with(|t| {
        t.cur = [0; 3];
        t.flags[usize::from(short)][usize::from(by_lifetime)][usize::from(apart)] += 1;
    });
}

/// A data block copied, to the cleaner's head or not.
pub(crate) fn dest(ino: u64, index: u64, cleaners: bool) {
    with(|t| {
        let hot = t
            .files
            .get(&ino)
            .is_some_and(|&f| f * t.per_file + index < t.hot_blocks);
        t.dests[usize::from(!hot)][usize::from(cleaners)] += 1;
    });
}

pub(crate) fn data(ino: u64, index: u64) {
    with(|t| {
        let hot = t
            .files
            .get(&ino)
            .is_some_and(|&f| f * t.per_file + index < t.hot_blocks);
        let known = t.files.contains_key(&ino);
        t.cur[if !known { 2 } else { usize::from(!hot) }] += 1;
    });
}

pub(crate) fn meta() {
    with(|t| t.cur[2] += 1);
}

pub(crate) fn victim_end(s: usize, sb: u64) {
    with(|t| {
        let k = t.taker;
        let c = t.cur;
        for i in 0..3 {
            t.kinds[k][i] += c[i];
        }
        let w = t.written.get(&s).copied().unwrap_or([0; 5]);
        for i in 0..5 {
            t.mix[k][i] += w[i];
        }
        let class = match (w[0] > 0, w[1] > 0, w[2] + w[3] > 0) {
            (true, false, false) => "host writers' head only",
            (true, true, _) => "host both heads",
            (true, false, true) => "host writers' + copies",
            (false, true, false) => "host cleaner's head only",
            (false, true, true) => "host cleaner's + copies",
            (false, false, true) => "copies only",
            (false, false, false) => "no data",
        };
        let e = t.by_class.entry(class).or_default();
        e.0 += 1;
        e.1 += c[0];
        e.2 += c[1];
        e.3 += c[2];
        e.4 += w[4];
        let live = c[0] + c[1] + c[2];
        t.hist[((live * 10) / sb.max(1)).min(10) as usize] += 1;
        if c[0] > c[1] {
            t.hot_hist[((live * 10) / sb.max(1)).min(10) as usize] += 1;
        }
    });
}

/// The report, and the trace off.
pub fn report(sb: u64) -> String {
    let mut g = T.lock().unwrap_or_else(|p| p.into_inner());
    let Some(t) = g.take() else {
        return String::new();
    };
    let mut o = String::new();
    let names = ["inline", "tax", "background"];
    for k in 0..3 {
        for l in 0..2 {
            if t.passes[k][l] == 0 {
                continue;
            }
            let v = (t.victims[k][l] * sb) as f64;
            let _ = writeln!(
                o,
                "  {} {}: passes {} victims {} live {:.3} reach {:.3} greedy {:.3}",
                names[k],
                if l == 1 { "light" } else { "full" },
                t.passes[k][l],
                t.victims[k][l],
                t.live[k][l] as f64 / v,
                t.reach[k][l] as f64 / v,
                t.greedy[k][l] as f64 / v,
            );
        }
        let n: u64 = t.victims[k].iter().sum();
        if n > 0 {
            let v = (n * sb) as f64;
            let _ = writeln!(
                o,
                "  {} per victim: hot {:.3} cold {:.3} meta {:.3}; written hostW {:.1} hostC {:.1} copyW {:.1} copyC {:.1} meta {:.1}",
                names[k],
                t.kinds[k][0] as f64 / v,
                t.kinds[k][1] as f64 / v,
                t.kinds[k][2] as f64 / v,
                t.mix[k][0] as f64 / n as f64,
                t.mix[k][1] as f64 / n as f64,
                t.mix[k][2] as f64 / n as f64,
                t.mix[k][3] as f64 / n as f64,
                t.mix[k][4] as f64 / n as f64,
            );
        }
    }
    let mut classes: Vec<_> = t.by_class.iter().collect();
    classes.sort();
    for (c, e) in classes {
        let v = (e.0 * sb) as f64;
        let _ = writeln!(
            o,
            "  class {c}: victims {} hot {:.3} cold {:.3} meta {:.3} meta written {:.1}",
            e.0,
            e.1 as f64 / v,
            e.2 as f64 / v,
            e.3 as f64 / v,
            e.4 as f64 / e.0 as f64
        );
    }
    let _ = writeln!(
        o,
        "  ages differ at {} of {} passes; victims' live histogram {:?}; hot-held {:?}",
        t.ages_differ[1],
        t.ages_differ[0] + t.ages_differ[1],
        t.hist,
        t.hot_hist
    );
    let _ = writeln!(
        o,
        "  victims [short][by_lifetime][apart] {:?}; copies hot to writers'/cleaner's {:?}, cold {:?}",
        t.flags, t.dests[0], t.dests[1]
    );
    if t.pass_count > 0 {
        let p = t.pass_count as f64;
        let _ = writeln!(
            o,
            "  at a pass: hot-written segments {:.1} (live {:.3}), others {:.1} (live {:.3})",
            t.pass_hot_segs as f64 / p,
            t.pass_hot_live as f64 / (t.pass_hot_segs.max(1) * sb) as f64,
            t.pass_cold_segs as f64 / p,
            t.pass_cold_live as f64 / (t.pass_cold_segs.max(1) * sb) as f64,
        );
    }
    o
}

/// TEMPORARY: the chain's bound's divisor, `TB_HC13_CHAIN_DIV` if set.
pub(crate) fn chain_divisor(default: u64) -> u64 {
    static D: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        std::env::var("TB_HC13_CHAIN_DIV")
            .ok()
            .and_then(|v| v.parse().ok())
    })
    .unwrap_or(default)
}

/// TEMPORARY: copies routed by the bench's hot/cold layout (`TB_HC13_ORACLE`).
pub(crate) fn oracle() -> bool {
    static D: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *D.get_or_init(|| std::env::var_os("TB_HC13_ORACLE").is_some())
}

/// Whether block `index` of `ino` is hot in the bench's layout.
pub(crate) fn is_hot(ino: u64, index: u64) -> bool {
    let g = T.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref().is_some_and(|t| {
        t.files
            .get(&ino)
            .is_some_and(|&f| f * t.per_file + index < t.hot_blocks)
    })
}
