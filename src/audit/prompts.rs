//! The stage-3 links: prompts.jsonl items come from locked sciq train / mmlu auxiliary_train
//! files; distilled records each match a prompt (id, provenance, prompt text, gold), follow the
//! prompts' order, and come from exactly one teacher (weights and config hashes).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::Value;

use super::context::Ctx;
use super::policy::Use;
use super::report::Check;
use crate::mcq::prompts::{for_each_line, PromptRecord, MAX_LINE_BYTES};

/// Is this locked training source one stage 3 may draw from?
fn mcq_origin(repo: &str, split: &str, config: &str) -> bool {
    match repo {
        "allenai/sciq" => split == "train",
        "cais/mmlu" => config == "auxiliary_train" || split == "auxiliary_train",
        _ => false,
    }
}

/// One record's checks: its invariants, a unique id, a locked MCQ training file it comes from.
#[allow(clippy::too_many_arguments)]
fn record(
    ctx: &Ctx,
    path: &Path,
    ln: usize,
    r: PromptRecord,
    c: &mut Check,
    ids: &mut HashSet<String>,
    per_source: &mut HashMap<String, u64>,
    uses: &mut Vec<Use>,
    recs: &mut Vec<PromptRecord>,
) {
    if let Err(e) = r.validate() {
        c.fail(format!("{} line {ln} ({}): {e}", path.display(), r.id));
    }
    if !ids.insert(r.id.clone()) {
        c.fail(format!(
            "{} line {ln}: duplicate id {:?}",
            path.display(),
            r.id
        ));
    }
    let key = (r.repo.clone(), r.commit.clone(), r.file.clone());
    match ctx.train_files.get(&key) {
        None => c.fail(format!(
            "{} line {ln} ({}): {}@{} {} is not a locked training file",
            path.display(),
            r.id,
            r.repo,
            r.commit,
            r.file
        )),
        Some(tf) => {
            if tf.source != r.source {
                c.fail(format!(
                    "{} line {ln} ({}): source {:?} but the file is locked under {:?}",
                    path.display(),
                    r.id,
                    r.source,
                    tf.source
                ));
            }
            if !mcq_origin(&r.repo, &tf.split, &tf.config) {
                c.fail(format!(
                    "{} line {ln} ({}): {} {}/{} is not sciq train or mmlu auxiliary_train",
                    path.display(),
                    r.id,
                    r.repo,
                    tf.config,
                    tf.split
                ));
            }
        }
    }
    *per_source.entry(r.source.clone()).or_default() += 1;
    uses.push(Use {
        what: format!("{} line {ln}", path.display()),
        repo: r.repo.clone(),
        commit: r.commit.clone(),
        file: r.file.clone(),
        split: None,
        role: None,
    });
    recs.push(r);
}

