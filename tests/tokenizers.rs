//! The fast tokenizer path gives ids identical to Python `tokenizers`
//! (`encode(text, add_special_tokens=False)`) for every tokenizer family: the real files in
//! ../shared/tokenizers/ (read in place), Llama-3-, Qwen2-, o200k-, DeepSeek-V3- and
//! MiniCPM5-shaped tokenizers trained by tests/py/tokenizer_shapes.py, and SentencePiece
//! variants of the real Mistral file — on a multilingual corpus plus every added token's
//! content inside and around words. It also pins which families take the fast path.

use std::path::{Path, PathBuf};
use std::process::Command;

use std::str::FromStr;

use dlm_data::added_text::SpecialTokensInText;
use dlm_data::tokenize::{BoundaryFlags, DocTokenizer};

fn shared_tokenizers() -> Option<PathBuf> {
    let p = std::env::var_os("DLM_SHARED_TOKENIZERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tokenizers"));
    p.is_dir().then_some(p)
}

/// Families that must take the fast path (the rest must go through the crate).
fn must_be_fast(name: &str) -> bool {
    !matches!(
        name,
        "falcon-7b" | "clip" | "t5-small" | "bert-base-chinese" | "bert-base-uncased"
    )
}

/// A failure line: the text's start and the ids around the first one that differs.
fn first_difference(what: &str, text: &str, got: &[u32], want: &[u32]) -> String {
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    format!(
        "{what} {:?}: first difference at id {at}: got {:?} want {:?}",
        text.chars().take(80).collect::<String>(),
        &got[at.saturating_sub(2)..(at + 4).min(got.len())],
        &want[at.saturating_sub(2)..(at + 4).min(want.len())]
    )
}

