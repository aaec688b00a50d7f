//! The emulator's HTTP/1.1 wire: keep-alive connections, request parsing, routing to the Hub
//! API and the CDN, Range/206, HEAD, and fault injection on the response path.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::store::{Missing, Repo, RepoFile};
use super::{Fault, Host, RequestRecord, Shared};
use crate::hub::names::RepoKind;

const API_FAULTS: &[Fault] = &[Fault::RateLimit, Fault::ServerError];
const BODY_FAULTS: &[Fault] = &[
    Fault::Drop,
    Fault::NoRange,
    Fault::Corrupt,
    Fault::RateLimit,
    Fault::ServerError,
];

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener, host: Host) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let _ = sock.set_nodelay(true);
        let sh = shared.clone();
        tokio::spawn(async move {
            let _ = connection(sh, sock, host).await;
        });
    }
}

struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum Body {
    Bytes(Vec<u8>),
    File { path: PathBuf, start: u64, len: u64 },
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Body,
    fault: Option<Fault>,
}

impl Response {
    fn json(status: u16, v: serde_json::Value) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Body::Bytes(v.to_string().into_bytes()),
            fault: None,
        }
    }
    fn error(status: u16, code: &str, msg: &str) -> Response {
        let mut r = Response::json(status, json!({ "error": msg }));
        r.headers.push(("X-Error-Code".into(), code.into()));
        r.headers.push(("X-Error-Message".into(), msg.into()));
        r
    }
}

async fn read_request(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).await? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut req = Request {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    if let Some(n) = req
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        let mut body = vec![0u8; n.min(1 << 20)];
        r.read_exact(&mut body).await?;
        req.body = body;
    }
    Ok(Some(req))
}

async fn connection(shared: Arc<Shared>, sock: TcpStream, host: Host) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(16 * 1024, sock);
    while let Some(req) = read_request(&mut r).await? {
        let at = Instant::now();
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let resp = match host {
            Host::Hub => route_hub(&shared, &req),
            Host::Cdn => route_cdn(&shared, &req),
        };
        shared.records.lock().unwrap().push(RequestRecord {
            host,
            method: req.method.clone(),
            target: req.target.clone(),
            authorization: req.header("authorization").map(str::to_string),
            range: req.header("range").map(str::to_string),
            status: resp.status,
            at,
        });
        let keep = write_response(&shared, r.get_mut(), &req, resp).await?;
        if close || !keep {
            break;
        }
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// Write a response; returns whether the connection may be kept alive.
async fn write_response(
    shared: &Shared,
    sock: &mut TcpStream,
    req: &Request,
    resp: Response,
) -> std::io::Result<bool> {
    let len = match &resp.body {
        Body::Bytes(b) => b.len() as u64,
        Body::File { len, .. } => *len,
    };
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {len}\r\n\r\n"));
    sock.write_all(head.as_bytes()).await?;
    if req.method == "HEAD" {
        return Ok(true);
    }
    match resp.body {
        Body::Bytes(b) => {
            sock.write_all(&b).await?;
            Ok(true)
        }
        Body::File { path, start, len } => {
            let throttle = shared.opts.lock().unwrap().throttle_bytes_per_sec;
            let stop_at = (resp.fault == Some(Fault::Drop)).then_some(len / 2);
            let corrupt_at = (resp.fault == Some(Fault::Corrupt)).then_some(len / 2);
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(start))?;
            let t0 = Instant::now();
            let mut sent = 0u64;
            let mut buf = vec![0u8; 256 * 1024];
            while sent < len {
                let want = ((len - sent) as usize).min(buf.len());
                let want = match stop_at {
                    Some(s) => want.min((s - sent) as usize),
                    None => want,
                };
                if want == 0 {
                    break;
                }
                f.read_exact(&mut buf[..want])?;
                if let Some(c) = corrupt_at {
                    if c >= sent && c < sent + want as u64 {
                        buf[(c - sent) as usize] ^= 0x5a;
                    }
                }
                sock.write_all(&buf[..want]).await?;
                sent += want as u64;
                shared.file_bytes.fetch_add(want as u64, Ordering::SeqCst);
                if let Some(rate) = throttle {
                    let due = Duration::from_secs_f64(sent as f64 / rate.max(1) as f64);
                    let el = t0.elapsed();
                    if due > el {
                        tokio::time::sleep(due - el).await;
                    }
                }
            }
            if sent < len {
                sock.flush().await?;
                let _ = sock.shutdown().await;
                return Ok(false);
            }
            Ok(true)
        }
    }
}

