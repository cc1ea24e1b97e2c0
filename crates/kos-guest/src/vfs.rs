//! A node's filesystem, as far as its bootstrap reads and writes it: absolute paths to bytes, mode and
//! owner. No directories of their own (a path's parents exist when it does), no symlinks.

use std::collections::BTreeMap;
use std::fmt;

/// One file.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct File {
    #[serde(with = "crate::persist::base64_bytes")]
    pub content: Vec<u8>,
    /// Permission bits, e.g. `0o600`.
    pub mode: u32,
    /// `user:group`, as cloud-init's `owner`.
    pub owner: String,
}

impl fmt::Debug for File {
    // Files hold keys and tokens: never their content in a Debug print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "File({:o} {}, {} bytes)",
            self.mode,
            self.owner,
            self.content.len()
        )
    }
}

/// The files of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Vfs {
    files: BTreeMap<String, File>,
}

impl Vfs {
    pub fn new() -> Vfs {
        Vfs::default()
    }

    /// Writes (or, with `append`, appends to) a file; the mode and owner are set either way, as
    /// cloud-init's `util.write_file` does.
    pub fn write(&mut self, path: &str, content: &[u8], mode: u32, owner: &str, append: bool) {
        let f = self.files.entry(path.to_owned()).or_insert_with(|| File {
            content: Vec::new(),
            mode,
            owner: owner.to_owned(),
        });
        if !append {
            f.content.clear();
        }
        f.content.extend_from_slice(content);
        f.mode = mode;
        owner.clone_into(&mut f.owner);
    }

    pub fn get(&self, path: &str) -> Option<&File> {
        self.files.get(path)
    }

    /// The file as UTF-8 text, `None` when absent or not text.
    pub fn text(&self, path: &str) -> Option<&str> {
        self.get(path)
            .and_then(|f| std::str::from_utf8(&f.content).ok())
    }

    pub fn exists(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    pub fn remove(&mut self, path: &str) -> Option<File> {
        self.files.remove(path)
    }

    /// Paths under a directory (`dir` without a trailing slash), in name order.
    pub fn list(&self, dir: &str) -> Vec<&str> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        self.files
            .keys()
            .filter(|p| p.starts_with(&prefix))
            .map(String::as_str)
            .collect()
    }

    /// Every path, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

/// `os.path.abspath` for the paths cloud-init is given: resolves `.` and `..`, collapses slashes,
/// and makes a relative path absolute from `/` (cloud-init runs in `/`).
pub fn abspath(path: &str) -> String {
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
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_keeps_content_and_paths_are_normalised() {
        let mut v = Vfs::new();
        v.write("/a/b", b"1", 0o644, "root:root", false);
        v.write("/a/b", b"2", 0o600, "root:root", true);
        assert_eq!(v.text("/a/b"), Some("12"));
        assert_eq!(v.get("/a/b").map(|f| f.mode), Some(0o600));
        assert_eq!(abspath("etc//x/../y/./z"), "/etc/y/z");
        assert_eq!(v.list("/a"), vec!["/a/b"]);
    }
}
