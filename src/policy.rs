//! The split policy: evaluation splits (test, validation, dev, ...) never enter training data.
//!
//! A name is an evaluation name when one of the keywords below appears in it as a whole
//! word, words being separated by `-`, `.`, `_`, `/`, digits or the string's ends. This is the
//! keyword set `datasets` uses to infer validation/test splits (`SPLIT_KEYWORDS` in its
//! `data_files.py`), so anything that
//! library would call an eval split is refused here. `split_0` (OpenCodeReasoning) and
//! `auxiliary_train` (MMLU) contain no keyword and pass.

/// Keywords that mark an evaluation split or file.
pub const EVAL_KEYWORDS: &[&str] = &[
    "test",
    "testing",
    "eval",
    "evaluation",
    "validation",
    "valid",
    "val",
    "dev",
];

/// Split `name` into words at separators (`-._/`, whitespace) and digits, lowercased.
fn words(name: &str) -> impl Iterator<Item = String> + '_ {
    name.split(|c: char| {
        c == '-' || c == '.' || c == '_' || c == '/' || c.is_ascii_digit() || c.is_whitespace()
    })
    .filter(|w| !w.is_empty())
    .map(|w| w.to_ascii_lowercase())
}

/// The first evaluation keyword found in `name` as a whole word, if any.
pub fn eval_keyword(name: &str) -> Option<&'static str> {
    for w in words(name) {
        if let Some(k) = EVAL_KEYWORDS.iter().find(|k| **k == w) {
            return Some(k);
        }
    }
    None
}

/// Refused (exit 2) when `name` holds an evaluation keyword; `why(keyword)` is the message,
/// naming the manifest or lock and the source.
pub fn refuse_eval(name: &str, why: impl FnOnce(&str) -> String) -> anyhow::Result<()> {
    match eval_keyword(name) {
        Some(k) => Err(crate::error::refused(why(k))),
        None => Ok(()),
    }
}

/// True when `name` (a split name or a repo-relative file path) names an evaluation split.
pub fn is_eval_name(name: &str) -> bool {
    eval_keyword(name).is_some()
}

/// Files among `paths` that look like evaluation files.
pub fn eval_files<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    paths
        .into_iter()
        .filter(|p| is_eval_name(p))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, bool)] = &[
            ("train", false),
            ("split_0", false),
            ("auxiliary_train", false),
            ("sample/10BT/000_00000.parquet", false),
            ("data/web_samples_v2/train-00000-of-00118.parquet", false),
            ("MetaMathQA-395K.json", false),
            ("auxiliary_train/train-00000-of-00001.parquet", false),
            ("all/auxiliary_train-00000-of-00001.parquet", false),
            ("test", true),
            ("validation", true),
            ("dev", true),
            ("all/test-00000-of-00001.parquet", true),
            ("all/dev-00000-of-00001.parquet", true),
            ("data/validation-00000-of-00001.parquet", true),
            ("eval", true),
            ("test_refer", true),
            ("val2", true),
            ("my.valid.jsonl", true),
            ("Evaluation/x.parquet", true),
            // Whole words only: these merely contain a keyword.
            ("latest/contest.parquet", false),
            ("devices/x.parquet", false),
            ("interval", false),
            ("evaluator", false),
            ("protest", false),
        ];
        for (name, want) in cases {
            assert_eq!(is_eval_name(name), *want, "{name}");
        }
    }
}
