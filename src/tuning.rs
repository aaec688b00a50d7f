//! Why one file: how many threads a command uses is decided once, here, and every count
//! derived from it (hashers, decoders, encoders, batches ahead, row groups in flight, …) is
//! computed once into a [`Tuning`] value the command's settings hand down; no step asks the
//! pool's size or the environment. `--threads N` builds the pool (else `RAYON_NUM_THREADS`,
//! else the cores, rayon's own default); the `DLM_*` tuning variables (docs/environment.md)
//! are read here too, and nowhere else. None of them changes a byte of any output.

use anyhow::Result;

/// `--threads N`: the one flag every pool-using command takes.
#[derive(clap::Args, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadsArg {
    /// Worker threads (tokenizing, decoding, encoding): default the cores, or
    /// `RAYON_NUM_THREADS`. Output bytes never depend on it.
    #[arg(long, value_name = "N", value_parser = crate::sizes::usize_in(1, 4096))]
    pub threads: Option<usize>,
}

/// Every count a run derives from its thread budget and the `DLM_PACK_*` variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Threads of the rayon pool (the tokenizers').
    pub pool: usize,
    /// Threads hashing `--input` files (never the pool's): a quarter of the pool, 1 to 8.
    pub hashers: usize,
    /// Parquet inputs' decoding threads and piece size (`DLM_PACK_READ_THREADS`,
    /// `DLM_PACK_READ_PIECE_BYTES`).
    pub decoding: Decoding,
    /// Shards encoded at once on threads of their own: a quarter of the pool, 1 to 8.
    pub encoders: usize,
    /// Parquet row groups: on the pool or the shard's thread, and how many in flight.
    pub row_groups: RowGroups,
    /// Batches between the reader and the packer (`DLM_PACK_AHEAD`).
    pub batches_ahead: usize,
    /// Text bytes per tokenization batch (`DLM_PACK_BATCH_KB`, default 4 MiB).
    pub batch_text_bytes: usize,
    /// Text bytes per tokenizing task (`DLM_PACK_CHUNK_KB`, default 256 KiB).
    pub chunk_text_bytes: usize,
    /// The shared word cache: its size when set (`DLM_PACK_WORD_CACHE`) and whether its
    /// pages are faulted in ahead (`DLM_PACK_PREFAULT`).
    pub word_cache: WordCacheTuning,
    /// Milliseconds to sleep after each journaled shard (`DLM_PACK_THROTTLE_MS`, tests).
    pub throttle_ms: Option<u64>,
    /// The `pack profile:` line (`DLM_PACK_PROFILE`).
    pub profile: bool,
}

/// The shared word cache's settings (see `crate::tokenize::bpe::shared_words`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordCacheTuning {
    /// Words in the shared table (0: none); `None`: sized from the input.
    pub words: Option<usize>,
    /// Fault its pages in on a thread of its own ahead of the tokenizing threads.
    pub prefault: bool,
}

/// Rows per tokenization batch at most.
pub const BATCH_MAX_ROWS: usize = 16_384;

/// Parquet row groups are encoded on the shard's own thread on a pool of at most this many
/// threads (see [`RowGroups::on_pool`]).
const ENCODE_INLINE_MAX_THREADS: usize = 2;

impl Tuning {
    /// Build the pool for `--threads` (once per process: a second command in the same process
    /// with another count is refused), then derive every count from its size and the
    /// environment.
    pub fn resolve(threads: ThreadsArg) -> Result<Tuning> {
        let pool = pool(threads.threads)?;
        Ok(Tuning::derive(pool, &|k| std::env::var(k).ok()))
    }

