"""Why: train, on one GPU with PyTorch in a few minutes, a small LLaDA-style masked-diffusion
LM of the teacher's family (Llama weights, bidirectional, GQA, untied head, head_dim 64) on the
data build_data.py made, and save it as an HF checkpoint `dlm-data distill` loads.

    python3 train.py --data DIR --out CKPT [--seconds 240] [--seed 0] [--log train.json]

Objective (LLaDA): per row t ~ U(eps, 1); every maskable token is replaced by <|mask|> with
probability t; cross-entropy on the masked tokens weighted 1/t, divided by the row's maskable
length. Rows per step: plain text windows (all 256 tokens maskable), and SFT rows whose prompt
is never masked: text continuations (prompt: chat-rendered "Continue the text" + 48 tokens;
response: the next G tokens, G in {128, 256}), MCQ items (response: the short computation
naming the letter, then EOS to fill G, as LLaDA's SFT pads with EOS), and MCQ answer slots
(prompt + response + "\\nAnswer:", the letter masked: t = 1). MCQ response fills cycle
through G = 32/128/64/256 (see the loop). Rows are left-padded with a key
padding mask and RoPE positions counted from the first real token, as distill lays them out.
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
class Data:
    def __init__(s, d, rng):
        t = np.load(os.path.join(d, "text.npz"))
        s.train, s.held = t["train"].astype(np.int64), t["heldout"].astype(np.int64)
        m = np.load(os.path.join(d, "mcq.npz"))
        s.mp, s.mpo, s.mr, s.mro = m["prompt"], m["prompt_off"], m["resp"], m["resp_off"]
        s.letter, s.suffix = m["letter"], list(m["answer_suffix"])
        c = np.load(os.path.join(d, "cont.npz"))
        s.cp, s.cpo, s.cstart = c["prompt"], c["prompt_off"], c["start"]
        s.rng = rng

    def text(s, b, l=256, stream=None):
        st = s.train if stream is None else stream
        i = s.rng.integers(0, len(st) - l, b)
        return np.stack([st[j:j + l] for j in i])

    def sft(s, prompts, resps):
        """Left-padded rows: (ids, keep, maskable) as numpy."""
        L = max(len(p) + len(r) for p, r in zip(prompts, resps))
        n = len(prompts)
        ids = np.full((n, L), ckpt.PAD_ID, np.int64)
        keep = np.zeros((n, L), bool)
        mk = np.zeros((n, L), bool)
        for k, (p, r) in enumerate(zip(prompts, resps)):
            row = list(p) + list(r)
            ids[k, L - len(row):] = row
            keep[k, L - len(row):] = True
            mk[k, L - len(r):] = True
        return ids, keep, mk

    def fill(s, r, g):
        r = list(r)[:g]
        if ckpt.EOS_ID in r:
            r = r[:r.index(ckpt.EOS_ID)]
        return r + [ckpt.EOS_ID] * (g - len(r))

    def cont(s, b, g):
        i = s.rng.integers(0, len(s.cstart), b)
        ps = [s.cp[s.cpo[j]:s.cpo[j + 1]] for j in i]
        rs = [s.fill(s.train[s.cstart[j]:s.cstart[j] + g], g) for j in i]
        return s.sft(ps, rs)

    def mcq(s, b, g):
        i = s.rng.integers(0, len(s.letter), b)
        ps = [s.mp[s.mpo[j]:s.mpo[j + 1]] for j in i]
        rs = [s.fill(s.mr[s.mro[j]:s.mro[j + 1]], g) for j in i]
        return s.sft(ps, rs)

    def letters(s, b):
        i = s.rng.integers(0, len(s.letter), b)
        ps = [list(s.mp[s.mpo[j]:s.mpo[j + 1]]) + list(s.mr[s.mro[j]:s.mro[j + 1]]) + s.suffix for j in i]
        return s.sft(ps, [[int(s.letter[j])] for j in i])


def masked_loss(model, ids, keep, mk, t, dev, gen):
    """LLaDA loss for one group of rows: mask maskable tokens w.p. t (per row), CE on the
    masked ones weighted 1/t, each row divided by its maskable length; mean over rows."""
    ids = torch.from_numpy(ids).to(dev)
    mk = torch.from_numpy(mk).to(dev)
    keep_t = None if keep is None else torch.from_numpy(keep).to(dev)
    t = torch.as_tensor(t, dtype=torch.float32, device=dev)
    m = mk & (torch.rand(ids.shape, device=dev, generator=gen) < t[:, None])
    x = torch.where(m, torch.full_like(ids, ckpt.MASK_ID), ids)
    if keep_t is None:
        pos = torch.arange(ids.shape[1], device=dev).expand_as(ids)
    else:
        pos = (keep_t.long().cumsum(1) - 1).clamp(min=0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
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
    saved, data.rng = data.rng, rng
    x = data.text(rows, 256, data.held)
    data.rng = saved
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=240)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", default=None)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=1536)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--scale", type=float, default=1.0, help="batch sizes x this")
    ap.add_argument("--text-rows", type=int, default=64)
    ap.add_argument("--cont-rows", type=int, default=32)
    ap.add_argument("--mcq-rows", type=int, default=128)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    data = Data(a.data, rng)
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    c = ckpt.config(meta["vocab"], a.hidden, a.inter, a.layers, a.heads, a.kv_heads, 64)
    model = Model(c).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"params {nparams / 1e6:.1f}M  config {json.dumps(c)}", flush=True)
    g = torch.Generator(device=dev)
    g.manual_seed(a.seed)
    before = heldout_by_ratio(model, data, dev)
    print("held-out masked CE before training", before, flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), fused=True)
    sc = lambda n: max(1, int(n * a.scale))  # noqa: E731
    t0 = time.time()
    step, hist, tokens = 0, [], 0
    warm = 100
    while True:
        el = time.time() - t0
        if el >= a.seconds:
            break
        frac = el / a.seconds
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for pg in opt.param_groups:
            pg["lr"] = lr
        G = 256 if step % 2 == 0 else 128
        # MCQ rows: the EOS fill is LLaDA's, but at G = 256 it holds ~94 % of a row's maskable
        # tokens and the few reasoning tokens get little gradient; shorter fills in half the
        # steps weight them more (the sampler's 128/256 still appear every other step).
        Gm = (32, 128, 64, 256)[step % 4]
        groups = []
        xb = data.text(sc(a.text_rows))
        groups.append(("text", xb, None, np.ones_like(xb, bool), None))
        groups.append(("cont",) + data.cont(sc(a.cont_rows), G) + (None,))
        groups.append(("mcq",) + data.mcq(sc(a.mcq_rows), Gm) + (None,))
        groups.append(("letter",) + data.letters(sc(32)) + (1.0,))
        opt.zero_grad(set_to_none=True)
        parts = {}
        for name, ids, keep, mk, tfix in groups:
            n = ids.shape[0]
            t = [tfix] * n if tfix is not None else list((1 - EPS) * rng.random(n) + EPS)
            loss, _, _ = masked_loss(model, ids, keep, mk, t, dev, g)
            loss.backward()
            parts[name] = loss.item() if step % 50 == 0 else None
            tokens += ids.size
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            rec = {"step": step, "s": round(el, 1), "lr": round(lr, 6), "tokens": tokens, **parts}
            hist.append(rec)
            print(json.dumps(rec), flush=True)
        step += 1
    secs = time.time() - t0
    after = heldout_by_ratio(model, data, dev)
    print(f"trained {step} steps, {tokens / 1e6:.1f}M tokens in {secs:.0f}s; held-out masked CE after", after, flush=True)
    info = {"steps": step, "tokens": tokens, "seconds": round(secs, 1), "params": nparams, "seed": a.seed,
            "lr": a.lr, "heldout_ce_by_mask_ratio_before": before, "heldout_ce_by_mask_ratio_after": after,
            "history": hist, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    ckpt.save(a.out, c, model.hf_tensors(), os.path.join(a.data, "tokenizer.json"), extra=info)
    if a.log:
        with open(a.log, "w") as f:
            json.dump(info, f, indent=1)
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
        x = torch.from_numpy(data.text(4, 128, data.held)).to(dev)
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
