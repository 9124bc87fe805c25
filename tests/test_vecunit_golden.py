"""vecunit golden model (hls_ref.vecunit) against float arithmetic, with each bound derived from the fixed point:
QUANT's planes, DEQ, NORMQ against RMSNorm, ROPE against numpy's rotation, SILU against silu(g) * u, TOPK against a
stable argsort; the cycle model; the start checks and frame lengths; bad input refused by name.

Units: X, Y and t are Q15.16 words (a value is the word * 2**-16); "LSB" is one unit of the word in question."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hls_ref import vecunit as vu
from hls_ref.vectors import vecunit_job, vecunit_set, vecunit_words
from hwcontract.formats import (VQ_FRAC, VU_MULT_BITS, VU_OP, VU_PLANE, VU_RSQRT_BITS, VU_SIG_FRAC, VU_SIG_RANGE,
                                VU_SIG_STEP_BITS, VU_SIN_STEPS, VU_TRIG_FRAC, vu_multiplier, vu_scale_words, vu_turns)
from hwcontract.latency import VU_CHECK, VU_RSQRT, VU_TAIL
from hwcontract.regmap import VU_OPS

ONE = 1 << VQ_FRAC
MULT_REL = 2.0 ** -VU_MULT_BITS          # a normalised MULT (2**15..2**16-1) is within half a unit: 2**-16 relative
#: |table sin - 2**15 sin| in Q1.15 LSB: the entries' rounding (1/2), the interpolation's rounding (1/2), linear
#: interpolation over steps of pi/2/VU_SIN_STEPS (max |sin''| h**2 / 8 = 0.154 LSB: 4.7e-6 of a unit) and the phase
#: bits below the interpolation's 16 (64 of 2**30 a quarter turn: 0.003 LSB).
SIN_ERR = 0.5 + 0.5 + (1 << VU_TRIG_FRAC) * (np.pi / 2 / VU_SIN_STEPS) ** 2 / 8 + \
    (1 << VU_TRIG_FRAC) * np.pi / 2 * 2.0 ** -24
#: |table sigmoid - 2**16 sigmoid| in Q0.16 LSB: entries (1/2), interpolation rounding (1/2), linear interpolation
#: over steps h = 2**(VU_SIG_STEP_BITS - 16) (max |sigmoid''| = 1 / (6 sqrt 3): h**2 / 8 * 0.0962 = 1.2e-5 of a unit,
#: 0.77 LSB) and the clamp beyond +-16 (sigmoid(-16) = 1.1e-7: 0.008 LSB).
SIG_H = 2.0 ** (VU_SIG_STEP_BITS - VQ_FRAC)
SIG_ERR = 0.5 + 0.5 + (1 << VU_SIG_FRAC) * SIG_H ** 2 / 8 / (6 * np.sqrt(3)) + \
    (1 << VU_SIG_FRAC) / (1 + np.exp(VU_SIG_RANGE))


def planes_value(y) -> np.ndarray:
    """x1 + x2 / 127 of QUANT / NORMQ words."""
    x1, x2 = vu.unpack_planes(y)
    return x1 + x2 / VU_PLANE


def quant_bound(ideal: np.ndarray) -> np.ndarray:
    """|x1 + x2 / 127 - ideal| for an unclipped x1: half a second-plane step, plus the MULT's relative error."""
    return 0.5 / VU_PLANE + np.abs(ideal) * MULT_REL


# ------------------------------------------------------------------------------------------------
# Against float
# ------------------------------------------------------------------------------------------------

