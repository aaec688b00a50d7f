//! The model half of `audit`: a clean chain — pinned base (fetched through the hub emulator)
//! → teacher (the base converted) → distilled.json → three training stages in lineage.json →
//! shipped model — passes every link; breaking one link fails that link, naming what broke.

mod fixture_dirs;
mod mcq_support;

use std::path::{Path, PathBuf};

use dlm_data::audit::report::{AuditReport, Status};
use dlm_data::fixtures::base_model::{write_base_repo, write_trained_checkpoint, BASE_COMMIT};
use dlm_data::fixtures::teacher::{write_teacher, TinyDtype, TinyTeacher};
use dlm_data::hub::emulator::{Emulator, Options};
use dlm_data::mcq::prompts;
use dlm_data::model::architecture::ModelArchitecture;
use dlm_data::model::lineage::{DataKind, Lineage};
use fixture_dirs::copy_dir;
use mcq_support::*;

struct Chain {
    w: World,
    base_manifest: PathBuf,
    base_dir: PathBuf,
    stage1: PathBuf,
    sft: PathBuf,
    prompts: PathBuf,
    distilled: PathBuf,
    teacher: PathBuf,
    ckpt1: PathBuf,
    ckpt3: PathBuf,
    shipped: PathBuf,
    lineage: PathBuf,
}

impl Chain {
    fn path(&self, rel: &str) -> PathBuf {
        self.w.root().join(rel)
    }
}

/// distilled.json records for every prompt, written by the teacher at `teacher`.
fn distilled_by(recs: &[prompts::PromptRecord], teacher: &Path) -> serde_json::Value {
    let a = ModelArchitecture::from_dir(teacher).unwrap();
    distilled_for(
        recs,
        serde_json::json!({"path": teacher.display().to_string(), "weights_sha256": a.weights_sha256, "config_sha256": a.config_sha256}),
    )
}

fn lineage_add(
    lineage: &Path,
    stage: &str,
    from: &Path,
    data: &[&Path],
    to: &Path,
) -> (i32, String) {
    let mut a = vec![
        "lineage",
        "add",
        "--lineage",
        p(lineage),
        "--stage",
        stage,
        "--from",
        p(from),
        "--to",
        p(to),
        "--data",
    ];
    a.extend(data.iter().map(|d| p(d)));
    let (code, _, err) = run(&a);
    (code, err)
}

fn chain() -> Chain {
    let w = world();
    let root = w.root().to_path_buf();
    // Stage-1 pack shards, stage-2 SFT shards and stage-3 prompts from the locked world.
    let stage1 = root.join("out/stage1");
    let (code, _, err) = run(&pack_args(&w, &stage1, "32"));
    assert_eq!(code, 0, "{err}");
    let out = root.join("out/mcq");
    let (code, _, err) = run_mcq_shards(&w, &out, "parquet", "20");
    assert_eq!(code, 0, "{err}");
    // The pinned base, fetched into the world's cache (its log is the world's download.log).
    let hub = root.join("hub");
    write_base_repo(&hub).unwrap();
    let emu = Emulator::start(&hub, Options::default()).unwrap();
    let base_manifest = root.join("base.toml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base.toml"),
        &base_manifest,
    )
    .unwrap();
    let base_dir = root.join("base");
    let o = bin()
        .args([
            "fetch",
            "--manifest",
            p(&base_manifest),
            "--cache",
            p(&w.cache),
        ])
        .args(["--local-dir", p(&base_dir)])
        .env("HF_ENDPOINT", emu.endpoint())
        .env("DLM_NO_PROGRESS", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(emu);
    // The teacher (the base converted), its distilled.json, two trained checkpoints.
    let teacher = root.join("teacher");
    write_teacher(&teacher, &TinyTeacher::default()).unwrap();
    let prompts_path = out.join("prompts.jsonl");
    let recs = prompts::read(&prompts_path).unwrap();
    let distilled = out.join("distilled.json");
    std::fs::write(
        &distilled,
        serde_json::to_string(&distilled_by(&recs, &teacher)).unwrap(),
    )
    .unwrap();
    let ckpt1 = root.join("ckpt/stage1");
    let ckpt3 = root.join("ckpt/stage3");
    write_trained_checkpoint(&ckpt1, 11).unwrap();
    write_trained_checkpoint(&ckpt3, 13).unwrap();
    let shipped = root.join("shipped");
    copy_dir(&ckpt3, &shipped);
    // lineage.json, one command per stage, as a training script runs them.
    let lineage = root.join("lineage.json");
    let sft = out.join("sft");
    for (stage, from, data, to) in [
        ("stage1", &base_dir, &stage1, &ckpt1),
        ("stage2", &ckpt1, &sft, &teacher),
        ("stage3", &teacher, &distilled, &ckpt3),
    ] {
        let (code, err) = lineage_add(&lineage, stage, from, &[data], to);
        assert_eq!(code, 0, "{err}");
    }
    Chain {
        w,
        base_manifest,
        base_dir,
        stage1,
        sft,
        prompts: prompts_path,
        distilled,
        teacher,
        ckpt1,
        ckpt3,
        shipped,
        lineage,
    }
}

