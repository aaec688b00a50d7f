//! A borrowed, typed view of `tokenizer.json` for the fast path: the vocabulary and merges
//! (nearly all of a 2–10 MB file) are read as slices of the file's text, with no `Value` tree
//! and no copy, and the small sections the fast path does not interpret (decoder,
//! post-processor, padding, truncation) are still checked by the `tokenizers` crate's own
//! deserializers, so a file the crate would refuse is refused here too.
//!
//! Loading this way instead of `Tokenizer::from_str` took `pack`'s start-up on Mistral's
//! 1.9 MB file from ~95 ms to ~15 ms (bench/results/tokenizers.md).

use std::borrow::Cow;
use std::fmt;

use anyhow::{bail, Context, Result};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The top level of tokenizer.json.
#[derive(Deserialize)]
pub struct TokJson<'a> {
    #[serde(borrow)]
    pub version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub normalizer: Option<&'a RawValue>,
    #[serde(borrow)]
    pub pre_tokenizer: Option<&'a RawValue>,
    #[serde(borrow)]
    pub post_processor: Option<&'a RawValue>,
    #[serde(borrow)]
    pub decoder: Option<&'a RawValue>,
    #[serde(borrow)]
    pub truncation: Option<&'a RawValue>,
    #[serde(borrow)]
    pub padding: Option<&'a RawValue>,
    #[serde(default)]
    pub added_tokens: Vec<AddedJson>,
    /// Read by [`ModelJson::parse`] once its type is known to be BPE.
    #[serde(borrow, rename = "model")]
    pub model_raw: &'a RawValue,
}

/// One `added_tokens` entry (the crate's `AddedTokenWithId`, which it does not export).
#[derive(Deserialize)]
pub struct AddedJson {
    #[allow(dead_code)]
    pub id: u32,
    #[serde(flatten)]
    pub token: tokenizers::AddedToken,
}

/// The `model` object, as far as a BPE needs it (a missing key reads as `None`: serde's rule
/// for `Option` fields).
#[derive(Deserialize)]
pub struct ModelJson<'a> {
    #[serde(rename = "type", borrow)]
    pub ty: Option<Cow<'a, str>>,
    pub dropout: Option<f64>,
    #[serde(borrow)]
    pub unk_token: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub continuing_subword_prefix: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub end_of_word_suffix: Option<Cow<'a, str>>,
    pub fuse_unk: Option<bool>,
    pub byte_fallback: Option<bool>,
    pub ignore_merges: Option<bool>,
    #[serde(borrow)]
    pub vocab: Option<Vocab<'a>>,
    #[serde(borrow)]
    pub merges: Option<Merges<'a>>,
}

/// `vocab` in file order (a later duplicate key wins, as in the crate's map).
pub struct Vocab<'a>(pub Vec<(Cow<'a, str>, u32)>);

/// `merges` as (left, right) pairs: "a b" strings or ["a", "b"] arrays.
pub struct Merges<'a>(pub Vec<(Cow<'a, str>, Cow<'a, str>)>);

