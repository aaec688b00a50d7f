"""Why: train, on one GPU with PyTorch in a few minutes, a small LLaDA-style masked-diffusion
LM of the teacher's family (Llama weights, bidirectional, GQA, untied head, head_dim 64) on the
data build_data.py made, and save it as an HF checkpoint `dlm-data distill` loads.

    python3 train.py --data DIR --out CKPT [--seconds 460] [--seed 0] [--log train.json]
                     [--mcq-format named|value|short|recall] [--device cuda]

Objective (LLaDA): per row t ~ U(eps, 1); every maskable token is replaced by <|mask|> with
probability t; cross-entropy on the masked tokens weighted 1/t, divided by the row's maskable
length. Rows per step: plain text windows (all 256 tokens maskable), and SFT rows whose prompt
is never masked: text continuations (prompt: chat-rendered "Continue the text" + 48 tokens;
response: the next G tokens, G in {128, 256}), MCQ items (response: the short computation,
then EOS to fill G, as LLaDA's SFT pads with EOS; G cycles through --mcq-fills so the
computation's tokens carry weight), MCQ answer slots (prompt + response + "\\nAnswer:", the
letter masked: t = 1), and, with --lookup-rows, lookup rows (prompt + " 168 is C, 148 is A,
...": every option's letter after its value, the letters masked, t = 1: four value -> letter
matches per row), and, with --recall-steps N, a curriculum: the first N steps train only on
short recall rows (four option lines, then every value named with its letter; recall.npz), the
setting where the value -> letter matching is learned first. Rows are left-padded with a key padding mask and RoPE positions counted from
the first real token, as distill lays them out. All data sits on the GPU (see Data), so the
step loop never waits for the host.

The defaults are run 9's recipe (bench/results/teacher.md, "Runs 7-9": exact MCQ accuracy
0.486 on 512 held-out items after 340 s; facts 0.78): 6 x 768, GQA 12:4, the hidden matrices at
lr 1.7e-4 and the embedding/head at 2e-3 (the matching never started at 2e-3 for all: the
hidden lr has to fall with width, CPU probe), 1,500 curriculum steps of recall rows whose
values are drawn like the options, then "recall" responses (" 87 + 81 = 168. 168 is C.")
with 64 recall and 32 lookup rows per step kept in. Run 2's recipe (its table) is
`--hidden 512 --layers 12 --heads 8 --kv-heads 2 --inter 1536 --lr 2e-3 --lr-embed 0
--warmup 100 --text-rows 64 --cont-rows 32 --mcq-rows 128 --letter-rows 32 --lookup-rows 0
--mcq-fills 32,128,64,256 --mcq-format named --t-sampling iid --recall-steps 0
--recall-rows-after 0` on data built with --facts 240 --recall-values short.

Diagnostics every --diag-every steps on MCQ items held back from training (train.json; see
`diagnostics`): letter head given the gold response, one-pass response, in-context matching.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402

EPS = 1e-3


class Attn(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.h, s.kv, s.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d = c["hidden_size"]
        s.q = nn.Linear(d, s.h * s.hd, bias=False)
        s.k = nn.Linear(d, s.kv * s.hd, bias=False)
        s.v = nn.Linear(d, s.kv * s.hd, bias=False)
        s.o = nn.Linear(s.h * s.hd, d, bias=False)

    def forward(s, x, cos, sin, mask):
        b, l, _ = x.shape
        q = s.q(x).view(b, l, s.h, s.hd).transpose(1, 2)
        k = s.k(x).view(b, l, s.kv, s.hd).transpose(1, 2)
        v = s.v(x).view(b, l, s.kv, s.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        r = s.h // s.kv
        k, v = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)  # HF repeat_kv order
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
        return s.o(o.transpose(1, 2).reshape(b, l, s.h * s.hd))


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), -1)
    return x * cos + rot * sin


class Layer(nn.Module):
    def __init__(s, c):
        super().__init__()
        d, i = c["hidden_size"], c["intermediate_size"]
        s.n1 = nn.RMSNorm(d, eps=c["rms_norm_eps"])
        s.n2 = nn.RMSNorm(d, eps=c["rms_norm_eps"])
        s.attn = Attn(c)
        s.gate = nn.Linear(d, i, bias=False)
        s.up = nn.Linear(d, i, bias=False)
        s.down = nn.Linear(i, d, bias=False)

    def forward(s, x, cos, sin, mask):
        x = x + s.attn(s.n1(x), cos, sin, mask)
        y = s.n2(x)
        return x + s.down(F.silu(s.gate(y)) * s.up(y))


class Model(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c = c
        d = c["hidden_size"]
        s.emb = nn.Embedding(c["vocab_size"], d)
        s.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        s.norm = nn.RMSNorm(d, eps=c["rms_norm_eps"])
        s.head = nn.Linear(d, c["vocab_size"], bias=False)
        hd = c["head_dim"]
        s.register_buffer("inv", 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)
        for n, p in s.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["num_hidden_layers"]) if n.endswith(("o.weight", "down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def mimetic_(s, scale):
        """Mimetic attention init (Trockman & Kolter, 2023): each KV head's key projection
        starts as a copy of the first query head it serves, so q.k favours keys whose token
        resembles the query's (W_q^T W_k ~ a PSD matrix), a head start for the content-matching
        attention that copying and option matching need (run 5: no effect seen in 4,875 steps)."""
        with torch.no_grad():
            for L in s.layers:
                a = L.attn
                r, hd = a.h // a.kv, a.hd
                a.q.weight.mul_(scale)
                for j in range(a.kv):
                    a.k.weight[j * hd:(j + 1) * hd] = a.q.weight[j * r * hd:(j * r + 1) * hd]

    def forward(s, ids, pos, keep):
        x = s.emb(ids)
        f = pos[..., None].float() * s.inv
        e = torch.cat((f, f), -1)
        cos, sin = e.cos()[:, None].to(x.dtype), e.sin()[:, None].to(x.dtype)
        mask = None if keep is None else keep[:, None, None, :]
        for layer in s.layers:
            x = layer(x, cos, sin, mask)
        return s.norm(x)

    def hf_tensors(s):
        """HF Llama names -> bf16 bits (numpy uint16)."""
        bits = lambda t: t.detach().to(torch.bfloat16).view(torch.int16).cpu().numpy().view(np.uint16)  # noqa: E731
        out = {"model.embed_tokens.weight": bits(s.emb.weight), "model.norm.weight": bits(s.norm.weight),
               "lm_head.weight": bits(s.head.weight)}
        for i, L in enumerate(s.layers):
            p = f"model.layers.{i}."
            for name, t in [("self_attn.q_proj", L.attn.q), ("self_attn.k_proj", L.attn.k),
                            ("self_attn.v_proj", L.attn.v), ("self_attn.o_proj", L.attn.o),
                            ("mlp.gate_proj", L.gate), ("mlp.up_proj", L.up), ("mlp.down_proj", L.down)]:
                out[p + name + ".weight"] = bits(t.weight)
            out[p + "input_layernorm.weight"] = bits(L.n1.weight)
            out[p + "post_attention_layernorm.weight"] = bits(L.n2.weight)
        return out


# ------------------------------------------------------------------ batches
def left_pad(flat, off, pad):
    """Sequences flat[off[i]:off[i+1]] as one left-padded (n, max_len) int64 matrix and its
    keep mask (True on real tokens), built without a Python loop over rows."""
    off = np.asarray(off, np.int64)
    lens = np.diff(off)
    n, L = len(lens), int(lens.max())
    rows = np.repeat(np.arange(n), lens)
    cols = (L - lens)[rows] + (np.arange(off[-1] - off[0]) - (off[:-1] - off[0])[rows])
    ids = np.full((n, L), pad, np.int64)
    keep = np.zeros((n, L), bool)
    ids[rows, cols] = flat[off[0]:off[-1]]
    keep[rows, cols] = True
    return ids, keep


def concat_flat(parts):
    """Row-wise concatenation of several (flat, off) sequence sets of the same row count."""
    lens = sum(np.diff(o) for _, o in parts)
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    out = np.empty(off[-1], np.int64)
    pos = off[:-1].copy()
    for flat, o in parts:
        ln = np.diff(o)
        rows = np.repeat(np.arange(len(ln)), ln)
        out[pos[rows] + (np.arange(len(rows)) - (o[:-1] - o[0])[rows])] = flat[o[0]:o[-1]]
        pos += ln
    return out, off


class Data:
    """Every training set resident on the GPU as padded matrices; a batch is one index draw
    from a device generator, so no host work or host-to-device copy stands between steps.

    MCQ items: left-padded prompts P and responses R (right-filled with EOS to 256), a row
    for gen length G is [P | R[:, :G]] with only the R part maskable. Letter rows: prompt +
    gold response + "\\nAnswer:" + the letter, left-padded, only the letter maskable (t = 1).
    Text continuations: left-padded prompts + G tokens of the stream after the prompt, cut at
    the first EOS and filled with EOS (LLaDA's SFT padding). The last `diag` MCQ items are
    never trained: the diagnostics run on them."""

    def __init__(s, d, dev, fmt, diag, gen):
        s.dev, s.gen = dev, gen
        t = np.load(os.path.join(d, "text.npz"))
        s.held = t["heldout"].astype(np.int64)
        s.train = torch.from_numpy(t["train"].astype(np.int64)).to(dev)
        m = np.load(os.path.join(d, "mcq.npz"))
        if f"resp_{fmt}" not in m:
            sys.exit(f"{d}/mcq.npz has no responses in format {fmt!r} (rebuild with build_data.py)")
        # (an npz member is re-read on every access: each is read once here)
        po, ro = m["prompt_off"], m[f"resp_{fmt}_off"]
        prompt, resp = m["prompt"].astype(np.int64), m[f"resp_{fmt}"].astype(np.int64)
        p_ids, p_keep = left_pad(prompt, po, ckpt.PAD_ID)
        r = np.full((len(po) - 1, 256), ckpt.EOS_ID, np.int64)
        for i in range(len(po) - 1):  # once, at load
            x = resp[ro[i]:ro[i + 1]][:256]
            r[i, :len(x)] = x
        suffix = m["answer_suffix"].astype(np.int64)
        n = len(po) - 1
        sfx_off = np.arange(n + 1, dtype=np.int64) * len(suffix)
        let = m["letter"].astype(np.int64)
        flat, off = concat_flat([(prompt, po), (resp, ro),
                                 (np.tile(suffix, n), sfx_off), (let, np.arange(n + 1, dtype=np.int64))])
        l_ids, l_keep = left_pad(flat, off, ckpt.PAD_ID)
        T = lambda a: torch.from_numpy(a).to(dev)  # noqa: E731
        s.mp, s.mpk, s.mr, s.li, s.lk = T(p_ids), T(p_keep), T(r), T(l_ids), T(l_keep)
        s.letter, s.kind = T(let), T(m["kind"].astype(np.int64))
        s.letter_ids = T(m["letter_ids"].astype(np.int64))
        s.n_train, s.n_diag = n - diag, diag
        # lookup rows: prompt + every option's value named with its letter, letters maskable
        punct = T(m["lookup_punct"].astype(np.int64))
        s.ki, s.kk, s.kmk = s.lettered(prompt, po, m["resp_lookup"].astype(np.int64), m["resp_lookup_off"], punct)
        # short recall rows (option lines only), the same masking; absent in older data dirs
        s.n_recall = 0
        if os.path.exists(os.path.join(d, "recall.npz")):
            r = np.load(os.path.join(d, "recall.npz"))
            s.ri, s.rk, s.rmk = s.lettered(r["prompt"].astype(np.int64), r["prompt_off"],
                                              r["resp"].astype(np.int64), r["resp_off"], punct)
            s.n_recall = len(s.ri)
        c = np.load(os.path.join(d, "cont.npz"))
        c_ids, c_keep = left_pad(c["prompt"].astype(np.int64), c["prompt_off"], ckpt.PAD_ID)
        s.cp, s.cpk, s.cstart = T(c_ids), T(c_keep), T(c["start"].astype(np.int64))

    def lettered(s, prompt, po, resp, ro, punct):
        """Left-padded prompt + response rows whose maskable tokens are the response's letters:
        a letter token followed by "," or "." (a name may start with " D")."""
        flat, off = concat_flat([(prompt, po), (resp, ro)])
        ids, keep = (torch.from_numpy(x).to(s.dev) for x in left_pad(flat, off, ckpt.PAD_ID))
        nxt = torch.cat((ids[:, 1:], torch.full_like(ids[:, :1], ckpt.PAD_ID)), 1)
        in_resp = (torch.arange(ids.shape[1], device=s.dev)
                   >= ids.shape[1] - torch.from_numpy(np.diff(ro)).to(s.dev)[:, None])
        return ids, keep, torch.isin(ids, s.letter_ids) & torch.isin(nxt, punct) & in_resp

    def recall(s, b):
        i = s.draw(b, s.n_recall)
        return s.ri[i], s.rk[i], s.rmk[i]

    def draw(s, n, hi):
        return torch.randint(0, hi, (n,), device=s.dev, generator=s.gen)

    def text(s, b, l=256):
        i = s.draw(b, len(s.train) - l)
        return s.train[i[:, None] + torch.arange(l, device=s.dev)]

    def cont(s, b, g):
        i = s.draw(b, len(s.cstart))
        r = s.train[s.cstart[i][:, None] + torch.arange(g, device=s.dev)]
        r = torch.where((r == ckpt.EOS_ID).cumsum(1) > 0, ckpt.EOS_ID, r)
        return sft(s.cp[i], s.cpk[i], r)

    def mcq(s, b, g, i=None):
        i = s.draw(b, s.n_train) if i is None else i
        return sft(s.mp[i], s.mpk[i], s.mr[i, :g])

    def letters(s, b, i=None):
        i = s.draw(b, s.n_train) if i is None else i
        mk = torch.zeros_like(s.lk[i])
        mk[:, -1] = True
        return s.li[i], s.lk[i], mk

    def lookup(s, b, i=None):
        i = s.draw(b, s.n_train) if i is None else i
        return s.ki[i], s.kk[i], s.kmk[i]


def rope_pos(keep):
    """RoPE positions of left-padded rows: counted from each row's first real token (pads 0),
    as distill lays a batch out."""
    return (keep.long().cumsum(1) - 1).clamp(min=0)


def sft(p, pk, r):
    """(ids, keep, maskable) of prompt rows p (keep pk) followed by responses r."""
    ones = torch.ones_like(r, dtype=torch.bool)
    return torch.cat((p, r), 1), torch.cat((pk, ones), 1), torch.cat((torch.zeros_like(pk), ones), 1)


def masked_loss(model, ids, keep, mk, t, dev, gen):
    """LLaDA loss for one group of rows: mask maskable tokens w.p. t (per row), CE on the
    masked ones weighted 1/t, each row divided by its maskable length; mean over rows."""
    ids, mk = torch.as_tensor(ids, device=dev), torch.as_tensor(mk, device=dev)
    keep_t = None if keep is None else torch.as_tensor(keep, device=dev)
    t = torch.as_tensor(t, dtype=torch.float32, device=dev)
    m = mk & (torch.rand(ids.shape, device=dev, generator=gen) < t[:, None])
    x = torch.where(m, torch.full_like(ids, ckpt.MASK_ID), ids)
    if keep_t is None:
        pos = torch.arange(ids.shape[1], device=dev).expand_as(ids)
    else:
        pos = rope_pos(keep_t)
    with torch.autocast(dev.split(":")[0], dtype=torch.bfloat16):
        h = model(x, pos, keep_t)
        logits = model.head(h[m])
    ce = F.cross_entropy(logits.float(), ids[m], reduction="none")
    row = m.nonzero()[:, 0]
    w = 1.0 / (t[row] * mk.sum(1)[row].float())
    return (ce * w).sum() / ids.shape[0], ce.detach(), m


def heldout_by_ratio(model, data, dev, ratios=(0.1, 0.3, 0.5, 0.7, 0.9), rows=256):
    """Mean CE on masked held-out tokens at fixed mask ratios (plain, unweighted), same rows
    and masks for every call (seeded)."""
    rng = np.random.default_rng(1234)
    i = rng.integers(0, len(data.held) - 256, rows)
    x = np.stack([data.held[j:j + 256] for j in i])
    g = torch.Generator(device=dev)
    out = {}
    model.eval()
    with torch.no_grad():
        for r in ratios:
            g.manual_seed(int(r * 1000))
            tot, n = 0.0, 0
            for k in range(0, rows, 64):
                xb = x[k:k + 64]
                _, ce, m = masked_loss(model, xb, None, np.ones_like(xb, bool), [r] * len(xb), dev, g)
                tot += ce.sum().item()
                n += ce.numel()
            out[f"{r:.1f}"] = round(tot / n, 4)
    model.train()
    return out


def diagnostics(model, data, dev):
    """On the never-trained MCQ items: (1) the letter head given the gold response (with the
    recall format this is copying the response's letter), (2) the response tokens predicted in
    one pass with the whole response masked (can it compute the value?), (3) the lookup row's
    letters all masked (can it match a value to its option in the MCQ's own context?), each
    overall and per kind."""
    i = torch.arange(data.n_train, data.n_train + data.n_diag, device=dev)
    model.eval()
    out = {}
    with torch.no_grad(), torch.autocast(dev.split(":")[0], dtype=torch.bfloat16):
        ids, keep, _ = data.letters(len(i), i)
        x = ids.clone()
        x[:, -1] = ckpt.MASK_ID
        pos = rope_pos(keep)
        lg = model.head(model(x, pos, keep)[:, -1]).float()[:, data.letter_ids]
        ok = data.letter_ids[lg.argmax(-1)] == data.letter[i]
        ids, keep, mk = data.mcq(len(i), 32, i)
        x = torch.where(mk, ckpt.MASK_ID, ids)
        pos = rope_pos(keep)
        pred = model.head(model(x, pos, keep)[:, -32:]).argmax(-1)
        gold = ids[:, -32:]
        real = gold != ckpt.EOS_ID
        tok_ok = ((pred == gold) & real).sum(1).float() / real.sum(1).clamp(min=1)
        whole = ((pred == gold) | ~real).all(1)
        # (3) matching in the MCQ's own context: the lookup row's letters, all masked at once
        ids, keep, mk = data.lookup(len(i), i)
        pos = rope_pos(keep)
        lk = model(torch.where(mk, ckpt.MASK_ID, ids), pos, keep)
        hit = (model.head(lk).argmax(-1) == ids) & mk
        match = hit.sum(1).float() / mk.sum(1).clamp(min=1)
    for k, name in [(None, "all"), (0, "arith"), (1, "unit"), (2, "fact")]:
        sel = torch.ones_like(ok) if k is None else data.kind[i] == k
        out[f"letter_acc_{name}"] = round(ok[sel].float().mean().item(), 3)
        out[f"resp_tok_acc_{name}"] = round(tok_ok[sel].mean().item(), 3)
        out[f"resp_exact_{name}"] = round(whole[sel].float().mean().item(), 3)
        out[f"match_acc_{name}"] = round(match[sel].mean().item(), 3)
    model.train()
    return out


def main_groups(a, data, sc, fills, step, G):
    """One step's rows after the curriculum: (name, ids, keep, maskable, fixed t or None)."""
    groups = []
    xb = data.text(sc(a.text_rows))
    groups.append(("text", xb, None, torch.ones_like(xb, dtype=torch.bool), None))
    groups.append(("cont",) + data.cont(sc(a.cont_rows), G) + (None,))
    groups.append(("mcq",) + data.mcq(sc(a.mcq_rows), fills[step % len(fills)]) + (None,))
    groups.append(("letter",) + data.letters(sc(a.letter_rows)) + (1.0,))
    if a.lookup_rows:
        groups.append(("lookup",) + data.lookup(sc(a.lookup_rows)) + (1.0,))
    return groups


def param_groups(model, lr, lr_embed=0.0):
    """AdamW groups: the hidden matrices (weight decay 0.1, lr x 1), the embedding and LM head
    (decay 0.1, lr x lr_embed/lr: muP-style, the width-independent layers can take a larger lr
    than the hidden ones, whose lr has to fall with width for the option matching to start: a
    CPU probe, teacher.md "Runs 7-9"), and the norms (no decay). Each group starts at lr x its
    "mult"; a schedule rescales the peak by the same "mult"."""
    io = {id(model.emb.weight), id(model.head.weight)}
    mult = (lr_embed / lr) if lr_embed else 1.0
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.dim() == 2 and id(p) not in io], "weight_decay": 0.1, "mult": 1.0, "lr": lr},
            {"params": [p for p in ps if id(p) in io], "weight_decay": 0.1, "mult": mult, "lr": lr * mult},
            {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0, "mult": 1.0, "lr": lr}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=460)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: time only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=1.7e-4)
    ap.add_argument("--lr-embed", type=float, default=2e-3,
                    help="peak lr of the embedding and LM head (0: --lr); the hidden matrices keep --lr")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--scale", type=float, default=1.0, help="batch sizes x this")
    ap.add_argument("--text-rows", type=int, default=24)
    ap.add_argument("--cont-rows", type=int, default=16)
    ap.add_argument("--mcq-rows", type=int, default=160)
    ap.add_argument("--letter-rows", type=int, default=96)
    ap.add_argument("--lookup-rows", type=int, default=32,
                    help="rows naming every option's letter after its value, letters masked (0: none)")
    ap.add_argument("--mcq-fills", default="32,32,64,128,32,256",
                    help="MCQ rows' gen lengths, cycled per step (EOS fill after the response)")
    ap.add_argument("--mcq-format", default="recall", choices=["value", "named", "short", "recall"])
    ap.add_argument("--t-sampling", default="stratified", choices=["iid", "stratified"],
                    help="per-row t: iid U(eps, 1), or low-discrepancy within each group (MDLM)")
    ap.add_argument("--mimetic", type=float, default=0.0,
                    help="mimetic attention init: W_k = W_q per KV head, W_q scaled by this (0: off)")
    ap.add_argument("--recall-steps", type=int, default=1500,
                    help="curriculum: the first N steps train on short recall rows only (recall.npz)")
    ap.add_argument("--recall-rows", type=int, default=256)
    ap.add_argument("--recall-rows-after", type=int, default=64, help="recall rows per step after the curriculum")
    ap.add_argument("--diag", type=int, default=768, help="MCQ items held back for the diagnostics")
    ap.add_argument("--diag-every", type=int, default=1000)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = a.device
    torch.backends.cuda.matmul.allow_tf32 = True
    g = torch.Generator(device=dev)
    g.manual_seed(a.seed)
    gd = torch.Generator(device=dev)
    gd.manual_seed(a.seed + 1)
    data = Data(a.data, dev, a.mcq_format, a.diag, gd)
    if (a.recall_steps or a.recall_rows_after) and not data.n_recall:
        sys.exit(f"{a.data}/recall.npz is missing: rebuild the data with build_data.py")
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    c = ckpt.config(meta["vocab"], a.hidden, a.inter, a.layers, a.heads, a.kv_heads, 64)
    model = Model(c).to(dev)
    if a.mimetic:
        model.mimetic_(a.mimetic)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"params {nparams / 1e6:.1f}M  config {json.dumps(c)}", flush=True)
    before = heldout_by_ratio(model, data, dev)
    print("held-out masked CE before training", before, flush=True)
    opt = torch.optim.AdamW(param_groups(model, a.lr, a.lr_embed), betas=(0.9, 0.95),
                            **({"fused": True} if dev.startswith("cuda") else {}))
    sc = lambda n: max(1, int(n * a.scale))  # noqa: E731
    fills = [int(x) for x in a.mcq_fills.split(",")]
    t0 = time.time()
    step, hist, diags, tokens = 0, [], [], 0
    while True:
        el = time.time() - t0
        if el >= a.seconds or (a.max_steps and step >= a.max_steps):
            break
        frac = el / a.seconds if not a.max_steps else max(el / a.seconds, step / a.max_steps)
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for pg in opt.param_groups:
            pg["lr"] = lr * pg["mult"]
        G = 256 if step % 2 == 0 else 128
        groups = []
        if step < a.recall_steps:  # curriculum: short recall rows alone first
            groups.append(("recall",) + data.recall(sc(a.recall_rows)) + (1.0,))
        else:
            groups += main_groups(a, data, sc, fills, step, G)
            if a.recall_rows_after:
                groups.append(("recall",) + data.recall(sc(a.recall_rows_after)) + (1.0,))
        opt.zero_grad(set_to_none=True)
        parts = {}
        for name, ids, keep, mk, tfix in groups:
            n = ids.shape[0]
            if tfix is not None:
                t = torch.full((n,), tfix, device=dev)
            elif a.t_sampling == "iid":
                t = (1 - EPS) * torch.rand(n, device=dev, generator=g) + EPS
            else:
                # low-discrepancy t (MDLM): one uniform offset, rows spread evenly over [0, 1)
                # -- the same marginal U(eps, 1), a lower-variance estimate of the loss
                u = (torch.rand(1, device=dev, generator=g) + torch.arange(n, device=dev) / n) % 1.0
                t = (1 - EPS) * u[torch.randperm(n, device=dev, generator=g)] + EPS
            loss, _, _ = masked_loss(model, ids, keep, mk, t, dev, g)
            loss.backward()
            parts[name] = loss.item() if step % 50 == 0 else None
            tokens += ids.numel()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            rec = {"step": step, "s": round(el, 1), "lr": round(lr, 6), "tokens": tokens, **parts}
            hist.append(rec)
            print(json.dumps(rec), flush=True)
        if a.diag_every and step % a.diag_every == 0 and step > 0:
            d = {"step": step, "s": round(time.time() - t0, 1), **diagnostics(model, data, dev)}
            diags.append(d)
            print("diag", json.dumps(d), flush=True)
        step += 1
    secs = time.time() - t0
    after = heldout_by_ratio(model, data, dev)
    final = {"step": step, **diagnostics(model, data, dev)}
    diags.append(final)
    print("diag", json.dumps(final), flush=True)
    print(f"trained {step} steps, {tokens / 1e6:.1f}M tokens in {secs:.0f}s; held-out masked CE after", after, flush=True)
    info = {"steps": step, "tokens": tokens, "seconds": round(secs, 1), "params": nparams, "seed": a.seed,
            "args": vars(a), "heldout_ce_by_mask_ratio_before": before, "heldout_ce_by_mask_ratio_after": after,
            "diagnostics": diags, "history": hist, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if dev.startswith("cuda") else None}
    ckpt.save(a.out, c, model.hf_tensors(), os.path.join(a.data, "tokenizer.json"), extra=info)
    if a.log:
        with open(a.log, "w") as f:
            json.dump(info, f, indent=1)
    if dev.startswith("cuda"):
        hf_check(model, data, a.out, dev, a.log)


