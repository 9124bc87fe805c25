"""Runtime assembly: a model pair, a verifier on a backend, and jobs of prompts run through the loop.

Backends (the decode loop does not know which it has):

* ``ref``  the golden register model (``hls_ref.verifier`` behind the same driver), in this process;
* ``sim``  the RTL under Verilator through cocotb: the whole job runs inside the simulator's Python
  (``specdec/backends/sim_decode.py``), the driver in a thread as on a board;
* ``pynq`` a board: pynq ``Overlay``, the driver bound by VLNV, rows DMA'd from ``pynq.allocate`` buffers.

A job is plain data (JSON), so the same :func:`execute` runs in this process or in the simulator.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import models
from .decode import GenConfig, Generation, ModelDraft, PromptLookup, Sampling, generate

BACKENDS = ("ref", "sim", "pynq")
PROMPT_LOOKUP = "prompt-lookup"
#: The verifier build every off-board backend uses: full OPT vocabulary, gamma up to 16, 4 lanes, trees
#: up to 64 nodes.
CORE_PARAMS = {"LANES": 4, "VOCAB_MAX": 50272, "GAMMA_MAX": 16, "TREE_MAX": 64}
#: The treemask build: trees up to 64 nodes (the xc7z020 target).
TREEMASK_PARAMS = {"NODES_MAX": 64}
#: Tree builders of ``--tree`` (specdec.tree) and their defaults.
TREE_KINDS = ("static", "eagle", "sequoia")
TREE_DEFAULTS = {"budget": 16, "depth": 6, "topk": 4, "calibration_passages": 8}
#: The kvpage build: a 256-page pool, 64-row block tables (1,024 tokens per sequence at 16 tokens a page).
KV_PARAMS = {"PAGES": 256, "MAX_BLOCKS": 64}
#: Tokens per KV page unless a job says otherwise (``"kv": {"block": B}``; ``"kv": false`` keeps the
#: transformers DynamicCache).
KV_BLOCK = 16
#: Where ``--backend pynq`` looks for the bitstream (override with SPECDEC_BITSTREAM).
DEFAULT_BITSTREAM = models.ROOT / "bitstreams" / "pynq-z2" / "specdec.bit"


@dataclass
class Pair:
    """A target, its draft source and their shared tokenizer."""

    target: models.CausalLM
    draft: ModelDraft | PromptLookup
    tokenizer: object
    target_name: str
    draft_name: str

    @property
    def vocab(self) -> int:
        return self.target.vocab


def open_pair(target: str | None = None, draft: str | None = None) -> Pair:
    """Load a target and its draft (a model or ``"prompt-lookup"``), checking they share a vocabulary."""
    target = target or models.DEMO_TARGET
    t_model, t_tok = models.load(target)
    if draft is None:
        draft = models.DEFAULT_DRAFT.get(target)
        if draft is None:
            raise models.ModelError(f"no default draft for target {target!r}: pass --draft ID or "
                                    f"--draft {PROMPT_LOOKUP}")
    t_lm = models.CausalLM(t_model, "target")
    if draft == PROMPT_LOOKUP:
        return Pair(t_lm, PromptLookup(t_lm.vocab), t_tok, target, draft)
    d_model, d_tok = models.load(draft)
    models.check_pair(t_model, t_tok, d_model, d_tok, target, draft)
    return Pair(t_lm, ModelDraft(models.CausalLM(d_model, "draft")), t_tok, target, draft)


def golden_verifier(params: dict | None = None):
    """The verifier driver over the golden register model (backend ``ref``)."""
    from .backends.golden import GoldenDevice
    from .drivers import Verifier
    from .drivers.base import description
    p = {**CORE_PARAMS, **(params or {})}
    dev = GoldenDevice({0: "verifier"}, {0: {"lanes": p["LANES"], "vocab_max": p["VOCAB_MAX"],
                                             "gamma_max": p["GAMMA_MAX"], "tree_max": p["TREE_MAX"]}})
    return Verifier(description("verifier", dev), dev.stream(0))


def golden_masker(params: dict | None = None):
    """The treemask driver over the golden register model (backend ``ref``)."""
    from .backends.golden import GoldenDevice
    from .drivers import TreeMask
    from .drivers.base import description
    p = {**TREEMASK_PARAMS, **(params or {})}
    dev = GoldenDevice({0: "treemask"}, {0: {"nodes_max": p["NODES_MAX"]}})
    return TreeMask(description("treemask", dev), dev.sink(0))


def golden_kvpage(params: dict | None = None):
    """The kvpage driver over the golden register model (backend ``ref``)."""
    from .backends.golden import GoldenDevice
    from .drivers import KVPage
    from .drivers.base import description
    p = {**KV_PARAMS, **(params or {})}
    dev = GoldenDevice({0: "kvpage"}, {0: {"pages": p["PAGES"], "max_blocks": p["MAX_BLOCKS"]}})
    return KVPage(description("kvpage", dev))


def kv_block(job: dict) -> int | None:
    """Tokens per KV page for ``job``, or None when the job keeps the dense cache (``"kv": false``)."""
    spec = job.get("kv", {})
    if spec is False:
        return None
    block = (spec or {}).get("block", KV_BLOCK) if isinstance(spec, dict) else KV_BLOCK
    if not isinstance(block, int) or not 1 <= block <= 4096:
        raise ValueError(f"KV block must be an integer number of tokens per page in 1..4096, got {block!r}")
    return block


def paged_pair(pair: Pair, kv, block: int = KV_BLOCK) -> Pair:
    """``pair`` with both models' caches in page pools whose pages the kvpage core ``kv`` assigns (the same
    weights; new :class:`~specdec.models.CausalLM` wrappers)."""
    target = models.CausalLM(pair.target.model, pair.target.name, kv=kv, block=block)
    if isinstance(pair.draft, ModelDraft):
        draft = ModelDraft(models.CausalLM(pair.draft.lm.model, pair.draft.lm.name, kv=kv, block=block))
    else:
        draft = PromptLookup(target.vocab, pair.draft.max_ngram)
    return Pair(target, draft, pair.tokenizer, pair.target_name, pair.draft_name)


def check_tree(spec: dict | None) -> dict | None:
    """A job's ``tree`` entry with its defaults filled in, or None for chain speculation.

    Raises
    ------
    ValueError
        An unknown kind, or a budget, depth or top-k outside what the cores and builders take (naming it).
    """
    if not spec:
        return None
    spec = {**TREE_DEFAULTS, **spec}
    if spec.get("kind") not in TREE_KINDS:
        raise ValueError(f"tree kind {spec.get('kind')!r} not in {TREE_KINDS}")
    limit = min(CORE_PARAMS["TREE_MAX"], TREEMASK_PARAMS["NODES_MAX"])
    for key, low, high in (("budget", 2, limit), ("depth", 1, limit - 1), ("topk", 1, limit - 1)):
        v = spec[key]
        if not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"tree {key} must be an integer in {low}..{high} (the cores take trees of up to "
                             f"{limit} nodes), got {v!r}")
    acc = spec.get("acceptance")
    if acc is not None and (not len(acc) or any(not 0 <= a <= 1 for a in acc)):
        raise ValueError(f"tree acceptance values must lie in [0, 1], got {acc!r}")
    return spec


def tree_drafter(pair: Pair, spec: dict):
    """The tree builder ``spec['kind']`` over the pair's draft model (specdec.tree)."""
    from . import tree
    if not isinstance(pair.draft, ModelDraft):
        raise ValueError(f"tree speculation drafts with a model; draft {pair.draft_name!r} is not one")
    lm = pair.draft.lm
    if spec["kind"] == "static":
        paths = spec.get("paths") or tree.default_paths(spec["budget"], spec["depth"])
        return tree.StaticTree(lm, paths)
    if spec["kind"] == "eagle":
        return tree.EagleTree(lm, spec["budget"], spec["depth"], spec["topk"])
    acc = spec.get("acceptance") or calibrate(pair, spec["topk"], spec["calibration_passages"])
    spec["acceptance"] = acc
    return tree.SequoiaTree(lm, acc, spec["budget"], spec["depth"])


