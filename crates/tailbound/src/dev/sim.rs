//! The simulated device for crash and fault tests. It keeps what completed flushes made durable
//! apart from the writes issued since, and builds the exact image a crash would leave: each
//! unflushed write applied whole, dropped, or torn at sector granularity, chosen by a seeded RNG so
//! one seed replays one crash. It can also cut the power mid-run and inject EIO and ENOSPC.
//!
//! Owns only bytes in memory; it never touches real storage.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

use super::{check_request, Device, SECTOR_SIZE};

/// Faults a [`SimDevice`] injects.
#[derive(Debug, Clone, Default)]
pub struct SimFaults {
    /// Every read fails with EIO after this many successful reads.
    pub fail_reads_after: Option<u64>,
    /// Every write fails with EIO after this many successful writes.
    pub fail_writes_after: Option<u64>,
    /// Writes past this many bytes written in total fail with ENOSPC.
    pub enospc_after_bytes: Option<u64>,
}

/// Counters of what a [`SimDevice`] was asked to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub reads: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub flushes: u64,
    /// Writes completed since the last flush (what a crash may lose).
    pub pending_writes: u64,
}

#[derive(Debug)]
struct State {
    /// What flushes made durable.
    durable: Vec<u8>,
    /// The latest bytes (durable plus every pending write), what reads see.
    current: Vec<u8>,
    /// Writes since the last flush, in issue order.
    pending: Vec<(u64, Vec<u8>)>,
    faults: SimFaults,
    /// Successful writes left before the power goes out.
    power_writes_left: Option<u64>,
    /// Writes of this thread stay in flight (its call blocks, nothing reaches the device) until
    /// [`SimDevice::release_held`]: a slow request of one writer while others go on.
    hold: Option<ThreadId>,
    /// Writes blocked by `hold` now.
    held: u64,
    stats: SimStats,
}

/// A device whose writes stay volatile until `flush`.
#[derive(Debug)]
pub struct SimDevice {
    len: u64,
    state: Mutex<State>,
    /// What [`Device::writes_are_copies`] says (see [`SimDevice::set_writes_are_copies`]).
    copies: AtomicBool,
    /// Signalled when a held write arrives or the hold is released.
    held_cv: Condvar,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("sim device: {what} (injected EIO)"))
}

impl SimDevice {
    /// A zero-filled device of `len` bytes (a multiple of `BLOCK_SIZE`).
    pub fn new(len: u64) -> SimDevice {
        SimDevice::from_image(vec![0; len as usize])
    }

    /// A device whose durable contents are `image`.
    pub fn from_image(image: Vec<u8>) -> SimDevice {
        SimDevice {
            len: image.len() as u64 / super::BLOCK_SIZE * super::BLOCK_SIZE,
            state: Mutex::new(State {
                current: image.clone(),
                durable: image,
                pending: Vec::new(),
                faults: SimFaults::default(),
                power_writes_left: None,
                hold: None,
                held: 0,
                stats: SimStats::default(),
            }),
            copies: AtomicBool::new(false),
            held_cv: Condvar::new(),
        }
    }

