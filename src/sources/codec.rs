//! Why inputs may be compressed files: users keep their own data as `.jsonl.gz` or
//! `.json.zst`. A file's codec comes from its name's last extension (`.gz`, `.zst`); JSON
//! inputs are decompressed as a stream, parquet inputs (which need random access) into an
//! unlinked temporary file that is gone when the read ends.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::bounded::Bound;

/// How a file's bytes are compressed around the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Plain,
    Gzip,
    Zstd,
}

impl Codec {
    /// From the file name: `x.jsonl.gz` is gzip, `x.json.zst` zstd, anything else plain.
    pub fn of(path: &Path) -> Codec {
        let n = path.to_string_lossy().to_ascii_lowercase();
        if n.ends_with(".gz") {
            Codec::Gzip
        } else if n.ends_with(".zst") || n.ends_with(".zstd") {
            Codec::Zstd
        } else {
            Codec::Plain
        }
    }

    /// The name without the codec's extension (`a.jsonl.gz` → `a.jsonl`).
    pub fn strip(path: &Path) -> String {
        let n = path.to_string_lossy().into_owned();
        let lower = n.to_ascii_lowercase();
        for ext in [".gz", ".zst", ".zstd"] {
            if lower.ends_with(ext) {
                return n[..n.len() - ext.len()].to_string();
            }
        }
        n
    }
}

/// `path`'s decompressed bytes as a stream (`name` in errors); a regular file only
/// ([`crate::bounded::open_regular`]: a FIFO or device is refused, exit 2).
pub fn open(path: &Path, name: &str) -> Result<Box<dyn Read + Send>> {
    let f = crate::bounded::open_regular(path).with_context(|| name.to_string())?;
    decode(f, Codec::of(path), name)
}

/// The decompressed bytes of a stream compressed as `codec` (a local file, or a remote one
/// read by range), `name` in errors. The raw bytes read are counted, so progress can follow
/// them (compressed ones for .gz / .zst).
pub fn decode<'a>(
    f: impl Read + Send + 'a,
    codec: Codec,
    name: &str,
) -> Result<Box<dyn Read + Send + 'a>> {
    let f = crate::bounded::Consumed::new(f);
    Ok(match codec {
        Codec::Plain => Box::new(f),
        Codec::Gzip => Box::new(Named {
            inner: flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, f)),
            what: "gzip",
        }),
        Codec::Zstd => Box::new(Named {
            inner: zstd::stream::read::Decoder::new(f)
                .with_context(|| format!("{name}: opening zstd stream"))?,
            what: "zstd",
        }),
    })
}

/// A decoder whose errors say which decompression failed.
struct Named<R> {
    inner: R,
    what: &'static str,
}

impl<R: Read> Read for Named<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner
            .read(buf)
            .map_err(|e| std::io::Error::new(e.kind(), format!("corrupt {} data: {e}", self.what)))
    }
}

/// A compressed parquet file decompressed into a temporary file (removed on drop).
pub struct Decompressed {
    pub path: PathBuf,
}

impl Drop for Decompressed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `path` as a plain file that random access can read (parquet): the file itself, or for a
/// `.gz` / `.zst` a decompressed temporary copy, removed when this is dropped.
pub enum PlainFile<'a> {
    Itself(&'a Path),
    Copy(Decompressed),
}

impl PlainFile<'_> {
    pub fn path(&self) -> &Path {
        match self {
            PlainFile::Itself(p) => p,
            PlainFile::Copy(d) => &d.path,
        }
    }
}

/// [`PlainFile`] of `path` (shown as `name` in errors), a copy bounded by `max`.
pub fn plain_file<'a>(path: &'a Path, name: &str, max: Bound) -> Result<PlainFile<'a>> {
    Ok(match Codec::of(path) {
        Codec::Plain => PlainFile::Itself(path),
        _ => PlainFile::Copy(decompress_to_temp(path, name, max)?),
    })
}

/// The most bytes a temporary decompressed copy may hold for the commands without
/// `pack --max-decompressed-bytes` (pack's own default is the same 16 GiB): a small
/// `.parquet.zst` bomb cannot fill the disk.
pub const TEMP_MAX: Bound = Bound::new(
    16 << 30,
    "a decompressed input is at most that; no flag raises it here",
);

