//! `dlm-data fetch` against a hostile Hub on loopback (a small std TCP server in this file):
//! listings whose `oid`/`lfs.oid` are paths, answers echoing the token, absurd
//! `Retry-After`/`RateLimit` waits, endless bodies and pagination loops. Each case must end
//! with exit 1 and an error naming the field/header/URL, the token never in any output, and
//! nothing outside the cache touched.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "hf_HostileHubTestToken_0123456789abcdef";
const COMMIT: &str = "1111111111111111111111111111111111111111";
const CONTENT: &[u8] = b"{\"text\": \"hello\"}\n{\"text\": \"world\"}\n";

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Req {
    target: String,
    authorization: Option<String>,
}

enum Reply {
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Headers, then body bytes until the client hangs up.
    Endless { status: u16 },
    /// A 200 whose body arrives one byte per `every` (a CDN that trickles).
    Trickle {
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        every: Duration,
    },
}

fn json(status: u16, v: serde_json::Value) -> Reply {
    Reply::Full {
        status,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: v.to_string().into_bytes(),
    }
}

fn with_headers(status: u16, headers: &[(&str, &str)], body: &str) -> Reply {
    Reply::Full {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.as_bytes().to_vec(),
    }
}

type Handler = dyn Fn(&Req, &str) -> Reply + Send + Sync;

/// A loopback HTTP/1.1 server: one thread per connection, one request per connection.
struct Hostile {
    url: String,
    seen: Arc<Mutex<Vec<Req>>>,
}

impl Hostile {
    /// `handler(request, own base URL)`.
    fn start(handler: impl Fn(&Req, &str) -> Reply + Send + Sync + 'static) -> Hostile {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (u, s) = (url.clone(), seen.clone());
        std::thread::spawn(move || {
            for sock in l.incoming().flatten() {
                let (h, u, s) = (handler.clone(), u.clone(), s.clone());
                std::thread::spawn(move || {
                    let _ = serve(sock, &*h, &u, &s);
                });
            }
        });
        Hostile { url, seen }
    }
    fn requests(&self) -> Vec<Req> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(sock: TcpStream, h: &Handler, base: &str, seen: &Mutex<Vec<Req>>) -> std::io::Result<()> {
    let mut r = BufReader::new(sock.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut authorization = None;
    loop {
        let mut l = String::new();
        if r.read_line(&mut l)? == 0 || l.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("authorization") {
                authorization = Some(v.trim().to_string());
            }
        }
    }
    let req = Req {
        target,
        authorization,
    };
    seen.lock().unwrap().push(req.clone());
    let mut w = sock;
    match h(&req, base) {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            w.write_all(head.as_bytes())?;
            w.write_all(&body)?;
        }
        Reply::Trickle {
            headers,
            body,
            every,
        } => {
            let mut head = "HTTP/1.1 200 X\r\nConnection: close\r\n".to_string();
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            w.write_all(head.as_bytes())?;
            for b in body {
                w.write_all(&[b])?;
                w.flush()?;
                std::thread::sleep(every);
            }
        }
        Reply::Endless { status } => {
            w.write_all(
                format!("HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Type: application/json\r\n\r\n[")
                    .as_bytes(),
            )?;
            let chunk = b"{\"type\":\"file\",\"path\":\"x\"},".repeat(4096);
            loop {
                w.write_all(&chunk)?;
            }
        }
    }
    w.flush()
}

/// The well-behaved parts of a Hub (revision, one-file listing, resolve), for the handlers
/// to fall back on.
fn normal(req: &Req, listing: &serde_json::Value) -> Reply {
    let t = req.target.as_str();
    if t.starts_with("/api/datasets/o/n/revision/") {
        json(200, serde_json::json!({ "sha": COMMIT }))
    } else if t.starts_with("/api/datasets/o/n/tree/") {
        json(200, listing.clone())
    } else if t.starts_with("/datasets/o/n/resolve/") {
        Reply::Full {
            status: 200,
            headers: vec![
                ("X-Repo-Commit".into(), COMMIT.into()),
                (
                    "ETag".into(),
                    format!("\"{}\"", dlm_data::util::git_blob_sha1(CONTENT)),
                ),
            ],
            body: CONTENT.to_vec(),
        }
    } else {
        json(404, serde_json::json!({ "error": "not found" }))
    }
}

