//! `dlm-data distill` end to end on the tiny teacher: the records, MCQ answers, ordering,
//! `--limit`, `--format jsonl`, kill -9 + resume byte-identity, `--shard I/N` + finalize
//! byte-identity, and every bad input failing with a clear message and a non-zero exit.

mod teacher_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dlm_data::distill::output::{finalize, list_parts, parts_dir};
use dlm_data::distill::OutFormat;
use serde_json::Value;
use teacher_support::{bin, copy_teacher, patch_json, small_sampler_args, teacher_dir};

/// `n` prompts: every third one plain, the others MCQ with 2..=5 options.
fn write_prompts(path: &Path, n: usize) {
    let mut s = String::new();
    for i in 0..n {
        let words = [
            "energy",
            "the cell",
            "water and light",
            "a prime number",
            "the planet",
        ];
        let q = format!(
            "Question {i}: explain {} in {} words.",
            words[i % 5],
            3 + i % 7
        );
        let v = if i % 3 == 0 {
            serde_json::json!({"id": format!("free-{i:03}"), "source": "fixture", "repo": "fixture/prompts",
                "commit": "0".repeat(40), "file": "p.jsonl", "row": i, "prompt": q})
        } else {
            let k = 2 + i % 4;
            let options: Vec<String> = (0..k).map(|o| format!("option {o} of {i}")).collect();
            let gold = ["A", "B", "C", "D", "E"][i % k];
            serde_json::json!({"id": format!("sciq-train-{i:06}"), "source": "sciq", "repo": "allenai/sciq",
                "commit": "a".repeat(40), "file": "data/train.parquet", "row": i, "prompt": q,
                "options": options, "gold": gold})
        };
        s.push_str(&v.to_string());
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn distill(teacher: &Path, prompts: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .args(["distill", "--teacher"])
        .arg(teacher)
        .arg("--prompts")
        .arg(prompts)
        .arg("--out")
        .arg(out)
        .args(with_defaults(extra))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// Small sampler settings unless `extra` sets them.
fn with_defaults(extra: &[&str]) -> Vec<String> {
    small_sampler_args(extra, "3")
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn fails(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
}

struct Setup {
    _d: tempfile::TempDir,
    dir: PathBuf,
    prompts: PathBuf,
}

fn setup(n: usize) -> Setup {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    let prompts = dir.join("prompts.jsonl");
    write_prompts(&prompts, n);
    Setup {
        _d: d,
        dir,
        prompts,
    }
}

#[test]
fn records_answers_order_limit_and_jsonl() {
    let s = setup(10);
    let out = s.dir.join("distilled.json");
    ok(&distill(teacher_dir(), &s.prompts, &out, &[]));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 10);
    let tok = tokenizers::Tokenizer::from_file(teacher_dir().join("tokenizer.json")).unwrap();
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["row"], i, "ordered by prompt order");
        let ids: Vec<u32> = r["response_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert!(ids.len() <= 8);
        assert_eq!(r["response"], tok.decode(&ids, true).unwrap());
        assert_eq!(r["gen"]["gen_length"], 8);
        assert_eq!(r["gen"]["remasking"], "low-confidence");
        assert_eq!(r["teacher"]["weights_sha256"].as_str().unwrap().len(), 64);
        assert_eq!(
            r["teacher"]["config_sha256"],
            dlm_data::util::sha256_file(&teacher_dir().join("config.json")).unwrap()
        );
        for k in [
            "id",
            "source",
            "repo",
            "commit",
            "file",
            "prompt",
            "gold",
            "correct",
            "answer_logprobs",
        ] {
            assert!(r.get(k).is_some(), "missing {k}");
        }
        if i % 3 == 0 {
            assert!(r["answer"].is_null() && r["answer_probs"].is_null() && r["correct"].is_null());
        } else {
            let k = 2 + i % 4;
            let probs = r["answer_probs"].as_object().unwrap();
            assert_eq!(probs.len(), k, "one probability per option");
            let sum: f64 = probs.values().map(|p| p.as_f64().unwrap()).sum();
            assert!((sum - 1.0).abs() < 1e-9);
            let lp = r["answer_logprobs"].as_object().unwrap();
            assert_eq!(lp.len(), k);
            assert!(lp.values().all(|x| x.as_f64().unwrap() < 0.0));
            let best = probs
                .iter()
                .max_by(|a, b| a.1.as_f64().unwrap().total_cmp(&b.1.as_f64().unwrap()))
                .unwrap()
                .0;
            assert_eq!(&r["answer"], best);
            assert_eq!(r["correct"], r["answer"] == r["gold"]);
        }
    }
    // --limit: the first N prompts, same bytes per record (their batches differ, the
    // results must not).
    let lim = s.dir.join("limited.jsonl");
    ok(&distill(
        teacher_dir(),
        &s.prompts,
        &lim,
        &["--limit", "4", "--format", "jsonl"],
    ));
    let lines: Vec<Value> = std::fs::read_to_string(&lim)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    for (a, b) in lines.iter().zip(recs) {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(a["response_ids"], b["response_ids"]);
        assert_eq!(a["answer"], b["answer"]);
    }
}

fn commits(part: &Path) -> usize {
    std::fs::read_to_string(part)
        .map(|s| s.lines().filter(|l| l.starts_with("{\"batch\":")).count())
        .unwrap_or(0)
}

#[test]
fn kill_9_resume_and_shards_are_byte_identical() {
    // Continuous batching (windows of 4 prompts: 9 units), then fixed batches (18 units).
    kill_resume_shards(&["--window-prompts", "4"], 9);
    kill_resume_shards(&["--no-early-exit"], 18);
}

fn kill_resume_shards(mode: &[&str], units: usize) {
    let s = setup(36);
    let mut args = vec![
        "--batch-size",
        "2",
        "--gen-length",
        "16",
        "--block-length",
        "8",
        "--steps",
        "16",
        "--temperature",
        "0.7",
        "--seed",
        "3",
    ];
    args.extend_from_slice(mode);
    let full = s.dir.join("full.json");
    ok(&distill(teacher_dir(), &s.prompts, &full, &args));
    let want = std::fs::read(&full).unwrap();

    // kill -9 once two batches are committed, add a torn half-record, rerun.
    let out = s.dir.join("resumed.json");
    let part = parts_dir(&out).join("00000-of-00001.jsonl");
    let mut child = Command::new(bin())
        .args(["distill", "--teacher"])
        .arg(teacher_dir())
        .arg("--prompts")
        .arg(&s.prompts)
        .arg("--out")
        .arg(&out)
        .args(with_defaults(&args))
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while commits(&part) < 2 && t0.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let done = commits(&part);
    assert!(done >= 2);
    if !out.exists() {
        assert!(done < units, "killed before the end");
    }
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&part)
        .unwrap();
    f.write_all(b"{\"id\":\"sciq-train-000001\",\"source\":\"sc")
        .unwrap();
    drop(f);
    ok(&distill(teacher_dir(), &s.prompts, &out, &args));
    assert_eq!(std::fs::read(&out).unwrap(), want, "resumed run differs");
    assert_eq!(commits(&part), units, "no unit committed twice");
    // Rerun with the same arguments: nothing to do, same bytes.
    ok(&distill(teacher_dir(), &s.prompts, &out, &args));
    assert_eq!(std::fs::read(&out).unwrap(), want);
    // Different arguments against the same parts are refused.
    let mut other = args.clone();
    other[9] = "4";
    fails(
        &distill(teacher_dir(), &s.prompts, &out, &other),
        2,
        "\"seed\":3} vs now {",
    );

    // Three workers, then finalize (what `merge` calls) and a whole-run finish: same bytes.
    let sharded = s.dir.join("sharded.json");
    for i in 0..3 {
        let sh = format!("{i}/3");
        let mut a = args.clone();
        a.extend(["--shard", &sh]);
        ok(&distill(teacher_dir(), &s.prompts, &sharded, &a));
        assert!(!sharded.exists(), "workers do not finalise");
    }
    let parts = list_parts(&parts_dir(&sharded)).unwrap();
    assert_eq!(parts.len(), 3);
    assert!(parts[1].ends_with("00001-of-00003.jsonl"));
    finalize(&parts, &sharded, OutFormat::Json).unwrap();
    assert_eq!(
        std::fs::read(&sharded).unwrap(),
        want,
        "sharded run differs"
    );
    std::fs::remove_file(&sharded).unwrap();
    ok(&distill(teacher_dir(), &s.prompts, &sharded, &args));
    assert_eq!(std::fs::read(&sharded).unwrap(), want);
}

#[test]
fn bad_inputs_fail_clearly() {
    let s = setup(4);
    let out = s.dir.join("o.json");
    // Malformed prompts line, named by number.
    let bad = s.dir.join("bad.jsonl");
    let mut text = std::fs::read_to_string(&s.prompts).unwrap();
    text.push_str("{\"id\": \"x\", \"prompt\": 3}\n");
    std::fs::write(&bad, text).unwrap();
    fails(&distill(teacher_dir(), &bad, &out, &[]), 1, "bad.jsonl:5");
    assert!(!out.exists());

    let t = |name: &str| copy_teacher(&s.dir.join(name));
    // Causal config without --bidirectional: refused (2); with it, accepted.
    let causal = t("causal");
    patch_json(
        &causal.join("config.json"),
        serde_json::json!({"is_causal": true}),
    );
    fails(
        &distill(&causal, &s.prompts, &out, &[]),
        2,
        "--bidirectional",
    );
    ok(&distill(
        &causal,
        &s.prompts,
        &out,
        &["--bidirectional", "--limit", "1"],
    ));
    // Mask id out of range; pad == mask.
    fails(
        &distill(teacher_dir(), &s.prompts, &out, &["--mask-id", "99999"]),
        2,
        "out of range",
    );
    let pad = tokenizers::Tokenizer::from_file(teacher_dir().join("tokenizer.json"))
        .unwrap()
        .token_to_id("<|pad|>")
        .unwrap()
        .to_string();
    fails(
        &distill(teacher_dir(), &s.prompts, &out, &["--mask-id", &pad]),
        2,
        "equals the mask id",
    );
    // Tokenizer larger than the embedding.
    let small = t("small");
    patch_json(
        &small.join("config.json"),
        serde_json::json!({"vocab_size": 256}),
    );
    fails(&distill(&small, &s.prompts, &out, &[]), 1, "does not fit");
    // Missing tensor, mismatched shape, unexpected tensor: each named.
    let deeper = t("deeper");
    patch_json(
        &deeper.join("config.json"),
        serde_json::json!({"num_hidden_layers": 3}),
    );
    fails(
        &distill(&deeper, &s.prompts, &out, &[]),
        1,
        "missing tensor `model.layers.2.input_layernorm.weight`",
    );
    let wider = t("wider");
    patch_json(
        &wider.join("config.json"),
        serde_json::json!({"intermediate_size": 100}),
    );
    fails(
        &distill(&wider, &s.prompts, &out, &[]),
        1,
        "tensor `model.layers.0.mlp.gate_proj.weight` in",
    );
    let shallow = t("shallow");
    patch_json(
        &shallow.join("config.json"),
        serde_json::json!({"num_hidden_layers": 1}),
    );
    fails(
        &distill(&shallow, &s.prompts, &out, &[]),
        1,
        "unexpected tensor `model.layers.1.",
    );
    // Sampler settings LLaDA asserts on.
    fails(
        &distill(teacher_dir(), &s.prompts, &out, &["--gen-length", "10"]),
        2,
        "multiple of --block-length",
    );
    fails(
        &distill(teacher_dir(), &s.prompts, &out, &["--device", "tpu"]),
        2,
        "--device",
    );
    assert!(!out.exists() || std::fs::read_to_string(&out).unwrap().starts_with('['));
}

#[test]
fn approximate_modes_are_opt_in_and_recorded() {
    let s = setup(4);
    let exact = s.dir.join("exact.json");
    ok(&distill(teacher_dir(), &s.prompts, &exact, &[]));
    // The fingerprint names the backend (cpu and cuda outputs never mix on resume).
    let part =
        std::fs::read_to_string(s.dir.join("exact.json.parts/00000-of-00001.jsonl")).unwrap();
    let header: Value = serde_json::from_str(part.lines().next().unwrap()).unwrap();
    assert_eq!(header["fingerprint"]["backend"], "cpu");
    // The GPU residual precision is a cuda-only fingerprint field.
    assert!(header["fingerprint"].get("gpu_residual").is_none());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&exact).unwrap()).unwrap();
    assert!(
        v[0]["gen"].get("approximate").is_none(),
        "exact records keep their shape: {}",
        v[0]["gen"]
    );
    // --threshold: recorded in every record; a resume with another threshold is refused.
    let out = s.dir.join("thr.json");
    let thr = [
        "--threshold",
        "0.5",
        "--gen-length",
        "8",
        "--block-length",
        "4",
    ];
    ok(&distill(teacher_dir(), &s.prompts, &out, &thr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for r in v.as_array().unwrap() {
        assert_eq!(r["gen"]["approximate"]["threshold"], 0.5, "{}", r["gen"]);
        assert_eq!(r["gen"]["approximate"]["cache"], "none");
        let ids = r["response_ids"].as_array().unwrap();
        assert!(ids.len() <= 8);
    }
    std::fs::remove_file(&out).unwrap();
    // Kill the finished file, keep the parts: another threshold must not reuse them.
    let mut other = thr.to_vec();
    other[1] = "0.6";
    assert!(s.dir.join("thr.json.parts").is_dir());
    fails(
        &distill(teacher_dir(), &s.prompts, &out, &other),
        2,
        "threshold",
    );
    // Bad settings: exit 2 with the reason, nothing written.
    let bad = s.dir.join("bad.json");
    fails(
        &distill(teacher_dir(), &s.prompts, &bad, &["--gpu-residual", "fp16"]),
        2,
        "gpu-residual",
    );
    fails(
        &distill(teacher_dir(), &s.prompts, &bad, &["--threshold", "0"]),
        2,
        "--threshold 0 must be in (0, 1]",
    );
    fails(
        &distill(
            teacher_dir(),
            &s.prompts,
            &bad,
            &["--threshold", "0.9", "--remasking", "random"],
        ),
        2,
        "low-confidence",
    );
    fails(
        &distill(teacher_dir(), &s.prompts, &bad, &["--cache", "dual"]),
        2,
        "GPU only",
    );
    fails(
        &distill(teacher_dir(), &s.prompts, &bad, &["--gemm-tune"]),
        2,
        "needs --device cuda",
    );
    // --cache-refresh K: only with a cache, K >= 1, and (like the cache) GPU only.
    fails(
        &distill(teacher_dir(), &s.prompts, &bad, &["--cache-refresh", "4"]),
        2,
        "--cache-refresh needs --kv-cache prefix or --kv-cache dual",
    );
    fails(
        &distill(
            teacher_dir(),
            &s.prompts,
            &bad,
            &["--cache", "dual", "--cache-refresh", "0"],
        ),
        2,
        "--cache-refresh must be ≥ 1",
    );
    fails(
        &distill(
            teacher_dir(),
            &s.prompts,
            &bad,
            &["--cache", "prefix", "--cache-refresh", "4"],
        ),
        2,
        "GPU only",
    );
    assert!(!bad.exists());
}

fn response_ids(path: &Path) -> Vec<Vec<u64>> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["response_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        })
        .collect()
}

fn summary(o: &Output) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "--json prints one line: {out}");
    serde_json::from_str(lines[0]).unwrap()
}

