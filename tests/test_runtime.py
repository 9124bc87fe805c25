"""The runtime (``specdec.app.runner``, ``specdec.app.job``, ``specdec.decoding.metrics``) on config-built GPT-2
(V=50257) and OPT (V=50272) pairs.

Greedy speculative decoding must be token-identical to Hugging Face greedy ``generate`` of the target
alone, on the golden model (``ref``) and on the RTL verifier in Verilator (``sim``). Each identity run
also checks that it exercised both accepts and rejects (acceptance strictly inside (0.05, 0.95)) and that
its outputs are not one repeated token, so KV-cache rollback is on the tested path.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import model_pairs
from greedy_identity import (N_LONG, N_NEW, Reference, assert_exercised, assert_identical, greedy_job,
                             sim_available)
from specdec.app import checks, pairs, runner
from specdec.app.job import PROMPT_LOOKUP, Job, TreeSpec, as_job
from specdec.decoding import drafters, loop, metrics
from specdec.decoding.base import GenConfig, Generation, Round, Sampling
from specdec.errors import HardwareMismatch, OptionError, SpecdecError
from specdec.hw import cores
from specdec.models import int8draft, lm, loading
from specdec.sim import jobs as sim_jobs

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]

N_QUICK = 3         # prompts in the default suite (50 under ``long``)


@pytest.fixture(scope="module")
def refs(gpt2_pair, opt_pair):
    return {"gpt2": Reference(gpt2_pair), "opt": Reference(opt_pair)}


def with_prompt_lookup(pair):
    return dataclasses.replace(pair, draft=drafters.PromptLookup(pair.vocab), draft_name=PROMPT_LOOKUP)


def assert_rounds_timed(result: dict) -> None:
    """Every round's ``total_s`` is a duration inside its generation, and its parts fit in it."""
    for g in result["generations"]:
        assert sum(r["total_s"] for r in g["rounds"]) <= g["wall_s"]
        for r in g["rounds"]:
            parts = (r["draft_s"] + r["mask_s"] + r["target_s"] + r["quantize_transfer_s"] + r["verify_s"]
                     + r["host_s"])
            assert 0 < r["total_s"] == pytest.approx(parts, abs=1e-6)


def assert_paged(res: dict, kv) -> None:
    """Both caches were paged through the kvpage core: the chains written in place (a WRITE a new row), a FORK
    and a COMMIT where a rollback drops rows, and every page back in the pool at the end."""
    ops = res["kv"]["ops"]
    assert ops["WRITE"] > 0 and ops.get("FORK", 0) == ops.get("COMMIT", 0) and ops["FREE"] > 0
    assert res["kv"]["free_pages_after"] == kv.pages, "pages leaked"
    rounds = [r for g in res["generations"] for r in g["rounds"]]
    assert all(r["kv_pages"] > 0 for r in rounds) and sum(r["kv_ops"] for r in rounds) > 0


def run_identity(family: str, dirs, pair, ref, n_prompts: int) -> None:
    """gamma 4 on n_prompts, then gamma auto and prompt-lookup on the first 10: all equal HF greedy. Both
    KV caches are paged (the kvpage golden model assigns the pages)."""
    prompts = model_pairs.prompts(n_prompts)
    kv = cores.golden_kvpage()
    res = runner.execute(greedy_job(dirs, prompts, 4), cores.golden_verifier(), pair, kv=kv)
    assert len(res["generations"]) == n_prompts
    assert_identical(res, ref)
    assert_exercised(res)
    assert_paged(res, kv)
    assert_rounds_timed(res)
    kv = cores.golden_kvpage()
    auto = runner.execute(greedy_job(dirs, prompts[:10], "auto"), cores.golden_verifier(), pair, kv=kv)
    assert_identical(auto, ref)
    assert_exercised(auto)
    assert_paged(auto, kv)
    assert len({r["g"] for g in auto["generations"] for r in g["rounds"]}) > 2     # the schedule moved
    pl = runner.execute(greedy_job(dirs, prompts[:10], 4), cores.golden_verifier(), with_prompt_lookup(pair),
                         kv=cores.golden_kvpage())
    assert_identical(pl, ref)
    assert pl["summary"]["drafted"] > 0, f"{family}: prompt lookup never proposed anything"


@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_greedy_identity_ref_quick(family, request, refs):
    """N_QUICK prompts x 64 tokens on the golden verifier equal HF greedy (gamma 4, auto, prompt-lookup)."""
    run_identity(family, request.getfixturevalue(f"{family}_dirs"), request.getfixturevalue(f"{family}_pair"),
                 refs[family], N_QUICK)


