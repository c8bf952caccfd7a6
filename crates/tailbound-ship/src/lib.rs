//! Ships tailbound recordings to Apache Kafka, exactly once across crashes of either side, and
//! rebuilds them from a topic.
//!
//! - [`ship::ship_file`] ships a finished recording (backlog); [`ship::LiveShipper`] ships a
//!   recording while it is made, reading only the frames the recorder's flusher has made durable
//!   (its [`tailbound::record::DurableWatch`]), on its own thread.
//! - [`fetch::fetch`] rebuilds a recording from a topic; [`fetch::compare`] checks it frame by
//!   frame against the original.
//! - [`retire::retire`] hands a fully shipped recycled file back to its pool, atomically.
//!
//! Exactly once: every Kafka record is keyed by the recorder's id, the recording's identity (its
//! header's creation time and epoch) and the frame's index, and one recorder always goes to one
//! partition, one batch in flight at a time, so the broker holds each stream in order. A ledger
//! beside the recording ([`ledger`]) holds the last index the broker acknowledged and the
//! partition offset from which any later record of the stream can only lie; a restarted shipper
//! reads the partition from that offset to its end and resumes after the highest index the broker
//! already holds, so a crash between the broker's acknowledgement and the ledger's write never
//! sends a frame twice. docs/SHIP.md has the whole argument.
//!
//! The client is `rskafka`, pure Rust: it builds with cargo alone, with no C library to compile
//! (librdkafka's build is a long C and CMake step on the two-core CI machine), and its
//! partition-level API (produce a batch to a partition, fetch from an offset, list offsets) is
//! exactly what the key-and-ledger design needs. It has no idempotent producer, which the design
//! does not rely on; its own retries are turned off ([`kafka::Dest`]) because a blind resend after
//! a lost acknowledgement is how duplicates arise: the shipper instead re-reads the partition's
//! tail after any failure.

pub mod broker;
pub mod faults;
pub mod fetch;
pub mod kafka;
pub mod key;
pub mod ledger;
pub mod proxy;
pub mod retire;
pub mod ship;
pub mod source;
pub mod url;

use std::path::{Path, PathBuf};

pub use url::KafkaUrl;

/// What went wrong while shipping or fetching. Messages name the file or the broker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShipError {
    #[error("{0}")]
    Usage(String),
    #[error("{op} {path}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Recording { path: PathBuf, reason: String },
    #[error("kafka {broker}: {what}: {detail}")]
    Kafka {
        broker: String,
        what: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Record(#[from] tailbound::record::RecordError),
    #[error("the test broker: {0}")]
    Broker(String),
}

/// Maps an `io::Error` to a [`ShipError::Io`] naming the path and the operation.
pub fn io_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> ShipError + 'a {
    move |source| ShipError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// A current-thread async runtime for one shipper or fetch: the Kafka client is async, the
/// callers are not.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ShipError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_err(Path::new("tokio"), "starting the runtime of"))
}
