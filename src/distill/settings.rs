//! Why `distill` resolves its flags once: a default, a bound or a rule between flags decided in
//! one place cannot disagree with itself. [`DistillSettings::resolve`] turns the parsed flags
//! ([`DistillArgs`]) into one typed value — the [`Device`], non-zero sizes with their device
//! defaults (`--batch-size` 8 on the CPU / 64 on a GPU, `--window-prompts` 16 batches), the
//! device's own limits (a batch the GPU sampler cannot hold is refused at start, naming the
//! limit and the flag), the sampler's [`GenParams`] validated once, absolute paths — and every
//! step after it reads only that value. What only the teacher knows (its mask and EOS ids, its
//! vocabulary) completes it in [`DistillSettings::bind_teacher`], here too. The resume fingerprint
//! ([`super::fingerprint`]) is serialized from it.

use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::limits;
use super::{DistillArgs, OutFormat};
use crate::added_text::SpecialTokensInText;
use crate::sampling::trajectory::MAX_TOP_K;
use crate::sampling::{GenParams, KvCache, GPU_MAX_BLOCK_LENGTH, GPU_MAX_ROWS};
use crate::teacher::{Teacher, TeacherOptions};
use crate::worker::WorkerSlice;

/// Where the teacher runs (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// `cuda` (None: device 0) or `cuda:N`.
    Cuda(Option<usize>),
}

impl Device {
    /// `cpu`, `cuda` or `cuda:N`; anything else is bad usage.
    pub fn parse(s: &str) -> Result<Device> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(None)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Device::Cuda(Some(n))),
                _ => Err(crate::error::usage(format!(
                    "--device {s:?}: expected auto, cpu, cuda or cuda:N"
                ))),
            },
        }
    }

    /// The GPU's ordinal (`cuda` is GPU 0); 0 for the CPU.
    pub fn ordinal(&self) -> usize {
        match self {
            Device::Cuda(Some(n)) => *n,
            _ => 0,
        }
    }

    pub fn is_cpu(&self) -> bool {
        *self == Device::Cpu
    }

    /// The fingerprint's `backend`: cpu and cuda round differently, so one output is never
    /// resumed on the other.
    pub fn backend_name(&self) -> &'static str {
        if self.is_cpu() {
            "cpu"
        } else {
            "cuda"
        }
    }

    /// `--batch-size` when not given: 8 on the CPU, 64 on a GPU (where a step's cost hardly
    /// grows with the batch up to there).
    pub fn default_batch_size(&self) -> NonZeroUsize {
        NonZeroUsize::new(if self.is_cpu() { 8 } else { 64 }).expect("non-zero")
    }

    /// The most rows one forward batch can hold: the GPU sampler's state has
    /// [`GPU_MAX_ROWS`] slots; on the CPU only the memory budget bounds it (the flag's range).
    pub fn max_batch_size(&self) -> usize {
        if self.is_cpu() {
            crate::sizes::MAX_BATCH as usize
        } else {
            GPU_MAX_ROWS
        }
    }

    /// `--max-batch-memory` when not given, in GiB.
    pub fn default_batch_memory_gib(&self) -> u64 {
        if self.is_cpu() {
            limits::DEFAULT_BATCH_MEMORY_GIB
        } else {
            limits::DEFAULT_GPU_BATCH_MEMORY_GIB
        }
    }
}

/// `--device` made concrete before any file is opened (issue 59: one binary for CPU and GPU
/// machines). `cuda[:N]` is checked at once: a build without the feature, or a machine
/// without what the GPU path loads (the driver, a GPU, cuBLAS, NVRTC), is a usage error (exit
/// 2) naming what is missing. `auto` takes GPU 0 when that check passes and the teacher's
/// shape suits the GPU kernels, else the CPU — with one warning line in a `cuda` build (a
/// build without the feature has no GPU path: an info line).
fn choose_device(arg: &str, teacher: &Path) -> Result<Device> {
    choose_device_with(arg, teacher, gpu_ready, gpu_shape)
}

