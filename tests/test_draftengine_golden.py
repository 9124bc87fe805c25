"""The draft engine's golden arithmetic (hls_ref.draftengine) and the requantization multiplier
(hwcontract.formats.de_multiplier): exact int8 sums, half-up rounding, saturation counts, and a clear error
for every bad shape or value."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hls_ref import draftengine as de
from hwcontract.formats import DE_K_LIMIT, DE_MULT_BITS, DE_SHIFT_MAX, de_multiplier


def job(x, w, bias=None, mult=None, shift=None, out_bits=8):
    n = np.asarray(w).shape[0]
    return de.Job(np.asarray(x), np.asarray(w),
                  np.zeros(n, np.int64) if bias is None else np.asarray(bias),
                  np.full(n, 1 << 15, np.int64) if mult is None else np.asarray(mult),
                  np.full(n, 15, np.int64) if shift is None else np.asarray(shift), out_bits)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 192, 512), (16, 7, 13), (3, 512, 192), (2, 4096, 3)])
def test_matmul_is_exact(m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.integers(-128, 128, (m, k))
    w = rng.integers(-128, 128, (n, k))
    assert np.array_equal(de.matmul(x, w), np.einsum("mk,nk->mn", x.astype(object), w.astype(object)).astype(np.int64))


def test_the_largest_sum_fits_the_accumulator():
    k = 4096
    acc = de.matmul(np.full((1, k), -128), np.full((1, k), -128))
    assert acc[0, 0] == k * 16384 < 2 ** 31
    assert DE_K_LIMIT * 128 * 128 < 2 ** 31 <= (DE_K_LIMIT + 1) * 128 * 128


def test_requant_rounds_half_up_and_saturates():
    # one channel, mult 1, shift 1: y = (t + 1) >> 1 (floor), so .5 goes up and -.5 goes to 0
    t = np.array([[3, -3, 2, -1, 1, 300, -300]])
    y, sat = de.requant(t, np.zeros(7, np.int64), np.ones(7, np.int64), np.ones(7, np.int64), 8)
    assert y.tolist() == [[2, -1, 1, 0, 1, 127, -128]]
    assert sat.tolist() == [[False] * 5 + [True, True]]
    # shift 0: no rounding term
    y, _ = de.requant(np.array([[-5]]), np.zeros(1, np.int64), np.array([3]), np.array([0]), 16)
    assert y.tolist() == [[-15]]


def test_requant_matches_exact_integer_arithmetic():
    rng = np.random.default_rng(5)
    m, n = 50, 40
    acc = rng.integers(-(2 ** 31), 2 ** 31, (m, n))
    bias = rng.integers(-(2 ** 31), 2 ** 31, n)
    mult = rng.integers(0, 2 ** DE_MULT_BITS, n)
    shift = rng.integers(0, DE_SHIFT_MAX + 1, n)
    for bits in (8, 16, 32):
        y, sat = de.requant(acc, bias, mult, shift, bits)
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        for i in range(m):
            for j in range(n):
                t = int(acc[i, j]) + int(bias[j])
                v = t if bits == 32 else (t * int(mult[j]) + ((1 << int(shift[j])) >> 1)) >> int(shift[j])
                assert y[i, j] == min(max(v, lo), hi) and sat[i, j] == (not lo <= v <= hi)


def test_run_counts_saturated_outputs():
    out = de.run(job([[127, 127]], [[127, 127], [1, 0], [-127, -127]], out_bits=8))
    assert out.y.tolist() == [[127, 127, -128]] and out.saturated == 2
    out = de.run(job([[127, 127]], [[127, 127]], bias=[2 ** 31 - 1], out_bits=32))
    assert out.y.tolist() == [[2 ** 31 - 1]] and out.saturated == 1


@pytest.mark.parametrize("kw,message", [
    (dict(x=[[1, 2, 3]], w=[[1, 2]]), "activations have K=3"),
    (dict(x=[[128]], w=[[1]]), "activations: value 128 outside -128..127"),
    (dict(x=[[1]], w=[[-129]]), "weights: value -129 outside"),
    (dict(x=[[1.5]], w=[[1]]), "activations: expected a 2-D integer array"),
    (dict(x=[1, 2], w=[[1, 2]]), "activations: expected a 2-D"),
    (dict(x=np.zeros((0, 2), np.int64), w=[[1, 2]]), "M=0"),
    (dict(x=[[1]], w=[[1]], out_bits=4), "out_bits=4 not in"),
    (dict(x=[[1]], w=[[1]], mult=[1 << 16]), "mult: value 65536 outside 0..65535"),
    (dict(x=[[1]], w=[[1]], shift=[49]), "shift: value 49 outside 0..48"),
    (dict(x=[[1]], w=[[1]], bias=[2 ** 31]), "bias: value 2147483648 outside"),
    (dict(x=[[1]], w=[[1]], shift=[1, 2]), "shift: expected one value per output channel"),
])
def test_bad_jobs_name_the_value(kw, message):
    with pytest.raises(ValueError, match=message):
        de.run(job(**kw))


def test_k_past_the_limit_is_refused():
    k = DE_K_LIMIT + 1
    with pytest.raises(ValueError, match=f"K={k} above {DE_K_LIMIT}"):
        de.check(job(np.zeros((1, k), np.int8), np.zeros((1, k), np.int8)))


@pytest.mark.parametrize("scale", [1.0, 0.5, 3e-5, 1 / 256, 65535.0, 0.99999999, 1.3e-3, 7.7e-12, 123.456])
def test_multiplier_is_the_nearest_pair(scale):
    mult, shift = de_multiplier(scale)
    assert 0 < mult < 2 ** DE_MULT_BITS and 0 <= shift <= DE_SHIFT_MAX
    if shift < DE_SHIFT_MAX and shift > 0:
        assert mult >= 2 ** (DE_MULT_BITS - 1) - 1         # normalised: 16 significant bits
        assert abs(mult / 2 ** shift - scale) <= 2 ** -(shift + 1) + 1e-300
    assert math.isclose(mult / 2 ** shift, scale, rel_tol=2 ** -14 if shift < DE_SHIFT_MAX else 0.1)


@pytest.mark.parametrize("scale,message", [(0.0, "finite positive"), (-1.0, "finite positive"),
                                           (float("nan"), "finite positive"), (float("inf"), "finite positive"),
                                           (65536.0, "above 65535"), (1e-16, "MULT rounds to 0")])
def test_multiplier_refuses_what_it_cannot_represent(scale, message):
    with pytest.raises(ValueError, match=message):
        de_multiplier(scale)
