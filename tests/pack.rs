//! `dlm-data pack --input`: tokens identical to the tokenizer's stream, every format read back
//! by its real Python reader, thread-count determinism (tokenizer and input-decoding threads),
//! kill -9 / resume byte-identity.

mod pack_common;

use std::path::Path;
use std::time::{Duration, Instant};

use pack_common::*;

fn corpus(dir: &Path, n: usize) -> (std::path::PathBuf, Vec<String>) {
    let d = docs(11, n);
    let mut texts: Vec<Option<String>> = d.iter().cloned().map(Some).collect();
    // An empty and a whitespace-only row: skipped and counted, not documents.
    texts.insert(3, Some(String::new()));
    texts.insert(7, Some("  \n ".into()));
    let p = dir.join("corpus.parquet");
    write_parquet(&p, &texts, 64);
    (p, d)
}

/// Run `pack` on `input` and assert it succeeded; returns its output.
fn pack(
    input: &Path,
    tok: &Path,
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let o = run_pack(input, tok, out, extra, env);
    ok(&o);
    o
}

#[test]
fn parquet_rows_are_the_token_stream_and_python_reads_them() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, docs) = corpus(d.path(), 300);
    let out = d.path().join("out");
    pack(
        &input,
        &tok,
        &out,
        &["--seq-len", "64", "--shard-bytes", "8KiB"],
        &[],
    );

    let stream = expected_stream(&tok, &docs);
    let rows = parquet_rows(&out);
    let n = stream.len() / 64;
    assert_eq!(rows.len(), n);
    assert!(rows.iter().all(|r| r.len() == 64));
    let flat: Vec<u32> = rows.concat();
    assert_eq!(flat, stream[..n * 64]);

    let idx = index(&out);
    assert_eq!(idx["complete"], true);
    assert_eq!(idx["format"], "parquet");
    assert_eq!(idx["dtype"], "uint32");
    assert_eq!(
        idx["tokenizer"]["eos_token"],
        dlm_data::fixtures::tokenizer::MC5_EOS
    );
    assert_eq!(idx["totals"]["documents"], docs.len());
    assert_eq!(idx["totals"]["skipped_empty"], 2);
    assert_eq!(idx["totals"]["dropped_tail_tokens"], stream.len() - n * 64);
    assert_eq!(idx["totals"]["rows"], n);
    assert!(idx["shards"].as_array().unwrap().len() > 3);
    assert_eq!(idx["provenance"][0]["row_start"], 0);
    assert_eq!(idx["provenance"][0]["row_end"], docs.len() + 2);
    assert_eq!(idx["provenance"][0]["documents"], docs.len());
    for s in idx["shards"].as_array().unwrap() {
        let f = out.join(s["file"].as_str().unwrap());
        let bytes = std::fs::read(&f).unwrap();
        assert_eq!(s["bytes"], bytes.len());
        assert_eq!(s["sha256"], dlm_data::util::sha256_hex(&bytes));
    }
    python_check(&out, &tok, &docs, "parquet");
}

#[test]
fn mds_and_megatron_are_read_by_their_python_readers() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, docs) = corpus(d.path(), 200);
    for fmt in ["mds", "megatron"] {
        let out = d.path().join(fmt);
        pack(
            &input,
            &tok,
            &out,
            &[
                "--seq-len",
                "48",
                "--shard-bytes",
                "6KiB",
                "--format",
                fmt,
                "--dtype",
                "auto",
            ],
            &[],
        );
        let idx = index(&out);
        assert_eq!(idx["format"], fmt);
        assert_eq!(idx["dtype"], "uint16", "fixture vocab fits uint16");
        if fmt == "mds" {
            let raw: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap())
                    .unwrap();
            assert_eq!(raw["version"], 2);
            assert_eq!(
                raw["shards"].as_array().unwrap().len(),
                idx["shards"].as_array().unwrap().len()
            );
            assert!(out.join("shard.00000.mds.zstd").is_file());
        } else {
            assert!(out.join("part-00000.idx").is_file());
        }
        python_check(&out, &tok, &docs, fmt);
    }
}

