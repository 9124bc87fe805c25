"""The int8 EAGLE head's measured figures (:mod:`specdec.models.int8eagle`): what ``specdec bench draft --draft
smollm2-eagle-head`` merges into its cycle figures (docs/draftengine.md, "The EAGLE head on the engine").

* ``int8_vs_float_agreement``: teacher-forced greedy agreement of the int8 head (its layers on the golden engine,
  its attention on the tree-attention unit's golden model) with the float head at every slot of held-out passages
  (goal 0.98);
* ``acceptance_int8`` / ``acceptance_float``: the loop's acceptance on held-out prompts, ``chain`` at one gamma and
  ``tree`` the 7-node calibrated EAGLE tree, the int8 head's jobs on the draft-engine driver over the golden
  register model (goal: int8 within 0.02 of float); ``same_tokens``: both heads' runs gave the same tokens (greedy
  decoding is lossless, so they must);
* ``tokens_per_call``: the int8 head's chain at gamma ``gamma`` (goal 2.8 at gamma 5);
* ``host_ops_per_step``: the host's arithmetic operations between the jobs of one drafted token (a chain step over
  a held-out context, then the hot head and its top token), on the KV260's engine build (K_MAX 512: every layer in
  K slices), measured from the step's trace (:func:`host_operations`): a job input holding a value that no earlier
  job produced and that is not one of the step's inputs (the token's embedding row, the feature, the cache's
  codes) is a host operation; ``host_ops`` lists them by job on that build and on the golden build;
* ``jobs_per_token``: the drafted token's jobs in order: the layers' engine jobs (name, M rows, K, N, activation
  planes), the attention jobs (one per KV head) and the vector unit's (``vecunit OP``, LEN); the engine jobs the
  drivers ran for it on each build, and the vector unit's jobs and cycles (its cycle model); the step's cache is in
  the kvpage core's pages (``kv_cache``).
"""
from __future__ import annotations

import time

import numpy as np

from hwcontract import board

from ..app import pairs, runner
from ..app.job import TreeSpec
from ..decoding.eagle import EagleDraft, load_head
from ..hw.cores import golden_draftengine, golden_kvpage
from ..models import corpus, int8eagle, loading
from ..models.lm import CausalLM
from ..paths import model_dir

#: The 7-node calibrated EAGLE tree (``--tree eagle --tree-budget 7 --tree-depth 5 --tree-topk 3 --tree-expand 1
#: --tree-scores calibrated``).
TREE7 = TreeSpec("eagle", budget=7, depth=5, topk=3, expand=1, scores="calibrated")
GOALS = {"int8_vs_float_agreement": 0.98, "acceptance_gap": 0.02, "tokens_per_call": 2.8, "host_ops_per_step": 0}
#: The engine builds the host operations are counted on: the KV260's overlay and the golden backend's.
#: Slots a page of the head's KV cache in the one-token trace: the KV260's pair page size (``specdec.kv.layout``).
KV_BLOCK = 32
BUILDS = {"kv260": {k: v for k, v in board.KV260_DRAFTENGINE.items() if k != "URAM"}, "golden": {}}


def _tree_dict(spec: TreeSpec, passages: int) -> dict:
    return {"kind": spec.kind, "budget": spec.budget, "depth": spec.depth, "topk": spec.topk, "expand": spec.expand,
            "scores": spec.scores, "calibration_passages": passages}


def acceptance(float_pair: pairs.Pair, int8_pair: pairs.Pair, prompts: list[str], max_new_tokens: int,
               gamma: int, tree: TreeSpec, calibration_passages: int) -> dict:
    """Both heads through the loop on the golden cores, greedy: the chain at ``gamma`` and ``tree``."""
    out: dict = {"acceptance_float": {}, "acceptance_int8": {}, "same_tokens": {}, "seconds": {}}
    shapes = {"chain": {"gamma": gamma}, "tree": {"tree": _tree_dict(tree, calibration_passages)}}
    for shape, more in shapes.items():
        tokens = {}
        for which, pair, engine in (("float", float_pair, "host"), ("int8", int8_pair, "fabric")):
            job = {"prompts": prompts, "max_new_tokens": max_new_tokens, "seed": 0, "draft": loading.DEMO_EAGLE,
                   "draft_engine": engine, **more}
            t0 = time.perf_counter()
            res = runner.run(job, "ref", pair)
            out["seconds"][f"{shape}_{which}"] = time.perf_counter() - t0
            s = res["summary"]
            out[f"acceptance_{which}"][shape] = s["acceptance"]
            out.setdefault(f"tokens_per_call_{which}", {})[shape] = s["tokens_per_call"]
            tokens[which] = [g["tokens"] for g in res["generations"]]
        out["same_tokens"][shape] = tokens["float"] == tokens["int8"]
    return out


