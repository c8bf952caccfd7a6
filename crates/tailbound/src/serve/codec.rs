//! The wire's primitives: little-endian integers, length-prefixed bytes and strings, options, and
//! frames. Decoding reads from a bounded buffer and returns [`WireError`] on anything it does not
//! expect; it never panics and never allocates more than the frame it was given holds.

use std::io::{self, Read};

/// The largest frame body either side accepts: the largest read or write payload plus room for
/// the request around it.
pub const FRAME_MAX: usize = IO_MAX + 64 * 1024;

/// The most bytes one read or write request carries; larger transfers are split by the client.
pub const IO_MAX: usize = 4 << 20;

/// A frame or message that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad frame: {}", self.0)
    }
}

pub type WireResult<T> = Result<T, WireError>;

fn bad<T>(what: impl Into<String>) -> WireResult<T> {
    Err(WireError(what.into()))
}

/// Builds one frame: a 4-byte length, then the body.
#[derive(Debug)]
pub struct Enc {
    buf: Vec<u8>,
}

impl Default for Enc {
    fn default() -> Enc {
        Enc::new()
    }
}

impl Enc {
    pub fn new() -> Enc {
        Enc { buf: vec![0u8; 4] }
    }

    pub fn u8(&mut self, v: u8) -> &mut Enc {
        self.buf.push(v);
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Enc {
        self.u8(u8::from(v))
    }
    pub fn u16(&mut self, v: u16) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Enc {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn f64(&mut self, v: f64) -> &mut Enc {
        self.u64(v.to_bits())
    }
    /// A u32 length, then the bytes. Callers keep payloads under [`IO_MAX`].
    pub fn bytes(&mut self, v: &[u8]) -> &mut Enc {
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Enc {
        self.bytes(v.as_bytes())
    }
    pub fn opt_str(&mut self, v: Option<&str>) -> &mut Enc {
        match v {
            None => self.u8(0),
            Some(s) => self.u8(1).str(s),
        }
    }
    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Enc {
        match v {
            None => self.u8(0),
            Some(x) => self.u8(1).u64(x),
        }
    }

    /// The finished frame, length filled in.
    pub fn finish(self) -> Vec<u8> {
        self.finish_before(0)
    }

    /// The start of a frame whose last `tail` bytes are sent after it from elsewhere, the
    /// length filled in for the whole.
    pub fn finish_before(mut self, tail: usize) -> Vec<u8> {
        let body = (self.buf.len() - 4 + tail) as u32;
        self.buf[..4].copy_from_slice(&body.to_le_bytes());
        self.buf
    }
}

/// Reads a frame body front to back.
#[derive(Debug)]
pub struct Dec<'a> {
    buf: &'a [u8],
    /// The body's whole length, for [`Dec::position`].
    whole: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec {
            buf,
            whole: buf.len(),
        }
    }

    /// How many bytes of the body were read.
    pub fn position(&self) -> usize {
        self.whole - self.buf.len()
    }

    fn take(&mut self, n: usize, what: &str) -> WireResult<&'a [u8]> {
        if self.buf.len() < n {
            return bad(format!("{what}: {n} bytes wanted, {} left", self.buf.len()));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> WireResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> WireResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn bool(&mut self, what: &str) -> WireResult<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => bad(format!("{what}: {v} is not a boolean")),
        }
    }
    pub fn u16(&mut self, what: &str) -> WireResult<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> WireResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &str) -> WireResult<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> WireResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &str) -> WireResult<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    pub fn f64(&mut self, what: &str) -> WireResult<f64> {
        Ok(f64::from_bits(self.u64(what)?))
    }
    pub fn bytes(&mut self, what: &str) -> WireResult<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub fn str(&mut self, what: &str) -> WireResult<String> {
        let b = self.bytes(what)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => bad(format!("{what}: not UTF-8")),
        }
    }
    pub fn opt_str(&mut self, what: &str) -> WireResult<Option<String>> {
        Ok(if self.bool(what)? {
            Some(self.str(what)?)
        } else {
            None
        })
    }
    pub fn opt_u64(&mut self, what: &str) -> WireResult<Option<u64>> {
        Ok(if self.bool(what)? {
            Some(self.u64(what)?)
        } else {
            None
        })
    }
    /// A count of items that follow, each at least `min_item` bytes: a count the rest of the
    /// frame cannot hold is refused before anything is allocated for it.
    pub fn count(&mut self, what: &str, min_item: usize) -> WireResult<usize> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_item.max(1)) > self.buf.len() {
            return bad(format!("{what}: {n} items do not fit in the frame"));
        }
        Ok(n)
    }

    /// Checks that the whole body was used.
    pub fn end(&self, what: &str) -> WireResult<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            bad(format!("{what}: {} bytes left over", self.buf.len()))
        }
    }
}

/// Reads one frame body. `Ok(None)` at a clean end of stream (between frames); a frame longer
/// than [`FRAME_MAX`] is an `InvalidData` error, and so is a stream that ends inside a frame.
pub fn read_frame(stream: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match stream.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended inside a frame's length",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is longer than the most ({FRAME_MAX})"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok(Some(body))
}