#[test]
fn fast_path_ids_identical_to_python_on_every_family() {
    let Ok(py) = std::env::var("DLM_PYTHON") else {
        panic!(
            "DLM_PYTHON is not set: run through `make test` (it installs the venv with tokenizers)"
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(py);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/tokenizer_shapes.py"))
        .arg(dir.path());
    let shared = shared_tokenizers();
    match &shared {
        Some(s) => {
            cmd.arg(s);
        }
        None => eprintln!(
            "\n*** ../shared/tokenizers not found: only the trained shapes are checked (set DLM_SHARED_TOKENIZERS) ***\n"
        ),
    }
    let st = cmd.status().unwrap();
    assert!(st.success(), "tokenizer_shapes.py failed");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('_'))
        .collect();
    names.sort();
    chat_template_markers_stay_prompt_text_is_plain(&dir.path().join("_chat/minicpm5"));
    for must in [
        "llama3-shaped",
        "qwen2-shaped",
        "o200k-shaped",
        "deepseek3-shaped",
        "minicpm5-shaped",
    ] {
        assert!(names.iter().any(|n| n == must), "{must} missing");
    }
    if shared.is_some() {
        for must in [
            "mistral-7b-v0.1",
            "phi-3-mini",
            "phi-2",
            "gemma-shaped-mistral-vocab",
        ] {
            assert!(names.iter().any(|n| n == must), "{must} missing");
        }
    }
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for name in &names {
        let d = dir.path().join(name);
        let tok = DocTokenizer::load(&d, &BoundaryFlags::no_eos()).unwrap();
        let exp: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("expected.json")).unwrap())
                .unwrap();
        let texts = exp["texts"].as_array().unwrap();
        let ids = exp["ids"].as_array().unwrap();
        let mut bad = 0;
        for (k, (t, want)) in texts.iter().zip(ids).enumerate() {
            let t = t.as_str().unwrap();
            let want: Vec<u32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            let got = tok.encode(t).unwrap();
            if got != want {
                bad += 1;
                if bad <= 3 {
                    failures.push(first_difference(
                        &format!("{name} text #{k}"),
                        t,
                        &got,
                        &want,
                    ));
                }
            }
        }
        // Without the crate loaded, the fast path must still answer vocabulary questions as
        // the crate does: vocab size with added tokens, and the id of every added token and
        // of a spread of model tokens (EOS/BOS/pad are looked up this way).
        let text = std::fs::read_to_string(d.join("tokenizer.json")).unwrap();
        let krate = tokenizers::Tokenizer::from_str(&text).unwrap();
        if tok.vocab_size as usize != krate.get_vocab_size(true) {
            failures.push(format!(
                "{name}: vocab_size {} vs the crate's {}",
                tok.vocab_size,
                krate.get_vocab_size(true)
            ));
        }
        let mut probes: Vec<String> = krate
            .get_added_tokens_decoder()
            .values()
            .map(|t| t.content.clone())
            .collect();
        let vocab = krate.get_vocab(false);
        probes.extend(vocab.keys().step_by(97).cloned());
        probes.push("no such token \u{1}".to_string());
        for p in &probes {
            if tok.token_to_id(p) != krate.token_to_id(p) {
                failures.push(format!(
                    "{name}: token_to_id({p:?}) = {:?}, the crate's {:?}",
                    tok.token_to_id(p),
                    krate.token_to_id(p)
                ));
            }
        }
        if must_be_fast(name) != tok.is_fast() {
            failures.push(format!(
                "{name}: path {} (fast expected: {})",
                tok.path(),
                must_be_fast(name)
            ));
        }
        // --special-tokens-in-text: plain ids equal Python `tokenizers` on the same
        // tokenizer.json without its marker added tokens, split ids equal `encode` — on the
        // fast path and on the crate path (the ranged encoder of mcq / distill / pack's
        // fallback); every text holding a marker's content reports it, and a text with no hit
        // has the same ids in both modes.
        let plain_want = exp["plain_ids"].as_array().unwrap();
        let mut plain_differs = 0;
        for (mode, no_fast) in [
            (SpecialTokensInText::Plain, false),
            (SpecialTokensInText::Plain, true),
            (SpecialTokensInText::Split, true),
            (SpecialTokensInText::Split, false),
        ] {
            let t = DocTokenizer::load(
                &d,
                &BoundaryFlags {
                    no_fast,
                    mode,
                    ..BoundaryFlags::no_eos()
                },
            )
            .unwrap();
            let mut bad = 0;
            for (k, text) in texts.iter().enumerate() {
                let text = text.as_str().unwrap();
                let want_v = if mode == SpecialTokensInText::Plain {
                    &plain_want[k]
                } else {
                    &ids[k]
                };
                let want: Vec<u32> = want_v
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect();
                let e = t.encode_data(text).unwrap();
                if mode == SpecialTokensInText::Plain && !no_fast && want_v != &ids[k] {
                    plain_differs += 1;
                }
                let holds = plain_want[k] != ids[k];
                let mut why = Vec::new();
                if e.ids != want {
                    why.push("ids".to_string());
                }
                if holds && e.hits.is_empty() {
                    why.push("a marker's content not reported".into());
                }
                if e.hits.is_empty() && want_v != &ids[k] {
                    why.push("no hit, yet plain and split ids differ".into());
                }
                if let Some(h) = e.hits.iter().find(|h| {
                    let c = t.token_name(h.id);
                    !text
                        .get(h.offset..)
                        .is_some_and(|r| r.starts_with(c.as_str()))
                        && t.is_fast()
                }) {
                    why.push(format!("hit {h:?} not at its content"));
                }
                if !why.is_empty() {
                    bad += 1;
                    if bad <= 3 {
                        let at = e
                            .ids
                            .iter()
                            .zip(&want)
                            .position(|(a, b)| a != b)
                            .unwrap_or(e.ids.len().min(want.len()));
                        failures.push(format!(
                            "{name} {mode:?} no_fast={no_fast} text #{k} {:?}: {}: at id {at}: got {:?} want {:?}",
                            text.chars().take(80).collect::<String>(),
                            why.join(", "),
                            &e.ids[at.saturating_sub(2)..(at + 4).min(e.ids.len())],
                            &want[at.saturating_sub(2)..(at + 4).min(want.len())]
                        ));
                    }
                }
            }
            if bad > 0 {
                failures.push(format!(
                    "{name} {mode:?} no_fast={no_fast}: {bad} texts wrong"
                ));
            }
        }
        if plain_want.iter().zip(ids).any(|(p, s)| p != s) && plain_differs == 0 {
            failures.push(format!("{name}: plain mode never differed from split"));
        }
        report.push(format!(
            "{name}: {} texts, {bad} differ, {plain_differs} differ in plain mode, {}",
            texts.len(),
            tok.path()
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The chat-template side (distill): on the MiniCPM5-shaped tokenizer with a Qwen/MiniCPM-style
/// template, the rendering is unchanged, the template's markers stay tokens and the prompt's
/// bytes are plain text — ids equal to Python's reference (the rendering split at the template's
/// markers, each text piece encoded without marker tokens); in split mode ids equal Python's
/// `encode(rendered)`; prompts without added-token text get the same ids in both modes.
fn chat_template_markers_stay_prompt_text_is_plain(d: &Path) {
    let tok = dlm_data::teacher::TeacherTokenizer::open(d).unwrap();
    let exp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("chat.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let prompts = exp["prompts"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut differ = 0;
    for (k, p) in prompts.iter().enumerate() {
        let p = p.as_str().unwrap();
        let plain = ids(&exp["plain_ids"][k]);
        let split = ids(&exp["split_ids"][k]);
        let mut hits = Vec::new();
        let (got, rendered) = tok.encode_prompt(p, true, true, &mut hits).unwrap();
        assert_eq!(
            rendered,
            exp["rendered"][k].as_str().unwrap(),
            "prompt {p:?}"
        );
        if got != plain {
            failures.push(format!("plain {p:?}:\n got  {got:?}\n want {plain:?}"));
        }
        let mut hits2 = Vec::new();
        let (got_split, _) = tok.encode_prompt(p, true, false, &mut hits2).unwrap();
        if got_split != split {
            failures.push(format!(
                "split {p:?}:\n got  {got_split:?}\n want {split:?}"
            ));
        }
        if plain != split {
            differ += 1;
            if hits.is_empty() {
                failures.push(format!("{p:?}: plain differs from split but no hit"));
            }
        } else if !hits.is_empty() && hits.iter().any(|h| tok.ranged.tries.name(h.id) != "<s>") {
            // A hit with identical ids: only a token the model's merges produce anyway.
            failures.push(format!("{p:?}: hits {hits:?} yet the same ids"));
        }
        // Hits point into the prompt's bytes of the rendering.
        let a = "<s><|im_start|>user\n".len();
        assert_eq!(&rendered[a..a + p.len()], p);
        if let Some(h) = hits
            .iter()
            .find(|h| h.offset < a || h.offset >= a + p.len())
        {
            failures.push(format!("{p:?}: hit {h:?} outside the prompt's bytes"));
        }
    }
    assert!(
        differ >= 5,
        "only {differ} prompts differ between the modes"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Indentation-heavy text and long runs of spaces on SentencePiece BPE: the fast path cuts a
/// word's leading run of `▁` off when a load-time proof allows it (src/tokenize/bpe/mod.rs
/// `RunSplit`), else merges the whole word. Ids must equal the `tokenizers` crate's on
/// SentencePiece tokenizers built here whose merge orders hit every case — run merges ranked
/// last (the proof holds), first (it fails: `▁▁▁re` is `▁▁▁ re`, not `▁▁ ▁re`), interleaved
/// with the word merges, and vocabularies the proof must refuse (`(▁`, `▁▁a`) — and, when
/// ../shared/tokenizers is there, on the real Mistral and Phi-3 files.
#[test]
fn sentencepiece_space_runs_ids_identical_to_the_crate() {
    let dir = tempfile::tempdir().unwrap();
    let texts = space_run_texts();
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for (variant, json) in sp_run_variants() {
        let d = dir.path().join(&variant);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("tokenizer.json"), &json).unwrap();
        checked.push((variant, d));
    }
    if let Some(s) = shared_tokenizers() {
        for fam in ["mistral-7b-v0.1", "phi-3-mini"] {
            if s.join(fam).join("tokenizer.json").is_file() {
                checked.push((fam.to_string(), s.join(fam)));
            }
        }
    }
    for (name, d) in &checked {
        let tok = DocTokenizer::load(d, &BoundaryFlags::no_eos()).unwrap();
        assert!(tok.is_fast(), "{name}: {}", tok.path());
        let krate = tokenizers::Tokenizer::from_file(d.join("tokenizer.json")).unwrap();
        let mut bad = 0;
        for t in &texts {
            let want = krate.encode(t.as_str(), false).unwrap().get_ids().to_vec();
            let got = tok.encode(t).unwrap();
            if got != want {
                bad += 1;
                if bad <= 3 {
                    failures.push(first_difference(name, t, &got, &want));
                }
            }
        }
        if bad > 0 {
            failures.push(format!("{name}: {bad} of {} texts wrong", texts.len()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Texts of space runs of many lengths (past the fast path's 256-run table too) before words,
/// punctuation, byte-fallback and unknown chars, tabs, newlines and the end of the text.
fn space_run_texts() -> Vec<String> {
    let words = [
        "return",
        "ret",
        "re",
        "r",
        "ab",
        "abc",
        "a",
        "(a, b)",
        "(",
        ",",
        "self.assertRaises(TypeError,",
        "é",
        "中文",
        "🙂x",
        "\tx",
        "▁x",
        "z",
        "\u{378}",
    ];
    let mut lens: Vec<usize> = (1..=40).collect();
    lens.extend([47, 63, 64, 65, 100, 255, 256, 257, 258, 300, 513]);
    let mut out = Vec::new();
    for &k in &lens {
        let run = " ".repeat(k);
        let mut lines: Vec<String> = words.iter().map(|w| format!("{run}{w}")).collect();
        lines.push(run.clone());
        out.push(lines.join("\n"));
        out.push(
            words
                .iter()
                .map(|w| format!("x{run}{w}"))
                .collect::<String>()
                + &run,
        );
        out.push(format!("{run}return {run}"));
        out.push(format!("a\n{run}\n{run}b\n\n{run}"));
    }
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..300 {
        let mut t = String::new();
        for _ in 0..12 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.push_str(&" ".repeat((x % 37) as usize));
            t.push_str(words[(x >> 8) as usize % words.len()]);
            if x >> 40 & 3 == 0 {
                t.push('\n');
            }
        }
        out.push(t);
    }
    out
}

/// SentencePiece-style tokenizer.json files (byte fallback, fused unk) over a small alphabet,
/// named for their merge order, each with the Metaspace pre-tokenizer (Mistral's shape) and
/// with the Prepend + Replace normalizer (Phi-3's).
fn sp_run_variants() -> Vec<(String, String)> {
    let run = |k: usize| "▁".repeat(k);
    let run_merges: Vec<(String, String)> = [
        (1, 1),
        (2, 2),
        (2, 1),
        (1, 2),
        (4, 4),
        (3, 1),
        (1, 3),
        (4, 2),
        (8, 8),
        (2, 4),
        (1, 4),
        (4, 1),
        (8, 1),
        (16, 16),
    ]
    .iter()
    .map(|&(a, b)| (run(a), run(b)))
    .collect();
    let word_merges: Vec<(String, String)> = [
        ("▁", "r"),
        ("r", "e"),
        ("▁r", "e"),
        ("▁", "re"),
        ("e", "t"),
        ("▁re", "t"),
        ("a", "b"),
        ("▁", "a"),
        ("▁a", "b"),
        ("ab", "c"),
        ("▁", "ab"),
        ("▁ab", "c"),
        ("(", "a"),
        ("▁", "("),
        ("▁(", "a"),
        ("▁", ","),
        ("▁", "x"),
        ("▁", "\t"),
        ("▁", "é"),
    ]
    .iter()
    .map(|&(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|&(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let (w1, w2) = word_merges.split_at(word_merges.len() / 2);
    let orders: Vec<(&str, Vec<(String, String)>)> = vec![
        (
            "runs-last",
            [word_merges.clone(), run_merges.clone()].concat(),
        ),
        (
            "runs-first",
            [run_merges.clone(), word_merges.clone()].concat(),
        ),
        (
            "interleaved",
            [w1.to_vec(), run_merges.clone(), w2.to_vec()].concat(),
        ),
        (
            "paren-space",
            [
                word_merges.clone(),
                pairs(&[("(", "▁")]),
                run_merges.clone(),
            ]
            .concat(),
        ),
        (
            "double-space-word",
            [
                run_merges.clone(),
                pairs(&[("▁▁", "a")]),
                word_merges.clone(),
            ]
            .concat(),
        ),
    ];
    let alphabet = [
        "▁", "a", "b", "c", "r", "e", "t", "(", ")", ",", ".", "x", "z", "\t", "é",
    ];
    let mut out = Vec::new();
    for (name, merges) in orders {
        let mut vocab = serde_json::Map::new();
        let add = |t: &str, vocab: &mut serde_json::Map<String, serde_json::Value>| {
            if !vocab.contains_key(t) {
                let id = vocab.len();
                vocab.insert(t.to_string(), id.into());
            }
        };
        add("<unk>", &mut vocab);
        for b in 0..256 {
            add(&format!("<0x{b:02X}>"), &mut vocab);
        }
        for c in alphabet {
            add(c, &mut vocab);
        }
        for (a, b) in &merges {
            add(&format!("{a}{b}"), &mut vocab);
        }
        let merges: Vec<String> = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
        let model = serde_json::json!({
            "type": "BPE", "dropout": null, "unk_token": "<unk>",
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        });
        let added = serde_json::json!([{"id": 0, "content": "<unk>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}]);
        let metaspace = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
            "post_processor": null, "decoder": null, "model": model,
        });
        let prepend = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": null, "post_processor": null, "decoder": null, "model": model,
        });
        out.push((format!("{name}-metaspace"), metaspace.to_string()));
        out.push((format!("{name}-prepend"), prepend.to_string()));
    }
    out
}
