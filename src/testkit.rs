//! Why unit tests share this: most of them need a path, or a file, in a fresh temporary
//! directory that is removed when the test ends, and set it up the same way.

use std::path::PathBuf;

/// A fresh temporary directory (removed when the returned guard drops) and `name` in it.
pub fn temp_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    (d, p)
}

/// [`temp_path`] holding `bytes`: a file in a fresh temporary directory.
pub fn temp_file(name: &str, bytes: impl AsRef<[u8]>) -> (tempfile::TempDir, PathBuf) {
    let (d, p) = temp_path(name);
    std::fs::write(&p, bytes).unwrap();
    (d, p)
}
