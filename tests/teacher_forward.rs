//! The candle forward against a plainly written f64 Llama (loops, no tensors) on the tiny
//! teacher's weights read straight from the safetensors file: bidirectional attention, GQA,
//! head_dim ≠ hidden/heads, left padding with a key mask and per-row position ids.

mod teacher_support;

use std::collections::HashMap;

use dlm_data::fixtures::teacher::{write_teacher, TinyDtype, TinyTeacher};
use dlm_data::teacher::{Batch, Teacher, TeacherBackend, TeacherOptions};
use safetensors::tensor::{Dtype, SafeTensors};

/// All tensors of a safetensors file (or shard set) as f64.
fn load_f64(dir: &std::path::Path) -> HashMap<String, Vec<f64>> {
    let mut files = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            files.push(p);
        }
    }
    let mut out = HashMap::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for (name, view) in st.tensors() {
            let d = view.data();
            let v: Vec<f64> = match view.dtype() {
                Dtype::BF16 => d
                    .chunks(2)
                    .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                    .collect(),
                Dtype::F16 => d
                    .chunks(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                    .collect(),
                Dtype::F32 => d
                    .chunks(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                    .collect(),
                other => panic!("{other:?}"),
            };
            out.insert(name, v);
        }
    }
    out
}

struct Ref {
    w: HashMap<String, Vec<f64>>,
    c: dlm_data::teacher::LlamaConfig,
}

impl Ref {
    fn w(&self, n: &str) -> &[f64] {
        &self.w[n]
    }
    /// y[o] = Σ_i W[o][i] x[i]
    fn lin(&self, n: &str, x: &[f64]) -> Vec<f64> {
        let w = self.w(n);
        let inp = x.len();
        (0..w.len() / inp)
            .map(|o| (0..inp).map(|i| w[o * inp + i] * x[i]).sum())
            .collect()
    }
    fn rms(&self, n: &str, x: &[f64]) -> Vec<f64> {
        let g = self.w(n);
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + self.c.rms_norm_eps).sqrt();
        x.iter().zip(g).map(|(v, g)| v * r * g).collect()
    }
    fn rope(&self, x: &mut [f64], pos: usize) {
        let hd = self.c.head_dim;
        let h = hd / 2;
        for i in 0..h {
            let f = 1.0 / self.c.rope_theta.powf((2 * i) as f64 / hd as f64);
            let (s, c) = (pos as f64 * f).sin_cos();
            let (a, b) = (x[i], x[i + h]);
            x[i] = a * c - b * s;
            x[i + h] = b * c + a * s;
        }
    }
    /// Logits [len, vocab] for one unpadded sequence, all attention bidirectional.
    fn forward(&self, ids: &[u32]) -> Vec<Vec<f64>> {
        let c = &self.c;
        let (hd, nh, kv) = (c.head_dim, c.num_heads, c.num_kv_heads);
        let n = ids.len();
        let emb = self.w("model.embed_tokens.weight");
        let hs = c.hidden_size;
        let mut x: Vec<Vec<f64>> = ids
            .iter()
            .map(|&t| emb[t as usize * hs..(t as usize + 1) * hs].to_vec())
            .collect();
        for l in 0..c.num_layers {
            let p = format!("model.layers.{l}");
            let mut q = vec![];
            let mut k = vec![];
            let mut v = vec![];
            for (j, xj) in x.iter().enumerate() {
                let h = self.rms(&format!("{p}.input_layernorm.weight"), xj);
                let mut qj = self.lin(&format!("{p}.self_attn.q_proj.weight"), &h);
                let mut kj = self.lin(&format!("{p}.self_attn.k_proj.weight"), &h);
                for hh in 0..nh {
                    self.rope(&mut qj[hh * hd..(hh + 1) * hd], j);
                }
                for hh in 0..kv {
                    self.rope(&mut kj[hh * hd..(hh + 1) * hd], j);
                }
                q.push(qj);
                k.push(kj);
                v.push(self.lin(&format!("{p}.self_attn.v_proj.weight"), &h));
            }
            for i in 0..n {
                let mut att = vec![0.0; nh * hd];
                for hh in 0..nh {
                    let g = hh / (nh / kv);
                    let s: Vec<f64> = (0..n)
                        .map(|j| {
                            (0..hd)
                                .map(|d| q[i][hh * hd + d] * k[j][g * hd + d])
                                .sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for j in 0..n {
                        for d in 0..hd {
                            att[hh * hd + d] += e[j] / z * v[j][g * hd + d];
                        }
                    }
                }
                let o = self.lin(&format!("{p}.self_attn.o_proj.weight"), &att);
                for d in 0..hs {
                    x[i][d] += o[d];
                }
            }
            for xi in x.iter_mut() {
                let h = self.rms(&format!("{p}.post_attention_layernorm.weight"), xi);
                let g = self.lin(&format!("{p}.mlp.gate_proj.weight"), &h);
                let u = self.lin(&format!("{p}.mlp.up_proj.weight"), &h);
                let a: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let d = self.lin(&format!("{p}.mlp.down_proj.weight"), &a);
                for k in 0..hs {
                    xi[k] += d[k];
                }
            }
        }
        let head = if c.tie_word_embeddings {
            "model.embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        x.iter()
            .map(|xi| self.lin(head, &self.rms("model.norm.weight", xi)))
            .collect()
    }
}

fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0.0, f64::max)
}

