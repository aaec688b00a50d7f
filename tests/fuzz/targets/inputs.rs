//! Files users and other stages hand us: the manifest TOML and its lock, `prompts.jsonl`
//! (mcq → distill) and distill's committed part files (`OUT.parts/*.jsonl`), which a resume,
//! `merge` and the final `distilled.json` are built from.

use std::path::{Path, PathBuf};

use anyhow::Result;
use dlm_data::manifest::{Lock, LockedFile, LockedSource, Manifest, Role};

use crate::driver::Target;
use crate::mutate::{self, Text};

/// `manifests/*.toml` (the shipped manifests) and a lock written by [`Lock::save`].
pub struct ManifestToml {
    seeds: Vec<Vec<u8>>,
    path: PathBuf,
}

impl Target for ManifestToml {
    const TEXT: Option<Text> = Some(Text::Toml);
    fn setup(work: &Path) -> Result<Self> {
        let root = crate::driver::repo_root().join("manifests");
        let mut seeds = Vec::new();
        for name in ["stage1.toml", "mcq.toml", "eval-reference.toml"] {
            seeds.push(std::fs::read(root.join(name))?);
        }
        let lock = Lock {
            version: 1,
            sources: vec![LockedSource {
                name: "sciq".into(),
                repo: "allenai/sciq".into(),
                revision: "main".into(),
                commit: "2c94ad3e1aafab77146f384e23536f97a4849815".into(),
                config: "default".into(),
                split: "train".into(),
                role: Role::Train,
                files: vec![LockedFile {
                    path: "data/train-00000-of-00001.parquet".into(),
                    size: 3_993_099,
                    sha256: "ab".repeat(32),
                    git_oid: Some("cd".repeat(20)),
                }],
            }],
        };
        let lp = work.join("seed.lock");
        lock.save(&lp)?;
        seeds.push(std::fs::read(&lp)?);
        Ok(ManifestToml {
            seeds,
            path: work.join("in.toml"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        // Either layout may come in; the seeds must parse as one of them.
        let m = Manifest::load(&self.path);
        let l = Lock::load(&self.path);
        if let Ok(m) = &m {
            let _ = m.lock_path();
            let listing = vec![
                "data/train-00000-of-00001.parquet".to_string(),
                "README.md".into(),
            ];
            for s in m.train_sources() {
                if let Some(globs) = &s.files {
                    let _ = dlm_data::hub::configs::select(&listing, globs);
                }
                let _ = dlm_data::hub::plan::policy_check(s, &listing);
                let _ = dlm_data::sources::Template::parse(&s.text);
            }
        }
        match (m, l) {
            (Err(e), Err(_)) => Err(e),
            _ => Ok(()),
        }
    }
}

/// `prompts.jsonl`: the fixture's demo prompts (two MCQ items, two free-form).
pub struct PromptsJsonl {
    seed: Vec<u8>,
    path: PathBuf,
}

impl Target for PromptsJsonl {
    const TEXT: Option<Text> = Some(Text::Lines(mutate::JSON_DICT));
    fn setup(work: &Path) -> Result<Self> {
        let p = work.join("seed.jsonl");
        dlm_data::fixtures::teacher::write_demo_prompts(&p)?;
        Ok(PromptsJsonl {
            seed: std::fs::read(&p)?,
            path: work.join("prompts.jsonl"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.seed.clone()]
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let items = dlm_data::distill::prompts::read_prompts(&self.path)?;
        let _ = items.len();
        Ok(())
    }
}

/// A distill part file (`OUT.parts/00000-of-00001.jsonl`): header line, records, commit
/// lines. Seeds: the parts of a real distill run of the tiny fixture teacher.
pub struct DistillPart {
    seeds: Vec<Vec<u8>>,
    part: PathBuf,
    out: PathBuf,
}

impl Target for DistillPart {
    const TEXT: Option<Text> = Some(Text::Lines(mutate::JSON_DICT));
    fn setup(work: &Path) -> Result<Self> {
        let teacher = work.join("teacher");
        dlm_data::fixtures::teacher::write_teacher(&teacher, &Default::default())?;
        let prompts = work.join("prompts.jsonl");
        dlm_data::fixtures::teacher::write_demo_prompts(&prompts)?;
        let out = work.join("seed/distilled.json");
        std::fs::create_dir_all(out.parent().unwrap())?;
        use clap::Parser;
        let cli = dlm_data::cli::Cli::try_parse_from([
            "dlm-data",
            "distill",
            "--teacher",
            teacher.to_str().unwrap(),
            "--prompts",
            prompts.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--gen-length",
            "8",
            "--block-length",
            "4",
            "--steps",
            "4",
            "--batch-size",
            "2",
        ])?;
        let dlm_data::cli::Command::Distill(a) = cli.command else {
            unreachable!()
        };
        dlm_data::distill::run(a)?;
        let parts =
            dlm_data::distill::output::list_parts(&dlm_data::distill::output::parts_dir(&out))?;
        let seeds = parts
            .iter()
            .map(std::fs::read)
            .collect::<std::io::Result<Vec<_>>>()?;
        anyhow::ensure!(!seeds.is_empty(), "distill left no parts");
        let fz = work.join("fz/distilled.json");
        let part = dlm_data::distill::output::parts_dir(&fz).join(parts[0].file_name().unwrap());
        std::fs::create_dir_all(part.parent().unwrap())?;
        Ok(DistillPart {
            seeds,
            part,
            out: fz,
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.part, input)?;
        let p = dlm_data::distill::output::read_part(&self.part)?;
        let _ = p.batches.len();
        dlm_data::distill::output::finalize(
            &[self.part.clone()],
            &self.out,
            dlm_data::distill::OutFormat::Json,
        )?;
        Ok(())
    }
}

/// `tokenizer.json` as `pack` loads it (the fast path's own typed parse, its added-token
/// table, the crate fallback) and then encodes with it: the fixture tokenizer (byte-level BPE
/// with added tokens) and a SentencePiece-shaped variant of it (Metaspace, byte_fallback).
pub struct TokenizerJson {
    seeds: Vec<Vec<u8>>,
    dir: PathBuf,
}

impl Target for TokenizerJson {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        let p = dlm_data::fixtures::tokenizer::write_tokenizer(&work.join("seed"))?;
        let bytes = std::fs::read(&p)?;
        let mut sp: serde_json::Value = serde_json::from_slice(&bytes)?;
        sp["pre_tokenizer"] = serde_json::json!({
            "type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false
        });
        sp["normalizer"] = serde_json::Value::Null;
        sp["model"]["byte_fallback"] = serde_json::json!(false);
        sp["model"]["fuse_unk"] = serde_json::json!(true);
        let dir = work.join("tok");
        std::fs::create_dir_all(&dir)?;
        Ok(TokenizerJson {
            seeds: vec![bytes, serde_json::to_vec(&sp)?],
            dir,
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        use dlm_data::tokenize::{BoundaryFlags, DocTokenizer};
        std::fs::write(self.dir.join("tokenizer.json"), input)?;
        let flags = BoundaryFlags::no_eos();
        let tok = DocTokenizer::load(&self.dir, &flags)?;
        for text in [
            "Hello world, the <|endoftext|> of a <|pad|>document.",
            "  indented\n\tcode(x) = 1234567 ▁▁ ünïcödé 日本語 🙂‍↔️",
            "",
        ] {
            tok.encode(text)?;
        }
        Ok(())
    }
}
