//! The Hugging Face Hub HTTP client: revision → commit, paginated tree listing, resolve with
//! the CDN redirect handled by hand.
//!
//! Written over reqwest (rustls) rather than the `hf-hub` crate: hf-hub 1.0 has no resume of
//! partial downloads (`.incomplete` files are truncated), follows the CDN redirect for file
//! metadata and so loses `X-Repo-Commit`/`X-Linked-*` (upstream issue #208), dropped all
//! environment reading (`HF_ENDPOINT`, `HF_TOKEN`, `HF_HOME`) in 1.1, and pulls the heavy
//! `hf-xet` stack. Here automatic redirects are off: metadata is read from the first Hub
//! response, relative redirects (renamed repos) are followed on the Hub host with the token,
//! and the absolute CDN `Location` is fetched **without** the `Authorization` header.
//! The token is never logged, formatted or written anywhere, and is registered with
//! [`crate::secret`] so that a server echoing it back cannot make us print it either.
//!
//! A hostile or broken server is bounded everywhere: every JSON/API body is read up to
//! [`MAX_API_BODY`] (error naming the URL), a listing has at most [`MAX_PAGES`] pages, never
//! fetches one page twice (a `Link: rel="next"` loop is an error), and every listed file must
//! carry a sha1 `oid` / sha256 `lfs.oid` hex digest, the only names blobs and locks get.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, LOCATION, RANGE};
use reqwest::{Response, StatusCode};
use serde::Deserialize;

use super::names::{check_repo_path, clip, shown, RepoKind};
use super::retry::{
    as_transient, net_error, retryable_status, server_wait, transient, wait_header, RetryPolicy,
    Transient,
};
use super::stall::{RateGuard, StallPolicy};
use crate::digest::{HexDigest, SHA1_HEX, SHA256_HEX};

/// Largest JSON/API answer read into memory (a revision's siblings, one tree page).
pub const MAX_API_BODY: usize = 64 << 20;
/// Most pages of one tree listing.
pub const MAX_PAGES: usize = 10_000;
/// Most bytes of all pages of one tree listing together.
pub const MAX_LISTING_BYTES: usize = 1 << 30;
/// Most bytes of an error answer read for its message.
const MAX_ERROR_BODY: usize = 64 << 10;
/// Longest time one API request (headers and body) may take.
const API_TIMEOUT: Duration = Duration::from_secs(600);

/// Characters kept verbatim in an encoded path segment or revision.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A Hub token. `Debug`/`Display` never show it.
#[derive(Clone)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A token, registered with [`crate::secret`] so no output can carry it.
    pub fn new(t: String) -> Token {
        crate::secret::register(&t);
        Token(t)
    }

    /// `HF_TOKEN` (or legacy `HUGGING_FACE_HUB_TOKEN`), else the file `HF_TOKEN_PATH`, else
    /// `$HF_HOME/token` (default `~/.cache/huggingface/token`), as huggingface_hub does.
    pub fn from_env() -> Option<Token> {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    pub fn from_env_with(env: impl Fn(&str) -> Option<String>) -> Option<Token> {
        for k in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
            if let Some(t) = env(k)
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
            {
                return Some(Token::new(t));
            }
        }
        let path = env("HF_TOKEN_PATH")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                let home = env("HF_HOME").map(std::path::PathBuf::from).or_else(|| {
                    env("XDG_CACHE_HOME")
                        .map(|x| std::path::PathBuf::from(x).join("huggingface"))
                        .or_else(|| {
                            env("HOME").map(|h| {
                                std::path::PathBuf::from(h)
                                    .join(".cache")
                                    .join("huggingface")
                            })
                        })
                })?;
                Some(home.join("token"))
            })?;
        let t = std::fs::read_to_string(path).ok()?;
        let t = t.trim();
        (!t.is_empty()).then(|| Token::new(t.to_string()))
    }

    fn header(&self) -> Option<HeaderValue> {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.0)).ok()?;
        v.set_sensitive(true);
        Some(v)
    }
}

