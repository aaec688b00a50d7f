//! pack and mcq resolve EOS and BOS by one rule (src/tokenize/files.rs): a tokenizer without
//! tokenizer_config.json (falcon-7b's shape) gets the EOS tokenizer.json knows in both; a config
//! with `add_bos_token: true` (Mistral's) puts its bos_token before every document (pack) and
//! every SFT row, inside prompt_len (mcq); `--no-bos` and `--bos-token` override; both log it.

mod mcq_support;
mod pack_common;

use std::path::{Path, PathBuf};

use dlm_data::mcq::sft_shards;
use mcq_support::{p, run_mcq, world};

/// The fixture tokenizer.json in `dir`, with `config` as tokenizer_config.json (none: absent).
fn variant(src: &Path, dir: &Path, config: Option<serde_json::Value>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let json = if src.is_dir() {
        src.join("tokenizer.json")
    } else {
        src.to_path_buf()
    };
    std::fs::copy(json, dir.join("tokenizer.json")).unwrap();
    if let Some(c) = config {
        std::fs::write(dir.join("tokenizer_config.json"), c.to_string()).unwrap();
    }
    dir.to_path_buf()
}

fn id(tok: &Path, t: &str) -> u32 {
    tokenizers::Tokenizer::from_file(tok.join("tokenizer.json"))
        .unwrap()
        .token_to_id(t)
        .unwrap()
}

