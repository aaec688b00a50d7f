//! The teacher checkpoint's outside bytes: `config.json`, the safetensors header (and data),
//! `tokenizer_config.json` with its chat template. Each case writes the mutated file into a
//! copy of the tiny fixture teacher and opens it the way `distill` does (config → tokenizer →
//! weights validated against the config → the CPU backend's weight load), then renders the
//! chat template for a prompt.

use std::path::{Path, PathBuf};

use anyhow::Result;
use dlm_data::fixtures::teacher::{write_teacher, TinyTeacher};
use dlm_data::teacher::{Teacher, TeacherOptions, TeacherTokenizer};

use crate::driver::Target;
use crate::mutate::{self, Rng, Text};

/// Which file of the checkpoint the input replaces.
pub struct TeacherFile {
    dir: PathBuf,
    file: &'static str,
    seed: Vec<u8>,
}

fn setup_file(work: &Path, file: &'static str) -> Result<TeacherFile> {
    let dir = work.join("teacher");
    write_teacher(&dir, &TinyTeacher::default())?;
    let seed = std::fs::read(dir.join(file))?;
    Ok(TeacherFile { dir, file, seed })
}

/// Open the whole checkpoint as `distill` does, then load the CPU backend's weights and read
/// every tensor.
fn open_teacher(dir: &Path) -> Result<()> {
    let t = Teacher::open(dir, &TeacherOptions::default())?;
    let _ = t.tokenizer.render("Why is the sky blue?", true)?;
    let _cpu = t.cpu()?;
    Ok(())
}

fn write(tf: &TeacherFile, input: &[u8]) -> Result<()> {
    std::fs::write(tf.dir.join(tf.file), input)?;
    Ok(())
}

pub struct TeacherConfig(TeacherFile);

impl Target for TeacherConfig {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        Ok(TeacherConfig(setup_file(work, "config.json")?))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.0.seed.clone()]
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        write(&self.0, input)?;
        let r = open_teacher(&self.0.dir);
        // Put the seed back so a crash in a later case is not blamed on this input.
        write(&self.0, &self.0.seed)?;
        r
    }
}

/// `model.safetensors`: 8-byte little-endian header length, JSON header, data.
pub struct Safetensors(TeacherFile);

impl Target for Safetensors {
    fn setup(work: &Path) -> Result<Self> {
        Ok(Safetensors(setup_file(work, "model.safetensors")?))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.0.seed.clone()]
    }
    fn mutate(&self, rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
        // Edit the JSON header as a tree and rewrite the length prefix (or, sometimes, leave
        // a wrong one); else byte havoc restricted to the prefix + header.
        let n = u64::from_le_bytes(input.get(..8)?.try_into().ok()?) as usize;
        let header = input.get(8..8usize.checked_add(n)?)?;
        let data = &input[8 + n..];
        if rng.chance(4) {
            let mut h = input[..8 + n].to_vec();
            let other = h.clone();
            h = mutate::havoc(rng, &h, &other, mutate::JSON_DICT);
            h.extend_from_slice(data);
            return Some(h);
        }
        let mut v: serde_json::Value = serde_json::from_slice(header).ok()?;
        mutate::json_tree(rng, &mut v);
        let h = serde_json::to_vec(&v).ok()?;
        let len = if rng.chance(8) {
            h.len() as u64 ^ (1 << rng.below(64))
        } else {
            h.len() as u64
        };
        let mut out = len.to_le_bytes().to_vec();
        out.extend_from_slice(&h);
        if rng.chance(8) {
            out.extend_from_slice(&data[..rng.below(data.len())]);
        } else {
            out.extend_from_slice(data);
        }
        Some(out)
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        write(&self.0, input)?;
        let r = open_teacher(&self.0.dir);
        write(&self.0, &self.0.seed)?;
        r
    }
}

/// `tokenizer_config.json`: special tokens and the chat template (minijinja).
pub struct ChatTemplate(TeacherFile);

/// Jinja fragments for the template edits.
const JINJA: &[&str] = &[
    "{% for m in messages %}",
    "{% endfor %}",
    "{% if add_generation_prompt %}",
    "{% endif %}",
    "{{ messages[0]['content'] }}",
    "{{ m['content'].strip() }}",
    "{{ bos_token }}",
    "{{ raise_exception('x') }}",
    "{% for i in range(10000) %}",
    "{% for j in range(10000) %}",
    "{% set x = messages[0]['content'] * 1000 %}",
    "{{ x }}",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{{ 1/0 }}",
    "{{ messages[99] }}",
    "{{ m.content.split('x') }}",
    "{{ (messages|length) ** 999 }}",
    "{%",
    "%}",
    "{{",
    "}}",
    "{#",
    "#}",
    "{% raw %}",
    "{% endraw %}",
    "{{ '%s' % 1 }}",
    "{{ messages[0]['content'][::-1] }}",
    "{{ 9999999999999999999999 }}",
    "{{ -1e309 }}",
];

impl Target for ChatTemplate {
    fn setup(work: &Path) -> Result<Self> {
        Ok(ChatTemplate(setup_file(work, "tokenizer_config.json")?))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.0.seed.clone()]
    }
    fn mutate(&self, rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
        let mut v: serde_json::Value = serde_json::from_slice(input).ok()?;
        if rng.chance(3) || !v.is_object() {
            mutate::json_tree(rng, &mut v);
        } else {
            // Edit the template text: insert fragments, cut, duplicate.
            let mut t = v
                .get("chat_template")
                .and_then(|t| t.as_str())
                .unwrap_or("")
                .to_string();
            for _ in 0..1 + rng.below(3) {
                let at = (0..=t.len())
                    .filter(|&i| t.is_char_boundary(i))
                    .nth(rng.below(t.len() + 1))
                    .unwrap_or(0);
                match rng.below(4) {
                    // Wrap everything in a loop (nested loops multiply: a template hang).
                    3 => {
                        let n = [2, 100, 10000, 100000][rng.below(4)];
                        t = format!(
                            "{{% for i{k} in range({n}) %}}{t}{{% endfor %}}",
                            k = rng.below(1000)
                        );
                    }
                    0 => {
                        let end = (at..=t.len())
                            .filter(|&i| t.is_char_boundary(i))
                            .nth(rng.below(16))
                            .unwrap_or(at);
                        t.replace_range(at..end, "");
                    }
                    _ => t.insert_str(at, JINJA[rng.below(JINJA.len())]),
                }
            }
            v["chat_template"] = serde_json::Value::String(t);
        }
        serde_json::to_vec(&v).ok()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        write(&self.0, input)?;
        let r = (|| {
            let t = TeacherTokenizer::open(&self.0.dir)?;
            let s = t.render("Why is the sky blue?\nA. x\nB. y", true)?;
            let ids = t.encode(&s)?;
            let _ = t.decode(&ids)?;
            Ok(())
        })();
        write(&self.0, &self.0.seed)?;
        r
    }
}
