//! `architecture.json`: a model's architecture as its files state it — the config.json fields
//! that fix it, the fields a conversion may change (as the model has them), and every tensor's
//! name, dtype and shape read from the safetensors headers (only the headers: no weight is
//! read). `fetch` writes one beside the lock for each `[[model]]`; `audit` compares a teacher
//! (or any checkpoint) with the base through the same [`ModelArchitecture`].

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The file name, beside the manifest's lock.
pub const ARCHITECTURE_FILE: &str = "architecture.json";

/// Fields a conversion to a masked-diffusion model may change (docs/model-chain.md).
pub const CONVERSION_FIELDS: &[&str] = &[
    "is_causal",
    "mask_token_id",
    "torch_dtype",
    "dtype",
    "pad_token_id",
    "logits_shift",
    "right_shift_logits",
    "use_cache",
];

/// Bookkeeping fields that say nothing about the model (who saved it, with which version).
pub const IGNORED_FIELDS: &[&str] = &["transformers_version", "_name_or_path"];

/// Largest config.json read.
const MAX_CONFIG: u64 = 16 << 20;

/// One tensor as its safetensors header describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorInfo {
    pub name: String,
    /// safetensors dtype (`BF16`, `F16`, `F32`, ...).
    pub dtype: String,
    pub shape: Vec<u64>,
    /// The file holding it (relative to the model directory).
    pub file: String,
}

/// One model's architecture (an entry of architecture.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelArchitecture {
    /// The `[[model]]` name (empty for a checkpoint directory).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub repo: String,
    #[serde(default)]
    pub revision: String,
    #[serde(default)]
    pub commit: String,
    pub config_sha256: String,
    /// Every config.json field except [`CONVERSION_FIELDS`] and [`IGNORED_FIELDS`].
    pub config: Map<String, Value>,
    /// The [`CONVERSION_FIELDS`] as this model has them (`null`: absent).
    pub conversion: Map<String, Value>,
    /// sha256 of tokenizer.json, when there is one.
    pub tokenizer_sha256: Option<String>,
    /// The weights digest `distill` records ([`super::checkpoint::weights_digest`]).
    pub weights_sha256: String,
    /// Sum of the tensors' element counts.
    pub parameters: u64,
    /// Sorted by name.
    pub tensors: Vec<TensorInfo>,
}

/// The file: every `[[model]]` fetched by the manifests of one directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchitectureFile {
    pub version: u32,
    pub models: Vec<ModelArchitecture>,
}

impl ArchitectureFile {
    pub fn load(path: &Path) -> Result<ArchitectureFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let f: ArchitectureFile =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if f.version != 1 {
            bail!("{}: unsupported version {}", path.display(), f.version);
        }
        Ok(f)
    }

    /// Replace (or add) `models` by name, keep the others, write atomically.
    pub fn update(path: &Path, models: Vec<ModelArchitecture>) -> Result<()> {
        // Read-modify-write: one writer (fetches of two manifests of one directory).
        let _lock = crate::lock::OutputLock::beside(path, "fetch (architecture.json)")?;
        let mut f = match ArchitectureFile::load(path) {
            Ok(f) => f,
            Err(_) => ArchitectureFile {
                version: 1,
                models: Vec::new(),
            },
        };
        f.models
            .retain(|m| !models.iter().any(|n| n.name == m.name));
        f.models.extend(models);
        f.models.sort_by(|a, b| a.name.cmp(&b.name));
        let mut text = serde_json::to_string_pretty(&f)?;
        text.push('\n');
        crate::util::write_if_changed(path, text.as_bytes()).map(|_| ())
    }

    pub fn model(&self, name: &str) -> Option<&ModelArchitecture> {
        self.models.iter().find(|m| m.name == name)
    }
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading {}", path.display()))?;
    if buf.len() as u64 > max {
        bail!("{}: larger than {} MiB", path.display(), max >> 20);
    }
    Ok(buf)
}

/// The tensors of one safetensors file, from its header alone, checked by the one header
/// reader ([`super::safetensors_header`]): shape × dtype equals each byte range, ranges
/// sorted, non-overlapping and inside the file.
pub fn safetensors_header(path: &Path, file: &str) -> Result<Vec<TensorInfo>> {
    let (_, entries) = super::safetensors_header::read(path)?;
    Ok(entries
        .into_iter()
        .map(|e| TensorInfo {
            name: e.name,
            dtype: e.dtype,
            shape: e.shape,
            file: file.to_string(),
        })
        .collect())
}

/// Sum of the tensors' element counts, checked: an overflow is an error, never a wrap.
pub fn parameter_count(tensors: &[TensorInfo]) -> Result<u64> {
    tensors.iter().try_fold(0u64, |sum, t| {
        t.shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| sum.checked_add(n))
            .with_context(|| format!("tensor `{}` {:?}: more than a u64 counts", t.name, t.shape))
    })
}

/// Split a config.json object into (architecture fields, conversion fields).
pub fn split_config(cfg: &Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let mut arch = Map::new();
    for (k, v) in cfg {
        if !CONVERSION_FIELDS.contains(&k.as_str()) && !IGNORED_FIELDS.contains(&k.as_str()) {
            arch.insert(k.clone(), v.clone());
        }
    }
    let conv = CONVERSION_FIELDS
        .iter()
        .map(|k| (k.to_string(), cfg.get(*k).cloned().unwrap_or(Value::Null)))
        .collect();
    (arch, conv)
}