#[test]
fn byte_identical_whatever_the_thread_count() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, _) = corpus(d.path(), 400);
    let mut trees = Vec::new();
    // The third run decodes the input's row groups, cut into ~2 KB pieces, on 3 threads. The
    // next two tokenize without the shared word table (each thread caches in its own map) and
    // with one so small it fills at once (the per-thread maps take over). The last cuts the
    // input into 4 KB batches of ~1 KB tokenizing chunks, at most 2 batches ahead: many
    // chunks per batch joined back in row order, many batches in flight.
    let runs = [
        ("1", "1", None, None),
        ("2", "1", None, None),
        ("2", "3", None, None),
        ("2", "1", Some("0"), None),
        ("2", "1", Some("40"), None),
        ("3", "1", None, Some(("4", "1", "2"))),
    ];
    for (threads, read_threads, word_cache, batching) in runs {
        let out = d.path().join(format!(
            "t{threads}-r{read_threads}-w{word_cache:?}-b{batching:?}"
        ));
        let (batch_kb, chunk_kb, ahead) = batching.unwrap_or(("4096", "256", "6"));
        pack(
            &input,
            &tok,
            &out,
            &[
                "--seq-len",
                "32",
                "--shard-bytes",
                "4KiB",
                "--shuffle-seed",
                "5",
            ],
            &[
                ("RAYON_NUM_THREADS", threads),
                ("DLM_PACK_READ_THREADS", read_threads),
                ("DLM_PACK_READ_PIECE_BYTES", "2000"),
                ("DLM_PACK_WORD_CACHE", word_cache.unwrap_or("1500000")),
                ("DLM_PACK_BATCH_KB", batch_kb),
                ("DLM_PACK_CHUNK_KB", chunk_kb),
                ("DLM_PACK_AHEAD", ahead),
            ],
        );
        trees.push(tree(&out));
    }
    assert!(trees[0].len() > 3);
    for (k, t) in trees.iter().enumerate().skip(1) {
        assert_eq!(&trees[0], t, "run {:?}", runs[k]);
    }
}

/// `--threads N` sizes the pool whatever `RAYON_NUM_THREADS` says (the profile line names the
/// pool every count was derived from) and changes no byte; 0 threads is refused before any
/// work.
#[test]
fn threads_flag_sizes_the_pool_and_changes_no_byte() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, _) = corpus(d.path(), 200);
    let args = ["--seq-len", "32", "--shard-bytes", "4KiB"];
    let env = [("RAYON_NUM_THREADS", "1"), ("DLM_PACK_PROFILE", "1")];
    let one = d.path().join("env-1");
    let o = pack(&input, &tok, &one, &args, &env);
    assert!(stderr(&o).contains(", 1 threads |"), "{}", stderr(&o));
    let three = d.path().join("flag-3");
    let o = pack(
        &input,
        &tok,
        &three,
        &[&args[..], &["--threads", "3"]].concat(),
        &env,
    );
    assert!(stderr(&o).contains(", 3 threads |"), "{}", stderr(&o));
    assert_eq!(tree(&one), tree(&three));
    let zero = d.path().join("flag-0");
    let o = run_pack(
        &input,
        &tok,
        &zero,
        &[&args[..], &["--threads", "0"]].concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!zero.exists());
}