fn audit(c: &Chain, args: &[&str]) -> (i32, AuditReport, String) {
    audit_json(&c.w, &[&c.base_manifest], args)
}

/// Every flag of the full chain, with `lineage` as the lineage file.
fn full<'a>(c: &'a Chain, lineage: &'a Path) -> Vec<&'a str> {
    vec![
        "--shards",
        p(&c.stage1),
        "--shards",
        p(&c.sft),
        "--prompts",
        p(&c.prompts),
        "--distilled",
        p(&c.distilled),
        "--teacher",
        p(&c.teacher),
        "--lineage",
        p(lineage),
        "--shipped",
        p(&c.shipped),
    ]
}

const MODEL_LINKS: [&str; 5] = [
    "base-pinned",
    "teacher-architecture",
    "teacher-weights",
    "checkpoints",
    "shipped-model",
];

#[test]
fn clean_chain_passes_every_link_and_reads_base_first() {
    let c = chain();
    let (code, r, err) = audit(&c, &full(&c, &c.lineage));
    assert_eq!(code, 0, "{err}\n{r:#?}");
    for name in MODEL_LINKS {
        assert_eq!(status(&r, name), Status::Pass, "{name}: {r:#?}");
    }
    // The report is a chain: the model links first, base@revision first.
    let names: Vec<&str> = r.checks.iter().map(|c| c.check.as_str()).collect();
    assert_eq!(names[..5], MODEL_LINKS);
    assert_eq!(r.chain[0], format!("openbmb/MiniCPM5-2B@{BASE_COMMIT}"));
    assert_eq!(r.chain.len(), 5, "{:?}", r.chain);
    assert!(r.chain[2].contains("the teacher"), "{:?}", r.chain);
    assert!(r.chain[4].starts_with("shipped"), "{:?}", r.chain);
    // The conversion changes are named, not failed.
    let ta = r
        .checks
        .iter()
        .find(|x| x.check == "teacher-architecture")
        .unwrap();
    let notes = ta.notes.join("\n");
    assert!(notes.contains("is_causal: absent → false"), "{notes}");
    assert!(notes.contains("mask id"), "{notes}");
    // The human report too, with --hash re-hashing the cached base.
    let args = [&["--hash"][..], &full(&c, &c.lineage)].concat();
    let (code, text, err) = run_audit(&c.w, &[&c.base_manifest], &args);
    assert_eq!(code, 0, "{text}{err}");
    let chain_at = text.find("chain:\n  openbmb/MiniCPM5-2B@").expect(&text);
    assert!(
        chain_at < text.find("[PASS] base-pinned").unwrap(),
        "{text}"
    );
    for name in MODEL_LINKS {
        assert!(text.contains(&format!("[PASS] {name}")), "{name}\n{text}");
    }
}