/// Early exit + continuous batching give the records of a full decode in fixed batches, byte
/// for byte, at temperature 0 and 1, exact and --threshold; and a record never depends on its
/// batch peers: every batch size gives the same bytes, with early exit or without.
#[test]
fn early_exit_records_equal_full_decode_at_every_batch_size() {
    let s = setup(24);
    let base = ["--gen-length", "16", "--block-length", "4", "--steps", "16"];
    // The random teacher seldom emits EOS: make its most frequent token an EoT, so that rows
    // stop at every block.
    let probe = s.dir.join("probe.json");
    let mut a = base.to_vec();
    a.push("--no-early-exit");
    ok(&distill(teacher_dir(), &s.prompts, &probe, &a));
    let mut freq = std::collections::BTreeMap::<u64, usize>::new();
    for ids in response_ids(&probe) {
        for t in ids {
            *freq.entry(t).or_default() += 1;
        }
    }
    let eot = freq
        .iter()
        .max_by_key(|(t, n)| (**n, u64::MAX - **t))
        .unwrap()
        .0
        .to_string();
    let mut saw_early = 0u64;
    for (i, mode) in [
        vec!["--temperature", "0"],
        vec!["--temperature", "1", "--seed", "5"],
        vec!["--threshold", "0.3"],
        vec!["--threshold", "0.3", "--temperature", "1"],
    ]
    .iter()
    .enumerate()
    {
        let mut args = base.to_vec();
        args.extend_from_slice(mode);
        args.extend(["--eot-id", &eot]);
        let run = |name: &str, extra: &[&str]| -> (Vec<u8>, Output) {
            let out = s.dir.join(format!("{i}-{name}.json"));
            let mut a = args.clone();
            a.extend_from_slice(extra);
            a.push("--json");
            let o = distill(teacher_dir(), &s.prompts, &out, &a);
            ok(&o);
            (std::fs::read(&out).unwrap(), o)
        };
        let (want, full) = run("fixed-b3", &["--no-early-exit", "--batch-size", "3"]);
        assert_eq!(summary(&full)["rows_finished_early"], 0);
        for b in ["1", "8"] {
            let (got, _) = run(
                &format!("fixed-b{b}"),
                &["--no-early-exit", "--batch-size", b],
            );
            assert!(
                got == want,
                "mode {mode:?}: --no-early-exit --batch-size {b} differs"
            );
        }
        for (b, w) in [("3", "24"), ("1", "5"), ("8", "7")] {
            let (got, o) = run(
                &format!("early-b{b}"),
                &["--batch-size", b, "--window-prompts", w],
            );
            assert!(
                got == want,
                "mode {mode:?}: early exit at --batch-size {b} differs"
            );
            let j = summary(&o);
            assert_eq!(j["early_exit"], true);
            assert_eq!(j["generated"], 24);
            assert_eq!(j["added_token_text"]["documents"], 0, "{j}");
            let early = j["rows_finished_early"].as_u64().unwrap();
            saw_early += early;
            let (run_, full_) = (
                j["row_forward_passes"].as_u64().unwrap(),
                j["row_forward_passes_full"].as_u64().unwrap(),
            );
            assert!(run_ <= full_, "{j}");
            assert_eq!(
                early > 0,
                j["forward_passes_saved"].as_u64().unwrap() > 0,
                "{j}"
            );
        }
    }
    assert!(saw_early > 0, "the EoT {eot} never stopped a row early");
}

