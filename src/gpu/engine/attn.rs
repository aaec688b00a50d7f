//! Why: the engine has several attention kernels (kernels/attention.cu shapes, and the wgmma
//! ones in kernels/attention_wgmma.cu); this names them, their launch shape and shared memory,
//! and parses the `DLM_ATTN` override.

use anyhow::{bail, Result};

use super::BF;
use crate::gpu::driver::Kernel;

/// The attention kernel's shapes (kernels/attention.cu): warps per CTA, m-tiles (16 queries)
/// per warp, keys per K/V tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnVariant {
    /// 4 warps × 16 queries, 64-key tiles: small grids, cache windows.
    W4,
    /// 8 warps × 16 queries: 128 queries share each K/V tile.
    W8,
    /// 4 warps × 32 queries (two m-tiles per K/V fragment), 32-key tiles: large grids.
    M2,
    /// 2 warpgroups × 64 queries on wgmma, head_dim 128, sm_90a (kernels/attention_wgmma.cu),
    /// Q in registers (`DLM_ATTN=wg` only).
    Wg,
    /// `Wg` with Q in shared memory (128 registers: two CTAs per SM; `DLM_ATTN=wgs` only).
    Wgs,
    /// `Wgs` with P·V as one m64n128 instruction per 16 keys: the large-grid default on
    /// Hopper with head_dim 128.
    Wgs2,
    /// `Wgs2` with two heads of one KV group per CTA (4 warpgroups share each K/V tile;
    /// `DLM_ATTN=wgh` only, measured slower).
    Wgh,
}

impl AttnVariant {
    pub(super) fn parse(s: &str) -> Result<Option<Self>> {
        Ok(match s {
            "" | "auto" => None,
            "w4" | "4" => Some(Self::W4),
            "w8" | "8" => Some(Self::W8),
            "m2" => Some(Self::M2),
            "wg" => Some(Self::Wg),
            "wgs" => Some(Self::Wgs),
            "wgs2" => Some(Self::Wgs2),
            "wgh" => Some(Self::Wgh),
            o => bail!("DLM_ATTN={o}: expected w4, w8, m2, wg, wgs, wgs2, wgh or auto"),
        })
    }
    /// The wgmma kernels (sm_90a, head_dim 128).
    pub fn is_wgmma(self) -> bool {
        matches!(self, Self::Wg | Self::Wgs | Self::Wgs2 | Self::Wgh)
    }
    /// Query heads per CTA (the launch grid's y is heads / this).
    pub(super) fn heads(self) -> usize {
        if self == Self::Wgh {
            2
        } else {
            1
        }
    }
    pub(super) fn warps(self) -> usize {
        match self {
            Self::W8 | Self::Wg | Self::Wgs | Self::Wgs2 => 8,
            Self::Wgh => 16,
            Self::W4 | Self::M2 => 4,
        }
    }
    /// Queries per CTA.
    pub(super) fn rows(self) -> usize {
        match self {
            Self::W4 => 64,
            Self::W8 | Self::M2 | Self::Wg | Self::Wgs | Self::Wgs2 | Self::Wgh => 128,
        }
    }
    pub(super) fn key_tile(self) -> usize {
        if self == Self::M2 {
            32
        } else {
            64
        }
    }
    pub(super) fn entry(self, hd: usize) -> String {
        match self {
            Self::W4 => format!("attn_fwd_hd{hd}"),
            Self::W8 => format!("attn_fwd_w8_hd{hd}"),
            Self::M2 => format!("attn_fwd_m2_hd{hd}"),
            Self::Wg => format!("attn_fwd_wg_hd{hd}"),
            Self::Wgs => format!("attn_fwd_wgs_hd{hd}"),
            Self::Wgs2 => format!("attn_fwd_wgs2_hd{hd}"),
            Self::Wgh => format!("attn_fwd_wgh_hd{hd}"),
        }
    }
    /// Dynamic shared memory: two stages of a K and a V tile, rows padded by 8 elements (Wg:
    /// unpadded swizzled tiles, plus 1 KB to align them to 1024 bytes; Wgs: plus the 128
    /// queries' Q tile).
    pub fn smem_bytes(self, hd: usize) -> usize {
        match self {
            Self::Wg => 4 * self.key_tile() * hd * BF + 1024,
            Self::Wgs | Self::Wgs2 | Self::Wgh => {
                (4 * self.key_tile() + self.heads() * self.rows()) * hd * BF + 1024
            }
            _ => 4 * self.key_tile() * (hd + 8) * BF,
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct AttnKernel {
    pub(super) k: Kernel,
    pub(super) v: AttnVariant,
}
