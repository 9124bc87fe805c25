"""vecunit C++ reference (hls_ref/cpp/vecunit.cpp) == golden model (hls_ref.vecunit), word for word: the agreement
vectors of several builds, random jobs of every operation at the edges of every width, every ERR bit, frames cut
short or run long, the tables and the ID hash."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hls_ref import cpp
from hls_ref import vecunit as vu
from hls_ref.vectors import I32_EDGES, vecunit_job, vecunit_scales, vecunit_set, vecunit_words
from hwcontract.formats import VU_OP, VU_SHIFT_MAX, vu_scale_words, vu_sigmoid_table, vu_sin_table, vu_turns
from hwcontract.regmap import VU_OPS, core

pytestmark = pytest.mark.skipif(cpp.shutil.which(cpp.CXX) is None, reason="no C++ compiler")

BUILDS = [None, dict(LEN_MAX=256, PARTS_MAX=1, HALF_MAX=128, K_MAX=1),
          dict(LEN_MAX=65536, PARTS_MAX=3, HALF_MAX=16, K_MAX=16)]
I32 = (-(1 << 31), (1 << 31) - 1)


def agree(job: vu.Job, params=None) -> vu.Output:
    """The C++ reference's words and RESULT registers equal the golden model's; BEATS_IN is the frame up to the
    job's length (none on a start error), BEATS_OUT the m_axis words."""
    want = vu.run(job, params)
    y, res = cpp.vecunit_run(job, params)
    if want.err & (vu.ERR["SHORT_STREAM"] | vu.ERR["LONG_STREAM"]):
        beats_in = min(len(job.x), vu.frame_beats(job.op, job.length, job.parts, job.flags))
    else:
        beats_in = 0 if want.err else len(job.x)
    assert res == {"saturated": want.saturated, "beats_in": beats_in, "beats_out": len(want.y), "err": want.err}, \
        (job.op, job.length)
    assert y.dtype == np.int64 and np.array_equal(y, want.y), (job.op, job.length, y[:8], want.y[:8])
    return want


def test_id_hash():
    assert cpp.vecunit_id_hash() == core("vecunit").map_hash()


def test_tables_equal_the_contracts():
    sin, sig = cpp.vecunit_tables()
    assert np.array_equal(sin, vu_sin_table()) and np.array_equal(sig, vu_sigmoid_table())
    assert sin[0] == 0 and sin[-1] == 1 << 15 and sig[0] >= 0 and sig[-1] == 1 << 16


def test_sincos_equals_the_golden_interpolation():
    rng = np.random.default_rng(3)
    q = 1 << 30
    phases = np.concatenate([[0, 1, q - 1, q, q + 1, 2 * q - 1, 2 * q, 3 * q, (1 << 32) - 1, 1 << 22, (1 << 22) - 1],
                             rng.integers(0, 1 << 32, 3000)])
    c, s = vu.sincos(phases)
    got = np.array([cpp.vecunit_sincos(int(p)) for p in phases])
    assert np.array_equal(got[:, 0], c) and np.array_equal(got[:, 1], s)


@pytest.mark.parametrize("params", BUILDS, ids=["default", "smallest", "widest"])
def test_vector_set(params):
    jobs = vecunit_set(67, 60, params)
    outs = [agree(j, params) for j in jobs]
    assert {o.err for o in outs} == {0} | set(vu.ERR.values())
    assert {VU_OPS[j.op] for j, o in zip(jobs, outs) if not o.err} == set(VU_OPS)
    saturating = {VU_OPS[j.op] for j, o in zip(jobs, outs) if o.saturated}
    assert saturating == {"QUANT", "DEQ", "NORMQ", "ROPE", "SILU"}


@pytest.mark.parametrize("op", VU_OPS)
def test_random_jobs_of_each_operation(op):
    rng = np.random.default_rng(VU_OP[op])
    sat = 0
    for i in range(40):
        p = BUILDS[i % len(BUILDS)]
        job = vecunit_job(rng, op, int(rng.integers(1, 200)), vu.build(p),
                          style=("mixed", "small", "wide", "edge")[i % 4])
        sat += agree(job, p).saturated
    assert sat > 0 or op == "TOPK"


