//! The one template language, for `pack --text`, the manifests' per-source `text` (pack and
//! decontam) and the pipeline file's `[pack] text`: `{text}`, `{query}\n\n{response}`,
//! nested fields as `{train.question}`, `{{`/`}}` for literal braces, and the escapes `\n`
//! (newline), `\t` (tab), `\r` and `\\` (a backslash) read the same way wherever the
//! template came from (a shell argument, a TOML literal string); any other backslash is
//! kept as written. Rendering decides whether a row is a document, empty, or filtered out.

use anyhow::{bail, Result};

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    fields: Vec<Vec<String>>,
    /// Own data (`pack --input`): a field missing from a JSON row is [`Outcome::Missing`] and
    /// a non-string value an error, where a Hub source's row is filtered or stringified.
    strict: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    /// Index into `fields`.
    Field(usize),
}

/// What one input row becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A document's text.
    Text(String),
    /// The rendered text is empty or whitespace only (counted as `skipped_empty`).
    Empty,
    /// A referenced field is null or the placeholder `-` (OpenCodeReasoning's `input` for
    /// rows whose question lives in another dataset); counted as `skipped_filtered`.
    Filtered,
    /// A strict template's field is absent from the row (the text says which, and which
    /// fields the row has): an error, or `skipped_missing_text` with `--on-missing-text skip`.
    Missing(String),
    /// The row itself is over its read bound (`--max-row-bytes`) and was read past without
    /// being held (`--on-oversize skip`; the text says why): `skipped_oversize`.
    Oversize(String),
}

impl Template {
    pub fn parse(s: &str) -> Result<Template> {
        let mut parts = Vec::new();
        let mut fields: Vec<Vec<String>> = Vec::new();
        let mut lit = String::new();
        let mut it = s.chars().peekable();
        while let Some(c) = it.next() {
            match c {
                '\\' => match it.peek().copied() {
                    Some(e @ ('n' | 't' | 'r' | '\\')) => {
                        it.next();
                        lit.push(match e {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            _ => '\\',
                        });
                    }
                    _ => lit.push('\\'),
                },
                '{' if it.peek() == Some(&'{') => {
                    it.next();
                    lit.push('{');
                }
                '}' if it.peek() == Some(&'}') => {
                    it.next();
                    lit.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match it.next() {
                            Some('}') => break,
                            Some(ch) => name.push(ch),
                            None => bail!("text template {s:?}: unclosed '{{'"),
                        }
                    }
                    let path: Vec<String> = name.trim().split('.').map(str::to_string).collect();
                    if path.iter().any(|p| p.is_empty()) {
                        bail!("text template {s:?}: bad field name {name:?}");
                    }
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    let i = match fields.iter().position(|f| *f == path) {
                        Some(i) => i,
                        None => {
                            fields.push(path);
                            fields.len() - 1
                        }
                    };
                    parts.push(Part::Field(i));
                }
                '}' => bail!("text template {s:?}: stray '}}' (write '}}}}' for a literal brace)"),
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        if fields.is_empty() {
            bail!("text template {s:?} names no field");
        }
        Ok(Template {
            parts,
            fields,
            strict: false,
        })
    }

    /// The same template, strict about missing and non-string JSON fields (own data).
    pub fn strict(mut self) -> Template {
        self.strict = true;
        self
    }

    /// See [`Template::strict`].
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// Distinct field paths, in order of first use (`["train", "question"]`).
    pub fn fields(&self) -> &[Vec<String>] {
        &self.fields
    }

    /// Top-level column names the template needs (for projection).
    pub fn root_columns(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for f in &self.fields {
            if !v.contains(&f[0]) {
                v.push(f[0].clone());
            }
        }
        v
    }

    /// Render by asking `field` to append each placeholder's value (a field path) to the
    /// text; its error ends the rendering.
    pub fn render_with(
        &self,
        mut field: impl FnMut(&[String], &mut String) -> Result<()>,
    ) -> Result<String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.push_str(l),
                Part::Field(i) => field(&self.fields[*i], &mut out)?,
            }
        }
        Ok(out)
    }

    /// Render with `values[i]` for `fields()[i]` (`None` = null / missing).
    pub fn render(&self, values: &[Option<&str>]) -> Outcome {
        if values.iter().any(|v| matches!(v, None | Some("-"))) {
            return Outcome::Filtered;
        }
        if let [Part::Field(i)] = self.parts.as_slice() {
            let s = values[*i].unwrap_or_default();
            return if s.trim().is_empty() {
                Outcome::Empty
            } else {
                Outcome::Text(s.to_string())
            };
        }
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.push_str(l),
                Part::Field(i) => out.push_str(values[*i].unwrap_or_default()),
            }
        }
        if out.trim().is_empty() {
            Outcome::Empty
        } else {
            Outcome::Text(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_render() {
        let t = Template::parse("{query}\n\n{response}").unwrap();
        assert_eq!(t.fields().len(), 2);
        assert_eq!(
            t.render(&[Some("q"), Some("a")]),
            Outcome::Text("q\n\na".into())
        );
        assert_eq!(t.render(&[Some("q"), None]), Outcome::Filtered);
        assert_eq!(t.render(&[Some("-"), Some("x")]), Outcome::Filtered);
        assert_eq!(t.render(&[Some(""), Some(" ")]), Outcome::Empty);
        let n = Template::parse("{train.question}").unwrap();
        assert_eq!(
            n.fields()[0],
            vec!["train".to_string(), "question".to_string()]
        );
        assert_eq!(n.root_columns(), vec!["train".to_string()]);
        assert_eq!(n.render(&[Some("  ")]), Outcome::Empty);
        let b = Template::parse("{{x}} {a}").unwrap();
        assert_eq!(b.render(&[Some("1")]), Outcome::Text("{x} 1".into()));
        assert!(Template::parse("{a").is_err());
        // Escapes read the same from a shell argument as from TOML.
        let e = Template::parse(r"{a}\n\t{b}\\n \q").unwrap();
        assert_eq!(
            e.render(&[Some("x"), Some("y")]),
            Outcome::Text("x\n\ty\\n \\q".into())
        );
        assert!(Template::parse("plain").is_err());
        assert!(Template::parse("{a..b}").is_err());
    }
}