@pytest.mark.long     # the default suite runs the fabric draft on the emulated KV260 (tests/test_emuboard.py)
def test_greedy_identity_fabric_draft(opt_dirs, opt_pair, refs):
    """The OPT pair's draft on the int8 draft engine's golden model (every nn.Linear an engine job): the loop
    still equals HF greedy of the target alone, and the engine ran every layer of the draft."""
    from specdec.models import int8draft
    d = opt_pair.draft.lm.model
    q = int8draft.demo_draft(d.float(), opt_pair.tokenizer, n_calibration=16)
    engines = [m for m in q.modules() if hasattr(m, "saturated")]
    assert len(engines) == len(list(int8draft.linear_layers(d))) > 0
    pair = dataclasses.replace(opt_pair, draft=drafters.ModelDraft(lm.CausalLM(q, "draft")), draft_name="int8")
    res = runner.execute({**greedy_job(opt_dirs, model_pairs.prompts(5), 4), "draft_engine": "fabric"},
                          cores.golden_verifier(), pair)
    assert_identical(res, refs["opt"])
    assert_exercised(res)
    # every layer placed once on the draft engine (the golden register model, through its driver), and run
    eng = res["draft_engine"]
    assert eng["layers"] == len(engines) and eng["jobs"] >= len(engines) and eng["busy_cycles"] > 0


@pytest.mark.long
@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_greedy_identity_ref_50(family, request, refs):
    """N_LONG prompts x 64 tokens on the golden verifier equal HF greedy (gamma 4, auto, prompt-lookup)."""
    run_identity(family, request.getfixturevalue(f"{family}_dirs"), request.getfixturevalue(f"{family}_pair"),
                 refs[family], N_LONG)


def test_greedy_gamma0_baseline_equals_hf(gpt2_dirs, gpt2_pair, refs):
    res = runner.run(greedy_job(gpt2_dirs, model_pairs.prompts(2), 0, 16), "ref", gpt2_pair)
    assert_identical(res, refs["gpt2"], 16)
    assert res["summary"]["acceptance"] is None and res["summary"]["tokens_per_call"] == 1.0


# ------------------------------------------------------------------------------------------------
# RTL verifier in Verilator
# ------------------------------------------------------------------------------------------------
def run_sim_checked(dirs, ref, n_prompts: int, n_new: int) -> dict:
    if not sim_available():
        pytest.skip("verilator not found")
    res = sim_jobs.run_sim(greedy_job(dirs, model_pairs.prompts(n_prompts), 4, n_new))
    assert res["backend"] == "sim:verilator" or res["backend"].startswith("sim:")
    assert len(res["generations"]) == n_prompts
    assert_identical(res, ref, n_new)
    assert res["summary"]["verifier_cycles"] > 0
    return res


@pytest.mark.long     # the default suite decodes on the RTL in tests/test_simulator.py (the demo's path)
def test_greedy_identity_sim_gpt2(gpt2_dirs, refs):
    """One prompt x 16 tokens through the RTL verifier (VOCAB_MAX 50272) equals HF greedy."""
    res = run_sim_checked(gpt2_dirs, refs["gpt2"], 1, 16)
    assert res["summary"]["drafted"] > res["summary"]["accepted"] > 0


@pytest.mark.long
@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_greedy_identity_sim_long(family, request, refs):
    """5 prompts x 64 tokens through the RTL verifier equal HF greedy."""
    res = run_sim_checked(request.getfixturevalue(f"{family}_dirs"), refs[family], 5, N_NEW)
    assert_exercised(res)


# ------------------------------------------------------------------------------------------------
# Bad input: clear errors, never a hang
# ------------------------------------------------------------------------------------------------
def test_nan_target_logits_raise(gpt2_pair):
    def poison(module, args, output):
        output.logits[..., 7] = float("nan")
        return output

    handle = gpt2_pair.target.model.register_forward_hook(poison)
    try:
        with pytest.raises(SpecdecError, match="non-finite") as exc:
            loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(), [464, 3290],
                            GenConfig(8, 4))
    finally:
        handle.remove()
    assert "target" in str(exc.value) and "token 7" in str(exc.value)


def test_nan_draft_logits_raise(gpt2_pair):
    def poison(module, args, output):
        output.logits[..., 3] = float("nan")
        return output

    handle = gpt2_pair.draft.lm.model.register_forward_hook(poison)
    try:
        with pytest.raises(SpecdecError, match="draft.*non-finite"):
            loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(), [464, 3290],
                            GenConfig(8, 4))
    finally:
        handle.remove()


