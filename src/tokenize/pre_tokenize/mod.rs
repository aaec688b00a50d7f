//! Pre-tokenizers: the stage that cuts a normalized text into words before BPE — GPT-2's
//! `ByteLevel(use_regex=true)` pattern hand-coded ([`gpt2`]); the regex `Split`s through one
//! [`split_matcher::SplitMatcher`]: hand-written scanners for Llama-3/Qwen2
//! ([`gpt4_split`]), o200k ([`o200k_split`]) and DeepSeek-V3's three as one
//! ([`deepseek_split`]) over Oniguruma's classes ([`scan_classes`], [`unicode`]), else the
//! generic backtracking matcher ([`regex`]) — the same pieces either way.

pub mod config;
pub(crate) mod deepseek_split;
pub mod gpt2;
pub(crate) mod gpt4_split;
pub(crate) mod o200k_split;
pub mod regex;
pub(crate) mod scan_classes;
pub(crate) mod split_matcher;
pub mod unicode;
