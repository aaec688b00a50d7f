//! Issue 42, end to end on the binary: one writer for every file another command reads
//! (`lineage add` included), a complete output on a read-only directory verified without a
//! lock, `lineage add` never writing into a checkpoint it hashes nor recording a null weights
//! digest, audit confined to the output directory (a MosaicML decompressed twin checked, not
//! refused) and deep (`--deep` decodes every shard), and one symlink rule for the cache.
//!
//! Deterministic: a run pauses at a named point (`DLM_TEST_PAUSE`) and the test waits for the
//! pause file, never for a time.

mod mcq_support;
mod pause_support;

use pause_support::spawn_paused;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use dlm_data::audit::report::Status;
use dlm_data::fixtures::base_model::write_trained_checkpoint;
use dlm_data::model::lineage::Lineage;
use mcq_support::*;

const BUSY: i32 = 75;

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A pretraining output of the world's manifest (parquet, seq-len 32) in `out`.
fn pack_world(w: &World, out: &Path, extra: &[&str]) -> Output {
    bin()
        .args(pack_args(w, out, "32"))
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// The world, the SFT set (as `format`) and two checkpoints for lineage.
struct Stage {
    w: World,
    sft: PathBuf,
    from: PathBuf,
    to: PathBuf,
}

fn stage(format: &str) -> Stage {
    let w = world();
    let out = w.root().join("out");
    let (c, _, e) = run_mcq_shards(&w, &out, format, "20");
    assert_eq!(c, 0, "{e}");
    let (from, to) = (w.root().join("ck/a"), w.root().join("ck/b"));
    write_trained_checkpoint(&from, 1).unwrap();
    write_trained_checkpoint(&to, 2).unwrap();
    Stage {
        sft: out.join("sft"),
        w,
        from,
        to,
    }
}

fn lineage_cmd(s: &Stage, lineage: &Path, name: &str, to: &Path) -> Command {
    let mut c = bin();
    c.args(["lineage", "add", "--stage", name, "--from", p(&s.from)])
        .args(["--data", p(&s.sft), "--to", p(to), "--lineage", p(lineage)])
        .env("RUST_LOG", "warn");
    c
}

/// Two concurrent `lineage add`s on one lineage.json never lose a stage: the second exits 75
/// naming the first; every stage whose add exited 0 is in the file.
#[test]
fn lineage_add_is_one_writer() {
    let s = stage("parquet");
    let lp = s.w.root().join("lineage.json");
    let (a, pause) = spawn_paused(
        lineage_cmd(&s, &lp, "stage1", &s.to),
        "lock-held",
        s.w.root(),
    );
    let b = lineage_cmd(&s, &lp, "stage2", &s.to).output().unwrap();
    assert_eq!(code(&b), BUSY, "{}", err(&b));
    assert!(err(&b).contains(&format!("pid {}", a.id())), "{}", err(&b));
    std::fs::remove_file(&pause).unwrap();
    let a = a.wait_with_output().unwrap();
    assert_eq!(code(&a), 0, "{}", err(&a));
    assert_eq!(Lineage::load(&lp).unwrap().stages.len(), 1);

    // Free-running: every add exits 0 or 75, and each 0 is one stage in the file.
    let lp = s.w.root().join("race.json");
    let kids: Vec<Child> = (0..4)
        .map(|k| {
            lineage_cmd(&s, &lp, &format!("s{k}"), &s.to)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<i32> = kids
        .into_iter()
        .map(|k| code(&k.wait_with_output().unwrap()))
        .collect();
    assert!(codes.iter().all(|c| *c == 0 || *c == BUSY), "{codes:?}");
    let ok = codes.iter().filter(|c| **c == 0).count();
    assert_eq!(Lineage::load(&lp).unwrap().stages.len(), ok, "{codes:?}");
}

/// `--lineage` inside `--to` (or `--from`) is refused with the reason; a checkpoint whose
/// index maps tensors outside its directory is an error, not `weights_sha256: null`.
#[test]
fn lineage_add_refuses_its_file_in_a_checkpoint_and_unresolved_weights() {
    let s = stage("parquet");
    for dir in [&s.to, &s.from] {
        let inside = dir.join("lineage.json");
        let o = lineage_cmd(&s, &inside, "stage1", &s.to).output().unwrap();
        assert_eq!(code(&o), 2, "{}", err(&o));
        assert!(err(&o).contains("is inside --"), "{}", err(&o));
        assert!(!inside.exists());
    }
    let bad = s.w.root().join("ck/outside");
    write_trained_checkpoint(&bad, 3).unwrap();
    std::fs::remove_file(bad.join("model.safetensors")).unwrap();
    std::fs::write(
        bad.join("model.safetensors.index.json"),
        r#"{"weight_map": {"w": "../a/model.safetensors"}}"#,
    )
    .unwrap();
    let lp = s.w.root().join("lineage.json");
    let o = lineage_cmd(&s, &lp, "stage1", &bad).output().unwrap();
    assert_ne!(code(&o), 0, "{}", err(&o));
    assert!(err(&o).contains("../a/model.safetensors"), "{}", err(&o));
    assert!(!lp.exists(), "nothing recorded");
}

/// Run `cmd` unable to write a 0555 directory: as itself, or (root ignores modes) as nobody.
fn unprivileged(mut cmd: Command) -> Output {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::geteuid() == 0 && (libc::setgid(65534) != 0 || libc::setuid(65534) != 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Rerunning a complete pack on a read-only output reports it complete (no lock needed);
/// a rerun that would write there is refused naming the reason.
#[test]
fn a_complete_pack_on_a_read_only_output_is_reported_complete() {
    let w = world();
    let out = w.root().join("out");
    let o = pack_world(&w, &out, &[]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let before = std::fs::read(out.join("index.json")).unwrap();
    chmod(w.root(), 0o755);
    chmod(&out, 0o555);
    let rerun = |seq_len: &str| {
        let mut c = bin();
        c.args(pack_args(&w, &out, seq_len)).env("RUST_LOG", "warn");
        unprivileged(c)
    };
    let o = rerun("32");
    chmod(&out, 0o755);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(err(&o).contains("already complete"), "{}", err(&o));
    chmod(&out, 0o555);
    let o = rerun("16");
    chmod(&out, 0o755);
    assert_eq!(code(&o), 2, "{}", err(&o)); // other arguments: refused as ever
    assert_eq!(std::fs::read(out.join("index.json")).unwrap(), before);
    // A shard gone: the read-only output is not reported complete.
    std::fs::remove_file(out.join("data/part-00000.parquet")).unwrap();
    chmod(&out, 0o555);
    let o = rerun("32");
    chmod(&out, 0o755);
    assert_eq!(code(&o), 1, "{}", err(&o));
    assert!(err(&o).contains("read-only"), "{}", err(&o));
}

fn set_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn sha256(b: &[u8]) -> String {
    dlm_data::util::sha256_hex(b)
}

fn shards_audit(
    w: &World,
    dir: &Path,
    extra: &[&str],
) -> (i32, dlm_data::audit::report::AuditReport) {
    let (c, r, _) = audit_json(w, &[], &[&["--shards", p(dir)], extra].concat());
    (c, r)
}

/// A shard path that leaves the output directory (`../elsewhere/…`, absolute) is BROKEN
/// naming the entry, even with the right sha256.
#[test]
fn audit_confines_shard_paths_to_the_output() {
    let s = stage("parquet");
    let (c, _) = shards_audit(&s.w, &s.sft, &[]);
    assert_eq!(c, 0);
    let elsewhere = s.w.root().join("out/elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(
        s.sft.join("data/part-00000.parquet"),
        elsewhere.join("part-00000.parquet"),
    )
    .unwrap();
    let abs = elsewhere.join("part-00000.parquet").display().to_string();
    for file in [
        "../elsewhere/part-00000.parquet",
        abs.as_str(),
        "data/./part-00000.parquet",
    ] {
        let idx = s.sft.join("index.json");
        set_json(&idx, |v| v["shards"][0]["file"] = file.into());
        if file.starts_with("data/") {
            std::fs::copy(
                elsewhere.join("part-00000.parquet"),
                s.sft.join("data/part-00000.parquet"),
            )
            .unwrap();
        }
        let (c, r) = shards_audit(&s.w, &s.sft, &[]);
        assert_fails_only(
            file,
            c,
            &r,
            "shards",
            &[&format!("shards[0]: file {file:?}")],
        );
        let _ = std::fs::remove_file(s.sft.join("data/part-00000.parquet"));
    }
}

/// MosaicML's `StreamingDataset(local=OUT)` leaves `shard.NNNNN.mds` beside each zstd
/// shard: audit checks its bytes against the shard decompressed and reports it; a twin that
/// differs, and any other unlisted file, still break `shards`.
#[test]
fn audit_recognises_a_mosaicml_decompressed_twin() {
    let s = stage("mds");
    let z = s.sft.join("shard.00000.mds.zstd");
    let twin = s.sft.join("shard.00000.mds");
    let raw = zstd::decode_all(&std::fs::read(&z).unwrap()[..]).unwrap();
    std::fs::write(&twin, &raw).unwrap();
    let (c, r) = shards_audit(&s.w, &s.sft, &[]);
    assert_eq!(c, 0, "{r:#?}");
    let shards = r.checks.iter().find(|c| c.check == "shards").unwrap();
    assert!(
        format!("{shards:?}").contains("shard.00000.mds is shard.00000.mds.zstd decompressed"),
        "{shards:?}"
    );
    let mut bad = raw.clone();
    bad[raw.len() / 2] ^= 1;
    std::fs::write(&twin, &bad).unwrap();
    let (c, r) = shards_audit(&s.w, &s.sft, &[]);
    assert_fails_only("twin", c, &r, "shards", &["shard.00000.mds is not"]);
    std::fs::write(&twin, &raw).unwrap();
    std::fs::write(s.sft.join("shard.00000.mds.bak"), &raw).unwrap();
    let (c, r) = shards_audit(&s.w, &s.sft, &[]);
    assert_fails_only("other", c, &r, "shards", &["shard.00000.mds.bak"]);
}

/// Rewrite shard `k`'s recorded sha256 and size after its bytes changed (what an attacker of
/// `--hash`-only audits does).
fn rehash(dir: &Path, k: usize) {
    let idx = dir.join("index.json");
    set_json(&idx, |v| {
        let inner = if v.get("dlm_data").is_some() {
            &mut v["dlm_data"]
        } else {
            v
        };
        let sh = &mut inner["shards"][k];
        let b = std::fs::read(dir.join(sh["file"].as_str().unwrap())).unwrap();
        sh["sha256"] = sha256(&b).into();
        sh["bytes"] = (b.len() as u64).into();
        let extras: Vec<String> = sh["extra_files"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for e in extras {
            sh["extra_files"][&e] = sha256(&std::fs::read(dir.join(&e)).unwrap()).into();
        }
    });
}

/// `--deep`: a structural break the hashes cannot see (index.json rewritten to match) passes
/// a plain audit and fails the deep one, naming the shard and the contract.
fn assert_deep_catches(w: &World, dir: &Path, what: &str, needle: &str) {
    let (c, r) = shards_audit(w, dir, &[]);
    assert_eq!(c, 0, "{what}: a plain audit should not see it: {r:#?}");
    let (c, r) = shards_audit(w, dir, &["--deep"]);
    assert_fails_only(what, c, &r, "shards", &["(--deep)", needle]);
}

fn rewrite_parquet(path: &Path, f: impl FnOnce(&mut dlm_data::shards::RowBatch)) {
    let mut b = dlm_data::shards::parquet::read(path).unwrap();
    f(&mut b);
    std::fs::write(
        path,
        dlm_data::shards::parquet::encode(
            &b,
            dlm_data::shards::parquet::ZSTD_LEVEL,
            dlm_data::tuning::RowGroups::INLINE,
        )
        .unwrap(),
    )
    .unwrap();
}

#[test]
fn audit_deep_decodes_parquet_against_its_contract() {
    let w = world();
    let out = w.root().join("stage1");
    let o = pack_world(&w, &out, &[]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let (c, r) = shards_audit(&w, &out, &["--deep"]);
    assert_eq!(c, 0, "{r:#?}");
    let shard = out.join("data/part-00000.parquet");
    let orig = std::fs::read(&shard).unwrap();
    let vocab = dlm_data::shards::index::load(&out)
        .unwrap()
        .tokenizer
        .vocab_size;
    rewrite_parquet(&shard, |b| {
        if let Some((_, dlm_data::shards::Column::U32List(v))) =
            b.columns.iter_mut().find(|(n, _)| n == "doc_offsets")
        {
            v[0] = vec![0, 20, 10, 32];
        }
    });
    rehash(&out, 0);
    assert_deep_catches(&w, &out, "doc_offsets backwards", "doc_offsets");
    std::fs::write(&shard, &orig).unwrap();
    rewrite_parquet(&shard, |b| b.input_ids[1][3] = vocab);
    rehash(&out, 0);
    assert_deep_catches(&w, &out, "id past the vocabulary", "vocabulary size");
    // A null inside input_ids (read back as 0 by a reader that ignores validity).
    std::fs::write(&shard, &orig).unwrap();
    write_with_a_null_id(&shard);
    rehash(&out, 0);
    assert_deep_catches(&w, &out, "null id", "null");
}

/// Rewrite a parquet shard with one `input_ids` element null (same rows otherwise).
fn write_with_a_null_id(path: &Path) {
    use arrow::array::{Array, ArrayRef, ListBuilder, UInt32Builder};
    let b = dlm_data::shards::parquet::read(path).unwrap();
    let rb = dlm_data::shards::parquet::to_record_batch(&b).unwrap();
    let mut lb = ListBuilder::new(UInt32Builder::new());
    for (r, row) in b.input_ids.iter().enumerate() {
        for (i, id) in row.iter().enumerate() {
            if r == 0 && i == 5 {
                lb.values().append_null();
            } else {
                lb.values().append_value(*id);
            }
        }
        lb.append(true);
    }
    let ids: ArrayRef = std::sync::Arc::new(lb.finish());
    let schema = rb.schema();
    let k = schema.index_of("input_ids").unwrap();
    let mut cols: Vec<ArrayRef> = rb.columns().to_vec();
    let field = arrow::datatypes::Field::new("input_ids", ids.data_type().clone(), true);
    let mut fields: Vec<arrow::datatypes::Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[k] = field;
    cols[k] = ids;
    let rb = arrow::array::RecordBatch::try_new(
        std::sync::Arc::new(arrow::datatypes::Schema::new(fields)),
        cols,
    )
    .unwrap();
    let f = std::fs::File::create(path).unwrap();
    let mut wr = parquet::arrow::ArrowWriter::try_new(f, rb.schema(), None).unwrap();
    wr.write(&rb).unwrap();
    wr.close().unwrap();
}

#[test]
fn audit_deep_checks_megatron_and_mds_bounds() {
    // Megatron: a sequence length in the .idx one past what its .bin holds.
    let s = stage("megatron");
    let (c, r) = shards_audit(&s.w, &s.sft, &["--deep"]);
    assert_eq!(c, 0, "{r:#?}");
    let idx = s.sft.join("part-00000.idx");
    let mut b = std::fs::read(&idx).unwrap();
    let l = i32::from_le_bytes(b[34..38].try_into().unwrap());
    b[34..38].copy_from_slice(&(l + 1).to_le_bytes());
    std::fs::write(&idx, &b).unwrap();
    rehash(&s.sft, 0);
    assert_deep_catches(&s.w, &s.sft, "megatron idx past bin", "part-00000.bin");

    // MDS: a decompression bomb in place of a shard (its raw size past the MosaicML index's).
    let s = stage("mds");
    let (c, r) = shards_audit(&s.w, &s.sft, &["--deep"]);
    assert_eq!(c, 0, "{r:#?}");
    let z = s.sft.join("shard.00000.mds.zstd");
    let mut raw = zstd::decode_all(&std::fs::read(&z).unwrap()[..]).unwrap();
    raw.resize(raw.len() + (64 << 20), 0);
    std::fs::write(&z, zstd::encode_all(&raw[..], 3).unwrap()).unwrap();
    rehash(&s.sft, 0);
    assert_deep_catches(&s.w, &s.sft, "mds bomb", "decompresses to more than");
}

/// A cache whose `blobs/` is a link to another disk: what fetch writes through, pack and mcq
/// read (one rule); a blob replaced by a link out of the cache is still refused.
#[test]
fn a_cache_with_blobs_on_another_disk_is_read() {
    let w = world();
    let bigdisk = w.root().join("bigdisk");
    std::fs::create_dir_all(&bigdisk).unwrap();
    let mut moved = 0;
    for e in std::fs::read_dir(&w.cache).unwrap().flatten() {
        let blobs = e.path().join("blobs");
        if blobs.is_dir() {
            let to = bigdisk.join(e.file_name());
            std::fs::rename(&blobs, &to).unwrap();
            std::os::unix::fs::symlink(&to, &blobs).unwrap();
            moved += 1;
        }
    }
    assert!(moved > 0);
    let o = pack_world(&w, &w.root().join("out"), &[]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let (c, _, e) = run_mcq(&w, &w.root().join("mcq"), &[]);
    assert_eq!(c, 0, "{e}");
    let (c, r, _) = audit_json(&w, &[], &[]);
    assert_eq!(c, 0, "{r:#?}");
    assert_eq!(
        r.checks.iter().find(|c| c.check == "cache").unwrap().status,
        Status::Pass
    );
    // One blob replaced by a link to a file outside the cache: refused by pack and audit.
    let blob = std::fs::read_dir(&bigdisk)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .find(|f| f.path().is_file())
        .unwrap()
        .path();
    let copy = w.root().join("stolen");
    std::fs::copy(&blob, &copy).unwrap();
    std::fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink(&copy, &blob).unwrap();
    let (c, r, _) = audit_json(&w, &[], &[]);
    assert_eq!(c, 1, "{r:#?}");
    assert!(
        problems(&r, "cache").contains("outside the cache"),
        "{r:#?}"
    );
}

/// Rewrite the header of `dir/model.safetensors` (data kept) through `f`.
fn edit_header(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let path = dir.join("model.safetensors");
    let b = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut h: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&b[8..8 + n]).unwrap();
    f(&mut h);
    let mut head = serde_json::to_vec(&h).unwrap();
    while head.len() < n {
        head.push(b' '); // same data offsets
    }
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&head);
    out.extend_from_slice(&b[8 + n..]);
    std::fs::write(&path, out).unwrap();
}

/// One safetensors header reader for fetch and audit (architecture.json) and distill (the
/// teacher): F32 declared over BF16 bytes, overlapping ranges and a shape whose element count
/// wraps u64 are refused by both, naming the tensor.
#[test]
fn safetensors_headers_are_checked_once_for_every_reader() {
    use dlm_data::fixtures::teacher::{write_teacher, TinyTeacher};
    use dlm_data::model::architecture::ModelArchitecture;
    use dlm_data::teacher::{Teacher, TeacherOptions};
    let norm = "model.norm.weight";
    let cases: Vec<(
        &str,
        Box<dyn Fn(&mut serde_json::Map<String, serde_json::Value>)>,
    )> = vec![
        (
            "16 bytes",
            Box::new(|h| {
                // hidden 64 as F32 is 256 bytes; the range holds 128 (BF16).
                h[norm]["dtype"] = "F32".into();
            }),
        ),
        (
            "overlap",
            Box::new(|h| {
                let other = "model.layers.0.input_layernorm.weight";
                h[norm]["data_offsets"] = h[other]["data_offsets"].clone();
            }),
        ),
        (
            "more elements than a u64",
            Box::new(|h| {
                h[norm]["shape"] = serde_json::json!([1u64 << 32, 1u64 << 32, 1024]);
            }),
        ),
    ];
    for (needle, edit) in cases {
        let d = tempfile::tempdir().unwrap();
        write_teacher(d.path(), &TinyTeacher::default()).unwrap();
        edit_header(d.path(), |h| edit(h));
        let e = format!("{:#}", ModelArchitecture::from_dir(d.path()).unwrap_err());
        let needle = if needle == "16 bytes" {
            "256 bytes"
        } else {
            needle
        };
        assert!(e.contains(needle) && e.contains(norm), "architecture: {e}");
        let e = match Teacher::open(d.path(), &TeacherOptions::default()) {
            Ok(_) => panic!("{needle}: the teacher loaded"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(needle) && e.contains(norm), "teacher: {e}");
    }
}
