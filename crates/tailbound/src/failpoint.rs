//! Named failpoints: places in tailbound that panic on purpose when a test arms them, so the
//! panic boundaries ([`crate::panics`]) can be tested where a real bug would panic.
//!
//! An armed failpoint fires once, on the first thread that reaches it, and is disarmed: what
//! follows sees the panic's consequences (a poisoned pool), not the failpoint again. Disarmed,
//! [`hit`] costs one relaxed atomic load.
//!
//! Failpoints: `shim.<symbol>` (each hook of the `LD_PRELOAD` shim, e.g. `shim.write` on a
//! library descriptor), `capi.<function>` (each C ABI function, e.g. `capi.tb_recorder_write`),
//! `tbfs.background` (a pass of tbfs's background thread, with the metadata lock held),
//! `record.writer` (a decoupled recorder's writer thread, per record), `record.flush` (a
//! recorder's flush thread, per job), `sched.dispatch` (a scheduler dispatcher, per device call),
//! `mount.final-sync` (a `tailbound mount` server as it begins its final sync, outside the
//! panic boundary: the server dies unconfirmed), `mount.final-sync-panics` (the same place,
//! inside it: the final sync fails), `mount.session-end` (a `tailbound mount` server's FUSE
//! session, once it has ended: the session ends in an error).
//!
//! `TAILBOUND_FAILPOINTS=NAME[,NAME...]` arms them in a process that calls [`arm_from_env`]
//! (the shim does, when it starts, and so does the `tailbound` binary).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

/// Whether any failpoint is armed: the only thing [`hit`] reads while none is.
static ANY: AtomicBool = AtomicBool::new(false);
static ARMED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Panics if failpoint `name` is armed (and disarms it). The panic's site is the caller's.
#[inline(always)]
#[track_caller]
pub fn hit(name: &'static str) {
    if ANY.load(Ordering::Relaxed) {
        fire(name);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn fire(name: &'static str) {
    let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(i) = armed.iter().position(|n| n == name) else {
        return;
    };
    armed.remove(i);
    ANY.store(!armed.is_empty(), Ordering::Relaxed);
    drop(armed);
    panic!("failpoint {name}");
}

/// Arms failpoint `name`: the next thread that reaches it panics.
pub fn arm(name: &str) {
    ARMED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(name.to_string());
    ANY.store(true, Ordering::Release);
}

/// Disarms failpoint `name`; true if it was armed (had not fired).
pub fn disarm(name: &str) -> bool {
    let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    let was = armed
        .iter()
        .position(|n| n == name)
        .map(|i| armed.remove(i));
    ANY.store(!armed.is_empty(), Ordering::Relaxed);
    was.is_some()
}

/// Arms the failpoints `TAILBOUND_FAILPOINTS` names (comma-separated), once per process.
pub fn arm_from_env() {
    static READ: Once = Once::new();
    READ.call_once(|| {
        if let Ok(spec) = std::env::var("TAILBOUND_FAILPOINTS") {
            for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                arm(name);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_failpoint_fires_once_at_its_callers_site() {
        hit("test.never-armed");
        arm("test.once");
        let line = line!() + 1;
        let caught = crate::panics::catch(|| hit("test.once")).unwrap_err();
        assert_eq!(caught.message, "failpoint test.once");
        let site = caught.site.unwrap();
        assert!(
            site.starts_with(&format!("crates/tailbound/src/failpoint.rs:{line}:")),
            "{site}"
        );
        hit("test.once");
        assert!(!disarm("test.once"), "it disarmed itself");
        arm("test.disarmed");
        assert!(disarm("test.disarmed"));
        hit("test.disarmed");
    }
}