/// [`choose_device`] over the two checks it asks: can `--device d` open here, does the
/// teacher's shape suit the GPU kernels (each: why not, in one sentence).
fn choose_device_with(
    arg: &str,
    teacher: &Path,
    gpu_ready: impl Fn(Device) -> std::result::Result<(), String>,
    gpu_shape: impl Fn(&Path) -> std::result::Result<(), String>,
) -> Result<Device> {
    if arg != "auto" {
        let d = Device::parse(arg)?;
        if !d.is_cpu() {
            gpu_ready(d).map_err(|why| crate::error::usage(format!("--device {d}: {why}")))?;
        }
        return Ok(d);
    }
    let why = match gpu_ready(Device::Cuda(None)) {
        Ok(()) => match gpu_shape(teacher) {
            Ok(()) => {
                tracing::info!("--device auto: cuda (GPU 0)");
                return Ok(Device::Cuda(None));
            }
            Err(why) => why,
        },
        Err(why) => why,
    };
    if cfg!(feature = "cuda") {
        tracing::warn!("--device auto: running on the CPU: {why}");
    } else {
        tracing::info!("--device auto: cpu ({why})");
    }
    Ok(Device::Cpu)
}

/// Whether `--device d` can open here; why not, in one sentence.
#[cfg(feature = "cuda")]
fn gpu_ready(d: Device) -> std::result::Result<(), String> {
    crate::gpu::probe::check(d.ordinal()).map(|_| ())
}
#[cfg(not(feature = "cuda"))]
fn gpu_ready(_: Device) -> std::result::Result<(), String> {
    Err(
        "this binary was built without the `cuda` feature (cargo build --release --features \
         cuda, or the wheel), or use --device cpu"
            .into(),
    )
}

/// Whether the GPU kernels support the teacher's shape (`auto` only; an unreadable config is
/// left to the teacher's own checks, which name it).
#[cfg(feature = "cuda")]
fn gpu_shape(teacher: &Path) -> std::result::Result<(), String> {
    match crate::teacher::config::LlamaConfig::from_file(&teacher.join("config.json")) {
        Ok(cfg) => crate::gpu::weights::check_gpu_shape(&cfg)
            .map_err(|e| format!("the teacher's shape is not supported on the GPU: {e:#}")),
        Err(_) => Ok(()),
    }
}
#[cfg(not(feature = "cuda"))]
fn gpu_shape(_: &Path) -> std::result::Result<(), String> {
    Ok(())
}

impl fmt::Display for Device {
    /// The flag's spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(None) => write!(f, "cuda"),
            Device::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

/// `--gpu-residual`: the GPU residual stream's precision (the flag's values are these names).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuResidual {
    #[value(name = "bf16")]
    Bf16,
    #[value(name = "f32")]
    F32,
}

impl GpuResidual {
    pub fn as_str(&self) -> &'static str {
        match self {
            GpuResidual::Bf16 => "bf16",
            GpuResidual::F32 => "f32",
        }
    }
}

/// `--teacher`, `--prompts` and `--out` as typed (relative to the working directory, which a
/// run never changes).
#[derive(Debug, Clone)]
pub struct GivenPaths {
    pub teacher: PathBuf,
    pub prompts: PathBuf,
    pub out: PathBuf,
}