fn good_listing() -> serde_json::Value {
    serde_json::json!([{
        "type": "file",
        "oid": dlm_data::util::git_blob_sha1(CONTENT),
        "size": CONTENT.len(),
        "path": "data.jsonl"
    }])
}

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let c = Case {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            c.manifest(),
            "[[source]]\nname = \"t\"\nrepo = \"o/n\"\nrevision = \"main\"\nsplit = \"train\"\nfiles = [\"data.jsonl\"]\nformat = \"jsonl\"\n",
        )
        .unwrap();
        std::fs::write(c.dir.path().join("victim"), b"precious").unwrap();
        c
    }
    fn manifest(&self) -> PathBuf {
        self.dir.path().join("m.toml")
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
    /// Run `fetch` with the token set; killed (and the test failed) after 90 s.
    fn fetch(&self, hub: &Hostile, extra: &[&str]) -> Output {
        run_bounded(self.fetch_cmd(hub, extra), Duration::from_secs(90))
    }
    /// The `fetch` command [`Case::fetch`] runs.
    fn fetch_cmd(&self, hub: &Hostile, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dlm-data"));
        c.arg("fetch")
            .arg("--manifest")
            .arg(self.manifest())
            .arg("--cache")
            .arg(self.cache())
            .args(["--retry-base-ms", "5"])
            .args(extra)
            .env("HF_ENDPOINT", &hub.url)
            .env("HF_TOKEN", TOKEN)
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX")
            .env("DLM_NO_PROGRESS", "1")
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
    /// Every file outside the cache, with its bytes (the victim, the manifest, ...).
    fn outside_cache(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        walk(self.dir.path(), &self.cache(), &mut out);
        out
    }
    fn download_log(&self) -> String {
        std::fs::read_to_string(self.cache().join("download.log")).unwrap_or_default()
    }
}

fn walk(d: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p == skip {
            continue;
        }
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            walk(&p, skip, out);
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
        }
    }
}

/// Run to completion or kill it (by its own pid) after `limit`: a hang fails the test. The
/// child's address space is capped at 4 GiB, so unbounded growth fails fast and harmlessly.
fn run_bounded(mut c: Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let t0 = Instant::now();
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let a = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).unwrap();
        v
    });
    let b = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).unwrap();
        v
    });
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Output {
                status,
                stdout: a.join().unwrap(),
                stderr: b.join().unwrap(),
            };
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "fetch still running after {limit:?} (a hang): {}",
                String::from_utf8_lossy(&b.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exit 1, no panic, the token nowhere, `want` in stderr; returns stderr.
fn assert_refused(case: &Case, o: &Output, want: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "stderr lacks {w:?}:\n{err}");
    }
    for (name, text) in [
        ("stderr", &err),
        ("stdout", &out),
        ("download.log", &case.download_log()),
    ] {
        assert!(!text.contains(TOKEN), "the token is in {name}:\n{text}");
        assert!(
            !text.contains("HostileHubTestToken"),
            "part of the token is in {name}"
        );
    }
    assert!(
        !case.manifest().with_extension("lock").exists(),
        "a lock was written"
    );
    err
}

fn listing_with(entry: serde_json::Value) -> serde_json::Value {
    serde_json::json!([entry])
}