def hf_check(model, data, out, dev, log):
    """transformers loads the checkpoint as LlamaForCausalLM and, with is_causal false,
    gives our logits (bf16) and is bidirectional; recorded, never fatal."""
    res = {}
    try:
        import transformers
        from transformers import LlamaForCausalLM
        res["transformers"] = transformers.__version__
        hf = LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.bfloat16).to(dev).eval()
        x = torch.from_numpy(np.stack([data.held[j:j + 128] for j in (0, 4000, 8000, 12000)])).to(dev)
        x[:, 40:60] = ckpt.MASK_ID
        pos = torch.arange(128, device=dev).expand_as(x)
        m = model.to(torch.bfloat16).eval()
        with torch.no_grad():
            ours = m.head(m(x, pos, None)).float()
            theirs = hf(input_ids=x).logits.float()
            y = x.clone()
            y[:, -1] = (y[:, -1] + 1) % 100 + 10
            moved = (hf(input_ids=y).logits.float()[:, 0] - theirs[:, 0]).abs().max().item()
        res["max_abs_diff"] = (ours - theirs).abs().max().item()
        res["rel_err"] = ((ours - theirs).norm() / theirs.norm()).item()
        res["argmax_agree"] = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
        res["pos0_moves_when_last_token_changes"] = moved
    except Exception as e:  # noqa: BLE001
        res["error"] = repr(e)[:500]
    print("transformers check", json.dumps(res), flush=True)
    if log:
        info = json.load(open(log))
        info["transformers_check"] = res
        with open(log, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
