//! `--special-tokens-in-text` end to end on `pack` (issue 28): a document quoting the EOS or the
//! mask token's text is packed as plain text by default (one EOS per document, never the mask
//! id), counted per source and token in index.json; `split` keeps the `tokenizers` behaviour
//! but refuses the mask; `refuse` fails naming the file, row and byte offset; the crate path
//! writes the same bytes as the fast path.

mod pack_common;

use pack_common::*;

use dlm_data::added_text::SpecialTokensInText;
use dlm_data::tokenize::{BoundaryFlags, DocTokenizer};

const EOS: &str = dlm_data::fixtures::tokenizer::MC5_EOS;
const MASK: &str = dlm_data::fixtures::tokenizer::MC5_MASK;

fn corpus() -> Vec<String> {
    vec![
        format!("A web page quoting {EOS} in the middle of a sentence."),
        "An ordinary document about the energy of atoms.".to_string(),
        format!("Chat log: {MASK} and{EOS}{EOS} again, <|im_start|>user /think 中文{MASK}🙂"),
        format!(
            "Look-alikes only: {} <UNUSED_TOKEN_0> unused_token_0> <|im_start <S> /THINK",
            &MASK[..MASK.len() - 1]
        ),
    ]
}

fn setup(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let tok = tokenizer(dir);
    let input = dir.join("docs.parquet");
    let docs: Vec<Option<String>> = corpus().into_iter().map(Some).collect();
    write_parquet(&input, &docs, 2);
    (tok, input)
}

fn load(tok: &std::path::Path, mode: SpecialTokensInText, no_fast: bool) -> DocTokenizer {
    DocTokenizer::load(
        tok,
        &BoundaryFlags {
            mode,
            no_fast,
            ..BoundaryFlags::default()
        },
    )
    .unwrap()
}

#[test]
fn plain_by_default_counted_and_same_on_both_paths() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    let out = d.path().join("out");
    ok(&run_pack(
        &input,
        &tok,
        &out,
        &["--seq-len", "16", "--pad-last"],
        &[],
    ));
    let t = load(&tok, SpecialTokensInText::Plain, false);
    let eos = t.eos.as_ref().unwrap().1;
    let mask = t.mask.as_ref().expect("the fixture names its mask").1;
    let stream: Vec<u32> = parquet_rows(&out).concat();
    // The packed stream is the plain encoding of each document + EOS (then padding).
    let mut want = Vec::new();
    for doc in corpus() {
        want.extend(t.encode_doc(&doc).unwrap().ids);
    }
    assert_eq!(&stream[..want.len()], &want[..]);
    // Exactly one EOS per document, and no mask id anywhere.
    let docs_part = &stream[..want.len()];
    assert_eq!(
        docs_part.iter().filter(|&&i| i == eos).count(),
        corpus().len()
    );
    assert!(!stream.contains(&mask));
    // Counted: 2 documents hold added-token text; per token, documents holding it.
    let idx = index(&out);
    let c = &idx["totals"]["added_token_text"];
    assert_eq!(c["mode"], "plain", "{c}");
    assert_eq!(c["documents"], 2, "{c}");
    let per_source = c["per_source"].as_object().unwrap();
    assert_eq!(per_source.len(), 1, "{c}");
    let src = per_source.values().next().unwrap();
    assert_eq!(src["documents"], 2);
    assert_eq!(src["per_token"][EOS], 2);
    assert_eq!(src["per_token"][MASK], 1);
    assert_eq!(src["per_token"]["<|im_start|>"], 1);
    assert_eq!(src["per_token"]["/think"], 1);
    // The crate path (the ranged encoder) writes the same bytes.
    let out2 = d.path().join("out2");
    ok(&run_pack(
        &input,
        &tok,
        &out2,
        &["--seq-len", "16", "--pad-last", "--no-fast-tokenizer"],
        &[],
    ));
    let strip = |m: std::collections::BTreeMap<String, Vec<u8>>| {
        m.into_iter()
            .filter(|(k, _)| k.ends_with(".parquet"))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(tree(&out)), strip(tree(&out2)));
    assert_eq!(index(&out2)["totals"]["added_token_text"], *c);
}

#[test]
fn split_keeps_tokens_but_never_the_mask_and_refuse_names_the_place() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    // split: the mask's text in row 2 is refused, naming it.
    let o = run_pack(
        &input,
        &tok,
        &d.path().join("split"),
        &["--special-tokens-in-text", "split"],
        &[],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("row 2") && e.contains(MASK) && e.contains("mask"),
        "{e}"
    );
    assert!(e.contains("docs.parquet"), "{e}");
    // Without the mask row, split gives the tokenizers behaviour: EOS text becomes EOS.
    let input2 = d.path().join("no-mask.parquet");
    let docs: Vec<Option<String>> = corpus()
        .into_iter()
        .filter(|t| !t.contains(MASK))
        .map(Some)
        .collect();
    write_parquet(&input2, &docs, 2);
    let out = d.path().join("split2");
    ok(&run_pack(
        &input2,
        &tok,
        &out,
        &[
            "--special-tokens-in-text",
            "split",
            "--seq-len",
            "16",
            "--pad-last",
        ],
        &[],
    ));
    let t = load(&tok, SpecialTokensInText::Split, false);
    let eos = t.eos.as_ref().unwrap().1;
    let stream: Vec<u32> = parquet_rows(&out).concat();
    let n: usize = docs
        .iter()
        .map(|d| t.encode_doc(d.as_deref().unwrap()).unwrap().ids.len())
        .sum();
    assert_eq!(
        stream[..n].iter().filter(|&&i| i == eos).count(),
        docs.len() + 1
    );
    let krate = tokenizers::Tokenizer::from_file(tok.join("tokenizer.json")).unwrap();
    let first = krate
        .encode(docs[0].as_deref().unwrap(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(&stream[..first.len()], &first[..]);
    assert_eq!(index(&out)["totals"]["added_token_text"]["mode"], "split");
    // refuse: the first document, at the byte where the EOS text starts.
    let o = run_pack(
        &input,
        &tok,
        &d.path().join("refuse"),
        &["--special-tokens-in-text", "refuse"],
        &[],
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    let at = corpus()[0].find(EOS).unwrap();
    assert!(
        e.contains("row 0") && e.contains(&format!("byte offset {at}")) && e.contains(EOS),
        "{e}"
    );
    assert!(
        !d.path().join("refuse/index.json").exists() || {
            let i = index(&d.path().join("refuse"));
            i["complete"] == false
        }
    );
}

#[test]
fn look_alikes_are_text_in_every_mode() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let text = &corpus()[3];
    for mode in [
        SpecialTokensInText::Plain,
        SpecialTokensInText::Split,
        SpecialTokensInText::Refuse,
    ] {
        for no_fast in [false, true] {
            let t = load(&tok, mode, no_fast);
            let e = t.encode_data(text).unwrap();
            assert!(e.hits.is_empty(), "{mode:?}: {:?}", e.hits);
            let krate = tokenizers::Tokenizer::from_file(tok.join("tokenizer.json")).unwrap();
            assert_eq!(e.ids, krate.encode(text.as_str(), false).unwrap().get_ids());
        }
    }
}
