//! Reads one fetched parquet file of sciq (`question, correct_answer, distractor1–3, support`)
//! or mmlu auxiliary_train (struct column `train{question, choices, answer, subject}`, or the
//! flat `all/auxiliary_train` layout) into [`McqItem`]s with provenance.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::DataType;

use super::item::{shuffle_options, McqItem};
use crate::provenance::Provenance;
use crate::sources::columns::{int_at, str_at, str_list_at};

/// The schema a file was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// allenai/sciq: the correct answer is its own column; placed by the seeded shuffle.
    Sciq,
    /// cais/mmlu auxiliary_train: one struct column `train`; options keep their order.
    MmluStruct,
    /// cais/mmlu `all/auxiliary_train-*`: flat `question, choices, answer`.
    MmluFlat,
}

/// A row that produced no item, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Skipped {
    /// The locked file (repo-relative path).
    pub file: String,
    /// Row of that file, 0-based.
    pub row: u64,
    pub reason: String,
}

/// Counts of rows read and skipped, per file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadStats {
    pub rows: u64,
    pub items: u64,
    /// Rows skipped for blank text: a blank question or correct answer, or fewer than two
    /// non-blank options.
    pub skipped_empty: u64,
    /// Rows skipped because question plus options exceed `--max-item-bytes`.
    pub skipped_oversize: u64,
    /// Items kept without their blank options (each lists them in `blank_options`).
    pub kept_without_blank: u64,
    /// Every skipped row with its reason, in row order.
    pub skipped: Vec<Skipped>,
}

fn detect(batch: &RecordBatch) -> Option<Layout> {
    let has = |n: &str| batch.schema().column_with_name(n).is_some();
    if has("correct_answer") && has("distractor1") && has("question") {
        return Some(Layout::Sciq);
    }
    if let Some((_, f)) = batch.schema().column_with_name("train") {
        if matches!(f.data_type(), DataType::Struct(_)) {
            return Some(Layout::MmluStruct);
        }
    }
    if has("question") && has("choices") && has("answer") {
        return Some(Layout::MmluFlat);
    }
    None
}

/// Where items come from: provenance template (row filled per item), id prefix, seed.
pub struct FileCtx<'a> {
    pub prov: Provenance,
    /// `{source}-{split}`; the item id appends the source-wide row number.
    pub id_prefix: &'a str,
    /// Rows of this source's earlier files, so ids are unique across a source's files.
    pub row_offset: u64,
    pub seed: u64,
    /// Largest question plus options, in UTF-8 bytes (`--max-item-bytes`).
    pub max_item_bytes: u64,
}

/// Read every row of `path` (a parquet file) into `out`.
pub fn read_file(path: &Path, ctx: &FileCtx, out: &mut Vec<McqItem>) -> Result<ReadStats> {
    use crate::shards::guarded;
    let reader = guarded::build(guarded::builder(path)?.with_batch_size(8192), path)?;
    let mut stats = ReadStats::default();
    let mut layout = None;
    for batch in reader {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                // Name the row: invalid UTF-8 is found by a raw scan of the string columns.
                if let Some((row, what)) =
                    crate::sources::parquet_batch::first_invalid_utf8_in(path, &[])
                {
                    bail!("{} row {row}: {what}", path.display());
                }
                return Err(e).with_context(|| format!("decoding {}", path.display()));
            }
        };
        let l = match layout {
            Some(l) => l,
            None => {
                let l = detect(&batch).ok_or_else(|| {
                    let cols: Vec<String> =
                        batch.schema().fields().iter().map(|f| f.name().clone()).collect();
                    anyhow!(
                        "{}: columns {cols:?} are neither sciq (question, correct_answer, distractor1-3) nor mmlu (train{{question, choices, answer}})",
                        path.display()
                    )
                })?;
                layout = Some(l);
                l
            }
        };
        let mut to = Items {
            path,
            ctx,
            stats: &mut stats,
            out,
        };
        read_batch(&batch, l, &mut to)?;
    }
    Ok(stats)
}

