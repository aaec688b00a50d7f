//! One writer per output: an exclusive `flock` on a lock file in (or beside) every output a
//! command writes, held for the command's lifetime and released by the OS when the process
//! dies, so overlapping cron starts or a forgotten second shell can never interleave two
//! writers' resume state.
//!
//! A second run on a held output stops at once with [`crate::error::Busy`] (exit code
//! [`crate::error::EXIT_BUSY`]), naming the holder's pid, command line and start time read
//! from the lock file. The lock file is removed (while still held) when the run ends; a
//! taker re-checks after `flock` that the path still names the file it locked, so removing
//! it never lets two processes hold "the same" lock. A lock file left by a killed process is
//! simply taken over (the OS released its `flock`).
//!
//! [`refuse_inputs`] is the other guard every writer runs before any work: an output path
//! that is, or resolves through symlinks or hard links to, one of the command's inputs is
//! refused.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The lock file inside an output directory (pack, mcq, merge, decontam --drop).
pub const DIR_LOCK: &str = ".dlm-data.lock";

/// An exclusive lock on one output, released (and its file removed) when dropped.
#[derive(Debug)]
pub struct OutputLock {
    file: Option<File>,
    path: PathBuf,
    /// A directory this lock created to hold its file: removed on release when empty.
    created_dir: Option<PathBuf>,
}

impl OutputLock {
    /// Lock `OUT/.dlm-data.lock` for a directory output, creating `dir` when missing.
    pub fn dir(dir: &Path, what: &str) -> Result<OutputLock> {
        let created = !dir.exists();
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut l = Self::file(&dir.join(DIR_LOCK), what, dir)?;
        if created {
            l.created_dir = Some(dir.to_path_buf());
        }
        Ok(l)
    }