/// `--zstd-level`: the same rows at any level, the level recorded in `args` (the default
/// included), a rerun at another level into a complete output refused as changed settings,
/// and a level parquet cannot take, or a format without it, refused before any work.
#[test]
fn zstd_level_changes_only_the_compression_and_is_recorded() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, _) = corpus(d.path(), 300);
    let args = ["--seq-len", "64", "--shard-bytes", "8KiB"];
    let default = d.path().join("default");
    pack(&input, &tok, &default, &args, &[]);
    let l19 = d.path().join("l19");
    pack(
        &input,
        &tok,
        &l19,
        &[&args[..], &["--zstd-level", "19"]].concat(),
        &[],
    );
    assert_eq!(index(&default)["args"]["zstd_level"], 1);
    assert_eq!(index(&l19)["args"]["zstd_level"], 19);
    assert_eq!(parquet_rows(&default), parquet_rows(&l19));
    let (a, b) = (tree(&default), tree(&l19));
    let shard = a.keys().find(|k| k.ends_with(".parquet")).unwrap();
    assert_ne!(a[shard], b[shard], "level 19 wrote level 1's bytes");

    // Rerun without the flag: each output continues at the level it records (here: complete).
    for out in [&default, &l19] {
        let o = pack(&input, &tok, out, &args, &[]);
        assert!(stderr(&o).contains("already complete"), "{}", stderr(&o));
    }
    assert_eq!(tree(&l19), b);
    // An index from before the flag (no `zstd_level`: its shards are level 3) is found
    // complete too, not refused as a different command.
    let l3 = d.path().join("l3");
    pack(
        &input,
        &tok,
        &l3,
        &[&args[..], &["--zstd-level", "3"]].concat(),
        &[],
    );
    let mut v = index(&l3);
    v["args"].as_object_mut().unwrap().remove("zstd_level");
    std::fs::write(
        l3.join("index.json"),
        serde_json::to_vec_pretty(&v).unwrap(),
    )
    .unwrap();
    let o = pack(&input, &tok, &l3, &args, &[]);
    assert!(stderr(&o).contains("already complete"), "{}", stderr(&o));

    // Into the complete level-1 output at level 3: different settings, refused, untouched.
    let o = run_pack(
        &input,
        &tok,
        &default,
        &[&args[..], &["--zstd-level", "3"]].concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(tree(&default), a);

    for (extra, needle) in [
        (&["--zstd-level", "0"][..], "--zstd-level"),
        (&["--zstd-level", "23"][..], "--zstd-level"),
        (
            &["--zstd-level", "3", "--format", "megatron"][..],
            "--format megatron",
        ),
    ] {
        let out = d.path().join("refused");
        let o = run_pack(&input, &tok, &out, &[&args[..], extra].concat(), &[]);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{extra:?}: {}", stderr(&o));
        assert!(!out.join("index.json").exists(), "{extra:?} left an index");
    }
}

#[test]
fn shuffle_permutes_rows_within_shards() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, _) = corpus(d.path(), 200);
    let a = d.path().join("a");
    let b = d.path().join("b");
    pack(
        &input,
        &tok,
        &a,
        &["--seq-len", "32", "--shard-bytes", "4KiB"],
        &[],
    );
    pack(
        &input,
        &tok,
        &b,
        &[
            "--seq-len",
            "32",
            "--shard-bytes",
            "4KiB",
            "--shuffle-seed",
            "1",
        ],
        &[],
    );
    let (ra, rb) = (parquet_rows(&a), parquet_rows(&b));
    assert_ne!(ra, rb);
    let (mut sa, mut sb) = (ra.clone(), rb.clone());
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb, "same rows, other order");
    // Bounded: the first shard's rows stay in the first shard.
    let per = 4096 / (32 * 4);
    let mut fa = ra[..per].to_vec();
    let mut fb = rb[..per].to_vec();
    fa.sort();
    fb.sort();
    assert_eq!(fa, fb);
}

#[test]
fn pad_last_keeps_the_tail() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, docs) = corpus(d.path(), 50);
    let out = d.path().join("out");
    pack(&input, &tok, &out, &["--seq-len", "64", "--pad-last"], &[]);
    let stream = expected_stream(&tok, &docs);
    let rows = parquet_rows(&out);
    assert_eq!(rows.len(), stream.len().div_ceil(64));
    let flat = rows.concat();
    assert_eq!(flat[..stream.len()], stream[..]);
    let pad = tokenizers::Tokenizer::from_file(tok.join("tokenizer.json"))
        .unwrap()
        .token_to_id(dlm_data::fixtures::tokenizer::MC5_EOS)
        .unwrap();
    assert!(flat[stream.len()..].iter().all(|t| *t == pad));
    assert_eq!(index(&out)["totals"]["dropped_tail_tokens"], 0);
}

#[test]
fn kill_9_then_rerun_resumes_to_identical_bytes() {
    kill_then_resume(&[
        "--seq-len",
        "32",
        "--shard-bytes",
        "2KiB",
        "--format",
        "mds",
    ]);
}