fn col<'b>(batch: &'b RecordBatch, name: &str, path: &Path) -> Result<&'b dyn Array> {
    batch
        .column_by_name(name)
        .map(|c| c.as_ref())
        .ok_or_else(|| anyhow!("{}: missing column {name:?}", path.display()))
}

/// Where a file's rows go: the items, the counts and skipped rows, and what names them.
struct Items<'a, 'c> {
    path: &'a Path,
    ctx: &'a FileCtx<'c>,
    stats: &'a mut ReadStats,
    out: &'a mut Vec<McqItem>,
}

/// One record batch of `layout` into items (rows counted, skipped rows named).
fn read_batch(batch: &RecordBatch, layout: Layout, to: &mut Items) -> Result<()> {
    match layout {
        Layout::Sciq => read_sciq(batch, to),
        Layout::MmluStruct | Layout::MmluFlat => read_mmlu(batch, layout, to),
    }
}

/// A string cell that must be there: the error names the file, row and column.
fn required(c: &dyn Array, i: usize, name: &str, row: u64, path: &Path) -> Result<String> {
    str_at(c, i).map(str::to_string).ok_or_else(|| {
        anyhow!(
            "{} row {row}: {name} is null or not a string",
            path.display()
        )
    })
}

/// Why an item is skipped for a blank part (None: nothing it needs is blank): the question,
/// then the correct option (`correct_name` names it), then fewer than two non-blank
/// `options` (the correct one included; `blank` names the blank ones).
fn blank_reason(
    question: &str,
    correct: &str,
    correct_name: impl FnOnce() -> String,
    options: usize,
    blank: &[String],
) -> Option<String> {
    if question.trim().is_empty() {
        Some("question is blank".to_string())
    } else if correct.trim().is_empty() {
        Some(format!("{} is blank", correct_name()))
    } else if options < 2 {
        Some(format!(
            "fewer than two non-blank options ({} blank)",
            blank.join(", ")
        ))
    } else {
        None
    }
}
/// sciq rows: question, correct_answer, distractor1–3 (blank distractors left out).
fn read_sciq(batch: &RecordBatch, to: &mut Items) -> Result<()> {
    let (path, ctx) = (to.path, to.ctx);
    let n = batch.num_rows();
    let req = |c: &dyn Array, i: usize, name: &str, row: u64| required(c, i, name, row, path);
    let q = col(batch, "question", path)?;
    let c = col(batch, "correct_answer", path)?;
    let d: Vec<&dyn Array> = ["distractor1", "distractor2", "distractor3"]
        .iter()
        .map(|name| col(batch, name, path))
        .collect::<Result<_>>()?;
    for i in 0..n {
        let row = to.stats.rows;
        to.stats.rows += 1;
        let question = req(q, i, "question", row)?;
        let correct = req(c, i, "correct_answer", row)?;
        let mut distractors = Vec::with_capacity(3);
        let mut blank = Vec::new();
        for (k, dc) in d.iter().enumerate() {
            let name = format!("distractor{}", k + 1);
            let v = req(*dc, i, &name, row)?;
            if v.trim().is_empty() {
                blank.push(name);
            } else {
                distractors.push(v.trim().to_string());
            }
        }
        let options = distractors.len() + 1;
        let why = blank_reason(
            &question,
            &correct,
            || "correct_answer".into(),
            options,
            &blank,
        );
        if let Some(reason) = why {
            skip(to, row, reason, false);
            continue;
        }
        let id = item_id(ctx, row);
        let (options, gold) =
            shuffle_options(ctx.seed, &id, correct.trim().to_string(), distractors);
        push(to, row, id, question, options, gold, blank)?;
    }
    Ok(())
}