def test_empty_prompt_raises(gpt2_pair):
    with pytest.raises(ValueError, match="empty"):
        pairs.encode(gpt2_pair.tokenizer, "")
    with pytest.raises(ValueError, match="empty"):
        loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(), [], GenConfig(8, 4))


def test_prompt_ids_outside_vocab_raise(gpt2_pair):
    with pytest.raises(ValueError, match="50257"):
        loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(), [1, 50257], GenConfig(8, 4))


@pytest.mark.parametrize("n", [0, -1, 2.5])
def test_bad_max_new_tokens_raise(n):
    with pytest.raises(ValueError, match=f"max_new_tokens.*{n}"):
        GenConfig(max_new_tokens=n)


@pytest.mark.parametrize("gamma", [-1, "x", 1.5])
def test_bad_gamma_raise(gamma):
    with pytest.raises(ValueError, match="gamma"):
        GenConfig(gamma=gamma)


def test_gamma_over_gamma_max_raises(gpt2_pair):
    with pytest.raises(ValueError, match="17.*GAMMA_MAX 16"):
        loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(), [464, 3290],
                        GenConfig(8, 17))


def test_speculative_without_verifier_raises(gpt2_pair):
    with pytest.raises(ValueError, match="needs a draft source and a verifier"):
        loop.generate(gpt2_pair.target, gpt2_pair.draft, None, [464], GenConfig(8, 2))


def test_unknown_backend_raises():
    with pytest.raises(ValueError, match="'fpga'"):
        runner.run({"prompts": ["x"]}, "fpga")


def test_golden_cores_take_their_build_parameters_by_the_contracts_names():
    """Each golden core builds at the parameters asked for, and an unknown name (a lower-case one, a typo) is a
    KeyError listing the valid ones: it had been ignored, so {"lanes": 8} built LANES 4 and {"SLOTS": 16} a
    kvpage of 64 slots."""
    assert cores.golden_verifier({"LANES": 8, "VOCAB_MAX": 64}).lanes == 8
    assert cores.golden_kvpage({"PAGES": 16, "MAX_BLOCKS": 8, "SLOTS": 16}).slots == 16
    assert cores.golden_masker({"NODES_MAX": 8}).nodes_max == 8
    for make, core, bad in ((cores.golden_verifier, "verifier", {"lanes": 8}),
                            (cores.golden_kvpage, "kvpage", {"SLOT": 16}),
                            (cores.golden_masker, "treemask", {"NODES": 8}),
                            (cores.golden_draftengine, "draftengine", {"ROW": 8})):
        with pytest.raises(KeyError, match=f"core '{core}' has no parameter '{next(iter(bad))}'; valid parameters"):
            make(bad)
    with pytest.raises(ValueError, match=r"LANES=3 of core 'verifier' not in \{1, 2, 4, 8\}"):
        cores.golden_verifier({"LANES": 3})


def test_golden_device_with_other_hash_is_refused():
    from specdec.hw.golden import GoldenDevice
    from specdec.hw.drivers.verifier import Verifier
    from specdec.hw.drivers.base import description
    dev = GoldenDevice({0: "verifier"}, {0: {"lanes": 4, "vocab_max": 64, "gamma_max": 16}})
    model = dev.models[0]
    id_offset = model.cmap.reg("ID").offset
    honest = model.read
    model.read = lambda off: honest(off) ^ 0x1 if off == id_offset else honest(off)
    with pytest.raises(HardwareMismatch, match=f"{model.cmap.map_hash() ^ 1:#010x}"):
        Verifier(description("verifier", dev), dev.stream(0))
    model.read = honest
    assert Verifier(description("verifier", dev), dev.stream(0)).gamma_max == 16   # the honest one binds


# ------------------------------------------------------------------------------------------------
# The typed job: every field checked, JSON round trip
# ------------------------------------------------------------------------------------------------
def test_job_json_round_trip():
    job = Job(("a", "b"), target="t", draft="d", max_new_tokens=8, gamma="auto", seed=3,
              sampling=Sampling(0.8, 20, 0.9), tree=TreeSpec("sequoia", 12, acceptance=(0.5, 0.25)),
              kv_block=None)
    again = Job.from_json(job.to_json())
    assert again == job
    chain = Job(("a",), gamma=8, draft_confidence=0.4)
    assert Job.from_json(chain.to_json()) == chain
    assert again.config(2) == GenConfig(8, "auto", Sampling(0.8, 20, 0.9), 5, tree_budget=12, tree_depth=6)
    assert as_job({"prompts": ["x"]}) == Job(("x",))          # every other field at its default
    assert as_job({"prompts": ["x"], "kv": False}).kv_block is None