def test_quant_extremes_at_shift_0_and_63():
    e = np.array(I32_EDGES + I32, np.int64)
    for mult in (0, 1, 0x7FFF, 0xFFFF):
        for shift in (0, 1, 31, 47, 48, 62, VU_SHIFT_MAX):
            words = np.full(len(e), mult | shift << 16)
            for flags in (0, vu.FLAG["PLANES2"]):
                agree(vu.Job(VU_OP["QUANT"], len(e), e, words, flags))
    out = agree(vu.quant_job(e, np.full(len(e), 0xFFFF)))          # SHIFT 0: every nonzero value clips
    assert out.saturated == int((np.abs(e) * 0xFFFF > 127).sum())


def test_deq_sixteen_parts_every_weight_residual_and_saturations():
    rng = np.random.default_rng(5)
    for wmask in (0, 0xFFFF, 0x5555, (1 << 32) - 1):
        for flags in (0, vu.FLAG["RES"], vu.FLAG["SAT16"], vu.FLAG["RES"] | vu.FLAG["SAT16"]):
            per = 16 + bool(flags & vu.FLAG["RES"])
            x = np.concatenate([np.full(per * 2, I32[0]), np.full(per * 2, I32[1]), vecunit_words(rng, per * 12)])
            c = np.zeros((16, per), np.int64)
            c[:, 0] = vecunit_scales(rng, 16, shift=int(rng.choice([0, 20, 40, 63])))
            c[:4, 0] = 0xFFFF                                           # the extreme rows at MULT 65535, SHIFT 0
            out = agree(vu.Job(VU_OP["DEQ"], 16, x, c.reshape(-1), flags, 16, wmask))
            assert out.saturated >= 4 and set(out.y[:4]) == ({-(1 << 15), (1 << 15) - 1}
                                                               if flags & vu.FLAG["SAT16"] else set(I32))