#[test]
fn base_pinned_fails_on_a_missing_log_line_or_a_changed_cached_byte() {
    let c = chain();
    // A data-only audit of the same world shows no model links at all.
    let (code, r, _) = audit_json(&c.w, &[], &[]);
    assert_eq!(code, 0);
    assert!(r.chain.is_empty());
    assert!(r
        .checks
        .iter()
        .all(|x| !MODEL_LINKS.contains(&x.check.as_str())));
    let (code, r, _) = audit(&c, &[]);
    assert_eq!(code, 0);
    assert_eq!(status(&r, "base-pinned"), Status::Pass);
    let text = std::fs::read_to_string(&c.w.log).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("model-00002-of-00002.safetensors"))
        .collect();
    std::fs::write(&c.w.log, kept.join("\n") + "\n").unwrap();
    let (code, r, _) = audit(&c, &[]);
    assert_fails_only(
        "a missing log line",
        code,
        &r,
        "base-pinned",
        &["model-00002-of-00002.safetensors: no verified download"],
    );
    std::fs::write(&c.w.log, text).unwrap();
    // One byte of the cached config changed: --hash names it.
    let cfg =
        c.w.cache
            .join("models--openbmb--MiniCPM5-2B/snapshots")
            .join(BASE_COMMIT)
            .join("config.json");
    let real = std::fs::canonicalize(&cfg).unwrap();
    let mut b = std::fs::read(&real).unwrap();
    b[3] ^= 1;
    std::fs::write(&real, b).unwrap();
    let (code, r, _) = audit(&c, &["--hash"]);
    assert_fails_only(
        "a changed byte",
        code,
        &r,
        "base-pinned",
        &["config.json: sha256"],
    );
    // No architecture.json: named.
    std::fs::remove_file(c.base_manifest.with_file_name("architecture.json")).unwrap();
    let (_, r, _) = audit(&c, &[]);
    assert!(
        problems(&r, "base-pinned").contains("architecture.json"),
        "{r:#?}"
    );
}

/// A copy of the teacher with `edit` applied to its config.json (and `tok` to tokenizer.json).
fn edited_teacher(
    c: &Chain,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
    tok: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    let d = c.path(name);
    copy_dir(&c.teacher, &d);
    for (f, e) in [
        (
            "config.json",
            Box::new(edit) as Box<dyn FnOnce(&mut serde_json::Value)>,
        ),
        ("tokenizer.json", Box::new(tok)),
    ] {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(f)).unwrap()).unwrap();
        e(&mut v);
        std::fs::write(d.join(f), serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
    d
}

#[test]
fn teacher_architecture_names_what_a_conversion_may_not_change() {
    let c = chain();
    let only = |t: &Path| {
        let (code, r, _) = audit(&c, &["--teacher", p(t)]);
        (code, r)
    };
    let (code, r) = only(&c.teacher);
    assert_eq!(code, 0, "{r:#?}");
    let tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(c.teacher.join("tokenizer.json")).unwrap())
            .unwrap();
    let id = |s: &str| {
        tok["added_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["content"] == s)
            .unwrap()["id"]
            .clone()
    };
    let eos = id("<|endoftext|>");
    let ordinary = tok["model"]["vocab"]["e"].clone();
    assert!(ordinary.is_u64());
    let cases: Vec<(&str, PathBuf, &str)> = vec![
        (
            "rope",
            edited_teacher(&c, "t-rope", |v| v["rope_theta"] = 5e5.into(), |_| {}),
            "config field `rope_theta`: base 10000.0, this 500000.0",
        ),
        (
            "causal",
            edited_teacher(&c, "t-causal", |v| v["is_causal"] = true.into(), |_| {}),
            "is_causal\": false",
        ),
        (
            "eos",
            edited_teacher(&c, "t-eos", |v| v["mask_token_id"] = eos.clone(), |_| {}),
            "is the base's eos_token",
        ),
        (
            "ordinary",
            edited_teacher(
                &c,
                "t-ord",
                |v| v["mask_token_id"] = ordinary.clone(),
                |_| {},
            ),
            "ordinary vocabulary token \"e\"",
        ),
        (
            "merges",
            edited_teacher(
                &c,
                "t-merges",
                |_| {},
                |t| {
                    t["model"]["merges"].as_array_mut().unwrap().pop();
                },
            ),
            "tokenizer.json `model` differs",
        ),
    ];
    for (what, dir, needle) in cases {
        let (code, r) = only(&dir);
        assert_fails_only(what, code, &r, "teacher-architecture", &[needle]);
    }
    // Another shape: every tensor that differs is named.
    let wide = c.path("t-wide");
    let mut t = TinyTeacher::default();
    t.size.intermediate = 128;
    write_teacher(&wide, &t).unwrap();
    let (_, r) = only(&wide);
    let pr = problems(&r, "teacher-architecture");
    assert!(
        pr.contains("intermediate_size") && pr.contains("mlp.up_proj.weight`: shape [128, 64]"),
        "{pr}"
    );
    // A dtype change is a documented conversion change: PASS, noted.
    let f32 = c.path("t-f32");
    write_teacher(
        &f32,
        &TinyTeacher {
            dtype: TinyDtype::F32,
            ..TinyTeacher::default()
        },
    )
    .unwrap();
    let (code, r) = only(&f32);
    assert_eq!(code, 0, "{r:#?}");
    let notes = r.checks[1].notes.join("\n");
    assert!(
        notes.contains("tensor dtype BF16 → F32") && notes.contains("torch_dtype"),
        "{notes}"
    );
}

