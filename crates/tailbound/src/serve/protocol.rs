//! The pool server's messages and their encoding (docs/PROTOCOL.md describes the same bytes).
//! The messages are defined apart from their bytes, so the field and reply encoders can name
//! them without naming this file.
//!
//! A request frame's body is its id (u64), its operation (u8) and the operation's arguments; a
//! reply frame's body is the request's id, a status (0 done, 1 failed) and then the reply (a
//! u8 tag and its fields) or the error (its kind, errno and message). The first request of a
//! session must be `Hello`, which names the protocol version.

use super::codec::{Dec, Enc, WireError, WireResult};
pub use super::messages::{
    Adopted, Caller, LockArgs, LockHolder, Payload, PoolInfo, Reply, Request, CLOSE_POSTED,
    FEATURE_CALLER, FEATURE_OPEN_STAT, FEATURE_POSTED_CLOSE, MAGIC, VERSION,
};
use super::protocol_fields::{flags_dec, flags_enc, lock_dec, lock_enc};
use super::ring::Frame;
use crate::tbfs::{Error, SetAttr};

/// The reply kind of a leased read's data.
const LEASED_DATA: u8 = 32;
/// Where a leased read's data starts in its completion's body: after the id, the status, the
/// kind and the data's length.
const LEASED_DATA_AT: usize = 14;

// ---------------------------------------------------------------------------------------------
// Requests

/// Where decoding a request leaves a write's data.
#[derive(Debug, Clone, Copy)]
enum DataAt {
    /// Copied into the request.
    Copied,
    /// Left in the body: its position there, once found.
    Body(usize),
    /// In the request data area, `len` bytes: the body holds only their length, at its end;
    /// `found` once a write's data field was that.
    Lent { len: usize, found: bool },
}

impl Request {
    /// The request as a frame with id `id`.
    pub fn encode(&self, id: u64) -> Vec<u8> {
        self.encode_from(id, None)
    }

    /// The request as a frame with id `id` and, in a session that agreed to
    /// [`FEATURE_CALLER`], its caller after the id.
    pub fn encode_from(&self, id: u64, caller: Option<&Caller>) -> Vec<u8> {
        let (mut head, tail) = self.encode_with(id, caller, None);
        head.extend_from_slice(tail);
        head
    }

