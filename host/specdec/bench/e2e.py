"""``specdec bench e2e``: end-to-end decoding speed against gamma, in the layout of HADES Table I.

Every gamma runs on the same prompts in the same process, prompt by prompt (all gammas of a prompt
back to back), so the target-only baseline (gamma 0) and the speculative runs see the same machine
state. Reported per gamma: tokens/s, speedup over the run's baseline (:func:`baseline`: the faster of our gamma-0
loop and HF ``generate`` target-only when that peer ran; ``speedup_vs_loop`` is over gamma 0), acceptance rate,
tokens per target call,
per-position acceptance and the mean round broken down into draft / target / quantize+transfer /
verify / host overhead. Goals are reported as met or missed, never hidden.

:func:`run` reads top to bottom: the backend's cores and the pair (:func:`specdec.app.runner.open_backend`,
:func:`specdec.app.runner.job_pair`, as a job does), the rows to measure (:func:`variants`), the timed loop
(:func:`measure`), the rows' figures (:func:`rows`) and the result with its comparisons and goals
(:func:`result`; :mod:`specdec.bench.e2e_report` compares, tabulates and plots).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass

from ..app import calibrate, checks, pairs
from ..app.job import Job, TreeSpec
from ..app.runner import generate_one, job_pair, open_backend
from ..decoding import breakeven
from ..decoding.drafters import ModelDraft
from ..decoding.eagle import EagleDraft
from ..decoding.loop import eos_ids
from ..decoding.metrics import summarize
from ..decoding.pipeline import PipelinedDraft
from ..decoding.base import ADAPTIVE_GAMMAS, Drafter, Generation, Sampling
from ..errors import check_int
from ..hw.builds import CORE_PARAMS
from ..hw.cores import Cores
from ..models import corpus, decoder, kernels, loading
from ..models.hotvocab import hot_head_model
from ..models.int8draft import bind
from . import e2e_report as report
from . import peers as hf_peers
from .host import host_info

#: Seed of the held-out passages the bench prompts with by default.
HELD_OUT_SEED = 1234
#: The summary figures every row carries as measured.
ROW_FIGURES = ("acceptance", "tokens_per_call", "per_position_acceptance", "breakdown", "host_fraction",
               "target_calls", "new_tokens", "wall_s", "verifier_cycles", "verifier_cycles_per_round",
               "mask_cycles_per_round", "kv_ops_per_round", "kv_cycles_per_round", "kv_pages_max", "branched_rounds")


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


def default_guard(gammas: list) -> int:
    """The sampling guard's gamma when none is given: 4 when measured, else the first constant gamma > 0; -1 (no
    guard) when there is none."""
    ints = [g for g in gammas if isinstance(g, int) and g > 0]
    return 4 if 4 in ints else (ints[0] if ints else -1)


def check_options(gammas: list, guard_gamma: int | None, pipelined: list[int]) -> None:
    """ValueError unless the sampling guard's gamma and every pipelined gamma are measured gammas other than 0."""
    if guard_gamma is not None and (guard_gamma not in gammas or guard_gamma == 0):
        raise ValueError(f"guard gamma {guard_gamma!r}: one of the measured gammas other than 0 ({gammas})")
    for g in pipelined:
        if g not in gammas or g == 0:
            raise ValueError(f"pipelined gamma {g!r}: one of the measured gammas other than 0 ({gammas})")


def assistant(pair: pairs.Pair, peers: list[hf_peers.Peer] | None) -> tuple[object | None, str | None]:
    """The draft model Hugging Face assisted generation runs, and its name: the pair's draft model; for an
    EAGLE head (which HF's assisted generation cannot run) the target's default draft model with the head's hot
    vocabulary (its fastest form), loaded only when an assisted peer is asked for; None for prompt lookup."""
    if isinstance(pair.draft, ModelDraft):
        return pair.draft.lm.model, pair.draft_name
    if isinstance(pair.draft, EagleDraft) and any(p.assisted for p in peers or []):
        name = loading.DEFAULT_DRAFT.get(pair.target_name)
        if name is not None:
            ids = pair.draft.head.hot_ids.numpy()
            return hot_head_model(loading.load(name)[0], ids), checks.draft_name(name, len(ids))
    return None, None


