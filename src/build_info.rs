//! Why this exists: every output must name the tool build that wrote it (issue 59) — its
//! version, the git commit it was built from (build.rs: `DLM_BUILD_COMMIT`, else `git
//! rev-parse HEAD`, else `unknown`) and its cargo features — and `dlm-data --version` prints
//! the same. [`ToolBuild`] is that record, as index.json, distilled.json's `gen` and
//! lineage.json carry it under `tool_build`. It is provenance, not a setting: resume, merge and
//! audit never compare it (a newer build resumes an older build's parts).

use serde::{Deserialize, Serialize};

/// The crate version (`CARGO_PKG_VERSION`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit this binary was built from: 40 lowercase hex digits, or `unknown`.
pub const COMMIT: &str = env!("DLM_BUILD_COMMIT");
/// Cargo features compiled in, comma-separated (`cuda`), empty for none.
const FEATURES: &str = env!("DLM_BUILD_FEATURES");

/// `--version`'s text after the program name: `0.1.0 (commit 0123…, features: cuda)`
/// (`features: none` without any).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("DLM_BUILD_COMMIT"),
    ", features: ",
    env!("DLM_BUILD_FEATURES_SHOWN"),
    ")"
);

/// The tool build that wrote an output (`tool_build` in index.json, lineage.json and each
/// distilled.json record's `gen`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolBuild {
    pub version: String,
    /// The git commit (40 hex digits) or `unknown`.
    pub commit: String,
    /// Cargo features, e.g. `["cuda"]`.
    pub features: Vec<String>,
}

impl ToolBuild {
    /// This binary's build.
    pub fn current() -> ToolBuild {
        ToolBuild {
            version: VERSION.to_string(),
            commit: COMMIT.to_string(),
            features: features(),
        }
    }
}

/// The features compiled in, as a list.
pub fn features() -> Vec<String> {
    FEATURES
        .split(',')
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_names_a_commit_and_the_compiled_features() {
        let b = ToolBuild::current();
        assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
        assert!(
            b.commit == "unknown"
                || (b.commit.len() == 40 && b.commit.bytes().all(|c| c.is_ascii_hexdigit())),
            "{}",
            b.commit
        );
        assert_eq!(
            b.features.contains(&"cuda".to_string()),
            cfg!(feature = "cuda")
        );
        assert!(LONG_VERSION.contains(&b.commit));
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.starts_with(r#"{"version":""#), "{json}");
        assert_eq!(serde_json::from_str::<ToolBuild>(&json).unwrap(), b);
    }
}
