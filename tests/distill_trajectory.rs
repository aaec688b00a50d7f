//! `distill --trajectory` / `--top-k` on the fixture teacher (issue 55): replaying each
//! record's trajectory through the sampler with fresh CPU forwards commits exactly the recorded
//! positions and tokens at exactly the recorded steps (so it reproduces `response_ids`) in every
//! CPU sampler mode, the sidecar's top-k at each position equals the top-k of that fresh forward
//! bit for bit, kill -9 + rerun and 3 workers + merge give byte-identical sidecars, and a bad K
//! is refused.

mod teacher_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dlm_data::distill::host_loop::{step_row, RowCtx};
use dlm_data::distill::output::{list_parts, parts_dir};
use dlm_data::distill::topk_sidecar::{self, SidecarRow};
use dlm_data::sampling::trajectory::top_k;
use dlm_data::sampling::{rng, GenParams, KvCache, Remasking};
use dlm_data::teacher::{Batch, Teacher, TeacherBackend, TeacherOptions};
use serde_json::Value;
use teacher_support::{bin, small_sampler_args, teacher_dir};

fn prompts(path: &Path, n: usize) {
    let mut s = String::new();
    for i in 0..n {
        let words = [
            "energy",
            "the cell",
            "water and light",
            "a prime",
            "the planet",
        ];
        let q = format!(
            "Question {i}: explain {} in {} words.",
            words[i % 5],
            2 + i % 9
        );
        let v = if i % 2 == 0 {
            serde_json::json!({"id": format!("free-{i:03}"), "prompt": q})
        } else {
            serde_json::json!({"id": format!("mcq-{i:03}"), "prompt": q,
                "options": ["yes", "no", "maybe"], "gold": "B"})
        };
        s.push_str(&v.to_string());
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn distill(prompts: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .args(["distill", "--teacher"])
        .arg(teacher_dir())
        .arg("--prompts")
        .arg(prompts)
        .arg("--out")
        .arg(out)
        .args(small_sampler_args(extra, "3"))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// The sampler settings a record says it ran with (plus the flags of the mode).
fn params(t: &Teacher, gen: &Value, mode: &[&str]) -> GenParams {
    let flag = |f: &str| mode.iter().position(|m| *m == f).map(|i| mode[i + 1]);
    GenParams {
        gen_length: gen["gen_length"].as_u64().unwrap() as usize,
        block_length: gen["block_length"].as_u64().unwrap() as usize,
        steps: gen["steps"].as_u64().unwrap() as usize,
        temperature: gen["temperature"].as_f64().unwrap(),
        remasking: if gen["remasking"] == "random" {
            Remasking::Random
        } else {
            Remasking::LowConfidence
        },
        seed: gen["seed"].as_u64().unwrap(),
        mask_id: t.mask_id,
        logits_eos_inf: mode.contains(&"--logits-eos-inf"),
        confidence_eos_eot_inf: mode.contains(&"--confidence-eos-eot-inf"),
        eos_ids: t.eos_ids.clone(),
        eot_ids: vec![],
        threshold: flag("--threshold").map(|x| x.parse().unwrap()),
        cache: KvCache::None,
        cache_refresh: None,
    }
}

/// Replay every record of `out` (run in `mode`) step by step on fresh CPU forwards; check the
/// commits, the final span and every sidecar row. Returns the number of steps replayed.
fn replay(out: &Path, mode: &[&str], k: usize) -> usize {
    let t = Teacher::open(teacher_dir(), &TeacherOptions::default()).unwrap();
    let mut be = t.cpu().unwrap();
    let vocab = be.vocab_size();
    let recs: Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let side = topk_sidecar::read(&topk_sidecar::sidecar_path(out)).unwrap();
    let mut by_id: BTreeMap<String, Vec<(usize, SidecarRow)>> = BTreeMap::new();
    for (g, r) in side {
        by_id.entry(r.id.clone()).or_default().push((g, r));
    }
    let mut replayed = 0;
    let mut groups_seen = Vec::new();
    for rec in recs.as_array().unwrap() {
        let id = rec["id"].as_str().unwrap();
        let p = params(&t, &rec["gen"], mode);
        assert_eq!(rec["gen"]["top_k"], k);
        let prompt = u32s(&rec["prompt_ids"]);
        let resp = u32s(&rec["response_ids"]);
        let tail: Vec<Option<u32>> = rec["tail_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().map(|v| v as u32))
            .collect();
        let mut steps = i64s(&rec["commit_step"]);
        assert_eq!(steps.len(), resp.len(), "{id}: one step per response id");
        steps.extend(i64s(&rec["tail_commit_step"]));
        let span: Vec<Option<u32>> = resp.iter().map(|&x| Some(x)).chain(tail).collect();
        assert_eq!(span.len(), p.gen_length, "{id}");
        assert_eq!(
            rec["stop"] == "eos",
            span.len() > resp.len() && span[resp.len()].is_some()
        );
        for (s, x) in steps.iter().zip(&span) {
            assert_eq!(
                *s >= 0,
                x.is_some(),
                "{id}: a token exactly where a step is"
            );
        }
        // Sidecar: one row per committed position, in position order, one row group.
        let rows = by_id.remove(id).unwrap_or_default();
        let committed: Vec<usize> = (0..span.len()).filter(|&i| steps[i] >= 0).collect();
        let positions: Vec<usize> = rows.iter().map(|(_, r)| r.position as usize).collect();
        assert_eq!(positions, committed, "{id}: every committed position once");
        let g = rows[0].0;
        assert!(rows.iter().all(|(gg, _)| *gg == g), "{id}: one row group");
        groups_seen.push(g);
        // Replay.
        let (lp, bl, shift) = (prompt.len(), p.block_length, t.logits_shift as usize);
        let mut x: Vec<u32> = prompt.clone();
        x.resize(lp + p.gen_length, p.mask_id);
        let keep = vec![true; x.len()];
        let mut order: Vec<i64> = steps.iter().copied().filter(|&s| s >= 0).collect();
        order.sort();
        order.dedup();
        for s in order {
            let at: Vec<usize> = (0..span.len()).filter(|&i| steps[i] == s).collect();
            let nb = at[0] / bl;
            assert!(
                at.iter().all(|&i| i / bl == nb),
                "{id}: step {s} within one block"
            );
            if p.threshold.is_none() {
                assert_eq!(
                    nb,
                    s as usize / p.steps_per_block(),
                    "{id}: block × spb + i"
                );
            }
            let s0 = lp + nb * bl;
            let logits = be
                .logits(
                    &Batch::new(&x, &keep, 1, x.len()),
                    s0 - shift..s0 + bl - shift,
                )
                .unwrap();
            let ctx = RowCtx {
                prompt_key: rng::prompt_key(id),
                global_step: s as u64,
                block_start: nb * bl,
            };
            let kk = if p.threshold.is_some() { bl } else { at.len() };
            let mut got = step_row(&p, &logits, vocab, &mut x[s0..s0 + bl], kk, &ctx);
            got.sort();
            let want: Vec<(usize, u32)> = at
                .iter()
                .map(|&i| (i - nb * bl, span[i].unwrap()))
                .collect();
            assert_eq!(got, want, "{id}: step {s} commits what the trajectory says");
            for &i in &at {
                let j = i - nb * bl;
                let fresh = top_k(&p, &logits[j * vocab..(j + 1) * vocab], k);
                let (_, row) = rows.iter().find(|(_, r)| r.position as usize == i).unwrap();
                assert_eq!(fresh.ids, row.ids, "{id}@{i}");
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fresh.logprobs), bits(&row.logprobs), "{id}@{i}");
                assert_eq!(
                    fresh.logsumexp.to_bits(),
                    row.logsumexp.to_bits(),
                    "{id}@{i}"
                );
                assert_eq!(fresh.ids.len(), k.min(vocab - 1));
                if p.temperature == 0.0 {
                    assert_eq!(row.ids[0], span[i].unwrap(), "{id}@{i}: greedy = top-1");
                }
            }
            replayed += 1;
        }
        let gen: Vec<u32> = x[lp..].to_vec();
        assert_eq!(
            &gen[..resp.len()],
            &resp[..],
            "{id}: replay reproduces response_ids"
        );
    }
    assert!(
        by_id.is_empty(),
        "sidecar rows of no record: {:?}",
        by_id.keys()
    );
    assert_eq!(
        groups_seen,
        (0..groups_seen.len()).collect::<Vec<_>>(),
        "row groups by prompt"
    );
    replayed
}

#[test]
fn replay_reproduces_response_ids_and_top_k_in_every_cpu_mode() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prompts.jsonl");
    prompts(&p, 8);
    let modes: &[&[&str]] = &[
        &[],
        &["--no-early-exit", "--batch-size", "1"],
        &["--temperature", "0.8", "--seed", "7"],
        &["--remasking", "random", "--seed", "2"],
        &["--threshold", "0.3"],
        &[
            "--confidence-eos-eot-inf",
            "--gen-length",
            "16",
            "--steps",
            "8",
        ],
        &["--logits-eos-inf", "--temperature", "0.5"],
    ];
    // A stop id this random teacher emits (its most frequent response token), so rows finish
    // early and never-decoded positions appear.
    let probe = d.path().join("probe.json");
    ok(&distill(&p, &probe, &[]));
    let recs: Value = serde_json::from_str(&std::fs::read_to_string(&probe).unwrap()).unwrap();
    let mut freq = BTreeMap::<u64, usize>::new();
    for r in recs.as_array().unwrap() {
        for t in r["response_ids"].as_array().unwrap() {
            *freq.entry(t.as_u64().unwrap()).or_default() += 1;
        }
    }
    let stop = freq
        .iter()
        .max_by_key(|(t, n)| (**n, u64::MAX - **t))
        .unwrap()
        .0
        .to_string();
    let with_stop: Vec<&str> = vec!["--eot-id", &stop];
    let modes: Vec<&[&str]> = modes.iter().copied().chain([&with_stop[..]]).collect();
    let mut early = 0;
    for (m, mode) in modes.iter().enumerate() {
        let out = d.path().join(format!("m{m}.json"));
        let mut a = mode.to_vec();
        a.extend(["--trajectory", "--top-k", "5"]);
        ok(&distill(&p, &out, &a));
        assert!(replay(&out, mode, 5) > 0, "mode {mode:?}");
        let recs: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        for r in recs.as_array().unwrap() {
            early += usize::from(
                r["tail_commit_step"]
                    .as_array()
                    .unwrap()
                    .contains(&(-1).into()),
            );
            let sha = r["gen"]["chat_template_sha256"].as_str().unwrap();
            assert_eq!(sha.len(), 64);
        }
    }
    assert!(
        early > 0,
        "some row finished early (never-decoded positions are -1)"
    );
}

#[test]
fn flags_off_records_have_no_trajectory_and_no_sidecar() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prompts.jsonl");
    prompts(&p, 3);
    let plain = d.path().join("plain.json");
    ok(&distill(&p, &plain, &[]));
    let traj = d.path().join("traj.json");
    ok(&distill(&p, &traj, &["--trajectory"]));
    assert!(!topk_sidecar::sidecar_path(&plain).exists());
    assert!(
        !topk_sidecar::sidecar_path(&traj).exists(),
        "--trajectory alone: no sidecar"
    );
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&plain).unwrap()).unwrap();
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&traj).unwrap()).unwrap();
    for (x, y) in a.as_array().unwrap().iter().zip(b.as_array().unwrap()) {
        for k in ["prompt_ids", "commit_step", "tail_ids", "tail_commit_step"] {
            assert!(x.get(k).is_none() && y.get(k).is_some(), "{k}");
        }
        // Everything else is the plain record's.
        let mut y = y.clone();
        for k in ["prompt_ids", "commit_step", "tail_ids", "tail_commit_step"] {
            y.as_object_mut().unwrap().shift_remove(k);
        }
        y["gen"]
            .as_object_mut()
            .unwrap()
            .shift_remove("chat_template_sha256");
        assert_eq!(*x, y);
    }
}

