//! Why: `decontam --shards s3://…` / `--prompts s3://…` scan a committed bucket output the
//! way `audit` reads it — copied into the URL's local read directory — and put the report
//! back on the bucket beside it (`OUT/decontam.json`, `<stem>.decontam.json`), where `audit`
//! of that bucket output finds it. The report names the URL, never the local copy.

use std::path::PathBuf;

use anyhow::Result;

use super::report;
use super::settings::{DecontamSettings, Scanned};
use crate::storage::materialize;
use crate::storage::store::Bucket;
use crate::storage::{Location, ObjectUrl};

/// The report to put back on the bucket after the scan.
pub struct ReportBack {
    bucket: Bucket,
    /// Its name under the bucket prefix.
    rel: String,
    local: PathBuf,
}

/// When the scanned output is a bucket URL: copy it (and its report, for the up-to-date
/// check) locally, point `st` at the copy, and return where the report goes back. With
/// `--report` given, the report is written there only.
pub fn localize(st: &mut DecontamSettings) -> Result<Option<ReportBack>> {
    let (flag, path) = match &st.scanned {
        Scanned::Shards(p) => ("--shards", p.clone()),
        Scanned::Prompts(p) => ("--prompts", p.clone()),
    };
    let url: ObjectUrl = match Location::of_path(&path, flag)? {
        Location::Local(p) => {
            // file:// is the local path.
            st.scanned = match st.scanned {
                Scanned::Shards(_) => Scanned::Shards(p),
                Scanned::Prompts(_) => Scanned::Prompts(p),
            };
            return Ok(None);
        }
        Location::Object(u) => u,
        Location::Hub(_) => {
            return Err(crate::error::usage(format!(
                "{flag}: an hf:// URL names a dataset file; decontam scans dlm-data outputs"
            )))
        }
    };
    let (local, local_report, bucket, rel) = match st.scanned {
        Scanned::Shards(_) => {
            // The copy brings decontam.json along when the bucket has one.
            let local = materialize::local_copy(&path, flag)?;
            let rel = crate::shards::outdir::DECONTAM_REPORT.to_string();
            let rep = local.join(&rel);
            (Scanned::Shards(local), rep, Bucket::open(&url)?, rel)
        }
        Scanned::Prompts(_) => {
            let local = materialize::local_file(&path, flag, &[])?;
            let rep = report::default_path(&local, false);
            let rel = rep
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            materialize::beside(&path, flag, &rel)?;
            let (parent, _) = crate::storage::file_output::split(&url, flag)?;
            (Scanned::Prompts(local), rep, Bucket::open(&parent)?, rel)
        }
    };
    st.scanned = local;
    st.scanned_shown = Some(url.to_string());
    if st.report_given {
        return Ok(None);
    }
    st.report = local_report.clone();
    Ok(Some(ReportBack {
        bucket,
        rel,
        local: local_report,
    }))
}

impl ReportBack {
    /// Put the report on the bucket (not when it holds these bytes already).
    pub fn send(self) -> Result<()> {
        crate::storage::mirror::put_file_if_changed(&self.bucket, &self.local, &self.rel)?;
        crate::progress::note(&format!(
            "{}: report written beside the scanned output",
            self.bucket.name(&self.rel)
        ));
        Ok(())
    }
}