fn decode(seg: &str) -> String {
    percent_decode_str(seg).decode_utf8_lossy().into_owned()
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A 429 or 500 if the fault schedule says so.
fn api_fault(shared: &Shared, key: &str) -> Option<Response> {
    fault_response(shared, shared.next_fault(key, API_FAULTS)?)
}

fn fault_response(shared: &Shared, f: Fault) -> Option<Response> {
    match f {
        Fault::RateLimit => {
            let t = shared.opts.lock().unwrap().retry_after_secs;
            let mut r = Response::error(429, "RateLimited", "rate limited (emulated)");
            r.headers.push(("Retry-After".into(), t.to_string()));
            r.headers
                .push(("RateLimit".into(), format!("\"resolvers\";r=0;t={t}")));
            r.headers.push((
                "RateLimit-Policy".into(),
                "\"fixed window\";\"resolvers\";q=3000;w=300".into(),
            ));
            Some(r)
        }
        Fault::ServerError => Some(Response::error(500, "Internal", "server error (emulated)")),
        _ => None,
    }
}

fn entry_json(f: &RepoFile) -> serde_json::Value {
    let mut v = json!({"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path});
    if f.lfs {
        v["lfs"] = json!({"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size});
    }
    v
}

fn tree_entries(repo: &Repo, prefix: &str, recursive: bool) -> Vec<serde_json::Value> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let base = if prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", prefix.trim_end_matches('/'))
    };
    for f in &repo.files {
        let Some(rest) = f.path.strip_prefix(&base) else {
            continue;
        };
        let comps: Vec<&str> = rest.split('/').collect();
        for i in 1..comps.len() {
            if !recursive && i > 1 {
                break;
            }
            dirs.insert(format!("{base}{}", comps[..i].join("/")));
        }
        if recursive || comps.len() == 1 {
            out.push((f.path.clone(), entry_json(f)));
        }
    }
    for d in dirs {
        let oid = crate::util::git_blob_sha1(d.as_bytes());
        out.push((
            d.clone(),
            json!({"type": "directory", "oid": oid, "size": 0, "path": d}),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, v)| v).collect()
}

fn missing(m: Missing, id: &str, rev: &str) -> Response {
    match m {
        Missing::Repo => {
            Response::error(404, "RepoNotFound", &format!("Repository {id} not found"))
        }
        Missing::Revision => {
            Response::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"))
        }
    }
}

/// `kind` of an API plural (`datasets`, `models`).
fn api_kind(plural: &str) -> Option<RepoKind> {
    match plural {
        "datasets" => Some(RepoKind::Dataset),
        "models" => Some(RepoKind::Model),
        _ => None,
    }
}

/// One Hub request: model routes are mapped onto the dataset ones (with their kind), then
/// each route has its handler; an API fault queued for the request wins first.
fn route_hub(shared: &Shared, req: &Request) -> Response {
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let key = format!("hub {} {}", req.method, req.target);
    let (kind, segs) = as_dataset_route(segs);
    let id = |o: &str, n: &str| format!("{}/{}", decode(o), decode(n));
    let joined = |rest: &[&str]| rest.iter().map(|s| decode(s)).collect::<Vec<_>>().join("/");
    match segs.as_slice() {
        ["api", "datasets", o, n, "revision", rev] if req.method == "GET" => {
            if let Some(r) = api_fault(shared, &key) {
                return r;
            }
            revision(shared, kind, &id(o, n), &decode(rev))
        }
        ["api", "datasets", o, n, "tree", rev, rest @ ..] if req.method == "GET" => {
            if let Some(r) = api_fault(shared, &key) {
                return r;
            }
            let at = RepoAt {
                kind,
                id: id(o, n),
                rev: decode(rev),
            };
            tree(shared, &at, &joined(rest), path, query)
        }
        ["api", "datasets", o, n, "paths-info", rev] if req.method == "POST" => {
            if let Some(r) = api_fault(shared, &key) {
                return r;
            }
            paths_info(shared, req, kind, &id(o, n), &decode(rev))
        }
        ["datasets", o, n, "resolve", rev, rest @ ..]
            if req.method == "GET" || req.method == "HEAD" =>
        {
            let at = RepoAt {
                kind,
                id: id(o, n),
                rev: decode(rev),
            };
            resolve(shared, req, &key, &at, &joined(rest))
        }
        _ => Response::error(
            404,
            "NotFound",
            &format!("no route for {} {}", req.method, path),
        ),
    }
}

/// The repo a request names: its kind, `owner/name` and revision, decoded.
struct RepoAt {
    kind: RepoKind,
    id: String,
    rev: String,
}

/// Model repos have the same routes under `/api/models/...` and `/{repo}/resolve/...`: the
/// path as its dataset route, with the repo kind it names.
fn as_dataset_route(segs: Vec<&str>) -> (RepoKind, Vec<&str>) {
    match segs.as_slice() {
        ["api", plural, rest @ ..] if api_kind(plural).is_some() => (
            api_kind(plural).unwrap(),
            ["api", "datasets"]
                .iter()
                .copied()
                .chain(rest.iter().copied())
                .collect(),
        ),
        [o, n, "resolve", rest @ ..] if *o != "datasets" && *o != "api" => (
            RepoKind::Model,
            ["datasets", o, n, "resolve"]
                .iter()
                .copied()
                .chain(rest.iter().copied())
                .collect(),
        ),
        _ => (RepoKind::Dataset, segs),
    }
}

/// `GET /api/datasets/{id}/revision/{rev}`: the commit and every file.
fn revision(shared: &Shared, kind: RepoKind, id: &str, rev: &str) -> Response {
    match shared.store.repo_of(kind, id, rev) {
        Ok(repo) => Response::json(
            200,
            json!({
                "id": repo.id, "sha": repo.commit, "private": false, "gated": false,
                "siblings": repo.files.iter().map(|f| json!({"rfilename": f.path})).collect::<Vec<_>>(),
            }),
        ),
        Err(m) => missing(m, id, rev),
    }
}

/// `GET /api/datasets/{id}/tree/{rev}/{prefix}`: one page of the listing, `Link: rel="next"`
/// to the next.
fn tree(shared: &Shared, at: &RepoAt, prefix: &str, path: &str, query: &str) -> Response {
    let (kind, id, rev) = (at.kind, at.id.as_str(), at.rev.as_str());
    let repo = match shared.store.repo_of(kind, id, rev) {
        Ok(r) => r,
        Err(m) => return missing(m, id, rev),
    };
    let recursive = query_param(query, "recursive").is_some_and(|v| v == "true" || v == "1");
    let mut entries = tree_entries(&repo, prefix, recursive);
    if shared.opts.lock().unwrap().faults.contains(&Fault::DotDot) {
        entries.insert(
            0,
            json!({"type": "file", "oid": "0".repeat(40), "size": 4, "path": "data/../../escape.parquet"}),
        );
    }
    if !prefix.is_empty() && entries.is_empty() {
        return Response::error(404, "EntryNotFound", &format!("{prefix} does not exist"));
    }
    let page = shared.opts.lock().unwrap().page_size.max(1);
    let cursor: usize = query_param(query, "cursor")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let end = (cursor + page).min(entries.len());
    let slice = entries[cursor.min(end)..end].to_vec();
    let mut r = Response::json(200, serde_json::Value::Array(slice));
    if end < entries.len() {
        let mut next = format!("{}{}?", shared.hub_url, path);
        if recursive {
            next.push_str("recursive=true&");
        }
        next.push_str(&format!("expand=false&cursor={end}"));
        r.headers
            .push(("Link".into(), format!("<{next}>; rel=\"next\"")));
    }
    r
}

/// `POST /api/datasets/{id}/paths-info/{rev}`: the entries of the paths asked for.
fn paths_info(shared: &Shared, req: &Request, kind: RepoKind, id: &str, rev: &str) -> Response {
    let repo = match shared.store.repo_of(kind, id, rev) {
        Ok(r) => r,
        Err(m) => return missing(m, id, rev),
    };
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
    let want: Vec<String> = body["paths"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let out: Vec<_> = repo
        .files
        .iter()
        .filter(|f| want.contains(&f.path))
        .map(entry_json)
        .collect();
    Response::json(200, serde_json::Value::Array(out))
}

/// `GET|HEAD /datasets/{id}/resolve/{rev}/{path}`: an LFS file redirects to the CDN (with the
/// `X-Linked-*` metadata), a small one is served here.
fn resolve(shared: &Shared, req: &Request, key: &str, at: &RepoAt, fpath: &str) -> Response {
    let (kind, id, rev) = (at.kind, at.id.as_str(), at.rev.as_str());
    let repo = match shared.store.repo_of(kind, id, rev) {
        Ok(r) => r,
        Err(m) => return missing(m, id, rev),
    };
    let Some(f) = repo.files.iter().find(|f| f.path == fpath) else {
        return Response::error(
            404,
            "EntryNotFound",
            &format!("{fpath} does not exist at {rev}"),
        );
    };
    if !f.lfs {
        let mut r = serve_file(shared, req, key, f.disk.clone(), f.size);
        r.headers
            .push(("X-Repo-Commit".into(), repo.commit.clone()));
        r.headers
            .push(("ETag".into(), format!("\"{}\"", f.git_oid)));
        return r;
    }
    if req.method == "GET" {
        if let Some(r) = api_fault(shared, key) {
            return r;
        }
    }
    let location = format!(
        "{}/repos/{}/{}?response-content-disposition=attachment%3B+filename%3D{}&X-Amz-Signature=emulated",
        shared.cdn_url,
        enc(id),
        f.sha256,
        enc(fpath.rsplit('/').next().unwrap_or(fpath))
    );
    let mut r = Response {
        status: 302,
        headers: vec![
            ("Location".into(), location),
            ("Content-Type".into(), "text/plain".into()),
        ],
        body: Body::Bytes(b"Found. Redirecting".to_vec()),
        fault: None,
    };
    r.headers
        .push(("X-Repo-Commit".into(), repo.commit.clone()));
    r.headers
        .push(("X-Linked-Etag".into(), format!("\"{}\"", f.sha256)));
    r.headers.push(("X-Linked-Size".into(), f.size.to_string()));
    r.headers
        .push(("ETag".into(), format!("\"{}\"", f.git_oid)));
    r
}

fn route_cdn(shared: &Shared, req: &Request) -> Response {
    let (path, _) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let key = format!("cdn {} {}", req.method, path);
    match segs.as_slice() {
        ["repos", _repo, sha] if req.method == "GET" || req.method == "HEAD" => {
            let Some(disk) = shared.store.lfs_blob(sha) else {
                return Response::error(404, "NoSuchKey", "no such blob");
            };
            let size = std::fs::metadata(&disk).map(|m| m.len()).unwrap_or(0);
            let mut r = serve_file(shared, req, &key, disk, size);
            r.headers.push(("ETag".into(), format!("\"{sha}\"")));
            r
        }
        _ => Response::error(404, "NoSuchKey", "not found"),
    }
}

/// A file body with Range support and the body fault schedule.
fn serve_file(shared: &Shared, req: &Request, key: &str, disk: PathBuf, size: u64) -> Response {
    let fault = if req.method == "GET" {
        shared.next_fault(key, BODY_FAULTS)
    } else {
        None
    };
    if let Some(r) = fault.and_then(|f| fault_response(shared, f)) {
        return r;
    }
    let range = req.header("range").and_then(|r| parse_range(r, size));
    let mut headers = vec![
        ("Accept-Ranges".into(), "bytes".into()),
        ("Content-Type".into(), "application/octet-stream".into()),
    ];
    match range {
        Some(Ok((a, b))) if fault != Some(Fault::NoRange) => {
            headers.push(("Content-Range".into(), format!("bytes {a}-{b}/{size}")));
            Response {
                status: 206,
                headers,
                body: Body::File {
                    path: disk,
                    start: a,
                    len: b + 1 - a,
                },
                fault,
            }
        }
        Some(Err(())) if fault != Some(Fault::NoRange) => {
            let mut r = Response::error(416, "RangeNotSatisfiable", "range not satisfiable");
            r.headers
                .push(("Content-Range".into(), format!("bytes */{size}")));
            r
        }
        _ => Response {
            status: 200,
            headers,
            body: Body::File {
                path: disk,
                start: 0,
                len: size,
            },
            fault,
        },
    }
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` → inclusive (a, b); Err when unsatisfiable.
fn parse_range(h: &str, size: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = h.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (size.saturating_sub(n), size.saturating_sub(1))
    } else {
        let a: u64 = a.parse().ok()?;
        let b: u64 = if b.is_empty() {
            size.saturating_sub(1)
        } else {
            b.parse::<u64>().ok()?.min(size.saturating_sub(1))
        };
        (a, b)
    };
    if size == 0 || a >= size || a > b {
        return Some(Err(()));
    }
    Some(Ok((a, b)))
}