/// Everything `distill` runs with, resolved from its flags once.
#[derive(Debug, Clone)]
pub struct DistillSettings {
    /// The teacher checkpoint directory, the prompts file and the output file, absolute.
    pub teacher: PathBuf,
    pub prompts: PathBuf,
    /// For a bucket `--out`, the staging copy's file ([`DistillSettings::out_url`]).
    pub out: PathBuf,
    /// `--out s3://…/NAME` (gs://, az://): the object the staging copy is committed to, the
    /// parts mirrored to `NAME.parts/` beside it ([`super::bucket`]).
    pub out_url: Option<crate::storage::ObjectUrl>,
    /// The three paths as typed: what the user reads (log lines, errors naming a prompt, the
    /// summary's `out`, the `merge` hint) keeps their spelling; the absolute ones above decide
    /// identity (the claim: one writer, no input as the output).
    pub given: GivenPaths,
    pub device: Device,
    /// This worker's share (`--shard`, else the array environment, else the whole job).
    pub worker: WorkerSlice,
    /// Prompts per forward batch (rows in flight with early exit).
    pub batch_size: NonZeroUsize,
    /// Prompts per continuous-batching window (early exit only).
    pub window_prompts: NonZeroUsize,
    /// Rows exit early and batches refill (the default; not with `--no-early-exit`).
    pub early_exit: bool,
    /// Working memory one forward may need, in bytes.
    pub batch_memory: NonZeroU64,
    /// `--max-batch-memory` as given (recorded in the fingerprint only when given).
    pub batch_memory_gib_given: Option<u64>,
    /// The sampler's settings; the teacher's mask and EOS ids are filled in by
    /// [`Self::bind_teacher`].
    pub gen: GenParams,
    pub teacher_options: TeacherOptions,
    pub limit: Option<usize>,
    pub format: OutFormat,
    pub chat_template: bool,
    pub special_tokens_in_text: SpecialTokensInText,
    pub skip_too_long: bool,
    pub gpu_residual: GpuResidual,
    pub gemm_tune: bool,
    pub json: bool,
    /// Threads of the pool (`--threads`): the CPU teacher's and the prompts' tokenizing.
    pub threads: usize,
    /// `--trajectory`: records carry commit steps, prompt ids and the chat template's sha256.
    pub trajectory: bool,
    /// `--top-k K` (1..=[`MAX_TOP_K`]): the soft-label sidecar.
    pub top_k: Option<usize>,
}

/// `--top-k` in 1..=[`MAX_TOP_K`]; with `--trajectory`, only where the sampler can record them.
fn trace_flags(a: &DistillArgs, device: Device) -> Result<Option<usize>> {
    if let Some(k) = a.top_k {
        if !(1..=MAX_TOP_K).contains(&k) {
            return Err(crate::error::usage(format!(
                "--top-k {k}: expected 1..={MAX_TOP_K} (the sidecar keeps at most {MAX_TOP_K} \
                 ids per position)"
            )));
        }
    }
    if (a.trajectory || a.top_k.is_some()) && !device.is_cpu() && a.no_early_exit {
        return Err(crate::error::usage(format!(
            "--trajectory/--top-k with --device {device} are recorded by the continuous \
             scheduler: drop --no-early-exit (or run them with --device cpu)"
        )));
    }
    Ok(a.top_k)
}

/// `--batch-size` (else the device's default): 1 ..= what the device holds.
fn batch_size(flag: Option<usize>, device: Device) -> Result<NonZeroUsize> {
    let Some(b) = flag else {
        return Ok(device.default_batch_size());
    };
    let max = device.max_batch_size();
    match NonZeroUsize::new(b) {
        Some(n) if b <= max => Ok(n),
        Some(_) if !device.is_cpu() => Err(crate::error::usage(format!(
            "--batch-size {b}: --device {device} holds at most {max} rows in flight (the GPU \
             sampler's {GPU_MAX_ROWS} slots); pass --batch-size {max} or less"
        ))),
        _ => Err(crate::error::usage(format!(
            "--batch-size {b}: expected 1..={max}"
        ))),
    }
}

/// `--window-prompts` (else 16 batches' worth): a prompt count, at least one.
fn window_prompts(flag: Option<usize>, batch: NonZeroUsize) -> Result<NonZeroUsize> {
    let w = flag.unwrap_or_else(|| super::plan::window_prompts(batch).get());
    NonZeroUsize::new(w)
        .filter(|_| w as u64 <= crate::sizes::MAX_WINDOW_PROMPTS)
        .ok_or_else(|| {
            crate::error::usage(format!(
                "--window-prompts {w}: expected 1..={} prompts",
                crate::sizes::MAX_WINDOW_PROMPTS
            ))
        })
}

