//! `mcq`'s flags resolved once into [`McqSettings`]: the worker slice and its output
//! directory, the `--threads` tuning, the cache, the boundary-token flags. The step files
//! ([`super::steps`], [`super::sft_set`]) read this value, never the clap struct; what a rerun
//! must match to be a no-op is [`super::uptodate::McqFingerprint`], built from it.

use std::path::PathBuf;

use anyhow::Result;

use super::McqArgs;
use crate::added_text::SpecialTokensInText;
use crate::hub::cache::Cache;
use crate::shards::ShardFormat;
use crate::worker::WorkerSlice;

/// One `mcq` run, resolved.
pub struct McqSettings {
    pub manifest: PathBuf,
    /// `--out` as given (a worker writes its part under it: [`McqSettings::out_dir`]); for a
    /// bucket output, the staging directory the local writer fills.
    pub out: PathBuf,
    /// `--out s3://…` (gs://, az://): the bucket output the staging directory is committed to
    /// ([`crate::storage::output`]).
    pub bucket: Option<crate::storage::ObjectUrl>,
    pub cache: Cache,
    /// `--cache` as given (an input `--out` may not be).
    pub cache_flag: Option<PathBuf>,
    pub tokenizer: Option<PathBuf>,
    pub format: ShardFormat,
    pub seed: u64,
    pub template: Option<PathBuf>,
    pub answer_template: String,
    /// `--eos-token`, `--bos-token`, `--no-bos`.
    pub boundaries: crate::tokenize::files::Flags,
    pub special_tokens_in_text: SpecialTokensInText,
    pub mask_token: Option<String>,
    pub seq_len: usize,
    pub rows_per_shard: usize,
    pub slice: WorkerSlice,
    pub max_item_bytes: u64,
    pub force: bool,
    pub json: bool,
    pub tuning: crate::tuning::Tuning,
}

impl McqSettings {
    /// Paths recorded exactly (UTF-8), the worker slice, the `--threads` pool.
    pub fn resolve(args: &McqArgs) -> Result<McqSettings> {
        let given = [
            ("--out", Some(args.out.as_path())),
            ("--manifest", Some(args.manifest.as_path())),
            ("--tokenizer", args.tokenizer.as_deref()),
            ("--template", args.template.as_deref()),
            ("--cache", args.cache.dir.as_deref()),
        ];
        crate::lock::require_utf8_all(given.iter().filter_map(|(f, p)| p.map(|p| (*f, p))))?;
        let slice = args.worker.resolve()?;
        let tuning = crate::tuning::Tuning::resolve(args.threads)?;
        let (out, bucket) = match crate::storage::Location::of_path(&args.out, "--out")? {
            crate::storage::Location::Local(p) => (p, None),
            crate::storage::Location::Object(u) if slice.is_whole() => {
                (PathBuf::from(u.to_string()), Some(u))
            }
            crate::storage::Location::Object(u) => {
                return Err(crate::error::usage(format!(
                    "--out {u} with --shard {slice}: mcq workers write their parts to a local or shared directory (`merge` of mcq parts on a bucket is not supported yet); give one process the bucket --out"
                )))
            }
            crate::storage::Location::Hub(_) => {
                return Err(crate::error::usage(
                    "--out: an hf:// URL names an input; write to a local path or a bucket",
                ))
            }
        };
        Ok(McqSettings {
            manifest: args.manifest.clone(),
            out,
            bucket,
            cache: args.cache.resolve(),
            cache_flag: args.cache.dir.clone(),
            tokenizer: args.tokenizer.clone(),
            format: args.format,
            seed: args.seed,
            template: args.template.clone(),
            answer_template: args.answer_template.clone(),
            boundaries: crate::tokenize::files::Flags {
                eos_token: args.eos_token.clone(),
                bos_token: args.bos_token.clone(),
                no_bos: args.no_bos,
                ..Default::default()
            },
            special_tokens_in_text: args.special_tokens_in_text,
            mask_token: args.mask_token.clone(),
            seq_len: args.seq_len,
            rows_per_shard: args.rows_per_shard,
            slice,
            max_item_bytes: args.max_item_bytes,
            force: args.force,
            json: args.json,
            tuning,
        })
    }

    /// Where this process writes: `--out`, or a worker's part under it.
    pub fn out_dir(&self) -> PathBuf {
        self.slice.out_dir(&self.out)
    }
}