/// Issue 57 row 9: architecture.json's copy of the base config edited to agree with an edited
/// teacher (audit without --hash): the audit reads the cached base config.json the lock pins,
/// so `teacher-architecture` still names the field; a cached config.json that is not the
/// locked one is named too.
#[test]
fn teacher_architecture_reads_the_pinned_base_config_not_architecture_json() {
    let c = chain();
    let t = edited_teacher(&c, "t-rope-both", |v| v["rope_theta"] = 5e5.into(), |_| {});
    let arch_path = c.base_manifest.with_file_name("architecture.json");
    let orig = std::fs::read_to_string(&arch_path).unwrap();
    let mut a: serde_json::Value = serde_json::from_str(&orig).unwrap();
    let mut edited = 0;
    for m in a["models"].as_array_mut().unwrap() {
        m["config"]["rope_theta"] = 5e5.into();
        edited += 1;
    }
    assert_eq!(edited, 1, "{orig}");
    std::fs::write(&arch_path, serde_json::to_string_pretty(&a).unwrap()).unwrap();
    let (code, r, _) = audit(&c, &["--teacher", p(&t)]);
    assert_eq!(code, 1, "{r:#?}");
    assert!(
        problems(&r, "teacher-architecture").contains("config field `rope_theta`"),
        "{r:#?}"
    );
    std::fs::write(&arch_path, &orig).unwrap();
    // The cached config.json itself changed: not the pinned bytes, named.
    let (code, r, _) = audit(&c, &["--teacher", p(&c.teacher)]);
    assert_eq!(code, 0, "{r:#?}");
    let lock =
        dlm_data::manifest::ModelLock::load(&c.base_manifest.with_extension("lock")).unwrap();
    let l = &lock.models[0];
    let cache = dlm_data::hub::cache::Cache {
        root: c.w.cache.clone(),
    };
    let cfg = cache.snapshot_path(
        dlm_data::hub::cache::Area::MODEL,
        &l.repo,
        &l.commit,
        "config.json",
    );
    let real = std::fs::canonicalize(&cfg).unwrap();
    let text = std::fs::read_to_string(&real).unwrap();
    std::fs::remove_file(&real).unwrap();
    std::fs::write(&real, text.replace("10000", "500000")).unwrap();
    let (code, r, _) = audit(&c, &["--teacher", p(&c.teacher)]);
    assert_eq!(code, 1, "{r:#?}");
    assert!(
        problems(&r, "teacher-architecture").contains("not the sha256 the lock pins"),
        "{r:#?}"
    );
}

#[test]
fn teacher_weights_fail_for_another_checkpoint() {
    let c = chain();
    let mut args = full(&c, &c.lineage);
    let i = args.iter().position(|a| *a == "--teacher").unwrap();
    args[i + 1] = p(&c.ckpt1);
    let (code, r, _) = audit(&c, &args);
    assert_fails_only(
        "",
        code,
        &r,
        "teacher-weights",
        &["another weights_sha256", p(&c.ckpt1)],
    );
}

