//! The C ABI of tailbound: `libtailbound.so` / `libtailbound.a` and the header `tailbound.h`.
//!
//! The header is generated at build time by cbindgen into `$OUT_DIR/tailbound.h` and copied to
//! `target/include/tailbound.h`. Every function catches panics and null pointers; a failing call
//! returns NULL or a negative number, and `tb_last_error` gives the message. A panic (a bug in
//! tailbound) is `TB_EINTERNAL`, with a message naming its site; a recorder a panic interrupted
//! fails every later call the same way, since its state cannot be trusted.
//!
//! This crate is one of the two places `unsafe` lives in tailbound (raw pointers from C); each block
//! says why it holds.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;

use tailbound::record::{verify, RecordError, Recorder, RecorderOptions};

/// A recording in progress; create with `tb_recorder_create`, end with `tb_recorder_finish`.
pub struct TbRecorder {
    inner: Recorder,
    /// The message of a panic inside a call on it: every later call fails with it.
    broken: Option<String>,
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

/// Runs `f` for C function `name` (`capi.` and its name: also its failpoint, see
/// `tailbound::failpoint`), turning an error or a panic into a code and the thread's last
/// error. A panic must not unwind into the caller's C frames, which cannot take it.
fn guarded(name: &'static str, f: impl FnOnce() -> Result<c_int, (c_int, String)>) -> c_int {
    let run = tailbound::panics::catch(|| {
        tailbound::failpoint::hit(name);
        f()
    });
    match run {
        Ok(Ok(code)) => code,
        Ok(Err((code, message))) => {
            set_error(message);
            code
        }
        Err(p) => {
            let function = name.trim_start_matches("capi.");
            set_error(format!(
                "tailbound {p} (inside {function}; a bug: please report it)"
            ));
            TB_EINTERNAL
        }
    }
}

/// After a call on `recorder` failed with `TB_EINTERNAL`: the recorder keeps the message and
/// fails every later call with it.
///
/// # Safety
/// `recorder` must be NULL or a live recorder from `tb_recorder_create`.
unsafe fn mark_broken(recorder: *mut TbRecorder, code: c_int) {
    if code != TB_EINTERNAL {
        return;
    }
    // SAFETY: forwarded from this function's contract.
    if let Some(r) = unsafe { recorder.as_mut() } {
        if r.broken.is_none() {
            r.broken = Some(LAST_ERROR.with(|e| e.borrow().clone()));
        }
    }
}

/// `Err` with the message of the panic that broke `r`, if one did.
fn check_not_broken(r: &TbRecorder) -> Result<(), (c_int, String)> {
    match &r.broken {
        Some(why) => Err((TB_EINTERNAL, format!("the recorder is unusable: {why}"))),
        None => Ok(()),
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
    guarded("capi.tb_recorder_create", || {
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
        out = Box::into_raw(Box::new(TbRecorder {
            inner,
            broken: None,
        }));
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
    let code = guarded("capi.tb_recorder_write", || {
        // SAFETY: the caller passes a live recorder from tb_recorder_create, used by one thread.
        let r = unsafe { recorder.as_mut() }.ok_or((TB_EINVAL, "recorder is NULL".into()))?;
        check_not_broken(r)?;
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
    });
    // SAFETY: forwarded from this function's contract.
    unsafe { mark_broken(recorder, code) };
    code
}

/// Finishes the recording (cuts the unused tail or writes the trailer, `fsync`s) and frees it.
/// Returns 0, or a negative code; the recorder is freed either way.
///
/// # Safety
/// `recorder` must come from `tb_recorder_create` and not be used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn tb_recorder_finish(recorder: *mut TbRecorder) -> c_int {
    guarded("capi.tb_recorder_finish", || {
        if recorder.is_null() {
            return Err((TB_EINVAL, "recorder is NULL".into()));
        }
        // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
        let r = unsafe { Box::from_raw(recorder) };
        // Freed without finishing: a panic may have left its writer half way through a record.
        check_not_broken(&r)?;
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
        guarded("capi.tb_recorder_free", || {
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
    guarded("capi.tb_record_verify", || {
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
    // Reads only the thread's message, but a panic must not unwind into C from here either.
    tailbound::panics::catch(|| last_error_into(buf, len)).unwrap_or(0)
}

/// `tb_last_error`'s work.
///
/// # Safety
/// As `tb_last_error`.
unsafe fn last_error_into(buf: *mut c_char, len: usize) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn last_error() -> String {
        let mut buf = vec![0u8; 1024];
        // SAFETY: `buf` has `buf.len()` writable bytes.
        let n = unsafe { tb_last_error(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned()
    }

    #[test]
    fn a_panic_inside_a_call_is_tb_einternal_naming_its_site() {
        let dir = tempfile::tempdir().unwrap();
        let path = CString::new(dir.path().join("panic.tbr").to_str().unwrap()).unwrap();
        // SAFETY: a valid path and NULL options.
        let r = unsafe { tb_recorder_create(path.as_ptr(), std::ptr::null()) };
        assert!(!r.is_null(), "{}", last_error());
        let record = b"a record";
        // SAFETY (each call below): a live recorder and a readable record.
        assert_eq!(
            unsafe { tb_recorder_write(r, record.as_ptr(), record.len()) },
            TB_OK
        );

        tailbound::failpoint::arm("capi.tb_recorder_write");
        let code = unsafe { tb_recorder_write(r, record.as_ptr(), record.len()) };
        assert_eq!(code, TB_EINTERNAL);
        let message = last_error();
        assert!(
            message.contains("failpoint capi.tb_recorder_write"),
            "{message}"
        );
        assert!(
            message.contains("panicked at crates/tailbound-capi/src/lib.rs:"),
            "the message names the site: {message}"
        );
        assert!(message.contains("inside tb_recorder_write"), "{message}");

        // The recorder a panic interrupted fails from then on, finish included (which frees it).
        let again = unsafe { tb_recorder_write(r, record.as_ptr(), record.len()) };
        assert_eq!(again, TB_EINTERNAL);
        assert!(last_error().contains("unusable"), "{}", last_error());
        assert_eq!(unsafe { tb_recorder_finish(r) }, TB_EINTERNAL);
        assert!(last_error().contains("failpoint capi.tb_recorder_write"));
    }

    #[test]
    fn a_panic_in_verify_is_tb_einternal_too() {
        let path = CString::new("/nonexistent/never-read.tbr").unwrap();
        let mut report = TbVerifyReport::default();
        tailbound::failpoint::arm("capi.tb_record_verify");
        // SAFETY: a valid path and a writable report.
        let code = unsafe { tb_record_verify(path.as_ptr(), &mut report) };
        assert_eq!(code, TB_EINTERNAL);
        assert!(
            last_error().contains("inside tb_record_verify"),
            "{}",
            last_error()
        );
    }
}