def calibrate(pair: Pair, k: int, n_passages: int, prompt_tokens: int = 48, new_tokens: int = 48) -> list[float]:
    """Sequoia's acceptance vector for the pair, measured where it is used: on the target's own greedy
    continuations (``new_tokens`` after the first ``prompt_tokens`` of ``n_passages`` corpus passages, not
    the benchmark's held-out prompts); only the continuation's positions are scored."""
    import torch
    from . import corpus, tree
    texts = corpus.sample_passages(n_passages, held_out=False, seed=CALIBRATION_SEED)
    contexts = []
    for t in texts:
        ids = encode(pair.tokenizer, t)[:prompt_tokens]
        with torch.inference_mode():
            out = pair.target.model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                                             pad_token_id=pair.tokenizer.pad_token_id)
        contexts.append(out[0].tolist())
    return [float(a) for a in tree.measure_acceptance(pair.target, pair.draft.lm, contexts, k,
                                                      skip=prompt_tokens - 1)]


CALIBRATION_SEED = 4321


def pynq_verifier(bitstream: str | os.PathLike | None = None):
    """The verifier on a board (backend ``pynq``): the overlay's driver with its DMA row stream."""
    return pynq_cores(bitstream)[0]


def pynq_cores(bitstream: str | os.PathLike | None = None):
    """The verifier, the treemask core and the kvpage core on a board (backend ``pynq``), the first two with
    their DMA channels; ``(verifier, masker, kv)``, None for a core the bitstream lacks."""
    path = Path(bitstream or os.environ.get("SPECDEC_BITSTREAM", DEFAULT_BITSTREAM))
    if not path.is_file():
        raise FileNotFoundError(f"backend pynq: no bitstream at {path} (build one with bitstreams/, or set "
                                "SPECDEC_BITSTREAM); off a board use --backend ref or --backend sim")
    import pynq
    from .drivers.verifier import DmaStream
    ol = pynq.Overlay(str(path))
    drv = ol.verifier            # bound by VLNV; its constructor refuses a register-map hash mismatch
    drv.attach(DmaStream(ol.axi_dma, pynq.allocate))
    masker = None
    if hasattr(ol, "treemask"):
        from .drivers.treemask import DmaSink
        masker = ol.treemask
        masker.attach(DmaSink(ol.axi_dma_mask, allocator=pynq.allocate))
    kv = getattr(ol, "kvpage", None)     # register-only IP: bound by VLNV, nothing to attach
    return drv, masker, kv


