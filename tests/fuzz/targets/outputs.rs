//! Files one command writes and another reads back, and the files users hand `run` (issue
//! 42): `index.json` as `audit` reads it (paths confined), the pipeline TOML, the manifest
//! `.lock` (sources and models), an output lock file's holder record, `pack --input` JSON and
//! JSONL rows, `distilled.json` (as `lineage add` and `inspect` read it) and `lineage.json`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use dlm_data::manifest::{Lock, LockedFile, LockedModel, LockedSource, ModelLock, Role};
use dlm_data::shards::index;

use crate::driver::Target;
use crate::mutate::Text;

/// `index.json` (both layouts): parsed as every reader does, then each shard path checked as
/// `audit` confines it.
pub struct IndexJson(Vec<Vec<u8>>);

impl Target for IndexJson {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        let mds = super::shards::MdsIndex::setup(work)?;
        Ok(IndexJson(mds.seeds()))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.0.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let idx = index::parse(std::str::from_utf8(input)?, Path::new("index.json"))?;
        for sh in &idx.shards {
            let _ = dlm_data::audit::shards::confined(&sh.file);
            for f in sh.extra_files.keys() {
                let _ = dlm_data::audit::shards::confined(f);
            }
        }
        let _ = dlm_data::shards::outdir::journal_files(&idx);
        let _ = index::to_json(&idx, None)?;
        Ok(())
    }
}

/// The pipeline file of `dlm-data run` (the documented example), loaded and planned into the
/// steps' command lines, each parsed as the CLI parses it.
pub struct PipelineToml {
    seed: Vec<u8>,
    path: PathBuf,
}