#[test]
fn oid_that_is_a_path_touches_nothing_outside_the_cache() {
    let case = Case::new();
    let victim = case.dir.path().join("victim");
    let abs = victim.to_string_lossy().into_owned();
    let n = CONTENT.len();
    let oid = dlm_data::util::git_blob_sha1(CONTENT);
    let cases = [
        (
            listing_with(
                serde_json::json!({"type": "file", "oid": "../../../victim", "size": n, "path": "data.jsonl"}),
            ),
            "field `oid` \"../../../victim\" is not a git sha1",
        ),
        (
            listing_with(
                serde_json::json!({"type": "file", "oid": abs, "size": n, "path": "data.jsonl"}),
            ),
            "field `oid`",
        ),
        (
            listing_with(
                serde_json::json!({"type": "file", "oid": oid, "size": n, "path": "data.jsonl",
                "lfs": {"oid": abs, "size": n}}),
            ),
            "field `lfs.oid`",
        ),
        (
            listing_with(
                serde_json::json!({"type": "file", "oid": oid, "size": n, "path": "data.jsonl",
                "lfs": {"oid": format!("../../../../{}", "a".repeat(52)), "size": n}}),
            ),
            "field `lfs.oid`",
        ),
    ];
    for (listing, want) in cases {
        let before = case.outside_cache();
        let hub = Hostile::start(move |r, _| normal(r, &listing));
        let o = case.fetch(&hub, &[]);
        assert_refused(&case, &o, &[want, "listing o/n@", "refusing the listing"]);
        assert_eq!(
            case.outside_cache(),
            before,
            "files outside the cache changed"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            !hub.requests()
                .iter()
                .any(|r| r.target.contains("/resolve/")),
            "a file was requested"
        );
    }
    assert!(!case.dir.path().join("victim.lock").exists());
}

#[test]
fn a_lock_whose_digest_is_a_path_is_refused_offline() {
    let case = Case::new();
    let hub = Hostile::start(|r, _| normal(r, &good_listing()));
    let o = case.fetch(&hub, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lock = case.manifest().with_extension("lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let sha = dlm_data::util::sha256_hex(CONTENT);
    assert!(text.contains(&sha));
    // Make the file an LFS file whose sha256 is a path out of the cache.
    let mut l = dlm_data::manifest::Lock::load(&lock).unwrap();
    l.sources[0].files[0].git_oid = None;
    l.sources[0].files[0].sha256 = "../../../victim".into();
    l.save(&lock).unwrap();
    let before = case.outside_cache();
    let mut c = Command::new(env!("CARGO_BIN_EXE_dlm-data"));
    c.args(["fetch", "--manifest"])
        .arg(case.manifest())
        .arg("--cache")
        .arg(case.cache())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let o = run_bounded(c, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("field `sha256` \"../../../victim\" is not 64 hex digits"),
        "{err}"
    );
    assert_eq!(case.outside_cache(), before);
}

#[test]
fn a_401_echoing_the_token_never_prints_it() {
    // The revision answer: 401 whose JSON body echoes the Authorization header.
    let case = Case::new();
    let hub = Hostile::start(|r, _| {
        let echo = format!(
            "invalid credentials in Authorization header: {}",
            r.authorization.clone().unwrap_or_default()
        );
        json(401, serde_json::json!({ "error": echo }))
    });
    let o = case.fetch(&hub, &[]);
    let err = assert_refused(
        &case,
        &o,
        &["401", "invalid credentials", "Bearer <redacted>"],
    );
    assert!(err.contains("set HF_TOKEN"), "{err}");
    assert!(hub
        .requests()
        .iter()
        .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))));

    // The file's answer: 401 with the echo in X-Error-Message: the FAILED line, the final
    // error and the download.log record all carry the message, none the token.
    let case = Case::new();
    let hub = Hostile::start(|r, _| {
        if r.target.contains("/resolve/") {
            let echo = format!("you sent {}", r.authorization.clone().unwrap_or_default());
            with_headers(
                401,
                &[("X-Error-Message", &echo)],
                &format!("{{\"error\":\"{echo}\"}}"),
            )
        } else {
            normal(r, &good_listing())
        }
    });
    let o = case.fetch(&hub, &[]);
    let err = assert_refused(&case, &o, &["FAILED", "401", "you sent Bearer <redacted>"]);
    assert!(err.matches("<redacted>").count() >= 2, "{err}");
    let log = case.download_log();
    assert!(log.contains("you sent Bearer <redacted>"), "{log}");
    let rec: dlm_data::hub::log::LogRecord =
        serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert!(!rec.verified && rec.error.is_some());

    // A 429 echoing it, retried with RUST_LOG=debug: the tracing lines are redacted too.
    let case = Case::new();
    let hub = Hostile::start(|r, _| {
        let echo = format!("slow down, {}", r.authorization.clone().unwrap_or_default());
        with_headers(429, &[("Retry-After", "0"), ("X-Error-Message", &echo)], "")
    });
    let o = case.fetch(&hub, &["--retries", "2"]);
    let err = assert_refused(
        &case,
        &o,
        &[
            "slow down, Bearer <redacted>",
            "retry 1 in",
            "retry budget 2 spent",
        ],
    );
    assert!(
        err.matches("slow down, Bearer <redacted>").count() >= 3,
        "{err}"
    );
}