@pytest.mark.parametrize("fields,option,value", [
    ({"seed": -1}, "seed", -1),
    ({"max_new_tokens": 0}, "max_new_tokens", 0),
    ({"max_new_tokens": 2.5}, "max_new_tokens", 2.5),
    ({"seed": -1}, "seed", -1),
    ({"seed": True}, "seed", True),            # a bool is no seed (it was taken as 1)
    ({"gamma": 17}, "gamma", 17),
    ({"gamma": "x"}, "gamma", "x"),
    ({"prompts": [""]}, "prompt", ""),
    ({"prompts": []}, "prompts", []),
    ({"sampling": {"temperature": -1}}, "temperature", -1),
    ({"sampling": {"temperature": 1e-4}}, "temperature", 1e-4),
    ({"sampling": {"top_k": -2}}, "top_k", -2),
    ({"sampling": {"top_p": 0}}, "top_p", 0),
    ({"sampling": {"top_q": 1}}, "sampling field", "top_q"),
    ({"kv": {"block": 0}}, "kv_block", 0),
    ({"kv": {"pages": 4}}, "kv field", "pages"),
    ({"tree": {"kind": "bushy"}}, "tree kind", "bushy"),
    ({"tree": {"kind": "eagle", "budget": 65}}, "tree budget", 65),
    ({"tree": {"kind": "eagle", "depth": 0}}, "tree depth", 0),
    ({"tree": {"kind": "sequoia", "acceptance": [0.5, 1.5]}}, "tree acceptance", [0.5, 1.5]),
    ({"tree": {"kind": "static", "paths": [[0], [1, 0]]}}, "tree paths", [[0], [1, 0]]),
    ({"tree": {"kind": "eagle"}, "draft": PROMPT_LOOKUP}, "draft", PROMPT_LOOKUP),
    ({"max_new_token": 8}, "job field", "max_new_token"),
    ({"draft_confidence": 1.5}, "draft_confidence", 1.5),
    ({"draft_confidence": 0}, "draft_confidence", 0),
    ({"draft_confidence": "high"}, "draft_confidence", "high"),
    ({"draft_confidence": 0.4, "draft": PROMPT_LOOKUP}, "draft_confidence", 0.4),
    ({"draft_confidence": 0.4, "tree": {"kind": "eagle"}}, "draft_confidence", 0.4),
])
def test_job_field_errors_name_option_and_value(fields, option, value):
    with pytest.raises(OptionError) as exc:
        as_job({"prompts": ["x"], **fields})
    assert (exc.value.option, exc.value.value) == (option, value)
    assert str(exc.value).startswith(f"{option} must be ") and str(exc.value).endswith(f"got {value!r}")


def test_job_is_validated_again_when_replaced():
    job = Job(("x",))
    with pytest.raises(OptionError, match="gamma"):
        dataclasses.replace(job, gamma=-1)


# ------------------------------------------------------------------------------------------------
# summarize / stats_line on handcrafted rounds
# ------------------------------------------------------------------------------------------------
def handmade() -> list[Generation]:
    r1 = Round(g=4, n_accept=4, emitted=5, depth=4, draft_s=0.1, target_s=0.2, quantize_transfer_s=0.05,
               verify_s=0.05, total_s=0.5, cycles=100)
    r2 = Round(g=2, n_accept=0, emitted=1, depth=2, draft_s=0.05, target_s=0.1, quantize_transfer_s=0.02,
               verify_s=0.03, total_s=0.3, cycles=40)
    r3 = Round(g=2, n_accept=1, emitted=2, depth=2, draft_s=0.05, target_s=0.1, quantize_transfer_s=0.02,
               verify_s=0.03, total_s=0.2, cycles=60)
    return [Generation([1, 2, 3, 4, 5], [r1], prefill_s=0.1, wall_s=1.0, stopped_at_eos=False),
            Generation([6, 7, 8], [r2, r3], prefill_s=0.3, wall_s=1.0, stopped_at_eos=True)]


def test_round_takes_named_fields_only():
    with pytest.raises(TypeError):
        Round(2, 1, 2, 2, 0.1)      # the positional form is refused