#[test]
fn checkpoints_are_checked_link_by_link() {
    let c = chain();
    let l = Lineage::load(&c.lineage).unwrap();
    assert_eq!(l.stages.len(), 3);
    assert_eq!(
        l.stages.iter().map(|s| s.data[0].kind).collect::<Vec<_>>(),
        [DataKind::Pretrain, DataKind::Sft, DataKind::Distilled]
    );
    assert_eq!(l.stages[1].from.sha256, l.stages[0].to.sha256);
    assert!(l.stages[2].data[0].teacher_weights_sha256.is_some());
    // Each broken lineage fails `checkpoints` only, naming the entry and what broke.
    type Stage<'a> = (&'a str, &'a Path, &'a Path, &'a Path);
    let cases: Vec<(&str, Vec<Stage>, &str)> = vec![
        (
            "not from the base",
            vec![("stage1", &c.ckpt3, &c.stage1, &c.ckpt1)],
            "which is not the pinned base",
        ),
        (
            "a gap",
            vec![
                ("stage1", &c.base_dir, &c.stage1, &c.ckpt1),
                ("stage2", &c.base_dir, &c.sft, &c.teacher),
            ],
            "entry 2 (stage stage2) starts from",
        ),
        (
            "stage 2 on pack shards",
            vec![
                ("stage1", &c.base_dir, &c.stage1, &c.ckpt1),
                ("stage2", &c.ckpt1, &c.stage1, &c.teacher),
            ],
            "stage 2 trains on the SFT shards only",
        ),
        (
            "stage 3 not from the teacher",
            vec![
                ("stage1", &c.base_dir, &c.stage1, &c.ckpt1),
                ("stage2", &c.ckpt1, &c.sft, &c.teacher),
                ("stage3", &c.ckpt1, &c.distilled, &c.ckpt3),
            ],
            "was written by the teacher",
        ),
        (
            "a stage name again after another",
            vec![
                ("stage1", &c.base_dir, &c.stage1, &c.ckpt1),
                ("stage2", &c.ckpt1, &c.sft, &c.teacher),
                ("stage1", &c.teacher, &c.stage1, &c.ckpt3),
            ],
            "stage \"stage1\" appears again after \"stage2\"",
        ),
        (
            "a fourth stage",
            vec![
                ("stage1", &c.base_dir, &c.stage1, &c.ckpt1),
                ("stage2", &c.ckpt1, &c.sft, &c.teacher),
                ("stage3", &c.teacher, &c.distilled, &c.ckpt3),
                ("stage4", &c.ckpt3, &c.distilled, &c.ckpt3),
            ],
            "the chain has three",
        ),
    ];
    for (k, (what, stages, needle)) in cases.into_iter().enumerate() {
        let lp = c.path(&format!("lineage-{k}.json"));
        for (s, from, data, to) in &stages {
            let (code, err) = lineage_add(&lp, s, from, &[data], to);
            assert_eq!(code, 0, "{what}: {err}");
        }
        let mut args = full(&c, &lp);
        // The shipped model is the last stage's output in each.
        let last = stages.last().unwrap().3;
        args.retain(|a| *a != "--shipped" && *a != p(&c.shipped));
        args.extend(["--shipped", p(last)]);
        let (code, r, _) = audit(&c, &args);
        assert_fails_only(what, code, &r, "checkpoints", &[needle]);
    }
    // A stage resumed as two entries of one name is one stage: the chain holds.
    let lp = c.path("lineage-resumed.json");
    for (s, from, data, to) in [
        ("stage1", &c.base_dir, &c.stage1, &c.ckpt3),
        ("stage1", &c.ckpt3, &c.stage1, &c.ckpt1),
        ("stage2", &c.ckpt1, &c.sft, &c.teacher),
    ] {
        assert_eq!(lineage_add(&lp, s, from, &[data], to).0, 0);
    }
    let mut args = full(&c, &lp);
    args.retain(|a| *a != "--shipped" && *a != p(&c.shipped));
    let (code, r, _) = audit(&c, &args);
    assert_eq!(code, 0, "{r:#?}");
    assert_eq!(status(&r, "checkpoints"), Status::Pass);
    // Data that this audit does not cover: named.
    let mut args = full(&c, &c.lineage);
    args.drain(0..2); // no --shards stage1
    let (code, r, _) = audit(&c, &args);
    assert_fails_only(
        "uncovered data",
        code,
        &r,
        "checkpoints",
        &["is not among this audit's outputs"],
    );
    // A teacher that is no stage's output.
    let lp = c.path("lineage-short.json");
    let (code, _) = lineage_add(&lp, "stage1", &c.base_dir, &[&c.stage1], &c.ckpt1);
    assert_eq!(code, 0);
    let mut args = full(&c, &lp);
    args.retain(|a| *a != "--shipped" && *a != p(&c.shipped));
    let (_, r, _) = audit(&c, &args);
    assert!(
        problems(&r, "checkpoints").contains("is no stage's output"),
        "{r:#?}"
    );
}