/// One entry of a tree listing.
#[derive(Debug, Clone, Deserialize)]
pub struct TreeEntry {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub oid: String,
    #[serde(default)]
    pub size: u64,
    pub path: String,
    #[serde(default)]
    pub lfs: Option<LfsInfo>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LfsInfo {
    pub oid: String,
    pub size: u64,
    #[serde(rename = "pointerSize", default)]
    pub pointer_size: Option<u64>,
}

/// File metadata from the first Hub response of a resolve.
#[derive(Debug, Clone, Default)]
pub struct FileMeta {
    pub commit: Option<String>,
    /// `X-Linked-Etag` (sha256 of an LFS file), else `ETag` (git blob sha1).
    pub etag: Option<String>,
    /// `X-Linked-Size` of an LFS file.
    pub size: Option<u64>,
}

/// The Hub client, speaking for one repo kind (datasets unless [`HubClient::with_kind`]).
#[derive(Debug)]
pub struct HubClient {
    http: reqwest::Client,
    endpoint: String,
    token: Option<Token>,
    pub retry: RetryPolicy,
    kind: RepoKind,
    /// What counts as a stalled transfer ([`super::stall`]).
    pub stall: StallPolicy,
}

/// The commit sha of a `/api/datasets/{id}/revision/{rev}` answer (`what` names the request):
/// its `sha` field, 40 hex digits, lowercased. Bad JSON is transient (a truncated answer).
pub fn parse_revision(what: &str, body: &[u8]) -> Result<String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| transient(format!("{what}: bad JSON: {e}")))?;
    let sha = v["sha"]
        .as_str()
        .ok_or_else(|| anyhow!("{what}: answer has no `sha`"))?;
    match HexDigest::parse(sha, SHA1_HEX) {
        Some(d) => Ok(d.into_string()),
        None => bail!("{what}: `sha` {} is not a 40-hex commit", shown(sha)),
    }
}

/// A listed file's digests, read by the one digest rule: `oid` a git sha1 (40 hex), `lfs.oid`
/// a sha256 (64 hex), any case, held lowercase from here on (they name blobs and locks in the
/// cache). Anything else refuses the listing.
pub fn read_entry_digests(e: &mut TreeEntry) -> Result<()> {
    e.oid = listed_digest(&e.path, "oid", &e.oid, SHA1_HEX, "a git sha1")?;
    if let Some(l) = &mut e.lfs {
        l.oid = listed_digest(&e.path, "lfs.oid", &l.oid, SHA256_HEX, "a sha256")?;
    }
    Ok(())
}

/// `value` (field `field` of file `path`'s listing entry) as `len` hex digits, lowercased.
fn listed_digest(path: &str, field: &str, value: &str, len: usize, kind: &str) -> Result<String> {
    match HexDigest::parse(value, len) {
        Some(d) => Ok(d.into_string()),
        None => bail!(
            "file {}: field `{field}` {} is not {kind} ({len} hex digits): refusing the listing",
            shown(path),
            shown(value)
        ),
    }
}

/// Up to `limit` bytes of a body; `None` when it is longer (reading stops there).
async fn body_upto(what: &str, resp: Response, limit: usize) -> Result<Option<bytes::Bytes>> {
    body_upto_with(what, resp, limit, StallPolicy::default()).await
}

/// [`body_upto`], a body slower than `stall` allows being a (transient) stall.
async fn body_upto_with(
    what: &str,
    resp: Response,
    limit: usize,
    stall: StallPolicy,
) -> Result<Option<bytes::Bytes>> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut buf = bytes::BytesMut::new();
    let mut guard = RateGuard::new(stall, what);
    let mut body = resp.bytes_stream();
    while let Some(c) = guard.next(&mut body).await? {
        if buf.len() + c.len() > limit {
            return Ok(None);
        }
        buf.extend_from_slice(&c);
    }
    Ok(Some(buf.freeze()))
}

/// A JSON/API body of at most `limit` bytes; a longer one is refused naming the URL.
pub async fn api_body(what: &str, url: &str, resp: Response, limit: usize) -> Result<bytes::Bytes> {
    body_upto(what, resp, limit).await?.ok_or_else(|| {
        anyhow!(
            "{what}: the answer from {} is longer than {limit} bytes (bounded read): refusing it",
            shown(url)
        )
    })
}

impl HubClient {
    /// `HF_ENDPOINT` (default https://huggingface.co) and the token from the environment.
    pub fn from_env(retry: RetryPolicy) -> Result<HubClient> {
        let endpoint =
            std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
        Self::new(&endpoint, Token::from_env(), retry)
    }

    pub fn new(endpoint: &str, token: Option<Token>, retry: RetryPolicy) -> Result<HubClient> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("dlm-data/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(64)
            .no_gzip()
            .build()
            .context("building the HTTP client")?;
        Ok(HubClient {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token,
            retry,
            kind: RepoKind::Dataset,
            stall: StallPolicy::default(),
        })
    }

