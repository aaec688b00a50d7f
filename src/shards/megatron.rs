//! Megatron-LM indexed dataset shards (`--format megatron`): `part-NNNNN.bin` (token ids,
//! little-endian, no header) + `part-NNNNN.idx` (`MMIDIDX` header), the layout of
//! `megatron/core/datasets/indexed_dataset.py`.
//!
//! Mapping: each row of the batch is one Megatron *document* and each `doc_offsets` segment of
//! it one *sequence* (`document_indices` = row boundaries, `sequence_lengths` = the segments).
//! `pack` hands this writer whole source documents, one per row (Megatron's own convention,
//! as `preprocess_data.py --append-eod` writes: one sequence per document, EOS appended), so
//! `GPTDataset` does the packing and every document boundary it crosses follows an EOS. SFT
//! rows are one document of two sequences, prompt and answer.
//! The `.idx` has no uint32 code: uint32 ids are written with code 4 (int32), byte-identical
//! for every id below 2^31 (checked); uint16 uses code 8.

use std::path::Path;

use anyhow::{anyhow, bail, ensure, Result};

use super::{Column, Dtype, EncodedShard, RowBatch, ShardEntry, ShardReader, ShardWriter};

/// The Megatron shard writer and reader (ids as `dtype`).
pub struct Megatron {
    pub dtype: Dtype,
}

impl ShardWriter for Megatron {
    fn encode(&self, n: usize, batch: &RowBatch) -> Result<EncodedShard> {
        let (bin, idx) = encode(batch, self.dtype)?;
        let p = prefix(n);
        Ok(EncodedShard {
            files: vec![(format!("{p}.bin"), bin), (format!("{p}.idx"), idx)],
            rows: batch.rows() as u64,
            tokens: batch.tokens(),
            mds: None,
        })
    }
}

impl ShardReader for Megatron {
    fn read(&self, dir: &Path, entry: &ShardEntry) -> Result<RowBatch> {
        read(&dir.join(&entry.file), self.dtype)
    }
}

pub const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

/// `part-00000` (the `.bin`/`.idx` prefix)
pub fn prefix(n: usize) -> String {
    format!("part-{n:05}")
}

/// Encode (.bin, .idx) for a batch.
pub fn encode(batch: &RowBatch, dtype: Dtype) -> Result<(Vec<u8>, Vec<u8>)> {
    let offsets = match batch.column("doc_offsets") {
        Some(Column::U32List(v)) => Some(v),
        _ => None,
    };
    let mut bin = Vec::with_capacity(batch.tokens() as usize * dtype.size());
    let mut lengths: Vec<i32> = Vec::new();
    let mut doc_idx: Vec<i64> = vec![0];
    for (r, row) in batch.input_ids.iter().enumerate() {
        for &x in row {
            match dtype {
                Dtype::U32 => {
                    ensure!(x < 1 << 31, "token id {x} does not fit Megatron int32");
                    bin.extend_from_slice(&x.to_le_bytes());
                }
                Dtype::U16 => {
                    let y = u16::try_from(x)
                        .map_err(|_| anyhow::anyhow!("token id {x} does not fit uint16"))?;
                    bin.extend_from_slice(&y.to_le_bytes());
                }
            }
        }
        match offsets {
            Some(o) => {
                for w in o[r].windows(2) {
                    ensure!(w[1] > w[0], "row {r}: doc_offsets not increasing");
                    lengths.push((w[1] - w[0]) as i32);
                }
            }
            None => lengths.push(row.len() as i32),
        }
        doc_idx.push(lengths.len() as i64);
    }
    let mut idx = Vec::new();
    idx.extend_from_slice(MAGIC);
    idx.extend_from_slice(&1u64.to_le_bytes());
    idx.push(match dtype {
        Dtype::U32 => 4,
        Dtype::U16 => 8,
    });
    idx.extend_from_slice(&(lengths.len() as u64).to_le_bytes());
    idx.extend_from_slice(&(doc_idx.len() as u64).to_le_bytes());
    for l in &lengths {
        idx.extend_from_slice(&l.to_le_bytes());
    }
    let mut ptr: i64 = 0;
    for l in &lengths {
        idx.extend_from_slice(&ptr.to_le_bytes());
        ptr += *l as i64 * dtype.size() as i64;
    }
    for d in &doc_idx {
        idx.extend_from_slice(&d.to_le_bytes());
    }
    Ok((bin, idx))
}