fn check(dir: &std::path::Path) {
    let t = Teacher::open(dir, &TeacherOptions::default()).unwrap();
    let r = Ref {
        w: load_f64(dir),
        c: t.config.clone(),
    };
    let mut m = t.cpu().unwrap();
    let v = t.config.vocab_size;
    let mask = t.mask_id;
    // Row 0: 3 left pads + 5 tokens (two of them masks); row 1: 8 real tokens.
    let row0 = [17u32, 250, mask, 3, mask];
    let row1 = [5u32, 6, 7, 8, mask, mask, 400, 2];
    let l = 8;
    let mut tokens = vec![t.pad_id; 3];
    tokens.extend(row0);
    tokens.extend(row1);
    let mut keep = vec![false; 3];
    keep.extend([true; 5]);
    keep.extend([true; 8]);
    let got = m.logits(&Batch::new(&tokens, &keep, 2, l), 0..l).unwrap();
    let want0 = r.forward(&row0);
    let want1 = r.forward(&row1);
    let mut worst: f64 = 0.0;
    for j in 0..5 {
        let g = &got[(3 + j) * v..(4 + j) * v];
        worst = worst.max(max_abs_diff(g, &want0[j]));
    }
    for j in 0..8 {
        let g = &got[(l + j) * v..(l + j + 1) * v];
        worst = worst.max(max_abs_diff(g, &want1[j]));
    }
    let scale = want1[0].iter().map(|x| x.abs()).fold(0.0, f64::max);
    assert!(
        scale > 1.0,
        "logits too flat to be a meaningful check: {scale}"
    );
    assert!(
        worst < 2e-4 * scale.max(1.0),
        "max |candle - f64| = {worst}"
    );

    // A window of rows gives the same numbers as the full pass.
    let win = m.logits(&Batch::new(&tokens, &keep, 2, l), 5..7).unwrap();
    for r in 0..2 {
        for j in 0..2 {
            let a = &win[(r * 2 + j) * v..(r * 2 + j + 1) * v];
            let b = &got[(r * l + 5 + j) * v..(r * l + 6 + j) * v];
            assert!(max_abs_diff(a, &b.iter().map(|x| *x as f64).collect::<Vec<_>>()) < 1e-5);
        }
    }
}

#[test]
fn candle_matches_f64_reference_bf16_single_file() {
    check(teacher_support::teacher_dir());
}

