//! The prompt template: one rendering shared by the stage-2 SFT set and the stage-3
//! prompts, so the model is trained and distilled on byte-identical prompts.
//!
//! Placeholders: `{question}`, `{options}` (one `A. text` line per option), `{letters}`
//! (`A, B, C, D`), and in the answer template `{letter}` and `{answer}` (the gold option's
//! text). `{{` and `}}` are literal braces. Unknown placeholders are refused when the template
//! is loaded, not at the first item.

use std::path::Path;

use anyhow::{Context, Result};

use super::item::{letter, McqItem};

/// The default prompt (documented in docs/commands/mcq.md).
pub const DEFAULT_PROMPT: &str = "The following is a multiple choice question. \
Answer with the letter of the correct option.\n\n{question}\n\n{options}\n\nAnswer:";

/// The default answer appended for stage 2 (before EOS): a space and the gold letter.
pub const DEFAULT_ANSWER: &str = " {letter}";

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Lit(String),
    Question,
    Options,
    Letters,
    Letter,
    Answer,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parse `text`; `allowed` lists the placeholders valid here; `origin` names it in errors.
    fn parse(text: &str, allowed: &[&str], origin: &str) -> Result<Template> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            lit.push_str(&rest[..i]);
            let tail = &rest[i..];
            if tail.starts_with("{{") {
                lit.push('{');
                rest = &tail[2..];
            } else if tail.starts_with("}}") {
                lit.push('}');
                rest = &tail[2..];
            } else if tail.starts_with('}') {
                return Err(crate::error::usage(format!(
                    "template {origin}: unmatched '}}' (write '}}}}' for a literal brace)"
                )));
            } else {
                let end = tail.find('}').ok_or_else(|| {
                    crate::error::usage(format!("template {origin}: unclosed '{{'"))
                })?;
                let name = &tail[1..end];
                if !allowed.contains(&name) {
                    return Err(crate::error::usage(format!(
                        "template {origin}: unknown placeholder {{{name}}} (allowed: {})",
                        allowed
                            .iter()
                            .map(|a| format!("{{{a}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                if !lit.is_empty() {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(match name {
                    "question" => Piece::Question,
                    "options" => Piece::Options,
                    "letters" => Piece::Letters,
                    "letter" => Piece::Letter,
                    _ => Piece::Answer,
                });
                rest = &tail[end + 1..];
            }
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Template { pieces })
    }

    fn render(&self, item: &McqItem) -> String {
        self.render_ranges(item).0
    }

    /// The rendering, and the byte ranges of it that came from the item's data (question,
    /// options, the gold option's text): those are encoded as plain text
    /// (`--special-tokens-in-text`), the template's own text as it is.
    fn render_ranges(&self, item: &McqItem) -> (String, Vec<std::ops::Range<usize>>) {
        let mut out = String::with_capacity(256);
        let mut data = Vec::new();
        let mut push_data = |out: &mut String, s: &str| {
            let a = out.len();
            out.push_str(s);
            if !s.is_empty() {
                data.push(a..out.len());
            }
        };
        for p in &self.pieces {
            match p {
                Piece::Lit(s) => out.push_str(s),
                Piece::Question => push_data(&mut out, item.question.trim()),
                Piece::Options => {
                    for (i, o) in item.options.iter().enumerate() {
                        if i > 0 {
                            out.push('\n');
                        }
                        out.push(letter(i));
                        out.push_str(". ");
                        push_data(&mut out, o.trim());
                    }
                }
                Piece::Letters => {
                    for i in 0..item.options.len() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        out.push(letter(i));
                    }
                }
                Piece::Letter => out.push(item.gold_letter()),
                Piece::Answer => push_data(&mut out, item.options[item.gold].trim()),
            }
        }
        (out, data)
    }
}

/// The prompt and answer templates of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Templates {
    prompt: Template,
    answer: Template,
    /// The prompt template's source text (recorded in index.json for audit).
    pub prompt_text: String,
    pub answer_text: String,
}

