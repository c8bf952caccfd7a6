//! What a session's transport did, counted: requests by operation code, and the wake-ups the
//! rings cost (workers parking, waking to find nothing; completions that woke a parked
//! client thread; on the rings, the request frames taken, the records they came in and how
//! many had their data in the data area). Kept only when [`ENV`] names a file: each session
//! appends one line there when it ends. For finding which calls cross and why; costs nothing
//! when off.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the file the counts go to (appended, one line a session).
pub const ENV: &str = "TAILBOUND_SERVE_COUNTS";

/// Operation codes are one byte on the wire.
const OPS: usize = 256;

/// One session's counts.
pub(super) struct Tally {
    path: std::path::PathBuf,
    ops: Box<[AtomicU64; OPS]>,
    /// A worker parked on the request ring.
    parks: AtomicU64,
    /// A parked worker woke and found no request to take.
    empty_wakes: AtomicU64,
    /// Completions sent.
    completions: AtomicU64,
    /// Completions whose push woke a parked client thread.
    completion_wakes: AtomicU64,
    /// Removals of the session's that left an inode open, so raised every session's closes
    /// word and waited for their posted closes.
    raises: AtomicU64,
    /// On the rings: what the request ring's reader took.
    taken: std::sync::Mutex<Option<super::ring::Taken>>,
}

/// The events counted besides requests.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    Park,
    EmptyWake,
    Completion,
    CompletionWake,
    Raise,
}

impl Tally {
    /// A tally if [`ENV`] names a file, else `None`.
    pub fn from_env() -> Option<Tally> {
        let path = std::env::var_os(ENV).filter(|p| !p.is_empty())?;
        Some(Tally::to(path.into()))
    }

    /// A tally written to `path`.
    fn to(path: std::path::PathBuf) -> Tally {
        Tally {
            path,
            ops: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            parks: AtomicU64::new(0),
            empty_wakes: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            completion_wakes: AtomicU64::new(0),
            raises: AtomicU64::new(0),
            taken: std::sync::Mutex::new(None),
        }
    }

    /// Counts a request of operation `op`.
    pub fn request(&self, op: u8) {
        self.ops[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Notes what the session's request ring's reader took, once the session ended.
    pub fn ring(&self, taken: super::ring::Taken) {
        *self.taken.lock().unwrap_or_else(|p| p.into_inner()) = Some(taken);
    }

    pub fn event(&self, e: Event) {
        let c = match e {
            Event::Park => &self.parks,
            Event::EmptyWake => &self.empty_wakes,
            Event::Completion => &self.completions,
            Event::CompletionWake => &self.completion_wakes,
            Event::Raise => &self.raises,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The session's line: `session ID requests N op=count ... parks N ...`.
    pub fn line(&self, session: u64) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut total = 0;
        let mut ops = String::new();
        for (op, c) in self.ops.iter().enumerate() {
            let n = get(c);
            if n > 0 {
                total += n;
                ops.push_str(&format!(" op{op}={n}"));
            }
        }
        let ring = match *self.taken.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(t) => format!(
                " frames {} records {} out_of_line {} copied_out {}",
                t.frames, t.records, t.out_of_line, t.copied_out
            ),
            None => String::new(),
        };
        format!(
            "session {session} requests {total}{ops} parks {} empty_wakes {} completions {} \
             completion_wakes {} raises {}{ring}",
            get(&self.parks),
            get(&self.empty_wakes),
            get(&self.completions),
            get(&self.completion_wakes),
            get(&self.raises),
        )
    }

    /// Appends the session's line to the file; a failure is said on stderr, not fatal.
    pub fn write(&self, session: u64) {
        let line = self.line(session);
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = r {
            eprintln!("tailbound serve: {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Tally};

    #[test]
    fn a_sessions_line_counts_each_operation_and_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counts");
        let t = Tally::to(path.clone());
        for op in [3, 66, 3, 255] {
            t.request(op);
        }
        for e in [
            Event::Park,
            Event::Park,
            Event::EmptyWake,
            Event::Completion,
        ] {
            t.event(e);
        }
        t.event(Event::CompletionWake);
        let want = "session 7 requests 4 op3=2 op66=1 op255=1 parks 2 empty_wakes 1 \
                    completions 1 completion_wakes 1 raises 0";
        assert_eq!(t.line(7), want);
        t.write(7);
        t.request(5);
        t.write(8);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], want);
        assert!(
            lines[1].starts_with("session 8 requests 5 op3=2 op5=1 "),
            "{text}"
        );
        t.ring(crate::serve::ring::Taken {
            frames: 5,
            records: 6,
            out_of_line: 2,
            copied_out: 1,
            into_dest: 0,
        });
        assert!(
            t.line(8)
                .ends_with(" raises 0 frames 5 records 6 out_of_line 2 copied_out 1"),
            "{}",
            t.line(8)
        );
    }
}
