//! Why `--input` is more than one path: users pack their own data as it lies on disk — several
//! files, a directory of shards, a glob — in `.parquet`, `.json` (one array), `.jsonl`, and
//! their `.gz` / `.zst` forms. [`expand`] turns the `--input` values into one deterministic
//! file list: each value in the order given; a directory's files (recursively) and a glob's
//! matches sorted by path; a file named twice is read once. [`hash_all`] records each file's
//! sha256 and size (the `inputs` of index.json's `args`, so changed content changes the
//! fingerprint).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::codec::Codec;
use crate::manifest::Format;
use crate::shards::settings::InputFile;

/// Input format from a file name (`.parquet`, `.json`, `.jsonl`/`.ndjson`, each optionally
/// `.gz` / `.zst`); `None` for anything else.
pub fn format_of_name(path: &Path) -> Option<Format> {
    let name = Codec::strip(path).to_ascii_lowercase();
    if name.ends_with(".parquet") {
        Some(Format::Parquet)
    } else if name.ends_with(".jsonl") || name.ends_with(".ndjson") {
        Some(Format::Jsonl)
    } else if name.ends_with(".json") {
        Some(Format::Json)
    } else if name.ends_with(".txt") {
        Some(Format::Text)
    } else {
        None
    }
}

/// [`format_of_name`], a usage error naming the file when unknown.
pub fn format_of(path: &Path) -> Result<Format> {
    format_of_name(path).ok_or_else(|| {
        crate::error::usage(format!(
            "--input {}: unknown format (expected .parquet, .json, .jsonl or .txt, optionally .gz or .zst)",
            path.display()
        ))
    })
}

/// Whether an `--input` value is a glob pattern.
pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// Every `--input` value as files, in a deterministic order (see the module doc).
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for given in inputs {
        let s = given.to_string_lossy();
        let files = if !given.exists() && is_glob(&s) {
            glob_files(given)?
        } else if given.is_dir() {
            let mut v = Vec::new();
            walk(given, &mut v)?;
            v.retain(|p| format_of_name(p).is_some());
            // A directory of structured data keeps its `.txt` files (notes, licenses) out; a
            // directory of `.txt` files alone is a text corpus.
            if v.iter().any(|p| format_of_name(p) != Some(Format::Text)) {
                v.retain(|p| format_of_name(p) != Some(Format::Text));
            }
            v.sort();
            if v.is_empty() {
                return Err(crate::error::usage(format!(
                    "--input {}: the directory holds no .parquet, .json, .jsonl or .txt file (or .gz/.zst form)",
                    given.display()
                )));
            }
            v
        } else {
            std::fs::metadata(given).with_context(|| format!("--input {}", given.display()))?;
            // A FIFO would block, or be drained by both the hasher and the reader.
            crate::bounded::check_regular(given).with_context(|| "--input".to_string())?;
            format_of(given)?;
            vec![given.clone()]
        };
        for f in files {
            let key = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
            if seen.insert(key) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// Files matching a glob (`data/*.jsonl.gz`, `corpus/**/*.parquet`), sorted; `*` does not
/// cross `/`, `**` does.
fn glob_files(pattern: &Path) -> Result<Vec<PathBuf>> {
    let s = pattern.to_string_lossy();
    // The walk starts at the longest leading run of components without a glob character.
    let mut base = PathBuf::new();
    for c in pattern.components() {
        if is_glob(&c.as_os_str().to_string_lossy()) {
            break;
        }
        base.push(c);
    }
    let base = if base.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        base
    };
    let matcher = globset::GlobBuilder::new(&s)
        .literal_separator(true)
        .build()
        .map_err(|e| crate::error::usage(format!("--input {s:?}: bad glob: {e}")))?
        .compile_matcher();
    let mut all = Vec::new();
    if base.is_dir() {
        walk(&base, &mut all)?;
    }
    let strip_dot = !pattern.starts_with(".");
    let mut v: Vec<PathBuf> = all
        .into_iter()
        .filter(|p| {
            let cand = if strip_dot {
                p.strip_prefix(".").unwrap_or(p)
            } else {
                p
            };
            matcher.is_match(cand)
        })
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(crate::error::usage(format!(
            "--input {s:?}: the glob matches no file"
        )));
    }
    for p in &v {
        format_of(p)?;
    }
    Ok(v)
}

/// Every regular file under `dir` (following symlinked files, not directories), hidden ones
/// (`.name`) left out.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd =
        std::fs::read_dir(dir).with_context(|| format!("--input: reading {}", dir.display()))?;
    for e in rd {
        let e = e.with_context(|| format!("--input: reading {}", dir.display()))?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = e.path();
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&p, out)?;
        } else if p.is_file() {
            out.push(p);
        }
    }
    Ok(())
}

/// One `--input` to hash: a local file, or a remote one that hashes itself (a bucket
/// object's streamed GET, a Hub file's LFS sha256 or ranged read).
pub enum ToHash {
    File(PathBuf),
    Remote(Box<dyn Fn() -> Result<InputFile> + Send + Sync>),
}

impl ToHash {
    fn hash(&self) -> Result<InputFile> {
        match self {
            ToHash::File(p) => hash_one(p),
            ToHash::Remote(f) => f(),
        }
    }
}

/// [`hash_all`] on a thread of its own, so that `pack` tokenizes while its inputs are hashed:
/// one sha256 pass over a 1 GB corpus's parquet is ~0.1–0.2 s of one core, a tenth of a
/// 16-thread run when it comes first. [`PendingHashes::wait`] joins it.
pub struct PendingHashes(std::thread::JoinHandle<Result<Vec<InputFile>>>);