def default_prompts(n: int) -> list[str]:
    """n passages from the held-out tragedies (never seen by the demo draft in training)."""
    return corpus.sample_passages(n, held_out=True, seed=HELD_OUT_SEED)


def _torch_threads() -> int:
    import torch
    return torch.get_num_threads()


@dataclass
class Variants:
    """What a bench run measures on every prompt, by row label (a gamma, ``"<kind>-<nodes>"``,
    ``"<g>-pipelined"``, ``"<g>-greedy"`` / ``"<g>-sampled"``): each row's job and drafter, the tree specs by
    label, and the sampling guard's reruns (gamma -> its label)."""

    jobs: dict
    drafters: dict[object, Drafter]
    specs: dict[str, TreeSpec]
    guard: dict[int, str]
    drafts: dict[str, str] = dataclasses.field(default_factory=dict)     # label -> a further draft's name

    @property
    def labels(self) -> list:
        return list(self.jobs)


def variants(job: Job, pair: pairs.Pair, gammas: list, trees: list[TreeSpec], pipelined: list[int],
             guard_gamma: int | None, others: list[str] | None = None) -> Variants:
    """The rows of a run: every gamma as a chain, every tree (its spec calibrated on the pair), every pipelined
    gamma, the chains of every further draft in ``others`` at every numeric gamma above 0 (``"<draft>@<gamma>"``,
    :func:`specdec.app.pairs.other_draft`: the same target, side by side), and the guard's reruns of gamma 0 and
    ``guard_gamma`` in the other sampling mode (:data:`specdec.bench.e2e_report.GUARD_SAMPLING` for a greedy job,
    greedy for a sampled one)."""
    v = Variants({g: dataclasses.replace(job, gamma=g, tree=None) for g in gammas},
                 {g: pairs.drafter(pair, None, job.draft_confidence) for g in gammas}, {}, {})
    for spec in trees:
        spec = calibrate.calibrated(pair, spec)
        label = f"{spec.kind}-{spec.budget}"
        v.jobs[label], v.specs[label] = dataclasses.replace(job, tree=spec, draft_confidence=None), spec
        v.drafters[label] = pairs.drafter(pair, spec)
    for g in pipelined:
        if not isinstance(pair.draft, ModelDraft):
            raise ValueError(f"pipelined gamma {g}: pipelined drafting needs a draft model, the pair drafts with "
                             f"{pair.draft_name!r}")
        label = f"{g}-pipelined"
        v.jobs[label], v.drafters[label] = dataclasses.replace(job, gamma=g, tree=None), PipelinedDraft(pair.draft.lm)
    for name in others or []:
        source = pairs.other_draft(pair, name)
        for g in gammas:
            if isinstance(g, int) and g > 0:
                label = f"{name}@{g}"
                v.jobs[label] = dataclasses.replace(job, gamma=g, tree=None, draft_confidence=None)
                v.drafters[label], v.drafts[label] = source, name
    if guard_gamma is not None:
        other = Sampling() if not job.sampling.greedy else report.GUARD_SAMPLING
        for g in (0, guard_gamma):
            label = f"{g}-{'greedy' if other.greedy else 'sampled'}"
            v.jobs[label] = dataclasses.replace(job, gamma=g, tree=None, sampling=other)
            v.drafters[label], v.guard[g] = pair.draft, label
    return v


