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
import sys
import time
from pathlib import Path

from . import breakeven, corpus, kernels, models, pairs, peers as hf_peers, runtime
from .bench import host_info
from .builds import CORE_PARAMS
from .decode import ADAPTIVE_GAMMAS, ModelDraft, Sampling, eos_ids
from .eagle import EagleDraft
from .job import Job, TreeSpec
from .metrics import BREAKDOWN, summarize

#: Issue #15's goals: the best row's speedup over target-only, 1.5x greedy and 1.3x when sampling; the host's
#: share of a round; the sampling guard's cost per target call; the best row against HF assisted's best.
GOALS = {"speedup": 1.5, "speedup_sampled": 1.3, "host_fraction": 0.05, "sampling_cost": 1.5, "vs_hf_assisted": 1.3}


def speedup_goal(sampling: dict) -> float:
    """The speedup goal of a run with ``sampling`` (its JSON's ``sampling``): greedy's, or the sampled one."""
    return GOALS["speedup"] if sampling.get("temperature", 0) == 0 else GOALS["speedup_sampled"]
HELD_OUT_SEED = 1234
#: The sampling guard's settings (issue #15): the loop's cost per target call when it samples, against greedy.
GUARD_SAMPLING = Sampling(temperature=0.8, top_p=0.95)


def parse_gammas(text: str) -> list:
    """``"0,2,4,auto,model"`` -> ``[0, 2, 4, "auto", "model"]``; 0 (the baseline) is added first when missing."""
    out: list = []
    for part in text.split(","):
        part = part.strip()
        if part in ADAPTIVE_GAMMAS:
            g = part
        else:
            try:
                g = int(part)
            except ValueError:
                raise ValueError(f"--gammas: {part!r} is not an integer, 'auto' or 'model'") from None
            if not 0 <= g <= CORE_PARAMS["GAMMA_MAX"]:
                raise ValueError(f"--gammas: {g} outside 0..{CORE_PARAMS['GAMMA_MAX']} (the core's GAMMA_MAX)")
        if g not in out:
            out.append(g)
    if 0 not in out:
        out.insert(0, 0)
    return out


def assistant(pair: pairs.Pair, peers: list[hf_peers.Peer] | None) -> tuple[object | None, str | None]:
    """The draft model Hugging Face assisted generation runs, and its name: the pair's draft model; for an
    EAGLE head (which HF's assisted generation cannot run) the target's default draft model with the head's hot
    vocabulary (its fastest form), loaded only when an assisted peer is asked for; None for prompt lookup."""
    if isinstance(pair.draft, ModelDraft):
        return pair.draft.lm.model, pair.draft_name
    if isinstance(pair.draft, EagleDraft) and any(p.assisted for p in peers or []):
        name = models.DEFAULT_DRAFT.get(pair.target_name)
        if name is not None:
            from .hotvocab import hot_head_model
            ids = pair.draft.head.hot_ids.numpy()
            return hot_head_model(models.load(name)[0], ids), pairs.draft_name(name, len(ids))
    return None, None


def default_prompts(n: int) -> list[str]:
    """n passages from the held-out tragedies (never seen by the demo draft in training)."""
    return corpus.sample_passages(n, held_out=True, seed=HELD_OUT_SEED)


def _torch_threads() -> int:
    import torch
    return torch.get_num_threads()


