//! Turning the kernel's writeback flusher off for a recording (the paper's F_OFF), and back on.
//!
//! While at least one [`FlusherGuard`] lives, `vm.dirty_ratio` and `vm.dirty_background_ratio` are
//! 100 and `vm.dirty_expire_centisecs` is 300000 (3,000 s), so the flusher never starts during a
//! recording; the recorder's own thread flushes instead. The previous values (including
//! `dirty_bytes`/`dirty_background_bytes` when those were in use) are restored when the last guard
//! drops. Needs root. If the process is killed, the settings stay: `tailbound doctor` shows them.

use std::path::Path;
use std::sync::Mutex;

use crate::record::RecordError;

const VM: &str = "/proc/sys/vm";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Saved {
    dirty_ratio: String,
    dirty_bytes: String,
    dirty_background_ratio: String,
    dirty_background_bytes: String,
    dirty_expire_centisecs: String,
}

struct State {
    users: usize,
    saved: Option<Saved>,
}

static STATE: Mutex<State> = Mutex::new(State {
    users: 0,
    saved: None,
});

fn read(name: &str) -> Result<String, RecordError> {
    let path = Path::new(VM).join(name);
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|source| RecordError::Io {
            path,
            op: "reading",
            source,
        })
}

fn write(name: &str, value: &str) -> Result<(), RecordError> {
    let path = Path::new(VM).join(name);
    std::fs::write(&path, value).map_err(|source| RecordError::Io {
        path,
        op: "writing",
        source,
    })
}

fn save() -> Result<Saved, RecordError> {
    Ok(Saved {
        dirty_ratio: read("dirty_ratio")?,
        dirty_bytes: read("dirty_bytes")?,
        dirty_background_ratio: read("dirty_background_ratio")?,
        dirty_background_bytes: read("dirty_background_bytes")?,
        dirty_expire_centisecs: read("dirty_expire_centisecs")?,
    })
}

fn restore(s: &Saved) -> Result<(), RecordError> {
    // Writing a *_bytes value clears the matching ratio and the other way round: restore whichever
    // was in force.
    if s.dirty_bytes != "0" {
        write("dirty_bytes", &s.dirty_bytes)?;
    } else {
        write("dirty_ratio", &s.dirty_ratio)?;
    }
    if s.dirty_background_bytes != "0" {
        write("dirty_background_bytes", &s.dirty_background_bytes)?;
    } else {
        write("dirty_background_ratio", &s.dirty_background_ratio)?;
    }
    write("dirty_expire_centisecs", &s.dirty_expire_centisecs)
}

/// Keeps the kernel flusher off while it lives; see the module documentation.
#[derive(Debug)]
pub struct FlusherGuard {
    _private: (),
}

impl FlusherGuard {
    /// Turns the flusher off (or joins a guard that already did).
    pub fn disable() -> Result<FlusherGuard, RecordError> {
        if !crate::sys::proc::is_root() {
            return Err(RecordError::NeedsRoot {
                what: "turning the kernel flusher off (flusher=off) writes vm.dirty_* sysctls"
                    .into(),
            });
        }
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if state.users == 0 {
            let saved = save()?;
            let apply = || -> Result<(), RecordError> {
                write("dirty_ratio", "100")?;
                write("dirty_background_ratio", "100")?;
                write("dirty_expire_centisecs", "300000")
            };
            if let Err(e) = apply() {
                let _ = restore(&saved);
                return Err(e);
            }
            state.saved = Some(saved);
        }
        state.users += 1;
        Ok(FlusherGuard { _private: () })
    }
}

impl Drop for FlusherGuard {
    fn drop(&mut self) {
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        state.users = state.users.saturating_sub(1);
        if state.users == 0 {
            if let Some(saved) = state.saved.take() {
                if let Err(e) = restore(&saved) {
                    eprintln!("tailbound: warning: restoring the flusher settings: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_turns_the_flusher_off_and_restores_it() {
        let _serial = crate::VM_SYSCTL_TEST_LOCK
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !crate::sys::proc::is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root and must run this test"
            );
            assert!(matches!(
                FlusherGuard::disable(),
                Err(RecordError::NeedsRoot { .. })
            ));
            eprintln!("skipping the sysctl part: needs root");
            return;
        }
        let before = save().unwrap();
        {
            let a = FlusherGuard::disable().unwrap();
            assert_eq!(read("dirty_ratio").unwrap(), "100");
            assert_eq!(read("dirty_background_ratio").unwrap(), "100");
            assert_eq!(read("dirty_expire_centisecs").unwrap(), "300000");
            let b = FlusherGuard::disable().unwrap();
            drop(a);
            // Still off while another guard lives.
            assert_eq!(read("dirty_expire_centisecs").unwrap(), "300000");
            drop(b);
        }
        assert_eq!(save().unwrap(), before);
    }
}
