//! Shared set-up for the teacher/distill integration tests: one tiny teacher per test binary.
#![allow(dead_code)]

pub mod llada_ref;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dlm_data::fixtures::teacher::{write_teacher, TinyTeacher};

/// The default tiny teacher (bf16, single file), generated once per test binary.
pub fn teacher_dir() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, p) = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("teacher");
        write_teacher(&p, &TinyTeacher::default()).unwrap();
        (d, p)
    });
    p
}

/// A copy of the default teacher in `dst` (to mutate for bad-input tests).
pub fn copy_teacher(dst: &Path) -> PathBuf {
    let src = teacher_dir();
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst.to_path_buf()
}

/// Patch top-level fields of a JSON file.
pub fn patch_json(path: &Path, patch: serde_json::Value) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (k, x) in patch.as_object().unwrap() {
        v[k] = x.clone();
    }
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dlm-data"))
}

/// `extra` plus small sampler settings for the flags it does not set (`--batch-size batch`).
pub fn small_sampler_args(extra: &[&str], batch: &str) -> Vec<String> {
    let mut v: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    for (k, d) in [
        ("--gen-length", "8"),
        ("--block-length", "4"),
        ("--steps", "4"),
        ("--batch-size", batch),
    ] {
        if !extra.contains(&k) {
            v.extend([k.to_string(), d.to_string()]);
        }
    }
    v
}