    /// Makes the device say its writes are memory copies, as a memory pool does, so the engine
    /// writes each log block in place as it adds it (and the summary last) instead of the whole
    /// log at once: crash tests then cover both ways of writing a log.
    pub fn set_writes_are_copies(&self, copies: bool) {
        self.copies.store(copies, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes a crash now would leave: the durable image with each write since the last flush,
    /// in issue order, applied whole, dropped, or torn (a random subset of its sectors applied),
    /// chosen by an RNG seeded with `seed`. The same seed gives the same image.
    pub fn crash_image(&self, seed: u64) -> Vec<u8> {
        let s = self.lock();
        let mut image = s.durable.clone();
        let mut rng = fastrand::Rng::with_seed(seed);
        for (offset, data) in &s.pending {
            let at = *offset as usize;
            match rng.u8(0..3) {
                0 => image[at..at + data.len()].copy_from_slice(data),
                1 => {}
                _ => {
                    for (i, sector) in data.chunks(SECTOR_SIZE as usize).enumerate() {
                        if rng.bool() {
                            let from = at + i * SECTOR_SIZE as usize;
                            image[from..from + sector.len()].copy_from_slice(sector);
                        }
                    }
                }
            }
        }
        image
    }

    /// A new device holding [`crash_image`](Self::crash_image)`(seed)` as durable contents.
    pub fn crash(&self, seed: u64) -> SimDevice {
        SimDevice::from_image(self.crash_image(seed))
    }

    /// The latest bytes, flushed or not: what a crash of the process alone (not of the device)
    /// leaves.
    pub fn image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// Only what flushes made durable.
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// The power goes out after `writes` more successful writes: later writes and flushes fail with
    /// EIO and change nothing, so a crash can fall in the middle of an operation.
    pub fn cut_power_after(&self, writes: u64) {
        self.lock().power_writes_left = Some(writes);
    }

    /// Whether a [`cut_power_after`](Self::cut_power_after) has taken effect: every write and
    /// flush from now on fails.
    pub fn power_is_out(&self) -> bool {
        self.lock().power_writes_left == Some(0)
    }

    /// Holds every write the thread `thread` issues from now on in flight: the call blocks and
    /// nothing of it reaches the device (or a crash image) until [`SimDevice::release_held`].
    pub fn hold_writes_of(&self, thread: ThreadId) {
        self.lock().hold = Some(thread);
    }

    /// How many writes [`SimDevice::hold_writes_of`] holds now.
    pub fn held_writes(&self) -> u64 {
        self.lock().held
    }

    /// Ends the hold: the held writes go on to the device, in the order they resume.
    pub fn release_held(&self) {
        self.lock().hold = None;
        self.held_cv.notify_all();
    }

    pub fn set_faults(&self, faults: SimFaults) {
        self.lock().faults = faults;
    }

    pub fn stats(&self) -> SimStats {
        let s = self.lock();
        SimStats {
            pending_writes: s.pending.len() as u64,
            ..s.stats
        }
    }
}

impl Device for SimDevice {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn writes_are_copies(&self) -> bool {
        self.copies.load(Ordering::Relaxed)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        let mut s = self.lock();
        if s.faults
            .fail_reads_after
            .is_some_and(|n| s.stats.reads >= n)
        {
            return Err(eio("read"));
        }
        s.stats.reads += 1;
        buf.copy_from_slice(&s.current[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_request(self, offset, buf.len())?;
        let mut s = self.lock();
        if s.hold.is_some_and(|t| t == std::thread::current().id()) {
            s.held += 1;
            self.held_cv.notify_all();
            while s.hold.is_some_and(|t| t == std::thread::current().id()) {
                s = self.held_cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.held -= 1;
        }
        if s.power_writes_left == Some(0) {
            return Err(eio("write after the power went out"));
        }
        if s.faults
            .fail_writes_after
            .is_some_and(|n| s.stats.writes >= n)
        {
            return Err(eio("write"));
        }
        if s.faults
            .enospc_after_bytes
            .is_some_and(|n| s.stats.bytes_written + buf.len() as u64 > n)
        {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        if let Some(left) = s.power_writes_left.as_mut() {
            *left -= 1;
        }
        s.stats.writes += 1;
        s.stats.bytes_written += buf.len() as u64;
        s.current[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        s.pending.push((offset, buf.to_vec()));
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut s = self.lock();
        if s.power_writes_left == Some(0) {
            return Err(eio("flush after the power went out"));
        }
        s.stats.flushes += 1;
        let pending = std::mem::take(&mut s.pending);
        for (offset, data) in pending {
            let at = offset as usize;
            s.durable[at..at + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: usize = 4096;

    #[test]
    fn flushed_writes_survive_every_crash() {
        let d = SimDevice::new(16 * B as u64);
        d.write_at(0, &[1u8; B]).unwrap();
        d.flush().unwrap();
        d.write_at(B as u64, &[2u8; B]).unwrap();
        for seed in 0..50 {
            let img = d.crash_image(seed);
            assert!(img[..B].iter().all(|&b| b == 1));
        }
        assert_eq!(d.durable_image()[B], 0);
        let mut back = [0u8; B];
        d.read_at(B as u64, &mut back).unwrap();
        assert_eq!(back, [2u8; B], "reads see unflushed writes");
    }

    #[test]
    fn unflushed_writes_are_applied_dropped_or_torn_by_sector_and_seeds_replay() {
        let d = SimDevice::new(4 * B as u64);
        d.write_at(0, &[9u8; B]).unwrap();
        let (mut whole, mut none, mut torn) = (0, 0, 0);
        for seed in 0..200 {
            let img = d.crash_image(seed);
            assert_eq!(img, d.crash_image(seed), "seed {seed} replays");
            let sectors: Vec<bool> = img[..B]
                .chunks(512)
                .map(|s| {
                    assert!(
                        s.iter().all(|&b| b == s[0]),
                        "a sector is all old or all new"
                    );
                    s[0] == 9
                })
                .collect();
            match sectors.iter().filter(|&&x| x).count() {
                8 => whole += 1,
                0 => none += 1,
                _ => torn += 1,
            }
        }
        assert!(whole > 0 && none > 0 && torn > 0, "{whole} {none} {torn}");
    }

    #[test]
    fn power_cut_and_faults_fail_writes_without_effect() {
        let d = SimDevice::new(8 * B as u64);
        d.cut_power_after(1);
        assert!(!d.power_is_out());
        d.write_at(0, &[1u8; B]).unwrap();
        assert!(d.power_is_out());
        assert!(d.write_at(B as u64, &[2u8; B]).is_err());
        assert!(d.flush().is_err());
        let mut back = [0u8; B];
        d.read_at(B as u64, &mut back).unwrap();
        assert_eq!(back, [0u8; B]);

        let d = SimDevice::new(8 * B as u64);
        d.set_faults(SimFaults {
            enospc_after_bytes: Some(B as u64),
            ..SimFaults::default()
        });
        d.write_at(0, &[1u8; B]).unwrap();
        assert_eq!(
            d.write_at(0, &[1u8; B]).unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        d.set_faults(SimFaults {
            fail_reads_after: Some(0),
            ..SimFaults::default()
        });
        assert!(d.read_at(0, &mut back).is_err());
        assert!(d.write_at(3, &[0u8; B]).is_err(), "unaligned");
        assert!(d.write_at(8 * B as u64, &[0u8; B]).is_err(), "past the end");
        assert_eq!(d.stats().writes, 1);
    }
}
