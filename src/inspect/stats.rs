//! What `inspect` counts: rows, tokens and documents in total and per source, and a
//! power-of-two length histogram — one typed summary printed as text or as one JSON line.

use std::collections::BTreeMap;

use serde::Serialize;

/// Counts of one source.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SourceStats {
    pub rows: u64,
    pub tokens: u64,
    pub documents: u64,
}

/// Lengths in power-of-two buckets: bucket `b > 0` holds `[2^(b-1), 2^b)`, bucket 0 holds 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    counts: Vec<u64>,
    pub n: u64,
    pub sum: u64,
    pub min: Option<u64>,
    pub max: u64,
}

/// One non-empty bucket: lengths `min..=max` (inclusive), `count` of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    pub min: u64,
    pub max: u64,
    pub count: u64,
}

impl Histogram {
    pub fn add(&mut self, len: u64) {
        let b = (u64::BITS - len.leading_zeros()) as usize;
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.n += 1;
        self.sum += len;
        self.min = Some(self.min.map_or(len, |m| m.min(len)));
        self.max = self.max.max(len);
    }

    /// The buckets from the first non-empty one to the last, empty ones in between included.
    pub fn buckets(&self) -> Vec<Bucket> {
        let first = self.counts.iter().position(|&c| c > 0);
        let Some(first) = first else { return vec![] };
        (first..self.counts.len())
            .map(|b| {
                let (min, max) = if b == 0 {
                    (0, 0)
                } else {
                    (1u64 << (b - 1), (1u64 << (b - 1)).saturating_mul(2) - 1)
                };
                Bucket {
                    min,
                    max,
                    count: self.counts[b],
                }
            })
            .collect()
    }

    /// Text bars, one line per bucket, the longest `width` characters.
    pub fn render(&self, width: usize) -> String {
        let buckets = self.buckets();
        let top = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
        let mut s = String::new();
        for b in &buckets {
            let bar = ((b.count as f64 / top as f64) * width as f64).ceil() as usize;
            s.push_str(&format!(
                "  {:>9} – {:<9} {:>9}  {}\n",
                b.min,
                b.max,
                b.count,
                "#".repeat(if b.count > 0 { bar.max(1) } else { 0 })
            ));
        }
        s
    }
}

impl Serialize for Histogram {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({
            "n": self.n,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "mean": if self.n > 0 { (self.sum as f64 / self.n as f64 * 100.0).round() / 100.0 } else { 0.0 },
            "buckets": self.buckets(),
        })
        .serialize(s)
    }
}

/// The summary of one inspected path.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub path: String,
    /// `pretrain`, `sft`, `prompts` or `distilled`.
    pub kind: String,
    /// Shard format (shard directories only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    pub shards: u64,
    pub rows: u64,
    pub tokens: u64,
    pub documents: u64,
    pub per_source: BTreeMap<String, SourceStats>,
    /// What the histogram measures (e.g. `segment tokens`, `row tokens`, `response tokens`).
    pub lengths_of: String,
    pub lengths: Histogram,
    /// Kind-specific counts (stop reasons, accuracy, index.json cross-checks, ...).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Stats {
    pub fn source(&mut self, name: &str) -> &mut SourceStats {
        self.per_source.entry(name.to_string()).or_default()
    }

    /// The human summary printed after the rows.
    pub fn render(&self) -> String {
        let mut s = format!("== {} ({}", self.path, self.kind);
        if let Some(f) = &self.format {
            s.push_str(&format!(", {f}, {} shards", self.shards));
        }
        s.push_str(&format!(
            ")\nrows {}  tokens {}  documents {}\n",
            self.rows, self.tokens, self.documents
        ));
        if !self.per_source.is_empty() {
            s.push_str(&format!(
                "{:<24} {:>10} {:>14} {:>10}\n",
                "source", "rows", "tokens", "documents"
            ));
            for (name, c) in &self.per_source {
                s.push_str(&format!(
                    "{:<24} {:>10} {:>14} {:>10}\n",
                    name, c.rows, c.tokens, c.documents
                ));
            }
        }
        for (k, v) in &self.extra {
            s.push_str(&format!("{k}: {v}\n"));
        }
        if self.lengths.n > 0 {
            s.push_str(&format!(
                "{} (n {}, min {}, max {}, mean {:.1}):\n",
                self.lengths_of,
                self.lengths.n,
                self.lengths.min.unwrap_or(0),
                self.lengths.max,
                self.lengths.sum as f64 / self.lengths.n as f64
            ));
            s.push_str(&self.lengths.render(40));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        let mut h = Histogram::default();
        for l in [0, 1, 2, 3, 4, 7, 8, 100] {
            h.add(l);
        }
        let b = h.buckets();
        assert_eq!(
            b[0],
            Bucket {
                min: 0,
                max: 0,
                count: 1
            }
        );
        assert_eq!(
            b[1],
            Bucket {
                min: 1,
                max: 1,
                count: 1
            }
        );
        assert_eq!(
            b[2],
            Bucket {
                min: 2,
                max: 3,
                count: 2
            }
        );
        assert_eq!(
            b[3],
            Bucket {
                min: 4,
                max: 7,
                count: 2
            }
        );
        assert_eq!(
            b[4],
            Bucket {
                min: 8,
                max: 15,
                count: 1
            }
        );
        assert_eq!(
            b.last().unwrap(),
            &Bucket {
                min: 64,
                max: 127,
                count: 1
            }
        );
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 8);
        assert_eq!((h.min, h.max, h.n), (Some(0), 100, 8));
        // Empty buckets between are kept, none before the first.
        let mut g = Histogram::default();
        g.add(5);
        g.add(40);
        let b = g.buckets();
        assert_eq!(b.len(), 4);
        assert_eq!(b[0].min, 4);
        assert_eq!(b[1].count, 0);
    }
}
