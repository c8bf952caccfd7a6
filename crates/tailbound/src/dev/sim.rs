//! Simulated device for tests (skeleton: the helper implementing `dev` fills this in).
use super::Device;
use std::io;

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

/// A device whose writes stay volatile until `flush`.
#[derive(Debug)]
pub struct SimDevice {}

impl SimDevice {
    /// A zero-filled device of `len` bytes (a multiple of `BLOCK_SIZE`).
    pub fn new(len: u64) -> SimDevice {
        let _ = len;
        todo!()
    }
    /// A device whose durable contents are `image`.
    pub fn from_image(image: Vec<u8>) -> SimDevice {
        let _ = image;
        todo!()
    }
    /// The bytes a crash now would leave: the durable image with each write since the last flush,
    /// in issue order, applied whole, dropped, or torn (a random subset of its sectors applied),
    /// chosen by an RNG seeded with `seed`. The same seed gives the same image.
    pub fn crash_image(&self, seed: u64) -> Vec<u8> {
        let _ = seed;
        todo!()
    }
    /// A new device holding [`crash_image`](Self::crash_image)`(seed)` as durable contents.
    pub fn crash(&self, seed: u64) -> SimDevice {
        SimDevice::from_image(self.crash_image(seed))
    }
    /// Only what flushes made durable.
    pub fn durable_image(&self) -> Vec<u8> {
        todo!()
    }
    /// The power goes out after `writes` more successful writes: later writes and flushes fail with
    /// EIO and change nothing, so a crash can fall in the middle of an operation.
    pub fn cut_power_after(&self, writes: u64) {
        let _ = writes;
        todo!()
    }
    pub fn set_faults(&self, faults: SimFaults) {
        let _ = faults;
        todo!()
    }
    pub fn stats(&self) -> SimStats {
        todo!()
    }
}

impl Device for SimDevice {
    fn kind(&self) -> &'static str {
        "sim"
    }
    fn len(&self) -> u64 {
        todo!()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let _ = (offset, buf);
        todo!()
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let _ = (offset, buf);
        todo!()
    }
    fn flush(&self) -> io::Result<()> {
        todo!()
    }
}
