//! One multiple-choice item: question, lettered options (A–J), the gold letter, provenance;
//! and the seeded, order-independent shuffle that places sciq's separate correct answer.

use anyhow::{bail, Result};

use crate::provenance::Provenance;

/// Option letters; an item has at most ten options.
pub const LETTERS: [char; 10] = ['A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J'];

/// A formatted multiple-choice item.
#[derive(Debug, Clone, PartialEq)]
pub struct McqItem {
    /// Unique id, e.g. `sciq-train-000123`.
    pub id: String,
    pub prov: Provenance,
    pub question: String,
    pub options: Vec<String>,
    /// Index of the correct option in `options`.
    pub gold: usize,
    /// Source options left out because they were blank (`distractor2`, `choices[3]`); the
    /// item keeps its non-blank options when at least two remain.
    pub blank_options: Vec<String>,
}

impl McqItem {
    /// Validate the option count and gold index; `what` names the file and row for errors.
    pub fn new(
        id: String,
        prov: Provenance,
        question: String,
        options: Vec<String>,
        gold: usize,
        what: &str,
    ) -> Result<McqItem> {
        if options.len() < 2 || options.len() > LETTERS.len() {
            bail!(
                "{what}: {} options (need 2 to {})",
                options.len(),
                LETTERS.len()
            );
        }
        if gold >= options.len() {
            bail!(
                "{what}: answer index {gold} out of range for {} options",
                options.len()
            );
        }
        Ok(McqItem {
            id,
            prov,
            question,
            options,
            gold,
            blank_options: Vec::new(),
        })
    }

    /// The gold letter, `A`…`J`.
    pub fn gold_letter(&self) -> char {
        LETTERS[self.gold]
    }
}

/// The letter of option `i`.
pub fn letter(i: usize) -> char {
    LETTERS[i]
}

/// Index of a letter `A`…`J` (as a string), if valid.
pub fn letter_index(s: &str) -> Option<usize> {
    let mut chars = s.chars();
    let c = chars.next()?;
    if chars.next().is_some() {
        return None;
    }
    LETTERS.iter().position(|l| *l == c)
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over the id bytes: a stable (platform- and release-independent) key.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A permutation of `0..n` that is a pure function of `(seed, id)`: workers of a sharded
/// run, and reruns, place every answer identically.
pub fn permutation(seed: u64, id: &str, n: usize) -> Vec<usize> {
    let mut state = seed ^ fnv1a(id.as_bytes()).rotate_left(17);
    let mut p: Vec<usize> = (0..n).collect();
    // Fisher–Yates, drawing j uniformly from 0..=i (modulo bias is < 2^-60 for n ≤ 10).
    for i in (1..n).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    p
}

/// Place `correct` among `distractors` by the seeded shuffle; returns (options, gold index).
pub fn shuffle_options(
    seed: u64,
    id: &str,
    correct: String,
    distractors: Vec<String>,
) -> (Vec<String>, usize) {
    let mut pool = Vec::with_capacity(distractors.len() + 1);
    pool.push(correct);
    pool.extend(distractors);
    let perm = permutation(seed, id, pool.len());
    // Output slot k holds pool[perm[k]]; the correct answer (pool[0]) lands where perm[k] == 0.
    let gold = perm.iter().position(|&x| x == 0).unwrap_or(0);
    let mut slots: Vec<Option<String>> = pool.into_iter().map(Some).collect();
    let options = perm
        .iter()
        .map(|&x| slots[x].take().unwrap_or_default())
        .collect();
    (options, gold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_pure_function_of_seed_and_id() {
        let a = permutation(7, "sciq-train-000001", 4);
        assert_eq!(a, permutation(7, "sciq-train-000001", 4));
        let mut s = a.clone();
        s.sort();
        assert_eq!(s, vec![0, 1, 2, 3]);
        // Different seeds / ids move the answer: over many ids every slot gets used.
        let mut seen = [0usize; 4];
        for k in 0..400 {
            let (_, g) = shuffle_options(
                3,
                &format!("x-{k}"),
                "right".into(),
                vec!["a".into(), "b".into(), "c".into()],
            );
            seen[g] += 1;
        }
        assert!(seen.iter().all(|&c| c > 60), "{seen:?}");
        let differs = (0..50)
            .any(|k| permutation(1, &format!("i{k}"), 4) != permutation(2, &format!("i{k}"), 4));
        assert!(differs);
    }

    #[test]
    fn shuffle_keeps_the_correct_answer_at_gold() {
        for k in 0..100 {
            let (opts, g) = shuffle_options(
                9,
                &format!("id{k}"),
                "gold".into(),
                vec!["d1".into(), "d2".into(), "d3".into()],
            );
            assert_eq!(opts[g], "gold");
            let mut s = opts.clone();
            s.sort();
            assert_eq!(s, vec!["d1", "d2", "d3", "gold"]);
        }
    }

    #[test]
    fn letters_and_validation() {
        assert_eq!(letter_index("C"), Some(2));
        assert_eq!(letter_index("J"), Some(9));
        assert_eq!(letter_index("K"), None);
        assert_eq!(letter_index("AB"), None);
        let p = Provenance {
            source: "s".into(),
            repo: "o/n".into(),
            commit: "c".into(),
            file: "f".into(),
            row: 0,
        };
        assert!(McqItem::new(
            "i".into(),
            p.clone(),
            "q".into(),
            vec!["a".into()],
            0,
            "f row 0"
        )
        .is_err());
        let e = McqItem::new(
            "i".into(),
            p,
            "q".into(),
            vec!["a".into(), "b".into()],
            2,
            "f.parquet row 3",
        )
        .unwrap_err();
        assert!(e.to_string().contains("f.parquet row 3"), "{e}");
    }
}
