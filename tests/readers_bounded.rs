//! Every reader is bounded while it reads and reads regular files only (issue 42, items 2–3):
//! bombs of each kind — a `.jsonl.zst` / `.jsonl.gz` line and a `.json.zst` array element that
//! expand past the memory cap, a multi-GiB line in a sparse file, an MDS shard decompressing
//! past the cap — each run through the real binary under a hard address-space cap
//! (`setrlimit(RLIMIT_AS)`, 1 GiB) and each ends in the clean error naming the file, the
//! limit and the flag; FIFOs and devices are refused at once (exit 2), never waited on; and
//! `inspect` streams a large distilled.json and a multi-shard output in bounded memory
//! (peak RSS from `wait4` of the child).

mod pack_common;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pack_common::*;

/// The address-space cap the bombs run under.
const CAP: u64 = 1 << 30;
/// What each bomb expands to: past the cap, so reading it whole could never succeed.
const BOMB: u64 = 3 << 29;

/// Exit code, stderr and peak RSS (KiB) of `dlm-data ARGS` under the address-space cap
/// `cap` (none: `None`), killed after 120 s (a hang fails the test instead of blocking it).
/// The peak is the child's own `VmHWM` (/proc, sampled every 5 ms until it exits): the
/// rusage of a forked child would count the test process's pages it was forked from.
fn run_capped(args: &[&str], cap: Option<u64>) -> (Option<i32>, String, u64) {
    let mut c = Command::new(bin());
    c.args(args)
        .env("RUST_LOG", "warn")
        // glibc reserves 64 MiB of address space per malloc arena; keep them few, as a
        // memory-capped batch job would.
        .env("MALLOC_ARENA_MAX", "2")
        .env("RAYON_NUM_THREADS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(cap) = cap {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            c.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: cap,
                    rlim_max: cap,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = c.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let t0 = Instant::now();
    let (mut status, mut ru): (libc::c_int, libc::rusage) = (0, unsafe { std::mem::zeroed() });
    let status_file = format!("/proc/{pid}/status");
    let exe = std::fs::canonicalize(bin()).unwrap();
    let mut hwm_kib = 0u64;
    loop {
        // Only once the child runs dlm-data (after exec), its own memory.
        if std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe) {
            if let Ok(st) = std::fs::read_to_string(&status_file) {
                if let Some(l) = st.lines().find(|l| l.starts_with("VmHWM:")) {
                    let kib: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
                    hwm_kib = hwm_kib.max(kib);
                }
            }
        }
        // SAFETY: wait4 on our own child, with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("dlm-data {args:?} still running after 120 s (blocked on a file?)");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, reader.join().unwrap(), hwm_kib)
}

/// `n` bytes of `b` through `w`, in 1 MiB writes.
fn fill(w: &mut impl Write, b: u8, n: u64) {
    let chunk = vec![b; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        w.write_all(&chunk[..k]).unwrap();
        left -= k as u64;
    }
}

/// A zstd file holding `head`, then `n` bytes of `b`, then `tail` (small on disk).
fn zst_bomb(path: &Path, head: &[u8], b: u8, n: u64, tail: &[u8]) {
    let mut e = zstd::stream::write::Encoder::new(std::fs::File::create(path).unwrap(), 1).unwrap();
    e.write_all(head).unwrap();
    fill(&mut e, b, n);
    e.write_all(tail).unwrap();
    e.finish().unwrap();
}

fn expect_clean_refusal(code: Option<i32>, err: &str, file: &str, flag: &str) {
    assert_eq!(code, Some(1), "a clean error, not an abort:\n{err}");
    assert!(err.contains(file), "names the file {file}:\n{err}");
    assert!(err.contains(flag), "names the flag {flag}:\n{err}");
    assert!(err.contains("64MiB"), "names the limit:\n{err}");
    assert!(
        !err.contains("memory allocation") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn pack_refuses_compressed_bombs_within_the_cap() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let line = t.path().join("line.jsonl.zst");
    zst_bomb(&line, b"{\"text\":\"", b'a', BOMB, b"\"}\n");
    let elem = t.path().join("elem.json.zst");
    zst_bomb(&elem, b"[{\"text\":\"", b'a', BOMB, b"\"}]");
    let gz = t.path().join("line.jsonl.gz");
    {
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        e.write_all(b"{\"text\":\"ok\"}\n{\"text\":\"").unwrap();
        fill(&mut e, b'a', BOMB);
        e.finish().unwrap();
    }
    assert!(std::fs::metadata(&line).unwrap().len() < 1 << 20);
    for (input, what) in [
        (&line, "row 0 (line 1)"),
        (&elem, "row 0 (array element)"),
        (&gz, "row 1 (line 2)"),
    ] {
        let out = t.path().join("out");
        let a = pack_args(input, &tok, &out, &[]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, err, _) = run_capped(&a, Some(CAP));
        expect_clean_refusal(
            code,
            &err,
            input.file_name().unwrap().to_str().unwrap(),
            "--max-row-bytes",
        );
        assert!(err.contains(what), "names the row ({what}):\n{err}");
        let _ = std::fs::remove_dir_all(&out);
    }
}

#[test]
fn inspect_refuses_a_huge_line_and_an_mds_bomb_within_the_cap() {
    let t = tempfile::tempdir().unwrap();
    // A distilled.jsonl whose first line is 1.5 GiB of NULs (a sparse file: no disk).
    let big = t.path().join("distilled.jsonl");
    {
        let mut f = std::fs::File::create(&big).unwrap();
        f.write_all(b"{\"response\":\"").unwrap();
        f.set_len(BOMB).unwrap();
    }
    let (code, err, _) = run_capped(&["inspect", big.to_str().unwrap()], Some(CAP));
    expect_clean_refusal(code, &err, "distilled.jsonl", "--max-record-bytes");

    // An MDS output whose shard is replaced by one decompressing to 1.5 GiB.
    let tok = tokenizer(t.path());
    let input = t.path().join("in.jsonl");
    let lines: String = docs(1, 20)
        .iter()
        .map(|d| serde_json::json!({ "text": d }).to_string() + "\n")
        .collect();
    std::fs::write(&input, lines).unwrap();
    let out = t.path().join("mds");
    ok(&run_pack(
        &input,
        &tok,
        &out,
        &["--format", "mds", "--seq-len", "64"],
        &[],
    ));
    let shard = out.join("shard.00000.mds.zstd");
    assert!(shard.is_file());
    zst_bomb(&shard, &[], 0, BOMB, &[]);
    let (code, err, _) = run_capped(&["inspect", out.to_str().unwrap()], Some(CAP));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("shard.00000.mds.zstd") && err.contains("decompression bomb"),
        "{err}"
    );
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn fifos_and_devices_are_refused_never_waited_on() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let fifo = t.path().join("in.jsonl");
    mkfifo(&fifo);
    let zero = t.path().join("zero.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for input in [&fifo, &zero] {
        let out = t.path().join("out");
        let a = pack_args(input, &tok, &out, &[]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, err, _) = run_capped(&a, None);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
        assert!(!out.join("index.json").exists());
        let (code, err, _) = run_capped(&["inspect", input.to_str().unwrap()], None);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
    // A listed shard that is a FIFO: an error naming it, not a hang.
    let input = t.path().join("ok.jsonl");
    std::fs::write(&input, "{\"text\":\"one two three\"}\n").unwrap();
    let out = t.path().join("pq");
    ok(&run_pack(
        &input,
        &tok,
        &out,
        &["--seq-len", "2", "--pad-last"],
        &[],
    ));
    let idx = index(&out);
    let shard = out.join(idx["shards"][0]["file"].as_str().unwrap());
    std::fs::remove_file(&shard).unwrap();
    mkfifo(&shard);
    let (code, err, _) = run_capped(&["inspect", out.to_str().unwrap()], None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("FIFO"), "{err}");
}

#[test]
fn inspect_streams_a_large_distilled_json_in_bounded_memory() {
    // ~200 MB of records (the 263 MB distilled.json peaked at 1.6 GB read whole).
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("distilled.json");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    w.write_all(b"[").unwrap();
    let ids: Vec<u32> = (0..2000).map(|i| 1000 + i).collect();
    let text = "word ".repeat(2000);
    let n = 10_000;
    for k in 0..n {
        if k > 0 {
            w.write_all(b",\n").unwrap();
        }
        let r = serde_json::json!({
            "id": format!("r{k}"), "source": "s", "prompt": "p", "response": text,
            "response_ids": ids, "stop": "eos", "answer": null, "gold": null,
            "teacher": {"weights_sha256": "ab"}
        });
        serde_json::to_writer(&mut w, &r).unwrap();
    }
    w.write_all(b"]").unwrap();
    drop(w);
    let size = std::fs::metadata(&p).unwrap().len();
    assert!(size > 150 << 20, "{size}");
    let (code, err, rss_kib) = run_capped(&["inspect", p.to_str().unwrap(), "--json"], None);
    assert_eq!(code, Some(0), "{err}");
    assert!(rss_kib > 0, "VmHWM was never sampled");
    // Streaming holds one record: far below the file's size (read whole it was ~6x it).
    assert!(
        rss_kib < 64 << 10,
        "peak RSS {} MiB for a {} MiB distilled.json",
        rss_kib >> 10,
        size >> 20
    );
}

#[test]
fn an_oversized_lock_is_refused_before_it_is_parsed() {
    // A lock of deeply nested arrays (the fuzzed 19 MB one took >10 s to parse, twice): past
    // the lock bound (16 MiB) it is refused before parsing, naming the file and the limit.
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("m.toml");
    std::fs::copy("manifests/base.toml", &m).unwrap();
    let lock = t.path().join("m.lock");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&lock).unwrap());
        w.write_all(b"version = 1\nname = [").unwrap();
        let elem = b"[[[[[1]]]]], ";
        for _ in 0..(17 << 20) / elem.len() {
            w.write_all(elem).unwrap();
        }
        w.write_all(b"1]\n").unwrap();
    }
    let t0 = Instant::now();
    let home = t.path().join("hf");
    let (code, err, _) = run_capped(
        &[
            "fetch",
            "--manifest",
            m.to_str().unwrap(),
            "--locked",
            "--cache",
            home.to_str().unwrap(),
        ],
        Some(CAP),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("m.lock") && err.contains("16MiB"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

#[test]
fn a_compressed_parquet_bomb_is_refused_at_its_temp_bound() {
    // A `.parquet.zst` is decompressed into a temporary copy (parquet needs random access):
    // bounded by --max-decompressed-bytes, never filling the disk.
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let bomb = t.path().join("big.parquet.zst");
    zst_bomb(&bomb, b"PAR1", 0, 8 << 20, b"PAR1");
    let out = t.path().join("out");
    let a = pack_args(&bomb, &tok, &out, &["--max-decompressed-bytes", "4MiB"]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, err, _) = run_capped(&a, Some(CAP));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("big.parquet.zst")
            && err.contains("4MiB")
            && err.contains("--max-decompressed-bytes"),
        "{err}"
    );
    // Nothing left looking complete (the journal pack opens at the start may be there).
    if out.join("index.json").exists() {
        assert_eq!(index(&out)["complete"], false);
    }
    // The temporary copy is gone.
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.contains(".parquet.tmp") && n.starts_with(".dlm-data-")
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.len() >= 4 << 20))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A large output made cheaply: pack a small one (for its index.json), then replace its shards
/// by `shards` shards of `rows` rows × `seq` pseudo-random ids each, written by the project's
/// own shard writer, and index.json's shard list and totals by theirs (no tokenizing).
fn large_output(
    t: &Path,
    format: dlm_data::shards::ShardFormat,
    shards: usize,
    rows: usize,
    seq: usize,
) -> std::path::PathBuf {
    use dlm_data::shards::{write_shard, Column, Dtype, RowBatch, ShardCodec};
    let tok = tokenizer(t);
    let input = t.join("small.jsonl");
    std::fs::write(&input, "{\"text\":\"one two three four five six\"}\n").unwrap();
    let out = t.join(format!("large-{}", format.name()));
    ok(&run_pack(
        &input,
        &tok,
        &out,
        &["--format", format.name(), "--seq-len", "2", "--pad-last"],
        &[],
    ));
    let mut idx = index(&out);
    for s in idx["shards"].as_array().unwrap() {
        std::fs::remove_file(out.join(s["file"].as_str().unwrap())).unwrap();
        for (f, _) in s["extra_files"].as_object().into_iter().flatten() {
            std::fs::remove_file(out.join(f)).unwrap();
        }
    }
    let vocab = idx["tokenizer"]["vocab_size"].as_u64().unwrap().max(2);
    let mut rng = dlm_data::util::SplitMix(7);
    let (mut entries, mut tokens) = (Vec::new(), 0u64);
    for k in 0..shards {
        let batch = RowBatch {
            input_ids: (0..rows)
                .map(|_| (0..seq).map(|_| rng.below(vocab) as u32).collect())
                .collect(),
            columns: vec![
                (
                    "doc_offsets".into(),
                    Column::U32List(vec![vec![0, seq as u32]; rows]),
                ),
                ("source".into(), Column::Str(vec!["small".into(); rows])),
            ],
        };
        let w = write_shard(
            ShardCodec {
                format,
                dtype: Dtype::U32,
                zstd_level: 1,
            },
            dlm_data::tuning::RowGroups::INLINE,
            &out,
            k,
            &batch,
        )
        .unwrap();
        tokens += w.entry.tokens;
        entries.push(serde_json::to_value(&w.entry).unwrap());
    }
    let n_rows = (shards * rows) as u64;
    idx["shards"] = serde_json::Value::Array(entries);
    idx["seq_len"] = serde_json::json!(seq);
    let tot = &mut idx["totals"];
    tot["rows"] = serde_json::json!(n_rows);
    tot["tokens"] = serde_json::json!(tokens);
    tot["documents"] = serde_json::json!(n_rows);
    tot["tokens_by_source"] = serde_json::json!({ "small": tokens });
    std::fs::write(
        out.join("index.json"),
        serde_json::to_vec_pretty(&idx).unwrap(),
    )
    .unwrap();
    out
}