    /// The counts for a pool of `pool` threads, `env` giving the variables (tests pass a map).
    pub fn derive(pool: usize, env: &dyn Fn(&str) -> Option<String>) -> Tuning {
        let pos =
            |k: &str| -> Option<usize> { env(k)?.trim().parse().ok().filter(|&n: &usize| n > 0) };
        let quarter = (pool / 4).clamp(1, 8);
        let word_words = env("DLM_PACK_WORD_CACHE").and_then(|v| match v.trim().parse() {
            Ok(n) => Some(n),
            Err(_) => {
                tracing::warn!(
                    "DLM_PACK_WORD_CACHE={v:?} is not a number of words: sizing it from the input"
                );
                None
            }
        });
        let inline_max = env("DLM_PACK_ENCODE_INLINE_MAX")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(ENCODE_INLINE_MAX_THREADS);
        Tuning {
            pool,
            hashers: quarter,
            decoding: Decoding {
                threads: env("DLM_PACK_READ_THREADS")
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .map_or(quarter, |n| n.clamp(1, 64)),
                piece_bytes: env("DLM_PACK_READ_PIECE_BYTES")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or(PIECE_BYTES),
            },
            encoders: quarter,
            // Row groups encoding at once per shard: enough to keep the pool busy, bounded in
            // memory (a group of 2048-token rows is 8 MiB of ids). On one or two threads the
            // pool is the tokenizer's and encoding there stalls it — a 1-thread pack spent
            // ~30 % of its one worker's user time on zstd and page encoding — while one
            // thread of its own keeps pace with two tokenizing threads (encoding is ~0.4×
            // tokenizing per token) and overlaps them.
            row_groups: RowGroups {
                on_pool: pool > inline_max,
                pending: (2 * pool).clamp(2, 64),
            },
            // Two batches per pool thread, 6 to 64 — 128 MiB of text in flight on 16
            // threads, 256 MiB at most. One per thread left the packer waiting on the batch
            // at the head 2.1–2.7 s of a 5.4–6.5 s run on 16 cores (4 GB code corpus), 0.1 s
            // with two.
            batches_ahead: pos("DLM_PACK_AHEAD").unwrap_or((2 * pool).clamp(6, 64)),
            batch_text_bytes: pos("DLM_PACK_BATCH_KB").map_or(4 << 20, |kb| kb << 10),
            chunk_text_bytes: pos("DLM_PACK_CHUNK_KB").map_or(256 << 10, |kb| kb << 10),
            word_cache: WordCacheTuning {
                words: word_words,
                prefault: !env("DLM_PACK_PREFAULT").is_some_and(|v| v.trim() == "0"),
            },
            throttle_ms: env("DLM_PACK_THROTTLE_MS").and_then(|v| v.parse().ok()),
            profile: env("DLM_PACK_PROFILE").is_some_and(|v| v != "0"),
        }
    }
}

/// The pool's size: `--threads N` builds the global pool of N threads (when something in
/// this process already started it with another size, a usage error); without the flag,
/// rayon's default (`RAYON_NUM_THREADS`, else the cores).
fn pool(threads: Option<usize>) -> Result<usize> {
    if let Some(n) = threads {
        // Err: the pool already runs (an earlier step of `run`, a test); fine at the same size.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
        let have = rayon::current_num_threads();
        if have != n {
            return Err(crate::error::usage(format!(
                "--threads {n}: this process's thread pool already runs {have} threads"
            )));
        }
    }
    Ok(rayon::current_num_threads())
}

/// `DLM_NO_PROGRESS`: no progress bar even on a terminal.
pub fn no_progress() -> bool {
    std::env::var_os("DLM_NO_PROGRESS").is_some()
}

/// `DLM_TEST_PAUSE` (tests): the pause point and count to stop at.
pub fn test_pause() -> Option<String> {
    std::env::var("DLM_TEST_PAUSE").ok()
}

/// `DLM_TEST_PAUSE_FILE` (tests): where a paused process writes its pid.
pub fn test_pause_file() -> Option<std::ffi::OsString> {
    std::env::var_os("DLM_TEST_PAUSE_FILE")
}

/// How a parquet shard's row groups are encoded (`crate::shards::parquet` takes it; the
/// writer never asks the pool's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowGroups {
    /// Row groups go to the rayon pool, else they are encoded on the calling thread (a
    /// shard's own thread in `pack`): on a pool of one or two threads, the pool is the
    /// tokenizer's and encoding there stalls it.
    pub on_pool: bool,
    /// Row groups encoding at once per shard, at most (when on the pool).
    pub pending: usize,
}