def run(job: Job, gammas: list, backend: str = "ref", pair: pairs.Pair | None = None,
        trees: list[TreeSpec] | None = None, guard_gamma: int | None = None,
        peers: list[hf_peers.Peer] | None = None, pipelined: list[int] | None = None) -> dict:
    """Measure every gamma, and every token tree in ``trees``, on the prompts of ``job``; see the module
    docstring.

    Each tree row is compared with the chains at equal target cost: a tree of N nodes makes the target
    score N positions per call, as a chain of gamma = N - 1 does.

    ``guard_gamma`` (an int in ``gammas``) adds the sampling guard: gamma 0 and ``guard_gamma`` run again,
    interleaved with the rest, in the other mode (sampled at :data:`GUARD_SAMPLING` for a greedy job, greedy
    for a sampled one), and :func:`sampling_guard` compares the cost per target call of the two modes.

    ``peers`` (:mod:`specdec.peers`) run Hugging Face ``generate`` with the same pair, interleaved per prompt
    with our rows; a greedy peer must give our target-only tokens (``identical``).

    ``pipelined`` gammas add rows ``"<g>-pipelined"`` (mode ``pipelined``): the same chains drafted with
    :class:`specdec.pipeline.PipelinedDraft` (the next round drafted while the target scores this one).
    """
    from tqdm import tqdm
    job.check_backend(backend)
    if pair is not None:
        pairs.check_serves(pair, job)
    cores = None if backend == "pynq" else runtime.cores(backend)
    if backend == "pynq":           # one overlay: its cores and, for a fabric draft, its draft engine
        if pair is None:            # a model or option this machine cannot take, then no bitstream: before loading
            pairs.check_job(job)
        ol = runtime.pynq_overlay()
        cores = ol.cores()
    pair = pair or pairs.open_job_pair(job, cores.kv)
    if backend == "pynq":
        if job.draft_engine == "fabric":
            from .int8draft import bind
            bind(pair.draft.lm.model, ol.draft_engine())
    if cores.kv is not None and job.kv_block is not None:        # both caches in pages the kvpage core assigns
        pair = pairs.paged_pair(pair, cores.kv, job.kv_block)
    prompts = [pairs.encode(pair.tokenizer, p) for p in job.prompts]
    jobs = {g: dataclasses.replace(job, gamma=g, tree=None) for g in gammas}
    drafters = {g: pairs.drafter(pair, None, job.draft_confidence) for g in gammas}
    specs = {}
    for spec in trees or []:
        spec = pairs.calibrated(pair, spec)
        label = f"{spec.kind}-{spec.budget}"
        jobs[label], specs[label] = dataclasses.replace(job, tree=spec, draft_confidence=None), spec
        drafters[label] = pairs.drafter(pair, spec)
    for g in pipelined or []:
        if g not in gammas or g == 0:
            raise ValueError(f"pipelined gamma {g!r}: one of the measured gammas other than 0 ({gammas})")
        if not isinstance(pair.draft, ModelDraft):
            raise ValueError(f"pipelined gamma {g}: pipelined drafting needs a draft model, the pair drafts with "
                             f"{pair.draft_name!r}")
        from .pipeline import PipelinedDraft
        label = f"{g}-pipelined"
        jobs[label], drafters[label] = dataclasses.replace(job, gamma=g, tree=None), PipelinedDraft(pair.draft.lm)
    guard = {}
    if guard_gamma is not None:
        if guard_gamma not in gammas or guard_gamma == 0:
            raise ValueError(f"guard gamma {guard_gamma!r}: one of the measured gammas other than 0 ({gammas})")
        other = Sampling() if not job.sampling.greedy else GUARD_SAMPLING
        for g in (0, guard_gamma):
            label = f"{g}-{'greedy' if other.greedy else 'sampled'}"
            jobs[label], drafters[label], guard[g] = dataclasses.replace(job, gamma=g, tree=None,
                                                                          sampling=other), pair.draft, label
    labels = list(jobs)
    draft_model, assistant_name = assistant(pair, peers)
    peers = [p for p in peers or [] if not p.assisted or draft_model is not None]
    eos = frozenset(eos_ids(pair.target))

    def peer_run(peer, i, ids, n):
        return hf_peers.generate(peer, pair.target.model, draft_model, ids, n, job.sampling, eos, job.seed + i)

    # warm-up (untimed): first calls into torch and numpy allocate
    last = gammas[-1]
    runtime.generate_one(dataclasses.replace(jobs[last], max_new_tokens=4), 0, prompts[0], pair.target,
                         drafters[last], cores.verifier)
    for peer in peers:
        peer_run(peer, 0, prompts[0], 4)
    gens: dict = {k: [] for k in labels}
    peer_out: dict = {p.name: [] for p in peers}
    t0 = time.time()
    with tqdm(total=len(prompts) * (len(labels) + len(peers)), desc="bench e2e", unit="gen", file=sys.stderr,
              disable=not sys.stderr.isatty() and os.environ.get("SPECDEC_PROGRESS") != "1") as bar:
        for i, ids in enumerate(prompts):
            for k in labels:
                gens[k].append(runtime.generate_one(jobs[k], i, ids, pair.target, drafters[k], cores.verifier,
                                                    cores.masker))
                bar.update(1)
            for peer in peers:
                peer_out[peer.name].append(peer_run(peer, i, ids, job.max_new_tokens))
                bar.update(1)
    rows = []
    base = summarize(gens[0])["tokens_per_s"]
    for k in labels:
        if k in guard.values():
            continue
        s = summarize(gens[k])
        tree = specs.get(k)
        piped = isinstance(k, str) and k.endswith("-pipelined")
        rows.append({"gamma": k, "mode": tree.kind if tree else "pipelined" if piped else "chain",
                     "positions_per_call": tree.budget if tree else jobs[k].gamma + 1 if piped else
                     (k + 1 if isinstance(k, int) else None),
                     "tokens_per_s": s["tokens_per_s"], "speedup": s["tokens_per_s"] / base if base else None,
                     **{key: s[key] for key in ("acceptance", "tokens_per_call", "per_position_acceptance",
                                                "breakdown", "host_fraction", "target_calls", "new_tokens",
                                                "wall_s", "verifier_cycles", "verifier_cycles_per_round",
                                                "mask_cycles_per_round", "kv_ops_per_round",
                                                "kv_cycles_per_round", "kv_pages_max", "branched_rounds")}})
        if piped:
            rows[-1].update(ahead_hits=drafters[k].hits, ahead_misses=drafters[k].misses)
    spec_rows = [r for r in rows if r["gamma"] != 0]
    best = max(spec_rows, key=lambda r: r["speedup"] or 0) if spec_rows else None
    same = all(gens[k][i].tokens == gens[0][i].tokens for k in labels if k not in guard.values()
               for i in range(len(prompts)))
    res = {"target": pair.target_name, "draft": pair.draft_name, "backend": backend,
           **({"hf_assistant": assistant_name} if assistant_name and any(p.assisted for p in peers) else {}),
           "prompts": len(prompts), "max_new_tokens": job.max_new_tokens,
           "sampling": dataclasses.asdict(job.sampling), "seed": job.seed,
           # the options that change what the rows measure (the prompts' texts are the job's)
           "draft_confidence": job.draft_confidence, "draft_vocab": job.draft_vocab, "draft_engine": job.draft_engine,
           "kv_block": pair.target.block if pair.target.kv is not None else None,     # None: dense caches
           "rows": rows,
           "bench_wall_s": time.time() - t0,
           "greedy_outputs_identical_across_gammas": same if job.sampling.greedy else None,
           "best": {"gamma": best["gamma"], "speedup": best["speedup"]} if best else None,
           "host": {**host_info(), "torch_threads": _torch_threads(), "linear_kernel": kernels.kernel()}}
    if spec_rows and any(r["gamma"] == 0 for r in rows):
        if breakeven.drafted(rows):
            res["breakeven"] = breakeven.report(rows, CORE_PARAMS["GAMMA_MAX"])
        else:       # no acceptance measured: a prediction would rest on nothing
            res["breakeven"] = {"skipped": "no chain of gamma > 0 drafted a token: no acceptance to predict from"}
    if peers:
        res["peers"] = peer_rows(peer_out, [g.tokens for g in gens[0]], base, job.sampling.greedy)
        assisted = [r for r in res["peers"] if r["name"].startswith("hf-assisted")]
        if best and assisted:
            top = max(assisted, key=lambda r: r["tokens_per_s"])
            ratio = best["tokens_per_s"] / top["tokens_per_s"] if top["tokens_per_s"] else None
            res["best_vs_hf_assisted"] = {"peer": top["name"], "ratio": ratio}
            res.setdefault("goals_met", {})[f"best row >= {GOALS['vs_hf_assisted']}x HF assisted at its best "
                                            f"({top['name']})"] = ratio is not None and ratio >= GOALS["vs_hf_assisted"]
        if job.sampling.greedy:
            res["greedy_outputs_identical_across_gammas"] = same and all(r["identical"] for r in res["peers"])
    if guard:
        res["sampling_guard"] = sampling_guard({g: (gens[g], gens[label]) for g, label in guard.items()},
                                               job.sampling.greedy)
        res.setdefault("goals_met", {})[f"sampling within {GOALS['sampling_cost']}x of greedy per target call"] = \
            res["sampling_guard"]["ok"]
    if specs:
        res["trees"] = {label: spec.to_dict() for label, spec in specs.items()}
        res["tree_vs_chain"] = tree_vs_chain(rows)
        res["best_tree_vs_best_chain"] = best_tree_vs_best_chain(rows)
    if best:
        goal = speedup_goal(res["sampling"])
        res.setdefault("goals_met", {}).update({
            f"speedup >= {goal}x at best gamma ({'greedy' if job.sampling.greedy else 'sampling'})":
                best["speedup"] >= goal,
            f"host overhead <= {GOALS['host_fraction']:.0%} of a round at best gamma":
                best["host_fraction"] <= GOALS["host_fraction"]})
        for c in res.get("tree_vs_chain", []):
            if c["best_chain_gamma"] is not None:       # no chain at its cost measured: nothing to compare with
                res["goals_met"][f"{c['tree']}: tokens/call above the best chain at equal target cost"] = c["higher"]
        if res.get("best_tree_vs_best_chain"):
            res["goals_met"]["best tree >= best chain in tok/s"] = res["best_tree_vs_best_chain"]["ok"]
    return res


def peer_rows(outs: dict, ours: list[list[int]], base: float, greedy: bool) -> list[dict]:
    """One row per peer: tok/s over every prompt, speedup over our target-only row, and (greedy) whether
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
        lines.append(f"{c['tree']}: {c['tokens_per_call']:.2f} tokens/call vs best chain at equal target cost " +
                     (f"(gamma {c['best_chain_gamma']}): {c['best_chain_tokens_per_call']:.2f}"
                      if c["best_chain_gamma"] is not None else "(none measured)"))
    bt = res.get("best_tree_vs_best_chain")
    if bt:
        lines.append(f"best tree {bt['tree']} {bt['tree_tokens_per_s']:.2f} tok/s vs best chain {bt['chain']} "
                     f"{bt['chain_tokens_per_s']:.2f} tok/s ({bt['ratio']:.2f}x)" +
                     (f"; chain-shaped in every round, not counted: {', '.join(map(str, bt['chain_shaped']))}"
                      if bt["chain_shaped"] else ""))
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