    /// The same client (connections, token, retries) for repos of `kind`.
    pub fn with_kind(&self, kind: RepoKind) -> HubClient {
        HubClient {
            http: self.http.clone(),
            endpoint: self.endpoint.clone(),
            token: self.token.clone(),
            retry: self.retry,
            kind,
            stall: self.stall,
        }
    }

    pub fn kind(&self) -> RepoKind {
        self.kind
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn enc(s: &str) -> String {
        utf8_percent_encode(s, SEGMENT).to_string()
    }

    fn enc_path(p: &str) -> String {
        p.split('/').map(Self::enc).collect::<Vec<_>>().join("/")
    }

    /// `{E}/datasets/{repo}/resolve/{rev}/{path}` (models: `{E}/{repo}/resolve/...`), what the
    /// download log records.
    pub fn resolve_url(&self, repo: &str, rev: &str, path: &str) -> String {
        format!(
            "{}/{}{}/resolve/{}/{}",
            self.endpoint,
            self.kind.url_prefix(),
            repo,
            Self::enc(rev),
            Self::enc_path(path)
        )
    }

    fn hub_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = self.token.as_ref().and_then(Token::header) {
            h.insert(AUTHORIZATION, v);
        }
        h
    }

    /// GET a Hub API URL with retries; returns a success response or a clear error.
    async fn api_get(&self, what: &str, url: &str) -> Result<Response> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let r = self
                .http
                .get(url)
                .headers(self.hub_headers())
                .timeout(API_TIMEOUT)
                .send()
                .await;
            let err = match r {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) if retryable_status(resp.status().as_u16()) => {
                    retryable_error(what, &resp)
                }
                Ok(resp) => return Err(status_error(what, resp).await),
                Err(e) => net_error(what, e),
            };
            self.backoff_or_fail(attempt, err).await?;
        }
    }

    /// Sleep before the next attempt, or return the error once the budget is spent.
    pub async fn backoff_or_fail(&self, attempt: u32, err: anyhow::Error) -> Result<()> {
        let Some(t) = as_transient(&err) else {
            return Err(err);
        };
        if attempt > self.retry.retries {
            let capped = match t.wait {
                Some(w) if w > self.retry.max => format!(
                    "; the server asked to wait longer than the {:?} cap on one wait",
                    self.retry.max
                ),
                _ => String::new(),
            };
            return Err(err.context(format!(
                "giving up after {attempt} attempts (retry budget {} spent{capped})",
                self.retry.retries
            )));
        }
        let d = self.retry.delay(attempt, t.wait);
        tracing::debug!("retry {attempt} in {d:?}: {err:#}");
        tokio::time::sleep(d).await;
        Ok(())
    }

    /// `ENDPOINT/api/{datasets|models}/REPO/ROUTE/REV`, the revision percent-encoded.
    fn api_url(&self, repo: &str, route: &str, rev: &str) -> String {
        format!(
            "{}/api/{}/{repo}/{route}/{}",
            self.endpoint,
            self.kind.api_plural(),
            Self::enc(rev)
        )
    }

    /// Resolve a revision (branch, tag or sha) to its commit sha.
    pub async fn commit_of(&self, repo: &str, rev: &str) -> Result<String> {
        let url = self.api_url(repo, "revision", rev);
        let what = format!("revision {rev} of {repo}");
        let resp = self.api_get(&what, &url).await?;
        let body = api_body(&what, &url, resp, MAX_API_BODY).await?;
        parse_revision(&what, &body)
    }

    /// Every file of the repo at `commit` (recursive tree, all pages). Any absolute or `..`
    /// path, or a file without hex digests, fails the whole listing; so do more than
    /// [`MAX_PAGES`] pages, more than [`MAX_LISTING_BYTES`] in all, or a page linked twice.
    pub async fn list_files(&self, repo: &str, commit: &str) -> Result<Vec<TreeEntry>> {
        let mut url = Some(format!(
            "{}?recursive=true&expand=false",
            self.api_url(repo, "tree", commit)
        ));
        let what = format!("listing {repo}@{commit}");
        let mut out = Vec::new();
        let mut visited: HashSet<String> = HashSet::new();
        let mut total = 0usize;
        while let Some(u) = url.take() {
            if visited.len() >= MAX_PAGES {
                bail!(
                    "{what}: more than {MAX_PAGES} pages (next page {}): refusing the listing",
                    shown(&u)
                );
            }
            if !visited.insert(u.clone()) {
                bail!(
                    "{what}: pagination loops: the `Link: rel=\"next\"` header of page {} points back to {}, which was already fetched",
                    visited.len(),
                    shown(&u)
                );
            }
            let resp = self.api_get(&what, &u).await?;
            url = next_link(resp.headers());
            if let Some(n) = &url {
                if !same_origin(n, &self.endpoint) {
                    bail!("{what}: pagination link leaves the Hub endpoint");
                }
            }
            let body = api_body(&what, &u, resp, MAX_API_BODY).await?;
            total += body.len();
            if total > MAX_LISTING_BYTES {
                bail!(
                    "{what}: the tree pages add up to more than {MAX_LISTING_BYTES} bytes (page {} at {}): refusing the listing",
                    visited.len(),
                    shown(&u)
                );
            }
            let page: Vec<TreeEntry> =
                serde_json::from_slice(&body).map_err(|e| anyhow!("{what}: bad tree page: {e}"))?;
            for mut e in page {
                check_repo_path(&e.path).with_context(|| what.clone())?;
                if crate::secret::contains_secret(&e.path) {
                    bail!("{what}: a listed path contains the Hub token (the server echoes secrets): refusing the listing");
                }
                if e.kind == "file" {
                    read_entry_digests(&mut e).with_context(|| what.clone())?;
                    out.push(e);
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        dedup_listing(&what, out)
    }

    /// GET a file. `Ok` is the response that carries the bytes (Hub for regular files, CDN for
    /// LFS) plus the metadata of the first Hub response. Errors are [`Transient`] when
    /// worth retrying.
    pub async fn resolve(
        &self,
        repo: &str,
        commit: &str,
        path: &str,
        range: Option<(u64, Option<u64>)>,
    ) -> Result<(Response, FileMeta)> {
        let what = format!("{repo}@{commit}/{path}");
        let mut url = self.resolve_url(repo, commit, path);
        let range_h = range.map(|(a, b)| match b {
            Some(b) => format!("bytes={a}-{b}"),
            None => format!("bytes={a}-"),
        });
        for _ in 0..5 {
            let mut req = self.http.get(&url).headers(self.hub_headers());
            if let Some(r) = &range_h {
                req = req.header(RANGE, r);
            }
            let resp = req.send().await.map_err(|e| net_error(&what, e))?;
            let st = resp.status();
            let meta = file_meta(resp.headers());
            if st.is_redirection() {
                let loc = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| anyhow!("{what}: redirect without Location"))?
                    .to_string();
                // RFC 3986 reference resolution against the URL just fetched: `/path`,
                // `//host/path`, `path`, `../path` and absolute URLs alike.
                let next = redirect_target(&url, &loc)
                    .ok_or_else(|| anyhow!("{what}: unsupported redirect target"))?;
                if same_origin(&next, &self.endpoint) {
                    // Renamed repo: follow on the Hub host (keeps the token).
                    url = next;
                    continue;
                }
                // Any other host (the CDN): no Authorization header, ever.
                let mut req = self.http.get(&next);
                if let Some(r) = &range_h {
                    req = req.header(RANGE, r);
                }
                let cdn = req.send().await.map_err(|e| net_error(&what, e))?;
                return check_status(&what, cdn).await.map(|r| (r, meta));
            }
            return check_status(&what, resp).await.map(|r| (r, meta));
        }
        bail!("{what}: too many redirects")
    }

    /// Bytes `[start, end)` of a file by HTTP Range, with the client's retries; the body must
    /// be exactly that long (a short or full-file answer is a retryable failure). Returns the
    /// bytes, the first Hub response's metadata and the attempts used.
    pub async fn read_range(
        &self,
        repo: &str,
        commit: &str,
        path: &str,
        start: u64,
        end: u64,
    ) -> Result<(bytes::Bytes, FileMeta, u32)> {
        let want = end.saturating_sub(start);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let r: Result<(bytes::Bytes, FileMeta)> = async {
                if want == 0 {
                    return Ok((bytes::Bytes::new(), FileMeta::default()));
                }
                let (resp, meta) = self
                    .resolve(repo, commit, path, Some((start, Some(end - 1))))
                    .await?;
                if resp.status() != StatusCode::PARTIAL_CONTENT {
                    // Dropping the response closes the connection: the whole file is not read.
                    return Err(transient(format!(
                        "{repo}@{commit}/{path}: server ignored the Range request (HTTP {})",
                        resp.status()
                    )));
                }
                let body =
                    body_upto_with(&format!("{repo}/{path}"), resp, want as usize, self.stall)
                        .await?
                        .ok_or_else(|| {
                            transient(format!(
                                "{repo}/{path}: range {start}-{end}: got more than {want} bytes"
                            ))
                        })?;
                if body.len() as u64 != want {
                    return Err(transient(format!(
                        "{repo}/{path}: range {start}-{end}: got {} of {want} bytes",
                        body.len()
                    )));
                }
                Ok((body, meta))
            }
            .await;
            match r {
                Ok((b, m)) => return Ok((b, m, attempt)),
                Err(e) => self.backoff_or_fail(attempt, e).await?,
            }
        }
    }
}

