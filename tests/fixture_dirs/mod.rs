//! The fixture tree (`dlm-data fixtures`) made once per test binary, and a recursive copy —
//! the setup the pipeline, nightly-run and cron-contract tests share.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `dlm-data fixtures` once per test binary.
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap().keep();
        let o = Command::new(env!("CARGO_BIN_EXE_dlm-data"))
            .args(["fixtures", "--out"])
            .arg(d.join("fx"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        d.join("fx")
    })
}

/// Copy the tree at `from` to `to` (directories and regular files).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}
