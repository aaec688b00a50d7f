"""Why: the teacher's training and evaluation data, built from what a fresh Debian machine
ships (package documentation in /usr/share/doc, the Python standard library's sources) plus a
synthetic multiple-choice task with computable gold answers, tokenized here so the GPU box
(no network, no corpus) only trains.

    python3 bench/teacher/build_data.py --out DIR [--seed 0] [--mb 24] [--eval-text 512] [--eval-mcq 512]

Writes DIR/: tokenizer.json (byte-level BPE trained on the corpus, vocab 16384, specials
<|endoftext|> <|pad|> <|mask|> <|user|> <|assistant|> <|end|> at ids 0..5), text.npz (train
and held-out token streams, documents split by EOS, held out = 1 document in 20 by path hash),
mcq.npz (training MCQ items: rendered prompt ids, response ids in each of FORMATS and a lookup
row, letter id, kind), recall.npz (short recall rows: option lines, then every value named with
its letter), cont.npz (text-continuation prompts), prompts.jsonl (the held-out evaluation
prompts in the stage-3 prompts.jsonl schema: text continuations from held-out documents, then
MCQ items in the `dlm-data mcq` template), meta.json.

MCQ kinds (4 options, gold A-D uniformly): addition/subtraction of numbers < 100 (held-out
operand pairs never trained), unit conversion (held-out (unit, n) pairs never trained), and
lookups in a generated fact table of fictional countries (capital, currency, language; every
fact also stated in the training text; held-out items ask known facts with fresh distractors
and option order). The response is a short computation, e.g. " 37 + 48 = 85." (format "value";
"named" adds ", so the answer is B", "recall" adds " 85 is B", "short" is the value alone);
distill then asks the letter after "\\nAnswer:".
"""
import argparse
import gzip
import hashlib
import json
import os
import random
import sys

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402

TEXT_PROMPT = "Continue the text:\n\n"
MCQ_HEAD = "The following is a multiple choice question. Answer with the letter of the correct option.\n\n"
LETTERS = "ABCDEFGHIJ"
FORMATS = ("named", "value", "short", "recall")
PROMPT_TOKENS = 48  # text prompts: 48 tokens of a held-out document


def h(s):
    return int(hashlib.sha256(s.encode()).hexdigest()[:12], 16)


def read_doc(path, cap):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read(cap)
        else:
            with open(path, "rb") as f:
                raw = f.read(cap)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    if "\x00" in text or len(text) < 200:
        return None
    return text


def collect(mb):
    """(path, text) pairs in sorted path order: /usr/share/doc text files, then the Python
    stdlib; identical contents (license copies) kept once; each tree capped at mb/2 MB."""
    docs, seen = [], set()
    trees = [("/usr/share/doc", lambda n: n.endswith((".txt", ".md", ".rst", ".gz")) or "." not in n
              or n.startswith(("README", "NEWS", "copyright"))),
             (f"/usr/lib/python3.{sys.version_info.minor}", lambda n: n.endswith(".py"))]
    for root, want in trees:
        budget = mb * 1_000_000 // 2
        paths = []
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
            paths += [os.path.join(d, n) for n in sorted(files) if want(n)]
        for p in sorted(paths):
            if budget <= 0:
                break
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            t = read_doc(p, 64_000)
            if t is None:
                continue
            k = hashlib.sha256(t.encode()).digest()
            if k in seen:
                continue
            seen.add(k)
            docs.append((p, t))
            budget -= len(t)
    return docs


# ---------------------------------------------------------------- synthetic MCQ
SYL = ["ka", "lo", "mi", "ra", "ven", "tor", "sa", "bel", "dun", "mar", "ish", "ol", "pe", "qu", "zan",
       "rith", "gal", "no", "th", "ur", "ve", "lin", "dor", "ca", "fen", "ho", "ja", "ki", "sel", "wy"]


def fact_table(rng, n=240):
    def name(k):
        return "".join(rng.choice(SYL) for _ in range(k)).capitalize()
    used, rows = set(), []
    while len(rows) < n:
        c = name(rng.choice([2, 3]))
        cap = name(rng.choice([2, 3]))
        if c in used or cap in used:
            continue
        used |= {c, cap}
        rows.append({"country": c + "ia", "capital": cap, "currency": name(2).lower(),
                     "language": name(2) + "ish"})
    return rows