    /// [`OutputLock::dir`], or `None` when `dir` exists but no lock file can be created in it
    /// because it is read-only (a read-only filesystem or directory). The caller may then
    /// only verify a complete output and report it; anything it would write must be refused
    /// ([`read_only_refusal`]).
    pub fn dir_or_read_only(dir: &Path, what: &str) -> Result<Option<OutputLock>> {
        let existed = dir.is_dir();
        match Self::dir(dir, what) {
            Ok(l) => Ok(Some(l)),
            Err(e) if existed && is_read_only(&e) => {
                tracing::info!(
                    "{}: read-only (no lock file can be created); only a complete output is accepted",
                    dir.display()
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Lock `path` (created when missing; never followed when it is a symlink). `output` names
    /// the output in the message a second run gets.
    pub fn file(path: &Path, what: &str, output: &Path) -> Result<OutputLock> {
        for _ in 0..64 {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .with_context(|| format!("opening the lock file {}", path.display()))?;
            // SAFETY: flock on a descriptor we own.
            let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Err(busy(path, output, what, &mut &f));
                }
                return Err(err).with_context(|| format!("flock {}", path.display()));
            }
            // The holder before us may have removed the file after we opened it: the lock
            // counts only when the path still names the file we locked.
            let same = match (f.metadata(), std::fs::symlink_metadata(path)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
            if !same {
                continue;
            }
            let mut f = f;
            let info = serde_json::json!({
                "pid": std::process::id(),
                "command": command_line(),
                "started": crate::util::now_rfc3339(),
                "output": output.display().to_string(),
            });
            f.set_len(0)?;
            f.write_all(format!("{info}\n").as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            crate::signals::pause_point("lock-held");
            return Ok(OutputLock {
                file: Some(f),
                path: path.to_path_buf(),
                created_dir: None,
            });
        }
        anyhow::bail!("{}: the lock file keeps being replaced", path.display())
    }

    /// Lock a file output through `.NAME.lock` beside it (within NAME_MAX for any name).
    pub fn beside(out: &Path, what: &str) -> Result<OutputLock> {
        Self::file(&beside_path(out), what, out)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Also remove `dir` on release when it is empty then (a directory this run created only
    /// to hold its output).
    pub fn remove_dir_on_release(mut self, dir: &Path) -> OutputLock {
        self.created_dir = Some(dir.to_path_buf());
        self
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Remove while still holding: a waiter that opened the old file re-checks the path.
        let _ = std::fs::remove_file(&self.path);
        drop(self.file.take());
        if let Some(d) = self.created_dir.take() {
            let _ = std::fs::remove_dir(d); // only when empty
        }
    }
}

/// Whether `e` is a write refused because the place is read-only (EROFS, EACCES, EPERM).
fn is_read_only(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| {
            matches!(
                io.raw_os_error(),
                Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
            )
        })
}

/// The error of a run on a read-only output that is not complete (or not with these
/// arguments): nothing can be written there (exit 1).
pub fn read_only_refusal(out: &Path, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: read-only (no lock file can be created there) and {why}: nothing can be written; \
         make it writable, or choose another output",
        out.display()
    )
}

/// `.NAME.lock` beside `out`; a name too long for that is cut and followed by a hash.
pub fn beside_path(out: &Path) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let name = out.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    let mut v = vec![b'.'];
    if name.len() + 6 <= crate::util::NAME_MAX {
        v.extend_from_slice(name);
    } else {
        v.extend_from_slice(&name[..crate::util::NAME_MAX - 6 - 17]);
        v.push(b'~');
        v.extend_from_slice(crate::util::sha256_hex(name)[..16].as_bytes());
    }
    v.extend_from_slice(b".lock");
    out.with_file_name(std::ffi::OsString::from_vec(v))
}

/// The command line of this process, as typed (lossy), for the holder message.
fn command_line() -> String {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    crate::secret::redact(&args.join(" ")).into_owned()
}

/// The error a second run gets: who holds the output.
fn busy(path: &Path, output: &Path, what: &str, f: &mut &File) -> anyhow::Error {
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    let info: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
    let holder = match info.get("pid").and_then(|p| p.as_u64()) {
        Some(pid) => format!(
            "pid {pid} (`{}`, started {})",
            info["command"].as_str().unwrap_or("?"),
            info["started"].as_str().unwrap_or("?")
        ),
        None => "another process (it is starting up)".to_string(),
    };
    anyhow::Error::new(crate::error::Busy(format!(
        "{}: another dlm-data {what} is writing it: {holder}; lock {}. Wait for it to finish \
         (or stop it); --force never takes an output a live process holds",
        output.display(),
        path.display()
    )))
}

/// A path's file identity (device, inode), following symlinks; `None` when missing.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// `p` resolved through symlinks as far as it exists (a missing tail is appended as typed).
pub fn resolved(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    match (abs.parent(), abs.file_name()) {
        (Some(d), Some(n)) if d != abs => resolved(d).join(n),
        _ => abs,
    }
}

/// Refuse (exit 2), before any work, an output that is or resolves to one of `inputs`, or
/// (for a directory output) holds one of them. `flag` names the output's flag. Inputs that
/// do not exist are skipped (their own readers report them).
pub fn refuse_inputs(flag: &str, out: &Path, inputs: &[(&str, &Path)]) -> Result<()> {
    let out_id = identity(out);
    let out_res = resolved(out);
    for (name, input) in inputs {
        let Some(in_id) = identity(input) else {
            continue;
        };
        let in_res = resolved(input);
        if out_id == Some(in_id) || out_res == in_res {
            return Err(crate::error::refused(format!(
                "{flag} {} is an input of this run (the {name} {}); an input is never \
                 overwritten: choose another {flag}",
                out.display(),
                input.display()
            )));
        }
        if out.is_dir() && in_res.starts_with(&out_res) {
            return Err(crate::error::refused(format!(
                "{flag} {}: {} inside it is an input of this run (the {name}); an input is \
                 never deleted or overwritten: choose another {flag}",
                out.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Refuse (exit 2), before any work, an output directory inside one of `dirs` (inputs read
/// as whole directories: every data file under them, hidden entries aside), whether it exists
/// yet or not: its own shards would be read as input by the next run. `flag` names the
/// output's flag. An output under a hidden entry (`corpus/.packed`) is never read: allowed.
pub fn refuse_inside_input_dirs(flag: &str, out: &Path, dirs: &[(&str, &Path)]) -> Result<()> {
    let out_res = resolved(out);
    for (name, dir) in dirs {
        if !dir.is_dir() {
            continue;
        }
        let dir_res = resolved(dir);
        let Ok(rel) = out_res.strip_prefix(&dir_res) else {
            continue;
        };
        let hidden = rel
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
        if !hidden {
            return Err(crate::error::refused(format!(
                "{flag} {} is inside the {name} {}: every data file under it is read, so the \
                 next run would read this output's own shards as input; choose an {flag} \
                 outside it",
                out.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Refuse (exit 2) a path that is not valid UTF-8, naming it: dlm-data records paths in
/// JSON (index.json, distilled.json, reports), where a lossy copy would name another file.
pub fn require_utf8(flag: &str, p: &Path) -> Result<()> {
    if p.to_str().is_none() {
        return Err(crate::error::usage(format!(
            "{flag} {}: the path is not valid UTF-8; dlm-data records paths in JSON and refuses \
             one it could not name exactly (rename or link it)",
            p.display()
        )));
    }
    Ok(())
}

/// [`require_utf8`] for every `(flag, path)` given.
pub fn require_utf8_all<'a>(paths: impl IntoIterator<Item = (&'a str, &'a Path)>) -> Result<()> {
    for (f, p) in paths {
        require_utf8(f, p)?;
        // The directory it resolves into (the current directory for a relative path).
        if p.is_relative() {
            if let Ok(cwd) = std::env::current_dir() {
                require_utf8("the current directory", &cwd)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_taker_is_busy_and_names_the_holder() {
        let (_d, out) = crate::testkit::temp_path("out");
        let a = OutputLock::dir(&out, "pack").unwrap();
        let e = OutputLock::dir(&out, "pack").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), crate::error::EXIT_BUSY);
        let msg = format!("{e:#}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains("started 20"), "{msg}");
        drop(a);
        // Released: the file is gone, the directory it created too, and the next taker wins.
        assert!(!out.exists());
        let b = OutputLock::dir(&out, "pack").unwrap();
        assert!(out.join(DIR_LOCK).is_file());
        drop(b);
    }

    #[test]
    fn a_stale_lock_file_is_taken_over_and_a_symlink_is_not_followed() {
        let (d, p) = crate::testkit::temp_file("x.lock", "{\"pid\": 1}\n");
        let l = OutputLock::file(&p, "distill", d.path()).unwrap();
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .contains(&std::process::id().to_string()));
        drop(l);
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        assert!(OutputLock::file(&p, "distill", d.path()).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[test]
    fn inputs_are_refused_through_symlinks_and_hard_links() {
        let (d, input) = crate::testkit::temp_file("prompts.jsonl", "x");
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = d.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        for out in [&input, &link, &hard] {
            let e = refuse_inputs("--out", out, &[("prompts", &input)]).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
        }
        // Spelled differently: ./x/../prompts.jsonl
        std::fs::create_dir(d.path().join("x")).unwrap();
        let odd = d.path().join("x").join("..").join("prompts.jsonl");
        assert!(refuse_inputs("--out", &odd, &[("prompts", &input)]).is_err());
        // A directory output holding an input.
        assert!(refuse_inputs("--out", d.path(), &[("prompts", &input)]).is_err());
        let fresh = d.path().join("distilled.json");
        refuse_inputs("--out", &fresh, &[("prompts", &input)]).unwrap();
    }
}