def host_operations(trace: list, sources: list) -> list[dict]:
    """The job inputs of a step's ``trace`` (:attr:`specdec.models.int8eagle.Int8Head.trace`: ``(kind, inputs,
    outputs)`` in order) that hold a value neither an earlier job's output nor one of ``sources`` (the step's own
    inputs) holds: each such input is a value the host computed between jobs. ``[{"job", "input", "values"}]``
    (the job's index and kind, the input's index, how many of its values are new)."""
    known = np.unique(np.concatenate([np.asarray(a, dtype=np.int64).ravel() for a in sources] + [np.zeros(1, int)]))
    out = []
    for i, (kind, inputs, outputs) in enumerate(trace):
        for j, a in enumerate(inputs):
            new = ~np.isin(np.asarray(a, dtype=np.int64).ravel(), known)
            if new.any():
                out.append({"job": f"{i} {kind}", "input": j, "values": int(new.sum())})
        known = np.union1d(known, np.concatenate([np.asarray(o, dtype=np.int64).ravel() for o in outputs]))
    return out


def one_token(head: int8eagle.Int8Head, target_model, tokenizer, text: str, params: dict) -> dict:
    """The host operations and jobs of one drafted token: ``head`` (a fresh copy) bound to a golden engine of
    ``params``, its cache filled from the target's features of ``text``, then one chain step, its hot head and the
    unit's top token, traced (:func:`host_operations`)."""
    import torch
    fresh = int8eagle.Int8Head(head.float_head, head.fl, head.q)
    engine = golden_draftengine(params)
    report = int8eagle.bind(fresh, engine, kv=golden_kvpage(), block=KV_BLOCK)
    (feats, tokens), = int8eagle.target_samples(target_model, tokenizer, [text])
    cache = fresh.new_cache()
    h = fresh(torch.from_numpy(feats[:-1].astype("float32"))[None], torch.from_numpy(tokens[:-1])[None], 0, cache)
    fresh.jobs.clear()
    jobs0, cycles0, vjobs0, vcycles0 = engine.jobs, fresh.attention_cycles, fresh.vector_jobs, fresh.vector_cycles
    n = len(tokens) - 1
    visible = torch.ones((1, n + 1), dtype=torch.bool)
    token = int(tokens[-1])
    sources = [fresh.embed([token]), int8eagle.vq(h[0, -1:].numpy()), *cache.codes()]
    fresh.trace = []
    h = fresh.nodes(h[:, -1:], torch.tensor([[token]]), [n], visible, cache)
    fresh.top(h[0], 1)
    ops = host_operations(fresh.trace, sources)
    return {"host_ops_per_step": len(ops), "host_ops": ops,
            "jobs": [dict(zip(("name", "m", "k", "n", "planes"), j)) if j[0] not in ("attention",) and
                     not j[0].startswith("vecunit") else
                     dict(zip(("name", "nodes", "ctx", "group", "head_dim"), j)) if j[0] == "attention" else
                     dict(zip(("name", "len"), j)) for j in fresh.jobs],
            "engine_jobs": engine.jobs - jobs0, "attention_cycles": fresh.attention_cycles - cycles0,
            "vector_jobs": fresh.vector_jobs - vjobs0, "vector_cycles": fresh.vector_cycles - vcycles0,
            "context": n, "split_k": report["split_k"], "streamed": report["streamed"]}