/// Peak RSS of `inspect` on an output holding 1 GiB of token ids (256 Mi uint32 ids in 32
/// shards of 32 MiB, pack's default shard size): one shard decoded at a time, so far below
/// the output's size (issue 42: under 256 MiB).
fn inspect_peak_on_1gib(format: dlm_data::shards::ShardFormat) {
    let t = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let out = large_output(t.path(), format, 32, 4096, 2048);
    let made = t0.elapsed();
    let disk: u64 = std::fs::read_dir(&out)
        .unwrap()
        .chain(std::fs::read_dir(out.join("data")).into_iter().flatten())
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    let t1 = Instant::now();
    let (code, err, rss_kib) = run_capped(&["inspect", out.to_str().unwrap(), "--json"], None);
    assert_eq!(code, Some(0), "{err}");
    assert!(rss_kib > 0, "VmHWM was never sampled");
    eprintln!(
        "inspect {}: 1 GiB of ids ({} MiB on disk, made in {:.1} s): peak RSS {} MiB in {:.1} s",
        format.name(),
        disk >> 20,
        made.as_secs_f64(),
        rss_kib >> 10,
        t1.elapsed().as_secs_f64()
    );
    assert!(
        rss_kib < 256 << 10,
        "peak RSS {} MiB for inspect of a 1 GiB {} output",
        rss_kib >> 10,
        format.name()
    );
}

#[test]
fn inspect_of_a_1gib_megatron_output_peaks_under_256mib() {
    inspect_peak_on_1gib(dlm_data::shards::ShardFormat::Megatron);
}

#[test]
fn inspect_of_a_1gib_parquet_output_peaks_under_256mib() {
    inspect_peak_on_1gib(dlm_data::shards::ShardFormat::Parquet);
}
