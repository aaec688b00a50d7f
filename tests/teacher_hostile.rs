//! Hostile teachers and prompts (issue 18): every case ends with a clear error naming the
//! file, field, tensor or prompt id and exit 1 (2 for bad usage) — never a panic (101), an
//! abort (134) or a hang — and leaves no hidden temp file and no output looking complete.

mod teacher_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dlm_data::fixtures::teacher::rewrite_tensor;
use teacher_support::{bin, copy_teacher, patch_json, small_sampler_args, teacher_dir};

fn write_prompts(path: &Path, prompts: &[(&str, String)]) {
    let mut s = String::new();
    for (id, p) in prompts {
        s.push_str(&serde_json::json!({"id": id, "prompt": p}).to_string());
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn small_prompts(path: &Path) {
    let p: Vec<(&str, String)> = ["p-0", "p-1", "p-2"]
        .iter()
        .map(|id| (*id, format!("Explain {id} briefly.")))
        .collect();
    write_prompts(path, &p);
}

/// Run distill with small sampler settings (unless `extra` sets them), at most 120 s.
fn distill(teacher: &Path, prompts: &Path, out: &Path, extra: &[&str]) -> Output {
    let args = small_sampler_args(extra, "2");
    let mut child = Command::new(bin())
        .args(["distill", "--teacher"])
        .arg(teacher)
        .arg("--prompts")
        .arg(prompts)
        .arg("--out")
        .arg(out)
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("distill {args:?} hung (killed after 120 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Exit `code`, `needles` all in stderr, no output file, no hidden temp file in `dir`.
fn fails(o: &Output, code: i32, needles: &[&str], out: &Path) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in:\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "{} exists after a failure", out.display());
    // A fresh run that failed before its first batch leaves no part behind either.
    let parts = dlm_data::distill::output::parts_dir(out);
    assert!(!parts.exists(), "{} left behind", parts.display());
    no_temp_files(out.parent().unwrap());
}

fn no_temp_files(dir: &Path) {
    for e in walk(dir) {
        let n = e.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !n.contains(".tmp-"),
            "temp file left behind: {}",
            e.display()
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk(&p));
        }
        v.push(p);
    }
    v
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "exit {:?}\n{err}", o.status.code());
    err
}

fn records(out: &Path) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(out).unwrap())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn hostile_config_values_are_refused_naming_file_and_field() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    small_prompts(&prompts);
    let out = d.path().join("o.json");
    let huge_dim = 1u64 << 62;
    for (i, (patch, field)) in [
        (
            serde_json::json!({"num_hidden_layers": 10_000_000}),
            "num_hidden_layers",
        ),
        (
            serde_json::json!({"num_hidden_layers": 1_000_000_000u64}),
            "num_hidden_layers",
        ),
        (serde_json::json!({"head_dim": huge_dim}), "head_dim"),
        (
            serde_json::json!({"num_attention_heads": huge_dim, "num_key_value_heads": huge_dim}),
            "num_attention_heads",
        ),
        (
            serde_json::json!({"intermediate_size": u64::MAX}),
            "intermediate_size",
        ),
        (
            serde_json::json!({"eos_token_id": 1u64 << 32}),
            "eos_token_id",
        ),
        (
            serde_json::json!({"eos_token_id": (1u64 << 32) + 5}),
            "token id 4294967301",
        ),
        (
            serde_json::json!({"pad_token_id": 1u64 << 32}),
            "pad_token_id",
        ),
        (
            serde_json::json!({"mask_token_id": (1u64 << 32) + 5}),
            "mask_token_id",
        ),
        (serde_json::json!({"rms_norm_eps": -1e-6}), "rms_norm_eps"),
        (serde_json::json!({"rope_theta": 0}), "rope_theta"),
        (
            serde_json::json!({"max_position_embeddings": -1}),
            "max_position_embeddings",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let t = copy_teacher(&d.path().join(format!("t{i}")));
        patch_json(&t.join("config.json"), patch.clone());
        let o = distill(&t, &prompts, &out, &[]);
        fails(&o, 1, &["config.json", field], &out);
    }
}