UNITS = [("meters", "centimeters", 100), ("kilometers", "meters", 1000), ("hours", "minutes", 60),
         ("minutes", "seconds", 60), ("kilograms", "grams", 1000), ("days", "hours", 24),
         ("weeks", "days", 7), ("feet", "inches", 12), ("liters", "milliliters", 1000),
         ("yards", "feet", 3), ("years", "months", 12), ("dozens", "items", 12)]


def distract_num(rng, c, step):
    out = set()
    while len(out) < 3:
        d = c + rng.choice([-1, 1]) * rng.choice([1, 2, step, 2 * step, 10])
        if d >= 0 and d != c:
            out.add(d)
    return [str(x) for x in out]


def mcq_item(rng, kind, facts, held, want_held):
    """One item: (question, options, gold index, reasoning template with {L}). held(key) says
    whether an arithmetic/unit key is held out; want_held selects the split."""
    while True:
        if kind == "arith":
            a, b = rng.randrange(100), rng.randrange(100)
            op = rng.choice("+-")
            if op == "-" and b > a:
                a, b = b, a
            if held(f"arith{a}{op}{b}") != want_held:
                continue
            c = a + b if op == "+" else a - b
            q = f"What is {a} {op} {b}?"
            right, wrong = str(c), distract_num(rng, c, 10)
            why = f"{a} {op} {b} = {c}"
        elif kind == "unit":
            big, small, f = rng.choice(UNITS)
            n = rng.randrange(1, 25)
            if held(f"unit{big}{n}") != want_held:
                continue
            c = n * f
            q = f"How many {small} are in {n} {big}?"
            right, wrong = str(c), distract_num(rng, c, f)
            one = {"feet": "foot", "inches": "inch"}.get(big, big[:-1])
            why = f"1 {one} is {f} {small}, so {n} {big} is {n} x {f} = {c} {small}"
        else:
            row = rng.choice(facts)
            attr = rng.choice(["capital", "currency", "language"])
            q = {"capital": f"What is the capital of {row['country']}?",
                 "currency": f"What is the currency of {row['country']}?",
                 "language": f"What language is spoken in {row['country']}?"}[attr]
            right = row[attr]
            pool = [r[attr] for r in facts if r[attr] != right]
            wrong = rng.sample(pool, 3)
            why = {"capital": f"The capital of {row['country']} is {right}",
                   "currency": f"The currency of {row['country']} is the {right}",
                   "language": f"People in {row['country']} speak {right}"}[attr]
        gold = rng.randrange(4)
        opts = list(wrong)
        rng.shuffle(opts)
        opts.insert(gold, right)
        return q, opts, gold, why


def recall_item(rng, facts=None):
    """A short associative-recall row in the MCQ's own notation: four option lines, then every
    value named with its letter in a random order (train.py masks the letters). Option-only
    rows are where the value -> letter matching is learned first (it starts within ~400 steps
    here at a width-scaled lr, never within 6k steps on full MCQ prompts; teacher.md).

    With `facts`, the values are drawn as the MCQ options are: a number with its near-miss
    distractors (arithmetic or unit sizes) or one attribute of four fact rows, so the match
    works on the options' real lengths (run 8: rows of short names taught an offset that
    named the option above a 3-syllable one). Without, run 7-8's short rows (numbers < 1000
    or 2 of 9 syllables)."""
    if facts is not None:
        k = rng.randrange(3)
        if k < 2:
            c = rng.randrange(200) if k == 0 else rng.randrange(1, 25) * rng.choice(UNITS)[2]
            vals = [str(c)] + distract_num(rng, c, rng.choice([10, 12, 60, 100, 1000]))
        else:
            attr = rng.choice(["capital", "currency", "language"])
            vals = [r[attr] for r in rng.sample(facts, 4)]
        rng.shuffle(vals)
    elif rng.random() < 0.5:
        vals = [str(v) for v in rng.sample(range(1000), 4)]
    else:
        vals = []
        while len(vals) < 4:  # short names (2 of 9 syllables): few tokens
            v = "".join(rng.choice(SYL[:9]) for _ in range(2)).capitalize()
            if v not in vals:
                vals.append(v)
    body = "\n".join(f"{LETTERS[i]}. {v}" for i, v in enumerate(vals)) + "\n\n"
    return body, named_letters(vals, rng.sample(range(4), 4))


def named_letters(vals, order):
    """' v2 is C, v0 is A, ...': every value with its letter, in `order` (recall and lookup
    rows; train.py masks the letters)."""
    return " " + ", ".join(f"{vals[i]} is {LETTERS[i]}" for i in order) + "."


