//! Loading the BPE model from tokenizer.json: the options the fast path refuses, the symbol
//! alphabet, the merge table and the proofs it allows (the SentencePiece run split).

#[allow(unused_imports)]
use super::cache::*;
#[allow(unused_imports)]
use super::hasher::*;
#[allow(unused_imports)]
use super::merge::*;
use super::*;

/// The model options the fast path refuses.
pub(super) fn check_model(m: &ModelJson<'_>) -> Result<()> {
    if m.ty.as_deref().is_some_and(|t| t != "BPE") {
        bail!("model is not BPE");
    }
    if m.dropout.is_some_and(|d| d > 0.0) {
        bail!("BPE dropout");
    }
    for (k, v) in [
        ("continuing_subword_prefix", &m.continuing_subword_prefix),
        ("end_of_word_suffix", &m.end_of_word_suffix),
    ] {
        if v.as_deref().is_some_and(|s| !s.is_empty()) {
            bail!("{k}");
        }
    }
    Ok(())
}

/// The initial symbols' ids: the 256 byte symbols of a byte-level model, else the vocabulary's
/// one-char tokens with byte fallback / unk.
pub(super) fn alphabet_of(
    m: &ModelJson<'_>,
    vocab: &StrMap<&str, u32>,
    byte_level: bool,
) -> Result<Alphabet> {
    let unk = match m.unk_token.as_deref() {
        Some(u) => Some(*vocab.get(u).context("unk_token not in the vocabulary")?),
        None => None,
    };
    let byte_fallback = m.byte_fallback == Some(true);
    if byte_level {
        if byte_fallback {
            bail!("byte_fallback with a byte-level pre-tokenizer");
        }
        let b2c = byte_to_char();
        let mut ids = [0u32; 256];
        for b in 0..256 {
            let mut buf = [0u8; 4];
            ids[b] = *vocab
                .get(&*b2c[b].encode_utf8(&mut buf))
                .with_context(|| format!("byte {b} has no symbol"))?;
        }
        return Ok(Alphabet::Bytes(ids));
    }
    let mut ascii = [NONE; 128];
    let mut other = FxMap::default();
    for (t, &id) in vocab {
        let mut cs = t.chars();
        if let (Some(c), None) = (cs.next(), cs.next()) {
            if (c as u32) < 128 {
                ascii[c as usize] = id;
            } else {
                other.insert(c, id);
            }
        }
    }
    let fallback = if byte_fallback {
        let mut f = Box::new([0u32; 256]);
        for b in 0..256 {
            f[b] = *vocab
                .get(format!("<0x{b:02X}>").as_str())
                .with_context(|| format!("byte_fallback without <0x{b:02X}>"))?;
        }
        Some(f)
    } else {
        None
    };
    Ok(Alphabet::Chars {
        ascii,
        other,
        fallback,
        unk,
        fuse_unk: m.fuse_unk == Some(true),
    })
}

/// The merge table and what the load-time proofs read off the merges.
pub(super) struct MergeScan {
    pub(super) merges: FxMap<u64, u64>,
    /// The chars that precede `seg_rep` inside some merge result.
    pub(super) seg_left: FxSet<char>,
    /// Some merge involves a newline symbol ('\n' itself, or its byte-fallback token).
    pub(super) newline_merges: bool,
    /// Every merge result holding `run_rep` has a [`RunSplit`] shape.
    pub(super) run_ok: bool,
    /// [`RunSplit::threshold`].
    pub(super) threshold: u32,
}

/// The merges as (left << 32 | right) → (rank << 32 | merged id), with the facts the
/// segmentation (`seg_rep`) and run-split (`run_rep`) proofs need.
pub(super) fn scan_merges(
    merge_list: &[(Cow<'_, str>, Cow<'_, str>)],
    vocab: &StrMap<&str, u32>,
    run_rep: Option<char>,
    seg_rep: Option<char>,
) -> Result<MergeScan> {
    let mut s = MergeScan {
        merges: FxMap::default(),
        seg_left: FxSet::default(),
        newline_merges: false,
        run_ok: run_rep.is_some(),
        threshold: u32::MAX,
    };
    s.merges.reserve(merge_list.len());
    let mut merged = String::new();
    for (rank, (a, b)) in merge_list.iter().enumerate() {
        let ia = *vocab.get(a.as_ref()).context("merge token not in vocab")?;
        let ib = *vocab.get(b.as_ref()).context("merge token not in vocab")?;
        merged.clear();
        merged.push_str(a);
        merged.push_str(b);
        let im = *vocab
            .get(merged.as_str())
            .context("merged token not in vocab")?;
        // The crate collects into a map: a later duplicate overwrites an earlier one.
        s.merges.insert(
            (ia as u64) << 32 | ib as u64,
            (rank as u64) << 32 | im as u64,
        );
        if a.contains('\n') || b.contains('\n') || a.as_ref() == "<0x0A>" || b.as_ref() == "<0x0A>"
        {
            s.newline_merges = true;
        }
        if let Some(rep) = run_rep {
            if merged.contains(rep) {
                let tail = merged.strip_prefix(rep).unwrap_or("");
                let pure = merged.chars().all(|c| c == rep);
                if !pure && (tail.is_empty() || tail.contains(rep) || !merged.starts_with(rep)) {
                    s.run_ok = false;
                }
            }
            if a.ends_with(rep) && b.starts_with(rep) {
                s.threshold = s.threshold.min(rank as u32);
            }
        }
        if let Some(rep) = seg_rep {
            let mut prev: Option<char> = None;
            for c in merged.chars() {
                if c == rep {
                    if let Some(p) = prev {
                        s.seg_left.insert(p);
                    }
                }
                prev = Some(c);
            }
        }
    }
    Ok(s)
}