/// Cron-grade output (#29): off a terminal, plain progress lines (the last one always) and no
/// ANSI codes; `--quiet` leaves stderr empty on success; `--json` is one line on stdout.
#[test]
fn log_files_get_plain_lines_and_quiet_is_quiet() {
    let s = setup(12);
    let run = |out: &str, global: &[&str]| {
        Command::new(bin())
            .args(global)
            .args(["distill", "--teacher"])
            .arg(teacher_dir())
            .arg("--prompts")
            .arg(&s.prompts)
            .arg("--out")
            .arg(s.dir.join(out))
            .args(with_defaults(&["--json"]))
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .output()
            .unwrap()
    };
    let o = run("a.json", &["--progress-interval", "1"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\x1b'), "ANSI codes in a log file:\n{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("distill worker 0/1: ") && l.contains("12/12 prompts committed")),
        "{err}"
    );
    assert!(err.contains("INFO"), "{err}");
    assert_eq!(summary(&o)["generated"], 12);
    let o = run("b.json", &["--quiet"]);
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "",
        "--quiet prints nothing on success"
    );
    assert_eq!(summary(&o)["records"], 12);
    assert_eq!(
        std::fs::read(s.dir.join("a.json")).unwrap(),
        std::fs::read(s.dir.join("b.json")).unwrap()
    );
}

