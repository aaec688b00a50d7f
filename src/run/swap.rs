//! Rebuilding a step's output beside the old one: the step runs with its `--out` moved into
//! `.NAME.run-next/NAME` (same directory, same file system), and only once it succeeded is the
//! new output exchanged with the old in one `renameat2(RENAME_EXCHANGE)` per path, so a reader
//! sees the old output or the new one, never a mixture and never nothing. The old one then
//! sits in the staging directory and is removed with it.
//!
//! Each pair is recorded in the journal with a marker of the staged bytes before it is
//! exchanged: a night killed half-way tells an exchanged pair (the live path carries the
//! marker) from one still to do, and [`finish`] completes it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::STAGING;

/// `.NAME.run-next` beside `out`.
pub fn staging_dir(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!(".{name}{STAGING}"))
}

/// Where the staged output of `out` is built: `.NAME.run-next/NAME`.
pub fn staged(out: &Path) -> PathBuf {
    staging_dir(out).join(out.file_name().unwrap_or_default())
}

/// The bytes that tell two versions of an output apart, cheaply: for a directory its listing
/// (relative paths and sizes) and the content of its small files (index.json, reports, parts'
/// headers are all small); for a file its content.
pub fn marker(p: &Path) -> Result<String> {
    const SMALL: u64 = 4 << 20;
    let md = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok("missing".into()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    if !md.is_dir() {
        return crate::util::sha256_file(p);
    }
    let sigs = super::state::sigs_shallow(p, SMALL)?;
    Ok(crate::util::sha256_hex(sigs.as_bytes()))
}

/// Exchange `a` and `b` atomically (both must exist).
fn exchange(a: &Path, b: &Path) -> Result<()> {
    let ca = CString::new(a.as_os_str().as_bytes())?;
    let cb = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: two NUL-terminated paths relative to the current directory; no memory shared.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("exchanging {} with {}", a.display(), b.display()));
    }
    Ok(())
}

/// Put each staged path in place of its live one (exchanging, or renaming where there is no
/// live one), skipping pairs already done, then remove the staging directory with the old
/// output in it. Safe to call again after a kill at any point.
pub fn finish(staging: &Path, pairs: &[(PathBuf, PathBuf, String)]) -> Result<()> {
    for (new, live, mark) in pairs {
        if !new.exists() {
            continue; // moved in by rename before the kill
        }
        if !live.exists() {
            std::fs::rename(new, live)
                .with_context(|| format!("moving {} to {}", new.display(), live.display()))?;
        } else if marker(live)? != *mark {
            exchange(new, live)?;
        }
        // else: exchanged before the kill; the old output now sits at `new`.
    }
    remove_staging(staging)
}

/// Remove a staging directory (ours entirely: only `run` writes there).
pub fn remove_staging(staging: &Path) -> Result<()> {
    match std::fs::remove_dir_all(staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", staging.display())),
    }
    // Its lock, left beside it by the command that wrote there.
    let _ = std::fs::remove_file(crate::lock::beside_path(staging));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_killed_after_its_exchange_finishes_without_redoing_it() {
        let (_d, live) = crate::testkit::temp_path("out");
        std::fs::create_dir_all(&live).unwrap();
        std::fs::write(live.join("index.json"), "old").unwrap();
        let new = staged(&live);
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("index.json"), "new").unwrap();
        let pairs = vec![(new.clone(), live.clone(), marker(&new).unwrap())];
        // Killed right after the exchange: the old output sits in staging.
        exchange(&new, &live).unwrap();
        finish(&staging_dir(&live), &pairs).unwrap();
        assert_eq!(
            std::fs::read_to_string(live.join("index.json")).unwrap(),
            "new"
        );
        assert!(!staging_dir(&live).exists());
        // Killed before it: the same call exchanges.
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("index.json"), "newer").unwrap();
        let pairs = vec![(new.clone(), live.clone(), marker(&new).unwrap())];
        finish(&staging_dir(&live), &pairs).unwrap();
        assert_eq!(
            std::fs::read_to_string(live.join("index.json")).unwrap(),
            "newer"
        );
        assert!(!staging_dir(&live).exists());
    }
}
