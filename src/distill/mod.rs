//! `dlm-data distill`: the masked-diffusion teacher answers prompts with LLaDA's block-wise
//! sampler; results go to a resumable distilled.json.
//!
//! The run: load and validate the teacher ([`crate::teacher`]), read prompts ([`prompts`]),
//! render + tokenize them, measure them against the teacher's context and the memory budget
//! ([`limits`]: refused by id, or skipped with `--skip-too-long`), fix the global batch plan
//! ([`plan`]), then for every batch this worker owns and has not committed yet: generate
//! ([`host_loop`]), answer MCQ items ([`mcq`]), commit the batch's records to this worker's part
//! ([`output`]); a non-finite logit stops the run naming the prompt ([`finite`](crate::sampling::finite)). A single
//! process then finalises the parts into `--out`; workers of `--shard I/N` leave that to
//! `dlm-data merge`.

pub mod bucket;
pub mod encode;
pub mod fingerprint;
pub mod host_loop;
pub mod limits;
pub mod mcq;
pub mod output;
pub mod plan;
pub mod prompts;
pub mod record;
pub mod run;
pub mod settings;
pub mod topk_sidecar;
pub mod watch;

use std::path::PathBuf;

use clap::Args;

use crate::sampling::{rng, KvCache, Remasking};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    Json,
    Jsonl,
}