/// A finished distilled.json whose `.parts/` journal was deleted (it looks like temp files) is
/// reported and refused, never silently redone; the same with an emptied `.parts/`; a foreign
/// file at `--out` likewise. Removing the output regenerates it, byte-identical.
#[test]
fn missing_parts_beside_a_finished_output_are_reported() {
    let s = setup(4);
    let t = teacher_support::teacher_dir();
    let out = s.dir.join("distilled.json");
    ok(&distill(t, &s.prompts, &out, &[]));
    let first = std::fs::read(&out).unwrap();
    // A rerun with its journal: a quick no-op, same bytes.
    ok(&distill(t, &s.prompts, &out, &[]));
    assert_eq!(std::fs::read(&out).unwrap(), first);
    let parts = dlm_data::distill::output::parts_dir(&out);
    std::fs::remove_dir_all(&parts).unwrap();
    let o = distill(t, &s.prompts, &out, &[]);
    fails(&o, 2, "distilled.json.parts");
    fails(&o, 2, "is missing");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        first,
        "the output is untouched"
    );
    assert!(!parts.exists(), "nothing recreated on refusal");
    // An emptied journal directory: the same.
    std::fs::create_dir(&parts).unwrap();
    fails(&distill(t, &s.prompts, &out, &[]), 2, "holds no part");
    assert_eq!(std::fs::read(&out).unwrap(), first);
    // A foreign file at --out: refused too, untouched.
    let foreign = s.dir.join("mine.json");
    std::fs::write(&foreign, b"[]").unwrap();
    fails(&distill(t, &s.prompts, &foreign, &[]), 2, "mine.json");
    assert_eq!(std::fs::read(&foreign).unwrap(), b"[]");
    // Removing the output regenerates it: the same bytes.
    std::fs::remove_file(&out).unwrap();
    ok(&distill(t, &s.prompts, &out, &[]));
    assert_eq!(std::fs::read(&out).unwrap(), first);
}