#[test]
fn a_listing_path_holding_the_token_is_refused() {
    let case = Case::new();
    let hub = Hostile::start(|r, _| {
        let p = format!(
            "data/{}.jsonl",
            r.authorization
                .clone()
                .unwrap_or_default()
                .replace(' ', "_")
        );
        let listing =
            serde_json::json!([{"type": "file", "oid": "0".repeat(40), "size": 1, "path": p}]);
        normal(r, &listing)
    });
    let o = case.fetch(&hub, &[]);
    assert_refused(&case, &o, &["a listed path contains the Hub token"]);
    assert!(!case.cache().join("datasets--o--n").exists());
}

#[test]
fn absurd_server_waits_are_capped_then_the_budget_fails() {
    for (header, value) in [
        ("Retry-After", "1e30"),
        ("Retry-After", "inf"),
        ("RateLimit", "\"api\";r=0;t=1e30"),
    ] {
        let case = Case::new();
        let hub = Hostile::start(move |r, _| {
            if r.target.contains("/revision/") {
                with_headers(429, &[(header, value)], "")
            } else {
                normal(r, &good_listing())
            }
        });
        let t0 = Instant::now();
        let o = case.fetch(&hub, &["--retries", "2", "--retry-max-ms", "100"]);
        let err = assert_refused(
            &case,
            &o,
            &[
                "429",
                &format!("{header}: {value}"),
                "giving up after 3 attempts",
                "retry budget 2 spent",
                "the server asked to wait longer than the 100ms cap",
            ],
        );
        // Two capped waits of 100 ms, not 1e30 s.
        assert!(t0.elapsed() < Duration::from_secs(30), "{err}");
        assert_eq!(hub.requests().len(), 3, "{err}");
    }
}

#[test]
fn endless_api_bodies_are_cut_off_naming_the_url() {
    for (endpoint, url_part) in [
        ("/revision/", "/api/datasets/o/n/revision/main"),
        ("/tree/", "/api/datasets/o/n/tree/"),
    ] {
        let case = Case::new();
        let hub = Hostile::start(move |r, _| {
            if r.target.contains(endpoint) {
                Reply::Endless { status: 200 }
            } else {
                normal(r, &good_listing())
            }
        });
        let o = case.fetch(&hub, &[]);
        let err = assert_refused(&case, &o, &[url_part, "is longer than 67108864 bytes"]);
        assert!(err.contains(&hub.url), "{err}");
    }
    // An endless error body: the status is reported, the body read no further than 64 KiB.
    let case = Case::new();
    let hub = Hostile::start(|r, _| {
        if r.target.contains("/revision/") {
            Reply::Endless { status: 404 }
        } else {
            normal(r, &good_listing())
        }
    });
    let o = case.fetch(&hub, &[]);
    assert_refused(&case, &o, &["HTTP 404"]);
}

