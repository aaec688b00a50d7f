//! The stage-3 links: prompts.jsonl items come from locked sciq train / mmlu auxiliary_train
//! files; distilled records each match a prompt (id, provenance, prompt text, gold), follow the
//! prompts' order, and come from exactly one teacher (weights and config hashes).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::Value;

use super::context::Ctx;
use super::policy::Use;
use super::report::Check;
use crate::mcq::prompts::PromptRecord;

/// Is this locked training source one stage 3 may draw from?
fn mcq_origin(repo: &str, split: &str, config: &str) -> bool {
    match repo {
        "allenai/sciq" => split == "train",
        "cais/mmlu" => config == "auxiliary_train" || split == "auxiliary_train",
        _ => false,
    }
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
    let f = match crate::bounded::open_regular(path) {
        Ok(f) => f,
        Err(e) => {
            c.fail(format!("{}: {e}", path.display()));
            return (c, None);
        }
    };
    let mut recs = Vec::new();
    let mut ids = HashSet::new();
    let mut per_source: HashMap<String, u64> = HashMap::new();
    let bound = crate::bounded::Bound::new(
        crate::distill::prompts::MAX_LINE_BYTES,
        "a prompt line is at most that, as distill reads it",
    );
    for (i, line) in crate::bounded::BoundedLines::new(f, bound).enumerate() {
        let ln = i + 1;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                c.fail(format!("{} line {ln}: unreadable ({e})", path.display()));
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let r: PromptRecord = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                c.fail(format!(
                    "{} line {ln}: not a prompt record ({e})",
                    path.display()
                ));
                continue;
            }
        };
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

/// Every distilled record, through the one JSON record reader (streamed, each record
/// bounded; the records are kept together for the cross-checks below).
fn read_distilled(path: &Path) -> Result<Vec<Value>, String> {
    crate::model::lineage::read_records(path).map_err(|e| format!("{e:#}"))
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
    let recs = match read_distilled(path) {
        Ok(r) => r,
        Err(e) => {
            c.fail(e);
            return c;
        }
    };
    let parts = compare_with_parts(path, &recs, &mut c);
    let pos: HashMap<&str, usize> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.as_str(), i))
        .collect();
    let mut t = Traced {
        prompts,
        pos,
        skip_too_long: parts.skip_too_long,
        ..Default::default()
    };
    for (k, r) in recs.iter().enumerate() {
        let at = format!("{} record {k}", path.display());
        if let Some(u) = t.record(&mut c, at, r) {
            uses.push(u);
        }
    }
    t.summarise(&mut c, recs.len());
    c
}

/// The distilled records traced so far against the prompts.
#[derive(Default)]
struct Traced<'a> {
    prompts: &'a [PromptRecord],
    /// A prompt's position by id.
    pos: HashMap<&'a str, usize>,
    /// Gaps in the prompts are expected (the run skipped prompts too long for the teacher).
    skip_too_long: bool,
    /// Records per teacher (weights sha256, config sha256).
    teachers: HashMap<(String, String), u64>,
    /// The prompt position of the previous record.
    last: Option<usize>,
    seen: HashSet<String>,
    correct: u64,
    with_correct: u64,
}