/// `ignore_merges`: every vocabulary token as the word the pipeline hands over (raw bytes for
/// byte-level, the normalized string otherwise).
pub(super) fn whole_words(vocab: &StrMap<&str, u32>, byte_level: bool) -> FxMap<Vec<u8>, u32> {
    let mut w = FxMap::default();
    if byte_level {
        let mut c2b: HashMap<char, u8> = HashMap::new();
        for (b, c) in byte_to_char().iter().enumerate() {
            c2b.insert(*c, b as u8);
        }
        for (tok, id) in vocab {
            let bytes: Option<Vec<u8>> = tok.chars().map(|c| c2b.get(&c).copied()).collect();
            if let Some(bytes) = bytes {
                w.insert(bytes, *id);
            }
        }
    } else {
        for (tok, id) in vocab {
            w.insert(tok.as_bytes().to_vec(), *id);
        }
    }
    w
}

/// The rest of [`RunSplit`]'s proof: it reads token strings through ids, so ids must name one
/// string each, and no initial symbol other than `rep`'s own may contain `rep` (unk, `<0xNN>`).
pub(super) fn run_proof_holds(
    m: &ModelJson<'_>,
    vocab: &StrMap<&str, u32>,
    alphabet: &Alphabet,
    rep: char,
) -> bool {
    let mut ids: Vec<u32> = vocab.values().copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let Alphabet::Chars {
        ascii,
        other,
        fallback,
        ..
    } = alphabet
    else {
        return false;
    };
    let has_id = if (rep as u32) < 128 {
        ascii[rep as usize] != NONE
    } else {
        other.contains_key(&rep)
    };
    has_id
        && ids.len() == vocab.len()
        && !m.unk_token.as_deref().is_some_and(|u| u.contains(rep))
        && !(fallback.is_some() && "<0x>0123456789ABCDEF".contains(rep))
}

impl Bpe {
    /// The model of a tokenizer.json `model` object, or why it is not supported exactly.
    /// `byte_level`: the pre-tokenizer maps bytes to GPT-2 characters. `seg_rep`: collect the
    /// chars that precede this char inside some merge result (for the SentencePiece
    /// segmentation proof in [`crate::tokenize::fast`]).
    pub fn from_model(m: &ModelJson<'_>, byte_level: bool, seg_rep: Option<char>) -> Result<Bpe> {
        check_model(m)?;
        let vocab_list = &m.vocab.as_ref().context("vocab")?.0;
        let merge_list = &m.merges.as_ref().context("merges")?.0;
        let mut vocab: StrMap<&str, u32> = StrMap::default();
        vocab.reserve(vocab_list.len());
        for (k, id) in vocab_list {
            vocab.insert(k.as_ref(), *id);
        }
        let alphabet = alphabet_of(m, &vocab, byte_level)?;
        // The run-split conditions (see [`RunSplit`]): char-level SentencePiece words only.
        let run_rep = seg_rep.filter(|_| !byte_level);
        let scan = scan_merges(merge_list, &vocab, run_rep, seg_rep)?;
        let whole = (m.ignore_merges == Some(true)).then(|| whole_words(&vocab, byte_level));
        // A newline symbol that no merge touches and that never becomes an unk (which
        // `fuse_unk` could fuse with its neighbours): character-level alphabets only.
        let newline_barrier = !byte_level
            && !scan.newline_merges
            && (vocab.contains_key("\n")
                || (matches!(
                    &alphabet,
                    Alphabet::Chars {
                        fallback: Some(_),
                        ..
                    }
                ) && vocab.contains_key("<0x0A>")));
        let run_rep =
            run_rep.filter(|&rep| scan.run_ok && run_proof_holds(m, &vocab, &alphabet, rep));
        let mut bpe = Bpe {
            alphabet,
            merges: scan.merges,
            whole,
            newline_barrier,
            run_split: None,
            seg_left: seg_rep.map(|_| scan.seg_left),
            vocab_len: vocab.len(),
            vocab: vocab
                .iter()
                .map(|(k, v)| (Box::<str>::from(*k), *v))
                .collect(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            shared: std::sync::OnceLock::new(),
            shared_words: std::sync::atomic::AtomicUsize::new(shared_words::DEFAULT_WORDS),
        };
        if let Some(rep) = run_rep {
            let rep_id = bpe.char_id(rep).expect("checked above");
            let mut heap = BinaryHeap::new();
            let runs = (0..=MAX_RUN)
                .map(|k| {
                    let mut syms = vec![Sym::new(rep_id); k];
                    let mut out = Vec::new();
                    bpe.merge(&mut syms, &mut out, &mut heap, 0);
                    out
                })
                .collect();
            bpe.run_split = Some(RunSplit {
                rep,
                threshold: scan.threshold,
                runs,
            });
        }
        Ok(bpe)
    }
}