/// `--max-batch-memory` (else the device's default) in bytes: not 0, not beyond 2^64 bytes.
fn batch_memory(flag: Option<u64>, device: Device) -> Result<NonZeroU64> {
    let g = flag.unwrap_or(device.default_batch_memory_gib());
    g.checked_mul(1 << 30)
        .and_then(NonZeroU64::new)
        .ok_or_else(|| {
            crate::error::usage(format!(
                "--max-batch-memory {g}: expected 1..{} GiB",
                u64::MAX >> 30
            ))
        })
}

/// The sampler's flags as [`GenParams`] (mask and EOS ids still unset), validated, with what
/// the device cannot run refused.
fn gen_params(a: &DistillArgs, device: Device) -> Result<GenParams> {
    let gen = GenParams {
        gen_length: a.gen_length,
        block_length: a.block_length,
        steps: a.steps,
        temperature: a.temperature,
        remasking: a.remasking,
        seed: a.seed,
        mask_id: 0,
        logits_eos_inf: a.logits_eos_inf,
        confidence_eos_eot_inf: a.confidence_eos_eot_inf,
        eos_ids: vec![],
        eot_ids: a.eot_ids.clone(),
        threshold: a.threshold,
        cache: a.kv_cache,
        cache_refresh: a.cache_refresh,
    };
    gen.validate()?;
    let usage = |m: String| Err(crate::error::usage(m));
    if device.is_cpu() && gen.cache != KvCache::None {
        return usage(format!(
            "--kv-cache {} runs on the GPU only (--device cuda); the CPU sampler is exact",
            gen.cache.as_str()
        ));
    }
    if !device.is_cpu() && gen.block_length > GPU_MAX_BLOCK_LENGTH {
        return usage(format!(
            "--block-length {} > {GPU_MAX_BLOCK_LENGTH} is not supported on the GPU",
            gen.block_length
        ));
    }
    Ok(gen)
}

/// `path` made absolute against the working directory (lexically: no symlink is resolved).
fn absolute(flag: &str, path: &Path) -> Result<PathBuf> {
    std::path::absolute(path)
        .map_err(|e| crate::error::usage(format!("{flag} {}: {e}", path.display())))
}

impl DistillSettings {
    /// Every flag of `distill` checked and defaulted, before any file is opened; `--device`
    /// made concrete on this machine ([`choose_device`]).
    pub fn resolve(a: &DistillArgs) -> Result<DistillSettings> {
        Self::resolve_on(a, choose_device(&a.device, &a.teacher)?)
    }

    /// [`DistillSettings::resolve`] for a device already chosen (the unit tests check the GPU's
    /// defaults and limits on machines without one).
    fn resolve_on(a: &DistillArgs, device: Device) -> Result<DistillSettings> {
        let worker = a.worker.resolve()?;
        let batch_size = batch_size(a.batch_size, device)?;
        let window_prompts = window_prompts(a.window_prompts, batch_size)?;
        let batch_memory = batch_memory(a.max_batch_memory, device)?;
        let gen = gen_params(a, device)?;
        let top_k = trace_flags(a, device)?;
        if a.gemm_tune && device.is_cpu() {
            return Err(crate::error::usage(
                "--gemm-tune tunes the GPU's cuBLASLt GEMMs: it needs --device cuda".to_string(),
            ));
        }
        let gpu_residual = a.gpu_residual;
        let (out_given, out_url) = match crate::storage::Location::of_path(&a.out, "--out")? {
            crate::storage::Location::Local(p) => (p, None),
            crate::storage::Location::Object(u) => {
                let (_, name) = crate::storage::file_output::split(&u, "--out")?;
                (crate::storage::staging::dir_for(&u).join(name), Some(u))
            }
            crate::storage::Location::Hub(_) => {
                return Err(crate::error::usage(
                    "--out: an hf:// URL names an input; write to a local path or a bucket",
                ))
            }
        };
        let out = absolute("--out", &out_given)?;
        if out.is_dir() {
            return Err(crate::error::usage(format!(
                "--out {}: is a directory; distill writes one file (and OUT.parts beside it)",
                a.out.display()
            )));
        }
        // A bucket URL: the object, read from its local copy (named in messages from here on;
        // the records name prompts by sha256, never by path, so the output is the local run's
        // byte for byte).
        let prompts = crate::storage::materialize::local_file(&a.prompts, "--prompts", &[])?;
        Ok(DistillSettings {
            teacher: absolute("--teacher", &a.teacher)?,
            prompts: absolute("--prompts", &prompts)?,
            out,
            out_url,
            given: GivenPaths {
                teacher: a.teacher.clone(),
                prompts,
                out: out_given,
            },
            device,
            worker,
            batch_size,
            window_prompts,
            early_exit: !a.no_early_exit,
            batch_memory,
            batch_memory_gib_given: a.max_batch_memory,
            gen,
            teacher_options: TeacherOptions {
                mask_id: a.mask_id,
                logits_shift: a.logits_shift,
                bidirectional: a.bidirectional,
            },
            limit: a.limit,
            format: a.format,
            chat_template: !a.no_chat_template,
            special_tokens_in_text: a.special_tokens_in_text,
            skip_too_long: a.skip_too_long,
            gpu_residual,
            gemm_tune: a.gemm_tune,
            json: a.json,
            threads: crate::tuning::Tuning::resolve(a.threads)?.pool,
            trajectory: a.trajectory,
            top_k,
        })
    }

