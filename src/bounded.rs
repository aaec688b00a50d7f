//! Why every reader opens its files here: one place refuses what is not a regular file (a
//! FIFO would block forever or be drained by two readers; `/dev/zero` never ends) and one
//! place bounds what a read may hold, so no input can exhaust memory.
//!
//! [`open_regular`] opens with `O_NONBLOCK` and `fstat`s the open descriptor (no race with a
//! `stat` before the open; an open of a FIFO with no writer returns at once), refusing
//! anything but a regular file — named directly or through a symlink — with exit 2.
//! [`Bound`] is one limit and the flag that raises it; [`Capped`] ends a read that goes past
//! a bound with an error naming the file, the limit and the flag, *while* reading.

use std::cell::Cell;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;

use anyhow::Result;

/// One limit on what a read may hold, and how the user raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Bytes.
    pub limit: u64,
    /// The flag that raises it (`--max-row-bytes`), or a phrase saying why none does.
    pub flag: &'static str,
    /// A JSON Lines record over the limit is read to its end without being held and handed
    /// on as skipped (`pack --on-oversize skip`) instead of ending the read.
    pub skip: bool,
}

impl Bound {
    pub const fn new(limit: u64, flag: &'static str) -> Bound {
        Bound {
            limit,
            flag,
            skip: false,
        }
    }

    /// This bound, with a JSON Lines record over it skipped rather than an error.
    pub const fn skipping(self) -> Bound {
        Bound { skip: true, ..self }
    }

    /// "`what` is over LIMIT (raise it with FLAG)".
    pub fn message(&self, what: &str) -> String {
        if self.flag.starts_with("--") {
            format!(
                "{what} is over {} (raise it with {})",
                human(self.limit),
                self.flag
            )
        } else {
            format!("{what} is over {} ({})", human(self.limit), self.flag)
        }
    }
}

/// The bounds one input read holds: a JSON row's bytes while it is read, and what a compressed
/// parquet input (`.parquet.gz` / `.parquet.zst`) may decompress to in its temporary copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBounds {
    pub row: Bound,
    pub decompressed: Bound,
    /// A `.txt` input's documents are its blank-line-separated paragraphs (`pack
    /// --paragraphs`), not the whole file; each bounded by `row`.
    pub paragraphs: bool,
}

/// `n` bytes as the flags spell sizes: `64MiB` when a whole number of MiB, else `N bytes`.
pub fn human(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{}MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// What a path is when it is not a regular file (for the refusal).
fn kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn refuse(path: &Path, what: &str) -> anyhow::Error {
    crate::error::usage(format!(
        "{}: {what}, not a regular file; dlm-data reads regular files only (copy the data \
         into a file first)",
        path.display()
    ))
}

/// Refuse `path` (following symlinks) unless it is a regular file; exit 2. Opens nothing.
pub fn check_regular(path: &Path) -> Result<()> {
    let md = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if md.is_file() {
        Ok(())
    } else {
        Err(refuse(path, kind(&md.file_type())))
    }
}

/// Open `path` for reading only if it is a regular file (after symlinks): opened with
/// `O_NONBLOCK` (a FIFO with no writer does not block the open), then `fstat`; anything else
/// is refused with exit 2, naming what it is.
pub fn open_regular(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?;
    let md = f
        .metadata()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if !md.is_file() {
        return Err(refuse(path, kind(&md.file_type())));
    }
    // O_NONBLOCK means nothing to a regular file's reads; cleared all the same so the
    // descriptor behaves as a plain open.
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

thread_local! {
    /// Bytes this thread has read from the file [`Consumed`] wraps (compressed bytes for a
    /// `.gz` / `.zst`): what pack's progress advances by for JSON inputs.
    static CONSUMED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes read so far from the file this thread last opened through [`Consumed::new`].
pub fn consumed() -> u64 {
    CONSUMED.with(Cell::get)
}

/// A file whose bytes read are counted in this thread's [`consumed`] (reset when made).
pub struct Consumed<R>(pub R);

impl<R: Read> Consumed<R> {
    pub fn new(r: R) -> Self {
        CONSUMED.with(|c| c.set(0));
        Consumed(r)
    }
}

impl<R: Read> Read for Consumed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        CONSUMED.with(|c| c.set(c.get() + n as u64));
        Ok(n)
    }
}

/// A regular file's bytes ([`open_regular`]; its size is its own, so no further bound).
pub fn read_regular(path: &Path) -> Result<Vec<u8>> {
    let mut f = open_regular(path)?;
    let mut out = Vec::with_capacity(f.metadata().map(|m| m.len() as usize).unwrap_or(0));
    f.read_to_end(&mut out)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    Ok(out)
}

/// A regular file's text, refused past `bound` before it is read.
pub fn read_regular_text(path: &Path, bound: Bound) -> Result<String> {
    let f = open_regular(path)?;
    let n = f.metadata().map(|m| m.len()).unwrap_or(0);
    if n > bound.limit {
        anyhow::bail!("{}", bound.message(&path.display().to_string()));
    }
    let b = read_capped(f, bound, &path.display().to_string())?;
    String::from_utf8(b).map_err(|_| anyhow::anyhow!("{}: not UTF-8", path.display()))
}

/// A shared byte count that a [`Capped`] reader adds to and its owner resets (per row).
#[derive(Clone, Default)]
pub struct Counter(Rc<Cell<u64>>);

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.get()
    }
    pub fn reset(&self) {
        self.0.set(0)
    }
}