/// A string borrowed from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Vocab<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Vocab<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of token to id")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Vocab<'a>, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0));
                while let Some((k, v)) = m.next_entry::<Str<'a>, u32>()? {
                    out.push((k.0, v));
                }
                Ok(Vocab(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// One merges entry.
enum MergeEntry<'a> {
    Joined(Cow<'a, str>),
    Pair(Cow<'a, str>, Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for MergeEntry<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = MergeEntry<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"a b\" or [\"a\", \"b\"]")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MergeEntry::Joined(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MergeEntry::Joined(Cow::Owned(v.to_string())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let a: Str<'a> = s
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let b: Str<'a> = s
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if s.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(MergeEntry::Pair(a.0, b.0))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Merges<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let entries = Vec::<MergeEntry<'a>>::deserialize(d)?;
        let pairs = entries.into_iter().map(|e| match e {
            MergeEntry::Pair(a, b) => Ok((a, b)),
            MergeEntry::Joined(j) => {
                split_joined(j).map_err(|j| de::Error::custom(format!("merge {j:?}")))
            }
        });
        pairs.collect::<Result<_, _>>().map(Merges)
    }
}

/// "a b" → ("a", "b") at the first space, borrowing when the string does; the string back
/// when it has no space.
fn split_joined(j: Cow<'_, str>) -> Result<(Cow<'_, str>, Cow<'_, str>), Cow<'_, str>> {
    let Some(sp) = j.find(' ') else { return Err(j) };
    Ok(match j {
        Cow::Borrowed(j) => (Cow::Borrowed(&j[..sp]), Cow::Borrowed(&j[sp + 1..])),
        Cow::Owned(j) => (
            Cow::Owned(j[..sp].to_string()),
            Cow::Owned(j[sp + 1..].to_string()),
        ),
    })
}

impl<'a> ModelJson<'a> {
    /// The model object, refused by name when it is not a BPE (Unigram's and WordPiece's
    /// vocabularies have other shapes).
    pub fn parse(raw: &'a RawValue) -> Result<ModelJson<'a>> {
        #[derive(Deserialize)]
        struct Ty<'a> {
            #[serde(rename = "type", borrow)]
            ty: Option<Cow<'a, str>>,
        }
        let t: Ty<'a> = serde_json::from_str(raw.get()).context("tokenizer.json model")?;
        if let Some(ty) = t.ty.as_deref().filter(|t| *t != "BPE") {
            bail!("model is {ty}, not BPE");
        }
        serde_json::from_str(raw.get()).context("tokenizer.json model")
    }
}

impl<'a> TokJson<'a> {
    /// Parse `text`; then have the crate's own types check every section the fast path does
    /// not read itself (they are small), and the version, as `Tokenizer::from_str` does.
    pub fn parse(text: &'a str) -> Result<TokJson<'a>> {
        let t: TokJson<'a> = serde_json::from_str(text).context("tokenizer.json")?;
        if let Some(v) = &t.version {
            if v != "1.0" {
                bail!("unknown tokenizer version {v:?}");
            }
        }
        fn check<T: serde::de::DeserializeOwned>(raw: Option<&RawValue>, what: &str) -> Result<()> {
            if let Some(r) = raw {
                serde_json::from_str::<Option<T>>(r.get())
                    .with_context(|| format!("tokenizer.json {what}"))?;
            }
            Ok(())
        }
        check::<tokenizers::NormalizerWrapper>(t.normalizer, "normalizer")?;
        check::<tokenizers::PreTokenizerWrapper>(t.pre_tokenizer, "pre_tokenizer")?;
        check::<tokenizers::PostProcessorWrapper>(t.post_processor, "post_processor")?;
        check::<tokenizers::DecoderWrapper>(t.decoder, "decoder")?;
        check::<tokenizers::TruncationParams>(t.truncation, "truncation")?;
        check::<tokenizers::PaddingParams>(t.padding, "padding")?;
        Ok(t)
    }

    /// A small section as a `Value` (null when absent).
    pub fn value(raw: Option<&RawValue>) -> Result<serde_json::Value> {
        match raw {
            None => Ok(serde_json::Value::Null),
            Some(r) => Ok(serde_json::from_str(r.get())?),
        }
    }

    /// The crate's normalizer, for the normalized forms of added tokens.
    pub fn crate_normalizer(&self) -> Result<Option<tokenizers::NormalizerWrapper>> {
        match self.normalizer {
            None => Ok(None),
            Some(r) => Ok(serde_json::from_str::<Option<tokenizers::NormalizerWrapper>>(r.get())?),
        }
    }
}

/// A tokenizer.json section's `type` field ("" when absent).
pub(super) fn ty(v: &serde_json::Value) -> &str {
    v.get("type").and_then(|t| t.as_str()).unwrap_or("")
}