    /// What only the opened teacher decides: its mask and EOS ids into [`Self::gen`], `--eot-id`
    /// against its vocabulary, and whether even a one-token prompt fits its context and the
    /// memory budget.
    pub fn bind_teacher(&mut self, teacher: &Teacher) -> Result<()> {
        self.gen.mask_id = teacher.mask_id;
        self.gen.eos_ids = teacher.eos_ids.clone();
        let v = teacher.config.vocab_size;
        if let Some(bad) = self.gen.eot_ids.iter().find(|&&e| e as usize >= v) {
            return Err(crate::error::usage(format!(
                "--eot-id {bad} is out of range for vocab_size {v}"
            )));
        }
        let shape = self.shape(teacher);
        // The settings alone, with a one-token prompt: an absurd --gen-length/--steps is a
        // usage error before any prompt is read.
        let g = &self.gen;
        if let Some(why) = limits::too_long(&shape, g.gen_length.checked_add(1), self.budget()) {
            return Err(crate::error::usage(format!(
                "--gen-length {} --steps {}: even a one-token prompt {why}",
                g.gen_length, g.steps
            )));
        }
        Ok(())
    }

    /// [`Self::batch_memory`] as a plain number of bytes.
    pub fn budget(&self) -> u64 {
        self.batch_memory.get()
    }