def measure(job: Job, pair: pairs.Pair, cores: Cores, v: Variants, prompts: list[list[int]],
            peers: list[hf_peers.Peer], draft_model, warm: object) -> tuple[dict, dict, float]:
    """Every row's generation of every prompt, and every peer's, interleaved prompt by prompt (:func:`schedule`)
    after an untimed warm-up of row ``warm`` and every peer (the first calls into torch and numpy allocate; None:
    no warm-up): (generations by label, the peers' (tokens, seconds) by name, the wall seconds)."""
    from tqdm import tqdm
    eos = frozenset(eos_ids(pair.target))

    def peer_run(peer, i, ids, n):
        return hf_peers.generate(peer, pair.target.model, draft_model, ids, n, job.sampling, eos, job.seed + i)

    if warm is not None:
        generate_one(dataclasses.replace(v.jobs[warm], max_new_tokens=4), 0, prompts[0], pair.target,
                     v.drafters[warm], cores.verifier)
        for peer in peers:
            peer_run(peer, 0, prompts[0], 4)
    gens: dict = {k: [] for k in v.labels}
    peer_out: dict = {p.name: [] for p in peers}
    t0 = time.time()
    with tqdm(total=len(prompts) * (len(v.labels) + len(peers)), desc="bench e2e", unit="gen", file=sys.stderr,
              disable=not sys.stderr.isatty() and os.environ.get("SPECDEC_PROGRESS") != "1") as bar:
        for i, ids in enumerate(prompts):
            for k in schedule(v.labels, peers, i):
                if isinstance(k, hf_peers.Peer):
                    peer_out[k.name].append(peer_run(k, i, ids, job.max_new_tokens))
                else:
                    gens[k].append(generate_one(v.jobs[k], i, ids, pair.target, v.drafters[k], cores.verifier,
                                                cores.masker))
                bar.update(1)
    return gens, peer_out, time.time() - t0


def measure_runs(runs: int, job: Job, pair: pairs.Pair, cores: Cores, v: Variants, prompts: list[list[int]],
                 peers: list[hf_peers.Peer], draft_model, warm: object) -> tuple[dict, dict, float, list[dict]]:
    """:func:`measure` ``runs`` times, warmed up before the first: the generations and the peers' runs of every run
    pooled in run order, the wall seconds of all, and each run's own figures (:func:`run_figures`)."""
    gens: dict = {k: [] for k in v.labels}
    peer_out: dict = {p.name: [] for p in peers}
    wall, per_run = 0.0, []
    for r in range(runs):
        g, po, w = measure(job, pair, cores, v, prompts, peers, draft_model, warm if r == 0 else None)
        per_run.append(run_figures(v, g, po))
        for k in gens:
            gens[k] += g[k]
        for k in peer_out:
            peer_out[k] += po[k]
        wall += w
    return gens, peer_out, wall, per_run


def schedule(labels: list, peers: list[hf_peers.Peer], i: int) -> list:
    """The runs of prompt ``i`` in order (row labels and peers): the two target-only decoders back to back, our
    gamma 0 and HF ``generate`` (``hf-target``), their order swapped from one prompt to the next so that a drift of
    the machine's speed falls on both alike (the baseline is the faster of them, :func:`baseline`); then the other
    rows, then the other peers."""
    first = [k for k in labels if k == 0] + [p for p in peers if p.name == "hf-target"]
    if i % 2:
        first.reverse()
    return first + [k for k in labels if k != 0] + [p for p in peers if p.name != "hf-target"]


def baseline(loop_tps: float, peer_out: dict) -> dict:
    """The run's target-only baseline: the faster of our gamma-0 loop (``loop_tps`` tok/s) and HF ``generate``
    target-only (the ``hf-target`` peer's (tokens, seconds) runs in ``peer_out``, when it ran), measured in the
    same run; both figures are kept, and ``name`` says which one every speedup is over."""
    runs = peer_out.get("hf-target")
    hf_tps = None
    if runs:
        wall = sum(s for _, s in runs)
        hf_tps = sum(len(t) for t, _ in runs) / wall if wall else 0.0
    use_hf = hf_tps is not None and hf_tps > loop_tps
    return {"name": "hf-target" if use_hf else "loop-gamma0", "tokens_per_s": hf_tps if use_hf else loop_tps,
            "loop_gamma0_tokens_per_s": loop_tps, "hf_target_tokens_per_s": hf_tps}


