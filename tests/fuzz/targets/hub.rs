//! The Hub's answers: tree listing pages, response headers (Retry-After, RateLimit `t=`,
//! pagination `Link`) and dataset cards (README YAML `configs:`). Seeds are the hub
//! emulator's real answers for the fixture repos (with its 429 fault on).

use std::io::{Read, Write};
use std::path::Path;

use anyhow::Result;
use dlm_data::hub::client::{next_link, parse_revision, read_entry_digests, TreeEntry};
use dlm_data::hub::configs::{files_for, infer_splits, parse_readme_configs};
use dlm_data::hub::names::check_repo_path;
use dlm_data::hub::retry::{server_wait, RetryPolicy};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::driver::Target;
use crate::mutate::{self, Text};

/// Raw HTTP/1.1 GET to the emulator: (head, body).
fn get(endpoint: &str, path: &str) -> Result<(String, Vec<u8>)> {
    let addr = endpoint.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let at = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no header end"))?;
    Ok((
        String::from_utf8_lossy(&buf[..at]).into_owned(),
        buf[at + 4..].to_vec(),
    ))
}

/// Every fixture repo's tree pages, with their response heads, plus its README.
struct HubSeeds {
    heads: Vec<String>,
    pages: Vec<Vec<u8>>,
    revisions: Vec<Vec<u8>>,
    readmes: Vec<Vec<u8>>,
    listing: Vec<String>,
}

fn hub_seeds(work: &Path) -> Result<HubSeeds> {
    let root = work.join("hub");
    std::fs::create_dir_all(&root)?;
    let repos = dlm_data::fixtures::datasets::write_hub_fixtures(&root)?;
    let opts = dlm_data::hub::emulator::Options {
        faults: vec![dlm_data::hub::emulator::Fault::RateLimit],
        retry_after_secs: 3,
        ..Default::default()
    };
    let emu = dlm_data::hub::emulator::Emulator::start(&root, opts)?;
    let ep = emu.endpoint().to_string();
    let mut out = HubSeeds {
        heads: vec![],
        pages: vec![],
        revisions: vec![],
        readmes: vec![],
        listing: vec![],
    };
    for r in repos.iter().take(4) {
        for _ in 0..2 {
            let (head, body) = get(&ep, &format!("/api/datasets/{}/revision/main", r.id))?;
            if !head.starts_with("HTTP/1.1 429") {
                out.revisions.push(body);
                break;
            }
        }
        let mut url = format!(
            "/api/datasets/{}/tree/{}?recursive=true&expand=false",
            r.id, r.commit
        );
        for _ in 0..4 {
            let (head, body) = get(&ep, &url)?;
            out.heads.push(head.clone());
            if head.starts_with("HTTP/1.1 429") {
                continue; // the fault: the retry gets the page
            }
            out.pages.push(body.clone());
            let page: Vec<TreeEntry> = serde_json::from_slice(&body)?;
            out.listing.extend(
                page.into_iter()
                    .filter(|e| e.kind == "file")
                    .map(|e| e.path),
            );
            let next = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("link").then(|| v.trim().to_string())
            });
            match next.and_then(|v| {
                v.split('>')
                    .next()
                    .map(|u| u.trim_start_matches('<').to_string())
            }) {
                Some(u) => url = u.trim_start_matches(&ep).to_string(),
                None => break,
            }
        }
        if let Ok(text) = std::fs::read(r.dir.join("README.md")) {
            out.readmes.push(text);
        }
    }
    anyhow::ensure!(
        !out.pages.is_empty() && !out.readmes.is_empty() && !out.revisions.is_empty(),
        "emulator gave no seeds"
    );
    Ok(out)
}

/// Response headers as `name: value` lines (the status line is skipped).
pub struct HubHeaders(Vec<Vec<u8>>);

fn header_map(input: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in input.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(i) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(&line[..i]),
            HeaderValue::from_bytes(line[i + 1..].trim_ascii()),
        ) else {
            continue;
        };
        h.append(k, v);
    }
    h
}

