//! The C ABI of tailbound: `libtailbound.so` / `libtailbound.a` and the header `tailbound.h`.
//!
//! The header is generated at build time by cbindgen into `$OUT_DIR/tailbound.h` and copied to
//! `target/include/tailbound.h`. Every function catches panics and null pointers; a failing call
//! returns NULL or a negative number, and `tb_last_error` gives the message.
//!
//! This crate is one of the two places `unsafe` lives in tailbound (raw pointers from C); each block
//! says why it holds.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use tailbound::record::{verify, RecordError, Recorder, RecorderOptions};

/// A recording in progress; create with `tb_recorder_create`, end with `tb_recorder_finish`.
pub struct TbRecorder {
    inner: Recorder,
}

/// What `tb_record_verify` found in a recording.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct TbVerifyReport {
    /// Intact record frames.
    pub frames: u64,
    /// The file's length.
    pub bytes: u64,
    /// Length of the valid prefix.
    pub valid_bytes: u64,
    /// Payload bytes of the intact frames.
    pub payload_bytes: u64,
    /// Sequence number of the last intact frame, -1 if none.
    pub last_sequence: i64,
    /// The file's epoch (lap of a recycled file).
    pub epoch: u64,
    /// 1 when a trailer marks the recording finished.
    pub finished: c_int,
}

/// The call succeeded.
pub const TB_OK: c_int = 0;
/// An argument was NULL, not UTF-8, or not a valid option.
pub const TB_EINVAL: c_int = -22;
/// An I/O error (the message names the file and the operation).
pub const TB_EIO: c_int = -5;
/// The file is not a tailbound recording.
pub const TB_ENOTREC: c_int = -1000;
/// tailbound failed internally (a bug: please report the message).
pub const TB_EINTERNAL: c_int = -1001;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_error(message: impl Into<String>) {
    LAST_ERROR.with(|e| *e.borrow_mut() = message.into());
}

fn code_of(e: &RecordError) -> c_int {
    match e {
        RecordError::Options(_) => TB_EINVAL,
        RecordError::NotARecording { .. } => TB_ENOTREC,
        RecordError::Io { source, .. } => source.raw_os_error().map_or(TB_EIO, |n| -n),
        _ => TB_EIO,
    }
}

/// Runs `f`, turning an error or a panic into a code and the thread's last error.
fn guarded(f: impl FnOnce() -> Result<c_int, (c_int, String)>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err((code, message))) => {
            set_error(message);
            code
        }
        Err(_) => {
            set_error("tailbound panicked inside a C call");
            TB_EINTERNAL
        }
    }
}

fn fail(e: RecordError) -> (c_int, String) {
    (code_of(&e), e.to_string())
}

/// Reads a C string argument.
///
/// # Safety
/// `s` must be NULL or point to a NUL-terminated string valid for the call.
unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Result<&'a str, (c_int, String)> {
    if s.is_null() {
        return Err((TB_EINVAL, format!("{what} is NULL")));
    }
    // SAFETY: the caller guarantees `s` is a valid NUL-terminated string for the call.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| (TB_EINVAL, format!("{what} is not UTF-8")))
}

/// Creates a recording at `path`. `options` is a spec such as
/// `"allocation=zero-fill,flush=pipelined,flush-every=2MiB"` (NULL or "" for tailbound's defaults;
/// keys: allocation, flush, flush-every, flusher, framing, expected-size, pool, decoupled, overflow,
/// mlockall, rt-priority, cpu, measure-writes). Returns NULL on error (see `tb_last_error`).
///
/// # Safety
/// `path` must be a NUL-terminated string; `options` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tb_recorder_create(
    path: *const c_char,
    options: *const c_char,
) -> *mut TbRecorder {
    let mut out: *mut TbRecorder = std::ptr::null_mut();
    guarded(|| {
        // SAFETY: forwarded from this function's contract.
        let path = PathBuf::from(unsafe { c_str(path, "path") }?);
        let options: RecorderOptions = if options.is_null() {
            RecorderOptions::default()
        } else {
            // SAFETY: forwarded from this function's contract.
            unsafe { c_str(options, "options") }?
                .parse()
                .map_err(fail)?
        };
        let inner = Recorder::create(&path, options).map_err(fail)?;
        out = Box::into_raw(Box::new(TbRecorder { inner }));
        Ok(TB_OK)
    });
    out
}

