//! The pipeline file turned into commands: each step is one or more ordinary `dlm-data`
//! command lines (what a user would type), plus the files it reads and writes, whose
//! signatures say whether the step is still complete (run.md's table of what counts as a
//! change is this file).

use std::path::{Path, PathBuf};

use super::config::Pipeline;

/// The steps in pipeline order (`--only` / `--from` names).
pub const STEPS: [&str; 6] = ["fetch", "pack", "mcq", "decontam", "distill", "audit"];

/// `run --strict`'s flag on the pack step: a check, not a setting (see [`settings`]).
pub const STRICT: &str = "--strict";

/// A step's command lines as settings: without `--strict`, which changes no output byte
/// (it only fails a run whose output would carry a warning), and with distill's `--cache`
/// read as `--kv-cache` (its alias: journals from before the step said `--kv-cache` recorded
/// it, and the same setting must not re-run the distillation).
pub fn settings(commands: &[Vec<String>]) -> Vec<Vec<&str>> {
    commands
        .iter()
        .map(|c| {
            let distill = c.first().is_some_and(|a| a == "distill");
            c.iter()
                .map(String::as_str)
                .filter(|a| *a != STRICT)
                .map(|a| {
                    if distill && a == "--cache" {
                        "--kv-cache"
                    } else {
                        a
                    }
                })
                .collect()
        })
        .collect()
}

/// What differs between a step's recorded command lines and today's, as the pipeline file
/// says it: `seq_len 2048 → 4096`, `shuffle_seed (none) → 7`; anything else (another
/// command, a positional argument) as the two command lines.
pub fn describe_change(old: &[Vec<String>], new: &[Vec<String>]) -> String {
    let (old, new) = (settings(old), settings(new));
    let mut parts = Vec::new();
    for k in 0..old.len().max(new.len()) {
        let (a, b) = (old.get(k), new.get(k));
        if a == b {
            continue;
        }
        match (a.map(|a| flags(a)), b.map(|b| flags(b))) {
            (Some(Some(fa)), Some(Some(fb))) if a.map(|a| a[0]) == b.map(|b| b[0]) => {
                let keys: std::collections::BTreeSet<&str> =
                    fa.keys().chain(fb.keys()).copied().collect();
                for key in keys {
                    let (x, y) = (fa.get(key), fb.get(key));
                    if x != y {
                        let show = |v: Option<&Vec<&str>>| {
                            v.map_or("(none)".to_string(), |v| {
                                if v.is_empty() {
                                    "on".to_string()
                                } else {
                                    v.join(" ")
                                }
                            })
                        };
                        let name = key.trim_start_matches("--").replace('-', "_");
                        parts.push(format!("{name} {} → {}", show(x), show(y)));
                    }
                }
            }
            _ => {
                let line = |c: Option<&Vec<&str>>| {
                    c.map_or("(none)".to_string(), |c| {
                        format!("`dlm-data {}`", c.join(" "))
                    })
                };
                parts.push(format!("command {} → {}", line(a), line(b)));
            }
        }
    }
    if parts.is_empty() {
        "its command line changed".to_string()
    } else {
        parts.join(", ")
    }
}

/// A command line's flags (`--name` → its values, in order; a repeated flag collects them),
/// or `None` when it holds a positional argument (compared whole).
fn flags<'a>(argv: &[&'a str]) -> Option<std::collections::BTreeMap<&'a str, Vec<&'a str>>> {
    let mut m: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let mut cur: Option<&str> = None;
    for a in argv.iter().skip(1) {
        if a.starts_with("--") {
            m.entry(a).or_default();
            cur = Some(a);
        } else {
            m.get_mut(cur?)?.push(a);
        }
    }
    Some(m)
}

/// One step: its command lines and the inputs and outputs it is complete against.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: &'static str,
    /// Each a full argument vector without the program name.
    pub commands: Vec<Vec<String>>,
    /// Files or directories it reads: changed bytes here re-run the step (and, through its
    /// outputs, what reads them).
    pub reads: Vec<PathBuf>,
    /// Outputs it is complete against: gone or altered, the step runs again in place.
    pub writes: Vec<PathBuf>,
    /// The output rebuilt beside the old one when reads or settings changed (its `--out`).
    pub out: Option<PathBuf>,
}

impl Step {
    fn new(name: &'static str) -> Step {
        Step {
            name,
            commands: vec![],
            reads: vec![],
            writes: vec![],
            out: None,
        }
    }

