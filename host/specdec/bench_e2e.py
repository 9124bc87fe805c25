"""``specdec bench e2e``: end-to-end decoding speed against gamma, in the layout of HADES Table I.

Every gamma runs on the same prompts in the same process, prompt by prompt (all gammas of a prompt
back to back), so the target-only baseline (gamma 0) and the speculative runs see the same machine
state. Reported per gamma: tokens/s, speedup over gamma 0, acceptance rate, tokens per target call,
per-position acceptance and the mean round broken down into draft / target / quantize+transfer /
verify / host overhead. Goals are reported as met or missed, never hidden.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from . import corpus, runtime
from .decode import GenConfig

GOALS = {"speedup": 1.5, "host_fraction": 0.05}
BREAKDOWN = ("draft_s", "target_s", "quantize_transfer_s", "verify_s", "host_s")
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
            if not 0 <= g <= runtime.CORE_PARAMS["GAMMA_MAX"]:
                raise ValueError(f"--gammas: {g} outside 0..{runtime.CORE_PARAMS['GAMMA_MAX']} (the core's GAMMA_MAX)")
        if g not in out:
            out.append(g)
    if 0 not in out:
        out.insert(0, 0)
    return out


def default_prompts(n: int) -> list[str]:
    """n passages from the held-out tragedies (never seen by the demo draft in training)."""
    return corpus.sample_passages(n, held_out=True, seed=HELD_OUT_SEED)


def run(job: dict, gammas: list, backend: str = "ref", pair: runtime.Pair | None = None) -> dict:
    """Measure every gamma on ``job['prompts']``; see the module docstring."""
    from tqdm import tqdm
    pair = pair or runtime.open_pair(job.get("target"), job.get("draft"))
    verifier = runtime.golden_verifier() if backend == "ref" else runtime.pynq_verifier()
    prompts = [runtime.encode(pair.tokenizer, p) for p in job["prompts"]]
    cfgs = {g: runtime.config({**job, "gamma": g}) for g in gammas}
    # warm-up (untimed): first calls into torch and numpy allocate
    runtime.generate_one(pair, verifier, prompts[0], GenConfig(4, gammas[-1], cfgs[gammas[-1]].sampling))
    gens: dict = {g: [] for g in gammas}
    t0 = time.time()
    with tqdm(total=len(prompts) * len(gammas), desc="bench e2e", unit="gen", file=sys.stderr,
              disable=not sys.stderr.isatty() and os.environ.get("SPECDEC_PROGRESS") != "1") as bar:
        for i, ids in enumerate(prompts):
            for g in gammas:
                gens[g].append(runtime.generate_one(pair, verifier, ids, cfgs[g], i))
                bar.update(1)
    rows = []
    base = runtime.summarize(gens[0])["tokens_per_s"]
    for g in gammas:
        s = runtime.summarize(gens[g])
        rows.append({"gamma": g, "tokens_per_s": s["tokens_per_s"],
                     "speedup": s["tokens_per_s"] / base if base else None,
                     **{k: s[k] for k in ("acceptance", "tokens_per_call", "per_position_acceptance",
                                          "breakdown", "host_fraction", "target_calls", "new_tokens",
                                          "wall_s", "verifier_cycles")}})
    spec = [r for r in rows if r["gamma"] != 0]
    best = max(spec, key=lambda r: r["speedup"] or 0) if spec else None
    same = all(gens[g][i].tokens == gens[0][i].tokens for g in gammas for i in range(len(prompts)))
    res = {"target": pair.target_name, "draft": pair.draft_name, "backend": backend,
           "prompts": len(prompts), "max_new_tokens": job["max_new_tokens"], "sampling": job["sampling"],
           "seed": job.get("seed", 0), "rows": rows, "bench_wall_s": time.time() - t0,
           "greedy_outputs_identical_across_gammas": same if cfgs[0].sampling.greedy else None,
           "best": {"gamma": best["gamma"], "speedup": best["speedup"]} if best else None,
           "host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "cpu": platform.processor() or platform.machine()}}
    if best:
        res["goals_met"] = {f"speedup >= {GOALS['speedup']}x at best gamma": best["speedup"] >= GOALS["speedup"],
                            f"host overhead <= {GOALS['host_fraction']:.0%} of a round at best gamma":
                                best["host_fraction"] <= GOALS["host_fraction"]}
    return res


def format_table(res: dict) -> str:
    """HADES Table I's layout plus acceptance, tokens per call and the host share of a round."""
    lines = [f"target {res['target']}  draft {res['draft']}  backend {res['backend']}  "
             f"{res['prompts']} prompts x {res['max_new_tokens']} new tokens",
             f"{'gamma':>5} {'tok/s':>8} {'speedup':>8} {'accept':>7} {'tok/call':>9} {'round ms':>9} "
             f"{'draft':>6} {'target':>7} {'q+xfer':>7} {'verify':>7} {'host':>6}"]
    for r in res["rows"]:
        b = r["breakdown"]
        rd = sum(b[k] for k in BREAKDOWN)
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        lines.append(f"{r['gamma']!s:>5} {r['tokens_per_s']:8.2f} {r['speedup']:7.2f}x {acc:>7} "
                     f"{r['tokens_per_call']:9.2f} {rd * 1e3:9.1f} " +
                     " ".join(f"{b['fractions'][k]:6.1%}" for k in BREAKDOWN))
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
        vals = [r["breakdown"][k] * 1e3 for r in rows]
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
