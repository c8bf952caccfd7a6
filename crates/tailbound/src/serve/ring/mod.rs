//! The shared-memory transport: a session's request and completion rings, with their data, in one
//! memfd the client makes and hands to the server over the session's socket (docs/PROTOCOL.md,
//! "Rings").
//!
//! - `shm`: every `unsafe` of the transport (the memfd, its mapping, atomics, futexes, passing
//!   the descriptor).
//! - `queue`: one ring: records, fragments, positions, parking and waking.
//! - `spare`: frame buffers kept, one set per process, for the next frame.
//! - `area`: the request data area, where a long request's data goes (the client's end).
//! - `lent`: a request's data in that area as the server reads it, where it lies.
//! - here: the memfd's layout and header, and the two ends of a session's pair of rings.
//!
//! Layout: a 4 KiB header (magic, version, the three areas' sizes, then each ring's control
//! words on cache lines of their own, then the closes word), the request ring's data area, the
//! completion ring's, the request data area.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

mod area;
mod lent;
mod queue;
#[allow(unsafe_code)]
mod shm;
mod spare;

pub use area::CHUNK;
pub(crate) use area::{DataArea, Slot};
pub(crate) use lent::Lent;
pub use queue::{set_spin, DEFAULT_SPIN};
pub(crate) use queue::{Consumer, Frame, Parking, Producer, RingError, Taken, Wake};
use queue::{Ctrl, Queue};
pub(crate) use shm::{detach_fd, sealed_memfd, Mapping};
pub(crate) use spare::give as give_spare;

/// The `hello` feature bit that asks for (and, answered, grants) the rings.
pub const FEATURE_RING: u64 = 1;

/// The byte the client sends with the memfd, and the server's answers to it.
pub(crate) const TAG_MEMFD: u8 = b'R';
pub(crate) const ANSWER_RINGS: u8 = 1;
pub(crate) const ANSWER_SOCKET: u8 = 0;

const MAGIC: u32 = u32::from_le_bytes(*b"TBRG");
/// 2: the request data area (its size at byte 16, records naming data there).
const LAYOUT_VERSION: u32 = 2;
const HEADER_BYTES: usize = 4096;
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 4;
const REQUEST_BYTES_AT: usize = 8;
const COMPLETION_BYTES_AT: usize = 12;
const DATA_BYTES_AT: usize = 16;
const REQUEST_CTRL: Ctrl = Ctrl {
    tail: 64,
    space_waiter: 68,
    head: 128,
    data_waiter: 132,
};
const COMPLETION_CTRL: Ctrl = Ctrl {
    tail: 192,
    space_waiter: 196,
    head: 256,
    data_waiter: 260,
};
/// The closes word: the server raises it when an unlink or a rename leaves an inode open, so
/// that a client whose posted close may be that inode's last waits for it (docs/PROTOCOL.md,
/// "Posted closes"). Written by the server only; on a cache line of its own.
const CLOSES_AT: usize = 320;

/// A word of a session's header that one side raises and the other reads.
#[derive(Debug, Clone)]
pub(crate) struct HeaderWord {
    map: Arc<Mapping>,
    at: usize,
}

impl HeaderWord {
    fn new(map: &Arc<Mapping>, at: usize) -> Option<HeaderWord> {
        map.word(at)?;
        Some(HeaderWord {
            map: map.clone(),
            at,
        })
    }

    fn word(&self) -> &AtomicU32 {
        // Checked in `new`: the fallback is never reached.
        self.map.word(self.at).unwrap_or(&NO_WORD)
    }

    /// Its value, ordered after every store before it (a client's publish of a posted close
    /// comes before its look at the closes word).
    pub fn load(&self) -> u32 {
        self.word().load(Ordering::SeqCst)
    }

    /// Moves it on, ordered before every load after it (the server's look at how far the
    /// client published).
    pub fn raise(&self) {
        self.word().fetch_add(1, Ordering::SeqCst);
    }
}