impl ModelArchitecture {
    /// Read `dir` (a snapshot or checkpoint directory): config.json, tokenizer.json and the
    /// safetensors files (`model.safetensors`, else the shards the index names, else every
    /// `*.safetensors` at the top level).
    pub fn from_dir(dir: &Path) -> Result<ModelArchitecture> {
        let cfg_path = dir.join("config.json");
        let cfg_bytes = read_bounded(&cfg_path, MAX_CONFIG)?;
        let cfg: Map<String, Value> = serde_json::from_slice(&cfg_bytes)
            .with_context(|| format!("{}: not a JSON object", cfg_path.display()))?;
        let (config, conversion) = split_config(&cfg);
        let files = super::checkpoint::weight_files(dir)?;
        let mut tensors = Vec::new();
        let mut shas = BTreeMap::new();
        for f in &files {
            let p = dir.join(f);
            tensors.extend(safetensors_header(&p, f)?);
            shas.insert(f.clone(), crate::util::sha256_file(&p)?);
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        for w in tensors.windows(2) {
            if w[0].name == w[1].name {
                bail!(
                    "{}: tensor `{}` is stored in both {} and {}",
                    dir.display(),
                    w[0].name,
                    w[0].file,
                    w[1].file
                );
            }
        }
        let parameters = parameter_count(&tensors)
            .with_context(|| format!("{}: the parameter count", dir.display()))?;
        let tok = dir.join("tokenizer.json");
        Ok(ModelArchitecture {
            name: String::new(),
            repo: String::new(),
            revision: String::new(),
            commit: String::new(),
            config_sha256: crate::util::sha256_hex(&cfg_bytes),
            config,
            conversion,
            tokenizer_sha256: tok
                .is_file()
                .then(|| crate::util::sha256_file(&tok))
                .transpose()?,
            weights_sha256: super::checkpoint::weights_digest(&shas),
            parameters,
            tensors,
        })
    }
}

/// JSON values equal as a reader means them: numbers by value (`10000` = `10000.0`),
/// absent = `null`.
pub fn same_value(a: Option<&Value>, b: Option<&Value>) -> bool {
    let norm = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    match (norm(a), norm(b)) {
        (None, None) => true,
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| same_value(Some(p), Some(q)))
        }
        (Some(Value::Object(x)), Some(Value::Object(y))) => x
            .keys()
            .chain(y.keys())
            .all(|k| same_value(x.get(k), y.get(k))),
        (x, y) => x == y,
    }
}

/// How `other` differs from `base`: (breaking differences, allowed conversion changes).
pub fn compare(base: &ModelArchitecture, other: &ModelArchitecture) -> (Vec<String>, Vec<String>) {
    let mut broken = Vec::new();
    let mut allowed = Vec::new();
    let keys: std::collections::BTreeSet<&String> =
        base.config.keys().chain(other.config.keys()).collect();
    let show = |v: Option<&Value>| {
        v.filter(|v| !v.is_null())
            .map_or("absent".to_string(), |v| v.to_string())
    };
    for k in keys {
        let (a, b) = (base.config.get(k), other.config.get(k));
        if !same_value(a, b) {
            broken.push(format!(
                "config field `{k}`: base {}, this {}",
                show(a),
                show(b)
            ));
        }
    }
    for k in CONVERSION_FIELDS {
        let (a, b) = (base.conversion.get(*k), other.conversion.get(*k));
        if !same_value(a, b) {
            allowed.push(format!("{k}: {} → {}", show(a), show(b)));
        }
    }
    let theirs: BTreeMap<&str, &TensorInfo> =
        other.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let ours: BTreeMap<&str, &TensorInfo> =
        base.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut dtypes = std::collections::BTreeSet::new();
    for (n, t) in &ours {
        match theirs.get(n) {
            None => broken.push(format!("tensor `{n}` {:?} is missing", t.shape)),
            Some(o) if o.shape != t.shape => broken.push(format!(
                "tensor `{n}`: shape {:?}, the base's is {:?}",
                o.shape, t.shape
            )),
            Some(o) if o.dtype != t.dtype => {
                dtypes.insert(format!("{} → {}", t.dtype, o.dtype));
            }
            Some(_) => {}
        }
    }
    for n in theirs.keys().filter(|n| !ours.contains_key(*n)) {
        broken.push(format!("tensor `{n}` is not in the base"));
    }
    for d in dtypes {
        allowed.push(format!("tensor dtype {d}"));
    }
    (broken, allowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_compare_by_meaning() {
        assert!(same_value(Some(&json!(10000)), Some(&json!(10000.0))));
        assert!(same_value(None, Some(&Value::Null)));
        assert!(!same_value(Some(&json!(1)), None));
        assert!(same_value(
            Some(&json!({"a": 1, "b": null})),
            Some(&json!({"a": 1.0}))
        ));
        assert!(!same_value(Some(&json!([1, 2])), Some(&json!([1]))));
    }

    #[test]
    fn header_offsets_are_checked() {
        let (_d, p) = crate::testkit::temp_path("m.safetensors");
        let head = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut b = (head.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(head);
        b.extend_from_slice(&[0u8; 8]);
        std::fs::write(&p, &b).unwrap();
        let t = safetensors_header(&p, "m.safetensors").unwrap();
        assert_eq!(t[0].shape, vec![2]);
        b.truncate(b.len() - 1);
        std::fs::write(&p, &b).unwrap();
        let e = safetensors_header(&p, "m.safetensors").unwrap_err();
        assert!(format!("{e:#}").contains("outside"), "{e:#}");
    }
}
