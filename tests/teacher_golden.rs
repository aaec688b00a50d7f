//! The candle forward against golden logits from PyTorch/transformers (`LlamaForCausalLM`,
//! bidirectional, float32) for the same tiny teacher, committed in
//! tests/golden/tiny_teacher_logits.json by scripts/golden_logits.py.

mod teacher_support;

use dlm_data::teacher::{Batch, Teacher, TeacherBackend, TeacherOptions};
use serde_json::Value;

#[test]
fn candle_matches_transformers_golden_logits() {
    let golden: Value =
        serde_json::from_str(include_str!("golden/tiny_teacher_logits.json")).unwrap();
    let dir = teacher_support::teacher_dir();
    let t = Teacher::open(dir, &TeacherOptions::default()).unwrap();
    // The golden file is only meaningful for byte-identical fixture weights.
    assert_eq!(
        golden["weights_sha256"].as_str().unwrap(),
        t.identity.weights_sha256,
        "the fixture teacher changed: regenerate tests/golden with scripts/golden_logits.py"
    );
    let v = t.config.vocab_size;
    assert_eq!(golden["vocab_size"], v);
    let mut m = t.cpu().unwrap();
    let mut worst: f64 = 0.0;
    let mut peak: f64 = 0.0;
    for (ids, want) in golden["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(golden["logits"].as_array().unwrap())
    {
        let ids: Vec<u32> = ids
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let l = ids.len();
        // Run each golden row left-padded inside a batch, to include the padding path.
        let mut tokens = vec![t.pad_id; 3];
        tokens.extend(&ids);
        let mut keep = vec![false; 3];
        keep.extend(vec![true; l]);
        let got = m
            .logits(&Batch::new(&tokens, &keep, 1, l + 3), 3..l + 3)
            .unwrap();
        for (j, row) in want.as_array().unwrap().iter().enumerate() {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), v);
            for (k, w) in row.iter().enumerate() {
                let w = w.as_f64().unwrap();
                peak = peak.max(w.abs());
                worst = worst.max((got[j * v + k] as f64 - w).abs());
            }
        }
    }
    eprintln!("max |candle - transformers| = {worst:.3e} (largest |logit| {peak:.2})");
    assert!(peak > 1.0);
    assert!(worst < 1e-3, "max |candle - transformers| = {worst}");
}