#[test]
fn shipped_model_must_equal_the_last_checkpoint_file_for_file() {
    let c = chain();
    let cfg = c.shipped.join("config.json");
    let orig = std::fs::read(&cfg).unwrap();
    let mut b = orig.clone();
    let n = b.len() / 2;
    b[n] ^= 1; // same size, other bytes
    std::fs::write(&cfg, &b).unwrap();
    std::fs::write(c.shipped.join("extra.bin"), b"x").unwrap();
    let (code, r, _) = audit(&c, &full(&c, &c.lineage));
    assert_fails_only(
        "",
        code,
        &r,
        "shipped-model",
        &["config.json: sha256", "extra.bin is extra"],
    );
    std::fs::write(&cfg, &orig).unwrap();
    std::fs::remove_file(c.shipped.join("extra.bin")).unwrap();
    std::fs::remove_file(c.shipped.join("tokenizer.json")).unwrap();
    let (_, r, _) = audit(&c, &full(&c, &c.lineage));
    assert!(problems(&r, "shipped-model").contains("tokenizer.json is missing"));
}

/// Issue 57 row 8: lineage.json's last entry edited so its file list matches swapped weights
/// (its digest left as recorded, so the chain still links): `shipped-model` agrees with the
/// list, but the entry contradicts itself and `checkpoints` fails naming it.
#[test]
fn a_lineage_entry_edited_to_match_swapped_weights_fails_checkpoints() {
    let c = chain();
    let other = c.path("ckpt/other");
    write_trained_checkpoint(&other, 17).unwrap();
    let w = "model.safetensors";
    std::fs::copy(other.join(w), c.shipped.join(w)).unwrap();
    let sha = dlm_data::util::sha256_file(&c.shipped.join(w)).unwrap();
    let size = std::fs::metadata(c.shipped.join(w)).unwrap().len();
    let mut l: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&c.lineage).unwrap()).unwrap();
    let to = &mut l["stages"][2]["to"];
    for f in to["files"].as_array_mut().unwrap() {
        if f["path"] == w {
            f["sha256"] = sha.clone().into();
            f["size"] = size.into();
        }
    }
    let edited = c.path("lineage-edited.json");
    std::fs::write(&edited, serde_json::to_string_pretty(&l).unwrap()).unwrap();
    let (code, r, _) = audit(&c, &full(&c, &edited));
    assert_fails_only(
        "edited file list",
        code,
        &r,
        "checkpoints",
        &["entry 3 (stage stage3)", "not its recorded sha256"],
    );
    // The weights digest edited to match as well: still inconsistent (the listing digest).
    l["stages"][2]["to"]["weights_sha256"] = sha.into();
    std::fs::write(&edited, serde_json::to_string_pretty(&l).unwrap()).unwrap();
    let (code, r, _) = audit(&c, &full(&c, &edited));
    assert_fails_only(
        "edited weights digest too",
        code,
        &r,
        "checkpoints",
        &["entry 3"],
    );
}