impl Templates {
    /// Build from the prompt text (default [`DEFAULT_PROMPT`]) and the answer text.
    pub fn new(prompt: &str, answer: &str, origin: &str) -> Result<Templates> {
        Ok(Templates {
            prompt: Template::parse(prompt, &["question", "options", "letters"], origin)?,
            answer: Template::parse(answer, &["letter", "answer"], "--answer-template")?,
            prompt_text: prompt.to_string(),
            answer_text: answer.to_string(),
        })
    }

    /// `--template FILE` (whole file is the prompt template) or the default.
    pub fn load(file: Option<&Path>, answer: &str) -> Result<Templates> {
        match file {
            None => Templates::new(DEFAULT_PROMPT, answer, "(default)"),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading template {}", p.display()))?;
                // A trailing newline from the editor is not part of the prompt.
                let text = text.strip_suffix('\n').unwrap_or(&text);
                Templates::new(text, answer, &p.display().to_string())
            }
        }
    }

    pub fn prompt(&self, item: &McqItem) -> String {
        self.prompt.render(item)
    }

    pub fn answer(&self, item: &McqItem) -> String {
        self.answer.render(item)
    }

    /// [`Self::prompt`] with the byte ranges that came from the item.
    pub fn prompt_ranges(&self, item: &McqItem) -> (String, Vec<std::ops::Range<usize>>) {
        self.prompt.render_ranges(item)
    }

    /// [`Self::answer`] with the byte ranges that came from the item.
    pub fn answer_ranges(&self, item: &McqItem) -> (String, Vec<std::ops::Range<usize>>) {
        self.answer.render_ranges(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::Provenance;

    fn item() -> McqItem {
        McqItem::new(
            "x".into(),
            Provenance {
                source: "s".into(),
                repo: "o/n".into(),
                commit: "c".into(),
                file: "f".into(),
                row: 0,
            },
            " What is H2O? ".into(),
            vec!["salt".into(), "water".into(), "air".into()],
            1,
            "t",
        )
        .unwrap()
    }

    #[test]
    fn default_renders() {
        let t = Templates::load(None, DEFAULT_ANSWER).unwrap();
        assert_eq!(
            t.prompt(&item()),
            "The following is a multiple choice question. Answer with the letter of the correct option.\n\nWhat is H2O?\n\nA. salt\nB. water\nC. air\n\nAnswer:"
        );
        assert_eq!(t.answer(&item()), " B");
    }

    #[test]
    fn custom_and_escapes() {
        let t = Templates::new(
            "{{Q}} {question} [{letters}]\n{options}",
            "{letter}: {answer}",
            "t",
        )
        .unwrap();
        assert_eq!(
            t.prompt(&item()),
            "{Q} What is H2O? [A, B, C]\nA. salt\nB. water\nC. air"
        );
        assert_eq!(t.answer(&item()), "B: water");
        // The data ranges are exactly the question, the options and the gold text.
        let (p, r) = t.prompt_ranges(&item());
        let parts: Vec<&str> = r.iter().map(|r| &p[r.clone()]).collect();
        assert_eq!(parts, ["What is H2O?", "salt", "water", "air"]);
        let (a, r) = t.answer_ranges(&item());
        assert_eq!(
            r.iter().map(|r| &a[r.clone()]).collect::<Vec<_>>(),
            ["water"]
        );
    }

    #[test]
    fn bad_templates_are_usage_errors() {
        for bad in ["{question} {subject}", "{question", "a } b"] {
            let e = Templates::new(bad, DEFAULT_ANSWER, "my.tmpl").unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(e.to_string().contains("my.tmpl"), "{e}");
        }
        // {letter} belongs to the answer template only.
        assert!(Templates::new("{letter}", DEFAULT_ANSWER, "t").is_err());
    }
}