impl Target for PipelineToml {
    const TEXT: Option<Text> = Some(Text::Toml);
    fn setup(work: &Path) -> Result<Self> {
        let doc = std::fs::read_to_string(crate::driver::repo_root().join("docs/commands/run.md"))?;
        let start = doc
            .find("\nversion = 1")
            .ok_or_else(|| anyhow::anyhow!("run.md: no example pipeline"))?;
        let body = &doc[start + 1..];
        let end = body.find("```").unwrap_or(body.len());
        Ok(PipelineToml {
            seed: body[..end].as_bytes().to_vec(),
            path: work.join("pipeline.toml"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.seed.clone()]
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let p = dlm_data::run::config::Pipeline::load(&self.path)?;
        let _ = p.manifests();
        for step in dlm_data::run::steps::plan(&p) {
            for argv in &step.commands {
                use clap::Parser;
                let _ = dlm_data::cli::Cli::try_parse_from(
                    std::iter::once("dlm-data".to_string()).chain(argv.iter().cloned()),
                );
            }
        }
        Ok(())
    }
}

/// A manifest's `.lock` with sources and models, read as `pack`, `audit` and `fetch
/// --locked` read it (both tables).
pub struct ManifestLock {
    seed: Vec<u8>,
    path: PathBuf,
}

impl Target for ManifestLock {
    const TEXT: Option<Text> = Some(Text::Toml);
    fn setup(work: &Path) -> Result<Self> {
        let file = |path: &str, size: u64| LockedFile {
            path: path.into(),
            size,
            sha256: "ab".repeat(32),
            git_oid: Some("cd".repeat(20)),
        };
        let lock = Lock {
            version: 1,
            sources: vec![LockedSource {
                name: "fineweb".into(),
                repo: "HuggingFaceFW/fineweb-edu".into(),
                revision: "main".into(),
                commit: "87f09149ef4734204d70ed1d046ddc9ca3f2b8f9".into(),
                config: "default".into(),
                split: "train".into(),
                role: Role::Train,
                files: vec![file("data/train-00000.parquet", 123_456)],
            }],
        };
        let models = vec![LockedModel {
            name: "base".into(),
            repo: "meta-llama/Llama-3.2-1B".into(),
            revision: "main".into(),
            commit: "4e20de362430cd3b72f300e6b0f18e50e7166e08".into(),
            files: vec![
                file("config.json", 877),
                file("model.safetensors", 2_471_645_608),
            ],
        }];
        let p = work.join("seed.lock");
        dlm_data::manifest::save_lock(&p, &lock, &models)?;
        Ok(ManifestLock {
            seed: std::fs::read(&p)?,
            path: work.join("in.lock"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.seed.clone()]
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let l = Lock::load(&self.path)?;
        let _ = l.source("fineweb");
        let m = ModelLock::load(&self.path)?;
        let _ = m.model("base");
        Ok(())
    }
}

/// An output lock file (`.dlm-data.lock`): the holder record a second run reads to name the
/// holder in its exit-75 message. A live holder keeps the lock while the case rewrites the
/// record's bytes; the second taker must come back busy, whatever the record says.
pub struct OutputLockFile {
    seed: Vec<u8>,
    path: PathBuf,
    _holder: dlm_data::lock::OutputLock,
}

impl Target for OutputLockFile {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        let path = work.join(dlm_data::lock::DIR_LOCK);
        let holder = dlm_data::lock::OutputLock::file(&path, "pack", work)?;
        Ok(OutputLockFile {
            seed: std::fs::read(&path)?,
            path,
            _holder: holder,
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.seed.clone()]
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        // Rewrite in place: the holder's lock is on this inode.
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&self.path)?;
        f.set_len(0)?;
        f.rewind()?;
        f.write_all(input)?;
        drop(f);
        match dlm_data::lock::OutputLock::file(&self.path, "pack", Path::new("out")) {
            Ok(_) => panic!("a held lock was taken a second time"),
            Err(e) => assert_eq!(
                dlm_data::error::exit_code(&e),
                dlm_data::error::EXIT_BUSY,
                "{e:#}"
            ),
        }
        Ok(())
    }
}

/// `pack --input` rows: a JSON Lines file and a JSON array file, read by the same readers
/// `pack` uses, with a nested-field template.
pub struct JsonRows(Vec<Vec<u8>>);

impl Target for JsonRows {
    const TEXT: Option<Text> = Some(Text::JsonOrLines);
    fn setup(_work: &Path) -> Result<Self> {
        let rows: Vec<serde_json::Value> = (0..6)
            .map(|i| {
                serde_json::json!({"id": i, "text": format!("document {i} … ünïcode\n"),
                    "meta": {"title": format!("t{i}"), "score": i as f64 / 3.0}})
            })
            .collect();
        let jsonl: String = rows.iter().map(|r| format!("{r}\n")).collect();
        Ok(JsonRows(vec![
            jsonl.into_bytes(),
            serde_json::to_vec_pretty(&rows)?,
        ]))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.0.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        use dlm_data::sources::records::{rendered, Layout};
        use dlm_data::sources::Template;
        let tpl = Template::parse("{meta.title}: {text}")?;
        let mut n = 0u64;
        let mut sink = |_row: u64, _o: dlm_data::sources::Outcome| -> Result<()> {
            n += 1;
            Ok(())
        };
        // A small row bound, so the bound itself is exercised.
        let bound = dlm_data::sources::Bound::new(4096, "--max-row-bytes");
        let a = rendered(input, "in.jsonl", Layout::Lines, bound, &tpl, 0, &mut sink);
        let b = rendered(input, "in.json", Layout::Array, bound, &tpl, 0, &mut sink);
        match (a, b) {
            (Err(e), Err(_)) => Err(e),
            _ => Ok(()),
        }
    }
}

/// `distilled.json` (a JSON array, or JSON lines) as `lineage add --data` reads it (records,
/// the one teacher) and as `inspect` opens it.
pub struct DistilledJson {
    seeds: Vec<Vec<u8>>,
    path: PathBuf,
}

impl Target for DistilledJson {
    const TEXT: Option<Text> = Some(Text::JsonOrLines);
    fn setup(work: &Path) -> Result<Self> {
        let recs: Vec<serde_json::Value> = (0..4)
            .map(|i| {
                serde_json::json!({
                    "id": format!("sciq-train-{i:06}"), "prompt": "Q?", "response": "A",
                    "answer": "B", "correct": i % 2 == 0,
                    "answer_probs": {"A": 0.1, "B": 0.7, "C": 0.1, "D": 0.1},
                    "teacher": {"path": "teacher", "weights_sha256": "ab".repeat(32),
                                "config_sha256": "cd".repeat(32)},
                })
            })
            .collect();
        let lines: String = recs.iter().map(|r| format!("{r}\n")).collect();
        Ok(DistilledJson {
            seeds: vec![serde_json::to_vec(&recs)?, lines.into_bytes()],
            path: work.join("distilled.json"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let _ = dlm_data::inspect::records::first_record(
            &self.path,
            dlm_data::sources::Bound::new(1 << 20, "--max-record-bytes"),
        );
        let d = dlm_data::model::lineage::data_input(&self.path)?;
        let _ = d.teacher_weights_sha256;
        Ok(())
    }
}

/// `lineage.json` as `lineage add` extends it and `audit --lineage` reads it.
pub struct LineageJson {
    seed: Vec<u8>,
    path: PathBuf,
}

impl Target for LineageJson {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        use dlm_data::model::checkpoint::{Checkpoint, FileDigest};
        use dlm_data::model::lineage::{DataInput, DataKind, Lineage, Stage};
        let ck = |name: &str, sha: &str| Checkpoint {
            path: format!("ckpt/{name}"),
            sha256: sha.repeat(32),
            weights_sha256: Some("ef".repeat(32)),
            files: vec![FileDigest {
                path: "model.safetensors".into(),
                size: 1234,
                sha256: "ef".repeat(32),
            }],
        };
        let l = Lineage {
            version: 1,
            stages: vec![Stage {
                stage: "stage1".into(),
                time: "2026-12-06T02:00:00Z".into(),
                tool: "dlm-data 0.1.0".into(),
                tool_build: None,
                from: ck("base", "01"),
                to: ck("stage1", "02"),
                data: vec![DataInput {
                    path: "out/stage1/index.json".into(),
                    kind: DataKind::Pretrain,
                    sha256: "03".repeat(32),
                    teacher_weights_sha256: None,
                }],
            }],
        };
        let p = work.join("seed.json");
        l.save(&p)?;
        Ok(LineageJson {
            seed: std::fs::read(&p)?,
            path: work.join("lineage.json"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![self.seed.clone()]
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let l = dlm_data::model::lineage::Lineage::load(&self.path)?;
        let _ = l.stages.iter().map(|s| s.data.len()).sum::<usize>();
        Ok(())
    }
}