#[test]
fn a_pagination_loop_is_an_error_not_a_hang() {
    let case = Case::new();
    let hub = Hostile::start(|r, base| {
        if r.target.contains("/tree/") {
            let first =
                format!("{base}/api/datasets/o/n/tree/{COMMIT}?recursive=true&expand=false");
            let second = format!("{first}&cursor=2");
            let next = if r.target.contains("cursor=2") {
                first
            } else {
                second
            };
            Reply::Full {
                status: 200,
                headers: vec![("Link".into(), format!("<{next}>; rel=\"next\""))],
                body: good_listing().to_string().into_bytes(),
            }
        } else {
            normal(r, &good_listing())
        }
    });
    let o = case.fetch(&hub, &[]);
    assert_refused(
        &case,
        &o,
        &[
            "pagination loops",
            "`Link: rel=\"next\"`",
            "of page 2 points back to",
            "tree/1111111111111111111111111111111111111111?recursive=true&expand=false\"",
        ],
    );
    let trees = hub
        .requests()
        .iter()
        .filter(|r| r.target.contains("/tree/"))
        .count();
    assert_eq!(trees, 2);
}

#[test]
fn the_well_behaved_fake_hub_fetches() {
    // The control: the same server, honest, is fetched and locked (so the refusals above
    // are caused by the hostile parts alone).
    let case = Case::new();
    let hub = Hostile::start(|r, _| normal(r, &good_listing()));
    let o = case.fetch(&hub, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(case.manifest().with_extension("lock").exists());
    assert!(!case.download_log().contains(TOKEN));
}

/// A CDN that sends one byte every 200 ms: a stall (under --min-rate over --stall-secs),
/// retried, then an error naming the file — not a download that never ends.
#[test]
fn a_trickling_transfer_is_a_stall_naming_the_file() {
    let case = Case::new();
    let hub = Hostile::start(|r, _| {
        if r.target.starts_with("/datasets/o/n/resolve/") {
            Reply::Trickle {
                headers: vec![("X-Repo-Commit".into(), COMMIT.into())],
                body: CONTENT.to_vec(),
                every: Duration::from_millis(200),
            }
        } else {
            normal(r, &good_listing())
        }
    });
    let t0 = Instant::now();
    let o = case.fetch(
        &hub,
        &["--stall-secs", "1", "--min-rate", "100", "--retries", "1"],
    );
    assert_refused(
        &case,
        &o,
        &["data.jsonl", "stalled", "giving up after 2 attempts"],
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// `Location: //host/path` is another host (RFC 3986): followed without the token. On the
/// Hub host a relative Location keeps it.
#[test]
fn a_protocol_relative_redirect_leaves_the_hub_without_the_token() {
    let case = Case::new();
    let cdn = Hostile::start(|r, _| {
        if r.target.starts_with("/cdn/") {
            Reply::Full {
                status: 200,
                headers: vec![],
                body: CONTENT.to_vec(),
            }
        } else {
            json(404, serde_json::json!({"error": "nope"}))
        }
    });
    let cdn_host = cdn.url.trim_start_matches("http://").to_string();
    let hub = Hostile::start(move |r, _| {
        if r.target.starts_with("/datasets/o/n/resolve/") {
            with_headers(
                302,
                &[
                    ("X-Repo-Commit", COMMIT),
                    ("Location", &format!("//{cdn_host}/cdn/data.jsonl")),
                ],
                "",
            )
        } else {
            normal(r, &good_listing())
        }
    });
    let o = case.fetch(&hub, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = cdn.requests();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].authorization.is_none(),
        "the token went to {}",
        cdn.url
    );
    assert!(hub
        .requests()
        .iter()
        .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))));
}

/// A listing naming one path twice with different content is refused, naming the path.
#[test]
fn a_path_listed_twice_differently_is_refused() {
    let case = Case::new();
    let mut twice = good_listing();
    let other = b"other bytes\n";
    twice.as_array_mut().unwrap().push(serde_json::json!({
        "type": "file",
        "oid": dlm_data::util::git_blob_sha1(other),
        "size": other.len(),
        "path": "data.jsonl"
    }));
    let hub = Hostile::start(move |r, _| normal(r, &twice));
    let o = case.fetch(&hub, &[]);
    assert_refused(&case, &o, &["data.jsonl", "twice with different content"]);
}