async fn check_status(what: &str, resp: Response) -> Result<Response> {
    let st = resp.status();
    if st.is_success() {
        return Ok(resp);
    }
    if retryable_status(st.as_u16()) {
        return Err(retryable_error(what, &resp));
    }
    Err(status_error(what, resp).await)
}

/// A 429/5xx as [`Transient`]: the status, the server's message, the wait it asked for.
fn retryable_error(what: &str, resp: &Response) -> anyhow::Error {
    let h = resp.headers();
    let msg = h
        .get("x-error-message")
        .and_then(|v| v.to_str().ok())
        .map(|m| format!(": {}", clip(m)))
        .unwrap_or_default();
    let wait = wait_header(h)
        .map(|w| format!(" ({w})"))
        .unwrap_or_default();
    anyhow::Error::new(Transient {
        msg: format!("{what}: HTTP {}{wait}{msg}", resp.status()),
        wait: server_wait(h),
    })
}

/// The message of an error answer's body: its JSON `error` field, else its first line
/// unless it is markup (read up to [`MAX_ERROR_BODY`] bytes; nothing when longer).
async fn error_body(what: &str, resp: Response) -> Option<String> {
    let b = body_upto(what, resp, MAX_ERROR_BODY).await.ok()??;
    let text = String::from_utf8_lossy(&b);
    let m = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => v.get("error")?.as_str()?.to_string(),
        Err(_) => text.lines().next().unwrap_or_default().to_string(),
    };
    let m = clip(&m);
    (!m.is_empty() && !m.starts_with('<')).then_some(m)
}

