//! The notes a pool's server (`tailbound mount`, `tailbound serve`) leaves beside the pool, so
//! that whoever comes next learns how the last server ended.
//!
//! `POOL.serving` holds the server's pid and where it serves. It is written once the server
//! holds the pool's lock and removed only after the final sync returned, while the lock is
//! still held. So a server that ended without confirming its final sync (killed, or a panic)
//! leaves it behind: `tailbound umount`, which waits for the lock, finds it and fails, and
//! otherwise the next server of the pool (`mount` or `serve`) takes it and warns, as does a
//! process that opens the pool to change it without a server (`fs` commands that write,
//! `run --private`). Making a new pool at the path removes the notes of the one it replaces.
//!
//! `POOL.sync-failed` holds the error of a final sync that failed, written (also under the
//! lock) before the serving note goes. `umount` reports it, or else the next server warns of it.

use std::path::{Path, PathBuf};

/// The pool's path with `suffix` added: where a server leaves a note about the pool.
fn beside(pool: &Path, suffix: &str) -> PathBuf {
    let mut s = pool.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Reads and removes a note a server left, if one is there.
fn take_note(path: &Path) -> Option<String> {
    let note = std::fs::read_to_string(path).ok()?;
    let _ = std::fs::remove_file(path);
    Some(note.trim().to_string())
}

fn serving_path(pool: &Path) -> PathBuf {
    beside(pool, ".serving")
}

fn sync_failure_path(pool: &Path) -> PathBuf {
    beside(pool, ".sync-failed")
}

/// Takes what a server left in `POOL.serving`, if anything is there: the server that wrote it
/// ended without confirming its final sync.
pub(crate) fn take_serving(pool: &Path) -> Option<String> {
    take_note(&serving_path(pool))
}

/// Takes the error a server left in `POOL.sync-failed`, if one is there.
pub(crate) fn take_sync_failure(pool: &Path) -> Option<String> {
    take_note(&sync_failure_path(pool))
}

/// Takes what the last server of `pool` left and warns of it on stderr, once: called by a new
/// server holding the pool's lock, after the pool's recovery, and by a `tailbound fs` command
/// that opened the pool for writing in its own process.
pub(crate) fn warn_of_last_server(pool: &Path) {
    if let Some(report) = take_sync_failure(pool) {
        eprintln!(
            "tailbound: warning: {}: the previous server's final sync failed, so its last writes \
             may not be durable: {report}",
            pool.display()
        );
    }
    if let Some(note) = take_serving(pool) {
        eprintln!(
            "tailbound: warning: {}: the previous server ({note}) ended without confirming its \
             final sync (it was killed or crashed); what was durable when it ended is recovered, \
             later writes may be lost",
            pool.display()
        );
    }
}

/// Warns of what the last server of `pool` left, as [`warn_of_last_server`], for a process that
/// does not hold the pool's lock but opens the pool after this (`run --private`, whose program
/// opens it): only if the lock can be taken now, and released before this returns.
pub(crate) fn warn_of_last_server_if_free(pool: &Path) {
    // Only the lock tells a dead server's note from a live one's: a server holds the lock for
    // as long as its note stands. When another process holds it, the note may be its own.
    let Ok(file) = std::fs::File::open(pool) else {
        return;
    };
    if tailbound::dev::lock_pool(&file, pool).is_ok() {
        warn_of_last_server(pool);
    }
}

/// Removes the notes beside a pool that was just made (holding its lock): they were about the
/// pool it replaced. Says so on stderr.
pub(crate) fn discard_for_new_pool(pool: &Path) {
    for path in [serving_path(pool), sync_failure_path(pool)] {
        if let Some(note) = take_note(&path) {
            eprintln!(
                "tailbound: removed {} (a note about the pool this one replaces: {note})",
                path.display()
            );
        }
    }
}

/// This server's `POOL.serving`, written while it holds the pool's lock. Dropping it leaves the
/// file: only [`ServingNote::confirm`] (or [`ServingNote::withdraw`]) removes it.
#[must_use = "the note stays unless its final sync is confirmed"]
pub(crate) struct ServingNote {
    pool: PathBuf,
}

impl ServingNote {
    /// Writes the note: `what` says which process serves the pool and where.
    pub(crate) fn write(pool: &Path, what: &str) -> Result<ServingNote, String> {
        let path = serving_path(pool);
        std::fs::write(&path, format!("{what}\n"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(ServingNote {
            pool: pool.to_path_buf(),
        })
    }

    /// Removes the note of a server that never served: it has no final sync to confirm.
    pub(crate) fn withdraw(self) {
        let _ = std::fs::remove_file(serving_path(&self.pool));
    }

    /// Confirms the final sync, still holding the pool's lock: leaves its error (`failed`) in
    /// `POOL.sync-failed` if it failed, then removes the note.
    pub(crate) fn confirm(self, failed: Option<&str>) {
        if let Some(e) = failed {
            let path = sync_failure_path(&self.pool);
            if let Err(w) = std::fs::write(&path, e) {
                eprintln!("tailbound: {}: {w}", path.display());
            }
        }
        let path = serving_path(&self.pool);
        if let Err(e) = std::fs::remove_file(&path) {
            eprintln!("tailbound: {}: {e}", path.display());
        }
    }
}

/// Runs a server's final sync `sync`: its error, or a panic in it (named by its site), is the
/// sync's failure, for [`ServingNote::confirm`].
pub(crate) fn final_sync(sync: impl FnOnce() -> tailbound::tbfs::Result<()>) -> Result<(), String> {
    match tailbound::panics::catch(sync) {
        Ok(synced) => synced.map_err(|e| e.to_string()),
        Err(panic) => Err(panic.to_string()),
    }
}
