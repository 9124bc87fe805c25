"""rng on the golden backend: the driver checks shared with the simulation, and the generator's statistics."""
from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from hls_ref import rng as golden
from specdec.errors import CoreError, HardwareMismatch
from specdec.hw.drivers.base import description
from specdec.hw.drivers.rng import Rng
from specdec.hw.golden import GoldenDevice, RngModel
from tb.rng.driver_checks import check_rng_driver

N = 1 << 18


@pytest.fixture(scope="module")
def words() -> np.ndarray:
    return golden.xoshiro128pp([0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978], N)[0]


def test_driver_on_golden_model():
    check_rng_driver(GoldenDevice({0: "rng"}))


def test_driver_refuses_other_hash(monkeypatch):
    real = RngModel.read
    monkeypatch.setattr(RngModel, "read", lambda self, off: (real(self, off) ^ 1) if off == 0 else real(self, off))
    with pytest.raises(HardwareMismatch, match="register-map hash"):
        Rng(description("rng", GoldenDevice({0: "rng"})))


def test_same_seed_same_outputs_and_state_chains():
    a, sa = golden.xoshiro128pp([1, 2, 3, 4], 300)
    b, sb = golden.xoshiro128pp([1, 2, 3, 4], 300)
    assert np.array_equal(a, b) and np.array_equal(sa, sb)
    c1, s1 = golden.xoshiro128pp([1, 2, 3, 4], 100)
    c2, _ = golden.xoshiro128pp(s1, 200)
    assert np.array_equal(np.concatenate([c1, c2]), a)
    other, _ = golden.xoshiro128pp([1, 2, 3, 5], 300)
    assert np.mean(other == a) < 0.01


def test_one_generator_equals_the_vectorised_run():
    """One seed runs on Python ints, a batch of seeds on numpy arrays: the same words and states (and the first
    word of the reference seed is xoshiro128++'s, rotl(s0 + s3, 7) + s0)."""
    seeds = np.array([[1, 2, 3, 4], [0xFFFFFFFF, 0x80000000, 7, 0xDEADBEEF]], dtype=np.uint32)
    batch, batch_state = golden.xoshiro128pp(seeds, 500)
    for row, seed in enumerate(seeds):
        one, state = golden.xoshiro128pp(seed, 500)
        assert one.dtype == np.uint32 and state.dtype == np.uint32
        assert np.array_equal(one, batch[row]) and np.array_equal(state, batch_state[row])
    assert int(golden.xoshiro128pp([1, 2, 3, 4], 1)[0][0]) == (((1 + 4) << 7) + 1)
    empty, state = golden.xoshiro128pp([1, 2, 3, 4], 0)
    assert empty.shape == (0,) and empty.dtype == np.uint32 and state.tolist() == [1, 2, 3, 4]


def test_zero_seed_rejected():
    with pytest.raises(ValueError, match="all zero"):
        golden.xoshiro128pp([0, 0, 0, 0], 1)


def test_golden_counts_are_named():
    """A step count of 2.5 had raised numpy's TypeError and True drawn one word; ``uniform`` over 40 bits of a
    32-bit word had answered zeros."""
    for n, what in ((2.5, "n must be an integer, got 2.5"), (True, "n must be an integer, got the bool True"),
                    (-1, "n must be >= 0, got -1")):
        with pytest.raises(ValueError, match=re.escape(what)):
            golden.xoshiro128pp([1, 2, 3, 4], n)
    for bits in (0, 33, 40):
        with pytest.raises(ValueError, match=rf"bits must be in 1\.\.32 \(of a 32-bit word\), got {bits}"):
            golden.uniform(np.array([1, 2], np.uint32), bits)
    assert golden.uniform(np.array([0xFFFFFFFF], np.uint32), 32)[0] == 1 - 2.0 ** -32


# Statistical tests: each at a false-alarm rate of 1e-4 (fixed seed, so the outcome is deterministic;
# the threshold says how unlikely a failure of a good generator is).
ALPHA = 1e-4


def test_uniform_bytes_chi_square(words):
    for shift in (0, 8, 16, 24):  # every byte of the word, low bits included
        counts = np.bincount((words >> np.uint32(shift)) & np.uint32(0xFF), minlength=256)
        assert stats.chisquare(counts).pvalue > ALPHA, f"byte at bit {shift} not uniform"


def test_uniform_fraction_ks(words):
    u = golden.uniform(words)
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    assert abs(u.mean() - 0.5) < 5 / np.sqrt(12 * len(u))


def test_serial_correlation(words):
    u = golden.uniform(words)
    for lag in (1, 2, 3, 7):
        r = np.corrcoef(u[:-lag], u[lag:])[0, 1]
        assert abs(r) < 4.0 / np.sqrt(len(u)), f"lag-{lag} correlation {r:.2e}"
    # pairs (u_i, u_{i+1}) spread evenly over a 16x16 grid
    pairs = (np.floor(u[:-1:2] * 16) * 16 + np.floor(u[1::2] * 16)).astype(int)
    assert stats.chisquare(np.bincount(pairs, minlength=256)).pvalue > ALPHA


def test_register_writes_and_seeds_take_integers_only():
    """``int()`` had truncated a float register value or seed word silently (the base driver's writes)."""
    rng = Rng(description("rng", GoldenDevice({0: "rng"})))
    with pytest.raises(ValueError, match=re.escape("rng.COUNT must be an integer, got 2.5")):
        rng.write_reg("COUNT", 2.5)
    with pytest.raises(ValueError, match=re.escape("rng burst: n must be an integer, got 2.5")):
        rng.burst(2.5)
    with pytest.raises(ValueError, match=re.escape("rng seed word must be an integer, got 7.9")):
        rng.seed([1, 2, 3, 7.9])
    rng.seed([1, 2, 3, 7])
    assert rng.burst(3)["steps"] == 3


def test_a_seed_after_a_refused_one_is_refused_and_not_loaded():
    """After an all-zero seed (SEED_ZERO), the next seed had been written and loaded and then refused with the
    earlier error, blamed on itself; the state it loaded showed after soft_reset. It is refused with nothing
    written, and after soft_reset the next seed is the one in use."""
    rng = Rng(description("rng", GoldenDevice({0: "rng"})))
    with pytest.raises(CoreError, match="SEED_ZERO"):
        rng.seed([0, 0, 0, 0])
    with pytest.raises(CoreError, match="still in error from an earlier operation"):
        rng.seed([1, 2, 3, 4])
    rng.soft_reset()
    rng.seed([5, 6, 7, 8])
    assert rng.step() == int(golden.xoshiro128pp([5, 6, 7, 8], 1)[0][0])


def test_draws_before_a_seed_are_refused():
    """The state after reset is all zero, xoshiro's fixed point: step, draw and burst returned 0 forever without
    a word of warning. They are refused until seed(); a seed that is not 4 words names itself."""
    rng = Rng(description("rng", GoldenDevice({0: "rng"})))
    for call in (rng.step, lambda: rng.draw(4), lambda: rng.burst(8)):
        with pytest.raises(ValueError, match=r"call seed\(words\) first"):
            call()
    with pytest.raises(ValueError, match=r"expected 4 words \(a sequence of 32-bit integers\), got 5"):
        rng.seed(5)
    seed = [0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978]
    rng.seed(seed)
    assert rng.draw(4).tolist() == golden.xoshiro128pp(seed, 4)[0].tolist()