def run_figures(v: Variants, gens: dict[object, list[Generation]], peer_out: dict) -> dict:
    """One run's own figures (see :func:`run`'s ``runs``): its baseline, every row's tok/s and speedup over it
    (rows by label), its best row and, with trees, its best tree against its best chain."""
    base = baseline(summarize(gens[0])["tokens_per_s"], peer_out)
    rs = rows(v, gens, base["tokens_per_s"])
    best = _best(rs)
    out = {"baseline": base, "rows": {str(r["gamma"]): {"tokens_per_s": r["tokens_per_s"], "speedup": r["speedup"]}
                                      for r in rs},
           "best": {"gamma": best["gamma"], "speedup": best["speedup"]} if best else None}
    if v.specs:
        out["best_tree_vs_best_chain"] = report.best_tree_vs_best_chain(rs)
    return out


def rows(v: Variants, gens: dict[object, list[Generation]], base_tps: float | None = None) -> list[dict]:
    """One row per measured label but the guard's reruns: its mode, the positions its target calls score, tok/s,
    speedup over ``base_tps`` (the run's :func:`baseline`; gamma 0 when None) and over gamma 0
    (``speedup_vs_loop``), and the summary figures (:data:`ROW_FIGURES`); a pipelined row adds its drafter's hits
    and misses."""
    out = []
    loop = summarize(gens[0])["tokens_per_s"]
    base = loop if base_tps is None else base_tps
    for k in v.labels:
        if k in v.guard.values():
            continue
        s = summarize(gens[k])
        tree = v.specs.get(k)
        piped = isinstance(k, str) and k.endswith("-pipelined")
        out.append({"gamma": k, "mode": tree.kind if tree else "pipelined" if piped else "chain",
                    **({"draft": v.drafts[k]} if k in v.drafts else {}),
                    "positions_per_call": tree.budget if tree else v.jobs[k].gamma + 1 if piped or k in v.drafts
                    else (k + 1 if isinstance(k, int) else None),
                    "tokens_per_s": s["tokens_per_s"], "speedup": s["tokens_per_s"] / base if base else None,
                    "speedup_vs_loop": s["tokens_per_s"] / loop if loop else None,
                    **{key: s[key] for key in ROW_FIGURES}})
        if piped:
            out[-1].update(ahead_hits=v.drafters[k].hits, ahead_misses=v.drafters[k].misses)
    return out