#[test]
fn kill_9_then_rerun_resumes_streamed_parquet_to_identical_bytes() {
    // 160 rows per shard: each shard reaches the writer as two 64-row chunks while packing
    // goes on, then its last 32 rows.
    kill_then_resume(&["--seq-len", "8", "--shard-bytes", "5KiB"]);
}

#[test]
fn streamed_parquet_shards_hold_the_token_stream() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, docs) = corpus(d.path(), 300);
    let out = d.path().join("out");
    // 1 MiB shards at seq-len 8: one shard, written as 64-row chunks plus the rest.
    pack(
        &input,
        &tok,
        &out,
        &["--seq-len", "8", "--shard-bytes", "1MiB"],
        &[],
    );
    let stream = expected_stream(&tok, &docs);
    let n = stream.len() / 8;
    assert!(
        n > 3 * dlm_data::shards::parquet::CHUNK_ROWS,
        "{n} rows: too few to stream"
    );
    let rows = parquet_rows(&out);
    assert_eq!(rows.concat(), stream[..n * 8]);
    let idx = index(&out);
    assert_eq!(idx["shards"].as_array().unwrap().len(), 1);
    assert_eq!(idx["shards"][0]["rows"], n);
    assert_eq!(idx["shards"][0]["tokens"], n * 8);
    assert_eq!(idx["totals"]["rows"], n);
    assert_eq!(idx["totals"]["tokens"], n * 8);
    python_check(&out, &tok, &docs, "parquet");
}

fn kill_then_resume(args: &[&str]) {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, _) = corpus(d.path(), 400);
    let whole = d.path().join("whole");
    pack(&input, &tok, &whole, args, &[]);

    let out = d.path().join("killed");
    let mut cmd = pack_cmd(&input, &tok, &out, args);
    cmd.env("DLM_PACK_THROTTLE_MS", "150")
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // Kill once a few shards are journaled.
    let t0 = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(out.join("index.json")) {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            // MDS nests ours under "dlm_data" in MosaicML's index.json.
            let v = if v.get("dlm_data").is_some() {
                v["dlm_data"].clone()
            } else {
                v
            };
            let n = v["shards"].as_array().map_or(0, |a| a.len());
            if n >= 3 {
                assert_eq!(v["complete"], false);
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    child.wait().unwrap();
    let partial = index(&out);
    assert_eq!(partial["complete"], false);
    let done_before = partial["shards"].as_array().unwrap().len();
    assert!(done_before < index(&whole)["shards"].as_array().unwrap().len());

    // Resumed mid-file with the input decoded in ~2 KB pieces on 3 threads.
    let o = pack(
        &input,
        &tok,
        &out,
        args,
        &[
            ("DLM_PACK_READ_THREADS", "3"),
            ("DLM_PACK_READ_PIECE_BYTES", "2000"),
        ],
    );
    assert!(stderr(&o).contains("resuming after"), "{}", stderr(&o));
    assert_eq!(tree(&whole), tree(&out));

    // A third run finds it complete and changes nothing.
    let o = pack(&input, &tok, &out, args, &[]);
    assert!(stderr(&o).contains("already complete"));
    assert_eq!(tree(&whole), tree(&out));

    // Different arguments into the same directory: refused (exit 2), nothing touched.
    let o = run_pack(
        &input,
        &tok,
        &out,
        &["--seq-len", "64", "--format", "mds"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(tree(&whole), tree(&out));
}

#[test]
fn json_summary_and_eos_choice() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let (input, _) = corpus(d.path(), 30);
    let out = d.path().join("out");
    let o = run_pack(
        &input,
        &tok.join("tokenizer.json"),
        &out,
        &["--seq-len", "16", "--json"],
        &[],
    );
    ok(&o);
    let line = String::from_utf8(o.stdout.clone()).unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["rows"], index(&out)["totals"]["rows"]);
    assert_eq!(v["eos_token"], dlm_data::fixtures::tokenizer::MC5_EOS);
    assert!(stderr(&o).contains("tokenizer_config.json eos_token"));
    // Unknown EOS is a usage error.
    let o = run_pack(
        &input,
        &tok,
        &d.path().join("x"),
        &["--eos-token", "<nope>"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("<nope>"));
}