#[test]
fn bad_top_k_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prompts.jsonl");
    prompts(&p, 1);
    for k in ["0", "65"] {
        let o = distill(&p, &d.path().join("o.json"), &["--top-k", k]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("--top-k {k}")) && err.contains("1..=64"),
            "{err}"
        );
    }
}

fn commits(part: &Path) -> usize {
    std::fs::read_to_string(part)
        .map(|s| s.lines().filter(|l| l.starts_with("{\"batch\":")).count())
        .unwrap_or(0)
}

fn files(out: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(out).unwrap(),
        std::fs::read(topk_sidecar::sidecar_path(out)).unwrap(),
    )
}

#[test]
fn sidecar_survives_kill_9_and_three_workers_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prompts.jsonl");
    prompts(&p, 24);
    let args = [
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
        "--window-prompts",
        "3",
        "--top-k",
        "7",
        "--trajectory",
    ];
    let full = d.path().join("full.json");
    ok(&distill(&p, &full, &args));
    let want = files(&full);
    replay(&full, &args, 7);

    let out = d.path().join("resumed.json");
    let part = parts_dir(&out).join("00000-of-00001.jsonl");
    let mut child = Command::new(bin())
        .args(["distill", "--teacher"])
        .arg(teacher_dir())
        .arg("--prompts")
        .arg(&p)
        .arg("--out")
        .arg(&out)
        .args(small_sampler_args(&args, "3"))
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while commits(&part) < 2 && t0.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(commits(&part) >= 2);
    ok(&distill(&p, &out, &args));
    assert!(files(&out) == want, "resumed sidecar or records differ");
    assert_eq!(commits(&part), 8);

    let sharded = d.path().join("sharded.json");
    for i in 0..3 {
        let sh = format!("{i}/3");
        let mut a = args.to_vec();
        a.extend(["--shard", &sh]);
        ok(&distill(&p, &sharded, &a));
        assert!(
            !topk_sidecar::sidecar_path(&sharded).exists(),
            "workers do not finalise"
        );
    }
    assert_eq!(list_parts(&parts_dir(&sharded)).unwrap().len(), 3);
    let m = Command::new(bin())
        .arg("merge")
        .arg(&sharded)
        .output()
        .unwrap();
    ok(&m);
    assert!(files(&sharded) == want, "merged sidecar or records differ");
    // A committed unit's file gone: merge says which, and leaves no sidecar looking complete.
    std::fs::remove_file(topk_sidecar::sidecar_path(&sharded)).unwrap();
    std::fs::remove_file(&sharded).unwrap();
    let unit: PathBuf = std::fs::read_dir(parts_dir(&sharded))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".parquet"))
        .unwrap();
    std::fs::remove_file(&unit).unwrap();
    let m = Command::new(bin())
        .arg("merge")
        .arg(&sharded)
        .output()
        .unwrap();
    assert!(!m.status.success());
    let err = String::from_utf8_lossy(&m.stderr);
    assert!(
        err.contains(&unit.file_name().unwrap().to_string_lossy().to_string()),
        "{err}"
    );
    assert!(!sharded.exists() && !topk_sidecar::sidecar_path(&sharded).exists());
}

