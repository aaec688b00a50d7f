//! Why one path type: every place a command takes a path may be given a local path or an
//! object-store URL, and the difference is decided once, here, when the argument is read —
//! never by a later step guessing from a string. A local path (and `file:///ABS`) stays the
//! `PathBuf` it always was, so local runs behave exactly as before.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Result;

/// The object stores `object_store` serves for us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Amazon S3 and S3-compatible servers (`s3://BUCKET/PREFIX`).
    S3,
    /// Google Cloud Storage (`gs://BUCKET/PREFIX`).
    Gcs,
    /// Azure Blob Storage (`az://CONTAINER/PREFIX`).
    Azure,
}

impl Scheme {
    pub fn prefix(self) -> &'static str {
        match self {
            Scheme::S3 => "s3://",
            Scheme::Gcs => "gs://",
            Scheme::Azure => "az://",
        }
    }
}

/// `SCHEME://BUCKET/PREFIX`: a bucket (container) and a key prefix without leading or
/// trailing `/` (empty: the bucket's root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectUrl {
    pub scheme: Scheme,
    pub bucket: String,
    pub prefix: String,
}

impl ObjectUrl {
    /// The key of `rel` (a `/`-separated name relative to the prefix).
    pub fn key(&self, rel: &str) -> String {
        match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{}", self.prefix, rel),
        }
    }

    /// The URL of `rel` under this prefix (what messages name).
    pub fn child(&self, rel: &str) -> ObjectUrl {
        ObjectUrl {
            prefix: self.key(rel.trim_matches('/')),
            ..self.clone()
        }
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.scheme.prefix(), self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

/// `hf://datasets/OWNER/NAME@REVISION/PATH` (the revision is optional: `main` is resolved
/// and locked as `fetch` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubPath {
    pub repo: String,
    pub revision: Option<String>,
    pub path: String,
}

/// Where a command reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Object(ObjectUrl),
    Hub(HubPath),
}

/// The schemes accepted, for the refusal of any other.
pub const SUPPORTED: &str = "s3://, gs://, az://, file:// and hf://datasets/OWNER/NAME@REV/PATH";

/// `SCHEME` of `SCHEME://...`, when `text` has that shape (RFC 3986 scheme characters).
pub fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

impl Location {
    /// Parse a command-line value. `flag` names the argument in a refusal (exit 2).
    pub fn parse(text: &str, flag: &str) -> Result<Location> {
        let Some(scheme) = scheme_of(text) else {
            return Ok(Location::Local(PathBuf::from(text)));
        };
        let rest = &text[scheme.len() + 3..];
        match scheme.to_ascii_lowercase().as_str() {
            "s3" => object(Scheme::S3, rest, text, flag),
            "gs" => object(Scheme::Gcs, rest, text, flag),
            "az" => object(Scheme::Azure, rest, text, flag),
            "file" => {
                if !rest.starts_with('/') {
                    return Err(crate::error::usage(format!(
                        "{flag} {text}: a file:// URL names an absolute local path (file:///PATH); a host is not accepted"
                    )));
                }
                Ok(Location::Local(PathBuf::from(rest)))
            }
            "hf" => hub(rest, text, flag),
            _ => Err(crate::error::usage(format!(
                "{flag} {text}: the scheme {scheme}:// is not supported (supported: {SUPPORTED})"
            ))),
        }
    }

    /// [`Location::parse`] of a path argument as clap gave it (a non-UTF-8 path is local).
    pub fn of_path(p: &Path, flag: &str) -> Result<Location> {
        match p.to_str() {
            Some(s) => Location::parse(s, flag),
            None => Ok(Location::Local(p.to_path_buf())),
        }
    }
}