impl RowGroups {
    /// Every row group on the calling thread (what a caller with no pool to spare passes).
    pub const INLINE: RowGroups = RowGroups {
        on_pool: false,
        pending: 2,
    };
}

/// How a parquet input is decoded: on `threads` threads (1: serially), in pieces of about
/// `piece_bytes` uncompressed bytes (`crate::sources` takes it; a reader never asks the
/// pool's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoding {
    pub threads: usize,
    pub piece_bytes: u64,
}

/// Uncompressed bytes of the template's columns per parquet decoding piece, by default.
pub const PIECE_BYTES: u64 = 64 << 20;

impl Decoding {
    /// One thread (the readers of JSON values, which decode serially anyway).
    pub const SERIAL: Decoding = Decoding {
        threads: 1,
        piece_bytes: PIECE_BYTES,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)], pool: usize) -> Tuning {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tuning::derive(pool, &move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn counts_derive_from_the_pool_as_before() {
        // (pool, hashers/decoders/encoders, batches ahead, row groups pending, on the pool)
        for (pool, quarter, ahead, pending, on_pool) in [
            (1, 1, 6, 2, false),
            (2, 1, 6, 4, false),
            (3, 1, 6, 6, true),
            (16, 4, 32, 32, true),
            (64, 8, 64, 64, true),
        ] {
            let t = with(&[], pool);
            assert_eq!(t.pool, pool);
            assert_eq!(
                (t.hashers, t.decoding.threads, t.encoders),
                (quarter, quarter, quarter)
            );
            assert_eq!(t.batches_ahead, ahead, "pool {pool}");
            assert_eq!(t.row_groups.pending, pending, "pool {pool}");
            assert_eq!(t.row_groups.on_pool, on_pool, "pool {pool}");
            assert_eq!(t.decoding.piece_bytes, PIECE_BYTES);
            assert_eq!(
                (t.batch_text_bytes, t.chunk_text_bytes),
                (4 << 20, 256 << 10)
            );
            assert_eq!(
                t.word_cache,
                WordCacheTuning {
                    words: None,
                    prefault: true
                }
            );
            assert_eq!((t.throttle_ms, t.profile), (None, false));
        }
    }

    #[test]
    fn every_variable_overrides_its_count() {
        let t = with(
            &[
                ("DLM_PACK_READ_THREADS", "100"),
                ("DLM_PACK_READ_PIECE_BYTES", "4096"),
                ("DLM_PACK_ENCODE_INLINE_MAX", "0"),
                ("DLM_PACK_AHEAD", "3"),
                ("DLM_PACK_BATCH_KB", "8"),
                ("DLM_PACK_CHUNK_KB", "2"),
                ("DLM_PACK_WORD_CACHE", "0"),
                ("DLM_PACK_PREFAULT", "0"),
                ("DLM_PACK_THROTTLE_MS", "25"),
                ("DLM_PACK_PROFILE", "1"),
            ],
            1,
        );
        assert_eq!(
            t.decoding,
            Decoding {
                threads: 64,
                piece_bytes: 4096
            }
        );
        assert!(t.row_groups.on_pool);
        assert_eq!(
            (t.batches_ahead, t.batch_text_bytes, t.chunk_text_bytes),
            (3, 8 << 10, 2 << 10)
        );
        assert_eq!(
            t.word_cache,
            WordCacheTuning {
                words: Some(0),
                prefault: false
            }
        );
        assert_eq!((t.throttle_ms, t.profile), (Some(25), true));
        // Not a number: the default, as before.
        let t = with(
            &[("DLM_PACK_AHEAD", "x"), ("DLM_PACK_WORD_CACHE", "many")],
            16,
        );
        assert_eq!((t.batches_ahead, t.word_cache.words), (32, None));
    }
}
