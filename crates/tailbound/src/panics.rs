//! Panics caught where tailbound meets code that cannot take one: the C ABI, the `LD_PRELOAD`
//! shim's hooks, and the threads the library starts. [`catch`] turns a panic into a [`Panic`]
//! that names its site (file, line and message), so the caller can fail the call and poison
//! what the panic may have left half done, and say why.
//!
//! The site is only known to a panic hook: the first [`catch`] chains one in front of the hook
//! already installed (which keeps printing the usual message) and keeps each thread's last
//! panic in a thread-local.

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// A panic caught at a boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panic {
    /// `file:line:column`, when the panic hook saw it.
    pub site: Option<String>,
    pub message: String,
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.site {
            Some(site) => write!(f, "panicked at {site}: {}", self.message),
            None => write!(f, "panicked: {}", self.message),
        }
    }
}

thread_local! {
    static LAST: RefCell<Option<Panic>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();
/// Set once the hook is in: all [`catch`] reads on its way in (it runs on every call into the
/// shim).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the hook that records each panic's site (once; [`catch`] does it too). Call it
/// before a thread that may panic starts, if that thread uses [`unwinding`] rather than
/// [`catch`].
pub fn install_hook() {
    // `set_hook` panics on a panicking thread (whose hook may be what calls in here, through a
    // shim hook the message is written with): the next call installs it.
    if std::thread::panicking() {
        return;
    }
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let caught = Panic {
                site: info.location().map(|l| l.to_string()),
                message: message_of(info.payload()),
            };
            // `try_*`: the hook must not panic, even while the thread's locals are torn down.
            let _ = LAST.try_with(|l| {
                if let Ok(mut l) = l.try_borrow_mut() {
                    *l = Some(caught);
                }
            });
            previous(info);
        }));
        INSTALLED.store(true, Ordering::Release);
    });
}

/// Runs `f`; a panic inside it comes back as `Err`, with its site.
///
/// The caller decides what the state `f` touched is worth afterwards (hence no `UnwindSafe`
/// bound): every caller in tailbound poisons what `f` may have left half changed.
#[inline]
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Panic> {
    if !INSTALLED.load(Ordering::Relaxed) {
        install_hook();
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Ok(v),
        Err(payload) => Err(of_payload(payload)),
    }
}

/// The panic this thread is unwinding from, for a `Drop` that cleans up after one; `None` when
/// the thread is not panicking.
pub fn unwinding() -> Option<Panic> {
    if !std::thread::panicking() {
        return None;
    }
    let recorded = LAST
        .try_with(|l| l.try_borrow().ok().and_then(|l| l.clone()))
        .ok()
        .flatten();
    Some(recorded.unwrap_or_else(|| Panic {
        site: None,
        message: "(the panic hook did not record it)".into(),
    }))
}

/// The recorded panic if it is the one `payload` comes from (a payload re-raised with
/// `resume_unwind` passes no hook), else one without a site.
#[cold]
#[inline(never)]
fn of_payload(payload: Box<dyn Any + Send>) -> Panic {
    let message = message_of(payload.as_ref());
    let recorded = LAST
        .try_with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.take()))
        .ok()
        .flatten();
    match recorded {
        Some(p) if p.message == message => p,
        _ => Panic {
            site: None,
            message,
        },
    }
}

/// A panic payload's message: `panic!` makes a `&str` or a `String`.
fn message_of(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_names_its_file_line_and_message() {
        let line = line!() + 1;
        let caught = catch(|| -> u32 { panic!("the value is {}", 7) }).unwrap_err();
        assert_eq!(caught.message, "the value is 7");
        let site = caught.site.clone().expect("the hook saw the site");
        assert!(
            site.starts_with(&format!("crates/tailbound/src/panics.rs:{line}:")),
            "{site}"
        );
        assert!(caught
            .to_string()
            .contains("panicked at crates/tailbound/src/panics.rs"));
        assert_eq!(catch(|| 5), Ok(5), "no panic: the value");
    }

    #[test]
    fn a_resumed_payload_is_not_given_an_older_panics_site() {
        let _ = catch(|| panic!("first"));
        let _ = catch(|| panic!("second"));
        let resumed = catch(|| std::panic::resume_unwind(Box::new("third"))).unwrap_err();
        assert_eq!(resumed.message, "third");
        assert_eq!(resumed.site, None);
    }

    #[test]
    fn unwinding_reports_the_panic_to_a_drop() {
        struct Seen(std::sync::mpsc::Sender<Option<Panic>>);
        impl Drop for Seen {
            fn drop(&mut self) {
                let _ = self.0.send(unwinding());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        drop(Seen(tx.clone()));
        assert_eq!(rx.recv().unwrap(), None, "not while not panicking");
        let _ = catch(move || {
            let _seen = Seen(tx);
            panic!("while holding it");
        });
        let seen = rx.recv().unwrap().expect("seen while unwinding");
        assert_eq!(seen.message, "while holding it");
        assert!(seen.site.is_some());
    }
}