#[derive(Args, Debug, Clone)]
pub struct DistillArgs {
    /// The teacher: an HF Llama checkpoint directory (config.json, *.safetensors, tokenizer.json).
    #[arg(long)]
    pub teacher: PathBuf,
    /// prompts.jsonl: one JSON object per line with `id` and `prompt` (from `mcq`; MCQ items also carry `options` and `gold`).
    #[arg(long)]
    pub prompts: PathBuf,
    /// Where distilled.json goes (worker parts in OUT.parts/ beside it).
    #[arg(long)]
    pub out: PathBuf,
    /// auto, cpu, cuda or cuda:N. auto: GPU 0 when this binary has the `cuda` feature, the
    /// machine has the driver, a GPU and the CUDA libraries, and the teacher's shape suits the
    /// kernels; else the CPU (one warning line).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tokens generated per prompt (LLaDA's gen_length).
    #[arg(long, default_value_t = 256, value_parser = crate::sizes::tokens())]
    pub gen_length: usize,
    /// Tokens per block; blocks are decoded left to right (LLaDA's block_length).
    #[arg(long, default_value_t = 32, value_parser = crate::sizes::tokens())]
    pub block_length: usize,
    /// Sampler steps over the whole generation, a multiple of the number of blocks (LLaDA's steps).
    #[arg(long, default_value_t = 256, value_parser = crate::sizes::usize_in(1, crate::sizes::MAX_STEPS))]
    pub steps: usize,
    /// Gumbel-max sampling temperature; 0 takes the argmax.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Which masked positions a step commits: the most confident (low-confidence) or random ones.
    #[arg(long, value_enum, default_value = "low-confidence")]
    pub remasking: Remasking,
    /// Seed of the counter-based RNG (with the prompt id, step and position).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prompts per forward batch (default 8 on the CPU, 64 with --device cuda).
    /// At most 65,536 on the CPU and 1,024 (the GPU sampler's slots) with --device cuda.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Mask token id (default: config.json's mask_token_id, else the tokenizer's mask token).
    #[arg(long)]
    pub mask_id: Option<u32>,
    /// Which position's logits predict a token: 0 (its own, LLaDA) or 1 (the previous one, AR-converted models); default from config.json, else 0.
    #[arg(long)]
    pub logits_shift: Option<u8>,
    /// json (one array, the default) or jsonl (one record a line).
    #[arg(long, value_enum, default_value = "json")]
    pub format: OutFormat,
    /// Only the first N prompts of the file.
    #[arg(long)]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub worker: crate::worker::WorkerArgs,
    /// Do not render the tokenizer_config.json chat template.
    #[arg(long)]
    pub no_chat_template: bool,
    /// What prompt text that equals an added token (`<|im_start|>`, `/think`, the mask …)
    /// becomes: `plain` text (default), the token (`split`; never the mask), or an error naming
    /// the file and line (`refuse`). The chat template's own markers are encoded as they are.
    #[arg(long, value_enum, default_value = "plain")]
    pub special_tokens_in_text: crate::added_text::SpecialTokensInText,
    /// Accept a config that says causal and run it bidirectionally anyway.
    #[arg(long)]
    pub bidirectional: bool,
    /// Never sample EOS (LLaDA's `logits_eos_inf`).
    #[arg(long)]
    pub logits_eos_inf: bool,
    /// EOS/EoT candidates get confidence 0, so they are committed last (LLaDA's
    /// `confidence_eos_eot_inf`, as intended).
    #[arg(long)]
    pub confidence_eos_eot_inf: bool,
    /// End-of-turn token ids (for --confidence-eos-eot-inf and cutting the response);
    /// repeatable. EOS ids come from the config and tokenizer.
    #[arg(long = "eot-id")]
    pub eot_ids: Vec<u32>,
    /// APPROXIMATE (opt-in): confidence-threshold parallel decoding — each step commits the
    /// most confident masked position and every other one with confidence ≥ this (0 < t ≤ 1);
    /// a block ends when it has no mask left, so --steps no longer sets the step count.
    #[arg(long)]
    pub threshold: Option<f64>,
    /// APPROXIMATE (opt-in, --device cuda): reuse K/V across a block's steps (Fast-dLLM
    /// prefix or dual cache); `none` is the exact sampler. `--cache` is the same flag (its
    /// earlier name, still accepted).
    #[arg(long = "kv-cache", alias = "cache", value_enum, default_value = "none")]
    pub kv_cache: KvCache,
    /// APPROXIMATE, with --kv-cache prefix|dual: every K-th step of a block (counting from its
    /// first) is a full pass that refreshes the KV cache, the steps between reuse it
    /// (K = 1: every step full, the exact sampler's passes).
    #[arg(long, value_name = "K")]
    pub cache_refresh: Option<usize>,
    /// --device cuda: the residual stream's precision, bf16 (HF/PyTorch's) or f32 (closer
    /// to the CPU path, slower). Recorded in the resume fingerprint.
    #[arg(long, value_enum, default_value = "bf16")]
    pub gpu_residual: settings::GpuResidual,
    /// --device cuda: time cuBLASLt's candidate kernels for each GEMM shape once and use the
    /// fastest (about 3 % per step at batch 64 on an H200). The choices are saved in
    /// OUT.parts/IIIII-of-NNNNN.gemm-plans.json (one per worker) and reused, so a resumed run
    /// writes the same bytes.
    /// Recorded in the resume fingerprint.
    #[arg(long)]
    pub gemm_tune: bool,
    /// Skip (and count) prompts too long for the teacher — more positions than its
    /// max_position_embeddings, or a forward over --max-batch-memory even alone — instead of
    /// stopping at the first one.
    #[arg(long)]
    pub skip_too_long: bool,
    /// GiB of working memory one forward may need (weights excluded; see distill::limits):
    /// a prompt over it alone is too long, and a batch that would exceed it is closed early.
    /// Default 16 on the CPU, 64 with --device cuda. Recorded in the resume fingerprint when
    /// given.
    #[arg(long, value_name = "GIB")]
    pub max_batch_memory: Option<u64>,
    /// Decode every block of every row, in fixed batches (the schedule before early exit; for
    /// comparisons). By default a row stops as soon as an EOS/EoT is committed with every
    /// position before it committed — its record cannot change after that — and its slot is
    /// refilled with the next prompt (continuous batching). Records are the same either way
    /// on the CPU; on a GPU up to batch-shape float noise (docs/commands/distill.md).
    #[arg(long, conflicts_with = "early_exit")]
    pub no_early_exit: bool,
    /// Early exit + continuous batching (the default on every device; kept so scripts that
    /// opted in before it was the GPU default still run).
    #[arg(long)]
    pub early_exit: bool,
    /// Prompts per continuous-batching window (default: 16 × --batch-size). A window is
    /// scheduled from an empty batch to an empty batch and committed whole: the unit of resume
    /// and of --shard ownership. Smaller windows commit more often; larger ones keep the batch
    /// full longer. Recorded in the resume fingerprint.
    #[arg(long, value_name = "N")]
    pub window_prompts: Option<usize>,
    /// Record the decoding trajectory: each record gains `commit_step` (the sampler step that
    /// committed each response position), `tail_ids`/`tail_commit_step` (the generated span
    /// after the response), `prompt_ids` (the ids fed, chat template applied), and `gen` the
    /// chat template's sha256 (docs/formats/distilled-json.md#trajectory).
    #[arg(long)]
    pub trajectory: bool,
    /// Also write the teacher's K most probable tokens (1..=64) and their log-probabilities at
    /// every committed position, from the logits of the step that committed it, to the parquet
    /// sidecar OUT.topk.parquet (docs/formats/distilled-json.md#top-k-sidecar).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Print one line of JSON on stdout at the end: prompts, timings, rows finished early,
    /// mean blocks decoded, forward passes saved, MCQ accuracy.
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    /// The CPU teacher's threads (and the prompts' tokenizing threads on any device).
    #[command(flatten)]
    pub threads: crate::tuning::ThreadsArg,
}

/// `dlm-data distill`: the flags resolved once ([`settings::DistillSettings`]), then the run.
pub fn run(args: DistillArgs) -> anyhow::Result<()> {
    let st = settings::DistillSettings::resolve(&args)?;
    match st.out_url.clone() {
        Some(url) => bucket::run(st, &url),
        None => run::run(st),
    }
}