#[test]
fn non_finite_weights_are_named_by_tensor_and_overflowing_logits_by_prompt() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    small_prompts(&prompts);
    let out = d.path().join("o.json");
    // NaN in a layer weight; +inf in the LM head.
    let nan = copy_teacher(&d.path().join("nan"));
    rewrite_tensor(&nan, "model.layers.1.mlp.down_proj.weight", |i, v| {
        if i == 7 {
            f32::NAN
        } else {
            v
        }
    })
    .unwrap();
    let o = distill(&nan, &prompts, &out, &[]);
    fails(
        &o,
        1,
        &[
            "tensor `model.layers.1.mlp.down_proj.weight`",
            "model.safetensors",
            "NaN",
            "non-finite",
        ],
        &out,
    );
    let inf = copy_teacher(&d.path().join("inf"));
    rewrite_tensor(&inf, "lm_head.weight", |i, v| {
        if i == 3 {
            f32::INFINITY
        } else {
            v
        }
    })
    .unwrap();
    let o = distill(&inf, &prompts, &out, &[]);
    fails(&o, 1, &["tensor `lm_head.weight`", "inf"], &out);
    // Finite but huge final norm and LM head (bf16 max is 3.39e38): the logits overflow
    // f32. Named by prompt id, line and step.
    let big = copy_teacher(&d.path().join("big"));
    rewrite_tensor(&big, "model.norm.weight", |_, _| 3.0e38).unwrap();
    rewrite_tensor(&big, "lm_head.weight", |i, _| {
        if i % 2 == 0 {
            3.0e38
        } else {
            -3.0e38
        }
    })
    .unwrap();
    let o = distill(&big, &prompts, &out, &[]);
    fails(
        &o,
        1,
        &[
            "prompts.jsonl:",
            "prompt \"p-",
            "non-finite logit",
            "at step 0",
        ],
        &out,
    );
}

#[test]
fn chat_template_fuel_and_type_are_enforced() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    small_prompts(&prompts);
    let out = d.path().join("o.json");
    let looping = copy_teacher(&d.path().join("loop"));
    patch_json(
        &looping.join("tokenizer_config.json"),
        serde_json::json!({"chat_template":
            "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}x"}),
    );
    let start = Instant::now();
    let o = distill(&looping, &prompts, &out, &[]);
    fails(
        &o,
        1,
        &["tokenizer_config.json", "fuel", "prompts.jsonl:1"],
        &out,
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    let number = copy_teacher(&d.path().join("number"));
    patch_json(
        &number.join("tokenizer_config.json"),
        serde_json::json!({"chat_template": 42}),
    );
    let o = distill(&number, &prompts, &out, &[]);
    fails(
        &o,
        1,
        &["tokenizer_config.json", "`chat_template`", "42"],
        &out,
    );
    let syntax = copy_teacher(&d.path().join("syntax"));
    patch_json(
        &syntax.join("tokenizer_config.json"),
        serde_json::json!({"chat_template": "{% for m in messages %}"}),
    );
    let o = distill(&syntax, &prompts, &out, &[]);
    fails(&o, 1, &["tokenizer_config.json", "does not parse"], &out);
    let eos = copy_teacher(&d.path().join("eos"));
    patch_json(
        &eos.join("tokenizer_config.json"),
        serde_json::json!({"eos_token": 7}),
    );
    let o = distill(&eos, &prompts, &out, &[]);
    fails(&o, 1, &["tokenizer_config.json", "`eos_token`"], &out);
}