def seed_words(seed: int, index: int) -> tuple[int, ...]:
    """The verifier RNG seed for prompt ``index`` of a job seeded with ``seed`` (never all zero)."""
    return tuple(int(w) for w in np.random.default_rng([seed, index]).integers(1, 1 << 32, 4))


def config(job: dict) -> GenConfig:
    s = job.get("sampling", {})
    tree = check_tree(job.get("tree"))
    return GenConfig(max_new_tokens=job.get("max_new_tokens", 64), gamma=job.get("gamma", 4),
                     sampling=Sampling(s.get("temperature", 0.0), s.get("top_k", 0), s.get("top_p", 1.0)),
                     seed=job.get("seed", 0), tree_budget=tree["budget"] if tree else 0)


def execute(job: dict, verifier, pair: Pair | None = None, progress=None, masker=None, kv=None) -> dict:
    """Run every prompt of ``job`` (``{"target", "draft", "prompts", "max_new_tokens", "gamma",
    "sampling", "seed"}``, ``"tree": {"kind", "budget", ...}`` for tree speculation, ``"kv": {"block": B}``
    or ``false``) through :func:`specdec.decode.generate`.

    ``kv`` (a kvpage driver on any backend): both models' KV caches live in page pools whose pages that core
    assigns (forks per round, commits, rollbacks); None, or a job with ``"kv": false``, keeps transformers'
    dense caches.

    Returns ``{"generations": [...], "summary": summarize(...)}``; each generation holds the prompt, its
    new token ids and text, and its rounds.
    """
    cfg = config(job)
    pair = pair or open_pair(job.get("target"), job.get("draft"))
    block = kv_block(job)
    if kv is not None and block is not None:
        pair = paged_pair(pair, kv, block)
    spec = check_tree(job.get("tree"))
    drafter = tree_drafter(pair, spec) if spec else None
    gens = []
    out = []
    for i, text in enumerate(job["prompts"]):
        ids = encode(pair.tokenizer, text)
        g = generate_one(pair, verifier, ids, cfg, i, drafter, masker)
        gens.append(g)
        out.append({"prompt": text, "prompt_ids": ids, "tokens": g.tokens,
                    "text": pair.tokenizer.decode(g.tokens), "wall_s": g.wall_s, "prefill_s": g.prefill_s,
                    "stopped_at_eos": g.stopped_at_eos, "rounds": [asdict(r) for r in g.rounds]})
        if progress is not None:
            progress(i + 1, len(job["prompts"]))
    res = {"generations": out, "summary": summarize(gens)}
    if spec:
        res["tree"] = spec
    if kv is not None and block is not None:
        res["kv"] = {"pages": kv.pages, "max_blocks": kv.max_blocks, "block": block,
                     "op_cycles": {k: sorted(set(v)) for k, v in kv.op_cycles.items()},
                     "ops": {k: len(v) for k, v in kv.op_cycles.items()}, "free_pages_after": kv.free_pages}
    return res


def generate_one(pair: Pair, verifier, ids: list[int], cfg: GenConfig, index: int = 0, drafter=None,
                 masker=None) -> Generation:
    """Prompt ``index`` of a job: the verifier's RNG and the draft's sampler seeded from (seed, index).

    Tree speculation (``cfg.tree_budget``) drafts with ``drafter`` and takes masks from ``masker``."""
    if verifier is not None and (cfg.gamma != 0 or cfg.tree_budget):
        verifier.seed(seed_words(cfg.seed, index))
    return generate(pair.target, drafter if cfg.tree_budget else pair.draft, verifier, ids,
                    GenConfig(cfg.max_new_tokens, cfg.gamma, cfg.sampling, cfg.seed + index, cfg.stop_at_eos,
                              cfg.tree_budget), masker)