def run(job: Job, gammas: list, backend: str = "ref", pair: pairs.Pair | None = None,
        trees: list[TreeSpec] | None = None, guard_gamma: int | None = None,
        peers: list[hf_peers.Peer] | None = None, pipelined: list[int] | None = None,
        others: list[str] | None = None, runs: int = 1) -> dict:
    """Measure every gamma, and every token tree in ``trees``, on the prompts of ``job``; see the module
    docstring.

    ``runs`` repeats the whole timed loop (every prompt of every row and peer) that many times: the rows, the
    baseline and the goals are those of all runs pooled (tokens over seconds), and ``per_run`` gives each run's
    own baseline, speedups, best row and tree-against-chain ratio, so that a figure's spread between runs of the
    same process shows in the result (a 2-core machine's speed moves single runs by several percent).

    Each tree row is compared with the chains at equal target cost: a tree of N nodes makes the target
    score N positions per call, as a chain of gamma = N - 1 does.

    ``guard_gamma`` (an int in ``gammas``) adds the sampling guard: gamma 0 and ``guard_gamma`` run again,
    interleaved with the rest, in the other mode (sampled for a greedy job, greedy for a sampled one), and
    :func:`specdec.bench.e2e_report.sampling_guard` compares the cost per target call of the two modes.

    ``peers`` (:mod:`specdec.bench.peers`) run Hugging Face ``generate`` with the same pair, interleaved per
    prompt with our rows; a greedy peer must give our target-only tokens (``identical``).

    ``pipelined`` gammas add rows ``"<g>-pipelined"`` (mode ``pipelined``): the same chains drafted with
    :class:`specdec.decoding.pipeline.PipelinedDraft` (the next round drafted while the target scores this one).

    ``others`` (draft names: prompt lookup, EAGLE heads) add their chains at the same gammas over the same target,
    interleaved with the rest (rows ``"<draft>@<gamma>"``); ``drafts`` in the result gives each draft's best row.
    """
    check_options(gammas, guard_gamma, pipelined or [])
    check_int("runs", runs, 1, allowed="a positive integer")
    cores, fabric = open_backend(job, backend, pair)
    pair = job_pair(job, cores.kv, pair)
    if fabric is not None:          # a fabric draft on a board: its layers on the overlay's engine
        bind(pair.draft.lm.model, fabric.engine)
    v = variants(job, pair, gammas, trees or [], pipelined or [], guard_gamma, others)
    draft_model, assistant_name = assistant(pair, peers)
    peers = [p for p in peers or [] if not p.assisted or draft_model is not None]
    prompts = [pairs.encode(pair.tokenizer, p) for p in job.prompts]
    gens, peer_out, wall, per_run = measure_runs(runs, job, pair, cores, v, prompts, peers, draft_model, gammas[-1])
    hf_assistant = assistant_name if assistant_name and any(p.assisted for p in peers) else None
    base = baseline(summarize(gens[0])["tokens_per_s"], peer_out)
    res = result(job, pair, backend, v, gens, rows(v, gens, base["tokens_per_s"]), wall, hf_assistant)
    res["baseline"] = base
    res["runs"] = runs
    if runs > 1:
        res["per_run"] = per_run
    if peers:
        _add_peers(res, peer_out, gens, job.sampling.greedy)
    if v.guard:
        res["sampling_guard"] = report.sampling_guard({g: (gens[g], gens[label]) for g, label in v.guard.items()},
                                                      job.sampling.greedy)
        res.setdefault("goals_met", {})[f"sampling within {report.GOALS['sampling_cost']}x of greedy per target "
                                        f"call"] = res["sampling_guard"]["ok"]
    if v.drafts:
        res["drafts"] = {}
        for name in [pair.draft_name, *dict.fromkeys(v.drafts.values())]:
            mine = [r for r in res["rows"] if r["gamma"] != 0 and r.get("draft", pair.draft_name) == name]
            top = _best(mine)
            res["drafts"][name] = top and {k: top[k] for k in ("gamma", "tokens_per_s", "speedup", "tokens_per_call",
                                                               "acceptance")}
    if v.specs:
        res["trees"] = {label: spec.to_dict() for label, spec in v.specs.items()}
        res["tree_vs_chain"] = report.tree_vs_chain(res["rows"])
        res["best_tree_vs_best_chain"] = report.best_tree_vs_best_chain(res["rows"])
    _add_goals(res, job.sampling.greedy)
    return res


def _best(rows: list[dict]) -> dict | None:
    """The fastest speculative row (gamma other than 0), or None."""
    return max((r for r in rows if r["gamma"] != 0), key=lambda r: r["speedup"] or 0, default=None)


