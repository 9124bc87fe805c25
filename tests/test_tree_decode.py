"""Tree speculation through the whole loop (``specdec.decoding.loop.generate``) on config-built GPT-2 and OPT
pairs: draft tree -> treemask core -> target tree forward -> verifier tree walk -> cache commit.

Greedy tree decoding must be token-identical to target-only greedy decoding (Hugging Face ``generate``) on
the same prompts as the chain proofs (tests/test_runtime.py), for every builder, on the golden cores
(``ref``) and on the RTL of both cores in Verilator (``sim``). Each run also checks that it exercised
both accepted paths and rejections, and that the mask and tree-verify cycles were recorded.
"""
from __future__ import annotations

import numpy as np
import pytest

import model_pairs
from specdec.app import runner
from specdec.app.job import TreeSpec
from specdec.decoding import loop, trees
from specdec.decoding.base import GenConfig
from specdec.errors import CoreError, OptionError
from specdec.hw import cores
from specdec.sim import jobs as sim_jobs

from greedy_identity import N_LONG, N_NEW, Reference, assert_identical, greedy_job, sim_available

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]

#: Sequoia's acceptance vector for these tests (the calibrated one is tested on its own).
ACCEPTANCE = [0.5, 0.2, 0.1, 0.05]
N_TREE_QUICK = 4    # prompts per builder and family in the default suite (N_LONG under `long`)
KINDS = {"static": {}, "eagle": {}, "sequoia": {"acceptance": ACCEPTANCE}}


@pytest.fixture(scope="module")
def refs(gpt2_pair, opt_pair):
    return {"gpt2": Reference(gpt2_pair), "opt": Reference(opt_pair)}


def tree_job(dirs, prompts, kind: str, budget: int = 16, n_new: int = N_NEW, **extra) -> dict:
    return {**greedy_job(dirs, prompts, 4, n_new),
            "tree": {"kind": kind, "budget": budget, "depth": 6, "topk": 4, **KINDS[kind], **extra}}


def assert_tree_exercised(res: dict) -> None:
    """Accepted paths of several lengths (walks stopped at different depths, so rejections and accepts past
    the first level both happened), and the cores' cycles recorded for every round."""
    rounds = [r for g in res["generations"] for r in g["rounds"]]
    lengths = {r["n_accept"] for r in rounds}
    assert len(lengths) >= 2 and max(lengths) >= 2, f"accepted path lengths {sorted(lengths)}: a weak test"
    assert all(r["cycles"] > 0 and r["mask_cycles"] > 0 for r in rounds)
    assert all(model_pairs.is_varied(g["tokens"]) for g in res["generations"])


#: The (family, kind) pairs the default suite runs (the CLI tests run every kind on GPT-2); all under ``long``.
QUICK = {("gpt2", "eagle"), ("opt", "static")}


@pytest.mark.parametrize("family,kind", [(f, k) if (f, k) in QUICK else pytest.param(f, k, marks=pytest.mark.long)
                                         for f in ("gpt2", "opt") for k in sorted(KINDS)])
def test_tree_greedy_identity_ref_quick(family, kind, request, refs):
    """N_TREE_QUICK prompts x 64 tokens, trees of 16 nodes on the golden cores, equal HF greedy."""
    dirs, pair = request.getfixturevalue(f"{family}_dirs"), request.getfixturevalue(f"{family}_pair")
    res = runner.run(tree_job(dirs, model_pairs.prompts(N_TREE_QUICK), kind), "ref", pair)
    assert_identical(res, refs[family])
    assert_tree_exercised(res)


@pytest.mark.long
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_tree_greedy_identity_ref_50(family, kind, request, refs):
    """N_LONG prompts x 64 tokens, trees of 16 nodes (and 64 for EAGLE) on the golden cores, equal HF greedy."""
    dirs, pair = request.getfixturevalue(f"{family}_dirs"), request.getfixturevalue(f"{family}_pair")
    res = runner.run(tree_job(dirs, model_pairs.prompts(N_LONG), kind), "ref", pair)
    assert_identical(res, refs[family])
    assert_tree_exercised(res)


@pytest.mark.parametrize("family", ["gpt2", pytest.param("opt", marks=pytest.mark.long)])
def test_tree_greedy_identity_full_budget(family, request, refs):
    """Trees of the full 64 nodes (the xc7z020 limit), depth 8, equal HF greedy."""
    dirs, pair = request.getfixturevalue(f"{family}_dirs"), request.getfixturevalue(f"{family}_pair")
    job = tree_job(dirs, model_pairs.prompts(3), "eagle", budget=64, n_new=32, depth=8, topk=8)
    res = runner.run(job, "ref", pair)
    assert_identical(res, refs[family], 32)
    rounds = [r for g in res["generations"] for r in g["rounds"]]
    assert max(r["g"] for r in rounds) == 63


