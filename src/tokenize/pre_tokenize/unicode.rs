//! Unicode character classes exactly as Oniguruma (the regex engine the `tokenizers` crate
//! uses for `Split` and `ByteLevel`) defines them, looked up in O(1) by the fast pre-tokenizers.
//!
//! A class set is a list of atoms (`\p{L}`, `\p{Lu}`, `\s`, `\d`, `\w`, `\p{Han}`…). Each code
//! point gets one bit per atom, computed by running the atom's own Oniguruma regex over blocks
//! of 1,024 code points the first time any of them is looked up, so the answer is Oniguruma's by
//! construction (whatever Unicode version it was built with), and a corpus only pays for the
//! blocks it touches.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use anyhow::{anyhow, Result};
use tokenizers::utils::SysRegex;

const BLOCK: u32 = 1024;
const N_BLOCKS: usize = (0x110000 / BLOCK) as usize;
/// At most this many atoms per table (one bit each).
pub const MAX_ATOMS: usize = 32;

/// Per-code-point atom bits, filled lazily by blocks.
pub struct ClassTable {
    atoms: Vec<String>,
    regexes: Vec<SysRegex>,
    bits: Box<[AtomicU32]>,
    done: Box<[AtomicBool]>,
    ascii: [u32; 128],
}

impl ClassTable {
    /// `atoms` are Oniguruma regex fragments matching one character (`\p{L}`, `\s`, ...).
    pub fn new(atoms: &[String]) -> Result<ClassTable> {
        if atoms.len() > MAX_ATOMS {
            return Err(anyhow!("more than {MAX_ATOMS} character-class atoms"));
        }
        let regexes = atoms
            .iter()
            .map(|a| SysRegex::new(a).map_err(|e| anyhow!("class {a}: {e}")))
            .collect::<Result<Vec<_>>>()?;
        let mut t = ClassTable {
            atoms: atoms.to_vec(),
            regexes,
            bits: (0..0x110000).map(|_| AtomicU32::new(0)).collect(),
            done: (0..N_BLOCKS).map(|_| AtomicBool::new(false)).collect(),
            ascii: [0; 128],
        };
        t.fill(0);
        for c in 0..128u32 {
            t.ascii[c as usize] = t.bits[c as usize].load(Ordering::Relaxed);
        }
        Ok(t)
    }

    pub fn atoms(&self) -> &[String] {
        &self.atoms
    }

    /// Atom bits of `c`.
    #[inline]
    pub fn bits(&self, c: char) -> u32 {
        let u = c as u32;
        if u < 128 {
            return self.ascii[u as usize];
        }
        let b = (u / BLOCK) as usize;
        if !self.done[b].load(Ordering::Acquire) {
            self.fill(b);
        }
        self.bits[u as usize].load(Ordering::Relaxed)
    }

    /// Compute one block with Oniguruma (idempotent: racing threads write the same bits).
    #[cold]
    fn fill(&self, block: usize) {
        let lo = block as u32 * BLOCK;
        let chars: Vec<char> = (lo..lo + BLOCK).filter_map(char::from_u32).collect();
        let s: String = chars.iter().collect();
        for (k, re) in self.regexes.iter().enumerate() {
            for (a, _) in re.find_iter(&s) {
                if let Some(c) = s[a..].chars().next() {
                    self.bits[c as usize].fetch_or(1 << k, Ordering::Relaxed);
                }
            }
        }
        self.done[block].store(true, Ordering::Release);
    }
}

/// The char at byte `p` of valid UTF-8 and its length.
#[inline]
pub fn decode(b: &[u8], p: usize) -> (char, usize) {
    let x = b[p];
    if x < 0x80 {
        return (x as char, 1);
    }
    let (l, init) = if x < 0xE0 {
        (2, (x & 0x1F) as u32)
    } else if x < 0xF0 {
        (3, (x & 0x0F) as u32)
    } else {
        (4, (x & 0x07) as u32)
    };
    let mut u = init;
    for i in 1..l {
        u = u << 6 | (b[p + i] & 0x3F) as u32;
    }
    // SAFETY-free: valid UTF-8 input yields a valid scalar value.
    (char::from_u32(u).unwrap_or('\u{FFFD}'), l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_agree_with_oniguruma_char_by_char() {
        let atoms: Vec<String> = [r"\p{L}", r"\p{N}", r"\s", r"\p{Lu}", r"\p{M}", r"\p{P}"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let t = ClassTable::new(&atoms).unwrap();
        let res: Vec<SysRegex> = atoms
            .iter()
            .map(|a| SysRegex::new(&format!(r"\A{a}\z")).unwrap())
            .collect();
        for c in "aZ9 \t\n\u{85}\u{a0}é中١٢Ⅻ½\u{301}\u{2003}\u{3000}😀،.-_\u{200d}ſK".chars()
        {
            let mut want = 0u32;
            let mut buf = [0u8; 4];
            for (k, re) in res.iter().enumerate() {
                if re.find_iter(c.encode_utf8(&mut buf)).next().is_some() {
                    want |= 1 << k;
                }
            }
            assert_eq!(t.bits(c), want, "{c:?} U+{:04X}", c as u32);
        }
    }
}
