//! The pipeline file `dlm-data run` reads (docs/commands/run.md): one TOML document describing
//! the whole job, typed so that a misspelt or misplaced key is an error naming the file, the
//! line and the key. Relative paths are relative to the pipeline file's directory, so a cron
//! job may start anywhere.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

/// The whole job. Sections other than `[pack]` are optional; a missing one is a step not run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// Format version of this file (1).
    #[serde(default = "one")]
    pub version: u32,
    /// Cache root for every step (`--cache`; default as in `fetch`).
    pub cache: Option<PathBuf>,
    /// tokenizer.json or its directory, for `pack` and `mcq`.
    pub tokenizer: PathBuf,
    /// The run journal (default: `NAME.run.json` beside the pipeline file).
    pub state: Option<PathBuf>,
    /// The base model: fetched (with `--local-dir`) and audited first.
    pub base: Option<Base>,
    /// Settings of the `fetch` step (it fetches every manifest named in this file).
    #[serde(default)]
    pub fetch: Fetch,
    /// Stage 1: `pack`.
    pub pack: Pack,
    /// Stages 2 and 3: `mcq` (SFT shards in OUT/sft and OUT/prompts.jsonl).
    pub mcq: Option<Mcq>,
    /// `decontam` of the stage-1 shards, the SFT shards and the prompts.
    pub decontam: Option<Decontam>,
    /// Stage 3: `distill` of the mcq prompts.
    pub distill: Option<Distill>,
    /// The closing `audit` (always run: its verdict ends the run).
    #[serde(default)]
    pub audit: Audit,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Base {
    /// Manifest with the base `[[model]]` (manifests/base.toml).
    pub manifest: PathBuf,
    /// `fetch --local-dir`: a plain copy of the base checkpoint.
    pub local_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetch {
    /// `--jobs`.
    pub jobs: Option<usize>,
    /// Further `fetch` flags, as on the command line.
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pack {
    /// Manifest of the stage-1 sources (their mixture weights live there).
    pub manifest: Option<PathBuf>,
    /// Local files instead of a manifest (`--input`, one flag each).
    #[serde(default)]
    pub inputs: Vec<PathBuf>,
    /// `--text-column` for `inputs`.
    pub text_column: Option<String>,
    /// `--text` for `inputs`: a template over fields ("{title}\n\n{body}"), read with the
    /// escapes of every template ([`crate::sources::Template`]).
    pub text: Option<String>,
    /// Output directory.
    pub out: PathBuf,
    /// `--seq-len`.
    pub seq_len: Option<usize>,
    /// `--format`: parquet, mds or megatron.
    pub format: Option<String>,
    /// `--tokens` budget of the mixture (e.g. "1M", "20B").
    pub tokens: Option<String>,
    /// `--shuffle-seed`.
    pub shuffle_seed: Option<u64>,
    /// Further `pack` flags, as on the command line.
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mcq {
    /// Manifest of the MCQ sources (manifests/mcq.toml).
    pub manifest: PathBuf,
    /// Output directory (prompts.jsonl, sft/).
    pub out: PathBuf,
    /// `--seq-len` of the SFT rows.
    pub seq_len: Option<usize>,
    /// `--format` of OUT/sft.
    pub format: Option<String>,
    /// `--seed` of the option shuffle.
    pub seed: Option<u64>,
    /// Further `mcq` flags, as on the command line.
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decontam {
    /// Benchmark sets: eval-reference manifests (fetched by the fetch step) or files.
    pub against: Vec<PathBuf>,
    /// `--ngram`.
    pub ngram: Option<usize>,
    /// Scan the stage-1 shards (default true).
    #[serde(default = "yes")]
    pub stage1: bool,
    /// Scan the SFT shards (default true).
    #[serde(default = "yes")]
    pub sft: bool,
    /// Scan prompts.jsonl (default true).
    #[serde(default = "yes")]
    pub prompts: bool,
    /// Further `decontam` flags, as on the command line.
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distill {
    /// The teacher checkpoint directory.
    pub teacher: PathBuf,
    /// distilled.json.
    pub out: PathBuf,
    /// `--device`: auto (the default), cpu, cuda, cuda:N.
    pub device: Option<String>,
    pub gen_length: Option<usize>,
    pub block_length: Option<usize>,
    pub steps: Option<usize>,
    pub batch_size: Option<usize>,
    pub temperature: Option<f64>,
    pub seed: Option<u64>,
    /// `--kv-cache`: none, prefix or dual.
    pub kv_cache: Option<String>,
    pub cache_refresh: Option<usize>,
    pub threshold: Option<f64>,
    /// `--limit`: the first N prompts only.
    pub limit: Option<usize>,
    /// Further `distill` flags, as on the command line.
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Audit {
    /// `--lineage` (lineage.json, written by `lineage add` after each training stage).
    pub lineage: Option<PathBuf>,
    /// `--shipped`: the shipped checkpoint.
    pub shipped: Option<PathBuf>,
    /// `--teacher` (default: distill's teacher).
    pub teacher: Option<PathBuf>,
    /// Further `audit` flags, as on the command line.
    #[serde(default)]
    pub args: Vec<String>,
}

impl Pipeline {
    /// Read and check `path`; relative paths become absolute, relative to its canonical
    /// directory (symlinks resolved), so the same file gives the same command lines from any
    /// working directory. Any bad file — missing, unreadable, not UTF-8, not the format — is
    /// a usage error (exit 2).
    pub fn load(path: &Path) -> Result<Pipeline> {
        let bad = |e: String| crate::error::usage(format!("pipeline file {}: {e}", path.display()));
        let canon = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
        let bytes = std::fs::read(&canon).map_err(|e| bad(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            bad(format!(
                "not UTF-8 (byte {} is invalid); a pipeline file is TOML text",
                e.utf8_error().valid_up_to()
            ))
        })?;
        let mut p: Pipeline = toml::from_str(&text)
            .map_err(|e| crate::error::usage(format!("pipeline file {}: {e}", path.display())))?;
        if p.version != 1 {
            return Err(crate::error::usage(format!(
                "pipeline file {}: version = {}: this dlm-data reads version 1",
                path.display(),
                p.version
            )));
        }
        if p.pack.manifest.is_some() == !p.pack.inputs.is_empty() {
            return Err(crate::error::usage(format!(
                "pipeline file {}: [pack] needs exactly one of `manifest` and `inputs`",
                path.display()
            )));
        }
        if p.pack.text.is_some() && (p.pack.inputs.is_empty() || p.pack.text_column.is_some()) {
            return Err(crate::error::usage(format!(
                "pipeline file {}: [pack] text goes with `inputs`, and instead of `text_column`",
                path.display()
            )));
        }
        if p.distill.is_some() && p.mcq.is_none() {
            return Err(crate::error::usage(format!(
                "pipeline file {}: [distill] reads the prompts of [mcq], which is missing",
                path.display()
            )));
        }
        let dir = canon.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut url = None;
        p.resolve(&dir, &mut url);
        if let Some(u) = url {
            return Err(crate::error::usage(format!(
                "pipeline file {}: {u}: `run` does not take object-store or hf:// URLs yet \
                 (its journal and rebuild-beside-and-swap are local); run the commands one by \
                 one, each takes them (docs/object-storage.md)",
                path.display()
            )));
        }
        Ok(p)
    }

    /// Make every path absolute against `dir`; the first one that is a URL (`s3://…`) is put
    /// in `url` (never joined to a directory: that would make a directory named `s3:`).
    fn resolve(&mut self, dir: &Path, url: &mut Option<String>) {
        let found = std::cell::RefCell::new(None);
        let one = |p: &mut PathBuf| {
            let text = p.to_string_lossy().into_owned();
            if crate::storage::location::scheme_of(&text).is_some() {
                let shown = text.split(['?', '#']).next().unwrap_or("").to_string();
                found.borrow_mut().get_or_insert(shown);
            } else {
                *p = normalize(&dir.join(&*p));
            }
        };
        let r = |p: &mut PathBuf| one(p);
        let ro = |p: &mut Option<PathBuf>| {
            if let Some(p) = p {
                one(p);
            }
        };
        ro(&mut self.cache);
        r(&mut self.tokenizer);
        ro(&mut self.state);
        if let Some(b) = &mut self.base {
            r(&mut b.manifest);
            ro(&mut b.local_dir);
        }
        ro(&mut self.pack.manifest);
        self.pack.inputs.iter_mut().for_each(r);
        r(&mut self.pack.out);
        if let Some(m) = &mut self.mcq {
            r(&mut m.manifest);
            r(&mut m.out);
        }
        if let Some(d) = &mut self.decontam {
            d.against.iter_mut().for_each(r);
        }
        if let Some(d) = &mut self.distill {
            r(&mut d.teacher);
            r(&mut d.out);
        }
        ro(&mut self.audit.lineage);
        ro(&mut self.audit.shipped);
        ro(&mut self.audit.teacher);
        *url = found.into_inner();
    }

    /// Every manifest the fetch step fetches, base first.
    pub fn manifests(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        v.extend(self.base.as_ref().map(|b| b.manifest.clone()));
        v.extend(self.pack.manifest.clone());
        v.extend(self.mcq.as_ref().map(|m| m.manifest.clone()));
        if let Some(d) = &self.decontam {
            v.extend(
                d.against
                    .iter()
                    .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                    .cloned(),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        v.retain(|p| seen.insert(p.clone()));
        v
    }
}

/// `a/./b/../c` → `a/c`, without touching the file system (`..` of a symlink is taken
/// lexically, as a shell's `cd` does).
pub fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_parses_and_resolves_beside_itself() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/pipeline.toml");
        let p = Pipeline::load(&path).unwrap();
        let dir = std::fs::canonicalize(path.parent().unwrap()).unwrap();
        assert_eq!(
            p.pack.manifest.as_deref(),
            Some(dir.join("stage1.toml").as_path())
        );
        assert_eq!(p.tokenizer, dir.parent().unwrap().join("tokenizer"));
        let names: Vec<_> = p
            .manifests()
            .iter()
            .map(|m| m.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "base.toml",
                "stage1.toml",
                "mcq.toml",
                "eval-reference.toml"
            ]
        );
    }

    #[test]
    fn a_bucket_url_is_refused_by_name_not_joined_to_a_directory() {
        let (d, f) = crate::testkit::temp_file(
            "p.toml",
            "tokenizer = \"t\"\n[pack]\ninputs = [\"c.jsonl\"]\nout = \"s3://bkt/shards\"\n",
        );
        let e = Pipeline::load(&f).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            format!("{e:#}").contains("s3://bkt/shards: `run` does not take"),
            "{e:#}"
        );
        assert!(!d.path().join("s3:").exists());
    }

    #[test]
    fn pack_needs_exactly_one_of_manifest_and_inputs() {
        let (_d, f) =
            crate::testkit::temp_file("p.toml", "tokenizer = \"t\"\n[pack]\nout = \"o\"\n");
        let e = Pipeline::load(&f).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            format!("{e:#}").contains("exactly one of `manifest` and `inputs`"),
            "{e:#}"
        );
    }
}
