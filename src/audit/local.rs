//! Own files as links of the chain: a shard directory packed from `--input` files records
//! each file's absolute path, bytes and sha256 in index.json (`args.inputs`); the audit finds
//! every one still there at that size (and, with `--hash`, those bytes).

use super::report::Check;
use crate::shards::settings::InputFile;

/// The `repo` of provenance entries read from local files.
pub const REPO: &str = "local";

/// Check each recorded input of the index in `dir` (named `d` in messages).
pub fn check_inputs(c: &mut Check, d: &str, inputs: &[InputFile], hash: bool) {
    let before = c.problems.len();
    for f in inputs {
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
