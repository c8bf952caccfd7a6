//! Closes sent without waiting for the server: only where nothing another call could see
//! depends on when the server applies them, and their completions never confuse later calls.

use super::protocol::LockArgs;
use super::ring_tests::fixture;
use super::*;
use crate::tbfs::locks::{Kind, Space};
use crate::tbfs::OpenFlags;

fn write_lock() -> LockArgs {
    LockArgs {
        space: Space::Record,
        kind: Kind::Write,
        start: 0,
        end: 100,
        per_handle: false,
    }
}

#[test]
fn closes_go_unanswered_unless_a_lock_or_a_hold_may_go_with_them() {
    for no_ring in [false, true] {
        let f = fixture(no_ring);
        let c = Client::connect(&f.socket).unwrap();
        drop(c.open_file("/plain", OpenFlags::create()).unwrap());
        assert_eq!(c.closes_posted(), 1, "a file of this session alone");

        // Its description handed over for another session: the close waits.
        let held = c.open_file("/held", OpenFlags::create()).unwrap();
        let token = c.hold(vec![(held.handle(), String::new())]).unwrap();
        drop(held);
        assert_eq!(c.closes_posted(), 1, "a held description");
        c.release(token).unwrap();

        // A close releases the session's locks on the file (POSIX): once the drop returns,
        // another session must be able to take them.
        let a = c.open_file("/locked", OpenFlags::create()).unwrap();
        a.lock(write_lock(), false).unwrap();
        let other = Client::connect(&f.socket).unwrap();
        let o = other.open_file("/locked", OpenFlags::create()).unwrap();
        assert!(
            o.lock(write_lock(), false).is_err(),
            "held by the first session"
        );
        drop(c.open_file("/locked", OpenFlags::create()).unwrap());
        assert_eq!(c.closes_posted(), 1, "a session that took a lock");
        o.lock(write_lock(), false).unwrap();
        drop(a);
        assert_eq!(c.closes_posted(), 1);
    }
}

#[test]
fn unanswered_closes_never_confuse_later_calls() {
    for no_ring in [false, true] {
        let f = fixture(no_ring);
        let c = Client::connect(&f.socket).unwrap();
        // More closes than may stay unread, from threads whose calls are in flight together.
        std::thread::scope(|scope| {
            for t in 0..6u64 {
                let c = c.clone();
                scope.spawn(move || {
                    for i in 0..150u64 {
                        let path = format!("/f{t}-{i}");
                        let file = c.open_file(&path, OpenFlags::create()).unwrap();
                        let len = (t * 1000 + i) as usize;
                        assert_eq!(file.pwrite(&vec![7u8; len], 0).unwrap(), len);
                        drop(file);
                        assert_eq!(c.stat(&path).unwrap().size, len as u64, "{path}");
                    }
                });
            }
        });
        assert!(c.closes_posted() > 0);
        // And after them all, calls from one thread still get their own answers.
        c.mkdir("/after", 0o755).unwrap();
        assert!(c.stat("/after").is_ok());
    }
}