/// A Python with torch and pyarrow: `DLM_TORCH_PYTHON`, else the repo's `.venv-mds` (make
/// check-mds-streaming builds it with Debian's CPU torch).
fn torch_python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("DLM_TORCH_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let v = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-mds/bin/python");
    v.is_file().then_some(v)
}

#[test]
fn student_loader_example_runs_on_the_fixture_teacher() {
    let Some(py) = torch_python() else {
        eprintln!("\n*** SKIPPED docs/examples/student_loader.py: no DLM_TORCH_PYTHON and no .venv-mds (make check-mds-streaming) ***\n");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prompts.jsonl");
    prompts(&p, 4);
    let out = d.path().join("distilled.json");
    ok(&distill(&p, &out, &["--trajectory", "--top-k", "4"]));
    let recs: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let steps: usize = recs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut s = i64s(&r["commit_step"]);
            s.extend(i64s(&r["tail_commit_step"]));
            s.retain(|&x| x >= 0);
            s.sort();
            s.dedup();
            s.len()
        })
        .sum();
    let t = Teacher::open(teacher_dir(), &TeacherOptions::default()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/student_loader.py");
    let o = Command::new(py)
        .arg(script)
        .arg(&out)
        .arg(t.mask_id.to_string())
        .output()
        .unwrap();
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("{steps} training steps")
    );
}

