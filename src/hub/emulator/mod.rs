//! A Hub emulator for tests, benchmarks and `make demo`: serves fixture repos through the
//! real HTTP API (revision info, paginated tree, paths-info, resolve with a 302 to a second
//! "CDN" port carrying the X-Linked headers, Range/206, HEAD), with switchable faults, byte
//! and request counters, and a record of which requests carried an `Authorization` header.
//!
//! Hand-written HTTP/1.1 over tokio TCP rather than a server framework: full control over
//! faults (a connection dropped mid-body, a 200 answering a Range request, one flipped byte)
//! and no extra dependency. Use it in-process with [`Emulator::start`] (ephemeral ports) or
//! as `dlm-data hub-emulator --root DIR`, which prints its endpoint URL as the first stdout line.

mod server;
pub mod store;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;

/// A switchable fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Close the connection after half of the body.
    Drop,
    /// 429 with `Retry-After` and a `RateLimit` header.
    RateLimit,
    /// Answer a Range request with 200 and the whole file.
    NoRange,
    /// Flip one byte of the body.
    Corrupt,
    /// 500.
    ServerError,
    /// Add a `../` path to every tree listing (a hostile or broken Hub).
    DotDot,
}

impl Fault {
    /// The faults `all` enables (every transport fault a client must survive).
    pub const ALL: [Fault; 5] = [
        Fault::Drop,
        Fault::NoRange,
        Fault::Corrupt,
        Fault::RateLimit,
        Fault::ServerError,
    ];

    /// Parse `drop,429,no-range,corrupt,5xx,dotdot` or `all`.
    pub fn parse_list(s: &str) -> Result<Vec<Fault>> {
        let mut out = Vec::new();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "all" => out.extend(Fault::ALL),
                "drop" => out.push(Fault::Drop),
                "429" | "rate-limit" => out.push(Fault::RateLimit),
                "no-range" | "200" => out.push(Fault::NoRange),
                "corrupt" => out.push(Fault::Corrupt),
                "5xx" | "500" => out.push(Fault::ServerError),
                "dotdot" => out.push(Fault::DotDot),
                "none" => {}
                _ => {
                    return Err(crate::error::usage(format!(
                        "unknown fault {w:?} (drop, 429, no-range, corrupt, 5xx, dotdot, all)"
                    )))
                }
            }
        }
        Ok(out)
    }
}

/// Emulator settings (changeable while it runs via [`Emulator::set_options`]).
#[derive(Debug, Clone)]
pub struct Options {
    /// Tree entries per page (small, so pagination is exercised).
    pub page_size: usize,
    /// Each URL's n-th request gets the n-th applicable enabled fault, then requests succeed.
    pub faults: Vec<Fault>,
    /// Per-connection body rate limit in bytes/s (a throttled CDN).
    pub throttle_bytes_per_sec: Option<u64>,
    /// Seconds in `Retry-After` / RateLimit `t=` of a 429.
    pub retry_after_secs: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size: 5,
            faults: Vec::new(),
            throttle_bytes_per_sec: None,
            retry_after_secs: 1,
        }
    }
}

/// Which port answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Hub,
    Cdn,
}

/// One request as the emulator saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub host: Host,
    pub method: String,
    /// Path and query as sent.
    pub target: String,
    /// The `Authorization` header value, if any (tests check where a token went).
    pub authorization: Option<String>,
    pub range: Option<String>,
    pub status: u16,
    /// When the request arrived.
    pub at: std::time::Instant,
}

pub(crate) struct Shared {
    pub store: store::Store,
    pub opts: Mutex<Options>,
    pub fault_counts: Mutex<HashMap<String, usize>>,
    pub records: Mutex<Vec<RequestRecord>>,
    /// File-content bytes written to sockets (resolve + CDN bodies).
    pub file_bytes: AtomicU64,
    pub hub_url: String,
    pub cdn_url: String,
}

impl Shared {
    /// The fault for the next request to `key`, among the faults applicable to it.
    pub fn next_fault(&self, key: &str, applicable: &[Fault]) -> Option<Fault> {
        let opts = self.opts.lock().unwrap();
        let list: Vec<Fault> = opts
            .faults
            .iter()
            .copied()
            .filter(|f| applicable.contains(f))
            .collect();
        drop(opts);
        if list.is_empty() {
            return None;
        }
        let mut counts = self.fault_counts.lock().unwrap();
        let n = counts.entry(key.to_string()).or_insert(0);
        let f = list.get(*n).copied();
        *n += 1;
        f
    }
}