def test_quant_planes_reconstruct_x_over_scale():
    rng = np.random.default_rng(1)
    x = np.round(rng.normal(0, 1.0, 16000) * ONE).astype(np.int64)        # Q15.16 activations around 1
    scale = rng.choice([0.01, 0.02, 0.05, 0.3], x.size)                   # a code's value (activation scale)
    k = 1.0 / (scale * ONE)                                                 # codes a Q15.16 word
    out = vu.run(vu.quant_job(x, vu_scale_words(k)))
    ideal = x * k
    x1, _ = vu.unpack_planes(out.y)
    inside = np.abs(x1) < VU_PLANE                                          # certainly not clipped
    assert inside.mean() > 0.8 and 0 < out.saturated <= int((~inside).sum())
    err = np.abs(planes_value(out.y) - ideal)[inside]
    assert (err <= quant_bound(ideal)[inside]).all(), err.max()
    assert (np.abs(x1 - ideal)[inside] <= 0.5 + np.abs(ideal[inside]) * MULT_REL).all()
    one = vu.run(vu.quant_job(x, vu_scale_words(k), planes2=False))
    assert np.array_equal(one.y & 0xFF, out.y & 0xFF) and not (one.y >> 8).any()   # PLANES2 off: x2 = 0


def test_deq_within_the_multipliers_precision():
    rng = np.random.default_rng(2)
    n = 4000
    p0, p1 = rng.integers(-(1 << 24), 1 << 24, (2, n))                     # a first plane's sums and a second's
    for scale in (2.0 ** -20, 3.7e-5, 0.011, 1.9):
        words = vu_scale_words(np.full(n, scale))
        res = vecunit_words(rng, n, "small")
        out = vu.run(vu.deq_job(np.stack([p0, p1]), words, 0b01, residual=res))
        ideal = (VU_PLANE * p0 + p1) * scale + res
        keep = np.abs(ideal) < 2 ** 31 - 1
        err = np.abs(out.y - ideal)[keep]
        assert (err <= 0.5 + np.abs(ideal - res)[keep] * MULT_REL).all(), (scale, err.max())
    q78 = vu.run(vu.deq_job(p1[None, :], vu_scale_words(np.full(n, 2.0 ** -12)), 0, sat16=True))
    assert np.array_equal(q78.y, np.clip(np.floor(p1 / 4096 + 0.5), -(1 << 15), (1 << 15) - 1))


def normq_bound(x: np.ndarray, eps: int, norm_mult: int) -> tuple[np.ndarray, np.ndarray]:
    """Float RMSNorm T = 2**16 X / sqrt(M), M = mean(X**2) + EPS (Q.32), and the bound on |t - T| (t = rnd(X r, 24)):

    m = floor(sum X**2 * NORM_MULT / 2**32) + EPS = M (1 + e_m) with |e_m| <= LEN / 2**33 (NORM_MULT rounded from
    2**32 / LEN) + 1 / M (the floor); r = floor(sqrt(floor(2**80 / m))) = 2**40 / sqrt(m) (1 - e_r) with
    0 <= e_r <= sqrt(m) / 2**40 + m / 2**81; the final rounding 1/2. So |t - T| <= 1/2 + |T| (0.51 |e_m| + e_r)."""
    n = len(x)
    big_m = float(sum(int(v) ** 2 for v in x)) / n + eps
    m = (vu.sum_squares(x) * norm_mult >> 32) + eps
    e_m = abs(norm_mult * n / 2 ** 32 - 1) + 1 / big_m
    e_r = np.sqrt(m) / 2 ** VU_RSQRT_BITS + m / 2 ** (2 * VU_RSQRT_BITS + 1)
    t_ideal = ONE * x / np.sqrt(big_m)
    return t_ideal, 0.5 + np.abs(t_ideal) * (0.51 * e_m + e_r)


@pytest.mark.parametrize("sigma", [0.01, 1.0, 30.0, 3000.0])
def test_normq_against_float_rmsnorm(sigma):
    rng = np.random.default_rng(int(sigma * 100))
    n = 576
    x = np.clip(np.round(rng.normal(0, sigma, n) * ONE), -(1 << 31), (1 << 31) - 1).astype(np.int64)
    eps = round(1e-5 * 2 ** 32)
    scale = 0.03
    job = vu.normq_job(x, vu_scale_words(np.full(n, 1 / (scale * ONE))), eps)
    t_ideal, bound = normq_bound(x, eps, job.norm_mult)
    t = vu.normalize(x, vu.rsqrt(vu.sum_squares(x), job.norm_mult, eps))
    assert (np.abs(t - t_ideal) <= bound).all(), np.abs(t - t_ideal).max()
    out = vu.run(job)
    ideal = t_ideal / (scale * ONE)
    x1, _ = vu.unpack_planes(out.y)
    inside = np.abs(x1) < VU_PLANE
    err = np.abs(planes_value(out.y) - ideal)[inside]
    assert (err <= (quant_bound(ideal) + bound / (scale * ONE))[inside]).all(), err.max()