/// Decompress `path` into a temporary file beside the system temp dir (`TMPDIR`), refused
/// (naming the file, the limit and the flag) once it would hold more than `max`.
pub fn decompress_to_temp(path: &Path, name: &str, max: Bound) -> Result<Decompressed> {
    decode_to_temp(open(path, name)?, name, max)
}

/// [`decompress_to_temp`] of an already decoded stream (a remote `.parquet.gz` read by range).
pub fn decode_to_temp(input: impl Read, name: &str, max: Bound) -> Result<Decompressed> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp =
        std::env::temp_dir().join(format!(".dlm-data-{}-{k}.parquet.tmp", std::process::id()));
    let out = Decompressed { path: tmp };
    let mut r = crate::bounded::Capped::new(input, max, format!("{name} decompressed"));
    let mut w = File::create(&out.path)
        .with_context(|| format!("{name}: creating {}", out.path.display()))?;
    std::io::copy(&mut r, &mut w).with_context(|| format!("{name}: decompressing"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn codecs_by_name_and_roundtrip() {
        assert_eq!(Codec::of(Path::new("a.JSONL.GZ")), Codec::Gzip);
        assert_eq!(Codec::of(Path::new("a.json.zst")), Codec::Zstd);
        assert_eq!(Codec::of(Path::new("a.parquet")), Codec::Plain);
        assert_eq!(Codec::strip(Path::new("d/a.jsonl.gz")), "d/a.jsonl");
        let (d, gz) = crate::testkit::temp_path("a.jsonl.gz");
        let mut e = flate2::write::GzEncoder::new(
            File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        e.write_all(b"{\"text\":\"hi\"}\n").unwrap();
        e.finish().unwrap();
        let mut s = String::new();
        open(&gz, "a").unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "{\"text\":\"hi\"}\n");
        let zs = d.path().join("a.json.zst");
        std::fs::write(&zs, zstd::encode_all(&b"[1]"[..], 3).unwrap()).unwrap();
        let mut s = String::new();
        open(&zs, "a").unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "[1]");
        // Progress: the compressed bytes read so far, counted while the stream is read.
        let big = d.path().join("big.jsonl.gz");
        let mut e =
            flate2::write::GzEncoder::new(File::create(&big).unwrap(), flate2::Compression::fast());
        let mut rng = crate::util::SplitMix(7);
        for _ in 0..400_000 {
            writeln!(e, "{{\"text\":\"{}\"}}", rng.below(1 << 30)).unwrap();
        }
        e.finish().unwrap();
        let size = std::fs::metadata(&big).unwrap().len();
        let mut r = open(&big, "big").unwrap();
        let mut buf = vec![0u8; 64 << 10];
        r.read_exact(&mut buf).unwrap();
        let mid = crate::bounded::consumed();
        assert!(mid > 0 && mid < size, "{mid} of {size}");
        std::io::copy(&mut r, &mut std::io::sink()).unwrap();
        assert_eq!(crate::bounded::consumed(), size);
        std::fs::write(&zs, b"not zstd").unwrap();
        let mut s = String::new();
        let e = open(&zs, "a").unwrap().read_to_string(&mut s).unwrap_err();
        assert!(e.to_string().contains("zstd"), "{e}");
    }

    /// The bound is the caller's: past it the copy is refused naming the file, the limit and
    /// the flag; under it the whole file comes out.
    #[test]
    fn a_copy_holds_the_bound_it_is_given() {
        let (_d, p) = crate::testkit::temp_file(
            "a.parquet.zst",
            zstd::encode_all(&vec![7u8; 3 << 20][..], 3).unwrap(),
        );
        let small = Bound::new(1 << 20, "--max-decompressed-bytes");
        let e = decompress_to_temp(&p, "a", small).err().unwrap();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("a decompressed is over 1MiB (raise it with --max-decompressed-bytes)"),
            "{msg}"
        );
        let copy = decompress_to_temp(&p, "a", TEMP_MAX).unwrap();
        assert_eq!(std::fs::read(&copy.path).unwrap(), vec![7u8; 3 << 20]);
    }
}