    /// [`Request::encode_from`] as a frame's start and its tail: a write's data is the tail,
    /// sent from where it lies rather than copied into the frame first. With `data`, a write's
    /// data is that instead of the request's own (left empty by a caller that lends its
    /// buffer); other requests take no data and have no tail.
    pub fn encode_with<'a>(
        &'a self,
        id: u64,
        caller: Option<&Caller>,
        data: Option<&'a [u8]>,
    ) -> (Vec<u8>, &'a [u8]) {
        use Request as R;
        let mut tail: &[u8] = &[];
        let mut outside = |e: &mut Enc, own: &'a Payload| {
            tail = data.unwrap_or(own.as_slice());
            e.u32(u32::try_from(tail.len()).unwrap_or(u32::MAX));
        };
        let mut e = Enc::new();
        e.u64(id);
        if let Some(c) = caller {
            e.u32(c.tid).u8(c.class).u8(c.level);
        }
        match self {
            R::Hello { version, features } => {
                e.u8(1);
                for b in MAGIC {
                    e.u8(b);
                }
                e.u16(*version).u64(*features);
            }
            R::Open { path, flags } => {
                e.u8(2).str(path);
                flags_enc(&mut e, flags);
            }
            R::OpenStat { path, flags } => {
                e.u8(66).str(path);
                flags_enc(&mut e, flags);
            }
            R::Close { handle } => {
                e.u8(3).u64(*handle);
            }
            R::ClosePosted { handle } => {
                e.u8(CLOSE_POSTED).u64(*handle);
            }
            R::Barrier => {
                e.u8(68);
            }
            R::Read {
                handle,
                offset,
                len,
            } => {
                e.u8(4).u64(*handle).u64(*offset).u32(*len);
            }
            R::Write {
                handle,
                offset,
                data,
            } => {
                e.u8(5).u64(*handle).u64(*offset);
                outside(&mut e, data);
            }
            R::Append { handle, data } => {
                e.u8(6).u64(*handle);
                outside(&mut e, data);
            }
            R::Fsync { handle } => {
                e.u8(7).u64(*handle);
            }
            R::Fdatasync { handle } => {
                e.u8(8).u64(*handle);
            }
            R::SetLen { handle, len } => {
                e.u8(9).u64(*handle).u64(*len);
            }
            R::Allocate {
                handle,
                offset,
                len,
            } => {
                e.u8(10).u64(*handle).u64(*offset).u64(*len);
            }
            R::Fstat { handle } => {
                e.u8(11).u64(*handle);
            }
            R::Lock { handle, lock, wait } => {
                e.u8(12).u64(*handle);
                lock_enc(&mut e, lock);
                e.bool(*wait);
            }
            R::TestLock { handle, lock } => {
                e.u8(13).u64(*handle);
                lock_enc(&mut e, lock);
            }
            R::Stat { path, follow } => {
                e.u8(14).str(path).bool(*follow);
            }
            R::SetAttr { path, attr, follow } => {
                e.u8(15).str(path);
                attr_enc(&mut e, attr);
                e.bool(*follow);
            }
            R::Mkdir { path, mode } => {
                e.u8(16).str(path).u32(*mode);
            }
            R::Rmdir { path } => {
                e.u8(17).str(path);
            }
            R::Unlink { path } => {
                e.u8(18).str(path);
            }
            R::Rename { from, to } => {
                e.u8(19).str(from).str(to);
            }
            R::Link { existing, new } => {
                e.u8(20).str(existing).str(new);
            }
            R::Symlink { target, path } => {
                e.u8(21).str(target).str(path);
            }
            R::Readlink { path } => {
                e.u8(22).str(path);
            }
            R::Truncate { path, len } => {
                e.u8(23).str(path).u64(*len);
            }
            R::Readdir { path, after } => {
                e.u8(24).str(path).opt_str(after.as_deref());
            }
            R::Sync => {
                e.u8(25);
            }
            R::Statvfs => {
                e.u8(26);
            }
            R::Space => {
                e.u8(27);
            }
            R::Checkpoints => {
                e.u8(28);
            }
            R::Snapshot { name } => {
                e.u8(29).opt_str(name.as_deref());
            }
            R::SetSnapshot { number, keep } => {
                e.u8(30).u64(*number).bool(*keep);
            }
            R::ProtectionPeriod => {
                e.u8(31);
            }
            R::Gc { target_free } => {
                e.u8(32).f64(*target_free);
            }
            R::Info => {
                e.u8(33);
            }
            R::ViewOpen { number } => {
                e.u8(34).u64(*number);
            }
            R::ViewClose { view } => {
                e.u8(35).u64(*view);
            }
            R::ViewStat { view, path } => {
                e.u8(36).u64(*view).str(path);
            }
            R::ViewReaddir { view, path, after } => {
                e.u8(37).u64(*view).str(path).opt_str(after.as_deref());
            }
            R::ViewRead {
                view,
                path,
                offset,
                len,
            } => {
                e.u8(38).u64(*view).str(path).u64(*offset).u32(*len);
            }
            R::ReadOn { handle, len } => {
                e.u8(39).u64(*handle).u32(*len);
            }
            R::WriteOn { handle, data } => {
                e.u8(40).u64(*handle);
                outside(&mut e, data);
            }
            R::Seek {
                handle,
                offset,
                whence,
            } => {
                e.u8(41).u64(*handle).i64(*offset).u8(*whence);
            }
            R::SetStatus { handle, status } => {
                e.u8(42).u64(*handle).u32(*status);
            }
            R::GetStatus { handle } => {
                e.u8(43).u64(*handle);
            }
            R::Hold { items } => {
                e.u8(44).u32(items.len() as u32);
                for (h, note) in items {
                    e.u64(*h).str(note);
                }
            }
            R::HoldFor { token, pid } => {
                e.u8(45).u64(*token).i32(*pid);
            }
            R::Adopt { token } => {
                e.u8(46).u64(*token);
            }
            R::Release { token } => {
                e.u8(47).u64(*token);
            }
            R::FsetAttr { handle, attr } => {
                e.u8(48).u64(*handle);
                attr_enc(&mut e, attr);
            }
            R::LeaseTable => {
                e.u8(60);
            }
            R::StatLeased { path, follow } => {
                e.u8(61).str(path).bool(*follow);
            }
            R::FstatLeased { handle } => {
                e.u8(62).u64(*handle);
            }
            R::ReadLeased {
                handle,
                offset,
                len,
            } => {
                e.u8(63).u64(*handle).u64(*offset).u32(*len);
            }
            R::SharedMemory { handle, op } => {
                e.u8(65).u64(*handle).u8(*op);
            }
            R::Mknod { path, mode, rdev } => {
                e.u8(64).str(path).u32(*mode).u32(*rdev);
            }
        }
        (e.finish_before(tail.len()), tail)
    }

    /// A request frame's body: its id and the request. An id that decodes with a request that
    /// does not is returned with the error, so the reply can name it.
    pub fn decode(body: &[u8]) -> (Option<u64>, WireResult<Request>) {
        let (id, r) = Request::decode_body(body, false, &mut DataAt::Copied);
        (id, r.map(|(_, r)| r))
    }

    /// A request frame's body in a session that agreed to [`FEATURE_CALLER`]: its id, its
    /// caller and the request.
    pub fn decode_from(body: &[u8]) -> (Option<u64>, WireResult<(Caller, Request)>) {
        let (id, r) = Request::decode_body(body, true, &mut DataAt::Copied);
        (
            id,
            r.map(|(c, r)| (c.expect("a called body decodes its caller"), r)),
        )
    }

    /// [`Request::decode`] or, with `called`, [`Request::decode_from`] of a body the caller
    /// gives up: a write's data stays where it is in the body instead of being copied out.
    pub fn decode_owned(
        body: Vec<u8>,
        called: bool,
    ) -> (Option<u64>, WireResult<(Option<Caller>, Request)>) {
        let mut data_at = DataAt::Body(0);
        let (id, r) = Request::decode_body(&body, called, &mut data_at);
        // The data is the body's last field (the whole body was used): it is the body's tail.
        let r = r.map(|(c, mut r)| {
            if let (DataAt::Body(at), Some(p)) = (data_at, r.payload_mut()) {
                *p = Payload::tail_of(body, at);
            }
            (c, r)
        });
        (id, r)
    }

    /// [`Request::decode_owned`] of a frame taken off the rings: a write's data that lay in
    /// the request data area is read there ([`Payload::is_lent`]), not copied. A frame whose
    /// data in the area is anything but a write's whole data, right after its length at the
    /// end of the head, is decoded as one buffer, as from the socket.
    pub(crate) fn decode_frame(
        frame: Frame,
        called: bool,
    ) -> (Option<u64>, WireResult<(Option<Caller>, Request)>) {
        let Frame { head, tail } = frame;
        let Some(tail) = tail else {
            return Request::decode_owned(head, called);
        };
        let mut data_at = DataAt::Lent {
            len: tail.len(),
            found: false,
        };
        let (id, r) = Request::decode_body(&head, called, &mut data_at);
        match (r, data_at) {
            (Ok((c, mut r)), DataAt::Lent { found: true, .. }) => {
                if let Some(p) = r.payload_mut() {
                    *p = Payload::lent(tail);
                }
                (id, Ok((c, r)))
            }
            _ => {
                let mut body = head;
                tail.copy_to(&mut body);
                Request::decode_owned(body, called)
            }
        }
    }

    /// The id, then (with `called`) the caller, then the request, which must end the body;
    /// `data_at` as [`Request::decode_rest`] takes it.
    fn decode_body(
        body: &[u8],
        called: bool,
        data_at: &mut DataAt,
    ) -> (Option<u64>, WireResult<(Option<Caller>, Request)>) {
        let mut d = Dec::new(body);
        let id = match d.u64("request id") {
            Ok(id) => id,
            Err(e) => return (None, Err(e)),
        };
        let r = (|| {
            let caller = if called {
                Some(Caller {
                    tid: d.u32("caller's thread")?,
                    class: d.u8("caller's class")?,
                    level: d.u8("caller's level")?,
                })
            } else {
                None
            };
            let r = Request::decode_rest(&mut d, data_at)?;
            d.end("request")?;
            Ok((caller, r))
        })();
        (Some(id), r)
    }

    /// A write's data, if the request carries any.
    fn payload_mut(&mut self) -> Option<&mut Payload> {
        match self {
            Request::Write { data, .. }
            | Request::Append { data, .. }
            | Request::WriteOn { data, .. } => Some(data),
            _ => None,
        }
    }

    /// The request after the id (and caller). A write's data is copied or left out (an empty
    /// placeholder), as `data_at` says.
    fn decode_rest(d: &mut Dec<'_>, data_at: &mut DataAt) -> WireResult<Request> {
        use Request as R;
        let op = d.u8("operation")?;
        let mut data = |d: &mut Dec<'_>| -> WireResult<Payload> {
            if let DataAt::Lent { len, found } = data_at {
                // Only the data's length is in the body, at its end; the data is the tail.
                let n = d.u32("data")? as usize;
                d.end("data in the area")?;
                if n != *len {
                    return Err(WireError(format!("data of {n} bytes, {len} in the area")));
                }
                *found = true;
                return Ok(Payload::default());
            }
            let bytes = d.bytes("data")?;
            Ok(match data_at {
                DataAt::Body(at) => {
                    *at = d.position() - bytes.len();
                    Payload::default()
                }
                _ => Payload::from(bytes),
            })
        };
        Ok(match op {
            1 => {
                let mut magic = [0u8; 4];
                for m in &mut magic {
                    *m = d.u8("magic")?;
                }
                if magic != MAGIC {
                    return Err(WireError("hello: not a tailbound client".into()));
                }
                R::Hello {
                    version: d.u16("version")?,
                    features: d.u64("features")?,
                }
            }
            2 => R::Open {
                path: d.str("path")?,
                flags: flags_dec(d)?,
            },
            66 => R::OpenStat {
                path: d.str("path")?,
                flags: flags_dec(d)?,
            },
            3 => R::Close {
                handle: d.u64("handle")?,
            },
            CLOSE_POSTED => R::ClosePosted {
                handle: d.u64("handle")?,
            },
            68 => R::Barrier,
            4 => R::Read {
                handle: d.u64("handle")?,
                offset: d.u64("offset")?,
                len: d.u32("length")?,
            },
            5 => R::Write {
                handle: d.u64("handle")?,
                offset: d.u64("offset")?,
                data: data(d)?,
            },
            6 => R::Append {
                handle: d.u64("handle")?,
                data: data(d)?,
            },
            7 => R::Fsync {
                handle: d.u64("handle")?,
            },
            8 => R::Fdatasync {
                handle: d.u64("handle")?,
            },
            9 => R::SetLen {
                handle: d.u64("handle")?,
                len: d.u64("length")?,
            },
            10 => R::Allocate {
                handle: d.u64("handle")?,
                offset: d.u64("offset")?,
                len: d.u64("length")?,
            },
            11 => R::Fstat {
                handle: d.u64("handle")?,
            },
            12 => R::Lock {
                handle: d.u64("handle")?,
                lock: lock_dec(d)?,
                wait: d.bool("wait")?,
            },
            13 => R::TestLock {
                handle: d.u64("handle")?,
                lock: lock_dec(d)?,
            },
            14 => R::Stat {
                path: d.str("path")?,
                follow: d.bool("follow")?,
            },
            15 => {
                let path = d.str("path")?;
                let attr = attr_dec(d)?;
                R::SetAttr {
                    path,
                    attr,
                    follow: d.bool("follow")?,
                }
            }
            16 => R::Mkdir {
                path: d.str("path")?,
                mode: d.u32("mode")?,
            },
            17 => R::Rmdir {
                path: d.str("path")?,
            },
            18 => R::Unlink {
                path: d.str("path")?,
            },
            19 => R::Rename {
                from: d.str("from")?,
                to: d.str("to")?,
            },
            20 => R::Link {
                existing: d.str("existing")?,
                new: d.str("new")?,
            },
            21 => R::Symlink {
                target: d.str("target")?,
                path: d.str("path")?,
            },
            22 => R::Readlink {
                path: d.str("path")?,
            },
            23 => R::Truncate {
                path: d.str("path")?,
                len: d.u64("length")?,
            },
            24 => R::Readdir {
                path: d.str("path")?,
                after: d.opt_str("after")?,
            },
            25 => R::Sync,
            26 => R::Statvfs,
            27 => R::Space,
            28 => R::Checkpoints,
            29 => R::Snapshot {
                name: d.opt_str("name")?,
            },
            30 => R::SetSnapshot {
                number: d.u64("checkpoint")?,
                keep: d.bool("keep")?,
            },
            31 => R::ProtectionPeriod,
            32 => R::Gc {
                target_free: d.f64("target")?,
            },
            33 => R::Info,
            34 => R::ViewOpen {
                number: d.u64("checkpoint")?,
            },
            35 => R::ViewClose {
                view: d.u64("view")?,
            },
            36 => R::ViewStat {
                view: d.u64("view")?,
                path: d.str("path")?,
            },
            37 => R::ViewReaddir {
                view: d.u64("view")?,
                path: d.str("path")?,
                after: d.opt_str("after")?,
            },
            38 => R::ViewRead {
                view: d.u64("view")?,
                path: d.str("path")?,
                offset: d.u64("offset")?,
                len: d.u32("length")?,
            },
            39 => R::ReadOn {
                handle: d.u64("handle")?,
                len: d.u32("length")?,
            },
            40 => R::WriteOn {
                handle: d.u64("handle")?,
                data: data(d)?,
            },
            41 => R::Seek {
                handle: d.u64("handle")?,
                offset: d.i64("offset")?,
                whence: d.u8("whence")?,
            },
            42 => R::SetStatus {
                handle: d.u64("handle")?,
                status: d.u32("status")?,
            },
            43 => R::GetStatus {
                handle: d.u64("handle")?,
            },
            44 => {
                let n = d.count("held descriptions", 12)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push((d.u64("handle")?, d.str("note")?));
                }
                R::Hold { items }
            }
            45 => R::HoldFor {
                token: d.u64("token")?,
                pid: d.i32("pid")?,
            },
            46 => R::Adopt {
                token: d.u64("token")?,
            },
            47 => R::Release {
                token: d.u64("token")?,
            },
            48 => R::FsetAttr {
                handle: d.u64("handle")?,
                attr: attr_dec(d)?,
            },
            60 => R::LeaseTable,
            61 => R::StatLeased {
                path: d.str("path")?,
                follow: d.bool("follow")?,
            },
            62 => R::FstatLeased {
                handle: d.u64("handle")?,
            },
            63 => R::ReadLeased {
                handle: d.u64("handle")?,
                offset: d.u64("offset")?,
                len: d.u32("length")?,
            },
            65 => R::SharedMemory {
                handle: d.u64("handle")?,
                op: d.u8("op")?,
            },
            64 => R::Mknod {
                path: d.str("path")?,
                mode: d.u32("mode")?,
                rdev: d.u32("rdev")?,
            },
            other => return Err(WireError(format!("unknown operation {other}"))),
        })
    }
}