async fn status_error(what: &str, resp: Response) -> anyhow::Error {
    let st = resp.status();
    let code = resp
        .headers()
        .get("x-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let header_msg = resp
        .headers()
        .get("x-error-message")
        .and_then(|v| v.to_str().ok())
        .map(clip);
    let msg = match header_msg {
        Some(m) => Some(m),
        None => error_body(what, resp).await,
    };
    let hint = if st == StatusCode::UNAUTHORIZED || st == StatusCode::FORBIDDEN {
        " (gated or private: set HF_TOKEN or $HF_HOME/token)"
    } else {
        match code.as_deref() {
            Some("RevisionNotFound") => " (revision not found)",
            Some("RepoNotFound") => " (repository not found)",
            Some("EntryNotFound") => " (file not found)",
            _ => "",
        }
    };
    anyhow!(
        "{what}: HTTP {st}{hint}{}",
        msg.map(|m| format!(": {m}")).unwrap_or_default()
    )
}

fn unquote(v: &str) -> String {
    v.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

fn file_meta(h: &HeaderMap) -> FileMeta {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    FileMeta {
        commit: get("x-repo-commit"),
        etag: get("x-linked-etag")
            .or_else(|| get("etag"))
            .map(|v| unquote(&v)),
        size: get("x-linked-size").and_then(|s| s.trim().parse().ok()),
    }
}

/// The `rel="next"` URL of a `Link` header.
pub fn next_link(h: &HeaderMap) -> Option<String> {
    let v = h.get("link")?.to_str().ok()?;
    for part in v.split(',') {
        let mut it = part.split(';');
        let url = it.next()?.trim();
        if it.any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        }) {
            return Some(
                url.trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string(),
            );
        }
    }
    None
}

