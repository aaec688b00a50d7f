//! Diagnostics: the per-op step profile and the cache-window consistency check.

use anyhow::Result;

use super::{DeviceRun, Engine, Pass};

impl Engine {
    /// Device milliseconds per op kind for one sampler step over `b` prompts of `prompt_len`
    /// tokens (events between ops, no graph): what a step spends where. `window`: a dual-cache
    /// window step of `p.block_length` rows instead of a full pass.
    pub fn profile(
        &mut self,
        b: usize,
        prompt_len: usize,
        p: &DeviceRun,
        window: bool,
        hot_secs: f64,
    ) -> Result<Vec<(String, f64)>> {
        let prompts: Vec<Vec<u32>> = (0..b)
            .map(|r| {
                (0..prompt_len)
                    .map(|i| ((r * 31 + i * 7) % 1000) as u32 + 1)
                    .collect()
            })
            .collect();
        let keys = vec![1u64; b];
        let (b, s, _) = self.prepare(&prompts, &keys, p, window)?;
        let pass = if window {
            Pass::Window {
                w: p.gen.block_length,
            }
        } else {
            Pass::Full { cache: false }
        };
        // Warm-up (cuBLAS heuristics, module load), then the measured step.
        self.enqueue_step(b, s, prompt_len, p, pass)?;
        self.gpu.sync()?;
        // Hot: steps back to back for `hot_secs` first, so the measured step runs at the clock
        // a sustained run holds (power-capped), not at boost.
        let hot = std::time::Instant::now();
        while hot.elapsed().as_secs_f64() < hot_secs {
            self.reset_state(b)?;
            self.enqueue_step(b, s, prompt_len, p, pass)?;
            self.gpu.sync()?;
        }
        self.reset_state(b)?;
        *self.marks.borrow_mut() = Some(vec![("start", self.gpu.record()?)]);
        let r = self.enqueue_step(b, s, prompt_len, p, pass);
        let marks = self.marks.borrow_mut().take().unwrap_or_default();
        r?;
        self.gpu.sync()?;
        let mut acc: Vec<(String, f64)> = vec![];
        for w in marks.windows(2) {
            let ms = self.gpu.elapsed_ms(&w[0].1, &w[1].1)? as f64;
            match acc.iter_mut().find(|(n, _)| n == w[1].0) {
                Some(e) => e.1 += ms,
                None => acc.push((w[1].0.to_string(), ms)),
            }
        }
        for (_, e) in marks {
            self.gpu.destroy_event(e);
        }
        Ok(acc)
    }

    /// Diagnostics for the cache windows: with nothing committed (k = 0 every step), run one
    /// full pass that fills the KV cache, then a dual window (the block) and a prefix window
    /// (block → end) step; each must reproduce the full pass's block logits. Returns their
    /// relative errors against it.
    pub fn window_check(
        &mut self,
        prompts: &[Vec<u32>],
        keys: &[u64],
        p: &DeviceRun,
    ) -> Result<(f64, f64)> {
        let (b, s, lp) = self.prepare(prompts, keys, p, true)?;
        let blk = p.gen.block_length;
        // Nothing is committed: k = 0 at every step.
        self.gpu
            .write(&self.ws.as_ref().unwrap().ntrans, 0, &vec![0i32; 1024])?;
        let n = b * blk * self.cfg.vocab_size;
        let run = |pass: Pass| -> Result<Vec<f32>> {
            self.reset_state(b)?;
            let ws = self.ws.as_ref().unwrap();
            self.enqueue_step(b, s, lp, p, pass)?;
            let mut out = vec![0f32; n];
            self.gpu.read(&ws.logits, 0, &mut out)?;
            Ok(out)
        };
        let full = run(Pass::Full { cache: true })?;
        let dual = run(Pass::Window { w: blk })?;
        let prefix = run(Pass::Window { w: s - lp })?;
        let rel = |a: &[f32]| {
            let num: f64 = a
                .iter()
                .zip(&full)
                .map(|(x, y)| ((x - y) as f64).powi(2))
                .sum();
            let den: f64 = full.iter().map(|y| (*y as f64).powi(2)).sum();
            (num / den).sqrt()
        };
        Ok((rel(&dual), rel(&prefix)))
    }
}
