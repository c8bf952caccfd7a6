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
    match boundary(name, Ok(TB_EINTERNAL), f) {
        Ok(code) => code,
        Err((code, message)) => {
            set_error(message);
            code
        }
    }
}

/// The panic boundary every exported function runs its body in: `f`, or `on_panic` when it
/// panicked, with the panic (naming its site and the function) as the thread's last error.
fn boundary<T>(name: &'static str, on_panic: T, f: impl FnOnce() -> T) -> T {
    let run = tailbound::panics::catch(|| {
        tailbound::failpoint::hit(name);
        f()
    });
    match run {
        Ok(v) => v,
        Err(p) => {
            let function = name.trim_start_matches("capi.");
            set_error(format!(
                "tailbound {p} (inside {function}; a bug: please report it)"
            ));
            on_panic
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
    // SAFETY: `recorder` is NULL or a live recorder from `tb_recorder_create` (this
    // function's contract), and no other reference to it is alive during the call.
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
        // SAFETY: the C caller passes `path` NUL-terminated (or NULL, which `c_str` refuses).
        let path = PathBuf::from(unsafe { c_str(path, "path") }?);
        let options: RecorderOptions = if options.is_null() {
            RecorderOptions::default()
        } else {
            // SAFETY: `options` is non-null here and NUL-terminated, as the caller promises.
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
    // SAFETY: `recorder` is the C caller's, NULL or live, as `tb_recorder_write` requires.
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
    guarded("capi.tb_recorder_free", || {
        if !recorder.is_null() {
            // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
            drop(unsafe { Box::from_raw(recorder) });
        }
        Ok(TB_OK)
    });
}

/// Verifies the framed recording at `path` into `*out`. Returns 0, or a negative code.
///
/// # Safety
/// `path` must be a NUL-terminated string and `out` point to a writable `TbVerifyReport`.
#[no_mangle]
pub unsafe extern "C" fn tb_record_verify(path: *const c_char, out: *mut TbVerifyReport) -> c_int {
    guarded("capi.tb_record_verify", || {
        // SAFETY: the C caller passes `path` NUL-terminated (or NULL, which `c_str` refuses).
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
    // Reads only the thread's message, but a panic must not unwind into C from here either; the
    // message is then the panic's, for the next call.
    // SAFETY: the C caller passes `buf` NULL or with `len` writable bytes, as documented.
    boundary("capi.tb_last_error", 0, || unsafe {
        last_error_into(buf, len)
    })
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

    /// The failpoints are the process's: a test that arms one must not meet another test's call.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every exported function of this file, by the source: `pub unsafe extern "C" fn NAME`.
    fn exported_in_source() -> Vec<(String, String)> {
        let src = include_str!("lib.rs");
        let marker = concat!("#[no_mangle]\npub unsafe ", "extern \"C\" fn ");
        src.split(marker)
            .skip(1)
            .map(|f| {
                let name = f[..f.find('(').unwrap()].to_string();
                let body = &f[f.find(" {\n").unwrap()..];
                let body = body[..body.find("\n}\n").unwrap()].to_string();
                (name, body)
            })
            .collect()
    }

    #[test]
    fn every_exported_function_runs_in_the_panic_boundary() {
        let all = exported_in_source();
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        // Every exported item is one of these (not, say, a safe `extern "C" fn`).
        let no_mangle = include_str!("lib.rs")
            .lines()
            .filter(|l| l.trim_start().starts_with("#[no_mangle]"))
            .count();
        assert_eq!(no_mangle, names.len(), "{names:?}");
        assert_eq!(
            names,
            [
                "tb_recorder_create",
                "tb_recorder_write",
                "tb_recorder_finish",
                "tb_recorder_free",
                "tb_record_verify",
                "tb_last_error",
            ],
            "each exported function needs its case in the panic test below"
        );
        for (name, body) in &all {
            // The statements of the body, without comments.
            let code: Vec<&str> = body
                .lines()
                .skip(1)
                .map(str::trim)
                .filter(|l| !l.starts_with("//") && !l.is_empty())
                .collect();
            let enters = |line: &str| {
                ["guarded", "let code = guarded", "boundary"]
                    .iter()
                    .any(|call| line.starts_with(&format!("{call}(\"capi.{name}\"")))
            };
            // The body is the boundary's call, or (`tb_recorder_create`) a declaration, then it.
            let through =
                enters(code[0]) || (code[0].starts_with("let mut out") && enters(code[1]));
            assert!(
                through,
                "{name} does not run its body in the boundary: {code:?}"
            );
        }
    }

    #[test]
    fn a_panic_in_any_exported_function_is_caught_and_named() {
        let _s = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = CString::new(dir.path().join("each.tbr").to_str().unwrap()).unwrap();
        let record = b"a record";
        let caught = |name: &str| {
            let message = last_error();
            assert!(
                message.contains(&format!("failpoint capi.{name}")),
                "{name}: {message}"
            );
            assert!(
                message.contains(&format!("inside {name}")),
                "{name}: {message}"
            );
        };

        tailbound::failpoint::arm("capi.tb_recorder_create");
        // SAFETY: a valid path and NULL options.
        let r = unsafe { tb_recorder_create(path.as_ptr(), std::ptr::null()) };
        assert!(r.is_null());
        caught("tb_recorder_create");

        // SAFETY (each call below): a valid path, live recorders and a readable record.
        let r = unsafe { tb_recorder_create(path.as_ptr(), std::ptr::null()) };
        assert!(!r.is_null(), "{}", last_error());
        tailbound::failpoint::arm("capi.tb_recorder_write");
        let code = unsafe { tb_recorder_write(r, record.as_ptr(), record.len()) };
        assert_eq!(code, TB_EINTERNAL);
        caught("tb_recorder_write");

        // The panic comes before the recorder is taken back: it is left to `tb_recorder_free`.
        tailbound::failpoint::arm("capi.tb_recorder_finish");
        assert_eq!(unsafe { tb_recorder_finish(r) }, TB_EINTERNAL);
        caught("tb_recorder_finish");

        tailbound::failpoint::arm("capi.tb_recorder_free");
        unsafe { tb_recorder_free(r) };
        caught("tb_recorder_free");
        unsafe { tb_recorder_free(r) };

        let mut report = TbVerifyReport::default();
        tailbound::failpoint::arm("capi.tb_record_verify");
        assert_eq!(
            unsafe { tb_record_verify(path.as_ptr(), &mut report) },
            TB_EINTERNAL
        );
        caught("tb_record_verify");

        tailbound::failpoint::arm("capi.tb_last_error");
        let mut buf = [0u8; 8];
        let n = unsafe { tb_last_error(buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, 0, "a panicking tb_last_error reports nothing");
        caught("tb_last_error");
    }

    fn last_error() -> String {
        let mut buf = vec![0u8; 1024];
        // SAFETY: `buf` has `buf.len()` writable bytes.
        let n = unsafe { tb_last_error(buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned()
    }

    #[test]
    fn a_panic_inside_a_call_is_tb_einternal_naming_its_site() {
        let _s = serial();
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
        let _s = serial();
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