static NO_WORD: AtomicU32 = AtomicU32::new(0);

/// The futex bits a client's thread waiting for the completion of request `id` parks with,
/// and the server wakes with when it pushes that completion: each thread sleeps until its own
/// completion (or one of the few sharing its bit) is there.
pub(crate) fn waiter_bits(id: u64) -> u32 {
    1 << (id % 32)
}

/// The smallest and largest data area either side accepts.
pub const AREA_MIN: u32 = 4 << 10;
pub const AREA_MAX: u32 = 64 << 20;

/// The sizes of a session's areas: the two rings' (powers of two, [`AREA_MIN`]..=[`AREA_MAX`])
/// and the request data area's (0, none: every frame goes through the request ring; else a
/// power of two, [`CHUNK`]..=[`AREA_MAX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    pub request: u32,
    pub completion: u32,
    pub data: u32,
}

impl Default for RingSizes {
    /// Room in the data area for a whole-file write of 128 KiB from each of 20 threads at once,
    /// or a few of 1 MiB; a completion ring in which a read's data of up to 2 MiB is one
    /// record, copied in outside the producer's lock, never fragments held under it.
    fn default() -> RingSizes {
        RingSizes {
            request: 256 << 10,
            completion: 4 << 20,
            data: 4 << 20,
        }
    }
}

impl RingSizes {
    fn check(&self) -> Result<(), String> {
        for (what, n) in [("request", self.request), ("completion", self.completion)] {
            if !n.is_power_of_two() || !(AREA_MIN..=AREA_MAX).contains(&n) {
                return Err(format!(
                    "{what} ring of {n} bytes: a power of two from {AREA_MIN} to {AREA_MAX}"
                ));
            }
        }
        let d = self.data;
        if d != 0 && (!d.is_power_of_two() || !(CHUNK as u32..=AREA_MAX).contains(&d)) {
            return Err(format!(
                "data area of {d} bytes: 0 or a power of two from {CHUNK} to {AREA_MAX}"
            ));
        }
        Ok(())
    }

    fn total(&self) -> usize {
        HEADER_BYTES + self.request as usize + self.completion as usize + self.data as usize
    }

    /// The request data area's first byte in the memfd.
    fn data_at(&self) -> usize {
        HEADER_BYTES + self.request as usize + self.completion as usize
    }
}

fn queues(map: &Arc<Mapping>, sizes: RingSizes) -> Option<(Queue, Queue)> {
    let req = Queue::new(
        map.clone(),
        REQUEST_CTRL,
        HEADER_BYTES,
        sizes.request as usize,
    )?;
    let cmp = Queue::new(
        map.clone(),
        COMPLETION_CTRL,
        HEADER_BYTES + sizes.request as usize,
        sizes.completion as usize,
    )?;
    Some((req, cmp))
}

/// The client's end: it writes requests and reads completions.
#[derive(Debug)]
pub(crate) struct ClientRings {
    pub memfd: File,
    pub requests: Producer,
    pub completions: Consumer,
    /// The closes word, which the server raises.
    pub closes: HeaderWord,
    /// Where long requests' data goes (`None`: the sizes asked for no data area).
    pub data: Option<DataArea>,
}

impl ClientRings {
    /// A fresh memfd laid out for `sizes`, its header written.
    pub fn create(sizes: RingSizes) -> io::Result<ClientRings> {
        sizes
            .check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (memfd, map) = Mapping::create(sizes.total())?;
        let map = Arc::new(map);
        for (at, v) in [
            (MAGIC_AT, MAGIC),
            (VERSION_AT, LAYOUT_VERSION),
            (REQUEST_BYTES_AT, sizes.request),
            (COMPLETION_BYTES_AT, sizes.completion),
            (DATA_BYTES_AT, sizes.data),
        ] {
            if let Some(w) = map.word(at) {
                w.store(v, Ordering::Relaxed);
            }
        }
        let (req, cmp) = queues(&map, sizes)
            .ok_or_else(|| io::Error::other("ring layout does not fit its memfd"))?;
        let closes = HeaderWord::new(&map, CLOSES_AT)
            .ok_or_else(|| io::Error::other("ring header does not fit its memfd"))?;
        let data = match sizes.data {
            0 => None,
            n => Some(
                DataArea::new(map.clone(), sizes.data_at(), n as usize)
                    .ok_or_else(|| io::Error::other("data area does not fit its memfd"))?,
            ),
        };
        Ok(ClientRings {
            memfd,
            requests: Producer::new(req),
            completions: Consumer::new(cmp),
            closes,
            data,
        })
    }
}