def test_normq_zero_mean_and_huge_sums():
    n = 16384
    w = vu_scale_words(np.full(n, 1 / (0.05 * 65536)))
    big = np.full(n, I32[0])
    # the largest sum of squares of the default build (2**76) at the largest NORM_MULT and EPS
    agree(vu.Job(VU_OP["NORMQ"], n, np.concatenate([big, big]), np.concatenate([np.zeros(n, np.int64), w]),
                 vu.FLAG["PLANES2"], eps=(1 << 32) - 1, norm_mult=(1 << 32) - 1))
    agree(vu.normq_job(big, w, 0))
    zero = agree(vu.normq_job(np.zeros(8, np.int64), w[:8], 0))             # m = 0: r = 2**40 - 1
    assert not zero.y.any()
    tiny = agree(vu.normq_job(np.array([1, -1, 0, 0], np.int64), vu_scale_words([1.0] * 4), 0))
    assert vu.rsqrt(2, (1 << 32) // 4, 0) == (1 << 40) - 1 and tiny.saturated == 2   # t = +-2**16 clips at scale 1


def test_rope_positions_and_halves():
    rng = np.random.default_rng(7)
    for half in (1, 2, 16, 64):
        turns = vu_turns(10000.0 ** (-np.arange(half) / half))
        for pos in (0, 1, 4095, (1 << 31), (1 << 32) - 1):
            for style in ("small", "edge", "wide"):
                agree(vu.rope_job(vecunit_words(rng, 4 * half, style), turns, pos, half))
    hm = 128
    p = dict(HALF_MAX=hm)
    agree(vu.rope_job(vecunit_words(rng, 2 * hm, "edge"), rng.integers(0, 1 << 32, hm), (1 << 32) - 1, hm), p)
    out = agree(vu.rope_job(np.full(4, I32[0]), [1 << 29, 3 << 29], 1, 2))   # eighth turns: both |y| > 2**31
    assert out.saturated == 2


def test_silu_beyond_sixteen_and_saturating():
    g = np.concatenate([np.arange(-(17 << 16), 17 << 16, 4093), [I32[0], I32[1], -(16 << 16) - 1, 16 << 16]])
    agree(vu.silu_job(g, np.resize(np.array(I32_EDGES), len(g))))
    out = agree(vu.silu_job(np.full(3, I32[1]), np.array([I32[1], I32[0], 1 << 16])))
    assert out.saturated == 2 and out.y[2] == I32[1]                       # silu(g) = g above 16; * 1.0


def test_topk_ties_and_k_equal_to_len():
    for x in ([3, 3, 3, 3], [I32[0]] * 5, [1, 2, 2, 1, 2], list(I32_EDGES)):
        x = np.array(x, np.int64)
        for k in range(1, min(len(x), 16) + 1):
            out = agree(vu.topk_job(x, k), dict(K_MAX=16))
            idx, val = vu.unpack_topk(out.y)
            assert list(idx) == list(np.argsort(-x, kind="stable")[:k]) and (val == x[idx]).all()


def test_every_start_error_and_stream_error():
    p = vu.build()
    rng = np.random.default_rng(11)
    x4, c4 = vecunit_words(rng, 4), np.zeros(4, np.int64)
    for job, err in ((vu.Job(6, 4, x4, c4), "BAD_OP"), (vu.Job((1 << 32) - 1, 4, x4, c4), "BAD_OP"),
                     (vu.Job(0, 0, x4, c4), "BAD_LEN"), (vu.Job(0, p["LEN_MAX"] + 1, x4, c4), "BAD_LEN"),
                     (vu.Job(1, 4, x4, c4, parts=0), "BAD_PARTS"), (vu.Job(1, 4, x4, c4, parts=17), "BAD_PARTS"),
                     (vu.Job(3, 4, x4, c4, half=0), "BAD_HALF"), (vu.Job(3, 6, x4, c4, half=2), "BAD_HALF"),
                     (vu.Job(3, 130, x4, c4, half=65), "BAD_HALF"), (vu.Job(5, 4, x4, c4, k=0), "BAD_K"),
                     (vu.Job(5, 4, x4, c4, k=5), "BAD_K"), (vu.Job(5, 40, x4, c4, k=9), "BAD_K"),
                     (vu.Job(6, 0, x4, c4, parts=0), "BAD_OP"), (vu.Job(1, 0, x4, c4, parts=0), "BAD_LEN")):
        assert agree(job).err == vu.ERR[err], err
    for op in VU_OPS:
        job = vecunit_job(rng, op, 12, p)
        for n in (0, 1, job.x.size - 1, job.x.size + 1, 3 * job.x.size):
            err = agree(replace(job, x=np.resize(job.x, n), c=np.resize(job.c, n))).err
            assert err == vu.ERR["SHORT_STREAM" if n < job.x.size else "LONG_STREAM"]


def test_frames_registers_and_builds_are_checked():
    beats = cpp.vecunit_beats([-1, 5], [0xFFFFFFFF, 2])
    assert beats.dtype == np.uint64 and list(beats) == [(1 << 64) - 1, 5 | 2 << 32]
    y, res = cpp.vecunit_frame({"OP": VU_OP["TOPK"], "LEN": 2, "K": 2}, beats)
    assert list(y) == [1, 5, 0, -1] and res == {"saturated": 0, "beats_in": 2, "beats_out": 4, "err": 0}
    with pytest.raises(ValueError, match=r"vecunit: POS=4294967296 does not fit its 32-bit register"):
        cpp.vecunit_frame({"OP": 3, "LEN": 2, "HALF": 1, "POS": 1 << 32}, beats)
    with pytest.raises(KeyError, match=r"no register 'SHIFT'"):
        cpp.vecunit_frame({"SHIFT": 3}, beats)
    with pytest.raises(ValueError, match=r"must be uint64 words, got dtype int64"):
        cpp.vecunit_frame({}, np.zeros(1, np.int64))
    with pytest.raises(ValueError, match=r"parameter HALF_MAX=48 of core 'vecunit'"):
        cpp.vecunit_frame({}, beats[:1], dict(HALF_MAX=48))
    with pytest.raises(ValueError, match=r"vecunit: C words.*4294967296"):
        cpp.vecunit_beats([0], [1 << 32])
    with pytest.raises(ValueError, match=r"vecunit: X words.*2147483648"):
        cpp.vecunit_run(vu.quant_job([1 << 31], [1]))
