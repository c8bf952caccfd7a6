//! Paths as the shim compares them: absolute, normalized lexically, and the mounts of
//! `TAILBOUND_MOUNT`. A leaf of [`crate::vfs`].

use std::path::PathBuf;

/// Normalizes an absolute path lexically: no `.`, `..` or empty components, no trailing slash.
/// A path that is so already (most are) is copied as it is, without splitting it.
pub fn normalize(path: &str) -> String {
    if is_normal(path) {
        return path.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = String::with_capacity(path.len() + 1);
    for p in &parts {
        out.push('/');
        out.push_str(p);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Whether [`normalize`] would return `path` unchanged: `/`, or `/` followed by components
/// that are neither empty nor `.` or `..`, one slash apart, with no slash at the end.
fn is_normal(path: &str) -> bool {
    path == "/"
        || path.strip_prefix('/').is_some_and(|rest| {
            rest.split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..")
        })
}

/// Parses `TAILBOUND_MOUNT`: `DIR=POOL` entries separated by `:`.
pub fn parse_mounts(spec: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let mut out = Vec::new();
    for entry in spec.split(':').filter(|e| !e.is_empty()) {
        let Some((dir, pool)) = entry.split_once('=') else {
            return Err(format!("TAILBOUND_MOUNT entry `{entry}` is not DIR=POOL"));
        };
        if !dir.starts_with('/') || pool.is_empty() {
            return Err(format!(
                "TAILBOUND_MOUNT entry `{entry}`: DIR must be absolute and POOL not empty"
            ));
        }
        let dir = normalize(dir);
        if dir == "/" {
            return Err("TAILBOUND_MOUNT: `/` cannot be a mount".into());
        }
        out.push((dir, PathBuf::from(pool)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_lexically() {
        assert_eq!(normalize("/a/./b//c/"), "/a/b/c");
        assert_eq!(normalize("/a/b/../../.."), "/");
        assert_eq!(normalize("/mnt/fast/x/../y"), "/mnt/fast/y");
        assert_eq!(normalize("/mnt/fast/x/y"), "/mnt/fast/x/y");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("/.."), "/");
        assert_eq!(normalize("/a/"), "/a");
        assert_eq!(normalize("/a/.b/..c/..."), "/a/.b/..c/...");
    }

    #[test]
    fn a_normal_path_is_one_normalize_leaves_unchanged_and_only_such() {
        // Every path over `/`, `.` and `a` up to six characters: the shortcut must agree with
        // normalizing the long way.
        let mut paths = std::collections::BTreeSet::from([String::new()]);
        for _ in 0..6 {
            let longer: Vec<String> = paths
                .iter()
                .flat_map(|p| ["/", ".", "a"].map(|c| format!("{p}{c}")))
                .collect();
            paths.extend(longer);
        }
        let mut normal = 0;
        for p in paths.iter().filter(|p| p.starts_with('/')) {
            let long_way = {
                let parts: Vec<&str> = p.split('/').fold(Vec::new(), |mut v, c| {
                    match c {
                        "" | "." => {}
                        ".." => {
                            v.pop();
                        }
                        c => v.push(c),
                    }
                    v
                });
                if parts.is_empty() {
                    "/".to_string()
                } else {
                    parts.iter().map(|c| format!("/{c}")).collect()
                }
            };
            assert_eq!(normalize(p), long_way, "{p}");
            assert_eq!(is_normal(p), *p == long_way, "{p}");
            normal += usize::from(is_normal(p));
        }
        assert!(normal > 10, "{normal} normal paths among those tried");
    }

    #[test]
    fn mount_specs_parse_and_bad_ones_are_refused() {
        let m = parse_mounts("/mnt/fast/=/dev/shm/a.pool:/data=/tmp/b").unwrap();
        assert_eq!(m[0].0, "/mnt/fast");
        assert_eq!(m[1], ("/data".to_string(), PathBuf::from("/tmp/b")));
        assert!(parse_mounts("relative=/x").is_err());
        assert!(parse_mounts("/x").is_err());
        assert!(parse_mounts("/=/x").is_err());
    }
}
