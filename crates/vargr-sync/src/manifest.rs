//! What a sync moves: the entries of a tree with their metadata.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::SyncError;

/// One file, directory or symbolic link, relative to the root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative path with `/` separators; empty for a root that is a single file.
    pub path: String,
    pub kind: Kind,
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink { target: String },
}

/// A tree: a single file (one entry with an empty path) or a directory's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The source's name, for a single file sent into a directory.
    pub name: String,
    pub single_file: bool,
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// Scans `root` (a file or a directory), directories before their contents, names
    /// in byte order so both sides agree on the order.
    pub fn scan(root: &Path) -> Result<Manifest, SyncError> {
        let meta =
            std::fs::symlink_metadata(root).map_err(|e| SyncError::io("reading", root, e))?;
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !meta.is_dir() {
            return Ok(Manifest {
                name,
                single_file: true,
                entries: vec![entry(root, String::new(), &meta)?],
            });
        }
        let mut entries = Vec::new();
        walk(root, "", &mut entries)?;
        Ok(Manifest {
            name,
            single_file: false,
            entries,
        })
    }

    pub fn file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == Kind::File)
            .map(|e| e.size)
            .sum()
    }
}

fn walk(dir: &Path, rel: &str, out: &mut Vec<Entry>) -> Result<(), SyncError> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| SyncError::io("listing", dir, e))?
        .map(|d| d.map(|d| d.file_name()))
        .collect::<Result<_, _>>()
        .map_err(|e| SyncError::io("listing", dir, e))?;
    names.sort();
    for n in names {
        let Some(name) = n.to_str() else {
            return Err(SyncError::Path {
                path: dir.join(&n).display().to_string(),
                reason: "the name is not UTF-8".into(),
            });
        };
        let path = dir.join(name);
        let rel = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let meta =
            std::fs::symlink_metadata(&path).map_err(|e| SyncError::io("reading", &path, e))?;
        out.push(entry(&path, rel.clone(), &meta)?);
        if meta.is_dir() {
            walk(&path, &rel, out)?;
        }
    }
    Ok(())
}

fn entry(path: &Path, rel: String, meta: &std::fs::Metadata) -> Result<Entry, SyncError> {
    let kind = if meta.file_type().is_symlink() {
        let t = std::fs::read_link(path).map_err(|e| SyncError::io("reading link", path, e))?;
        Kind::Symlink {
            target: t.to_string_lossy().into_owned(),
        }
    } else if meta.is_dir() {
        Kind::Dir
    } else if meta.is_file() {
        Kind::File
    } else {
        return Err(SyncError::Path {
            path: path.display().to_string(),
            reason: "neither a file, a directory nor a symbolic link".into(),
        });
    };
    Ok(Entry {
        path: rel,
        size: if kind == Kind::File { meta.len() } else { 0 },
        kind,
        mode: meta.permissions().mode() & 0o7777,
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
    })
}

/// `root` joined with an entry path from the peer, refusing anything that could leave
/// `root` (absolute paths, `..`, empty components). Only names the path: the receiver
/// opens it with [`components`] beneath an open directory, never through links.
pub fn safe_join(root: &Path, rel: &str) -> Result<PathBuf, SyncError> {
    let mut out = root.to_path_buf();
    out.extend(components(rel)?);
    Ok(out)
}

/// The components of an entry path from the peer: plain names only (no `..`, `.`, root,
/// empty component or NUL); none for the empty path.
pub fn components(rel: &str) -> Result<Vec<&str>, SyncError> {
    let bad = |reason: &str| SyncError::Path {
        path: rel.to_string(),
        reason: reason.to_string(),
    };
    if rel.is_empty() {
        return Ok(Vec::new());
    }
    if rel.contains('\0') || rel.ends_with('/') || rel.contains("//") {
        return Err(bad("malformed path"));
    }
    let mut out = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(n) => out.push(n.to_str().expect("a piece of a str")),
            _ => return Err(bad("not a plain relative path (absolute, `..` or `.`)")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_from_the_peer_stay_inside_the_root() {
        let root = Path::new("/dest");
        assert_eq!(safe_join(root, "a/b").unwrap(), Path::new("/dest/a/b"));
        for bad in [
            "../x",
            "/etc/passwd",
            "a/../../x",
            "./a",
            "a//b",
            "a/",
            "a\0b",
        ] {
            assert!(safe_join(root, bad).is_err(), "{bad}");
            assert!(components(bad).is_err(), "{bad}");
        }
        assert_eq!(components("a/b").unwrap(), ["a", "b"]);
        assert!(components("").unwrap().is_empty());
    }

    #[test]
    fn scan_lists_a_tree_in_order() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("b")).unwrap();
        std::fs::write(d.path().join("b/f"), b"xyz").unwrap();
        std::fs::write(d.path().join("a"), b"1").unwrap();
        std::os::unix::fs::symlink("a", d.path().join("c")).unwrap();
        let m = Manifest::scan(d.path()).unwrap();
        let names: Vec<_> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["a", "b", "b/f", "c"]);
        assert_eq!(m.entries[2].size, 3);
        assert_eq!(m.file_bytes(), 4);
        let f = Manifest::scan(&d.path().join("a")).unwrap();
        assert!(f.single_file);
        assert_eq!(f.name, "a");
    }
}
