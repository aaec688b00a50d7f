//! Why one expansion for every `--input`: a value is a local path, a bucket URL (`s3://`,
//! `gs://`, `az://`) or an `hf://datasets/…` file, each a file, a directory/prefix or a glob.
//! [`expand`] turns them, in the order given, into one list of [`InputItem`]s (a file named
//! twice is read once), and [`to_hash`] says how each one's sha256 — recorded in index.json's
//! `args.inputs`, part of the resume fingerprint — is computed: a local file's by reading it,
//! a bucket object's by one streamed GET, a Hub file's from its LFS sha256 (else read by
//! range).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;

use super::plan::InputItem;
use super::remote::Streaming;
use crate::shards::settings::InputFile;
use crate::sources::bucket::{self, Buckets};
use crate::sources::files::ToHash;
use crate::storage::Location;

/// Every `--input` value as files, in order (`hub`: the Hub client, when a value is hf://).
pub fn expand(inputs: &[Location], hub: Option<&Streaming>) -> Result<Vec<InputItem>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut buckets = Buckets::default();
    for given in inputs {
        let items: Vec<InputItem> = match given {
            Location::Local(p) => crate::sources::files::expand(std::slice::from_ref(p))?
                .into_iter()
                .map(InputItem::Local)
                .collect(),
            Location::Object(url) => bucket::expand(url, &mut buckets)?
                .into_iter()
                .map(|o| InputItem::Object(Arc::new(o)))
                .collect(),
            Location::Hub(h) => {
                let st = hub.ok_or_else(|| anyhow::anyhow!("hf:// input without a Hub client"))?;
                st.input_files(h)?
                    .into_iter()
                    .map(|s| InputItem::Hub(Arc::new(s)))
                    .collect()
            }
        };
        for it in items {
            let key = match &it {
                InputItem::Local(p) => std::fs::canonicalize(p)
                    .unwrap_or_else(|_| p.clone())
                    .to_string_lossy()
                    .into_owned(),
                other => other.name(),
            };
            if seen.insert(key) {
                out.push(it);
            }
        }
    }
    Ok(out)
}

/// How `item`'s size and sha256 are had (see the module doc).
pub fn to_hash(item: &InputItem, hub: Option<&Streaming>) -> ToHash {
    match item {
        InputItem::Local(p) => ToHash::File(p.clone()),
        InputItem::Object(o) => {
            let o = o.clone();
            ToHash::Remote(Box::new(move || o.hash()))
        }
        InputItem::Hub(spec) => {
            let spec = spec.clone();
            let name = item.name();
            let client = hub.map(|st| st.client.clone());
            ToHash::Remote(Box::new(move || {
                let sha256 = match (&spec.etag, &client) {
                    // An LFS file's oid is the sha256 of its bytes.
                    (Some(e), _) if e.len() == 64 => e.clone(),
                    (_, Some(c)) => super::remote::hash_hub_file(c.clone(), &spec, &name)?,
                    (_, None) => anyhow::bail!("{name}: no Hub client to read it with"),
                };
                Ok(InputFile {
                    path: name.clone(),
                    bytes: spec.size,
                    sha256,
                })
            }))
        }
    }
}

/// The local inputs among `inputs` (what the output may never be, or lie inside).
pub fn local_paths(inputs: &[Location]) -> Vec<&Path> {
    inputs
        .iter()
        .filter_map(|l| match l {
            Location::Local(p) => Some(p.as_path()),
            _ => None,
        })
        .collect()
}
