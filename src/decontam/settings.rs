//! `decontam`'s flags resolved once into [`DecontamSettings`]: the n-gram range, no `--shard`,
//! the report paths (NAME_MAX checked before the scan), the `--threads` pool, the cache, and
//! the digest of the arguments a rerun must match ([`RecordedArgs`]). The run reads this
//! value, never the clap struct.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::report::{self, AgainstDigest, RecordedArgs};
use super::{ngram, DecontamArgs};
use crate::hub::cache::Cache;

/// What is scanned.
#[derive(Debug, Clone)]
pub enum Scanned {
    /// A shard directory (index.json).
    Shards(PathBuf),
    /// A prompts.jsonl.
    Prompts(PathBuf),
}

impl Scanned {
    pub fn path(&self) -> &Path {
        match self {
            Scanned::Shards(p) | Scanned::Prompts(p) => p,
        }
    }

    pub fn is_shards(&self) -> bool {
        matches!(self, Scanned::Shards(_))
    }
}

/// One `decontam` run, resolved.
pub struct DecontamSettings {
    pub against: Vec<PathBuf>,
    pub scanned: Scanned,
    pub ngram: usize,
    /// Where the `--drop` copy is written: the path given, or for a bucket URL the staging
    /// copy committed to [`DecontamSettings::drop_url`].
    pub drop: Option<PathBuf>,
    /// `--drop s3://…` (gs://, az://): a directory for `--shards`, an object for `--prompts`.
    pub drop_url: Option<crate::storage::ObjectUrl>,
    pub force: bool,
    pub json: bool,
    pub cache: Cache,
    pub tokenizer: Option<PathBuf>,
    /// The report: `--report`, else DIR/decontam.json or `<stem>.decontam.json` beside the
    /// prompts.
    pub report: PathBuf,
    /// What the report records of the arguments (`"args"`): a rerun matching it is a no-op.
    pub recorded: RecordedArgs,
    /// `--report` was given (else the report sits beside the scanned output, on the bucket
    /// too when that is where it lives).
    pub report_given: bool,
    /// How the report names the scanned output when it is not [`Scanned::path`]: the bucket
    /// URL a local copy was made of.
    pub scanned_shown: Option<String>,
}

impl DecontamSettings {
    /// The flags no parser checks, then the `--threads` pool; the digest of the arguments is
    /// taken by [`DecontamSettings::digest`] once the output is claimed.
    pub fn resolve(args: &DecontamArgs) -> Result<DecontamSettings> {
        if !(ngram::MIN_N..=ngram::MAX_N).contains(&args.ngram) {
            return Err(crate::error::usage(format!(
                "--ngram {}: must be between {} and {}",
                args.ngram,
                ngram::MIN_N,
                ngram::MAX_N
            )));
        }
        if args.worker.shard.is_some() {
            return Err(crate::error::usage(
                "decontam scans one output in one process (it runs at disk speed); --shard is not supported",
            ));
        }
        let scanned = match (&args.shards, &args.prompts) {
            (Some(d), _) => Scanned::Shards(d.clone()),
            (None, Some(p)) => Scanned::Prompts(p.clone()),
            (None, None) => return Err(crate::error::usage("give --shards DIR or --prompts FILE")),
        };
        let is_shards = scanned.is_shards();
        let report = args
            .report
            .clone()
            .unwrap_or_else(|| report::default_path(scanned.path(), is_shards));
        let drop_report = args
            .drop
            .as_deref()
            .map(|d| report::default_path(d, is_shards));
        for r in std::iter::once(&report).chain(drop_report.iter()) {
            if r.file_name()
                .is_some_and(|n| n.len() > crate::util::NAME_MAX)
            {
                return Err(crate::error::usage(format!(
                    "the report {} would have a name longer than {} bytes: name a shorter file, or \
                     give --report",
                    r.display(),
                    crate::util::NAME_MAX
                )));
            }
        }
        use crate::storage::Location;
        let given = args.drop.as_deref();
        let (drop, drop_url) = match given.map(|d| Location::of_path(d, "--drop")).transpose()? {
            None => (None, None),
            Some(Location::Local(p)) => (Some(p), None),
            Some(Location::Object(u)) => (args.drop.clone(), Some(u)),
            Some(Location::Hub(_)) => {
                return Err(crate::error::usage(
                    "--drop: an hf:// URL names an input; write to a local path or a bucket",
                ))
            }
        };
        // The pool the scan's parallel loops run on (`--threads`).
        crate::tuning::Tuning::resolve(args.threads)?;
        Ok(DecontamSettings {
            against: args.against.clone(),
            scanned,
            ngram: args.ngram,
            drop,
            drop_url,
            force: args.force,
            json: args.json,
            cache: args.cache.resolve(),
            tokenizer: args.tokenizer.clone(),
            report,
            recorded: RecordedArgs {
                ngram: args.ngram,
                against: Vec::new(),
                drop: args.drop.as_ref().map(|p| p.display().to_string()),
            },
            report_given: args.report.is_some(),
            scanned_shown: None,
        })
    }

    /// The scanned output as the report names it: its path, or the bucket URL it came from.
    pub fn scanned_name(&self) -> String {
        self.scanned_shown
            .clone()
            .unwrap_or_else(|| self.scanned.path().display().to_string())
    }

    /// The `--drop` copy as reports and messages name it: the URL for a bucket output.
    pub fn drop_shown(&self) -> Option<String> {
        match (&self.drop_url, &self.drop) {
            (Some(u), _) => Some(u.to_string()),
            (None, Some(p)) => Some(p.display().to_string()),
            (None, None) => None,
        }
    }

    /// Digest the `--against` files into [`DecontamSettings::recorded`] (errors name the file).
    pub fn digest(&mut self) -> Result<()> {
        let mut against = Vec::new();
        for a in &self.against {
            let is_manifest = a
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
            let lock = a.with_extension("lock");
            against.push(AgainstDigest {
                path: a.display().to_string(),
                sha256: crate::util::sha256_file(a)?,
                lock_sha256: if is_manifest && lock.is_file() {
                    Some(crate::util::sha256_file(&lock)?)
                } else {
                    None
                },
            });
        }
        self.recorded.against = against;
        Ok(())
    }
}