#[test]
fn audit_checks_the_sidecar_against_records_and_commit_lines() {
    use dlm_data::audit::report::{Check, Status};
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prompts.jsonl");
    prompts(&p, 5);
    let out = d.path().join("d.json");
    ok(&distill(
        &p,
        &out,
        &["--trajectory", "--top-k", "3", "--window-prompts", "2"],
    ));
    let audit = || {
        let mut c = Check::new("distilled");
        dlm_data::audit::topk::check_into(&out, &mut c);
        c
    };
    let c = audit();
    assert_eq!(c.status, Status::Pass, "{:?}", c.problems);
    // A unit file that is not the one its commit line names.
    let unit = std::fs::read_dir(parts_dir(&out))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".parquet"))
        .unwrap();
    let keep = std::fs::read(&unit).unwrap();
    std::fs::write(&unit, [&keep[..], b"x"].concat()).unwrap();
    let c = audit();
    assert!(
        c.problems.iter().any(|m| m.contains("topk_sha256")),
        "{:?}",
        c.problems
    );
    std::fs::write(&unit, &keep).unwrap();
    // A sidecar whose rows belong to other records: the first two row groups swapped.
    let side = topk_sidecar::sidecar_path(&out);
    let rows = topk_sidecar::read(&side).unwrap();
    assert!(rows.iter().any(|(g, _)| *g == 1));
    let c = audit();
    assert_eq!(c.status, Status::Pass);
    std::fs::remove_file(&side).unwrap();
    let c = audit();
    assert!(
        c.problems.iter().any(|m| m.contains("sidecar is missing")),
        "{:?}",
        c.problems
    );
}