def mcq_prompt(q, opts):
    body = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(opts))
    return f"{MCQ_HEAD}{q}\n\n{body}\n\nAnswer:"


def fact_text(facts, rng):
    lines = []
    for r in facts:
        for _ in range(2):
            s = [f"{r['country']} is a country whose capital is {r['capital']}.",
                 f"The currency of {r['country']} is the {r['currency']}.",
                 f"People in {r['country']} speak {r['language']}."]
            rng.shuffle(s)
            lines.append(" ".join(s))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mb", type=int, default=24)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--mcq-train", type=int, default=60000)
    ap.add_argument("--cont-train", type=int, default=40000)
    ap.add_argument("--facts", type=int, default=60)
    ap.add_argument("--recall", type=int, default=100000, help="short recall rows (recall.npz)")
    ap.add_argument("--recall-values", default="mcq", choices=["mcq", "short"],
                    help="recall rows' values: drawn like the MCQ options (default) or run 7-8's short ones")
    ap.add_argument("--eval-text", type=int, default=512)
    ap.add_argument("--eval-mcq", type=int, default=512)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    docs = collect(a.mb)
    facts = fact_table(rng, a.facts)
    fl = fact_text(facts, rng)
    print(f"{len(docs)} documents, {sum(len(t) for _, t in docs) / 1e6:.1f} MB; {len(facts)} facts", flush=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=ckpt.SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = [t for _, t in docs] + fl
    tok.train_from_iterator(corpus, tr)
    for i, s in enumerate(ckpt.SPECIALS):
        assert tok.token_to_id(s) == i, s
    tp = os.path.join(a.out, "tokenizer.json")
    tok.save(tp)
    base = len(tok.encode("\nAnswer:").ids)
    for L in LETTERS[:4]:
        assert len(tok.encode("\nAnswer: " + L).ids) == base + 1, f"' {L}' is not one token"
    letter_ids = [tok.encode("\nAnswer: " + L).ids[-1] for L in LETTERS[:4]]
    print("tokenizer trained; vocab", tok.get_vocab_size(), "letters", letter_ids, flush=True)

    held_doc = [h(p) % 20 == 0 for p, _ in docs]
    enc = tok.encode_batch([t for _, t in docs])
    tr_ids, he_ids, he_docs = [], [], []
    for (p, _), e, ho in zip(docs, enc, held_doc):
        (he_ids if ho else tr_ids).extend(e.ids + [ckpt.EOS_ID])
        if ho:
            he_docs.append((p, e.ids))
    for e in tok.encode_batch(fl):
        tr_ids.extend(e.ids + [ckpt.EOS_ID])
    np.savez_compressed(os.path.join(a.out, "text.npz"), train=np.array(tr_ids, np.uint16),
                        heldout=np.array(he_ids, np.uint16))
    print(f"text tokens: train {len(tr_ids) / 1e6:.2f}M, held out {len(he_ids) / 1e6:.2f}M "
          f"({len(he_docs)} documents)", flush=True)

    held = lambda key: h(key) % 5 == 0  # noqa: E731
    kinds = ["arith", "unit", "fact"]
    # Training MCQ items, one response per format (train.py --mcq-format picks one):
    # named " {why}, so the answer is B." (the response names the letter), value " {why}."
    # (the letter head after "\nAnswer:" matches the value to an option), short " {value}.",
    # recall " {why}. {value} is B." (the letter where the recall rows put it).
    prompts, golds, kinds_, resp = [], [], [], {f: [] for f in FORMATS + ("lookup",)}
    lrng = random.Random(a.seed + 3)
    for i in range(a.mcq_train):
        q, opts, g, why = mcq_item(rng, kinds[i % 3], facts, held, False)
        prompts.append(ckpt.render(mcq_prompt(q, opts)))
        resp["named"].append(f" {why}, so the answer is {LETTERS[g]}.")
        resp["value"].append(f" {why}.")
        resp["short"].append(f" {opts[g]}.")
        # recall: the letter right after the value, in the recall rows' own pattern
        resp["recall"].append(f" {why}. {opts[g]} is {LETTERS[g]}.")
        golds.append(g)
        kinds_.append(i % 3)
        # lookup: every option's value named with its letter, in a random order; train.py
        # masks the letters (dense practice of the value -> letter matching the answer needs)
        resp["lookup"].append(named_letters(opts, lrng.sample(range(len(opts)), len(opts))))
    flat = lambda xs: (np.array([t for x in xs for t in x], np.uint16),  # noqa: E731
                       np.cumsum([0] + [len(x) for x in xs]).astype(np.int64))
    arrays = {}
    arrays["prompt"], arrays["prompt_off"] = flat([e.ids for e in tok.encode_batch(prompts)])
    for f in FORMATS + ("lookup",):
        arrays[f"resp_{f}"], arrays[f"resp_{f}_off"] = flat([e.ids for e in tok.encode_batch(resp[f])])
    np.savez_compressed(os.path.join(a.out, "mcq.npz"), **arrays,
                        letter=np.array([letter_ids[g] for g in golds], np.int64),
                        kind=np.array(kinds_, np.int8), letter_ids=np.array(letter_ids, np.int64),
                        lookup_punct=np.array([tok.token_to_id(","), tok.token_to_id(".")], np.int64),
                        answer_suffix=np.array(tok.encode("\nAnswer:").ids, np.int64))

    # Training text continuations (the held-out text prompts' form): the prompt is the
    # rendered TEXT_PROMPT + decode(48 stream tokens), encoded as distill encodes it; the
    # response is read from the stream at cont_start + 48 by the trainer.
    crng = random.Random(a.seed + 2)
    starts, texts = [], []
    while len(starts) < a.cont_train:
        s = crng.randrange(0, len(tr_ids) - PROMPT_TOKENS - 300)
        w = tr_ids[s:s + PROMPT_TOKENS]
        if ckpt.EOS_ID in w:
            continue
        starts.append(s)
        texts.append(ckpt.render(TEXT_PROMPT + tok.decode(w)))
    c_ids, c_off = flat([e.ids for e in tok.encode_batch(texts)])
    # Short recall rows (train.py --recall-steps: a curriculum before the MCQ rows).
    rrng = random.Random(a.seed + 4)
    rec = [recall_item(rrng, facts if a.recall_values == "mcq" else None) for _ in range(a.recall)]
    r_p, r_po = flat([e.ids for e in tok.encode_batch([b for b, _ in rec])])
    r_r, r_ro = flat([e.ids for e in tok.encode_batch([r for _, r in rec])])
    np.savez_compressed(os.path.join(a.out, "recall.npz"), prompt=r_p, prompt_off=r_po, resp=r_r, resp_off=r_ro)

    np.savez_compressed(os.path.join(a.out, "cont.npz"), prompt=c_ids, prompt_off=c_off,
                        start=np.array(starts, np.int64) + PROMPT_TOKENS)

    # Held-out evaluation prompts (stage-3 prompts.jsonl schema).
    out = []
    erng = random.Random(a.seed + 1)
    cands = [(p, ids) for p, ids in he_docs if len(ids) >= PROMPT_TOKENS + 256]
    i = 0
    while len(out) < a.eval_text:
        p, ids = cands[i % len(cands)]
        s = erng.randrange(0, len(ids) - PROMPT_TOKENS - 256 + 1)
        text = tok.decode(ids[s:s + PROMPT_TOKENS])
        out.append({"id": f"text-heldout-{len(out):06d}", "source": "teacher-corpus", "repo": None,
                    "commit": None, "file": p, "row": s, "prompt": TEXT_PROMPT + text})
        i += 1
    for j in range(a.eval_mcq):
        kind = kinds[j % 3]
        q, opts, g, _ = mcq_item(erng, kind, facts, held, True if kind != "fact" else False)
        out.append({"id": f"mcq-{kind}-heldout-{j:06d}", "source": f"synthetic-{kind}", "repo": None,
                    "commit": None, "file": "bench/teacher/build_data.py", "row": j,
                    "prompt": mcq_prompt(q, opts), "options": opts, "gold": LETTERS[g]})
    with open(os.path.join(a.out, "prompts.jsonl"), "w") as f:
        for o in out:
            f.write(json.dumps(o) + "\n")
    meta = {"seed": a.seed, "documents": len(docs), "heldout_documents": len(he_docs),
            "train_tokens": len(tr_ids), "heldout_tokens": len(he_ids), "vocab": tok.get_vocab_size(),
            "mcq_train": a.mcq_train, "eval_text": a.eval_text, "eval_mcq": a.eval_mcq,
            "letter_ids": letter_ids, "text_prompt": TEXT_PROMPT, "prompt_tokens": PROMPT_TOKENS,
            "facts": len(facts)}
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta), flush=True)


if __name__ == "__main__":
    main()
