//! `tailbound fs put`, `get`, `cat`, `mkdir` and `rm`: files in and out of a pool.

use std::fs::File as HostFile;
use std::io::{Read, Write};
use std::path::Path;

use tailbound::tbfs::{self, FileKind, OpenFlags};
use tailbound_bench::progress::Progress;

use crate::cmd_fs_common::{close, in_pool, open_fs, PoolArg, View, COPY_CHUNK};
use crate::cmd_fs_pool::Pool;
use crate::CliResult;

pub(crate) fn put(pool: &PoolArg, host: &Path, path: &str) -> CliResult {
    let fs = open_fs(pool, false)?;
    let mut input: Box<dyn Read> = if host.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(HostFile::open(host).map_err(|e| format!("{}: open: {e}", host.display()))?)
    };
    let len = if host.as_os_str() == "-" {
        0
    } else {
        std::fs::metadata(host).map(|m| m.len()).unwrap_or(0)
    };
    // Into a directory: under the host file's name.
    let target = match fs.stat(path) {
        Ok(s) if s.kind == FileKind::Dir => {
            let name = host
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|_| host.as_os_str() != "-")
                .ok_or_else(|| format!("{path} is a directory; name the file to create in it"))?;
            format!("{}/{name}", path.trim_end_matches('/'))
        }
        _ => path.to_string(),
    };
    let file = fs
        .open_file(
            &target,
            OpenFlags {
                truncate: true,
                ..OpenFlags::create()
            },
        )
        .map_err(|e| in_pool(pool, e))?;
    let progress = Progress::new(len, "put");
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut at = 0u64;
    loop {
        let n = input
            .read(&mut buf)
            .map_err(|e| format!("{}: read: {e}", host.display()))?;
        if n == 0 {
            break;
        }
        file.pwrite(&buf[..n], at).map_err(|e| in_pool(pool, e))?;
        at += n as u64;
        progress.inc(n as u64);
    }
    drop(file);
    progress.set_message("syncing");
    close(fs, pool)?;
    progress.finish();
    eprintln!("put {} bytes into {target}", at);
    Ok(())
}

pub(crate) fn copy_out(view: &View, pool: &PoolArg, path: &str, host: Option<&Path>) -> CliResult {
    let st = view.stat(path).map_err(|e| in_pool(pool, e))?;
    if st.kind == FileKind::Dir {
        return Err(in_pool(pool, tbfs::Error::IsDir(path.to_string())).into());
    }
    let to_stdout = host.is_none_or(|h| h.as_os_str() == "-");
    let mut out: Box<dyn Write> = match host {
        Some(h) if !to_stdout => Box::new(std::io::BufWriter::new(
            HostFile::create(h).map_err(|e| format!("{}: create: {e}", h.display()))?,
        )),
        _ => Box::new(std::io::stdout().lock()),
    };
    let progress = if to_stdout {
        Progress::hidden(st.size)
    } else {
        Progress::new(st.size, "get")
    };
    view.read_each(path, st.size, |piece| {
        out.write_all(piece).map_err(|e| match host {
            Some(h) if !to_stdout => format!("{}: write: {e}", h.display()),
            _ => format!("stdout: {e}"),
        })?;
        progress.inc(piece.len() as u64);
        Ok(())
    })
    .map_err(|e| in_pool(pool, e))?;
    out.flush()?;
    progress.finish();
    Ok(())
}

pub(crate) fn mkdir(fs: &Pool, path: &str, parents: bool) -> tbfs::Result<()> {
    if !parents {
        return fs.mkdir(path, 0o755);
    }
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        match fs.mkdir(&at, 0o755) {
            Ok(()) => {}
            Err(tbfs::Error::Exists(_)) if fs.stat(&at)?.kind == FileKind::Dir => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(crate) fn rm(fs: &Pool, path: &str, recursive: bool) -> tbfs::Result<()> {
    let st = fs.stat(path)?;
    if st.kind == FileKind::File {
        return fs.unlink(path);
    }
    if path.trim_matches('/').is_empty() {
        return Err(tbfs::Error::Invalid("/: the root cannot be removed".into()));
    }
    if recursive {
        for e in fs.readdir(path)? {
            rm(
                fs,
                &format!("{}/{}", path.trim_end_matches('/'), e.name),
                true,
            )?;
        }
    } else if !fs.readdir(path)?.is_empty() {
        return Err(tbfs::Error::NotEmpty(format!("{path} (use -r)")));
    }
    fs.rmdir(path)
}