fn object(scheme: Scheme, rest: &str, text: &str, flag: &str) -> Result<Location> {
    if rest.contains(['?', '#']) {
        return Err(crate::error::usage(format!(
            "{flag}: an object URL takes no query string or fragment (credentials come from the environment, never from the URL): {}{}",
            scheme.prefix(),
            rest.split(['?', '#']).next().unwrap_or_default()
        )));
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_'));
    if !ok {
        return Err(crate::error::usage(format!(
            "{flag} {text}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '-', '.')"
        )));
    }
    let prefix = prefix.trim_matches('/');
    if prefix
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
        && !prefix.is_empty()
    {
        return Err(crate::error::usage(format!(
            "{flag} {text}: a key prefix has no empty, '.' or '..' component"
        )));
    }
    Ok(Location::Object(ObjectUrl {
        scheme,
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    }))
}

fn hub(rest: &str, text: &str, flag: &str) -> Result<Location> {
    let bad = || {
        crate::error::usage(format!(
            "{flag} {text}: an hf:// input is hf://datasets/OWNER/NAME[@REVISION]/PATH (models and buckets are not inputs)"
        ))
    };
    let rest = rest.strip_prefix("datasets/").ok_or_else(bad)?;
    let mut parts = rest.splitn(3, '/');
    let (owner, name, path) = (
        parts.next().ok_or_else(bad)?,
        parts.next().ok_or_else(bad)?,
        parts.next().unwrap_or(""),
    );
    let (name, revision) = match name.split_once('@') {
        Some((n, r)) if !r.is_empty() => (n, Some(r.to_string())),
        Some(_) => return Err(bad()),
        None => (name, None),
    };
    if owner.is_empty() || name.is_empty() || path.is_empty() || text.contains(['?', '#']) {
        return Err(bad());
    }
    Ok(Location::Hub(HubPath {
        repo: format!("{owner}/{name}"),
        revision,
        path: path.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(e: anyhow::Error) -> (i32, String) {
        (crate::error::exit_code(&e), e.to_string())
    }

    #[test]
    fn local_paths_are_untouched() {
        for p in [
            "shards/stage1",
            "/abs/x",
            "rel:colon",
            "-",
            "a//b",
            "./s3:/x",
        ] {
            assert_eq!(
                Location::parse(p, "--out").unwrap(),
                Location::Local(PathBuf::from(p))
            );
        }
        assert_eq!(
            Location::parse("file:///tmp/out", "--out").unwrap(),
            Location::Local(PathBuf::from("/tmp/out"))
        );
    }

    #[test]
    fn object_urls() {
        let Location::Object(u) = Location::parse("s3://my-bucket/a/b/", "--out").unwrap() else {
            panic!()
        };
        assert_eq!(
            (u.scheme, u.bucket.as_str(), u.prefix.as_str()),
            (Scheme::S3, "my-bucket", "a/b")
        );
        assert_eq!(u.to_string(), "s3://my-bucket/a/b");
        assert_eq!(u.key("index.json"), "a/b/index.json");
        assert_eq!(u.child("parts/x").to_string(), "s3://my-bucket/a/b/parts/x");
        let Location::Object(r) = Location::parse("gs://bkt", "--out").unwrap() else {
            panic!()
        };
        assert_eq!(
            (r.scheme, r.prefix.as_str(), r.key("x")),
            (Scheme::Gcs, "", "x".into())
        );
        assert!(matches!(
            Location::parse("az://container/p", "--out").unwrap(),
            Location::Object(ObjectUrl {
                scheme: Scheme::Azure,
                ..
            })
        ));
    }

    #[test]
    fn refusals_name_the_scheme_and_exit_2() {
        let (code, msg) = exit(Location::parse("ftp://host/x", "--out").unwrap_err());
        assert_eq!(code, 2);
        assert!(msg.contains("ftp://") && msg.contains("--out"), "{msg}");
        let (code, msg) =
            exit(Location::parse("s3://b-1/k?X-Amz-Signature=abc", "--input").unwrap_err());
        assert_eq!(code, 2);
        assert!(!msg.contains("X-Amz-Signature"), "{msg}");
        assert_eq!(exit(Location::parse("s3://B/x", "--out").unwrap_err()).0, 2);
        assert_eq!(
            exit(Location::parse("s3://bkt/a/../b", "--out").unwrap_err()).0,
            2
        );
        assert_eq!(
            exit(Location::parse("file://host/x", "--out").unwrap_err()).0,
            2
        );
        assert_eq!(
            exit(Location::parse("hf://models/o/n/x", "--input").unwrap_err()).0,
            2
        );
    }

    #[test]
    fn hub_paths() {
        assert_eq!(
            Location::parse("hf://datasets/o/n@abc123/data/*.parquet", "--input").unwrap(),
            Location::Hub(HubPath {
                repo: "o/n".into(),
                revision: Some("abc123".into()),
                path: "data/*.parquet".into()
            })
        );
        let Location::Hub(h) = Location::parse("hf://datasets/o/n/x.jsonl", "--input").unwrap()
        else {
            panic!()
        };
        assert_eq!(h.revision, None);
    }
}