def test_summarize_fields():
    s = metrics.summarize(handmade())
    assert (s["prompts"], s["new_tokens"], s["target_calls"], s["drafted"], s["accepted"]) == (2, 8, 3, 8, 5)
    assert s["wall_s"] == pytest.approx(2.0) and s["tokens_per_s"] == pytest.approx(4.0)
    assert s["acceptance"] == pytest.approx(5 / 8)
    assert s["tokens_per_call"] == pytest.approx(8 / 3)
    assert s["per_position_acceptance"] == pytest.approx([2 / 3, 1 / 2, 1.0, 1.0])
    b = s["breakdown"]
    assert b["draft_s"] == pytest.approx(0.2 / 3) and b["target_s"] == pytest.approx(0.4 / 3)
    assert b["quantize_transfer_s"] == pytest.approx(0.03) and b["verify_s"] == pytest.approx(0.11 / 3)
    assert b["host_s"] == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    assert b["prefill_s"] == pytest.approx(0.2)
    assert sum(b["fractions"].values()) == pytest.approx(1.0)
    assert s["host_fraction"] == pytest.approx(0.2 / 1.0)
    assert s["verifier_cycles"] == 200


def test_summarize_baseline_and_empty():
    one = Round(g=0, n_accept=0, emitted=1, depth=0, target_s=0.1, total_s=0.1)
    base = metrics.summarize([Generation([1, 2], [one, one], 0.0, 0.5, False)])
    assert base["acceptance"] is None and base["per_position_acceptance"] == []
    assert base["tokens_per_call"] == 1.0
    empty = metrics.summarize([])
    assert empty["tokens_per_s"] == 0.0 and empty["target_calls"] == 0


def test_stats_line_fields():
    line = metrics.stats_line(metrics.summarize(handmade()))
    for part in ("4.0 tok/s", "acceptance 0.62", "2.67 tokens/target call", "per position [0.67 0.50 1.00 1.00]"):
        assert part in line
    one = Round(g=0, n_accept=0, emitted=1, depth=0, target_s=0.1, total_s=0.1)
    base = metrics.stats_line(metrics.summarize([Generation([1, 2], [one, one], 0.0, 0.5, False)]))
    assert base == "4.0 tok/s | nothing drafted: target only | 1.00 tokens/target call", base   # not "acceptance -"


def test_seed_words_distinct_and_nonzero():
    words = {runner.seed_words(s, i) for s in range(3) for i in range(50)}
    assert len(words) == 150
    assert all(len(w) == 4 and all(0 < x < 1 << 32 for x in w) for w in words)


def test_the_prompt_and_the_budget_must_fit_the_targets_context(gpt2_dirs, gpt2_pair, monkeypatch):
    """GPT-2's learned positions end at n_positions (512 here): a prompt and budget past them failed with an
    IndexError deep in torch. Up to the context's last position a chain runs, and a tree whose rounds score its
    depth (6) past the last token; one token more is an OptionError naming the prompt or --max-new-tokens
    (a budget no prompt fits: before anything loads)."""
    def text(n: int) -> str:
        s = "the" + " the" * (n - 1)
        assert len(gpt2_pair.tokenizer(s)["input_ids"]) == n
        return s

    job = {**greedy_job(gpt2_dirs, [text(491)], 4, 21)}
    out = runner.run(job, "ref", gpt2_pair)["generations"][0]["tokens"]
    assert 1 <= len(out) <= 21
    tree = {**job, "max_new_tokens": 15, "tree": {"kind": "static", "budget": 16, "depth": 6}}
    assert len(runner.run(tree, "ref", gpt2_pair)["generations"][0]["tokens"]) <= 15
    for bad, match in (({**job, "max_new_tokens": 22}, "max_new_tokens must be at most 21 after this 491-token "
                                                       "prompt (the target's context holds 512 positions)"),
                       ({**tree, "max_new_tokens": 16}, "max_new_tokens must be at most 15 after this 491-token "
                                                        "prompt (the target's context holds 512 positions, and a tree "
                                                        "round may score 6 past the last token)"),
                       ({**job, "prompts": [text(512)], "max_new_tokens": 1}, r"prompt must be at most 511 tokens")):
        with pytest.raises(OptionError, match=re.escape(match) if "(" in match else match):
            runner.run(bad, "ref", gpt2_pair)
    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("a model loaded"))
    with pytest.raises(OptionError, match=r"max_new_tokens must be at most 511 after a prompt of one token at least "
                                          r"\(the target's context holds 512"):
        runner.run({**job, "max_new_tokens": 512}, "ref")


