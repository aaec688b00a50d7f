//! The fixture tree (`dlm-data fixtures`) made once per test binary, a recursive copy, and the
//! README's world — its working directory, its commands, its pipeline file — that the
//! pipeline, nightly-run and cron-contract tests share.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use dlm_data::hub::emulator::{Emulator, Options};

/// `dlm-data fixtures` once per test binary.
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap().keep();
        let o = Command::new(env!("CARGO_BIN_EXE_dlm-data"))
            .args(["fixtures", "--out"])
            .arg(d.join("fx"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        d.join("fx")
    })
}

/// Copy the tree at `from` to `to` (directories and regular files).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// `root/manifests/`: copies of the shipped manifests the README's pipeline names.
pub fn copy_manifests(root: &Path) {
    std::fs::create_dir_all(root.join("manifests")).unwrap();
    for m in ["base", "stage1", "mcq", "eval-reference"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("manifests/{m}.toml")),
            root.join(format!("manifests/{m}.toml")),
        )
        .unwrap();
    }
}

/// The binary, run in `dir` against the hub emulator `emu` with its own HF cache under
/// `root`: warnings only, no colour, no token, not offline.
pub fn hub_cmd(dir: &Path, emu: &Emulator, root: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dlm-data"));
    c.current_dir(dir)
        .env("HF_ENDPOINT", emu.endpoint())
        .env("HF_HOME", root.join("hf-home"))
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    c
}

/// A working directory laid out as the README assumes: manifests/ (copies of the shipped
/// ones), the fixture checkpoints standing in for training (ckpt/stage1, ckpt/stage3) and the
/// teacher (hf_mcq), an emulator serving the fixture hub.
pub struct Work {
    pub dir: tempfile::TempDir,
    pub emu: Emulator,
}

pub fn work() -> Work {
    let fx = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_manifests(root);
    copy_dir(&fx.join("checkpoints/stage1"), &root.join("ckpt/stage1"));
    copy_dir(&fx.join("checkpoints/stage3"), &root.join("ckpt/stage3"));
    copy_dir(&fx.join("teacher"), &root.join("hf_mcq"));
    let emu = Emulator::start(&fx.join("hub"), Options::default()).unwrap();
    Work { dir, emu }
}

impl Work {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
    pub fn cmd(&self) -> Command {
        hub_cmd(self.root(), &self.emu, self.root())
    }
    pub fn run(&self, args: &[String]) -> Output {
        self.cmd().args(args).output().unwrap()
    }
}

/// The README's "pipeline at a glance" block as argument vectors (continuations joined,
/// comments dropped, `dlm-data` removed), for this world: TOK is the fixture tokenizer, and
/// distill runs the tiny teacher on the CPU over a few prompts.
pub fn readme_commands() -> Vec<Vec<String>> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let at = text
        .find("## The pipeline at a glance")
        .expect("README has its pipeline section");
    let block = &text[at..];
    let start = block.find("```sh\n").unwrap() + 6;
    let end = start + block[start..].find("```").unwrap();
    let mut cmds = Vec::new();
    let mut cur = String::new();
    for line in block[start..end].lines() {
        let code = line.split(" #").next().unwrap().trim_end();
        if let Some(c) = code.strip_suffix('\\') {
            cur.push_str(c);
            cur.push(' ');
            continue;
        }
        cur.push_str(code);
        let words: Vec<String> = cur.split_whitespace().map(String::from).collect();
        cur.clear();
        if words.first().map(String::as_str) == Some("dlm-data") {
            cmds.push(localised(&words[1..]));
        }
    }
    cmds
}

/// One README command for this world (see [`readme_commands`]).
fn localised(words: &[String]) -> Vec<String> {
    let tok = fixtures().join("tokenizer").display().to_string();
    let mut out = Vec::new();
    let mut it = words.iter().cloned();
    while let Some(a) = it.next() {
        if a == "TOK" {
            out.push(tok.clone());
        } else if a == "--device" {
            it.next();
            out.extend(
                [
                    "--device",
                    "cpu",
                    "--limit",
                    "6",
                    "--gen-length",
                    "16",
                    "--block-length",
                    "8",
                    "--steps",
                    "16",
                    "--batch-size",
                    "3",
                ]
                .map(String::from),
            );
        } else {
            out.push(a);
        }
    }
    out
}

/// The README's pipeline as a `run` pipeline file over `tokenizer`, distilling the tiny
/// teacher on the CPU over a few prompts.
pub fn readme_pipeline(tokenizer: &str) -> String {
    format!(
        r#"
version = 1
tokenizer = "{tokenizer}"

[base]
manifest = "manifests/base.toml"
local_dir = "models/base"

[pack]
manifest = "manifests/stage1.toml"
out = "shards/stage1"
seq_len = 256

[mcq]
manifest = "manifests/mcq.toml"
out = "shards/mcq"

[decontam]
against = ["manifests/eval-reference.toml"]

[distill]
teacher = "hf_mcq"
out = "distilled.json"
gen_length = 16
block_length = 8
steps = 16
batch_size = 3
limit = 6
"#
    )
}

/// Every regular file under `dir`, by its path relative to `dir`.
pub fn files_under(dir: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, PathBuf>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(root, &e.path(), out);
            } else if ft.is_file() {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, e.path());
            }
        }
    }
    let mut m = BTreeMap::new();
    walk(dir, dir, &mut m);
    m
}

/// A file's sha256 and modification time.
pub fn sha_and_mtime(p: &Path) -> (String, std::time::SystemTime) {
    (
        dlm_data::util::sha256_file(p).unwrap(),
        std::fs::metadata(p).unwrap().modified().unwrap(),
    )
}

/// The steps of `run --json`'s line: step → status.
pub fn statuses(v: &serde_json::Value) -> BTreeMap<String, String> {
    v["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps in {v}"))
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `run --json`'s steps are exactly `want` (step, status).
pub fn expect(v: &serde_json::Value, want: &[(&str, &str)]) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(statuses(v), want, "{v}");
}

/// The paths whose values differ between two snapshots (or that only one has), sorted.
pub fn changed<V: PartialEq>(a: &BTreeMap<String, V>, b: &BTreeMap<String, V>) -> Vec<String> {
    let mut v: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    v.sort();
    v.dedup();
    v
}
