//! Before any work (`run --check`, and the start of every run): every step's full command line
//! through the real parser, every input that must already exist found readable, and the
//! pipeline's write set checked against its read set and itself — so a wrong flag, a missing
//! teacher or a `local_dir` that would overwrite the tokenizer is found in a second, all at
//! once, instead of after hours of earlier steps. Nothing is written.

use std::path::{Path, PathBuf};

use super::config::Pipeline;
use super::steps::Step;

/// One path the pipeline reads or writes, with who does it (for the message).
struct Use {
    path: PathBuf,
    who: String,
}

fn u(path: &Path, who: impl Into<String>) -> Use {
    Use {
        path: path.to_path_buf(),
        who: who.into(),
    }
}

/// Every problem found, each a line naming the step or key and the path (empty: all good).
pub fn check(
    p: &Pipeline,
    pipeline: &Path,
    state: &Path,
    plan: &[Step],
    parse: super::Exec,
) -> Vec<String> {
    let mut problems = Vec::new();
    for step in plan {
        for argv in &step.commands {
            if let Err(e) = parse(argv) {
                problems.push(format!(
                    "step {}: `{}`: {}",
                    step.name,
                    super::quote(argv),
                    format!("{e:#}").trim()
                ));
            }
        }
    }
    let reads = reads(p, pipeline);
    for r in &reads {
        if let Err(e) = readable(&r.path) {
            problems.push(format!("{} {}: {e}", r.who, r.path.display()));
        }
    }
    if let Some(d) = &p.distill {
        let cfg = d.teacher.join("config.json");
        if d.teacher.is_dir() && !cfg.is_file() {
            problems.push(format!(
                "[distill] teacher {}: no config.json (not a checkpoint directory)",
                d.teacher.display()
            ));
        }
    }
    let writes = writes(p, pipeline, state);
    // Each write against every read, then against every later write: one overlap rule, two
    // messages.
    for (i, w) in writes.iter().enumerate() {
        let against_reads = reads.iter().map(|r| {
            (
                r,
                " (written) collides with ",
                " (read): the run would overwrite its own input",
            )
        });
        let against_writes = writes[i + 1..]
            .iter()
            .map(|o| (o, " and ", " are written to the same place"));
        for (o, mid, end) in against_reads.chain(against_writes) {
            if overlap(&w.path, &o.path) {
                let (a, b) = (w.path.display(), o.path.display());
                problems.push(format!("{} {a}{mid}{} {b}{end}", w.who, o.who));
            }
        }
    }
    problems
}

/// What must exist before the run starts: the pipeline file, tokenizer, manifests, local
/// inputs, benchmark files, the teacher, and the audit's lineage and shipped model.
fn reads(p: &Pipeline, pipeline: &Path) -> Vec<Use> {
    let mut v = vec![
        u(pipeline, "the pipeline file"),
        u(&p.tokenizer, "tokenizer"),
    ];
    if let Some(b) = &p.base {
        v.push(u(&b.manifest, "[base] manifest"));
    }
    if let Some(m) = &p.pack.manifest {
        v.push(u(m, "[pack] manifest"));
    }
    for i in &p.pack.inputs {
        if !i.to_string_lossy().contains(['*', '?', '[', '{']) {
            v.push(u(i, "[pack] inputs"));
        }
    }
    if let Some(m) = &p.mcq {
        v.push(u(&m.manifest, "[mcq] manifest"));
    }
    if let Some(d) = &p.decontam {
        v.extend(d.against.iter().map(|a| u(a, "[decontam] against")));
    }
    if let Some(d) = &p.distill {
        v.push(u(&d.teacher, "[distill] teacher"));
    }
    let a = &p.audit;
    for (x, who) in [
        (&a.lineage, "[audit] lineage"),
        (&a.shipped, "[audit] shipped"),
        (&a.teacher, "[audit] teacher"),
    ] {
        if let Some(x) = x {
            v.push(u(x, who));
        }
    }
    v
}

/// What the run writes: locks and architecture.json beside the manifests, the base's local
/// copy, every `out`, distill's parts, the run journal and the run's own lock.
fn writes(p: &Pipeline, pipeline: &Path, state: &Path) -> Vec<Use> {
    let mut v = Vec::new();
    for m in p.manifests() {
        v.push(u(&m.with_extension("lock"), "[fetch] the lock of"));
    }
    if let Some(b) = &p.base {
        let arch = b
            .manifest
            .with_file_name(crate::model::architecture::ARCHITECTURE_FILE);
        v.push(u(&arch, "[fetch]"));
        if let Some(l) = &b.local_dir {
            v.push(u(l, "[base] local_dir"));
        }
    }
    v.push(u(&p.pack.out, "[pack] out"));
    if let Some(m) = &p.mcq {
        v.push(u(&m.out, "[mcq] out"));
    }
    if let Some(d) = &p.distill {
        v.push(u(&d.out, "[distill] out"));
        v.push(u(
            &crate::distill::output::parts_dir(&d.out),
            "[distill] out's parts",
        ));
    }
    v.push(u(state, "the run journal (state)"));
    v.push(u(&crate::lock::beside_path(pipeline), "the run's lock"));
    v
}

/// Readable now: a file opens, a directory lists.
fn readable(p: &Path) -> std::io::Result<()> {
    if std::fs::metadata(p)?.is_dir() {
        std::fs::read_dir(p).map(|_| ())
    } else {
        std::fs::File::open(p).map(|_| ())
    }
}

/// The same path, or one inside the other (compared with symlinks resolved as far as the
/// paths exist).
fn overlap(a: &Path, b: &Path) -> bool {
    let (a, b) = (resolved(a), resolved(b));
    a.starts_with(&b) || b.starts_with(&a)
}

/// `p` with its longest existing ancestor canonicalized and the rest appended.
fn resolved(p: &Path) -> PathBuf {
    let p = super::config::normalize(p);
    let mut rest = Vec::new();
    let mut cur = p.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            let mut out = c;
            out.extend(rest.iter().rev());
            return out;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_equal_or_nested_through_links() {
        let (d, real) = crate::testkit::temp_path("real");
        std::fs::create_dir_all(real.join("x")).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        assert!(overlap(&real, &d.path().join("link/x/new")));
        assert!(overlap(&d.path().join("link/./x"), &real.join("x")));
        assert!(!overlap(&real.join("x"), &real.join("y")));
        assert!(!overlap(&real.join("xy"), &real.join("x")));
    }
}