/// `loc` (a `Location` header) resolved against `base` per RFC 3986 (section 5.2); `None`
/// unless the result is an http(s) URL.
pub fn redirect_target(base: &str, loc: &str) -> Option<String> {
    let next = reqwest::Url::parse(base).ok()?.join(loc.trim()).ok()?;
    matches!(next.scheme(), "http" | "https").then(|| next.to_string())
}

/// A listing that names one path twice: identical entries collapse to one; entries that
/// disagree (oid, size or LFS object) are refused, naming the path: which bytes would be
/// fetched is not defined.
pub fn dedup_listing(what: &str, sorted: Vec<TreeEntry>) -> Result<Vec<TreeEntry>> {
    let mut out: Vec<TreeEntry> = Vec::with_capacity(sorted.len());
    for e in sorted {
        if let Some(prev) = out.last() {
            if prev.path == e.path {
                let same = prev.oid == e.oid
                    && prev.size == e.size
                    && prev.lfs.as_ref().map(|l| (&l.oid, l.size))
                        == e.lfs.as_ref().map(|l| (&l.oid, l.size));
                if !same {
                    bail!(
                        "{what}: the listing names {} twice with different content (oid {} vs \
                         {}): refusing the listing",
                        shown(&e.path),
                        shown(&prev.oid),
                        shown(&e.oid)
                    );
                }
                continue;
            }
        }
        out.push(e);
    }
    Ok(out)
}

fn origin(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after..].find('/') {
        Some(j) => &url[..after + j],
        None => url,
    }
}

fn same_origin(a: &str, b: &str) -> bool {
    origin(a).eq_ignore_ascii_case(origin(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_links() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static("<http://h/api/x?cursor=5>; rel=\"next\""),
        );
        assert_eq!(next_link(&h).as_deref(), Some("http://h/api/x?cursor=5"));
        assert!(same_origin("http://h:1/a?b", "http://h:1"));
        assert!(!same_origin("http://evil/a", "http://h:1"));
    }

    #[test]
    fn redirects_resolve_per_rfc_3986() {
        let base = "http://hub:8080/datasets/o/n/resolve/c0/data/x.parquet";
        for (loc, want) in [
            ("/api/renamed/x", "http://hub:8080/api/renamed/x"),
            ("//cdn.example/b/x?sig=1", "http://cdn.example/b/x?sig=1"),
            ("https://cdn.example/x", "https://cdn.example/x"),
            (
                "y.parquet",
                "http://hub:8080/datasets/o/n/resolve/c0/data/y.parquet",
            ),
            ("../z", "http://hub:8080/datasets/o/n/resolve/c0/z"),
            (
                "?v=2",
                "http://hub:8080/datasets/o/n/resolve/c0/data/x.parquet?v=2",
            ),
        ] {
            assert_eq!(redirect_target(base, loc).as_deref(), Some(want), "{loc}");
        }
        // A protocol-relative Location leaves the Hub host: the token must not follow it.
        let t = redirect_target(base, "//evil.example/steal").unwrap();
        assert!(!same_origin(&t, "http://hub:8080"));
        assert!(redirect_target(base, "ftp://x/y").is_none());
        assert!(redirect_target(base, "file:///etc/passwd").is_none());
    }

    #[test]
    fn a_path_listed_twice_must_agree() {
        let e = |path: &str, oid: &str| TreeEntry {
            kind: "file".into(),
            oid: oid.into(),
            size: 3,
            path: path.into(),
            lfs: None,
        };
        let ok = dedup_listing("l", vec![e("a", "1"), e("a", "1"), e("b", "2")]).unwrap();
        assert_eq!(ok.len(), 2);
        let err = dedup_listing("l", vec![e("a", "1"), e("a", "2")]).unwrap_err();
        assert!(
            format!("{err:#}").contains("twice with different content"),
            "{err:#}"
        );
    }

    #[test]
    fn token_sources_and_redaction() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("token"), "hf_file\n").unwrap();
        let home = d.path().to_string_lossy().to_string();
        let t = Token::from_env_with(|k| (k == "HF_HOME").then(|| home.clone())).unwrap();
        assert_eq!(t.0, "hf_file");
        let t = Token::from_env_with(|k| match k {
            "HF_TOKEN" => Some("hf_env".into()),
            "HF_HOME" => Some(home.clone()),
            _ => None,
        })
        .unwrap();
        assert_eq!(t.0, "hf_env");
        assert!(!format!("{t:?}").contains("hf_env"));
        assert!(Token::from_env_with(|_| None).is_none());
    }
}