def encode(tokenizer, text: str) -> list[int]:
    if not isinstance(text, str) or not text:
        raise ValueError("the prompt is empty: give some text")
    ids = tokenizer(text)["input_ids"]
    if not ids:
        raise ValueError(f"the prompt {text!r} encodes to no tokens")
    return [int(t) for t in ids]


def summarize(gens: list[Generation]) -> dict:
    """Speed, acceptance and the time breakdown over generations (HADES Table I's columns and more)."""
    rounds = [r for g in gens for r in g.rounds]
    n_tok = sum(len(g.tokens) for g in gens)
    wall = sum(g.wall_s for g in gens)
    proposed = sum(r.g for r in rounds)
    accepted = sum(r.n_accept for r in rounds)
    depth = max((r.depth for r in rounds), default=0)
    reached = [sum(1 for r in rounds if r.depth > i and r.n_accept >= i) for i in range(depth)]
    taken = [sum(1 for r in rounds if r.n_accept > i) for i in range(depth)]
    parts = ("draft_s", "target_s", "mask_s", "quantize_transfer_s", "verify_s", "host_s")
    total = {k: sum(getattr(r, k) for r in rounds) for k in parts}
    round_s = sum(r.total_s for r in rounds)
    return {
        "prompts": len(gens), "new_tokens": n_tok, "wall_s": wall,
        "tokens_per_s": n_tok / wall if wall else 0.0,
        "acceptance": accepted / proposed if proposed else None,
        "tokens_per_call": n_tok / len(rounds) if rounds else 0.0,
        "target_calls": len(rounds), "drafted": proposed, "accepted": accepted,
        "per_position_acceptance": [t / r if r else None for t, r in zip(taken, reached)],
        "breakdown": {**{k: total[k] / len(rounds) if rounds else 0.0 for k in parts},
                      "prefill_s": sum(g.prefill_s for g in gens) / max(1, len(gens)),
                      "fractions": {k: total[k] / round_s if round_s else 0.0 for k in parts}},
        "host_fraction": total["host_s"] / round_s if round_s else 0.0,
        "verifier_cycles": sum(r.cycles for r in rounds),
        "verifier_cycles_per_round": sum(r.cycles for r in rounds) / len(rounds) if rounds else 0.0,
        "mask_cycles_per_round": sum(r.mask_cycles for r in rounds) / len(rounds) if rounds else 0.0,
        "kv_ops_per_round": sum(r.kv_ops for r in rounds) / len(rounds) if rounds else 0.0,
        "kv_cycles_per_round": sum(r.kv_cycles for r in rounds) / len(rounds) if rounds else 0.0,
        "kv_pages_max": max((r.kv_pages for r in rounds), default=0),
    }


def stats_line(summary: dict) -> str:
    """The one-line stats of ``specdec generate``."""
    acc = summary["acceptance"]
    pos = " ".join("-" if a is None else f"{a:.2f}" for a in summary["per_position_acceptance"])
    return (f"{summary['tokens_per_s']:.1f} tok/s | acceptance {'-' if acc is None else f'{acc:.2f}'} | "
            f"{summary['tokens_per_call']:.2f} tokens/target call | per position [{pos}]")


def run_sim(job: dict, sim: str = "verilator") -> dict:
    """Run ``job`` inside the RTL simulation (backend ``sim``) and return its result: the toplevel holding the
    verifier and the treemask core (``fpga.system``; a chain job leaves the treemask core idle)."""
    from specdec.backends import simulator as harness
    top, params = "system", {**CORE_PARAMS, **TREEMASK_PARAMS, **KV_PARAMS}
    with tempfile.TemporaryDirectory() as tmp:
        job_file, out_file = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_file.write_text(json.dumps(job))
        harness.run(top, "specdec.backends.sim_decode", sim, params=params,
                    extra_env={"SPECDEC_JOB": str(job_file), "SPECDEC_RESULT": str(out_file),
                               "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
                               "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                               # cocotbext-axi's cocotb-2 deprecation notices, once per access otherwise
                               "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "ignore::DeprecationWarning")})
        if not out_file.is_file():
            raise RuntimeError(f"the {sim} simulation ended without a result; see its log above")
        return json.loads(out_file.read_text())


def run(job: dict, backend: str = "ref", pair: Pair | None = None, progress=None) -> dict:
    """Run ``job`` on ``backend`` (``ref``, ``sim`` or ``pynq``)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} not in {BACKENDS}")
    if backend == "sim":
        return run_sim(job)
    if backend == "ref":
        verifier, masker, kv = golden_verifier(), golden_masker(), golden_kvpage()
    else:
        verifier, masker, kv = pynq_cores()
    if job.get("gamma", 4) == 0 and not job.get("tree"):
        verifier = None
    return execute(job, verifier, pair, progress, masker if job.get("tree") else None, kv)