impl PendingHashes {
    /// Start hashing `files` on `threads` threads of their own (never the rayon pool, which
    /// is the tokenizer's: on a pool of one thread, a many-file input's hashing held up
    /// tokenization while it ran there).
    pub fn spawn(files: Vec<PathBuf>, threads: usize) -> Result<Self> {
        Self::spawn_each(files.into_iter().map(ToHash::File).collect(), threads)
    }

    /// [`PendingHashes::spawn`] of inputs that may be remote.
    pub fn spawn_each(items: Vec<ToHash>, threads: usize) -> Result<Self> {
        let h = std::thread::Builder::new()
            .name("input-sha256".into())
            .spawn(move || hash_each(&items, threads))
            .context("starting the thread that hashes --input files")?;
        Ok(Self(h))
    }

    /// The hashes, once every file is read (its error if one could not be).
    pub fn wait(self) -> Result<Vec<InputFile>> {
        self.0
            .join()
            .map_err(|_| anyhow::anyhow!("hashing the --input files panicked"))?
    }
}

/// One file's absolute path, size and sha256.
fn hash_one(p: &Path) -> Result<InputFile> {
    let bytes = std::fs::metadata(p)
        .with_context(|| format!("--input {}", p.display()))?
        .len();
    Ok(InputFile {
        path: crate::shards::index::abs_path(p),
        bytes,
        sha256: crate::util::sha256_file(p)?,
    })
}

/// Each file's absolute path, size and sha256, in `files` order (the first error in that
/// order), hashed on `threads` threads of this call's own (this one and `threads - 1` more),
/// each taking the next file not yet taken.
pub fn hash_all(files: &[PathBuf], threads: usize) -> Result<Vec<InputFile>> {
    let items: Vec<ToHash> = files.iter().cloned().map(ToHash::File).collect();
    hash_each(&items, threads)
}

/// [`hash_all`] of inputs that may be remote.
fn hash_each(items: &[ToHash], threads: usize) -> Result<Vec<InputFile>> {
    let threads = threads.min(items.len()).max(1);
    if threads == 1 {
        return items.iter().map(ToHash::hash).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<InputFile>>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(p) = items.get(i) else { return };
        let r = p.hash();
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err(anyhow::anyhow!("a file was not hashed")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_globs_and_files_in_a_fixed_order() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("a/sub")).unwrap();
        for f in [
            "a/2.jsonl",
            "a/1.parquet",
            "a/sub/0.json.gz",
            "a/.hidden.jsonl",
            "a/notes.txt",
            "b.jsonl.zst",
            "c.jsonl",
        ] {
            std::fs::write(r.join(f), b"").unwrap();
        }
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.strip_prefix(r).unwrap().display().to_string())
                .collect()
        };
        let got = expand(&[r.join("c.jsonl"), r.join("a"), r.join("*.jsonl*")]).unwrap();
        assert_eq!(
            names(got),
            vec![
                "c.jsonl",
                "a/1.parquet",
                "a/2.jsonl",
                "a/sub/0.json.gz",
                "b.jsonl.zst"
            ]
        );
        let got = expand(&[r.join("a/**/*.json*")]).unwrap();
        assert_eq!(names(got), vec!["a/2.jsonl", "a/sub/0.json.gz"]);
        let e = expand(&[r.join("nothing-*.jsonl")]).unwrap_err();
        assert!(format!("{e}").contains("matches no file"), "{e}");
        assert_eq!(crate::error::exit_code(&e), 2);
        // A `.txt` named on its own is read; one beside structured data in a directory is not.
        assert_eq!(
            names(expand(&[r.join("a/notes.txt")]).unwrap()),
            ["a/notes.txt"]
        );
        std::fs::write(r.join("x.csv"), b"").unwrap();
        let e = expand(&[r.join("x.csv")]).unwrap_err();
        assert!(format!("{e}").contains("unknown format"), "{e}");
        assert!(expand(&[r.join("missing.jsonl")]).is_err());
    }

    #[test]
    fn hashes_in_file_order_on_any_thread_count() {
        let d = tempfile::tempdir().unwrap();
        let files: Vec<PathBuf> = (0..7)
            .map(|i| {
                let p = d.path().join(format!("{i}.jsonl"));
                std::fs::write(&p, "x".repeat(i * 1000)).unwrap();
                p
            })
            .collect();
        let one = hash_all(&files, 1).unwrap();
        assert_eq!(one.len(), 7);
        assert_eq!(one[0].sha256, crate::util::sha256_hex(b""));
        assert_eq!(one[3].bytes, 3000);
        for t in [2, 3, 16] {
            let many = hash_all(&files, t).unwrap();
            let key = |v: &[InputFile]| -> Vec<(String, u64)> {
                v.iter().map(|f| (f.sha256.clone(), f.bytes)).collect()
            };
            assert_eq!(key(&many), key(&one), "{t} threads");
        }
        // The first missing file in `files` order is the error, whatever thread met it.
        let mut bad = files.clone();
        bad.insert(2, d.path().join("gone-a.jsonl"));
        bad.insert(5, d.path().join("gone-b.jsonl"));
        let e = hash_all(&bad, 3).unwrap_err();
        assert!(format!("{e:#}").contains("gone-a"), "{e:#}");
    }
}