def result(job: Job, pair: pairs.Pair, backend: str, v: Variants, gens: dict, rows: list[dict], wall: float,
           hf_assistant: str | None = None) -> dict:
    """The run's JSON: what it measured with which options (``hf_assistant``: the draft HF's assisted generation
    ran), its rows, the best row, whether every greedy row gave the target-only tokens, the host, and the
    break-even model's prediction against the measured rows."""
    spec_rows = [r for r in rows if r["gamma"] != 0]
    best = _best(rows)
    same = all(gens[k][i].tokens == gens[0][i].tokens for k in v.labels if k not in v.guard.values()
               for i in range(len(gens[0])))
    res = {"target": pair.target_name, "draft": pair.draft_name, "backend": backend,
           **({"hf_assistant": hf_assistant} if hf_assistant else {}),
           "prompts": len(job.prompts), "max_new_tokens": job.max_new_tokens,
           "sampling": dataclasses.asdict(job.sampling), "seed": job.seed,
           # the options that change what the rows measure (the prompts' texts are the job's)
           "draft_confidence": job.draft_confidence, "draft_vocab": job.draft_vocab, "draft_engine": job.draft_engine,
           "kv_block": pair.target.block if pair.target.kv is not None else None,     # None: dense caches
           "rows": rows,
           "bench_wall_s": wall,
           "greedy_outputs_identical_across_gammas": same if job.sampling.greedy else None,
           "best": {"gamma": best["gamma"], "speedup": best["speedup"]} if best else None,
           "host": {**host_info(), "torch_threads": _torch_threads(), "linear_kernel": kernels.kernel(),
                    "target_forward": decoder.description(pair.target.model)}}
    if spec_rows and any(r["gamma"] == 0 for r in rows):
        if breakeven.drafted(rows):
            res["breakeven"] = breakeven.report(rows, CORE_PARAMS["GAMMA_MAX"])
        else:       # no acceptance measured: a prediction would rest on nothing
            res["breakeven"] = {"skipped": "no chain of gamma > 0 drafted a token: no acceptance to predict from"}
    return res


def _add_peers(res: dict, peer_out: dict, gens: dict, greedy: bool) -> None:
    """The peers' rows, the best row against HF assisted generation at its best (a goal), and whether the peers'
    greedy tokens are ours too; with HF's target-only peer, whether our gamma-0 loop keeps up with it (a goal)."""
    res["peers"] = report.peer_rows(peer_out, [g.tokens for g in gens[0]], res["baseline"]["tokens_per_s"], greedy)
    hf_tps = res["baseline"]["hf_target_tokens_per_s"]
    if hf_tps is not None:
        res.setdefault("goals_met", {})["our gamma-0 loop >= HF generate target-only"] = \
            res["baseline"]["loop_gamma0_tokens_per_s"] >= hf_tps
    assisted = [r for r in res["peers"] if r["name"].startswith("hf-assisted")]
    best = _best(res["rows"])
    if best and assisted:
        top = max(assisted, key=lambda r: r["tokens_per_s"])
        ratio = best["tokens_per_s"] / top["tokens_per_s"] if top["tokens_per_s"] else None
        res["best_vs_hf_assisted"] = {"peer": top["name"], "ratio": ratio}
        goal = report.GOALS["vs_hf_assisted"]
        res.setdefault("goals_met", {})[f"best row >= {goal}x HF assisted at its best ({top['name']})"] = \
            ratio is not None and ratio >= goal
    if greedy:
        res["greedy_outputs_identical_across_gammas"] = (res["greedy_outputs_identical_across_gammas"]
                                                         and all(r["identical"] for r in res["peers"]))


def _add_goals(res: dict, greedy: bool) -> None:
    """The best row's goals (speedup, host share of a round) and the trees' against the chains."""
    best = _best(res["rows"])
    if best is None:
        return
    goal = report.speedup_goal(res["sampling"])
    res.setdefault("goals_met", {}).update({
        f"speedup >= {goal}x at best gamma ({'greedy' if greedy else 'sampling'})": best["speedup"] >= goal,
        f"host overhead <= {report.GOALS['host_fraction']:.0%} of a round at best gamma":
            best["host_fraction"] <= report.GOALS["host_fraction"]})
    for c in res.get("tree_vs_chain", []):
        if c["best_chain_gamma"] is not None:       # no chain at its cost measured: nothing to compare with
            res["goals_met"][f"{c['tree']}: tokens/call above the best chain at equal target cost"] = c["higher"]
    if res.get("best_tree_vs_best_chain"):
        res["goals_met"]["best tree >= best chain in tok/s"] = res["best_tree_vs_best_chain"]["ok"]
    per = [r.get("best_tree_vs_best_chain") for r in res.get("per_run", [])]
    if per and all(per):
        res["goals_met"][f"best tree >= best chain in tok/s in each of {len(per)} runs"] = all(p["ok"] for p in per)