/// `prompts`; returns the parsed records (by line order) for the distilled check.
pub fn check_prompts(
    ctx: &Ctx,
    path: Option<&Path>,
    uses: &mut Vec<Use>,
) -> (Check, Option<Vec<PromptRecord>>) {
    let Some(path) = path else {
        return (Check::skip("prompts", "no --prompts given"), None);
    };
    let mut c = Check::new("prompts");
    if let Err(e) = crate::bounded::check_regular(path) {
        c.fail(format!("{e}"));
        return (c, None);
    }
    let mut recs = Vec::new();
    let mut ids = HashSet::new();
    let mut per_source: HashMap<String, u64> = HashMap::new();
    // The one bounded reader distill uses: a line it cannot read ends the check there (named);
    // a bad record is a failure and the check goes on.
    let read = for_each_line(path, MAX_LINE_BYTES, &mut |ln, line| {
        let r = match serde_json::from_str::<PromptRecord>(line) {
            Ok(r) => r,
            Err(e) => {
                c.fail(format!(
                    "{} line {ln}: not a prompt record ({e})",
                    path.display()
                ));
                return Ok(());
            }
        };
        record(
            ctx,
            path,
            ln,
            r,
            &mut c,
            &mut ids,
            &mut per_source,
            uses,
            &mut recs,
        );
        Ok(())
    });
    if let Err(e) = read {
        c.fail(format!("{e:#}"));
    }
    if let Some(problem) = crate::mcq::card::check(path, &recs) {
        c.fail(problem);
    }
    if recs.is_empty() {
        c.warn(format!(
            "{}: no prompt records: nothing to distill or audit downstream",
            path.display()
        ));
    }
    let mut counts: Vec<_> = per_source.into_iter().collect();
    counts.sort();
    c.summary = format!(
        "{} item(s) traced to locked MCQ training files ({})",
        recs.len(),
        counts
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    (c, Some(recs))
}

/// The per-record state of the `distilled` check: records are streamed (one in memory at a
/// time, each bounded), each traced to its prompt as it is read.
struct Trace<'a> {
    path: &'a Path,
    prompts: &'a [PromptRecord],
    pos: HashMap<&'a str, usize>,
    skip_too_long: bool,
    teachers: HashMap<(String, String), u64>,
    last: Option<usize>,
    seen: HashSet<String>,
    correct: u64,
    with_correct: u64,
    records: usize,
    /// Problems in record order (reported after the parts comparison, as before).
    problems: Vec<String>,
}

impl Trace<'_> {
    fn record(&mut self, k: usize, r: &Value, uses: &mut Vec<Use>) {
        self.records += 1;
        let at = format!("{} record {k}", self.path.display());
        let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let id = s("id");
        let Some(&p) = self.pos.get(id.as_str()) else {
            self.problems
                .push(format!("{at}: id {id:?} is not in the prompts"));
            return;
        };
        if !self.seen.insert(id.clone()) {
            self.problems
                .push(format!("{at}: id {id:?} distilled twice"));
        }
        let pr = &self.prompts[p];
        let mut diffs = Vec::new();
        for (f, want) in [
            ("source", &pr.source),
            ("repo", &pr.repo),
            ("commit", &pr.commit),
            ("file", &pr.file),
            ("prompt", &pr.prompt),
            ("gold", &pr.gold),
        ] {
            if &s(f) != want {
                diffs.push(f);
            }
        }
        if r.get("row").and_then(Value::as_u64) != Some(pr.row) {
            diffs.push("row");
        }
        if !diffs.is_empty() {
            self.problems.push(format!(
                "{at} ({id}): {} differ from the prompt",
                diffs.join(", ")
            ));
        }
        if let Some(l) = self.last {
            if p <= l {
                self.problems
                    .push(format!("{at} ({id}): out of prompt order"));
            }
        }
        // A prompt missing between two records: a lost record, unless the run skipped
        // prompts too long for the teacher (its parts record --skip-too-long).
        let skipped = self.last.map_or(p, |l: usize| p.saturating_sub(l + 1));
        if skipped > 0 && !self.skip_too_long {
            self.problems.push(format!(
                "{at} ({id}): {skipped} prompt(s) before it have no record (first: {:?})",
                self.prompts[self.last.map_or(0, |l| l + 1)].id
            ));
        }
        self.last = Some(p);
        let t = r.get("teacher");
        let field = |f: &str| {
            t.and_then(|t| t.get(f))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (w, cfg) = (field("weights_sha256"), field("config_sha256"));
        if w.is_empty() {
            self.problems
                .push(format!("{at} ({id}): no teacher.weights_sha256"));
        }
        *self.teachers.entry((w, cfg)).or_default() += 1;
        if let Err(why) = answer_agrees(r) {
            self.problems.push(format!("{at} ({id}): {why}"));
        }
        if let Some(b) = r.get("correct").and_then(Value::as_bool) {
            self.with_correct += 1;
            self.correct += b as u64;
        }
        uses.push(Use {
            what: at,
            repo: s("repo"),
            commit: s("commit"),
            file: s("file"),
            split: None,
            role: None,
        });
    }
}