/// A running emulator (stopped on drop).
pub struct Emulator {
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Emulator {
    /// Start on ephemeral loopback ports.
    pub fn start(root: &Path, opts: Options) -> Result<Emulator> {
        Self::start_on(root, opts, "127.0.0.1", 0, 0)
    }

    /// Start on `host:port` (hub) and `host:cdn_port` (CDN); 0 picks free ports.
    pub fn start_on(
        root: &Path,
        opts: Options,
        host: &str,
        port: u16,
        cdn_port: u16,
    ) -> Result<Emulator> {
        if !root.is_dir() {
            bail!("hub-emulator: root {} is not a directory", root.display());
        }
        let hub = std::net::TcpListener::bind((host, port))
            .with_context(|| format!("binding {host}:{port}"))?;
        let cdn = std::net::TcpListener::bind((host, cdn_port))
            .with_context(|| format!("binding {host}:{cdn_port}"))?;
        hub.set_nonblocking(true)?;
        cdn.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            store: store::Store::new(root),
            opts: Mutex::new(opts),
            fault_counts: Mutex::new(HashMap::new()),
            records: Mutex::new(Vec::new()),
            file_bytes: AtomicU64::new(0),
            hub_url: format!("http://{}", hub.local_addr()?),
            cdn_url: format!("http://{}", cdn.local_addr()?),
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("hub-emulator".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("emulator runtime");
                rt.block_on(async move {
                    let hub = tokio::net::TcpListener::from_std(hub).expect("hub listener");
                    let cdn = tokio::net::TcpListener::from_std(cdn).expect("cdn listener");
                    tokio::select! {
                        _ = server::serve(sh.clone(), hub, Host::Hub) => {}
                        _ = server::serve(sh, cdn, Host::Cdn) => {}
                        _ = rx => {}
                    }
                });
                rt.shutdown_background();
            })?;
        Ok(Emulator {
            shared,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The Hub endpoint (what `HF_ENDPOINT` should be).
    pub fn endpoint(&self) -> &str {
        &self.shared.hub_url
    }

    /// The CDN base URL (LFS redirects point here).
    pub fn cdn_endpoint(&self) -> &str {
        &self.shared.cdn_url
    }

    pub fn options(&self) -> Options {
        self.shared.opts.lock().unwrap().clone()
    }

    /// Replace the options; fault counters restart so each URL sees the new faults afresh.
    pub fn set_options(&self, opts: Options) {
        *self.shared.opts.lock().unwrap() = opts;
        self.shared.fault_counts.lock().unwrap().clear();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.records.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.records.lock().unwrap().len()
    }

    /// File-content bytes served so far (resolve bodies and CDN bodies).
    pub fn file_bytes_served(&self) -> u64 {
        self.shared.file_bytes.load(Ordering::SeqCst)
    }

    /// Zero the counters and the request record.
    pub fn reset_counters(&self) {
        self.shared.records.lock().unwrap().clear();
        self.shared.file_bytes.store(0, Ordering::SeqCst);
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `dlm-data hub-emulator --root DIR [--port P] [--cdn-port Q] [--faults LIST]`
#[derive(Args, Debug, Clone)]
pub struct EmulatorArgs {
    /// Directory of fixture repos (`<root>/<owner>/<name>/...`).
    #[arg(long)]
    pub root: PathBuf,
    /// Hub port (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// CDN port (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub cdn_port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Faults: comma list of drop, 429, no-range, corrupt, 5xx, dotdot, or `all`.
    #[arg(long, default_value = "")]
    pub faults: String,
    /// Tree entries per page.
    #[arg(long, default_value_t = 5, value_parser = crate::sizes::usize_in(1, 10_000))]
    pub page_size: usize,
    /// Per-connection body rate limit, MB/s (a throttled CDN).
    #[arg(long)]
    pub throttle_mbps: Option<f64>,
    /// Seconds in Retry-After of injected 429s.
    #[arg(long, default_value_t = 1)]
    pub retry_after: u64,
    /// Write the project's fixture repos into --root first (when it holds none).
    #[arg(long)]
    pub fixtures: bool,
    /// With --fixtures: also a repo `dlm-data/large` with one file of this many MB.
    #[arg(long)]
    pub large_mb: Option<u64>,
}

/// Serve `--root` until killed. `--fixtures` was handled by the caller ([`crate::cli`] writes
/// [`crate::fixtures`]' repos first), so the emulator never depends on the fixture generator.
pub fn run(args: EmulatorArgs) -> Result<()> {
    let opts = Options {
        page_size: args.page_size.max(1),
        faults: Fault::parse_list(&args.faults)?,
        throttle_bytes_per_sec: args.throttle_mbps.map(|m| (m * 1e6) as u64),
        retry_after_secs: args.retry_after,
    };
    let emu = Emulator::start_on(&args.root, opts, &args.host, args.port, args.cdn_port)?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", emu.endpoint())?;
    out.flush()?;
    eprintln!(
        "hub-emulator: serving {} at {} (CDN {})",
        args.root.display(),
        emu.endpoint(),
        emu.cdn_endpoint()
    );
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
