//! Why a build script: `dlm-data --version` and every output's `tool_build` name the git commit
//! the binary was built from (issue 59). `DLM_BUILD_COMMIT` wins when set (the wheel build and
//! builds from a tarball set it); otherwise `git rev-parse HEAD` in the source tree; otherwise
//! `unknown` (no .git, no git). Only the files that move HEAD re-run it, so an unchanged
//! checkout rebuilds nothing.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// A commit as recorded: 40 (or 64) lowercase hex digits, or `unknown`.
fn clean(c: &str) -> String {
    let c = c.trim().to_ascii_lowercase();
    if (c.len() == 40 || c.len() == 64) && c.bytes().all(|b| b.is_ascii_hexdigit()) {
        c
    } else {
        "unknown".to_string()
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=DLM_BUILD_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let commit = match std::env::var("DLM_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => clean(&c),
        // Only a checkout whose top is this crate: a source tarball unpacked inside some
        // other repository must not take that repository's commit.
        _ if git(&dir, &["rev-parse", "--show-toplevel"])
            .and_then(|t| std::fs::canonicalize(t).ok())
            != std::fs::canonicalize(&dir).ok() =>
        {
            "unknown".to_string()
        }
        _ => {
            // HEAD, the branch ref it names and packed-refs: what a commit or checkout moves.
            // Listed only where they exist (a missing file would re-run the script every build).
            for p in ["HEAD", "packed-refs"]
                .iter()
                .filter_map(|f| {
                    git(
                        &dir,
                        &["rev-parse", "--path-format=absolute", "--git-path", f],
                    )
                })
                .chain(git(&dir, &["symbolic-ref", "-q", "HEAD"]).and_then(|r| {
                    git(
                        &dir,
                        &["rev-parse", "--path-format=absolute", "--git-path", &r],
                    )
                }))
            {
                if Path::new(&p).exists() {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
            git(&dir, &["rev-parse", "HEAD"]).map_or_else(|| "unknown".to_string(), |c| clean(&c))
        }
    };
    let features = if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        "cuda"
    } else {
        ""
    };
    println!("cargo:rustc-env=DLM_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=DLM_BUILD_FEATURES={features}");
    let shown = if features.is_empty() {
        "none"
    } else {
        features
    };
    println!("cargo:rustc-env=DLM_BUILD_FEATURES_SHOWN={shown}");
}
