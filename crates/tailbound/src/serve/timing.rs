//! Where a crossing's time goes, timed per operation code when [`ENV`] names a file (for
//! finding waits; costs one atomic load per call when off). The client's side of each process
//! and the server's side of each session add up nanoseconds by phase; the client rewrites
//! `FILE.client.PID` every 2^14 calls, the server appends `FILE.server` once per session.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// The environment variable naming the file the times go to.
pub const ENV: &str = "TAILBOUND_SERVE_TIMES";

const OPS: usize = 256;
/// Phases a side adds up per operation.
pub(super) const PHASES: usize = 4;

/// Times per operation code and phase, and counts per operation.
pub(super) struct Times {
    count: Box<[AtomicU64; OPS]>,
    ns: Box<[[AtomicU64; PHASES]; OPS]>,
    extra: [AtomicU64; 4],
}

impl Times {
    fn new() -> Times {
        Times {
            count: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            ns: Box::new(std::array::from_fn(|_| {
                std::array::from_fn(|_| AtomicU64::new(0))
            })),
            extra: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Adds one call of `op` whose phases took the gaps between `marks`.
    pub fn add(&self, op: u8, marks: &[Instant]) -> u64 {
        let n = self.count[op as usize].fetch_add(1, Ordering::Relaxed);
        for (i, w) in marks.windows(2).enumerate().take(PHASES) {
            let d = w[1].saturating_duration_since(w[0]).as_nanos() as u64;
            self.ns[op as usize][i].fetch_add(d, Ordering::Relaxed);
        }
        n
    }

    pub fn extra(&self, i: usize, v: u64) {
        self.extra[i].fetch_add(v, Ordering::Relaxed);
    }

    fn lines(&self, who: &str) -> String {
        let mut s = String::new();
        for op in 0..OPS {
            let n = self.count[op].load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            s.push_str(&format!("{who} op{op} n={n}"));
            for p in 0..PHASES {
                let ns = self.ns[op][p].load(Ordering::Relaxed);
                s.push_str(&format!(" p{p}={:.2}us", ns as f64 / n as f64 / 1e3));
            }
            s.push('\n');
        }
        let e: Vec<String> = self
            .extra
            .iter()
            .map(|x| x.load(Ordering::Relaxed).to_string())
            .collect();
        s.push_str(&format!("{who} extra {}\n", e.join(" ")));
        s
    }

    fn write(&self, path: &std::path::Path, who: &str, append: bool) {
        let text = self.lines(who);
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = r {
            eprintln!("tailbound: {}: {e}", path.display());
        }
    }
}

fn path() -> Option<&'static std::path::PathBuf> {
    static P: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    P.get_or_init(|| {
        std::env::var_os(ENV)
            .filter(|p| !p.is_empty())
            .map(Into::into)
    })
    .as_ref()
}

/// This process's client times, if timing is on.
pub(super) fn client() -> Option<&'static Times> {
    static T: OnceLock<Option<Times>> = OnceLock::new();
    T.get_or_init(|| path().map(|_| Times::new())).as_ref()
}

/// After a client call numbered `n`: every 2^14 calls the file is rewritten.
pub(super) fn client_done(t: &Times, n: u64) {
    if n % (1 << 14) == (1 << 14) - 1 {
        if let Some(p) = path() {
            let mut p = p.clone().into_os_string();
            p.push(format!(".client.{}", std::process::id()));
            t.write(std::path::Path::new(&p), "client", false);
        }
    }
}

/// A session's server times, if timing is on.
pub(super) fn session() -> Option<Times> {
    path().map(|_| Times::new())
}

/// Appends a session's times.
pub(super) fn session_done(t: &Times, id: u64) {
    if let Some(p) = path() {
        let mut p = p.clone().into_os_string();
        p.push(".server");
        t.write(
            std::path::Path::new(&p),
            &format!("server session {id}"),
            true,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Times;
    use std::time::{Duration, Instant};

    #[test]
    fn each_operation_gets_its_count_and_mean_time_per_phase() {
        let t = Times::new();
        let a = Instant::now();
        let marks = |us: [u64; 3]| {
            let mut m = vec![a];
            for d in us {
                m.push(*m.last().unwrap() + Duration::from_micros(d));
            }
            m
        };
        assert_eq!(t.add(5, &marks([10, 20, 30])), 0);
        assert_eq!(t.add(5, &marks([30, 40, 50])), 1);
        t.add(66, &marks([1, 2, 3]));
        t.extra(2, 7);
        let text = t.lines("client");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "client op5 n=2 p0=20.00us p1=30.00us p2=40.00us p3=0.00us",
                "client op66 n=1 p0=1.00us p1=2.00us p2=3.00us p3=0.00us",
                "client extra 0 0 7 0",
            ]
        );
    }
}