#[test]
fn lineage_add_refuses_what_is_not_an_output_of_this_tool() {
    let c = chain();
    let lp = c.path("l.json");
    let junk = c.path("junk.json");
    std::fs::write(&junk, "[{\"id\": 1}]").unwrap();
    let (code, err) = lineage_add(&lp, "stage1", &c.base_dir, &[&junk], &c.ckpt1);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("junk.json"), "{err}");
    // An incomplete index (a killed pack) is refused.
    let half = c.path("half");
    copy_dir(&c.stage1, &half);
    let idx = half.join("index.json");
    let t = std::fs::read_to_string(&idx)
        .unwrap()
        .replace("\"complete\": true", "\"complete\": false");
    std::fs::write(&idx, t).unwrap();
    let (code, err) = lineage_add(&lp, "stage1", &c.base_dir, &[&half], &c.ckpt1);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not complete"), "{err}");
    assert!(!lp.exists(), "nothing recorded");
    // A missing checkpoint directory.
    let (code, err) = lineage_add(&lp, "stage1", &c.path("nope"), &[&c.stage1], &c.ckpt1);
    assert_eq!(code, 2, "{err}");
    // A parent that is not the previous output is recorded with a warning (the audit flags it).
    assert_eq!(
        lineage_add(&lp, "stage1", &c.base_dir, &[&c.stage1], &c.ckpt1).0,
        0
    );
    let (code, err) = lineage_add(&lp, "stage2", &c.ckpt3, &[&c.sft], &c.teacher);
    assert_eq!(code, 0);
    assert!(err.contains("not the previous stage's output"), "{err}");
    assert_eq!(Lineage::load(&lp).unwrap().stages.len(), 2);
}

#[test]
fn weights_digest_is_the_teachers_identity() {
    use dlm_data::model::checkpoint::Checkpoint;
    use dlm_data::teacher::{Teacher, TeacherOptions};
    for sharded in [false, true] {
        let d = tempfile::tempdir().unwrap();
        write_teacher(
            d.path(),
            &TinyTeacher {
                sharded,
                ..TinyTeacher::default()
            },
        )
        .unwrap();
        let t = Teacher::open(d.path(), &TeacherOptions::default()).unwrap();
        let a = ModelArchitecture::from_dir(d.path()).unwrap();
        assert_eq!(
            a.weights_sha256, t.identity.weights_sha256,
            "sharded {sharded}"
        );
        assert_eq!(
            a.config_sha256, t.identity.config_sha256,
            "sharded {sharded}"
        );
        let ck = Checkpoint::hash_dir(d.path()).unwrap();
        assert_eq!(
            ck.weights_sha256.as_deref(),
            Some(t.identity.weights_sha256.as_str())
        );
    }
}

/// `lineage add --json`: exactly one line of JSON on stdout, the stage as recorded and
/// whether this run added it (a rerun of the same stage adds nothing).
#[test]
fn lineage_add_json_is_one_line() {
    let c = chain();
    let lp = c.path("json-lineage.json");
    let args = [
        "lineage",
        "add",
        "--json",
        "--lineage",
        p(&lp),
        "--stage",
        "stage1",
        "--from",
        p(&c.base_dir),
        "--to",
        p(&c.ckpt1),
        "--data",
        p(&c.stage1),
    ];
    for (round, added) in [(1, true), (2, false)] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "round {round}: {err}");
        assert_eq!(out.lines().count(), 1, "round {round}: {out}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["added"], added, "{out}");
        assert_eq!(v["stages"], 1, "{out}");
        assert_eq!(v["stage"]["stage"], "stage1");
        let l = Lineage::load(&lp).unwrap();
        assert_eq!(v["stage"]["to"]["sha256"], l.stages[0].to.sha256.as_str());
    }
    // Without --json nothing goes to stdout.
    let (code, out, _) = run(&args[..2]
        .iter()
        .chain(&args[3..])
        .copied()
        .collect::<Vec<_>>());
    assert_eq!(code, 0);
    assert!(out.is_empty(), "{out}");
}

/// `fixtures --json`: one line naming what was written, every path present.
#[test]
fn fixtures_json_is_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("fx");
    let (code, stdout, err) = run(&["fixtures", "--json", "--out", p(&out)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for k in [
        "tokenizer",
        "hub",
        "teacher",
        "teacher_prompts",
        "checkpoints",
    ] {
        let path = v[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} missing: {stdout}"));
        assert!(Path::new(path).exists(), "{k}: {path}");
    }
    assert!(v["hub_repos"].as_u64().unwrap() >= 8, "{stdout}");
}
