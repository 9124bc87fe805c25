"""What ``specdec bench e2e`` reports beside its rows: the comparisons of its result (the Hugging Face peers, the
sampling guard, trees against chains at equal target cost), the goals, the table it prints and its plots.

Every function reads the rows and generations :func:`specdec.bench.e2e.run` measured; none measures anything.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..decoding.metrics import BREAKDOWN, summarize
from ..decoding.base import Sampling

#: Issue #15's goals: the best row's speedup over target-only, 1.5x greedy and 1.3x when sampling; the host's
#: share of a round; the sampling guard's cost per target call; the best row against HF assisted's best.
GOALS = {"speedup": 1.5, "speedup_sampled": 1.3, "host_fraction": 0.05, "sampling_cost": 1.5, "vs_hf_assisted": 1.3}
#: The sampling guard's settings (issue #15): the loop's cost per target call when it samples, against greedy.
GUARD_SAMPLING = Sampling(temperature=0.8, top_p=0.95)


def speedup_goal(sampling: dict) -> float:
    """The speedup goal of a run with ``sampling`` (its JSON's ``sampling``): greedy's, or the sampled one."""
    return GOALS["speedup"] if sampling.get("temperature", 0) == 0 else GOALS["speedup_sampled"]


def peer_rows(outs: dict, ours: list[list[int]], base: float, greedy: bool) -> list[dict]:
    """One row per peer: tok/s over every prompt, speedup over the run's baseline (``base`` tok/s), and (greedy) whether
    every prompt's tokens equal our target-only tokens."""
    rows = []
    for name, runs in outs.items():
        n_tok = sum(len(t) for t, _ in runs)
        wall = sum(s for _, s in runs)
        tps = n_tok / wall if wall else 0.0
        rows.append({"name": name, "tokens_per_s": tps, "speedup": tps / base if base else None,
                     "new_tokens": n_tok, "wall_s": wall,
                     "identical": all(t == o for (t, _), o in zip(runs, ours, strict=True)) if greedy else None})
    return rows


def sampling_guard(pairs_by_gamma: dict, job_greedy: bool) -> dict:
    """The sampling path's cost against greedy at equal acceptance: seconds per target call (a call yields
    ``tokens_per_call`` tokens, so dividing it out removes the modes' different acceptance), sampled over
    greedy, for target-only decoding and one gamma. The guard holds when every ratio is at most
    ``GOALS["sampling_cost"]``; the rows carry tok/s as measured too.
    """
    rows = []
    for g, (mine, other) in pairs_by_gamma.items():
        greedy, sampled = (mine, other) if job_greedy else (other, mine)
        sg, ss = summarize(greedy), summarize(sampled)
        per_call = {m: s["wall_s"] / s["target_calls"] for m, s in (("greedy", sg), ("sampled", ss))}
        rows.append({"gamma": g, "greedy_tokens_per_s": sg["tokens_per_s"],
                     "sampled_tokens_per_s": ss["tokens_per_s"],
                     "greedy_tokens_per_call": sg["tokens_per_call"], "sampled_tokens_per_call": ss["tokens_per_call"],
                     "greedy_s_per_call": per_call["greedy"], "sampled_s_per_call": per_call["sampled"],
                     "cost_ratio": per_call["sampled"] / per_call["greedy"]})
    return {"sampling": dataclasses.asdict(GUARD_SAMPLING), "rows": rows, "limit": GOALS["sampling_cost"],
            "ok": all(r["cost_ratio"] <= GOALS["sampling_cost"] for r in rows)}


def tree_vs_chain(rows: list[dict]) -> list[dict]:
    """Each tree row against the best measured chain (tokens per target call) whose calls score at most as
    many positions as the tree's (gamma + 1 <= N): equal or lower target cost."""
    out = []
    chains = [r for r in rows if r["mode"] == "chain" and isinstance(r["gamma"], int) and r["gamma"] > 0]
    for r in rows:
        if r["mode"] in ("chain", "pipelined"):
            continue
        fair = [c for c in chains if c["positions_per_call"] <= r["positions_per_call"]]
        best = max(fair, key=lambda c: c["tokens_per_call"]) if fair else None
        out.append({"tree": r["gamma"], "nodes": r["positions_per_call"], "tokens_per_call": r["tokens_per_call"],
                    "best_chain_gamma": best["gamma"] if best else None,
                    "best_chain_tokens_per_call": best["tokens_per_call"] if best else None,
                    "higher": r["tokens_per_call"] > best["tokens_per_call"] if best else None,
                    "speedup": r["speedup"], "best_chain_speedup": best["speedup"] if best else None})
    return out


def best_tree_vs_best_chain(rows: list[dict]) -> dict | None:
    """The fastest tree row against the fastest chain row (any gamma, constant or scheduled) in tok/s: issue
    #15's "the best tree at least matches the best chain". Only trees that branched count: a tree row whose
    every round was a chain (a static or Sequoia tree of few nodes can be one) is a chain by another path and
    is listed under ``chain_shaped``. None without both."""
    trees = [r for r in rows if r["mode"] not in ("chain", "pipelined")]
    branched = [r for r in trees if r["branched_rounds"] > 0]
    chains = [r for r in rows if r["mode"] == "chain" and r["gamma"] != 0]
    if not branched or not chains:
        return None
    t, c = (max(rs, key=lambda r: r["tokens_per_s"]) for rs in (branched, chains))
    return {"tree": t["gamma"], "tree_tokens_per_s": t["tokens_per_s"], "chain": c["gamma"],
            "chain_tokens_per_s": c["tokens_per_s"], "ratio": t["tokens_per_s"] / c["tokens_per_s"],
            "ok": t["tokens_per_s"] >= c["tokens_per_s"],
            "chain_shaped": [r["gamma"] for r in trees if r not in branched]}


def _baseline_words(res: dict) -> str:
    """The run's baseline, as the table's first line names it: every speedup is over it."""
    b = res.get("baseline")
    if not b:
        return ""
    hf = b["hf_target_tokens_per_s"]
    return (f"; speedups over {b['name']} {b['tokens_per_s']:.2f} tok/s (our gamma 0 "
            f"{b['loop_gamma0_tokens_per_s']:.2f}" + (f", HF target-only {hf:.2f})" if hf is not None else ")"))


def format_table(res: dict) -> str:
    """HADES Table I's layout plus acceptance, tokens per call and the host share of a round."""
    w = max([10] + [len(str(r["gamma"])) for r in res["rows"]])
    lines = [f"target {res['target']}  draft {res['draft']}  backend {res['backend']}  "
             f"{res['prompts']} prompts x {res['max_new_tokens']} new tokens" + _baseline_words(res),
             f"{'gamma':>{w}} {'tok/s':>8} {'speedup':>8} {'accept':>7} {'tok/call':>9} {'round ms':>9} "
             f"{'draft':>6} {'target':>7} {'mask':>6} {'q+xfer':>7} {'verify':>7} {'host':>6} "
             f"{'ver cyc':>8} {'mask cyc':>8}"]
    for r in res["rows"]:
        b = r["breakdown"]
        rd = sum(b.get(k, 0.0) for k in BREAKDOWN)
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        lines.append(f"{r['gamma']!s:>{w}} {r['tokens_per_s']:8.2f} {r['speedup']:7.2f}x {acc:>7} "
                     f"{r['tokens_per_call']:9.2f} {rd * 1e3:9.1f} " +
                     " ".join(f"{b['fractions'].get(k, 0.0):6.1%}" for k in BREAKDOWN) +
                     f" {r.get('verifier_cycles_per_round', 0):8.0f} {r.get('mask_cycles_per_round', 0):8.0f}")
    for c in res.get("tree_vs_chain", []):
        lines.append(f"{c['tree']}: {c['tokens_per_call']:.2f} tokens/call vs best chain at equal target cost " +
                     (f"(gamma {c['best_chain_gamma']}): {c['best_chain_tokens_per_call']:.2f}"
                      if c["best_chain_gamma"] is not None else "(none measured)"))
    bt = res.get("best_tree_vs_best_chain")
    if bt:
        lines.append(f"best tree {bt['tree']} {bt['tree_tokens_per_s']:.2f} tok/s vs best chain {bt['chain']} "
                     f"{bt['chain_tokens_per_s']:.2f} tok/s ({bt['ratio']:.2f}x)" +
                     (f"; chain-shaped in every round, not counted: {', '.join(map(str, bt['chain_shaped']))}"
                      if bt["chain_shaped"] else ""))
    for i, run in enumerate(res.get("per_run", [])):
        b, best, bt = run["baseline"], run["best"], run.get("best_tree_vs_best_chain")
        lines.append(f"run {i + 1}: baseline {b['name']} {b['tokens_per_s']:.2f} tok/s" +
                     (f"; best {best['gamma']} {best['speedup']:.2f}x" if best else "") +
                     (f"; best tree vs best chain {bt['ratio']:.2f}x" if bt else ""))
    be = res.get("breakeven")
    if be and "skipped" in be:
        lines.append(f"break-even model: not computed ({be['skipped']})")
    elif be:
        lines.append(f"break-even model: draft step {be['draft_step_s'] * 1e3:.1f} ms, target "
                     f"{be['target_s_fixed'] * 1e3:.1f} ms + {be['target_s_per_position'] * 1e3:.2f} ms/position" +
                     (" (the fitted slope was negative, measurement noise: taken as flat)"
                      if be.get("target_slope_clamped") else "") + f"; predicted best gamma {be['best_gamma']}")
        for p in be["rows"]:
            lines.append(f"{p['gamma']!s:>10} predicted {p['speedup']:.2f}x  measured {p['measured_speedup']:.2f}x  "
                         f"({p['tokens_per_call']:.2f} tok/call, {p['round_s'] * 1e3:.1f} ms/round)")
    for r in res.get("peers", []):
        same = "" if r["identical"] is None else ("  tokens identical" if r["identical"] else "  TOKENS DIFFER")
        lines.append(f"{r['name']:>22} {r['tokens_per_s']:8.2f} {r['speedup']:7.2f}x{same}")
    for r in res.get("sampling_guard", {}).get("rows", []):
        lines.append(f"sampling guard, gamma {r['gamma']}: {r['sampled_s_per_call'] * 1e3:.1f} ms per target call "
                     f"sampled vs {r['greedy_s_per_call'] * 1e3:.1f} greedy ({r['cost_ratio']:.2f}x; "
                     f"{r['sampled_tokens_per_s']:.2f} vs {r['greedy_tokens_per_s']:.2f} tok/s)")
    for goal, ok in res.get("goals_met", {}).items():
        lines.append(f"goal {goal}: {'met' if ok else 'MISSED'}")
    return "\n".join(lines)


def plot(res: dict, out_dir: str | os.PathLike) -> list[Path]:
    """speedup_vs_gamma.png, per_position_acceptance.png, round_breakdown.png in ``out_dir``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = res["rows"]
    labels = [str(r["gamma"]) for r in rows]
    title = f"{res['target']} / {res['draft']} ({res['backend']})"
    paths = []

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(labels, [r["speedup"] for r in rows], "o-")
    ax.axhline(1.0, color="grey", lw=0.8)
    goal = speedup_goal(res["sampling"])
    ax.axhline(goal, color="tab:red", ls="--", lw=0.8, label=f"goal {goal}x")
    ax.set(xlabel="gamma", ylabel="speedup vs target-only", title=title)
    ax.legend()
    paths.append(_save(fig, out / "speedup_vs_gamma.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        acc = r["per_position_acceptance"]
        if acc:
            ax.plot(range(len(acc)), [float("nan") if a is None else a for a in acc], "o-",
                    label=f"gamma {r['gamma']}")
    ax.set(xlabel="draft position", ylabel="P(accept | reached)", ylim=(0, 1.05), title=title)
    if ax.get_legend_handles_labels()[0]:       # no row drafted (gamma 0 alone): nothing to label
        ax.legend()
    paths.append(_save(fig, out / "per_position_acceptance.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(rows)
    for k in BREAKDOWN:
        vals = [r["breakdown"].get(k, 0.0) * 1e3 for r in rows]
        ax.bar(labels, vals, bottom=bottom, label=k.removesuffix("_s").replace("_", "+"))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(xlabel="gamma", ylabel="mean round time (ms)", title=title)
    ax.legend()
    paths.append(_save(fig, out / "round_breakdown.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path
