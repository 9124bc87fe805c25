"""``specdec bench e2e``: end-to-end decoding speed against gamma, in the layout of HADES Table I.

Every gamma runs on the same prompts in the same process, prompt by prompt (all gammas of a prompt
back to back), so the target-only baseline (gamma 0) and the speculative runs see the same machine
state. Reported per gamma: tokens/s, speedup over gamma 0, acceptance rate, tokens per target call,
per-position acceptance and the mean round broken down into draft / target / quantize+transfer /
verify / host overhead. Goals are reported as met or missed, never hidden.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

from . import corpus, pairs, runtime
from .builds import CORE_PARAMS
from .job import Job, TreeSpec
from .metrics import BREAKDOWN, summarize

GOALS = {"speedup": 1.5, "host_fraction": 0.05}
HELD_OUT_SEED = 1234


def parse_gammas(text: str) -> list:
    """``"0,2,4,auto"`` -> ``[0, 2, 4, "auto"]``; 0 (the baseline) is added first when missing."""
    out: list = []
    for part in text.split(","):
        part = part.strip()
        if part == "auto":
            g = part
        else:
            try:
                g = int(part)
            except ValueError:
                raise ValueError(f"--gammas: {part!r} is not an integer or 'auto'") from None
            if not 0 <= g <= CORE_PARAMS["GAMMA_MAX"]:
                raise ValueError(f"--gammas: {g} outside 0..{CORE_PARAMS['GAMMA_MAX']} (the core's GAMMA_MAX)")
        if g not in out:
            out.append(g)
    if 0 not in out:
        out.insert(0, 0)
    return out


def default_prompts(n: int) -> list[str]:
    """n passages from the held-out tragedies (never seen by the demo draft in training)."""
    return corpus.sample_passages(n, held_out=True, seed=HELD_OUT_SEED)


def run(job: Job, gammas: list, backend: str = "ref", pair: pairs.Pair | None = None,
        trees: list[TreeSpec] | None = None) -> dict:
    """Measure every gamma, and every token tree in ``trees``, on the prompts of ``job``; see the module
    docstring.

    Each tree row is compared with the chains at equal target cost: a tree of N nodes makes the target
    score N positions per call, as a chain of gamma = N - 1 does.
    """
    from tqdm import tqdm
    pair = pair or pairs.open_pair(job.target, job.draft)
    cores = runtime.cores(backend)
    if cores.kv is not None and job.kv_block is not None:        # both caches in pages the kvpage core assigns
        pair = pairs.paged_pair(pair, cores.kv, job.kv_block)
    prompts = [pairs.encode(pair.tokenizer, p) for p in job.prompts]
    jobs = {g: dataclasses.replace(job, gamma=g, tree=None) for g in gammas}
    drafters = {g: pair.draft for g in gammas}
    specs = {}
    for spec in trees or []:
        spec = pairs.calibrated(pair, spec)
        label = f"{spec.kind}-{spec.budget}"
        jobs[label], specs[label] = dataclasses.replace(job, tree=spec), spec
        drafters[label] = pairs.drafter(pair, spec)
    labels = list(jobs)
    # warm-up (untimed): first calls into torch and numpy allocate
    last = gammas[-1]
    runtime.generate_one(dataclasses.replace(jobs[last], max_new_tokens=4), 0, prompts[0], pair.target,
                         drafters[last], cores.verifier)
    gens: dict = {k: [] for k in labels}
    t0 = time.time()
    with tqdm(total=len(prompts) * len(labels), desc="bench e2e", unit="gen", file=sys.stderr,
              disable=not sys.stderr.isatty() and os.environ.get("SPECDEC_PROGRESS") != "1") as bar:
        for i, ids in enumerate(prompts):
            for k in labels:
                gens[k].append(runtime.generate_one(jobs[k], i, ids, pair.target, drafters[k], cores.verifier,
                                                    cores.masker))
                bar.update(1)
    rows = []
    base = summarize(gens[0])["tokens_per_s"]
    for k in labels:
        s = summarize(gens[k])
        tree = specs.get(k)
        rows.append({"gamma": k, "mode": tree.kind if tree else "chain",
                     "positions_per_call": tree.budget if tree else (k + 1 if k != "auto" else None),
                     "tokens_per_s": s["tokens_per_s"], "speedup": s["tokens_per_s"] / base if base else None,
                     **{key: s[key] for key in ("acceptance", "tokens_per_call", "per_position_acceptance",
                                                "breakdown", "host_fraction", "target_calls", "new_tokens",
                                                "wall_s", "verifier_cycles", "verifier_cycles_per_round",
                                                "mask_cycles_per_round", "kv_ops_per_round",
                                                "kv_cycles_per_round", "kv_pages_max")}})
    spec_rows = [r for r in rows if r["gamma"] != 0]
    best = max(spec_rows, key=lambda r: r["speedup"] or 0) if spec_rows else None
    same = all(gens[k][i].tokens == gens[0][i].tokens for k in labels for i in range(len(prompts)))
    res = {"target": pair.target_name, "draft": pair.draft_name, "backend": backend,
           "prompts": len(prompts), "max_new_tokens": job.max_new_tokens,
           "sampling": dataclasses.asdict(job.sampling), "seed": job.seed, "rows": rows,
           "bench_wall_s": time.time() - t0,
           "greedy_outputs_identical_across_gammas": same if job.sampling.greedy else None,
           "best": {"gamma": best["gamma"], "speedup": best["speedup"]} if best else None,
           "host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "cpu": platform.processor() or platform.machine()}}
    if specs:
        res["trees"] = {label: spec.to_dict() for label, spec in specs.items()}
        res["tree_vs_chain"] = tree_vs_chain(rows)
    if best:
        res["goals_met"] = {f"speedup >= {GOALS['speedup']}x at best gamma": best["speedup"] >= GOALS["speedup"],
                            f"host overhead <= {GOALS['host_fraction']:.0%} of a round at best gamma":
                                best["host_fraction"] <= GOALS["host_fraction"]}
        for c in res.get("tree_vs_chain", []):
            res["goals_met"][f"{c['tree']}: tokens/call above the best chain at equal target cost"] = c["higher"]
    return res


def tree_vs_chain(rows: list[dict]) -> list[dict]:
    """Each tree row against the best measured chain (tokens per target call) whose calls score at most as
    many positions as the tree's (gamma + 1 <= N): equal or lower target cost."""
    out = []
    chains = [r for r in rows if r["mode"] == "chain" and r["gamma"] not in (0, "auto")]
    for r in rows:
        if r["mode"] == "chain":
            continue
        fair = [c for c in chains if c["positions_per_call"] <= r["positions_per_call"]]
        best = max(fair, key=lambda c: c["tokens_per_call"]) if fair else None
        out.append({"tree": r["gamma"], "nodes": r["positions_per_call"], "tokens_per_call": r["tokens_per_call"],
                    "best_chain_gamma": best["gamma"] if best else None,
                    "best_chain_tokens_per_call": best["tokens_per_call"] if best else None,
                    "higher": bool(best) and r["tokens_per_call"] > best["tokens_per_call"],
                    "speedup": r["speedup"], "best_chain_speedup": best["speedup"] if best else None})
    return out