    /// The command lines with `--out OUT` pointed at `to` (a rebuild's staging path).
    pub fn commands_into(&self, to: &Path) -> Vec<Vec<String>> {
        let Some(out) = &self.out else {
            return self.commands.clone();
        };
        let live = s(out);
        self.commands
            .iter()
            .map(|c| {
                let mut c = c.clone();
                for i in 1..c.len() {
                    if c[i - 1] == "--out" && c[i] == live {
                        c[i] = s(to);
                    }
                }
                c
            })
            .collect()
    }

    /// (staged, live) paths a rebuild into `staged` swaps: the output, and distill's parts.
    pub fn swap_pairs(&self, staged: &Path) -> Vec<(PathBuf, PathBuf)> {
        let Some(out) = &self.out else {
            return vec![];
        };
        let mut v = vec![(staged.to_path_buf(), out.clone())];
        if self.name == "distill" {
            v.push((
                crate::distill::output::parts_dir(staged),
                crate::distill::output::parts_dir(out),
            ));
        }
        v
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn push_opt<T: ToString>(v: &mut Vec<String>, flag: &str, x: &Option<T>) {
    if let Some(x) = x {
        v.push(flag.into());
        v.push(x.to_string());
    }
}

/// The flags both shard-writing steps (pack, mcq) take alike: the pipeline's tokenizer, the
/// step's output directory, row length and shard format.
fn shard_output(
    c: &mut Vec<String>,
    p: &Pipeline,
    out: &Path,
    seq_len: &Option<usize>,
    format: &Option<String>,
) {
    c.extend([
        "--tokenizer".into(),
        s(&p.tokenizer),
        "--out".into(),
        s(out),
    ]);
    push_opt(c, "--seq-len", seq_len);
    push_opt(c, "--format", format);
}

/// `manifest.lock` beside a manifest (what `fetch` writes).
fn lock_of(manifest: &Path) -> PathBuf {
    manifest.with_extension("lock")
}

/// The report `decontam` writes for a shard directory / a prompts file.
fn report_of_dir(d: &Path) -> PathBuf {
    d.join(crate::shards::outdir::DECONTAM_REPORT)
}

/// The steps of `p`, in order; a step without its section is absent.
pub fn plan(p: &Pipeline) -> Vec<Step> {
    let cache: Vec<String> = p
        .cache
        .as_ref()
        .map(|c| vec!["--cache".to_string(), s(c)])
        .unwrap_or_default();
    let mut steps = Vec::new();
    steps.extend(fetch(p, &cache));
    steps.push(pack(p, &cache));
    steps.extend(mcq(p, &cache));
    steps.extend(decontam(p, &cache));
    steps.extend(distill(p));
    steps.push(audit(p, &cache));
    steps
}

/// fetch: every manifest, base first.
fn fetch(p: &Pipeline, cache: &[String]) -> Option<Step> {
    let mut fetch = Step::new("fetch");
    for m in p.manifests() {
        let mut c = vec!["fetch".to_string(), "--manifest".into(), s(&m)];
        c.extend(cache.iter().cloned());
        push_opt(&mut c, "--jobs", &p.fetch.jobs);
        if let Some(b) = &p.base {
            if b.manifest == m {
                push_opt(&mut c, "--local-dir", &b.local_dir.as_ref().map(|d| s(d)));
                fetch.writes.extend(b.local_dir.clone());
                // architecture.json is written beside the manifest.
                fetch
                    .writes
                    .push(m.with_file_name(crate::model::architecture::ARCHITECTURE_FILE));
            }
        }
        c.extend(p.fetch.args.iter().cloned());
        fetch.reads.push(m.clone());
        // A local source's files are pinned by this step's lock: their bytes are its input.
        fetch.reads.extend(local_source_files(&m));
        fetch.writes.push(lock_of(&m));
        fetch.commands.push(c);
    }
    (!fetch.commands.is_empty()).then_some(fetch)
}

/// pack: stage 1 from a manifest or local files.
fn pack(p: &Pipeline, cache: &[String]) -> Step {
    let k = &p.pack;
    let mut c = vec!["pack".to_string()];
    let mut pack = Step::new("pack");
    if let Some(m) = &k.manifest {
        c.extend(["--manifest".into(), s(m)]);
        c.extend(cache.iter().cloned());
        pack.reads.extend([m.clone(), lock_of(m)]);
        pack.reads.extend(local_source_files(m));
    }
    for i in &k.inputs {
        c.extend(["--input".into(), s(i)]);
        pack.reads.extend(input_files(i));
    }
    push_opt(&mut c, "--text-column", &k.text_column);
    push_opt(&mut c, "--text", &k.text);
    shard_output(&mut c, p, &k.out, &k.seq_len, &k.format);
    push_opt(&mut c, "--tokens", &k.tokens);
    push_opt(&mut c, "--shuffle-seed", &k.shuffle_seed);
    c.extend(k.args.iter().cloned());
    pack.reads.push(p.tokenizer.clone());
    pack.writes
        .push(k.out.join(crate::shards::index::INDEX_FILE));
    pack.out = Some(k.out.clone());
    pack.commands.push(c);
    pack
}

/// mcq: the SFT shards and the prompts.
fn mcq(p: &Pipeline, cache: &[String]) -> Option<Step> {
    let m = p.mcq.as_ref()?;
    let mut c = vec!["mcq".to_string(), "--manifest".into(), s(&m.manifest)];
    c.extend(cache.iter().cloned());
    shard_output(&mut c, p, &m.out, &m.seq_len, &m.format);
    push_opt(&mut c, "--seed", &m.seed);
    c.extend(m.args.iter().cloned());
    Some(Step {
        name: "mcq",
        commands: vec![c],
        reads: [
            vec![
                m.manifest.clone(),
                lock_of(&m.manifest),
                p.tokenizer.clone(),
            ],
            local_source_files(&m.manifest),
        ]
        .concat(),
        writes: vec![
            m.out.join("prompts.jsonl"),
            m.out.join("sft").join(crate::shards::index::INDEX_FILE),
        ],
        out: Some(m.out.clone()),
    })
}

/// decontam: stage-1 shards, SFT shards, prompts.
fn decontam(p: &Pipeline, cache: &[String]) -> Option<Step> {
    let d = p.decontam.as_ref()?;
    let mut base = vec!["decontam".to_string(), "--against".into()];
    base.extend(d.against.iter().map(|a| s(a)));
    base.extend(cache.iter().cloned());
    push_opt(&mut base, "--ngram", &d.ngram);
    base.extend(d.args.iter().cloned());
    let mut step = Step::new("decontam");
    for a in &d.against {
        step.reads.push(a.clone());
        if a.extension().is_some_and(|e| e == "toml") {
            step.reads.push(lock_of(a));
        }
    }
    let mut scan = |flag: &str, target: PathBuf, watched: PathBuf, report: PathBuf| {
        let mut c = base.clone();
        c.extend([flag.to_string(), s(&target)]);
        step.commands.push(c);
        step.reads.push(watched);
        step.writes.push(report);
    };
    if d.stage1 {
        let o = &p.pack.out;
        scan(
            "--shards",
            o.clone(),
            o.join(crate::shards::index::INDEX_FILE),
            report_of_dir(o),
        );
    }
    if let Some(m) = &p.mcq {
        let sft = m.out.join("sft");
        if d.sft {
            scan(
                "--shards",
                sft.clone(),
                sft.join(crate::shards::index::INDEX_FILE),
                report_of_dir(&sft),
            );
        }
        if d.prompts {
            let pr = m.out.join("prompts.jsonl");
            let rep = m.out.join(crate::shards::outdir::prompts_decontam_report(
                "prompts.jsonl",
            ));
            scan("--prompts", pr.clone(), pr, rep);
        }
    }
    (!step.commands.is_empty()).then_some(step)
}

/// distill: the mcq prompts through the teacher.
fn distill(p: &Pipeline) -> Option<Step> {
    let (Some(d), Some(m)) = (&p.distill, &p.mcq) else {
        return None;
    };
    let prompts = m.out.join("prompts.jsonl");
    let mut c = vec![
        "distill".to_string(),
        "--teacher".into(),
        s(&d.teacher),
        "--prompts".into(),
        s(&prompts),
        "--out".into(),
        s(&d.out),
    ];
    push_opt(&mut c, "--device", &d.device);
    push_opt(&mut c, "--gen-length", &d.gen_length);
    push_opt(&mut c, "--block-length", &d.block_length);
    push_opt(&mut c, "--steps", &d.steps);
    push_opt(&mut c, "--batch-size", &d.batch_size);
    push_opt(&mut c, "--temperature", &d.temperature);
    push_opt(&mut c, "--seed", &d.seed);
    push_opt(&mut c, "--kv-cache", &d.kv_cache);
    push_opt(&mut c, "--cache-refresh", &d.cache_refresh);
    push_opt(&mut c, "--threshold", &d.threshold);
    push_opt(&mut c, "--limit", &d.limit);
    c.extend(d.args.iter().cloned());
    Some(Step {
        name: "distill",
        commands: vec![c],
        reads: vec![d.teacher.clone(), prompts],
        writes: vec![d.out.clone()],
        out: Some(d.out.clone()),
    })
}

/// audit: the whole chain that exists in this file.
fn audit(p: &Pipeline, cache: &[String]) -> Step {
    let mut c = vec!["audit".to_string()];
    for m in p.manifests() {
        // Benchmarks are never training inputs: audit reads them through the reports.
        let is_eval = p.decontam.as_ref().is_some_and(|d| d.against.contains(&m));
        if !is_eval {
            c.extend(["--manifest".into(), s(&m)]);
        }
    }
    c.extend(cache.iter().cloned());
    c.extend(["--shards".into(), s(&p.pack.out)]);
    if let Some(m) = &p.mcq {
        c.extend(["--shards".into(), s(&m.out.join("sft"))]);
        c.extend(["--prompts".into(), s(&m.out.join("prompts.jsonl"))]);
    }
    if let Some(d) = &p.distill {
        c.extend(["--distilled".into(), s(&d.out)]);
    }
    let teacher = p
        .audit
        .teacher
        .clone()
        .or_else(|| p.distill.as_ref().map(|d| d.teacher.clone()));
    push_opt(&mut c, "--teacher", &teacher.as_ref().map(|t| s(t)));
    push_opt(&mut c, "--lineage", &p.audit.lineage.as_ref().map(|t| s(t)));
    push_opt(&mut c, "--shipped", &p.audit.shipped.as_ref().map(|t| s(t)));
    c.extend(p.audit.args.iter().cloned());
    let mut audit = Step::new("audit");
    audit.commands.push(c);
    audit
}

/// The files an `--input` names, as pack expands it (a directory's data files, a glob's
/// matches now); itself when that fails (pack then says why).
fn input_files(i: &Path) -> Vec<PathBuf> {
    crate::sources::files::expand(std::slice::from_ref(&i.to_path_buf()))
        .unwrap_or_else(|_| vec![i.to_path_buf()])
}

/// The files a manifest's local sources (`path = …`) name now, as `fetch` pins them (a
/// directory's data files, a glob's matches); the path itself when it names none (recorded
/// missing, so that its appearing is a change). Nothing for a manifest that does not load
/// (the preflight and the step say why).
fn local_source_files(manifest: &Path) -> Vec<PathBuf> {
    let Ok(m) = crate::manifest::Manifest::load(manifest) else {
        return vec![];
    };
    let mut v = Vec::new();
    for s in m.sources.iter().filter(|s| s.is_local()) {
        match crate::sources::local::files(&m, s) {
            Ok(found) => v.extend(found.into_iter().map(|(_, p)| p)),
            Err(_) => {
                let given = Path::new(s.path.as_deref().unwrap_or_default());
                v.push(crate::sources::local::base_dir(&m).join(given));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn a_changed_setting_is_named_with_both_values() {
        let old = [v("pack --input a.jsonl --seq-len 2048 --out o")];
        let new = [v(
            "pack --input a.jsonl --seq-len 4096 --out o --shuffle-seed 7 --strict",
        )];
        assert_eq!(
            describe_change(&old, &new),
            "seq_len 2048 → 4096, shuffle_seed (none) → 7"
        );
        let new = [v(
            "pack --input a.jsonl --input b.jsonl --seq-len 2048 --out o",
        )];
        assert_eq!(
            describe_change(&old, &new),
            "input a.jsonl → a.jsonl b.jsonl"
        );
        assert!(describe_change(&old, &[v("mcq --out o")]).starts_with("command `dlm-data pack"));
    }

    /// The shipped pipeline's `kv_cache = "dual"` reaches distill as `--kv-cache dual` (the
    /// flag's name; `--cache` names the Hub cache everywhere else).
    #[test]
    fn distill_gets_the_kv_cache_by_its_own_flag() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/pipeline.toml");
        let p = Pipeline::load(&path).unwrap();
        let steps = plan(&p);
        let d = steps
            .iter()
            .find(|s| s.name == "distill")
            .expect("a distill step");
        let argv = &d.commands[0];
        assert!(
            argv.windows(2)
                .any(|w| w[0] == "--kv-cache" && w[1] == "dual"),
            "{argv:?}"
        );
        assert!(!argv.iter().any(|a| a == "--cache"), "{argv:?}");
        // A journal written when the step said `--cache dual` records the same settings.
        let old: Vec<String> = argv
            .iter()
            .map(|a| {
                if a == "--kv-cache" {
                    "--cache".into()
                } else {
                    a.clone()
                }
            })
            .collect();
        assert_eq!(settings(&[old]), settings(&d.commands));
    }
}