#[test]
fn mcq_follows_the_tokenizer_config() {
    let w = world();
    let root = w.root().to_path_buf();
    let sft = |name: &str, tok: &Path, extra: &[&str]| {
        let out = root.join(name);
        let mut a = vec!["--tokenizer", p(tok)];
        a.extend_from_slice(extra);
        let (code, _, err) = run_mcq(&w, &out, &a);
        assert_eq!(code, 0, "{name}: {err}");
        (sft_shards::read_dir(&out.join("sft")).unwrap(), out, err)
    };
    let (base, _, _) = sft("base", &w.tokenizer, &[]);
    // No tokenizer_config.json: mcq used to refuse; now the EOS tokenizer.json knows.
    let bare = variant(&w.tokenizer, &root.join("tok-bare"), None);
    let (rows, _, _) = sft("bare", &bare, &[]);
    let want_eos = dlm_data::tokenize::files::EOS_CANDIDATES
        .iter()
        .find_map(|t| {
            tokenizers::Tokenizer::from_file(bare.join("tokenizer.json"))
                .unwrap()
                .token_to_id(t)
        })
        .unwrap();
    assert!(rows
        .iter()
        .all(|r| *r.input_ids.last().unwrap() == want_eos));
    // add_bos_token: true → BOS first, counted in prompt_len; the rest unchanged.
    let cfg = serde_json::json!({"add_bos_token": true, "bos_token": "<s>", "eos_token": "</s>"});
    let mistral = variant(&w.tokenizer, &root.join("tok-bos"), Some(cfg));
    let bos = id(&mistral, "<s>");
    let (rows, out, _) = sft("bos", &mistral, &["--rows-per-shard", "1000"]);
    assert_eq!(rows.len(), base.len());
    for (r, b) in rows.iter().zip(&base) {
        assert_eq!(r.input_ids[0], bos);
        assert_eq!(&r.input_ids[1..], &b.input_ids[..]);
        assert_eq!(r.prompt_len, b.prompt_len + 1);
    }
    let idx = dlm_data::shards::index::load_complete(&out.join("sft")).unwrap();
    assert_eq!(idx.extra["bos_token"], "<s>");
    // --no-bos: the rows of the config without BOS; --bos-token on the plain fixture: BOS.
    let (rows, _, _) = sft("nobos", &mistral, &["--no-bos"]);
    assert_eq!(
        rows.iter().map(|r| &r.input_ids).collect::<Vec<_>>(),
        base.iter().map(|r| &r.input_ids).collect::<Vec<_>>()
    );
    let (rows, out, _) = sft("bostoken", &w.tokenizer, &["--bos-token", "<s>"]);
    assert!(rows.iter().all(|r| r.input_ids[0] == bos));
    assert!(
        dlm_data::shards::index::load_complete(&out.join("sft"))
            .unwrap()
            .extra["bos_token"]
            == "<s>"
    );
    // Without a BOS the index has no bos_token key (existing outputs keep their bytes).
    let idx = dlm_data::shards::index::load_complete(&root.join("base/sft")).unwrap();
    assert!(!idx.extra.contains_key("bos_token"));
    // A BOS the vocabulary lacks is a usage error naming it.
    let (code, _, err) = run_mcq(
        &w,
        &root.join("badbos"),
        &["--tokenizer", p(&w.tokenizer), "--bos-token", "<nope>"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("<nope>"), "{err}");
}

/// The real falcon-7b tokenizer (no tokenizer_config.json) where the shared set is present:
/// pack and mcq both find its EOS.
#[test]
fn falcon_tokenizer_works_for_pack_and_mcq() {
    let falcon = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/tokenizers/falcon-7b");
    if !falcon.join("tokenizer.json").is_file() {
        eprintln!("skipped: {} not present", falcon.display());
        return;
    }
    let w = world();
    let out = w.root().join("falcon");
    let (code, _, err) = run_mcq(&w, &out, &["--tokenizer", p(&falcon)]);
    assert_eq!(code, 0, "{err}");
    let eos = id(&falcon, "<|endoftext|>");
    let rows = sft_shards::read_dir(&out.join("sft")).unwrap();
    assert!(!rows.is_empty() && rows.iter().all(|r| *r.input_ids.last().unwrap() == eos));
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.parquet");
    let docs = pack_common::docs(1, 10);
    pack_common::write_parquet(
        &input,
        &docs.iter().cloned().map(Some).collect::<Vec<_>>(),
        8,
    );
    let o = pack_common::run_pack(
        &input,
        &falcon,
        &d.path().join("o"),
        &["--seq-len", "32"],
        &[],
    );
    pack_common::ok(&o);
    let idx = pack_common::index(&d.path().join("o"));
    assert_eq!(idx["tokenizer"]["eos_id"], eos);
}

#[test]
fn pack_follows_the_tokenizer_config() {
    let d = tempfile::tempdir().unwrap();
    let tok = pack_common::tokenizer(d.path());
    let docs = pack_common::docs(2, 12);
    let input = d.path().join("in.parquet");
    pack_common::write_parquet(
        &input,
        &docs.iter().cloned().map(Some).collect::<Vec<_>>(),
        8,
    );
    let pack = |name: &str, tok: &Path, extra: &[&str]| {
        let out = d.path().join(name);
        let mut a = vec!["--format", "megatron"];
        a.extend_from_slice(extra);
        let o = pack_common::run_pack(&input, tok, &out, &a, &[("RUST_LOG", "info")]);
        pack_common::ok(&o);
        let idx = dlm_data::shards::index::load_complete(&out).unwrap();
        let mut rows = vec![];
        for k in 0..idx.shards.len() {
            rows.extend(idx.read_shard(&out, k).unwrap().input_ids);
        }
        (rows, idx, pack_common::stderr(&o))
    };
    let (base, idx, log) = pack("base", &tok, &[]);
    assert_eq!(idx.extra["bos_token"], serde_json::Value::Null);
    assert!(log.contains("BOS none"), "{log}");
    let cfg = serde_json::json!({"add_bos_token": true, "bos_token": "<s>", "eos_token": "</s>"});
    let mistral = variant(&tok, &d.path().join("tok-bos"), Some(cfg));
    let bos = id(&mistral, "<s>");
    let (rows, idx, log) = pack("bos", &mistral, &[]);
    assert_eq!(idx.extra["bos_token"], "<s>");
    assert!(
        log.contains("BOS \"<s>\"") && log.contains("add_bos_token"),
        "{log}"
    );
    // Megatron: one row per document, so each row is BOS + the document's row.
    assert_eq!(rows.len(), base.len());
    for (r, b) in rows.iter().zip(&base) {
        assert_eq!(r[0], bos);
        assert_eq!(&r[1..], &b[..]);
    }
    let (rows, _, _) = pack("nobos", &mistral, &["--no-bos"]);
    assert_eq!(rows, base);
    // Without tokenizer_config.json: the EOS tokenizer.json knows, as mcq.
    let bare = variant(&tok, &d.path().join("tok-bare"), None);
    let (_, idx, log) = pack("bare", &bare, &[]);
    assert!(
        log.contains("special token found in tokenizer.json"),
        "{log}"
    );
    assert_eq!(
        idx.extra["eos_choice"],
        "special token found in tokenizer.json"
    );
}