def test_normq_zero_row_and_rsqrt_edges():
    assert vu.rsqrt(0, 1 << 20, 0) == (1 << VU_RSQRT_BITS) - 1                    # m = 0
    assert vu.rsqrt(0, 0, 1) == (1 << VU_RSQRT_BITS) - 1                          # m = 1: 2**40 capped
    assert vu.rsqrt(0, 0, 4) == 1 << (VU_RSQRT_BITS - 1)                          # 1 / sqrt(4) exactly
    for m in (3, 5, 10 ** 6, 2 ** 64 + 1, 2 ** 78):
        r = vu.rsqrt(0, 0, m) if m < 2 ** 32 else vu.rsqrt(m << 32, 1, 0)
        assert r * r * m <= 2 ** 80 < (r + 1) ** 2 * m
    assert not vu.run(vu.normq_job(np.zeros(16, np.int64), np.full(16, 1), 0)).y.any()


def table_cos_sin(phase: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c, s = vu.sincos(phase)
    return c / (1 << VU_TRIG_FRAC), s / (1 << VU_TRIG_FRAC)


def test_sin_table_interpolation_error():
    rng = np.random.default_rng(4)
    phase = np.concatenate([rng.integers(0, 1 << 32, 200000), np.arange(0, 1 << 32, 1 << 20)])
    c, s = table_cos_sin(phase)
    ang = 2 * np.pi * phase / 2 ** 32
    worst = max(np.abs(c - np.cos(ang)).max(), np.abs(s - np.sin(ang)).max()) * (1 << VU_TRIG_FRAC)
    assert worst <= SIN_ERR and worst > 0.5                                   # the bound is a real one


@pytest.mark.parametrize("half,pos", [(1, 0), (32, 1), (32, 4095), (64, 1 << 20), (64, (1 << 32) - 1)])
def test_rope_against_numpy_rotation(half, pos):
    """|y - y_float| <= 1/2 + (|x_lo| + |x_hi|) (SIN_ERR / 2**15 + pos * pi / 2**32): the final rounding, the table,
    and the frequency's rounding to turns in Q.32 (half a unit a position, so pos / 2**33 of a turn)."""
    rng = np.random.default_rng(half + pos % 1000)
    freq = 10000.0 ** (-np.arange(half) / half)
    heads = 3
    x = vecunit_words(rng, 2 * half * heads, "small")
    out = vu.run(vu.rope_job(x, vu_turns(freq), pos, half))
    xl, xh = x.reshape(heads, 2, half)[:, 0], x.reshape(heads, 2, half)[:, 1]
    ang = float(pos) * freq
    yl, yh = xl * np.cos(ang) - xh * np.sin(ang), xh * np.cos(ang) + xl * np.sin(ang)
    ideal = np.stack([yl, yh], 1).reshape(-1)
    mag = np.repeat(np.abs(xl) + np.abs(xh), 2, axis=0).reshape(heads, 2, half).reshape(-1)
    bound = 0.5 + mag * (SIN_ERR / (1 << VU_TRIG_FRAC) + float(pos) * np.pi / 2 ** 32)
    assert out.saturated == 0 and (np.abs(out.y - ideal) <= bound).all(), np.abs(out.y - ideal).max()
    assert pos or np.array_equal(out.y, x)                                    # POS 0: cos = 1, sin = 0 exactly


def test_silu_against_float():
    """|y - silu(g) u| <= |g u| SIG_ERR / 2**16 + |u| / 2 + 1/2 (values in Q15.16 words: the table's error times
    |g u|, sg's rounding times |u|, the last rounding)."""
    rng = np.random.default_rng(6)
    n = 8000
    g = np.concatenate([rng.integers(-(20 << 16), 20 << 16, n), vecunit_words(rng, n, "small")])
    u = vecunit_words(rng, 2 * n, "small")
    out = vu.run(vu.silu_job(g, u))
    gv = g / ONE
    ideal = gv / (1 + np.exp(-gv)) * u
    err = np.abs(out.y - ideal)
    bound = np.abs(g * u) / ONE * SIG_ERR / (1 << VU_SIG_FRAC) + np.abs(u) / ONE / 2 + 0.5
    assert out.saturated == 0 and (err <= bound).all(), (err / bound).max()
    sig = vu.sigmoid(np.arange(-(17 << 16), 17 << 16, 97))
    assert np.abs(sig - (1 << VU_SIG_FRAC) / (1 + np.exp(-np.arange(-(17 << 16), 17 << 16, 97) / ONE))).max() <= \
        SIG_ERR


def test_topk_equals_a_stable_argsort():
    rng = np.random.default_rng(8)
    for trial in range(200):
        n = int(rng.integers(1, 300))
        x = rng.integers(-4, 5, n) if trial % 2 else vecunit_words(rng, n)
        k = int(rng.integers(1, min(16, n) + 1))
        out = vu.run(vu.topk_job(x, k), dict(K_MAX=16))
        idx, val = vu.unpack_topk(out.y)
        order = np.argsort(-x, kind="stable")[:k]
        assert np.array_equal(idx, order) and np.array_equal(val, x[order])


# ------------------------------------------------------------------------------------------------
# The cycle model, the checks and the frames
# ------------------------------------------------------------------------------------------------

def test_cycle_model():
    rng = np.random.default_rng(9)
    p = vu.build()
    for op in VU_OPS:
        for length in (1, 7, 64):
            j = vecunit_job(rng, op, length, p)
            extra = {"NORMQ": VU_RSQRT, "ROPE": j.half, "TOPK": 2 * j.k}.get(op, 0)
            assert vu.run(j).cycles == VU_CHECK + len(j.x) + extra + VU_TAIL
            assert vu.frame_beats(j.op, j.length, j.parts, j.flags) == len(j.x)
            assert vu.out_beats(j.op, j.length, j.k) == len(vu.run(j).y)
    deq = vu.deq_job(np.ones((3, 5), np.int64), np.ones(5, np.int64), 0, residual=np.zeros(5, np.int64))
    assert vu.cycles(deq.op, 5, 3, deq.flags) == VU_CHECK + 5 * 4 + VU_TAIL


def test_start_checks_in_order():
    p = vu.build()
    x, c = np.zeros(4, np.int64), np.zeros(4, np.int64)
    cases = [(dict(op=6, length=0), "BAD_OP"), (dict(op=(1 << 32) - 1), "BAD_OP"),
             (dict(op=0, length=0), "BAD_LEN"), (dict(op=1, length=p["LEN_MAX"] + 1, parts=0), "BAD_LEN"),
             (dict(op=1, parts=0), "BAD_PARTS"), (dict(op=1, parts=p["PARTS_MAX"] + 1), "BAD_PARTS"),
             (dict(op=3, half=0), "BAD_HALF"), (dict(op=3, half=p["HALF_MAX"] * 2, length=p["HALF_MAX"] * 4),
                                                "BAD_HALF"),
             (dict(op=3, length=6, half=2), "BAD_HALF"), (dict(op=5, k=0), "BAD_K"),
             (dict(op=5, k=p["K_MAX"] + 1, length=64), "BAD_K"), (dict(op=5, k=5, length=4), "BAD_K")]
    for regs, err in cases:
        job = vu.Job(**{"op": 0, "length": 4, "x": x, "c": c, **regs})
        out = vu.run(job)
        assert out.err == vu.ERR[err] and out.y.size == 0 and out.cycles == 0 and out.saturated == 0, (regs, err)
    # another operation's registers are not checked
    for op in ("QUANT", "NORMQ", "SILU"):
        j = vu.Job(VU_OP[op], 2, np.zeros(vu.frame_beats(VU_OP[op], 2), np.int64),
                   np.zeros(vu.frame_beats(VU_OP[op], 2), np.int64), parts=0, half=0, k=0)
        assert vu.run(j).err == 0


def test_frame_length_errors():
    rng = np.random.default_rng(10)
    for op in VU_OPS:
        j = vecunit_job(rng, op, 9, vu.build())
        for n in (0, 1, len(j.x) - 1, len(j.x) + 1, 2 * len(j.x)):
            out = vu.run(replace(j, x=np.resize(j.x, n), c=np.resize(j.c, n)))
            assert out.err == vu.ERR["SHORT_STREAM" if n < len(j.x) else "LONG_STREAM"]
            assert out.y.size == 0 and out.cycles == 0


@pytest.mark.parametrize("job,message", [
    (vu.Job(0, 2, np.array([1.0, 2.0]), np.array([1, 2])), r"X words must be integers, got dtype float64"),
    (vu.Job(0, 2, np.array([True, False]), np.array([1, 2])), r"X words must be integers, got dtype bool"),
    (vu.Job(0, 2, np.array([1, 1 << 31]), np.array([1, 2])), r"X words: value 2147483648 outside"),
    (vu.Job(0, 2, np.array([-(1 << 31) - 1, 0]), np.array([1, 2])), r"X words: value -2147483649 outside"),
    (vu.Job(0, 2, np.array([1, 2]), np.array([-1, 2])), r"C words: value -1 outside 0..4294967295"),
    (vu.Job(0, 2, np.array([1, 2]), np.array([1, 1 << 32])), r"C words: value 4294967296 outside"),
    (vu.Job(0, 2, np.array([1, 2]), np.array([1, 2, 3])), r"2 X words and 3 C words"),
    (vu.Job(0, 2, np.array([1, 2]), np.array([1, 2]), pos=1 << 32), r"POS=4294967296 does not fit its 32-bit"),
    (vu.Job(0, 2, np.array([1, 2]), np.array([1, 2]), eps=-1), r"EPS=-1 does not fit its 32-bit register"),
    (vu.Job(0, 2.5, np.array([1, 2]), np.array([1, 2])), r"LEN must be an integer, got 2.5"),
], ids=["float", "bool", "x-above", "x-below", "c-negative", "c-above", "lengths", "pos", "eps", "len-float"])
def test_bad_input_is_refused_by_name(job, message):
    with pytest.raises(ValueError, match=message):
        vu.run(job)


def test_job_helpers_refuse_bad_vectors():
    with pytest.raises(ValueError, match=r"QUANT values must be a 1-D integer vector, got shape \(2,\) dtype float"):
        vu.quant_job([0.5, 1.0], [1, 1])
    with pytest.raises(ValueError, match=r"3 NORMQ C words for 2 values"):
        vu.normq_job([1, 2], [1, 1, 1], 0)
    with pytest.raises(ValueError, match=r"ROPE of 6 values with 2 frequencies"):
        vu.rope_job(np.arange(6), [1, 2], 0, 2)
    with pytest.raises(ValueError, match=r"3 gates and 2 ups"):
        vu.silu_job([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match=r"a residual of 2 values for 3 elements"):
        vu.deq_job(np.ones((1, 3), np.int64), [1, 1, 1], 0, residual=[1, 2])
    with pytest.raises(ValueError, match=r"scale -1 must be a finite positive number"):
        vu_multiplier(-1)


def test_vector_set_is_deterministic_and_a_shorter_one_its_prefix():
    short, long_ = vecunit_set(5, 6), vecunit_set(5, 30)
    again = vecunit_set(5, 30)
    assert len(long_) == len(short) + 24
    for a, b in list(zip(short, long_)) + list(zip(long_, again)):
        assert a.registers() == b.registers() and np.array_equal(a.x, b.x) and np.array_equal(a.c, b.c)