fn attr_enc(e: &mut Enc, attr: &SetAttr) {
    let opt32 = |e: &mut Enc, v: Option<u32>| {
        e.opt_u64(v.map(u64::from));
    };
    opt32(e, attr.mode);
    opt32(e, attr.uid);
    opt32(e, attr.gid);
    e.opt_u64(attr.atime_ns.map(|t| t as u64));
    e.opt_u64(attr.mtime_ns.map(|t| t as u64));
    e.bool(attr.touch);
}

fn attr_dec(d: &mut Dec<'_>) -> WireResult<SetAttr> {
    let opt32 = |d: &mut Dec<'_>, what: &str| -> WireResult<Option<u32>> {
        d.opt_u64(what)?
            .map(|v| u32::try_from(v).map_err(|_| WireError(format!("{what}: {v}"))))
            .transpose()
    };
    Ok(SetAttr {
        mode: opt32(d, "mode")?,
        uid: opt32(d, "uid")?,
        gid: opt32(d, "gid")?,
        atime_ns: d.opt_u64("atime")?.map(|t| t as i64),
        mtime_ns: d.opt_u64("mtime")?.map(|t| t as i64),
        touch: d.bool("touch")?,
    })
}

// ---------------------------------------------------------------------------------------------
// Replies

impl Reply {
    /// A successful reply to request `id`, as a frame.
    pub fn encode(&self, id: u64) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(id).u8(0);
        super::protocol_replies::encode_reply(&mut e, self);
        e.finish()
    }

    /// A successful reply to request `id` as a frame in three parts, sent one after the
    /// other: a reply's data is the middle one, sent from where it lies rather than copied
    /// into the frame first (the other two own what comes before and after it).
    pub fn encode_parts(&self, id: u64) -> (Vec<u8>, &[u8], Vec<u8>) {
        let head = |kind: u8, data: &[u8], after: usize| {
            let mut e = Enc::new();
            e.u64(id)
                .u8(0)
                .u8(kind)
                .u32(u32::try_from(data.len()).unwrap_or(u32::MAX));
            e.finish_before(data.len() + after)
        };
        match self {
            Reply::Data(b) => (head(4, b, 0), b, Vec::new()),
            Reply::LeasedData { data, lease } => {
                let mut e = Enc::new();
                super::lease_wire::data_lease_enc(&mut e, lease.as_ref());
                // Not a frame of its own: its bytes without the length `Enc` starts with.
                let after = e.finish().split_off(4);
                (head(LEASED_DATA, data, after.len()), data, after)
            }
            other => (other.encode(id), &[], Vec::new()),
        }
    }

    /// Where the data of a leased read's completion of request `id` lies in the completion's
    /// body, shown its first bytes `head`: its start and length, if it succeeded and its data
    /// fits `room`.
    pub fn leased_data_in(head: &[u8], id: u64, room: usize) -> Option<(usize, usize)> {
        let rid = u64::from_le_bytes(head.get(..8)?.try_into().ok()?);
        if rid != id || head.get(8) != Some(&0) || head.get(9) != Some(&LEASED_DATA) {
            return None;
        }
        let len = u32::from_le_bytes(head.get(10..LEASED_DATA_AT)?.try_into().ok()?) as usize;
        (len <= room).then_some((LEASED_DATA_AT, len))
    }

    /// A completion's body whose data [`Reply::leased_data_in`] found was taken out of: its
    /// data's length is made zero, so the rest decodes as a leased read of no data.
    pub fn leased_data_taken_out(body: &mut [u8]) {
        if let Some(len) = body.get_mut(10..LEASED_DATA_AT) {
            len.copy_from_slice(&0u32.to_le_bytes());
        }
    }

    /// A failed reply to request `id`, as a frame.
    pub fn encode_error(id: u64, err: &Error) -> Vec<u8> {
        let (kind, errno, message) = super::protocol_replies::error_parts(err);
        let mut e = Enc::new();
        e.u64(id).u8(1).u8(kind).i32(errno).str(&message);
        e.finish()
    }

    /// A reply frame's body: its id, and the reply or the error the server sent.
    pub fn decode(body: &[u8]) -> WireResult<(u64, Result<Reply, Error>)> {
        Reply::decode_body(body, None)
    }

    /// [`Reply::decode`] of a body the caller gives up: a leased read's data stays where it is
    /// in the body instead of being copied out.
    pub fn decode_owned(body: Vec<u8>) -> WireResult<(u64, Result<Reply, Error>)> {
        let mut data_at = None;
        let (id, mut r) = Reply::decode_body(&body, Some(&mut data_at))?;
        if let (Some((start, end)), Ok(Reply::LeasedData { data, .. })) = (data_at, &mut r) {
            *data = Payload::range_of(body, start, end);
        }
        Ok((id, r))
    }

    fn decode_body(
        body: &[u8],
        data_at: Option<&mut Option<(usize, usize)>>,
    ) -> WireResult<(u64, Result<Reply, Error>)> {
        let mut d = Dec::new(body);
        let id = d.u64("reply id")?;
        let r = match d.u8("status")? {
            0 => Ok(super::protocol_replies::decode_reply(&mut d, data_at)?),
            1 => {
                let kind = d.u8("error kind")?;
                let errno = d.i32("errno")?;
                let message = d.str("message")?;
                Err(super::protocol_replies::error_from_parts(
                    kind, errno, message,
                ))
            }
            s => return Err(WireError(format!("status {s}"))),
        };
        d.end("reply")?;
        Ok((id, r))
    }
}
