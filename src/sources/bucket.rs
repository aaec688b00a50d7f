//! Why bucket inputs: users keep the data they pack in a bucket, on machines with no shared
//! filesystem. `pack --input s3://BUCKET/KEY` (`gs://`, `az://`) names one object, a prefix
//! (`s3://b/dir/`, or a key that is a "directory": every supported object under it, sorted by
//! key, by the rule of a local directory input) or a glob (`s3://b/dir/*.parquet`, `**`
//! crossing `/`). [`expand`] lists them once; each [`ObjectInput`] is then read in place by
//! range ([`super::ranged`]): a parquet object through its footer and projected column
//! chunks, every other format as bounded sequential ranges decompressed on the fly. Every
//! request names the version listed (`If-Match` on its ETag), so an object replaced
//! mid-run fails naming it instead of mixing two versions.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;
use futures::future::BoxFuture;

use super::files::{format_of_name, is_glob};
use super::ranged::{RangeSource, RangedFile, ReadCount};
use crate::manifest::Format;
use crate::shards::settings::InputFile;
use crate::storage::store::Listed;
use crate::storage::{Bucket, ObjectUrl};

/// One object to read: where it is, its size and version, and the bytes its reads used.
pub struct ObjectInput {
    pub bucket: Arc<Bucket>,
    /// The key (from the bucket's root).
    pub key: String,
    /// `SCHEME://BUCKET/KEY`: what index.json, errors and the summary name.
    pub url: String,
    pub size: u64,
    pub e_tag: Option<String>,
    pub count: Arc<ReadCount>,
}

impl std::fmt::Debug for ObjectInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectInput({}, {} bytes)", self.url, self.size)
    }
}

/// The buckets opened so far (one client and runtime per bucket).
#[derive(Default)]
pub struct Buckets(HashMap<String, Arc<Bucket>>);

impl Buckets {
    /// The bucket of `url` (its root), opened once.
    pub fn of(&mut self, url: &ObjectUrl) -> Result<Arc<Bucket>> {
        let root = ObjectUrl {
            prefix: String::new(),
            ..url.clone()
        };
        let k = root.to_string();
        if let Some(b) = self.0.get(&k) {
            return Ok(b.clone());
        }
        let b = Arc::new(Bucket::open(&root)?);
        self.0.insert(k, b.clone());
        Ok(b)
    }
}

fn unknown_format(url: &str) -> anyhow::Error {
    crate::error::usage(format!(
        "--input {url}: unknown format (expected .parquet, .json, .jsonl or .txt, optionally .gz or .zst)"
    ))
}

/// The objects `url` names (see the module doc), in order.
pub fn expand(url: &ObjectUrl, buckets: &mut Buckets) -> Result<Vec<ObjectInput>> {
    let bucket = buckets.of(url)?;
    let input = |o: Listed| ObjectInput {
        url: ObjectUrl {
            prefix: o.rel.clone(),
            ..url.clone()
        }
        .to_string(),
        bucket: bucket.clone(),
        key: o.rel,
        size: o.size,
        e_tag: o.e_tag,
        count: Arc::default(),
    };
    let hidden = |rel: &str, base: &str| {
        rel[base.len().min(rel.len())..]
            .split('/')
            .any(|c| c.starts_with('.'))
    };
    let pattern = url.prefix.as_str();
    if is_glob(pattern) {
        let base: Vec<&str> = pattern.split('/').take_while(|c| !is_glob(c)).collect();
        let base = base.join("/");
        let matcher = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| crate::error::usage(format!("--input {url}: bad glob: {e}")))?
            .compile_matcher();
        let mut v: Vec<Listed> = bucket
            .list_objects(&base)?
            .into_iter()
            .filter(|o| matcher.is_match(&o.rel) && !hidden(&o.rel, &base))
            .collect();
        v.sort_by(|a, b| a.rel.cmp(&b.rel));
        if v.is_empty() {
            bucket.check()?;
            return Err(crate::error::usage(format!(
                "--input {url}: the glob matches no object"
            )));
        }
        let v: Vec<ObjectInput> = v.into_iter().map(input).collect();
        for o in &v {
            format_of_name(Path::new(&o.key)).ok_or_else(|| unknown_format(&o.url))?;
        }
        return Ok(v);
    }
    if !pattern.is_empty() {
        if let Some(m) = bucket.head(pattern)? {
            format_of_name(Path::new(pattern)).ok_or_else(|| unknown_format(&url.to_string()))?;
            return Ok(vec![input(Listed {
                rel: pattern.to_string(),
                size: m.size,
                e_tag: m.e_tag,
            })]);
        }
    }
    let mut v: Vec<Listed> = bucket
        .list_objects(pattern)?
        .into_iter()
        .filter(|o| !hidden(&o.rel, pattern) && format_of_name(Path::new(&o.rel)).is_some())
        .collect();
    // As a local directory: `.txt` notes beside structured data stay out; `.txt` files alone
    // are a text corpus.
    let text = |o: &Listed| format_of_name(Path::new(&o.rel)) == Some(Format::Text);
    if v.iter().any(|o| !text(o)) {
        v.retain(|o| !text(o));
    }
    v.sort_by(|a, b| a.rel.cmp(&b.rel));
    if v.is_empty() {
        bucket.check()?;
        return Err(crate::error::usage(format!(
            "--input {url}: no such object, and no .parquet, .json, .jsonl or .txt object (or .gz/.zst form) under it"
        )));
    }
    Ok(v.into_iter().map(input).collect())
}

/// The object read by range with `If-Match` on the version listed.
struct ObjectSource {
    bucket: Arc<Bucket>,
    key: String,
    e_tag: Option<String>,
}

impl RangeSource for ObjectSource {
    fn fetch(&self, start: u64, end: u64) -> BoxFuture<'_, Result<Bytes>> {
        Box::pin(
            self.bucket
                .read_range(&self.key, start..end, self.e_tag.as_deref()),
        )
    }
}

impl ObjectInput {
    /// The object as a ranged file counted in [`ObjectInput::count`].
    pub fn file(&self) -> RangedFile {
        let src = ObjectSource {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            e_tag: self.e_tag.clone(),
        };
        RangedFile::new(Arc::new(src), self.size, self.count.clone())
    }

    /// Its URL, size and sha256 (index.json's `args.inputs`): one streamed GET of the
    /// version listed, as a local input's sha256 reads the whole file.
    pub fn hash(&self) -> Result<InputFile> {
        let (sha256, n) = self.bucket.sha256(&self.key, self.e_tag.as_deref())?;
        if n != self.size {
            anyhow::bail!(
                "GET {}: {n} bytes read, {} listed: the object changed while it was read",
                self.url,
                self.size
            );
        }
        Ok(InputFile {
            path: self.url.clone(),
            bytes: n,
            sha256,
        })
    }
}