#[test]
fn candle_matches_f64_reference_f32_sharded_tied() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t");
    write_teacher(
        &p,
        &TinyTeacher {
            dtype: TinyDtype::F32,
            sharded: true,
            tie_word_embeddings: true,
            seed: 11,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(p.join("model.safetensors.index.json").is_file());
    assert!(!p.join("model.safetensors").exists());
    check(&p);
}

#[test]
fn attention_is_bidirectional_and_padding_invisible() {
    let t = Teacher::open(teacher_support::teacher_dir(), &TeacherOptions::default()).unwrap();
    let mut m = t.cpu().unwrap();
    let v = t.config.vocab_size;
    let a = m
        .logits(&Batch::new(&[10, 11, 12, 13], &[true; 4], 1, 4), 0..1)
        .unwrap();
    let b = m
        .logits(&Batch::new(&[10, 11, 12, 99], &[true; 4], 1, 4), 0..1)
        .unwrap();
    assert!(
        max_abs_diff(&a, &b.iter().map(|x| *x as f64).collect::<Vec<_>>()) > 1e-3,
        "position 0 must see a later token"
    );
    // Padding keys (whatever their ids) change nothing.
    let p = m
        .logits(
            &Batch::new(
                &[t.pad_id, 77, 10, 11, 12, 13],
                &[false, false, true, true, true, true],
                1,
                6,
            ),
            2..3,
        )
        .unwrap();
    assert_eq!(p.len(), v);
    let d = max_abs_diff(&p, &a.iter().map(|x| *x as f64).collect::<Vec<_>>());
    assert!(d < 1e-4, "padded run differs by {d}");
}

#[test]
fn chat_template_letters_and_ids_from_the_checkpoint() {
    let t = Teacher::open(teacher_support::teacher_dir(), &TeacherOptions::default()).unwrap();
    let tok = &t.tokenizer;
    assert_eq!(
        tok.render("Why?", true).unwrap(),
        "<|user|>\nWhy?\n<|assistant|>\n"
    );
    assert_eq!(tok.render("Why?", false).unwrap(), "Why?");
    let letters = tok
        .letter_ids(dlm_data::distill::mcq::ANSWER_TEMPLATE, 10)
        .unwrap();
    for (i, id) in letters.iter().enumerate() {
        let text = tok.tok.decode(&[*id], false).unwrap();
        assert_eq!(text.trim(), dlm_data::teacher::tokenizer::LETTERS[i]);
    }
    // Ids resolved from config/tokenizer; pad ≠ mask; --mask-id overrides.
    assert_eq!(t.mask_id, tok.tok.token_to_id("<|mask|>").unwrap());
    assert_eq!(t.pad_id, tok.tok.token_to_id("<|pad|>").unwrap());
    assert_eq!(
        t.eos_ids,
        vec![tok.tok.token_to_id("<|endoftext|>").unwrap()]
    );
    assert_eq!(t.logits_shift, 0);
    let o = Teacher::open(
        teacher_support::teacher_dir(),
        &TeacherOptions {
            mask_id: Some(5),
            logits_shift: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((o.mask_id, o.logits_shift), (5, 1));
}

#[test]
fn a_batch_of_the_wrong_shape_is_refused_naming_expected_and_got() {
    let t = Teacher::open(teacher_support::teacher_dir(), &TeacherOptions::default()).unwrap();
    let mut m = t.cpu().unwrap();
    let e = m
        .logits(&Batch::new(&[10, 11, 12], &[true; 4], 1, 4), 0..1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expected 1×4 = 4") && e.contains("got 3 tokens, 4 key flags"),
        "{e}"
    );
    let e = m
        .logits(&Batch::new(&[10, 11, 12, 13], &[true; 4], 1, 4), 2..5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rows 2..5"), "{e}");
    let e = m
        .logits(&Batch::new(&[10; 4], &[true; 4], 1, 4), 2..2)
        .unwrap_err();
    assert!(e.to_string().contains("non-empty"), "{e}");
}
