//! One distilled.json record (docs/formats/distilled-json.md), built from a prompt item, its
//! cut response and its MCQ answer.

use anyhow::Result;
use serde_json::{json, Map, Value};

use super::mcq::Answer;
use super::prompts::{PromptItem, PROVENANCE_FIELDS};

/// `--trajectory`'s fields of one record (docs/formats/distilled-json.md#trajectory).
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryFields<'a> {
    /// The ids fed to the teacher (chat template applied).
    pub prompt_ids: &'a [u32],
    /// One commit step per `response_ids` entry.
    pub commit_step: &'a [i64],
    /// The generated span after the response (its EOS/EoT and what follows): the token, or
    /// None where never decoded.
    pub tail_ids: Vec<Option<u32>>,
    /// Their commit steps (-1: never decoded).
    pub tail_commit_step: &'a [i64],
}

fn letters_map(v: &[(String, f64)]) -> Value {
    Value::Object(v.iter().map(|(k, p)| (k.clone(), json!(p))).collect())
}

/// The distilled.json record of one prompt (contract item 6, plus `stop`).
#[allow(clippy::too_many_arguments)]
pub fn record(
    item: &PromptItem,
    response: String,
    response_ids: &[u32],
    stopped: bool,
    answer: Option<&Answer>,
    gen: &Value,
    teacher: &Value,
    trajectory: Option<&TrajectoryFields>,
) -> Result<String> {
    let mut r = Map::new();
    r.insert("id".into(), json!(item.id));
    for (k, v) in PROVENANCE_FIELDS.iter().zip(&item.provenance) {
        r.insert((*k).into(), v.clone());
    }
    r.insert("prompt".into(), json!(item.prompt));
    if let Some(t) = trajectory {
        r.insert("prompt_ids".into(), json!(t.prompt_ids));
    }
    r.insert("response".into(), json!(response));
    r.insert("response_ids".into(), json!(response_ids));
    if let Some(t) = trajectory {
        anyhow::ensure!(
            t.commit_step.len() == response_ids.len()
                && t.tail_ids.len() == t.tail_commit_step.len(),
            "trajectory of {:?}: one commit step per position",
            item.id
        );
        r.insert("commit_step".into(), json!(t.commit_step));
        r.insert("tail_ids".into(), json!(t.tail_ids));
        r.insert("tail_commit_step".into(), json!(t.tail_commit_step));
    }
    r.insert("stop".into(), json!(if stopped { "eos" } else { "length" }));
    r.insert("answer".into(), json!(answer.map(|a| &a.letter)));
    r.insert(
        "answer_probs".into(),
        answer.map_or(Value::Null, |a| letters_map(&a.probs)),
    );
    r.insert(
        "answer_logprobs".into(),
        answer.map_or(Value::Null, |a| letters_map(&a.logprobs)),
    );
    r.insert("gold".into(), json!(item.gold));
    r.insert(
        "correct".into(),
        match (answer, &item.gold) {
            (Some(a), Some(g)) => json!(&a.letter == g),
            _ => Value::Null,
        },
    );
    r.insert("gen".into(), gen.clone());
    r.insert("teacher".into(), teacher.clone());
    Ok(serde_json::to_string(&Value::Object(r))?)
}