#[test]
fn too_long_prompts_are_refused_by_id_or_skipped_and_counted() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    // A 1 MB prompt between two short ones (the tiny teacher's context is 2048 positions).
    let long = "the cell and the planet ".repeat(44_000);
    assert!(long.len() > 1_000_000);
    write_prompts(
        &prompts,
        &[
            ("short-a", "Why is water wet?".into()),
            ("huge-1mb", long),
            ("short-b", "Explain energy.".into()),
        ],
    );
    let out = d.path().join("o.json");
    let o = distill(teacher_dir(), &prompts, &out, &[]);
    fails(
        &o,
        1,
        &[
            "prompts.jsonl:2",
            "prompt \"huge-1mb\"",
            "max_position_embeddings 2048",
            "--skip-too-long",
        ],
        &out,
    );
    let err = ok(&distill(
        teacher_dir(),
        &prompts,
        &out,
        &["--skip-too-long"],
    ));
    assert!(err.contains("skipped 1 prompts too long"), "{err}");
    assert!(
        err.contains("huge-1mb"),
        "the log names the skipped id:\n{err}"
    );
    let ids: Vec<String> = records(&out)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["short-a", "short-b"]);

    // No context limit in the config: the memory budget refuses a prompt of ~6000 tokens
    // (its CPU attention scores alone are > 1 GiB).
    let nolimit = copy_teacher(&d.path().join("nolimit"));
    patch_json(
        &nolimit.join("config.json"),
        serde_json::json!({"max_position_embeddings": null}),
    );
    let words = "energy ".repeat(6000);
    write_prompts(&prompts, &[("a", "Hi.".into()), ("long-6k", words)]);
    let out2 = d.path().join("o2.json");
    let o = distill(&nolimit, &prompts, &out2, &["--max-batch-memory", "1"]);
    fails(
        &o,
        1,
        &["prompt \"long-6k\"", "--max-batch-memory 1.00 GiB"],
        &out2,
    );
    let err = ok(&distill(
        &nolimit,
        &prompts,
        &out2,
        &["--max-batch-memory", "1", "--skip-too-long"],
    ));
    assert!(err.contains("skipped 1 prompts"), "{err}");
    assert_eq!(records(&out2).len(), 1);
}

#[test]
fn absurd_sizes_exit_2_without_allocating() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    small_prompts(&prompts);
    let out = d.path().join("o.json");
    // A generation longer than the context, and one whose size overflows: usage errors.
    let o = distill(
        teacher_dir(),
        &prompts,
        &out,
        &[
            "--gen-length",
            "65536",
            "--block-length",
            "65536",
            "--steps",
            "1",
        ],
    );
    fails(
        &o,
        2,
        &["--gen-length 65536", "even a one-token prompt"],
        &out,
    );
    let g = (1u64 << 40).to_string();
    let o = distill(
        teacher_dir(),
        &prompts,
        &out,
        &["--gen-length", &g, "--block-length", &g, "--steps", "1"],
    );
    fails(&o, 2, &["--gen-length"], &out);
    let s = (1u64 << 40).to_string();
    let o = distill(teacher_dir(), &prompts, &out, &["--steps", &s]);
    fails(&o, 2, &["--steps"], &out);
    let o = distill(teacher_dir(), &prompts, &out, &["--max-batch-memory", "0"]);
    fails(&o, 2, &["--max-batch-memory"], &out);
    // An absurd batch size is bad usage (clap's range), refused before any work.
    let b = (1u64 << 60).to_string();
    let o = distill(teacher_dir(), &prompts, &out, &["--batch-size", &b]);
    fails(&o, 2, &["--batch-size"], &out);
    // The largest accepted batch size is only an upper bound: the memory budget closes the batch.
    ok(&distill(
        teacher_dir(),
        &prompts,
        &out,
        &["--batch-size", "65536"],
    ));
    assert_eq!(records(&out).len(), 3);
    // --out naming a directory is refused before any work.
    let dir_out = d.path().join("outdir");
    std::fs::create_dir(&dir_out).unwrap();
    let o = distill(teacher_dir(), &prompts, &dir_out, &[]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a directory"));
    no_temp_files(d.path());
}