def format_table(res: dict) -> str:
    """HADES Table I's layout plus acceptance, tokens per call and the host share of a round."""
    lines = [f"target {res['target']}  draft {res['draft']}  backend {res['backend']}  "
             f"{res['prompts']} prompts x {res['max_new_tokens']} new tokens",
             f"{'gamma':>10} {'tok/s':>8} {'speedup':>8} {'accept':>7} {'tok/call':>9} {'round ms':>9} "
             f"{'draft':>6} {'target':>7} {'mask':>6} {'q+xfer':>7} {'verify':>7} {'host':>6} "
             f"{'ver cyc':>8} {'mask cyc':>8}"]
    for r in res["rows"]:
        b = r["breakdown"]
        rd = sum(b.get(k, 0.0) for k in BREAKDOWN)
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        lines.append(f"{r['gamma']!s:>10} {r['tokens_per_s']:8.2f} {r['speedup']:7.2f}x {acc:>7} "
                     f"{r['tokens_per_call']:9.2f} {rd * 1e3:9.1f} " +
                     " ".join(f"{b['fractions'].get(k, 0.0):6.1%}" for k in BREAKDOWN) +
                     f" {r.get('verifier_cycles_per_round', 0):8.0f} {r.get('mask_cycles_per_round', 0):8.0f}")
    for c in res.get("tree_vs_chain", []):
        lines.append(f"{c['tree']}: {c['tokens_per_call']:.2f} tokens/call vs best chain at equal target cost "
                     f"(gamma {c['best_chain_gamma']}): {c['best_chain_tokens_per_call'] or 0:.2f}")
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
    ax.axhline(GOALS["speedup"], color="tab:red", ls="--", lw=0.8, label=f"goal {GOALS['speedup']}x")
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
