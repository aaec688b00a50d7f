//! The audit report: one entry per link of the chain with a status, a one-line summary, the
//! problems that break it (each naming the file, row or record) and notes for the reader.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The link holds.
    Pass,
    /// The link is broken: exit 1.
    Fail,
    /// Something an auditor should look at that does not break the chain (e.g. decontam not run).
    Warn,
    /// Nothing to check (e.g. no --distilled given).
    Skip,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Stable name: `base-pinned`, `teacher-architecture`, `teacher-weights`, `checkpoints`,
    /// `shipped-model`, `manifest-pinned`, `download-log`, `cache`, `split-policy`,
    /// `eval-reference-isolation`, `shards`, `prompts`, `distilled`, `decontam`.
    pub check: String,
    pub status: Status,
    pub summary: String,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

impl Check {
    pub fn new(name: &str) -> Check {
        Check {
            check: name.into(),
            status: Status::Pass,
            summary: String::new(),
            problems: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn fail(&mut self, problem: impl Into<String>) {
        self.status = Status::Fail;
        self.problems.push(problem.into());
    }

    pub fn warn(&mut self, note: impl Into<String>) {
        if self.status == Status::Pass || self.status == Status::Skip {
            self.status = Status::Warn;
        }
        self.notes.push(note.into());
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Re-hash `p`: a sha256 other than `want` fails with `mismatch(actual)`; an unreadable
    /// file fails naming it.
    pub fn sha256_matches(
        &mut self,
        p: &std::path::Path,
        want: &str,
        mismatch: impl FnOnce(&str) -> String,
    ) {
        match crate::util::sha256_file(p) {
            Ok(h) if h == want => {}
            Ok(h) => self.fail(mismatch(&h)),
            Err(e) => self.fail(format!("{}: {e:#}", p.display())),
        }
    }

    /// A check that looked at `n` things: with none (and nothing found), `SKIP` saying `why`,
    /// never a `PASS` that checked nothing.
    pub fn checked(mut self, n: usize, why: &str) -> Check {
        if n == 0 && self.problems.is_empty() && self.status == Status::Pass {
            self.status = Status::Skip;
            self.summary = why.into();
        }
        self
    }

    pub fn skip(name: &str, why: &str) -> Check {
        let mut c = Check::new(name);
        c.status = Status::Skip;
        c.summary = why.into();
        c
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    pub ok: bool,
    pub tool: String,
    pub time: String,
    pub manifests: Vec<String>,
    /// The model chain, base first (`repo@commit`, each training stage, the shipped model);
    /// empty when no model is in scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    pub checks: Vec<Check>,
}

impl AuditReport {
    pub fn failed(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.check.as_str())
            .collect()
    }
}

const MAX_LISTED: usize = 20;

/// The report as an auditor would write it.
pub fn human(r: &AuditReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Provenance audit — {} — {}\nmanifest(s): {}\n\n",
        r.tool,
        r.time,
        r.manifests.join(", ")
    ));
    if !r.chain.is_empty() {
        s.push_str("chain:\n");
        for (i, link) in r.chain.iter().enumerate() {
            s.push_str(&format!("  {}{link}\n", if i == 0 { "" } else { "→ " }));
        }
        s.push('\n');
    }
    for c in &r.checks {
        let tag = match c.status {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Warn => "WARN",
            Status::Skip => "SKIP",
        };
        s.push_str(&format!("[{tag}] {:<26} {}\n", c.check, c.summary));
        for p in c.problems.iter().take(MAX_LISTED) {
            s.push_str(&format!("       ✗ {p}\n"));
        }
        if c.problems.len() > MAX_LISTED {
            s.push_str(&format!(
                "       … and {} more\n",
                c.problems.len() - MAX_LISTED
            ));
        }
        for n in c.notes.iter().take(MAX_LISTED) {
            s.push_str(&format!("       · {n}\n"));
        }
    }
    let failed = r.failed();
    s.push('\n');
    if failed.is_empty() {
        s.push_str("VERDICT: every link holds.\n");
    } else {
        s.push_str(&format!("VERDICT: BROKEN — {}\n", failed.join(", ")));
    }
    s
}