/// `distilled`
pub fn check_distilled(
    path: Option<&Path>,
    prompts: Option<&[PromptRecord]>,
    uses: &mut Vec<Use>,
) -> Check {
    let Some(path) = path else {
        return Check::skip("distilled", "no --distilled given");
    };
    let mut c = Check::new("distilled");
    let Some(prompts) = prompts else {
        c.fail(
            "--distilled needs --prompts: records can only be traced through their prompts"
                .to_string(),
        );
        return c;
    };
    let parts = parts_of(path, &mut c);
    let mut tr = Trace {
        path,
        prompts,
        pos: prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id.as_str(), i))
            .collect(),
        skip_too_long: parts.skip_too_long,
        teachers: HashMap::new(),
        last: None,
        seen: HashSet::new(),
        correct: 0,
        with_correct: 0,
        records: 0,
        problems: Vec::new(),
    };
    let mut first_diff = None;
    let read = crate::model::lineage::for_each_record(
        path,
        crate::model::lineage::RECORD_MAX,
        &mut |k, r| {
            let k = k as usize;
            if let Some(exp) = &parts.expected {
                if first_diff.is_none() && exp.get(k).is_some_and(|d| *d != digest(&r)) {
                    first_diff = Some(k);
                }
            }
            tr.record(k, &r, uses);
            Ok(())
        },
    );
    if let Err(e) = read {
        c.fail(format!("{e:#}"));
        return c;
    }
    parts.report(path, tr.records, first_diff, &mut c);
    for p in std::mem::take(&mut tr.problems) {
        c.fail(p);
    }
    finish_distilled(&mut c, &tr);
    super::topk::check_into(path, &mut c);
    c
}

/// The summary and notes of the `distilled` check, once every record was traced.
fn finish_distilled(c: &mut Check, tr: &Trace) {
    if tr.teachers.len() > 1 {
        let mut t: Vec<_> = tr
            .teachers
            .iter()
            .map(|((w, _), n)| format!("{w}: {n}"))
            .collect();
        t.sort();
        c.fail(format!(
            "records come from {} teachers: {}",
            tr.teachers.len(),
            t.join("; ")
        ));
    }
    let teacher = tr
        .teachers
        .keys()
        .next()
        .map(|(w, _)| w.clone())
        .unwrap_or_default();
    c.summary = format!(
        "{} record(s) traced to prompts; teacher weights sha256 {}",
        tr.records,
        if teacher.is_empty() {
            "-".into()
        } else {
            teacher
        }
    );
    if tr.with_correct > 0 {
        c.note(format!(
            "teacher accuracy on these items: {}/{} ({:.1}%)",
            tr.correct,
            tr.with_correct,
            100.0 * tr.correct as f64 / tr.with_correct as f64
        ));
    }
    if tr.records < tr.prompts.len() {
        c.note(format!(
            "{} of {} prompts distilled",
            tr.records,
            tr.prompts.len()
        ));
    }
}

/// A record's `answer` must be the most probable letter of its own `answer_probs` (null
/// together), and `correct` must be `answer == gold` (null when either is).
fn answer_agrees(r: &Value) -> Result<(), String> {
    let answer = r.get("answer").unwrap_or(&Value::Null);
    let probs = r.get("answer_probs").unwrap_or(&Value::Null);
    match (answer, probs) {
        (Value::Null, Value::Null) => {}
        (Value::String(a), Value::Object(m)) => {
            let p = |k: &str| m.get(k).and_then(Value::as_f64);
            let Some(pa) = p(a) else {
                return Err(format!("answer {a:?} is not one of answer_probs' letters"));
            };
            if let Some((k, pk)) = m
                .iter()
                .filter_map(|(k, v)| v.as_f64().map(|x| (k, x)))
                .find(|(_, x)| *x > pa)
            {
                return Err(format!(
                    "answer {a:?} (p {pa}) contradicts answer_probs: {k:?} has p {pk}"
                ));
            }
        }
        _ => return Err("answer and answer_probs disagree (one is null)".to_string()),
    }
    let gold = r.get("gold").and_then(Value::as_str);
    let want = match (answer.as_str(), gold) {
        (Some(a), Some(g)) => Value::Bool(a == g),
        _ => Value::Null,
    };
    let got = r.get("correct").unwrap_or(&Value::Null);
    if *got != want {
        return Err(format!(
            "correct is {got} but answer {answer} vs gold {} says {want}",
            gold.map_or("null".to_string(), |g| format!("{g:?}"))
        ));
    }
    Ok(())
}