impl Target for HubHeaders {
    const TEXT: Option<Text> = Some(Text::Lines(mutate::HEADER_DICT));
    fn setup(work: &Path) -> Result<Self> {
        let s = hub_seeds(work)?;
        Ok(HubHeaders(
            s.heads.into_iter().map(String::into_bytes).collect(),
        ))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.0.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let h = header_map(input);
        let p = RetryPolicy::default();
        let wait = server_wait(&h);
        for attempt in [1, 2, 30, u32::MAX] {
            let d = p.delay(attempt, wait);
            assert!(
                d <= p.max,
                "delay {d:?} beyond the policy's cap {:?}",
                p.max
            );
        }
        if let Some(u) = next_link(&h) {
            let _ = u.len();
        }
        Ok(())
    }
}

/// `/api/datasets/{id}/revision/{rev}`: the commit a revision names.
pub struct HubRevision(Vec<Vec<u8>>);

impl Target for HubRevision {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        Ok(HubRevision(hub_seeds(work)?.revisions))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.0.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let sha = parse_revision("revision main of o/r", input)?;
        // What it returns names a snapshot directory: exactly 40 lowercase hex digits.
        assert!(
            sha.len() == 40 && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "accepted commit {sha:?}"
        );
        Ok(())
    }
}

/// One page of `/api/datasets/{id}/tree/{rev}` (a JSON array of entries).
pub struct HubTree(Vec<Vec<u8>>);

impl Target for HubTree {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(work: &Path) -> Result<Self> {
        Ok(HubTree(hub_seeds(work)?.pages))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.0.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let page: Vec<TreeEntry> = serde_json::from_slice(input)?;
        let cache = dlm_data::hub::cache::Cache::resolve(Some(Path::new("/cache-root")));
        let mut files = Vec::new();
        for mut e in page {
            check_repo_path(&e.path)?;
            // A listed path that passed the check must stay inside the snapshot.
            let p = cache.snapshot_path(
                dlm_data::manifest::Role::Train,
                "o/r",
                &"0".repeat(40),
                &e.path,
            );
            assert!(
                p.starts_with("/cache-root")
                    && !p
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir)),
                "accepted path {:?} leaves the cache: {}",
                e.path,
                p.display()
            );
            if e.kind == "file" {
                // Blob and lock names come only from digests read by the one rule (any case in,
                // lowercase out), inside the cache.
                if read_entry_digests(&mut e).is_ok() {
                    let etag = e.lfs.as_ref().map_or(e.oid.as_str(), |l| l.oid.as_str());
                    let refused = |e: anyhow::Error| -> std::path::PathBuf {
                        panic!("digest {etag:?} passed the listing check, refused later: {e:#}")
                    };
                    for p in [
                        cache
                            .blob_path(dlm_data::manifest::Role::Train, "o/r", etag)
                            .unwrap_or_else(refused),
                        cache
                            .lock_path(dlm_data::manifest::Role::Train, "o/r", etag)
                            .unwrap_or_else(refused),
                    ] {
                        assert!(
                            p.starts_with("/cache-root")
                                && p.file_name()
                                    .is_some_and(|n| n.to_string_lossy().starts_with(etag)),
                            "digest {etag:?} gives {}",
                            p.display()
                        );
                    }
                }
                files.push(e.path);
            }
        }
        let splits = infer_splits(&files);
        for (split, fs) in &splits {
            let _ = dlm_data::policy::is_eval_name(split);
            let _ = fs.len();
        }
        Ok(())
    }
}

/// A dataset card: YAML front matter with `configs:` → files per config/split.
pub struct HubReadme {
    readmes: Vec<Vec<u8>>,
    listing: Vec<String>,
}

impl Target for HubReadme {
    const TEXT: Option<Text> = Some(Text::Lines(mutate::YAML_DICT));
    fn setup(work: &Path) -> Result<Self> {
        let s = hub_seeds(work)?;
        Ok(HubReadme {
            readmes: s.readmes,
            listing: s.listing,
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.readmes.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let text = std::str::from_utf8(input)?;
        let Some(configs) = parse_readme_configs(text)? else {
            return Ok(());
        };
        for c in configs.iter().take(8) {
            for (split, _) in c.splits.iter().take(8) {
                let _ = files_for(&self.listing, Some(text), &c.name, split, None);
            }
        }
        Ok(())
    }
}
