"""The runtime owns its thread pools (issue #15): numpy's BLAS on one thread while the loop runs, torch's
pool untouched, both restored afterwards."""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from specdec.decoding import drafters, loop
from specdec.decoding.base import GenConfig, Sampling
from specdec.decoding.threads import numpy_pools, owned_threads
from specdec.hw import cores

torch = pytest.importorskip("torch")


def blas_threads() -> dict[str, int]:
    return {p["filepath"]: p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_numpy_blas_is_found():
    """numpy's own BLAS is among the pools (else the limit would silently do nothing)."""
    np.dot(np.ones((4, 4)), np.ones((4, 4)))
    pools = numpy_pools()
    assert pools and all("torch" not in p["filepath"] for p in pools)
    assert any(p["internal_api"] in ("openblas", "mkl", "blis") for p in pools)


def test_owned_threads_limits_numpy_and_restores():
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=2, user_api="blas"):          # a known starting point on any machine
        before, torch_before = blas_threads(), torch.get_num_threads()
        with owned_threads():
            inside = blas_threads()
            assert torch.get_num_threads() == torch_before
        after = blas_threads()
    mine = {p["filepath"] for p in numpy_pools()}
    assert all(inside[f] == 1 for f in mine)
    assert {f: n for f, n in inside.items() if f not in mine} == {f: n for f, n in before.items() if f not in mine}
    assert after == before


def test_owned_threads_restores_after_an_error():
    before = blas_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with owned_threads():
            raise RuntimeError("inside")
    assert blas_threads() == before


class Spy:
    """A drafter that records numpy's BLAS threads while the loop runs, around a real model draft."""

    name = "spy"
    reads_target = False

    def __init__(self, inner) -> None:
        self.inner, self.seen = inner, []

    def start(self, context):
        self.inner.start(context)

    def propose(self, context, budget, sampling, rng):
        self.seen.append(max(p["num_threads"] for p in numpy_pools()))
        return self.inner.propose(context, budget, sampling, rng)

    def commit(self, valid):
        self.inner.commit(valid)

    def free(self):
        self.inner.free()


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_p=0.95)], ids=["greedy", "sampled"])
def test_generate_runs_with_numpy_on_one_thread(sampling):
    import model_pairs
    from specdec.models.lm import CausalLM
    from threadpoolctl import threadpool_limits
    target = CausalLM(model_pairs.tiny_gpt2(8, 2, seed=11), "target")
    spy = Spy(drafters.ModelDraft(CausalLM(model_pairs.tiny_gpt2(8, 1, seed=12), "draft")))
    verifier = cores.golden_verifier()
    verifier.seed([9, 8, 7, 6])
    with threadpool_limits(limits=2, user_api="blas"):
        gen = loop.generate(target, spy, verifier, [1, 5, 2],
                              GenConfig(8, 2, sampling=sampling, seed=3))
        assert max(p["num_threads"] for p in numpy_pools()) == 2       # restored when the loop ends
    assert gen.tokens and spy.seen and set(spy.seen) == {1}
