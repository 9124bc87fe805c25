r"""Diagnosis for docs/benchmarks.md (trees when sampling): which tree verification rule would let a token tree beat
the best chain when sampling, and by how much?

The verifier built today takes a tree's children as point masses: the rank-j child x_j is accepted with the
target's (residual) probability of x_j, and a rejected child's token is struck from the target's row. A
chain token is accepted with min(1, p/q). ``specdec bench e2e`` measured the calibrated 7-node EAGLE tree at
0.74x the best chain at T 0.8 / top-p 0.95 (docs/benchmarks.md). This script measures, teacher-forced on the
target's own **sampled** continuations of held-out passages, how often a node's rank-j child is the one
accepted under each rule (``m[j]``, Monte Carlo over the draws and the verifier's uniforms), and feeds those
rates to Sequoia's dynamic program (:func:`specdec.decoding.sequoia.sequoia_topology`, positional acceptance: a node's
children fare alike at every depth) to find each rule's best tree and its expected tokens a target call,
against the chain's at the same positions a call. Rules:

- ``chain``: one child a node, drawn from q, accepted with min(1, p/q) (what the verifier's chain mode does);
- ``point``: the q's top-k tokens as point masses (what the verifier's tree mode does);
- ``hybrid``: the first child drawn from q and tested with min(1, p/q); on a reject the row becomes the
  residual norm(max(0, p - q)) (the chain mode's residual pass) and the next children, q's top tokens other
  than the first, are point masses against it;
- ``rsd``: recursive rejection sampling without replacement (Jeon et al., 2024): the children are drawn from q
  without replacement (Gumbel top-k), child j is tested with min(1, p_j / q_j), and a reject sets
  p_{j+1} = norm(max(0, p_j - q_j)) and q_{j+1} = q_j without x_j, renormalised (one residual pass a
  rejected child);
- ``specinfer``: SpecInfer's multi-step rejection: children drawn from q with replacement, q kept.

Every rule is lossless: the token emitted at a node follows the target's p (tests/test_diag_sampled_tree.py).

    python scripts/diag_sampled_tree.py [--prompts 16] [--new-tokens 64] [--trials 128] [--json FILE]

(the defaults are the run in docs/benchmarks.md, about 70 s on 2 cores).

Not a benchmark: no verifier in any face runs ``hybrid``, ``rsd`` or ``specinfer``; the positional model is
checked against the measured chain and point-mass tree (the run's ``check`` lines).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from hwcontract.formats import fixed_point_dist, inv_temp, quantize
from specdec.app.pairs import draft_lm, encode, open_pair
from specdec.decoding.base import Sampling
from specdec.decoding.rows import mask_logits
from specdec.decoding.sequoia import child_probabilities, sequoia_topology, tree_value
from specdec.decoding.tree import Tree
from specdec.models import corpus

RULES = ("chain", "point", "hybrid", "rsd", "specinfer")
#: a position's cost over a round's fixed cost, for the sensitivity lines
POSITION_COSTS = (0.05, 0.02, 0.01, 0.0)


def probs(logits: np.ndarray, s: Sampling) -> np.ndarray:
    """The distribution the verifier tests a row against: top-k / top-p masked, quantized to the stream's
    codes, the core's fixed-point weights at INV_TEMP (as the decode loop draws its draft tokens)."""
    return fixed_point_dist(quantize(mask_logits(logits, s)), inv_temp(s.temperature))