impl Traced<'_> {
    /// Trace one record (`at` names it) to its prompt; the source it names, unless its id is
    /// no prompt's.
    fn record(&mut self, c: &mut Check, at: String, r: &Value) -> Option<Use> {
        let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let id = s("id");
        let Some(&p) = self.pos.get(id.as_str()) else {
            c.fail(format!("{at}: id {id:?} is not in the prompts"));
            return None;
        };
        if !self.seen.insert(id.clone()) {
            c.fail(format!("{at}: id {id:?} distilled twice"));
        }
        let diffs = differs_from_prompt(r, &self.prompts[p]);
        if !diffs.is_empty() {
            c.fail(format!(
                "{at} ({id}): {} differ from the prompt",
                diffs.join(", ")
            ));
        }
        self.in_order(c, &at, &id, p);
        let t = r.get("teacher");
        let w = t
            .and_then(|t| t.get("weights_sha256"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let cfg = t
            .and_then(|t| t.get("config_sha256"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if w.is_empty() {
            c.fail(format!("{at} ({id}): no teacher.weights_sha256"));
        }
        *self
            .teachers
            .entry((w.to_string(), cfg.to_string()))
            .or_default() += 1;
        if let Err(why) = answer_agrees(r) {
            c.fail(format!("{at} ({id}): {why}"));
        }
        if let Some(b) = r.get("correct").and_then(Value::as_bool) {
            self.with_correct += 1;
            self.correct += b as u64;
        }
        Some(Use {
            what: at,
            repo: s("repo"),
            commit: s("commit"),
            file: s("file"),
            split: None,
            role: None,
        })
    }

    /// The record of prompt `p` follows the previous record in prompt order, with no prompt
    /// missing between them: a lost record, unless the run skipped prompts too long for the
    /// teacher (its parts record --skip-too-long).
    fn in_order(&mut self, c: &mut Check, at: &str, id: &str, p: usize) {
        if let Some(l) = self.last {
            if p <= l {
                c.fail(format!("{at} ({id}): out of prompt order"));
            }
        }
        let skipped = self.last.map_or(p, |l: usize| p.saturating_sub(l + 1));
        if skipped > 0 && !self.skip_too_long {
            c.fail(format!(
                "{at} ({id}): {skipped} prompt(s) before it have no record (first: {:?})",
                self.prompts[self.last.map_or(0, |l| l + 1)].id
            ));
        }
        self.last = Some(p);
    }

    /// One teacher for all `n` records; the summary and the notes.
    fn summarise(&self, c: &mut Check, n: usize) {
        let teachers = &self.teachers;
        if teachers.len() > 1 {
            let mut t: Vec<_> = teachers
                .iter()
                .map(|((w, _), n)| format!("{w}: {n}"))
                .collect();
            t.sort();
            c.fail(format!(
                "records come from {} teachers: {}",
                teachers.len(),
                t.join("; ")
            ));
        }
        let teacher = teachers
            .keys()
            .next()
            .map(|(w, _)| w.clone())
            .unwrap_or_default();
        c.summary = format!(
            "{n} record(s) traced to prompts; teacher weights sha256 {}",
            if teacher.is_empty() {
                "-".into()
            } else {
                teacher
            }
        );
        let (correct, with_correct) = (self.correct, self.with_correct);
        if with_correct > 0 {
            c.note(format!(
                "teacher accuracy on these items: {correct}/{with_correct} ({:.1}%)",
                100.0 * correct as f64 / with_correct as f64
            ));
        }
        if n < self.prompts.len() {
            c.note(format!("{n} of {} prompts distilled", self.prompts.len()));
        }
    }
}

/// The fields of a distilled record that differ from its prompt's.
fn differs_from_prompt(r: &Value, pr: &PromptRecord) -> Vec<&'static str> {
    let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
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
    diffs
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
}

/// Where `OUT.parts/` exists, the records must be exactly the parts' committed records in
/// prompt order (what `distill`/`merge` finalised); a difference fails naming the record.
fn compare_with_parts(path: &Path, recs: &[Value], c: &mut Check) -> PartsSeen {
    use crate::distill::output;
    let mut seen = PartsSeen::default();
    let Ok(files) = output::list_parts(&output::parts_dir(path)) else {
        return seen;
    };
    if files.is_empty() {
        return seen;
    }
    let mut by_index: std::collections::BTreeMap<usize, String> = Default::default();
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
                by_index.insert(*i, r.clone());
            }
        }
    }
    let expected: Vec<Value> = by_index
        .values()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    if expected.len() != recs.len() {
        c.fail(format!(
            "{}: {} records, but its parts in {} commit {}",
            path.display(),
            recs.len(),
            output::parts_dir(path).display(),
            expected.len()
        ));
    } else if let Some(k) = (0..recs.len()).find(|&k| recs[k] != expected[k]) {
        c.fail(format!(
            "{} record {k}: differs from the record its part files committed (edited after \
             the run?)",
            path.display()
        ));
    } else {
        c.note(format!(
            "matches its {} part file(s) record for record",
            files.len()
        ));
    }
    seen
}