/// Records one record of `len` bytes. Returns 0, or a negative code (see `tb_last_error`).
///
/// # Safety
/// `recorder` must come from `tb_recorder_create` and not be finished or freed; `data` must point to
/// `len` readable bytes (it may be NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn tb_recorder_write(
    recorder: *mut TbRecorder,
    data: *const u8,
    len: usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller passes a live recorder from tb_recorder_create, used by one thread.
        let r = unsafe { recorder.as_mut() }.ok_or((TB_EINVAL, "recorder is NULL".into()))?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else if data.is_null() {
            return Err((TB_EINVAL, "data is NULL".into()));
        } else {
            // SAFETY: the caller guarantees `data` points to `len` readable bytes.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        r.inner.write(bytes).map_err(fail)?;
        Ok(TB_OK)
    })
}

/// Finishes the recording (cuts the unused tail or writes the trailer, `fsync`s) and frees it.
/// Returns 0, or a negative code; the recorder is freed either way.
///
/// # Safety
/// `recorder` must come from `tb_recorder_create` and not be used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn tb_recorder_finish(recorder: *mut TbRecorder) -> c_int {
    guarded(|| {
        if recorder.is_null() {
            return Err((TB_EINVAL, "recorder is NULL".into()));
        }
        // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
        let r = unsafe { Box::from_raw(recorder) };
        r.inner.finish().map_err(fail)?;
        Ok(TB_OK)
    })
}

/// Frees a recorder without finishing it (what was flushed stays on disk, as after a crash).
///
/// # Safety
/// `recorder` must be NULL or come from `tb_recorder_create`, and not be used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn tb_recorder_free(recorder: *mut TbRecorder) {
    if !recorder.is_null() {
        guarded(|| {
            // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
            drop(unsafe { Box::from_raw(recorder) });
            Ok(TB_OK)
        });
    }
}

/// Verifies the framed recording at `path` into `*out`. Returns 0, or a negative code.
///
/// # Safety
/// `path` must be a NUL-terminated string and `out` point to a writable `TbVerifyReport`.
#[no_mangle]
pub unsafe extern "C" fn tb_record_verify(path: *const c_char, out: *mut TbVerifyReport) -> c_int {
    guarded(|| {
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { c_str(path, "path") }?;
        if out.is_null() {
            return Err((TB_EINVAL, "out is NULL".into()));
        }
        let v = verify(path).map_err(fail)?;
        let report = TbVerifyReport {
            frames: v.frames,
            bytes: v.bytes,
            valid_bytes: v.valid_bytes,
            payload_bytes: v.payload_bytes,
            last_sequence: v.last_sequence.map_or(-1, |s| s as i64),
            epoch: v.epoch.unwrap_or(0),
            finished: c_int::from(v.finished),
        };
        // SAFETY: `out` is non-null and the caller guarantees it is writable.
        unsafe { out.write(report) };
        Ok(TB_OK)
    })
}

/// Copies the calling thread's last error message into `buf` (NUL-terminated, truncated to
/// `len - 1` bytes) and returns the message's full length. `buf` may be NULL to ask the length.
///
/// # Safety
/// `buf` must be NULL or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tb_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|e| {
        let message = e.borrow();
        if !buf.is_null() && len > 0 {
            let n = message.len().min(len - 1);
            // SAFETY: `buf` has `len` writable bytes and `n < len`, so the copy and the NUL fit.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        message.len()
    })
}