/// The `.idx` of a Megatron shard: (sequence lengths, document indices), checked against
/// its own header and for documents that walk the sequences in order.
pub fn read_idx(idx_path: &Path) -> Result<(Vec<u32>, Vec<u64>)> {
    let b = crate::bounded::read_regular(idx_path)?;
    let bad = || anyhow!("{}: not a Megatron .idx", idx_path.display());
    ensure!(b.len() >= 34 && &b[..9] == MAGIC, bad());
    let s = u64::from_le_bytes(b[18..26].try_into().unwrap());
    let d = u64::from_le_bytes(b[26..34].try_into().unwrap());
    // Checked: a hostile header must not overflow into a length that matches.
    let want = 12u64
        .checked_mul(s)
        .zip(8u64.checked_mul(d))
        .and_then(|(a, c)| a.checked_add(c)?.checked_add(34));
    ensure!(want == Some(b.len() as u64), bad());
    let (s, d) = (s as usize, d as usize);
    let lens: Vec<u32> = (0..s)
        .map(|i| i32::from_le_bytes(b[34 + 4 * i..38 + 4 * i].try_into().unwrap()))
        .map(|l| {
            u32::try_from(l)
                .map_err(|_| anyhow!("{}: negative sequence length {l}", idx_path.display()))
        })
        .collect::<Result<_>>()?;
    // Megatron's `IndexedDataset` reads each sequence at its pointer, not after the one
    // before: every pointer must be where the lengths before it put it (what this tool
    // writes), so a reader by pointer and a reader in order see the same tokens — and
    // together with the `.bin`'s size checked against the lengths, no pointer + length
    // lies past the `.bin`.
    let size: i64 = match b[17] {
        4 => 4,
        8 => 2,
        c => bail!(
            "{}: dtype code {c} (this tool writes 4, int32, or 8, uint16)",
            idx_path.display()
        ),
    };
    let mut want: i64 = 0;
    for (i, &l) in lens.iter().enumerate() {
        let at = 34 + 4 * s + 8 * i;
        let ptr = i64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        ensure!(
            ptr == want,
            "{}: sequence {i} (length {l}) points at byte {ptr} of {}, not {want} where the \
             lengths before it end: Megatron reads every sequence at its pointer",
            idx_path.display(),
            idx_path.with_extension("bin").display()
        );
        want = want.saturating_add(l as i64 * size);
    }
    let p = 34 + 12 * s;
    let docs: Vec<u64> = (0..d)
        .map(|i| i64::from_le_bytes(b[p + 8 * i..p + 8 + 8 * i].try_into().unwrap()) as u64)
        .collect();
    // Document indices must walk the sequences in order, and a document's tokens fit u32.
    for (k, w) in docs.windows(2).enumerate() {
        ensure!(
            w[0] <= w[1] && w[1] <= s as u64,
            "{}: document index {} ({}..{}) out of order or past the {s} sequences",
            idx_path.display(),
            k,
            w[0],
            w[1]
        );
        let sum: u64 = lens[w[0] as usize..w[1] as usize]
            .iter()
            .map(|&l| l as u64)
            .sum();
        ensure!(
            sum <= u32::MAX as u64,
            "{}: document {k} has {sum} tokens",
            idx_path.display()
        );
    }
    Ok((lens, docs))
}

/// The ids of a `.bin` as `dtype`.
pub fn read_bin(bin: &Path, dtype: Dtype) -> Result<Vec<u32>> {
    let bytes = crate::bounded::read_regular(bin)?;
    ensure!(
        bytes.len() % dtype.size() == 0,
        "{}: {} bytes is not a whole number of {} ids",
        bin.display(),
        bytes.len(),
        dtype.name()
    );
    Ok(match dtype {
        Dtype::U16 => bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect(),
        Dtype::U32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    })
}

/// A shard (`part-NNNNN.bin` and its `.idx`) as rows: one row per `.idx` document, its
/// `doc_offsets` the document's sequence boundaries.
pub fn read(bin: &Path, dtype: Dtype) -> Result<RowBatch> {
    let (lens, docs) = read_idx(&bin.with_extension("idx"))?;
    let toks = read_bin(bin, dtype)?;
    let (mut ids, mut offs) = (Vec::new(), Vec::new());
    let mut at = 0usize;
    for w in docs.windows(2) {
        let mut o = vec![0u32];
        for l in &lens[w[0] as usize..w[1] as usize] {
            o.push(o.last().unwrap() + l);
        }
        let n = *o.last().unwrap() as usize;
        ensure!(
            at + n <= toks.len(),
            "{}: .bin shorter than .idx says",
            bin.display()
        );
        ids.push(toks[at..at + n].to_vec());
        offs.push(o);
        at += n;
    }
    ensure!(
        at == toks.len(),
        "{}: .bin longer than .idx says",
        bin.display()
    );
    Ok(RowBatch {
        input_ids: ids,
        columns: vec![("doc_offsets".into(), Column::U32List(offs))],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_pointers() {
        let batch = RowBatch {
            input_ids: vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]],
            columns: vec![(
                "doc_offsets".into(),
                Column::U32List(vec![vec![0, 1, 4], vec![0, 4]]),
            )],
        };
        let (bin, idx) = encode(&batch, Dtype::U16).unwrap();
        assert_eq!(bin.len(), 16);
        assert_eq!(&idx[..9], MAGIC);
        assert_eq!(idx[17], 8);
        let s = u64::from_le_bytes(idx[18..26].try_into().unwrap());
        let d = u64::from_le_bytes(idx[26..34].try_into().unwrap());
        assert_eq!((s, d), (3, 3));
        let lens: Vec<i32> = (0..3)
            .map(|i| i32::from_le_bytes(idx[34 + 4 * i..38 + 4 * i].try_into().unwrap()))
            .collect();
        assert_eq!(lens, vec![1, 3, 4]);
        let p = 34 + 12;
        let ptrs: Vec<i64> = (0..3)
            .map(|i| i64::from_le_bytes(idx[p + 8 * i..p + 8 + 8 * i].try_into().unwrap()))
            .collect();
        assert_eq!(ptrs, vec![0, 2, 8]);
        assert_eq!(idx.len(), p + 24 + 24);
    }
}