/// mmlu rows, flat or under the `train` struct: question, choices, answer (blank choices left
/// out, the gold index following its option).
fn read_mmlu(batch: &RecordBatch, layout: Layout, to: &mut Items) -> Result<()> {
    let (path, ctx) = (to.path, to.ctx);
    let n = batch.num_rows();
    let req = |c: &dyn Array, i: usize, name: &str, row: u64| required(c, i, name, row, path);
    let (q, ch, a): (&dyn Array, &dyn Array, &dyn Array) = if layout == Layout::MmluStruct {
        let s = col(batch, "train", path)?.as_struct();
        let get = |name: &str| {
            s.column_by_name(name).map(|c| c.as_ref()).ok_or_else(|| {
                anyhow!(
                    "{}: struct column train has no field {name:?}",
                    path.display()
                )
            })
        };
        (get("question")?, get("choices")?, get("answer")?)
    } else {
        (
            col(batch, "question", path)?,
            col(batch, "choices", path)?,
            col(batch, "answer", path)?,
        )
    };
    let train_col = batch.column_by_name("train");
    for i in 0..n {
        let row = to.stats.rows;
        to.stats.rows += 1;
        if let Some(t) = train_col {
            if t.is_null(i) {
                bail!("{} row {row}: train is null", path.display());
            }
        }
        let question = req(q, i, "question", row)?;
        let options = str_list_at(ch, i).ok_or_else(|| {
            anyhow!(
                "{} row {row}: choices is null or not a list of strings",
                path.display()
            )
        })?;
        let answer = int_at(a, i).ok_or_else(|| {
            anyhow!(
                "{} row {row}: answer is null or not an integer",
                path.display()
            )
        })?;
        let gold = usize::try_from(answer).map_err(|_| {
            anyhow!(
                "{} row {row}: negative answer index {answer}",
                path.display()
            )
        })?;
        if gold >= options.len() {
            bail!(
                "{} row {row}: answer index {gold} out of range for {} choices",
                path.display(),
                options.len()
            );
        }
        // Blank choices are left out; the gold index follows its option.
        let blank: Vec<String> = (0..options.len())
            .filter(|&k| options[k].trim().is_empty())
            .map(|k| format!("choices[{k}]"))
            .collect();
        let kept: Vec<String> = options
            .iter()
            .filter(|o| !o.trim().is_empty())
            .map(|o| o.trim().to_string())
            .collect();
        let correct_name = || format!("the correct choice (choices[{gold}])");
        let why = blank_reason(&question, &options[gold], correct_name, kept.len(), &blank);
        if let Some(reason) = why {
            skip(to, row, reason, false);
            continue;
        }
        let gold = gold
            - options[..gold]
                .iter()
                .filter(|o| o.trim().is_empty())
                .count();
        let id = item_id(ctx, row);
        push(to, row, id, question, kept, gold, blank)?;
    }
    Ok(())
}

fn item_id(ctx: &FileCtx, row: u64) -> String {
    format!("{}-{:06}", ctx.id_prefix, ctx.row_offset + row)
}

/// Count and name a row that gives no item.
fn skip(to: &mut Items, row: u64, reason: String, oversize: bool) {
    let stats = &mut *to.stats;
    if oversize {
        stats.skipped_oversize += 1;
    } else {
        stats.skipped_empty += 1;
    }
    stats.skipped.push(Skipped {
        file: to.ctx.prov.file.clone(),
        row,
        reason,
    });
}

/// Add an item: text trimmed exactly as the template renders it (so prompts.jsonl's `options`
/// agree with the prompt), oversized items skipped and named.
fn push(
    to: &mut Items,
    row: u64,
    id: String,
    question: String,
    options: Vec<String>,
    gold: usize,
    blank_options: Vec<String>,
) -> Result<()> {
    let (ctx, path) = (to.ctx, to.path);
    let question = question.trim().to_string();
    let options: Vec<String> = options.iter().map(|o| o.trim().to_string()).collect();
    let bytes = question.len() as u64 + options.iter().map(|o| o.len() as u64).sum::<u64>();
    if bytes > ctx.max_item_bytes {
        let reason = format!(
            "question and options are {bytes} bytes, over --max-item-bytes {}",
            ctx.max_item_bytes
        );
        skip(to, row, reason, true);
        return Ok(());
    }
    let mut prov = ctx.prov.clone();
    prov.row = row;
    let what = format!("{} row {row}", path.display());
    let mut item = McqItem::new(id, prov, question, options, gold, &what)?;
    if !blank_options.is_empty() {
        to.stats.kept_without_blank += 1;
    }
    item.blank_options = blank_options;
    to.out.push(item);
    to.stats.items += 1;
    Ok(())
}
