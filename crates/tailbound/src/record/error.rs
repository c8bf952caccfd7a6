//! What goes wrong with a recording, each error naming the file and the operation.

use std::path::{Path, PathBuf};

/// What went wrong with a recording. Messages name the file and the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("{op} {path}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("recorder options: {0}")]
    Options(String),
    #[error("{path}: not a tailbound recording: {reason}")]
    NotARecording { path: PathBuf, reason: String },
    #[error("recycle pool {dir}: {why}")]
    PoolEmpty { dir: PathBuf, why: String },
    #[error("{what}: needs root")]
    NeedsRoot { what: String },
    #[error("{what}: {source}")]
    Hygiene {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the recorder's background thread stopped unexpectedly")]
    Closed,
    #[error("an earlier background flush failed, so the recording is not durable: {0}")]
    BackgroundFailed(String),
}

/// Maps an `io::Error` to a [`RecordError::Io`] naming the path and the operation.
pub(crate) fn io_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> RecordError + 'a {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}