@pytest.mark.long
def test_tree_greedy_identity_sim(gpt2_dirs, refs):
    """Two prompts x 16 tokens through the RTL verifier and treemask core (one toplevel) equal HF greedy."""
    if not sim_available():
        pytest.skip("verilator not found")
    res = sim_jobs.run_sim(tree_job(gpt2_dirs, model_pairs.prompts(2), "eagle", n_new=16))
    assert res["backend"].startswith("sim:")
    assert_identical(res, refs["gpt2"], 16)
    rounds = [r for g in res["generations"] for r in g["rounds"]]
    assert all(r["cycles"] > 0 and r["mask_cycles"] > 0 for r in rounds)
    assert res["summary"]["accepted"] > 0


@pytest.mark.long
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_tree_greedy_identity_sim_long(kind, gpt2_dirs, refs):
    """5 prompts x 64 tokens through both RTL cores, each builder, equal HF greedy."""
    if not sim_available():
        pytest.skip("verilator not found")
    res = sim_jobs.run_sim(tree_job(gpt2_dirs, model_pairs.prompts(5), kind))
    assert_identical(res, refs["gpt2"])
    assert_tree_exercised(res)


def test_tree_sampling_runs_and_is_reproducible(gpt2_dirs, gpt2_pair):
    """Sampling with trees: the same seed gives the same tokens, another seed other tokens."""
    job = tree_job(gpt2_dirs, model_pairs.prompts(1), "eagle", n_new=16)
    job["sampling"] = {"temperature": 0.8, "top_k": 50, "top_p": 0.95}
    a = runner.run(job, "ref", gpt2_pair)
    b = runner.run(job, "ref", gpt2_pair)
    c = runner.run({**job, "seed": 7}, "ref", gpt2_pair)
    tok = [g["tokens"] for g in a["generations"]]
    assert tok == [g["tokens"] for g in b["generations"]]
    assert tok != [g["tokens"] for g in c["generations"]]
    assert all(len(t) == 16 for t in tok)


def test_sequoia_calibrates_when_no_vector_given(gpt2_dirs, gpt2_pair):
    job = tree_job(gpt2_dirs, model_pairs.prompts(1), "sequoia", n_new=8)
    del job["tree"]["acceptance"]
    res = runner.run(job, "ref", gpt2_pair)
    acc = res["tree"]["acceptance"]
    assert len(acc) == 4 and all(0 <= a <= 1 for a in acc)


def test_calibrated_eagle_measures_its_calibration(gpt2_dirs, gpt2_pair, refs):
    """A calibrated EAGLE tree without coefficients has them measured before the run, and stays identical."""
    job = tree_job(gpt2_dirs, model_pairs.prompts(2), "eagle", budget=8, depth=5, topk=3, expand=1,
                   scores="calibrated", calibration_passages=1)
    res = runner.run(job, "ref", gpt2_pair)
    assert_identical(res, refs["gpt2"])
    coef = np.asarray(res["tree"]["calibration"])
    assert coef.shape == (2, 3) and np.isfinite(coef).all() and not np.allclose(coef, [[0, 1, 0], [0, 1, 0]])
    again = runner.run({**job, "tree": res["tree"]}, "ref", gpt2_pair)        # given: not measured again
    assert again["tree"] == res["tree"]
    assert [g["tokens"] for g in again["generations"]] == [g["tokens"] for g in res["generations"]]


def test_calibration_contexts_are_generated_once_per_target(gpt2_pair, monkeypatch):
    """A Sequoia vector and an EAGLE calibration on one pair share the target's continuations."""
    from specdec.app import calibrate
    calls = []
    generate = calibrate._generate_contexts
    monkeypatch.setattr(calibrate, "_generate_contexts", lambda *a: calls.append(a[1:]) or generate(*a))
    first = calibrate.calibration_contexts(gpt2_pair, 1, 8, 4)
    first[0].append(-1)                                     # the caller's copy, not the cache
    again = calibrate.calibration_contexts(gpt2_pair, 1, 8, 4)
    assert calls == [(1, 8, 4)] and again[0] == first[0][:-1]
    calibrate.calibration_contexts(gpt2_pair, 1, 8, 5)
    assert calls == [(1, 8, 4), (1, 8, 5)]


def _alone(pair, prompt: list[int], new_tokens: int) -> list[int]:
    """A passage's greedy continuation generated on its own (one row, no padding)."""
    with torch.inference_mode():
        out = pair.target.model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                                         pad_token_id=pair.tokenizer.pad_token_id)
    return out[0].tolist()


