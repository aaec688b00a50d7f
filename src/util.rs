//! Small file helpers every stage shares: atomic writes, fsync, hashing, and the check that a
//! path built from outside data stays inside its root.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// A temp path beside `path` (same directory, so rename is atomic).
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Write `bytes` to `path` atomically: temp file, fsync, rename, fsync of the directory.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    let tmp = temp_path(path);
    let written = (|| -> Result<()> {
        let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("fsync {}", tmp.display()))?;
        commit_rename(&tmp, path)
    })();
    if written.is_err() {
        // Every failure path (a full disk included) leaves no temp file behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Rename `tmp` onto `path` and fsync the parent directory so the rename is durable.
pub fn commit_rename(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    fsync_dir(path);
    Ok(())
}

/// Best-effort fsync of the directory holding `path`.
pub fn fsync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// `Ok(())` when `path` lies strictly inside `root`: `path` starts with `root` (component-wise)
/// and every component after it is a plain name (no `..`, no `.`, no root or drive prefix).
/// A lexical check, made before a path built from outside data (a Hub listing, a lock, a
/// manifest) is written, linked or removed; it does not follow symlinks. `root` itself is not
/// inside `root`.
pub fn path_within(root: &Path, path: &Path) -> Result<()> {
    let Ok(rest) = path.strip_prefix(root) else {
        bail!(
            "refusing the path {}: it is not inside {}",
            path.display(),
            root.display()
        );
    };
    let mut n = 0;
    for c in rest.components() {
        match c {
            Component::Normal(_) => n += 1,
            _ => bail!(
                "refusing the path {}: component {:?} could leave {}",
                path.display(),
                c.as_os_str(),
                root.display()
            ),
        }
    }
    if n == 0 {
        bail!(
            "refusing the path {}: it is {} itself, not a file inside it",
            path.display(),
            root.display()
        );
    }
    // `Path::components` drops interior `.`; a raw `..` inside a name component cannot occur.
    if rest.as_os_str().as_encoded_bytes().contains(&0) {
        bail!(
            "refusing the path {}: it contains a NUL byte",
            path.display()
        );
    }
    Ok(())
}

/// Hex sha256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Git blob sha1 (`sha1("blob {len}\0" + bytes)`), the Hub's `oid` for non-LFS files.
pub fn git_blob_sha1(bytes: &[u8]) -> String {
    use sha1::Sha1;
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())
}

/// A tiny deterministic PRNG (splitmix64): fixtures are identical on every machine, and
/// `pack --shuffle-seed` permutes rows with it, so it lives here rather than in a stage.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_sha1_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            git_blob_sha1(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn path_within_refuses_escapes() {
        let root = Path::new("/c/hub");
        assert!(path_within(root, Path::new("/c/hub/datasets--a--b/blobs/ab12")).is_ok());
        assert!(path_within(Path::new("rel/c"), Path::new("rel/c/x/y")).is_ok());
        assert!(path_within(Path::new("../c"), Path::new("../c/x")).is_ok());
        for bad in [
            "/c/hub",
            "/c/hub/",
            "/c/hubx/y",
            "/c/other/x",
            "/etc/passwd",
            "/c/hub/a/../../x",
            "/c/hub/../hub2/x",
            "/c/hub/blobs/..",
            "relative/x",
        ] {
            let e = path_within(root, Path::new(bad));
            assert!(e.is_err(), "{bad} accepted");
            assert!(format!("{:#}", e.unwrap_err()).contains("refusing the path"));
        }
        // What `join` does with an absolute or `..` name from outside data.
        assert!(path_within(root, &root.join("blobs").join("/etc/passwd")).is_err());
        assert!(path_within(root, &root.join("blobs").join("../../../victim")).is_err());
    }

    #[test]
    fn atomic_write_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.json");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}

/// Run a third-party decoder over outside bytes, turning a panic inside it (parquet-rs 60
/// still divides by zero on some corrupt pages) into an error naming `what`. The panic hook
/// ([`crate::secret::install`]) stays quiet inside: the message and its location travel in the
/// error instead of a "thread panicked" line on stderr.
pub fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    GUARDED.with(|g| g.set(g.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    r.unwrap_or_else(|p| {
        let msg = (p.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = LAST_PANIC_AT.with(|l| l.take()).unwrap_or_default();
        Err(anyhow::anyhow!(
            "{what}: corrupt file (the decoder failed: {msg}{at})"
        ))
    })
}

thread_local! {
    static GUARDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static LAST_PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Called by the panic hook: true (and the location kept for the error) when the panic is
/// inside [`no_panic`] on this thread.
pub fn panic_is_guarded(location: Option<&std::panic::Location<'_>>) -> bool {
    let guarded = GUARDED.with(|g| g.get() > 0);
    if guarded {
        let at = location.map(|l| format!(" at {}:{}", l.file(), l.line()));
        LAST_PANIC_AT.with(|l| *l.borrow_mut() = at);
    }
    guarded
}
