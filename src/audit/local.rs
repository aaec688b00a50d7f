//! Own files as links of the chain: a shard directory packed from `--input` files records
//! each file's absolute path (a bucket object's or Hub file's URL), bytes and sha256 in
//! index.json (`args.inputs`); the audit finds every one still there at that size (and, with
//! `--hash`, those bytes: a bucket object by one streamed GET). An `hf://` input is pinned
//! to its commit, whose files do not change: it is not fetched again.

use super::report::Check;
use crate::shards::settings::InputFile;

/// The `repo` of provenance entries read from local files.
pub const REPO: &str = "local";

/// Check each recorded input of the index in `dir` (named `d` in messages).
pub fn check_inputs(c: &mut Check, d: &str, inputs: &[InputFile], hash: bool) {
    let before = c.problems.len();
    for f in inputs {
        if crate::storage::location::scheme_of(&f.path).is_some() {
            check_url_input(c, d, f, hash);
            continue;
        }
        let p = std::path::Path::new(&f.path);
        match std::fs::metadata(p) {
            Err(e) => c.fail(format!(
                "{d}/index.json: input {}: {e} (the file it was packed from is gone)",
                f.path
            )),
            Ok(m) if m.len() != f.bytes => c.fail(format!(
                "{d}/index.json: input {} is {} bytes, packed from {} (re-run pack)",
                f.path,
                m.len(),
                f.bytes
            )),
            Ok(_) if hash => match crate::util::sha256_file(p) {
                Ok(h) if h == f.sha256 => {}
                Ok(h) => c.fail(format!(
                    "{d}/index.json: input {} has sha256 {h}, packed from {} (re-run pack)",
                    f.path, f.sha256
                )),
                Err(e) => c.fail(format!("{d}/index.json: input {}: {e:#}", f.path)),
            },
            Ok(_) => {}
        }
    }
    // One line per finding: the note says what held only when every file did (never a
    // "found at their recorded sizes" under a FAIL naming one of them).
    if c.problems.len() > before {
        return;
    }
    c.note(format!(
        "{d}: {} local input file(s) {}",
        inputs.len(),
        if hash {
            "re-hashed"
        } else {
            "found at their recorded sizes"
        }
    ));
}

/// A recorded URL input: a bucket object's size (and with `hash` its sha256) now; an
/// `hf://…@COMMIT/…` file as pinned.
fn check_url_input(c: &mut Check, d: &str, f: &InputFile, hash: bool) {
    use crate::storage::{Bucket, Location, ObjectUrl};
    let url = match Location::parse(&f.path, "input") {
        Ok(Location::Object(u)) => u,
        Ok(Location::Hub(_)) => return,
        _ => {
            return c.fail(format!(
                "{d}/index.json: input {} is not a path or URL this tool reads",
                f.path
            ))
        }
    };
    let now = (|| -> anyhow::Result<Option<(u64, Option<String>)>> {
        let root = ObjectUrl {
            prefix: String::new(),
            ..url.clone()
        };
        let b = Bucket::open(&root)?;
        let Some(m) = b.head(&url.prefix)? else {
            return Ok(None);
        };
        let sha = match hash {
            true => Some(b.sha256(&url.prefix, m.e_tag.as_deref())?.0),
            false => None,
        };
        Ok(Some((m.size, sha)))
    })();
    match now {
        Err(e) => c.fail(format!("{d}/index.json: input {}: {e:#}", f.path)),
        Ok(None) => c.fail(format!(
            "{d}/index.json: input {}: no such object (the object it was packed from is gone)",
            f.path
        )),
        Ok(Some((n, _))) if n != f.bytes => c.fail(format!(
            "{d}/index.json: input {} is {n} bytes, packed from {} (re-run pack)",
            f.path, f.bytes
        )),
        Ok(Some((_, Some(h)))) if h != f.sha256 => c.fail(format!(
            "{d}/index.json: input {} has sha256 {h}, packed from {} (re-run pack)",
            f.path, f.sha256
        )),
        Ok(_) => {}
    }
}