/// The server's end: it reads requests and writes completions.
#[derive(Debug)]
pub(crate) struct ServerRings {
    pub requests: Consumer,
    pub completions: Producer,
    /// The closes word, which this side raises.
    pub closes: HeaderWord,
}

impl ServerRings {
    /// Takes the memfd a client sent: checks it is one sealed memfd, maps it, and reads its
    /// header once (the sizes are kept here; later writes to the header change nothing).
    pub fn attach(fds: Vec<OwnedFd>) -> Result<ServerRings, String> {
        let mut fds = fds.into_iter();
        let (Some(fd), None) = (fds.next(), fds.next()) else {
            return Err("not exactly one descriptor came with the ring's tag".into());
        };
        let file = File::from(fd);
        let len = file
            .metadata()
            .map_err(|e| format!("the ring's memfd: {e}"))?
            .len();
        let most = (HEADER_BYTES + 3 * AREA_MAX as usize) as u64;
        if !(HEADER_BYTES as u64..=most).contains(&len) {
            return Err(format!(
                "a memfd of {len} bytes: rings take {HEADER_BYTES} to {most}"
            ));
        }
        let map = Arc::new(Mapping::attach(&file, len as usize).map_err(|e| e.to_string())?);
        let read = |at: usize| map.word(at).map_or(0, |w| w.load(Ordering::Relaxed));
        if read(MAGIC_AT) != MAGIC {
            return Err("the memfd's header is not a ring header".into());
        }
        if read(VERSION_AT) != LAYOUT_VERSION {
            return Err(format!(
                "ring layout version {}, this server reads version {LAYOUT_VERSION}",
                read(VERSION_AT)
            ));
        }
        let sizes = RingSizes {
            request: read(REQUEST_BYTES_AT),
            completion: read(COMPLETION_BYTES_AT),
            data: read(DATA_BYTES_AT),
        };
        sizes.check()?;
        if sizes.total() as u64 > len {
            return Err(format!(
                "rings of {} and {} bytes and a data area of {} do not fit a memfd of {len}",
                sizes.request, sizes.completion, sizes.data
            ));
        }
        let (req, cmp) = queues(&map, sizes).ok_or("ring layout does not fit its memfd")?;
        let mut req = Consumer::new(req);
        if sizes.data > 0 {
            req = req
                .with_area(sizes.data_at(), sizes.data as usize)
                .ok_or("data area does not fit its memfd")?;
        }
        let closes =
            HeaderWord::new(&map, CLOSES_AT).ok_or("ring header does not fit its memfd")?;
        Ok(ServerRings {
            requests: req,
            completions: Producer::new(cmp),
            closes,
        })
    }
}

/// Sends the client's memfd over the session's socket (a client that could not make one sends
/// the tag alone, and the session stays on the socket).
pub(crate) fn send_memfd(stream: &UnixStream, memfd: Option<&File>) -> io::Result<()> {
    match memfd {
        Some(f) => shm::send_fd(stream, TAG_MEMFD, f),
        None => crate::sys::sock::send_all(stream, &[TAG_MEMFD]),
    }
}

/// Receives the tag and the descriptors sent with it (`None` at the end of the stream).
pub(crate) fn recv_memfd(stream: &UnixStream) -> io::Result<Option<(u8, Vec<OwnedFd>)>> {
    shm::recv_fds(stream)
}

#[cfg(test)]
pub(crate) mod testing;