def test_a_pair_given_must_serve_the_draft_the_job_asks_for(gpt2_dirs, gpt2_pair):
    """A loaded pair given with a job that asks for prompt lookup or a hot vocabulary the pair's draft is not:
    refused; the run had used the pair's draft and reported it as the job's (acceptance 0.467 for a 100-token hot
    vocabulary that gives 0.0 loaded by the job)."""
    job = greedy_job(gpt2_dirs, ["ROMEO:"], 4, 4)
    engine = cores.golden_draftengine()
    at = engine.place(np.ones((8, 64), np.int8), np.zeros(8, np.int64), np.ones(8, np.int64), np.zeros(8, np.int64))
    # a fabric job with a float draft had run the draft on the host and reported an engine of 0 layers, after
    # resetting the engine's memory (a placement made before was lost)
    for bad, match in (({**job, "draft": PROMPT_LOOKUP}, "the job asks for draft 'prompt-lookup'"),
                       ({**job, "draft_vocab": 100}, "a hot vocabulary of 100, the pair given drafts with"),
                       ({**job, "draft_engine": "fabric"}, "draft engine .*which has no int8 engine layers")):
        with pytest.raises(ValueError, match=match):
            runner.execute(bad, cores.golden_verifier(), gpt2_pair, fabric=cores.Fabric(engine))
    with pytest.raises(ValueError, match="no int8 engine layers to bind"):
        int8draft.bind(gpt2_pair.draft.lm.model, engine)
    assert engine.matmul(np.ones((1, 64), np.int64), at, 32)[0].tolist() == [[64] * 8]    # still placed
    assert runner.execute({**job, "draft": PROMPT_LOOKUP}, cores.golden_verifier(),
                           with_prompt_lookup(gpt2_pair))["generations"][0]["tokens"]


def test_token_ids_that_are_not_integers_are_refused(gpt2_pair):
    """Text, floats (15496.7 ran as token 15496), bools and nested lists as the prompt of ``loop.generate``,
    as tree tokens or as static-tree paths: a ValueError naming them, before anything runs."""
    from specdec.decoding.tree import Tree
    cfg = GenConfig(4, 2)
    for prompt, match in (("Hello world", "got text 'Hello world': encode it first"),
                          ([15496.7, 995.2], "the prompt's token ids must be integers"),
                          ([True, False], "got bools"), ([[1, 2]], "must be integers"), (None, "must be integers")):
        with pytest.raises(ValueError, match=match):
            loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(), prompt, cfg)
    with pytest.raises(ValueError, match=r"tree tokens must be integers, got \(1, 2.7\)"):
        Tree((-1, 0), (1, 2.7))
    with pytest.raises(OptionError, match="a path's ranks must be integers"):
        TreeSpec("static", paths=[[0.7], [1.9]])
    assert len(loop.generate(gpt2_pair.target, gpt2_pair.draft, cores.golden_verifier(),
                               np.array([15496, 995]), cfg).tokens) >= 1        # numpy ids are ids


def test_a_prompt_utf8_cannot_encode_is_refused_when_the_job_is_built():
    """A lone surrogate passed the job's checks, then failed inside the tokenizer naming no prompt."""
    with pytest.raises(OptionError, match=r"prompt must be text that UTF-8 can encode \(a lone surrogate at 1\)"):
        Job(("a\ud800b",))


def test_numpy_numbers_refused_by_a_job_say_why():
    """numpy prints np.int64(4) as 4: "gamma must be an integer ..., got 4" read as a contradiction."""
    with pytest.raises(OptionError, match=r"\(a Python number, not numpy.int64\), got 4"):
        Job(("x",), gamma=np.int64(4))


def test_the_budget_check_before_loading_counts_a_trees_depth_as_generate_does(monkeypatch):
    """A spec's depth beyond its budget (3 nodes, depth 40) adds at most budget - 1 positions, as in
    ``loop.generate``: 509 new tokens fit a 512-position context after a one-token prompt, 510 do not."""
    monkeypatch.setattr(loading, "config_context_length", lambda name: 512)
    spec = {"kind": "eagle", "budget": 3, "depth": 40}
    checks.check_budget(as_job({"prompts": ["hi"], "max_new_tokens": 509, "tree": spec}))
    with pytest.raises(OptionError, match="at most 509"):
        checks.check_budget(as_job({"prompts": ["hi"], "max_new_tokens": 510, "tree": spec}))