def int8_figures(n_prompts: int = 8, gamma: int = 5, max_new_tokens: int = 48, n_agreement: int = 60,
                 tree: TreeSpec = TREE7, calibration_passages: int = 2, n_calibration: int = 100,
                 draft: str = loading.DEMO_EAGLE, hot_vocab: int | None = None) -> dict:
    """The int8 head's figures (module docstring) on ``n_prompts`` held-out prompts of ``max_new_tokens`` tokens
    and ``n_agreement`` held-out passages; the head calibrated on ``n_calibration`` training passages, with the
    first ``hot_vocab`` of its hot tokens when given (``eagle.load_head``)."""
    for name, v in (("n_prompts", n_prompts), ("gamma", gamma), ("max_new_tokens", max_new_tokens),
                    ("n_agreement", n_agreement), ("n_calibration", n_calibration)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}: a positive integer")
    t0 = time.perf_counter()
    model, tok = loading.load(loading.DEMO_TARGET, "target")
    float_head = load_head(model_dir(draft), model, hot_vocab)
    head = int8eagle.quantize_head(float_head, model, tok, n_calibration=n_calibration,    # the head the loop runs
                                   stats=model_dir(draft) / int8eagle.STATS_FILE)
    calib_s = time.perf_counter() - t0
    samples = int8eagle.target_samples(model, tok, corpus.sample_passages(n_agreement, held_out=True, seed=2))
    judge = int8eagle.Int8Head(float_head, head.fl, head.q)
    agree = int8eagle.agreement(judge, float_head, samples)
    target = CausalLM(model, "target")
    float_pair = pairs.Pair(target, EagleDraft(float_head, target), tok, loading.DEMO_TARGET, draft)
    int8_pair = pairs.Pair(target, EagleDraft(head, target), tok, loading.DEMO_TARGET,
                           pairs.draft_name(draft, hot_vocab, "fabric"))
    prompts = corpus.sample_passages(n_prompts, held_out=True, seed=7)
    acc = acceptance(float_pair, int8_pair, prompts, max_new_tokens, gamma, tree, calibration_passages)
    text = corpus.sample_passages(1, held_out=True, seed=5)[0]
    steps = {b: one_token(head, model, tok, text, params) for b, params in BUILDS.items()}
    kv = steps["kv260"]
    res = {
        "draft": draft, "n_prompts": n_prompts, "gamma": gamma, "max_new_tokens": max_new_tokens,
        "tree": _tree_dict(tree, calibration_passages), "n_calibration": n_calibration,
        "weight_plane2": list(int8eagle.WEIGHT_PLANE2), "act_planes": head.q.linears["fc"].act_planes,
        "int8_vs_float_agreement": agree["rate"], "agreement_positions": agree["positions"],
        "saturated": judge.saturated,
        **{k: acc[k] for k in ("acceptance_float", "acceptance_int8", "same_tokens")},
        "acceptance_gap": {s: acc["acceptance_float"][s] - acc["acceptance_int8"][s] for s in acc["acceptance_int8"]},
        "tokens_per_call": acc["tokens_per_call_int8"]["chain"],
        "tokens_per_call_int8": acc["tokens_per_call_int8"], "tokens_per_call_float": acc["tokens_per_call_float"],
        "host_ops_per_step": kv["host_ops_per_step"], "host_ops": {b: s["host_ops"] for b, s in steps.items()},
        "host_ops_note": ("job inputs of one drafted token holding a value no earlier job produced and not among "
                          "the step's inputs (host_operations); the vector unit takes RMSNorm, RoPE, SiLU * up, "
                          "the residual adds, every quantization and requantization"),
        "vector_jobs_per_token": {b: s["vector_jobs"] for b, s in steps.items()},
        "vector_cycles_per_token": {b: s["vector_cycles"] for b, s in steps.items()},
        "jobs_per_token": kv["jobs"], "engine_jobs_per_token": {b: s["engine_jobs"] for b, s in steps.items()},
        "attention_cycles_measured": kv["attention_cycles"], "one_token_context": kv["context"],
        "kv_cache": (f"the head's int8 KV cache in the kvpage core's pages ({KV_BLOCK} slots a page, a sequence "
                     "beside the target's); each KV head's attention job reads its context page by page"),
        "greedy_readback": "a drafted token's id (the vector unit's TOPK, k = 1), no row",
        "seconds": {"calibration": calib_s, **acc["seconds"]},
    }
    res["goals_met"] = {
        "int8_vs_float_agreement": res["int8_vs_float_agreement"] >= GOALS["int8_vs_float_agreement"],
        "acceptance_gap": all(abs(g) <= GOALS["acceptance_gap"] for g in res["acceptance_gap"].values()),
        "tokens_per_call": res["tokens_per_call"] >= GOALS["tokens_per_call"],
        "host_ops_per_step": res["host_ops_per_step"] <= GOALS["host_ops_per_step"]}
    return res