/// What the part files beside a distilled output say.
#[derive(Default)]
struct PartsSeen {
    /// The run skipped prompts too long for the teacher (gaps are expected).
    skip_too_long: bool,
    /// A digest of each committed record, in prompt order (None: no parts to compare with).
    expected: Option<Vec<[u8; 32]>>,
    /// How many part files there are.
    files: usize,
}

/// A record's digest, independent of its keys' order (as `Value` equality is).
fn digest(v: &Value) -> [u8; 32] {
    use sha2::Digest;
    fn feed(h: &mut sha2::Sha256, v: &Value) {
        match v {
            Value::Object(m) => {
                let mut kv: Vec<_> = m.iter().collect();
                kv.sort_by(|a, b| a.0.cmp(b.0));
                h.update(b"{");
                for (k, x) in kv {
                    feed(h, &Value::String(k.clone()));
                    h.update(b":");
                    feed(h, x);
                }
                h.update(b"}");
            }
            Value::Array(a) => {
                h.update(b"[");
                for x in a {
                    feed(h, x);
                    h.update(b",");
                }
                h.update(b"]");
            }
            other => h.update(other.to_string().as_bytes()),
        }
    }
    let mut h = sha2::Sha256::new();
    feed(&mut h, v);
    h.finalize().into()
}

/// Where `OUT.parts/` exists, the records must be exactly the parts' committed records in
/// prompt order (what `distill`/`merge` finalised): their digests, kept for the streamed
/// comparison (one part file in memory at a time).
fn parts_of(path: &Path, c: &mut Check) -> PartsSeen {
    use crate::distill::output;
    let mut seen = PartsSeen::default();
    let Ok(files) = output::list_parts(&output::parts_dir(path)) else {
        return seen;
    };
    if files.is_empty() {
        return seen;
    }
    let mut by_index: std::collections::BTreeMap<usize, [u8; 32]> = Default::default();
    for f in &files {
        let part = match output::read_part(f) {
            Ok(p) => p,
            Err(e) => {
                c.fail(format!("{e:#}"));
                return seen;
            }
        };
        if part.header["fingerprint"]["skip_too_long"] == Value::Bool(true) {
            seen.skip_too_long = true;
        }
        for b in part.batches.values() {
            for (i, r) in b.index.iter().zip(&b.records) {
                if let Ok(v) = serde_json::from_str::<Value>(r) {
                    by_index.insert(*i, digest(&v));
                }
            }
        }
    }
    seen.files = files.len();
    seen.expected = Some(by_index.into_values().collect());
    seen
}

impl PartsSeen {
    /// The comparison's verdict: `records` read, the first that differs.
    fn report(&self, path: &Path, records: usize, first_diff: Option<usize>, c: &mut Check) {
        use crate::distill::output;
        let Some(expected) = &self.expected else {
            return;
        };
        if expected.len() != records {
            c.fail(format!(
                "{}: {} records, but its parts in {} commit {}",
                path.display(),
                records,
                output::parts_dir(path).display(),
                expected.len()
            ));
        } else if let Some(k) = first_diff {
            c.fail(format!(
                "{} record {k}: differs from the record its part files committed (edited after \
                 the run?)",
                path.display()
            ));
        } else {
            c.note(format!(
                "matches its {} part file(s) record for record",
                self.files
            ));
        }
    }
}