def rows(pair, contexts, s: Sampling):
    """(p, q) per scored position (``contexts``: (tokens, prompt length); the continuation's positions are
    scored): the target's and the draft's rows, teacher-forced, restricted to the tokens either gives mass
    (float64, the same support)."""
    target, draft = pair.target, draft_lm(pair)
    for ctx, n_prompt in contexts:
        target.reset()
        tl = target.forward(ctx).float().numpy()
        draft.reset()
        dl = draft.forward(ctx).float().numpy()
        for i in range(n_prompt - 1, len(ctx) - 1):
            p, q = probs(tl[i], s), probs(dl[i], s)
            keep = np.flatnonzero((p > 0) | (q > 0))
            yield p[keep], q[keep]
    target.reset()
    draft.reset()


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)): it has mass after a rejected child x, where p(x) < q(x)."""
    r = np.maximum(p - q, 0.0)
    return r / r.sum()


def node(rule: str, p: np.ndarray, q: np.ndarray, k: int, rng: np.random.Generator) -> tuple[int, int]:
    """One node of ``k`` children under ``rule``, one draw of its children and uniforms: (which child the
    verifier accepts, ``k`` for none; the token it emits: that child's, else a draw from what is left of p)."""
    if rule in ("point", "hybrid"):
        order = np.argsort(-q, kind="stable")
        first = 0
        if rule == "hybrid":
            x = rng.choice(len(q), p=q)
            if rng.random() < min(1.0, p[x] / q[x]):
                return 0, int(x)
            p = _residual(p, q)
            order = order[order != x]
            first = 1
        p = p.copy()
        for j, x in enumerate(order[:k - first], start=first):
            if rng.random() * p.sum() < p[x]:
                return j, int(x)
            p[x] = 0.0
        return k, int(rng.choice(len(p), p=p / p.sum()))
    if rule == "rsd":
        g = np.where(q > 0, np.log(np.where(q > 0, q, 1.0)) + rng.gumbel(size=q.size), -np.inf)
        draws = np.argsort(-g, kind="stable")[:k]
        draws = draws[q[draws] > 0]
    else:
        draws = rng.choice(len(q), size=k, p=q)
    q = q.copy()
    for j, x in enumerate(draws):
        if rng.random() < min(1.0, p[x] / q[x]):
            return j, int(x)
        p = _residual(p, q)
        if rule == "rsd":
            q[x] = 0.0
            if q.sum() <= 0:
                break
            q /= q.sum()
    return k, int(rng.choice(len(p), p=p))


def measure(pairs_pq, k: int, trials: int, seed: int) -> dict[str, np.ndarray]:
    """m[j] per rule: the share of (position, trial) draws whose accepted child is the rank-j one."""
    rng = np.random.default_rng(seed)
    hits = {r: np.zeros(k + 1) for r in RULES}
    for p, q in pairs_pq:
        hits["chain"][0] += np.minimum(p, q).sum() * trials        # exact: sum(min(p, q))
        hits["chain"][k] += (1 - np.minimum(p, q).sum()) * trials
        for rule in RULES[1:]:
            for _ in range(trials):
                hits[rule][node(rule, p, q, k, rng)[0]] += 1
    return {r: h[:k] / h.sum() for r, h in hits.items()}


def conditional(m: np.ndarray) -> np.ndarray:
    """Sequoia's acceptance vector (rank j accepted given ranks < j rejected) from the shares m."""
    left = 1 - np.concatenate([[0.0], np.cumsum(m)[:-1]])
    return np.where(left > 1e-12, m / np.maximum(left, 1e-12), 0.0)


def best_trees(m: dict[str, np.ndarray], budgets, depth: int) -> dict:
    """Per rule and budget: the best tree's expected tokens a target call (accepted nodes + the one the
    verifier emits) under the positional model; the chain's at the same positions."""
    out = {}
    for rule, shares in m.items():
        acc = conditional(shares if rule != "chain" else shares[:1])
        assert np.allclose(child_probabilities(acc)[:len(shares)], shares[:len(acc)])
        out[rule] = {}
        for n in budgets:
            parents = sequoia_topology(acc, n, depth if rule != "chain" else n - 1)
            out[rule][n] = {"tokens_per_call": 1 + tree_value(parents, acc), "nodes": len(parents),
                            "depth": Tree(parents, [0] * len(parents)).height}
    return out


def round_cost(results: dict) -> tuple[float, float]:
    """(a, b) of a round's wall time a + b * positions (ms), least squares over the bench's chain rows
    (gamma >= 1): the cost of a tree of n positions is taken as a chain's of n positions, as the bench
    compares them (at equal target cost)."""
    pts = [(r["positions_per_call"], 1000 * r["wall_s"] / r["target_calls"]) for r in results["rows"]
           if isinstance(r["gamma"], int) and r["gamma"] >= 1]
    b, a = np.polyfit([x for x, _ in pts], [y for _, y in pts], 1)
    return float(a), float(b)


def contexts_of(pair, n: int, prompt_tokens: int, new_tokens: int, s: Sampling,
                seed: int) -> list[tuple[list[int], int]]:
    """The target's sampled continuations of ``n`` held-out passages (at most ``prompt_tokens`` of each: the
    bench's kind of prompt), with their prompts' lengths."""
    import torch
    torch.manual_seed(seed)
    out = []
    for text in corpus.sample_passages(n, held_out=True, seed=seed):
        ids = encode(pair.tokenizer, text)[:prompt_tokens]
        with torch.inference_mode():
            gen = pair.target.model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=True,
                                             temperature=s.temperature, top_p=s.top_p, top_k=0,
                                             pad_token_id=pair.tokenizer.pad_token_id)
        out.append((gen[0].tolist(), len(ids)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", default="smollm2-eagle-head")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--ranks", type=int, default=4, help="children a node at most")
    ap.add_argument("--trials", type=int, default=128, help="Monte Carlo draws a position and rule")
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--budgets", default="2,3,4,5,6,7,8,10,12,16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", default="bench/results/e2e_demo_eagle_trees7cal_ref_t08.json",
                    help="a sampled `specdec bench e2e` run of the same pair: its rounds' cost, and the check")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    s = Sampling(args.temperature, 0, args.top_p)
    t0 = time.time()
    pair = open_pair(draft=args.draft)
    ctx = contexts_of(pair, args.prompts, args.prompt_tokens, args.new_tokens, s, args.seed)
    pq = list(rows(pair, ctx, s))
    m = measure(pq, args.ranks, args.trials, args.seed)
    budgets = [int(b) for b in args.budgets.split(",")]
    trees = best_trees(m, budgets, args.depth)
    print(f"{len(pq)} positions ({args.prompts} held-out prompts x {args.new_tokens} sampled tokens, T "
          f"{args.temperature}, top-p {args.top_p}), draft {args.draft}, {args.trials} draws a position, "
          f"{time.time() - t0:.0f} s")
    for rule in RULES:
        print(f"  m[{rule:9s}] = " + " ".join(f"{x:.3f}" for x in m[rule]) + f"   (sum {m[rule].sum():.3f})")
    print("tokens a target call, best tree of n positions (positional model):")
    print("   n  " + "  ".join(f"{r:>9s}" for r in RULES) + "   best tree / chain")
    for n in budgets:
        vals = [trees[r][n]["tokens_per_call"] for r in RULES]
        best = max(RULES[1:], key=lambda r: trees[r][n]["tokens_per_call"])
        print(f"  {n:2d}  " + "  ".join(f"{v:9.3f}" for v in vals)
              + f"   {best} {trees[best][n]['tokens_per_call'] / trees['chain'][n]['tokens_per_call']:.3f}x")
    with open(args.results) as f:
        bench = json.load(f)
    a, b = round_cost(bench)
    print(f"round cost {a:.1f} + {b:.2f} ms a position ({args.results}'s chains); projected tokens/s:")
    speed = {r: {n: 1000 * trees[r][n]["tokens_per_call"] / (a + b * n) for n in budgets} for r in RULES}
    best_chain = max(budgets, key=lambda n: speed["chain"][n])
    summary = {}
    for rule in RULES:
        n = max(budgets, key=lambda n: speed[rule][n])
        summary[rule] = {"positions": n, "tokens_per_s": speed[rule][n],
                         "vs_best_chain": speed[rule][n] / speed["chain"][best_chain], **trees[rule][n]}
        print(f"  {rule:9s} best at {n:2d} positions (depth {trees[rule][n]['depth']}): "
              f"{speed[rule][n]:6.2f} tok/s, {summary[rule]['vs_best_chain']:.3f}x the best chain")
    print("the same with a position's cost relative to a round's fixed cost (this run's: "
          f"{b / a:.3f}; a target whose forward over a few positions costs what one does: toward 0):")
    sensitivity = {}
    for rel in POSITION_COSTS:
        spd = {r: {n: trees[r][n]["tokens_per_call"] / (1 + rel * n) for n in budgets} for r in RULES}
        chain = max(spd["chain"].values())
        sensitivity[rel] = {r: {"positions": max(spd[r], key=spd[r].get),
                                "vs_best_chain": max(spd[r].values()) / chain} for r in RULES}
        print(f"  {rel:5.3f}  " + "  ".join(f"{r} {v['vs_best_chain']:.3f}x ({v['positions']})"
                                            for r, v in sensitivity[rel].items() if r != "chain"))
    print("check against the bench's measured rows (tokens a call, measured / model):")
    checks = []
    for r in bench["rows"]:
        n = r["positions_per_call"]
        rule = "chain" if isinstance(r["gamma"], int) else "point"
        if (isinstance(r["gamma"], int) and r["gamma"] < 1) or n not in trees[rule]:
            continue
        checks.append({"row": r["gamma"], "measured": r["tokens_per_call"],
                       "model": trees[rule][n]["tokens_per_call"], "rule": rule})
        print(f"  {r['gamma']!s:8s} {rule:6s} {r['tokens_per_call']:.3f} / {trees[rule][n]['tokens_per_call']:.3f}"
              + ("  (the bench's tree is not Sequoia's: the model's is the best point-mass tree)"
                 if rule == "point" else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "positions": len(pq), "m": {r: v.tolist() for r, v in m.items()},
                       "trees": {r: {str(n): v for n, v in t.items()} for r, t in trees.items()},
                       "round_cost_ms": [a, b], "best": summary, "position_cost": sensitivity,
                       "check": checks}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
