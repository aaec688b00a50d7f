//! `cargo run --release --example tokenize_bench -- TOKENIZER.json TEXTS.bin [PASSES]`: the
//! fast tokenizer alone, one thread, in process — the first (cold) pass and the fastest of the
//! warm passes, in ns per byte and ns per token, for A/B work on the tokenizer core where whole
//! `pack` runs are too noisy. TEXTS.bin: documents as u32-LE length + UTF-8 bytes.

use std::time::Instant;

use anyhow::{Context, Result};
use dlm_data::tokenize::fast::FastTokenizer;

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let tok = FastTokenizer::from_json(&std::fs::read_to_string(&a[1])?)?;
    let raw = std::fs::read(&a[2]).with_context(|| a[2].clone())?;
    let passes: usize = a.get(3).map_or(Ok(5), |p| p.parse())?;
    let mut docs = Vec::new();
    let mut p = 0;
    while p + 4 <= raw.len() {
        let n = u32::from_le_bytes(raw[p..p + 4].try_into()?) as usize;
        docs.push(std::str::from_utf8(&raw[p + 4..p + 4 + n])?);
        p += 4 + n;
    }
    let bytes: usize = docs.iter().map(|d| d.len()).sum();
    let mut best = f64::INFINITY;
    let mut toks = 0;
    for i in 0..passes {
        let t = Instant::now();
        toks = 0;
        for d in &docs {
            toks += tok.encode(d).len();
        }
        let s = t.elapsed().as_secs_f64();
        if i == 0 {
            println!(
                "cold pass: {:.3} s, {:.2} ns/byte",
                s,
                s * 1e9 / bytes as f64
            );
        } else {
            best = best.min(s);
        }
    }
    println!(
        "warm best of {}: {:.3} s, {:.2} ns/byte, {:.2} ns/token ({} bytes, {} tokens)",
        passes - 1,
        best,
        best * 1e9 / bytes as f64,
        best * 1e9 / toks as f64,
        bytes,
        toks
    );
    Ok(())
}
