"""Pipelined drafting (specdec.decoding.pipeline): the same greedy output as serial drafting, and the proposals drafted
ahead are used when the round goes as guessed."""
from __future__ import annotations

import pytest

import model_pairs
from specdec.decoding import loop
from specdec.decoding.base import GenConfig, Sampling
from specdec.decoding.drafters import ModelDraft
from specdec.decoding.pipeline import PipelinedDraft
from specdec.hw import cores

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_threads")

V = 64
PROMPT = [3, 17, 5, 9]


def lm(n_layer: int, seed: int, kv=None):
    from specdec.models.lm import CausalLM
    return CausalLM(model_pairs.tiny_gpt2(V, n_layer, seed=seed), f"l{n_layer}s{seed}",
                    **({"kv": kv, "block": 4} if kv is not None else {}))


@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
@pytest.mark.parametrize("gamma", [1, 3, "auto"])
def test_pipelined_output_equals_serial_and_target_only(gamma, paged):
    kv = cores.golden_kvpage() if paged else None
    target = lm(2, seed=1, kv=kv)
    draft_lm = lm(1, seed=2, kv=kv)
    cfg = GenConfig(24, gamma, stop_at_eos=False)
    base = loop.generate(target, None, None, PROMPT, GenConfig(24, 0, stop_at_eos=False)).tokens
    serial = loop.generate(target, ModelDraft(draft_lm), cores.golden_verifier(), PROMPT, cfg).tokens
    piped = PipelinedDraft(draft_lm)
    out = loop.generate(target, piped, cores.golden_verifier(), PROMPT, cfg).tokens
    assert out == serial == base
    if paged:
        assert kv.free_pages == kv.pages                    # nothing leaked, also from the second thread


def test_a_draft_that_is_the_target_is_always_guessed_right():
    """With the target as its own draft every round accepts everything and the guessed next token is the
    target's: every proposal after the first comes from the second thread."""
    target = lm(2, seed=1)
    piped = PipelinedDraft(lm(2, seed=1))
    gen = loop.generate(target, piped, cores.golden_verifier(), PROMPT, GenConfig(26, 4, stop_at_eos=False))
    assert all(r.n_accept == r.g for r in gen.rounds)
    assert piped.hits == len(gen.rounds) - 1 and piped.misses == 0


def test_a_wrong_guess_falls_back_to_serial_drafting():
    target = lm(2, seed=1)
    piped = PipelinedDraft(lm(1, seed=7))
    gen = loop.generate(target, piped, cores.golden_verifier(), PROMPT, GenConfig(26, 2, stop_at_eos=False))
    full = sum(r.n_accept == r.g for r in gen.rounds[:-1])
    assert piped.hits + piped.misses == full                 # a guess is kept only after a full accept
    assert piped.hits < len(gen.rounds) - 1


def test_sampled_rounds_draft_serially():
    """A sampled draft draws from the loop's generator: no drafting ahead, the same tokens as ModelDraft."""
    target, draft_lm = lm(2, seed=1), lm(1, seed=2)
    cfg = GenConfig(16, 3, sampling=Sampling(temperature=1.0), seed=5, stop_at_eos=False)
    va, vb = cores.golden_verifier(), cores.golden_verifier()
    va.seed([1, 2, 3, 4])
    vb.seed([1, 2, 3, 4])
    a = loop.generate(target, ModelDraft(draft_lm), va, PROMPT, cfg).tokens
    piped = PipelinedDraft(draft_lm)
    b = loop.generate(target, piped, vb, PROMPT, cfg).tokens
    assert piped.hits == piped.misses == 0
    assert a == b and len(a) == 16
