//! Small file helpers every stage shares: atomic writes, fsync, hashing, and the check that a
//! path built from outside data stays inside its root.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// The longest file name Linux file systems accept (bytes).
pub const NAME_MAX: usize = 255;

/// A temp path beside `path` (same directory, so rename is atomic): `.NAME.tmp-PID`, the pid
/// telling a later run whether its writer is still alive ([`sweep_dead_temps`]). Within
/// [`NAME_MAX`] for any legal name (see [`temp_prefix`]).
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = temp_prefix(path);
    name.push(std::process::id().to_string());
    path.with_file_name(name)
}

/// `.NAME.tmp-` for `path`'s name; when a pid after it could pass [`NAME_MAX`], NAME is cut
/// to fit and followed by `~` and 16 hex digits of its sha256 (still unique per name).
pub fn temp_prefix(path: &Path) -> std::ffi::OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    const PID_DIGITS: usize = 10;
    let fixed = 1 + ".tmp-".len() + PID_DIGITS;
    let mut out = vec![b'.'];
    if name.len() + fixed <= NAME_MAX {
        out.extend_from_slice(name);
    } else {
        let keep = NAME_MAX - fixed - 17;
        out.extend_from_slice(&name[..keep]);
        out.push(b'~');
        out.extend_from_slice(sha256_hex(name)[..16].as_bytes());
    }
    out.extend_from_slice(b".tmp-");
    std::ffi::OsString::from_vec(out)
}

/// Whether process `pid` is alive (or exists under another user).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Remove, in `dir`, the temp files (`PREFIXpid`, see [`temp_prefix`]) that `is_ours` accepts
/// and whose writer process is gone: what a killed run left. Returns the names removed.
pub fn sweep_dead_temps(dir: &Path, is_ours: impl Fn(&std::ffi::OsStr) -> bool) -> Vec<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let b = name.as_bytes();
        let Some(at) = b.windows(5).rposition(|w| w == b".tmp-") else {
            continue;
        };
        let digits = &b[at + 5..];
        if !b.starts_with(b".") || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            continue;
        }
        let pid: u32 = match std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
        {
            Some(p) => p,
            None => continue,
        };
        let prefix = std::ffi::OsStr::from_bytes(&b[..at + 5]);
        if pid == std::process::id() || pid_alive(pid) || !is_ours(prefix) {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_file()) && std::fs::remove_file(e.path()).is_ok() {
            removed.push(name.to_string_lossy().into_owned());
        }
    }
    if !removed.is_empty() {
        tracing::info!(
            "{}: removed temp files of dead processes: {}",
            dir.display(),
            removed.join(", ")
        );
    }
    removed
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

/// [`atomic_write`] unless `path` already holds exactly `bytes`: an unchanged rerun leaves the
/// file's bytes and mtime alone (cron, `make`, rsync and backups see nothing new). Returns
/// whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    let same = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && std::fs::read(path).is_ok_and(|old| old == bytes);
    if same {
        return Ok(false);
    }
    atomic_write(path, bytes)?;
    Ok(true)
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

/// `YYYY-MM-DDTHH:MM:SSZ` for `secs` since the Unix epoch (civil-from-days, Howard Hinnant).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn now_rfc3339() -> String {
    rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

/// Hex sha256 of a byte slice.
/// Each top-level field that differs between a recorded JSON object and the one a rerun
/// would record, as `field: recorded R, now N` (long values cut), for "differs from the
/// recorded run" refusals.
pub fn json_differences(recorded: &serde_json::Value, now: &serde_json::Value) -> Vec<String> {
    fn short(v: Option<&serde_json::Value>) -> String {
        let t = v
            .map(|v| v.to_string())
            .unwrap_or_else(|| "(absent)".into());
        if t.chars().count() > 160 {
            let head: String = t.chars().take(150).collect();
            format!(
                "{head}… ({} chars, sha256 {})",
                t.len(),
                &sha256_hex(t.as_bytes())[..12]
            )
        } else {
            t
        }
    }
    let empty = serde_json::Map::new();
    let a = recorded.as_object().unwrap_or(&empty);
    let b = now.as_object().unwrap_or(&empty);
    let mut out = Vec::new();
    for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
        if a.get(k) != b.get(k) {
            out.push(format!(
                "{k}: recorded {}, now {}",
                short(a.get(k)),
                short(b.get(k))
            ));
        }
    }
    if out.is_empty() && recorded != now {
        out.push(format!(
            "recorded {}, now {}",
            short(Some(recorded)),
            short(Some(now))
        ));
    }
    out
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    // A regular file only: a FIFO would block (or be drained beside its reader), a device
    // never end.
    let mut f = crate::bounded::open_regular(path)?;
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

    /// Same bytes: no write (mtime kept); other bytes: written.
    #[test]
    fn write_if_changed_keeps_an_unchanged_file() {
        let (_d, p) = crate::testkit::temp_path("f.json");
        assert!(write_if_changed(&p, b"one").unwrap());
        let t0 = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t0)
            .unwrap();
        assert!(!write_if_changed(&p, b"one").unwrap());
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), t0);
        assert!(write_if_changed(&p, b"two").unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_ne!(std::fs::metadata(&p).unwrap().modified().unwrap(), t0);
    }

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
    fn temp_names_fit_name_max_and_dead_ones_are_swept() {
        let d = tempfile::tempdir().unwrap();
        for n in [1usize, 200, 238, 239, 245, 249, 255] {
            let name = "é".repeat(n / 2) + &"x".repeat(n % 2);
            let p = d.path().join(&name);
            let t = temp_path(&p);
            let len = t.file_name().unwrap().len();
            assert!(len <= NAME_MAX, "{n}: {len}");
            atomic_write(&p, b"ok").unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"ok");
            std::fs::remove_file(&p).unwrap();
        }
        let out = d.path().join("distilled.json");
        let mut dead = temp_prefix(&out);
        dead.push("999999999");
        std::fs::write(d.path().join(&dead), b"x").unwrap();
        let live = temp_path(&out);
        std::fs::write(&live, b"x").unwrap();
        std::fs::write(d.path().join(".other.json.tmp-999999999"), b"x").unwrap();
        let want = temp_prefix(&out);
        let removed = sweep_dead_temps(d.path(), |p| p == want.as_os_str());
        assert_eq!(removed, vec![dead.to_string_lossy().into_owned()]);
        assert!(live.exists(), "a live writer's temp file is kept");
        assert!(d.path().join(".other.json.tmp-999999999").exists());
    }

    #[test]
    fn atomic_write_replaces() {
        let (d, p) = crate::testkit::temp_path("x.json");
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