/// A reader that fails once more than `bound.limit` bytes have been read since the counter
/// was last reset. The error's text is `bound.message(what)`; [`Capped::over`] tells the
/// owner the bound was hit (serde wraps I/O errors in its own).
pub struct Capped<R> {
    inner: R,
    count: Counter,
    bound: Bound,
    what: String,
    over: Rc<Cell<bool>>,
}

impl<R: Read> Capped<R> {
    pub fn new(inner: R, bound: Bound, what: impl Into<String>) -> Capped<R> {
        Capped {
            inner,
            count: Counter::default(),
            bound,
            what: what.into(),
            over: Rc::default(),
        }
    }
    /// The counter, to reset between rows.
    pub fn counter(&self) -> Counter {
        self.count.clone()
    }
    /// Set once the bound was hit.
    pub fn over_flag(&self) -> Rc<Cell<bool>> {
        self.over.clone()
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.bound.limit.saturating_sub(self.count.get());
        if left == 0 {
            // One byte more tells "exactly at the limit" from "over it".
            let mut one = [0u8; 1];
            if self.inner.read(&mut one)? == 0 {
                return Ok(0);
            }
            self.over.set(true);
            return Err(std::io::Error::other(self.bound.message(&self.what)));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.count.0.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// `r` read to its end into memory, failing (naming `what`, the limit and the flag) once it
/// would hold more than `bound.limit` bytes — never allocating past the bound.
pub fn read_capped(r: impl Read, bound: Bound, what: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut c = Capped::new(r, bound, what);
    c.read_to_end(&mut out)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(out)
}

/// The lines of a reader (without their `\n` / `\r\n`), each refused once it passes
/// `bound` — after reading no more than the bound plus one byte of it.
pub struct BoundedLines<R> {
    r: std::io::BufReader<R>,
    bound: Bound,
    buf: Vec<u8>,
    line: u64,
}

impl<R: Read> BoundedLines<R> {
    pub fn new(r: R, bound: Bound) -> Self {
        BoundedLines {
            r: std::io::BufReader::with_capacity(1 << 20, r),
            bound,
            buf: Vec::new(),
            line: 0,
        }
    }
}

impl<R: Read> Iterator for BoundedLines<R> {
    type Item = std::io::Result<String>;
    fn next(&mut self) -> Option<Self::Item> {
        use std::io::BufRead;
        self.buf.clear();
        self.line += 1;
        let got = match (&mut self.r)
            .take(self.bound.limit.saturating_add(1))
            .read_until(b'\n', &mut self.buf)
        {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if got as u64 > self.bound.limit {
            let msg = self.bound.message(&format!("line {}", self.line));
            return Some(Err(std::io::Error::other(msg)));
        }
        Some(
            String::from_utf8(std::mem::take(&mut self.buf))
                .map_err(|_| std::io::Error::other("not UTF-8")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_and_caps_hold() {
        let (d, fifo) = crate::testkit::temp_path("p.jsonl");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: the open must not block, and it is refused.
        let e = open_regular(&fifo).unwrap_err();
        assert!(format!("{e}").contains("FIFO"), "{e}");
        assert_eq!(crate::error::exit_code(&e), 2);
        let link = d.path().join("z.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = open_regular(&link).unwrap_err();
        assert!(format!("{e}").contains("character device"), "{e}");
        assert!(check_regular(&link).is_err());
        let ok = d.path().join("a.jsonl");
        std::fs::write(&ok, b"12345").unwrap();
        open_regular(&ok).unwrap();
        check_regular(&ok).unwrap();
        let b = Bound::new(4, "--max-x");
        let e = read_capped(&b"12345"[..], b, "x").unwrap_err();
        assert!(format!("{e}").contains("--max-x"), "{e}");
        assert_eq!(read_capped(&b"1234"[..], b, "x").unwrap(), b"1234");
    }
}
