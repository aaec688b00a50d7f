"""Why: a CPU-sized check of whether the value -> letter matching MCQ answers need is being
learned, before spending device time: a tiny model of train.py's own `Model`/`masked_loss`
trains on the letters of recall rows (recall.npz: option lines only) for --recall-steps, then on
the full MCQ lookup rows or answer slots (--full; mcq.npz), printing the letters' cross-entropy (ln 4 = 1.386 is chance)
and, every 5 prints, the letter head's accuracy given the gold response (train.diagnostics).

    python3 probe_recall.py --data DIR [--recall-steps 2500] [--full-steps 1500] [--layers 2]

Seen on a 2-core box (PyTorch 2.15 CPU, ~1-5 steps/s): recall rows leave ln 4 after ~400-800
steps when lr x width is ~0.13 (128 wide at 1e-3, 512 at 2.5e-4) and stall at >= 0.26; the full
rows from step 0 never do within ~2k (teacher.md, "A lead" and "Runs 7-9")."""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--recall-steps", type=int, default=2500)
    ap.add_argument("--full-steps", type=int, default=1500)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-embed", type=float, default=0.0, help="train.py --lr-embed (0: --lr)")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--mimetic", type=float, default=0.0, help="train.py --mimetic (0: off)")
    ap.add_argument("--full", default="lookup", choices=["lookup", "letter"],
                    help="second phase: MCQ lookup rows, or the answer slot after the gold response")
    a = ap.parse_args()
    torch.manual_seed(0)
    g, gd = torch.Generator(), torch.Generator()
    g.manual_seed(0)
    gd.manual_seed(1)
    d = train.Data(a.data, "cpu", "value", 256, gd)
    if not d.n_recall:
        sys.exit(f"{a.data}/recall.npz is missing: rebuild the data with build_data.py")
    vocab = json.load(open(os.path.join(a.data, "meta.json")))["vocab"]
    m = train.Model(ckpt.config(vocab, a.hidden, 2 * a.hidden, a.layers, a.hidden // 64, 1, 64))
    if a.mimetic:
        m.mimetic_(a.mimetic)
    opt = torch.optim.AdamW(train.param_groups(m, a.lr, a.lr_embed), betas=(0.9, 0.95))
    t0 = time.time()
    for step in range(a.recall_steps + a.full_steps + 1):
        phase = "recall" if step < a.recall_steps else "full"
        ids, keep, mk = (d.recall(a.rows) if phase == "recall"
                         else d.lookup(a.rows) if a.full == "lookup" else d.letters(a.rows))
        loss, ce, _ = train.masked_loss(m, ids, keep, mk, torch.ones(a.rows), "cpu", g)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if step % a.every == 0:
            acc = train.diagnostics(m, d, "cpu")["letter_acc_all"] if step % (5 * a.every) == 0 else ""
            print(step, phase, f"{time.time() - t0:.0f}s", f"letter CE {ce.mean().item():.3f}", acc, flush=True)


if __name__ == "__main__":
    main()