/// `blobs/<oid>.incomplete` planted as a link to a file outside the cache: the link is
/// removed and the download goes into the cache; the outside file is untouched.
#[test]
fn a_partial_download_that_is_a_link_is_never_written_through() {
    let case = Case::new();
    let victim = case.dir.path().join("victim");
    let blobs = case.cache().join("datasets--o--n").join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let oid = dlm_data::util::git_blob_sha1(CONTENT);
    std::os::unix::fs::symlink(&victim, blobs.join(format!("{oid}.incomplete"))).unwrap();
    // And the blob itself as a link to the victim: never adopted.
    std::os::unix::fs::symlink(&victim, blobs.join(&oid)).unwrap();
    let before = case.outside_cache();
    let hub = Hostile::start(|r, _| normal(r, &good_listing()));
    let o = case.fetch(&hub, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let mut after = case.outside_cache();
    after.remove(&case.manifest().with_extension("lock"));
    assert_eq!(after, before);
    let blob = blobs.join(&oid);
    assert!(!std::fs::symlink_metadata(&blob)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&blob).unwrap(), CONTENT);
}

/// A lock entry edited to `../../…` is refused by `pack` like a listing path would be: the
/// file outside the cache is never packed.
#[test]
fn a_lock_path_leaving_the_cache_is_not_packed() {
    let case = Case::new();
    let hub = Hostile::start(|r, _| normal(r, &good_listing()));
    let o = case.fetch(&hub, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let secret = case.dir.path().join("secret.jsonl");
    std::fs::write(&secret, CONTENT).unwrap();
    let lock = case.manifest().with_extension("lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let ups = "../".repeat(8);
    let evil = format!(
        "{ups}{}",
        secret.display().to_string().trim_start_matches('/')
    );
    std::fs::write(&lock, text.replace("\"data.jsonl\"", &format!("{evil:?}"))).unwrap();
    let tok = case.dir.path().join("tok");
    dlm_data::fixtures::tokenizer::write_tokenizer(&tok).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_dlm-data"))
        .args(["pack", "--manifest"])
        .arg(case.manifest())
        .arg("--cache")
        .arg(case.cache())
        .arg("--tokenizer")
        .arg(&tok)
        .arg("--out")
        .arg(case.dir.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("refusing"), "{err}");
    assert!(!case.dir.path().join("out").join("index.json").exists());
}

/// SIGTERM in the middle of a download (paused after its first bytes): exit 143 at once, the
/// partial file kept as resume state, no temp file, no lock; the rerun completes.
#[test]
fn sigterm_mid_download_stops_cleanly_and_the_rerun_completes() {
    let case = Case::new();
    let slow = Hostile::start(|r, _| {
        if r.target.starts_with("/datasets/o/n/resolve/") {
            Reply::Trickle {
                headers: vec![("X-Repo-Commit".into(), COMMIT.into())],
                body: CONTENT.to_vec(),
                every: Duration::from_millis(20),
            }
        } else {
            normal(r, &good_listing())
        }
    });
    let pause = case.dir.path().join("paused");
    let mut c = case.fetch_cmd(&slow, &[]);
    c.env("DLM_TEST_PAUSE", "fetch-body")
        .env("DLM_TEST_PAUSE_FILE", &pause);
    let child = c.spawn().unwrap();
    let t0 = Instant::now();
    while !pause.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "never paused");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(!case.manifest().with_extension("lock").exists());
    let mut names = Vec::new();
    let mut stack = vec![case.cache()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
    assert!(
        names.iter().any(|n| n.ends_with(".incomplete")),
        "{names:?}"
    );
    let hub = Hostile::start(|r, _| normal(r, &good_listing()));
    let o = case.fetch(&hub, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(case.manifest().with_extension("lock").exists());
}