@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_calibration_contexts_generated_together_equal_each_generated_alone(request, family, monkeypatch):
    """The passages go through the target as one left-padded batch (two batches here): each context is the
    passage's greedy continuation generated alone, ending where that generation ends (its first end-of-sequence
    token, made here a token the target does emit in the middle of a row)."""
    from specdec.models import corpus
    from specdec.app import calibrate, pairs
    pair = request.getfixturevalue(f"{family}_pair")
    monkeypatch.setattr(calibrate, "CALIBRATION_BATCH", 2)
    texts = corpus.sample_passages(3, held_out=False, seed=calibrate.CALIBRATION_SEED)
    prompts = [pairs.encode(pair.tokenizer, t)[:32] for t in texts]
    assert len({len(p) for p in prompts}) > 1                    # rows of different lengths: padding is exercised
    assert calibrate._generate_contexts(pair, 3, 32, 6) == [_alone(pair, p, 6) for p in prompts]
    new = _alone(pair, prompts[0], 6)[len(prompts[0]):]
    k = next(k for k in range(1, 6) if new[k] not in new[:k])  # a token the first row emits first after others
    monkeypatch.setattr(pair.target.model.generation_config, "eos_token_id", new[k])    # what generate stops at
    monkeypatch.setattr(pair.target, "eos_token_id", new[k])                          # what the loop stops at
    expected = [_alone(pair, p, 6) for p in prompts]
    assert len(expected[0]) == len(prompts[0]) + k + 1          # that row now ends there
    assert calibrate._generate_contexts(pair, 3, 32, 6) == expected


# ------------------------------------------------------------------------------------------------
# Bad input: clear errors
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,message", [
    ({"kind": "bushy"}, "tree kind must be one of static, eagle, sequoia, got 'bushy'"),
    ({"kind": "eagle", "budget": 65}, r"tree budget must be an integer in 2\.\.64"),
    ({"kind": "eagle", "budget": 1}, "tree budget"),
    ({"kind": "eagle", "depth": 0}, "tree depth"),
    ({"kind": "eagle", "topk": 64}, "tree topk"),
    ({"kind": "eagle", "expand": 0}, "tree expand must be an integer in 1..63, got 0"),
    ({"kind": "eagle", "scores": "oracle"}, "tree scores must be one of draft, calibrated, got 'oracle'"),
    ({"kind": "eagle", "calibration": [[0, 1, 0], [0, 1, 0]]}, "tree calibration"),
    ({"kind": "static", "scores": "calibrated", "calibration": [[0, 1, 0], [0, 1, 0]]}, "tree calibration"),
    ({"kind": "eagle", "scores": "calibrated", "calibration": [[0, 1], [0, 1]]}, "calibration coefficients"),
    ({"kind": "static", "acceptance": [0.5]},
     r"tree acceptance must be None for a static tree \(only sequoia trees read it\), got \(0\.5,\)"),
    ({"kind": "sequoia", "expand": 2}, r"tree expand must be None for a sequoia tree \(only eagle trees read it\)"),
    ({"kind": "sequoia", "scores": "calibrated"}, "tree scores must be 'draft' for a sequoia tree"),
    ({"kind": "eagle", "paths": [[0]]}, r"tree paths must be None for an eagle tree \(only static trees read it\)"),
    # every field another kind reads (topk and calibration_passages on a static tree were taken, shaping nothing)
    ({"kind": "static", "topk": 3}, r"tree topk must be 4 for a static tree \(only eagle and sequoia trees read it\)"),
    ({"kind": "static", "calibration_passages": 3}, "tree calibration_passages must be 8 for a static tree"),
    # a static tree's paths past its budget were cut, and no path built the default tree
    ({"kind": "static", "budget": 3, "paths": [[0], [1], [2], [3], [0, 0]]},
     r"tree paths must be paths of at most 3 nodes, the root included \(the budget; these make 6\)"),
    ({"kind": "static", "paths": []}, r"tree paths must be one path at least \(None: the default paths\)"),
])
def test_bad_tree_specs_raise(spec, message):
    with pytest.raises(OptionError, match=message):
        TreeSpec.from_dict(spec)


def test_tree_budget_over_core_limit_raises(gpt2_pair):
    """A budget the config accepts but a smaller core build does not: refused before any round."""
    v = cores.golden_verifier({"TREE_MAX": 8})
    m = cores.golden_masker()
    drafter = trees.EagleTree(gpt2_pair.draft.lm, 16, 4, 4)
    with pytest.raises(ValueError, match="tree budget 16 exceeds the cores' limits: verifier TREE_MAX 8"):
        loop.generate(gpt2_pair.target, drafter, v, [1, 2, 3], GenConfig(8, tree_budget=16), m)


def test_tree_without_masker_raises(gpt2_pair):
    drafter = trees.EagleTree(gpt2_pair.draft.lm, 8, 4, 4)
    with pytest.raises(ValueError, match="treemask driver"):
        loop.generate(gpt2_pair.target, drafter, cores.golden_verifier(), [1, 2, 3], GenConfig(8, tree_budget=8))


def test_malformed_tree_is_a_core_error():
    """A parent not below its child reaches the verifier only through the driver: BAD_TREE, then recovery."""
    v = cores.golden_verifier({"VOCAB_MAX": 64})
    v.seed([1, 2, 3, 4])
    p = np.zeros((3, 50), dtype=np.float32)
    with pytest.raises(CoreError, match="BAD_TREE"):
        v.verify_tree([-1, 0, 2], [0, 1, 2], p)
    v.soft_reset()
    assert v.verify_tree([-1, 0, 1], [0, 1, 2], p, greedy=True).next_token == 0