    /// What one forward's size depends on besides its rows and length.
    pub fn shape<'a>(&self, teacher: &'a Teacher) -> limits::ForwardShape<'a> {
        limits::ForwardShape {
            cfg: &teacher.config,
            cpu: self.device.is_cpu(),
            block_length: self.gen.block_length,
            steps_per_block: self.gen.steps_per_block(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: DistillArgs,
    }

    fn resolve(extra: &[&str]) -> Result<DistillSettings> {
        let mut v = vec!["x", "--teacher", "t", "--prompts", "p", "--out", "o"];
        v.extend_from_slice(extra);
        let a = Cli::try_parse_from(v)?.a;
        // The device as given (auto: the CPU), whatever this machine has.
        let device = match a.device.as_str() {
            "auto" => Device::Cpu,
            d => Device::parse(d)?,
        };
        DistillSettings::resolve_on(&a, device)
    }

    #[test]
    fn the_device_is_checked_on_this_machine_at_once() {
        let t = std::path::Path::new("no-teacher");
        // auto is the default and takes the CPU where the GPU path cannot run.
        let parsed = Cli::try_parse_from(["x", "--teacher", "t", "--prompts", "p", "--out", "o"]);
        assert_eq!(parsed.unwrap().a.device, "auto");
        let no_gpu = |_: Device| Err::<(), String>("no libcuda.so.1".into());
        let gpu = |_: Device| Ok::<(), String>(());
        let fits = |_: &Path| Ok::<(), String>(());
        let too_odd = |_: &Path| Err::<(), String>("head_dim 24".into());
        assert_eq!(
            choose_device_with("auto", t, no_gpu, fits).unwrap(),
            Device::Cpu
        );
        assert_eq!(
            choose_device_with("auto", t, gpu, too_odd).unwrap(),
            Device::Cpu
        );
        assert_eq!(
            choose_device_with("auto", t, gpu, fits).unwrap(),
            Device::Cuda(None)
        );
        assert_eq!(
            choose_device_with("cpu", t, gpu, fits).unwrap(),
            Device::Cpu
        );
        assert_eq!(
            choose_device_with("cuda:1", t, gpu, fits).unwrap(),
            Device::Cuda(Some(1))
        );
        // --device cuda without what it needs: exit 2 naming it (the shape is the teacher's
        // own check, later, with the file named).
        let e = choose_device_with("cuda:1", t, no_gpu, fits).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            e.to_string().ends_with("--device cuda:1: no libcuda.so.1"),
            "{e}"
        );
        assert!(choose_device_with("cuda", t, gpu, too_odd).is_ok());
        // This machine, for real: a build without the feature never picks the GPU.
        if !cfg!(feature = "cuda") {
            assert_eq!(choose_device("auto", t).unwrap(), Device::Cpu);
            let e = choose_device("cuda", t).unwrap_err().to_string();
            assert!(e.contains("built without the `cuda` feature"), "{e}");
        }
    }

    fn ok(extra: &[&str]) -> DistillSettings {
        resolve(extra).unwrap()
    }

    fn usage(extra: &[&str]) -> String {
        let e = resolve(extra).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn batch_size_defaults_by_device() {
        assert_eq!(ok(&[]).batch_size.get(), 8);
        assert_eq!(ok(&["--device", "cuda"]).batch_size.get(), 64);
        assert_eq!(ok(&["--device", "cuda:1"]).batch_size.get(), 64);
        assert_eq!(
            ok(&["--device", "cuda", "--batch-size", "5"])
                .batch_size
                .get(),
            5
        );
        assert_eq!(ok(&["--batch-size", "3"]).batch_size.get(), 3);
    }

    #[test]
    fn batch_size_is_bounded_by_what_the_device_holds() {
        assert!(usage(&["--batch-size", "0"]).contains("--batch-size 0"));
        let m = crate::sizes::MAX_BATCH.to_string();
        assert_eq!(ok(&["--batch-size", &m]).batch_size.get(), 1 << 16);
        let over = (crate::sizes::MAX_BATCH + 1).to_string();
        assert!(usage(&["--batch-size", &over]).contains("--batch-size"));
        // The GPU sampler holds GPU_MAX_ROWS rows: more is refused at start, naming both.
        let g = GPU_MAX_ROWS.to_string();
        assert_eq!(
            ok(&["--device", "cuda", "--batch-size", &g])
                .batch_size
                .get(),
            GPU_MAX_ROWS
        );
        let over = (GPU_MAX_ROWS + 1).to_string();
        for extra in [&[][..], &["--no-early-exit"][..]] {
            let mut a = vec!["--device", "cuda:0", "--batch-size", &over];
            a.extend_from_slice(extra);
            let e = usage(&a);
            assert!(e.contains("--batch-size 1025"), "{e}");
            assert!(e.contains("at most 1024"), "{e}");
        }
    }

    #[test]
    fn early_exit_and_windows() {
        assert!(ok(&[]).early_exit);
        assert!(!ok(&["--no-early-exit"]).early_exit);
        assert!(ok(&["--device", "cuda"]).early_exit);
        assert!(ok(&["--device", "cuda", "--early-exit"]).early_exit);
        assert!(!ok(&["--device", "cuda:1", "--no-early-exit"]).early_exit);
        assert_eq!(ok(&[]).window_prompts.get(), 128);
        assert_eq!(ok(&["--batch-size", "3"]).window_prompts.get(), 48);
        assert_eq!(ok(&["--window-prompts", "5"]).window_prompts.get(), 5);
        // A prompt count, not a token length: more than 2^20 prompts is a window too.
        let big = ((1u64 << 20) + 1).to_string();
        assert_eq!(
            ok(&["--window-prompts", &big]).window_prompts.get(),
            (1 << 20) + 1
        );
        assert!(usage(&["--window-prompts", "0"]).contains("--window-prompts"));
    }

    #[test]
    fn batch_memory_defaults_by_device_and_refuses_zero_and_overflow() {
        assert_eq!(ok(&[]).budget(), 16 << 30);
        assert_eq!(ok(&["--device", "cuda"]).budget(), 64 << 30);
        assert_eq!(ok(&["--max-batch-memory", "2"]).budget(), 2 << 30);
        for bad in ["0", "18446744073709551615"] {
            assert!(usage(&["--max-batch-memory", bad]).contains("--max-batch-memory"));
        }
    }

    #[test]
    fn device_is_typed_and_checked() {
        assert_eq!(ok(&[]).device, Device::Cpu);
        assert_eq!(ok(&["--device", "cuda"]).device, Device::Cuda(None));
        assert_eq!(ok(&["--device", "cuda:3"]).device, Device::Cuda(Some(3)));
        assert_eq!(Device::Cuda(Some(3)).to_string(), "cuda:3");
        for bad in ["gpu", "cuda:x", "CPU"] {
            assert!(usage(&["--device", bad]).contains("expected auto, cpu, cuda or cuda:N"));
        }
        assert!(usage(&["--gemm-tune"]).contains("--gemm-tune"));
        assert!(usage(&["--kv-cache", "dual"]).contains("GPU only"));
    }

    #[test]
    fn kv_cache_and_its_old_name_are_one_flag() {
        for f in ["--kv-cache", "--cache"] {
            let s = ok(&["--device", "cuda", f, "dual", "--cache-refresh", "4"]);
            assert_eq!(s.gen.cache, KvCache::Dual);
            assert_eq!(s.gen.cache_refresh, Some(4));
        }
        assert_eq!(ok(&["--device", "cuda"]).gen.cache, KvCache::None);
        // Both spellings at once is one flag given twice.
        assert!(resolve(&[
            "--device",
            "cuda",
            "--kv-cache",
            "dual",
            "--cache",
            "prefix"
        ])
        .is_err());
    }

    #[test]
    fn gpu_block_length_limit_is_checked_at_start() {
        // One block of 2048: over the GPU's limit, fine on the CPU.
        let long = [
            "--gen-length",
            "2048",
            "--block-length",
            "2048",
            "--steps",
            "2048",
        ];
        let e = usage(&[&["--device", "cuda"][..], &long].concat());
        assert!(e.contains("--block-length 2048"), "{e}");
        ok(&long);
    }

    #[test]
    fn top_k_is_bounded_and_trajectory_flags_are_typed() {
        assert_eq!(ok(&[]).top_k, None);
        assert!(!ok(&[]).trajectory);
        assert!(ok(&["--trajectory"]).trajectory);
        assert_eq!(ok(&["--top-k", "1"]).top_k, Some(1));
        assert_eq!(ok(&["--top-k", "64"]).top_k, Some(64));
        for bad in ["0", "65"] {
            let e = usage(&["--top-k", bad]);
            assert!(
                e.contains(&format!("--top-k {bad}")) && e.contains("1..=64"),
                "{e}"
            );
        }
        assert!(ok(&["--device", "cuda", "--trajectory", "--top-k", "32"]).trajectory);
        let e = usage(&["--device", "cuda", "--trajectory", "--no-early-exit"]);
        assert!(e.contains("--no-early-exit"), "{e}");
    }

    #[test]
    fn paths_are_absolute() {
        let s = ok(&[]);
        assert!(s.teacher.is_absolute() && s.prompts.is_absolute() && s.out.is_absolute());
        assert!(s.out.ends_with("o"));
        // What the user reads keeps their spelling.
        assert_eq!(s.given.out, PathBuf::from("o"));
        assert_eq!(s.given.prompts, PathBuf::from("p"));
    }
}
