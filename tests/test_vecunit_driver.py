"""vecunit driver on the golden backend: every operation equals the golden model's (random and edge cases), bad
input is refused before the core, core errors come back named and a soft reset recovers, and the same driver runs
the RTL in simulation."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import cpp
from hls_ref import vecunit as vu
from hwcontract.formats import VU_OP, vu_frame_bytes, vu_frame_words, vu_out_values, vu_scale_words, vu_turns
from specdec.errors import CoreError, SpecdecError
from specdec.hw.cores import golden_vecunit
from specdec.hw.drivers.base import description
from specdec.hw.drivers.vecunit import VecUnit
from specdec.hw.golden import GoldenDevice
from specdec.hw.streams import RowStream
from specdec.sim.jobs import run_bench

SMALL = dict(LEN_MAX=256, PARTS_MAX=4, HALF_MAX=16, K_MAX=4)
I32 = (-(1 << 31), (1 << 31) - 1)
REGS = ("OP", "LEN", "FLAGS", "PARTS", "WMASK", "POS", "HALF", "EPS", "NORM_MULT", "K")


def golden_driver(params=None) -> tuple[VecUnit, object]:
    drv = golden_vecunit(params)
    return drv, drv.stream.model


def values(rng: np.random.Generator, n: int, bits: int = 24) -> np.ndarray:
    """``n`` Q15.16 values of up to ``bits`` bits, with the int32 extremes mixed in."""
    x = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n)
    if n >= 4:
        x[rng.choice(n, 2, replace=False)] = I32
    return x


def words(rng: np.random.Generator, n: int) -> np.ndarray:
    """C words of ``n`` columns: random multipliers and shifts over the whole vu_scale range, the extremes mixed in."""
    mult, shift = rng.integers(0, 1 << 16, n), rng.integers(0, 64, n)
    if n >= 4:
        mult[:2], shift[:2] = (0, (1 << 16) - 1), (63, 0)
    return mult | shift << 16


def assert_run_equal(drv: VecUnit, job: vu.Job, params) -> vu.Output:
    """The driver's :meth:`VecUnit.run` equals the golden model's output, SATURATED and cycles."""
    want, got = vu.run(job, params), drv.run(job)
    assert want.err == 0
    assert (got.y == want.y).all() and got.y.shape == want.y.shape
    assert (got.saturated, got.cycles, got.err) == (want.saturated, want.cycles, 0)
    assert drv.saturated == want.saturated and drv.cycles - drv.stall == want.cycles
    assert (drv.beats_in, drv.beats_out) == (len(job.x), len(want.y))
    return want


@pytest.mark.parametrize("params", [None, SMALL], ids=["default", "small"])
def test_every_operation_equals_the_golden_model(params):
    """Each operation's method on random vectors (the int32 extremes and C-word extremes among them) returns what
    the golden model's job gives, and SATURATED and the cycles are the model's."""
    drv, _ = golden_driver(params)
    p = vu.build(params)
    assert drv.params == p and drv.max_out_beats == p["LEN_MAX"]
    rng = np.random.default_rng(11)
    for trial in range(6):
        n = int(rng.integers(1, min(p["LEN_MAX"], 300) + 1))
        x, w = values(rng, n), words(rng, n)
        planes2 = bool(trial % 2)
        want = vu.run(vu.quant_job(x, w, planes2), p)
        x1, x2 = drv.quant(x, w, planes2)
        assert np.array_equal((x1, x2), vu.unpack_planes(want.y)) and drv.saturated == want.saturated
        assert planes2 or not x2.any()

        parts = int(rng.integers(1, p["PARTS_MAX"] + 1))
        sums, wmask = values(rng, parts * n, 32).reshape(parts, n), int(rng.integers(0, 1 << parts))
        res = values(rng, n) if trial % 3 else None
        want = vu.run(vu.deq_job(sums, w, wmask, res, bool(trial % 2)), p)
        assert (drv.deq(sums, w, wmask, res, bool(trial % 2)) == want.y).all() and drv.saturated == want.saturated

        eps = int(rng.integers(0, 1 << 32))
        want = vu.run(vu.normq_job(x, w, eps, planes2), p)
        assert np.array_equal(drv.normq(x, w, eps, planes2), vu.unpack_planes(want.y))
        assert drv.saturated == want.saturated and drv.cycles - drv.stall == want.cycles

        half = int(2 ** rng.integers(0, p["HALF_MAX"].bit_length()))
        heads = int(rng.integers(1, max(1, min(p["LEN_MAX"], 256) // (2 * half)) + 1))
        xr, turns = values(rng, heads * 2 * half, 32), rng.integers(0, 1 << 32, half)
        pos = int(rng.integers(0, 1 << 32))
        want = vu.run(vu.rope_job(xr, turns, pos, half), p)
        assert (drv.rope(xr, turns, pos, half) == want.y).all() and drv.saturated == want.saturated

        g, u = values(rng, n, 26), values(rng, n, 32)
        want = vu.run(vu.silu_job(g, u), p)
        assert (drv.silu(g, u) == want.y).all() and drv.saturated == want.saturated

        k = int(rng.integers(1, min(p["K_MAX"], n) + 1))
        xt = rng.integers(-50, 50, n)                       # few distinct values: ties
        idx, val = drv.topk(xt, k)
        assert np.array_equal((idx, val), vu.unpack_topk(vu.run(vu.topk_job(xt, k), p).y))
        assert (val == xt[idx]).all() and len(idx) == k
    assert drv.jobs == 6 * 6


def test_edge_cases_equal_the_golden_model():
    """The limits of every operation: LEN 1 and LEN_MAX, QUANT at SHIFT 0 and 63 and MULT 0, DEQ of PARTS_MAX
    parts at int32 extremes into Q7.8 with a residual, NORMQ of a zero row (r at its top) and of the extremes,
    ROPE at HALF 1 and HALF_MAX and the last position, SILU beyond the sigmoid table, TOPK of K_MAX and of LEN
    values all equal, and real scales from vu_scale_words / vu_turns."""
    drv, _ = golden_driver(SMALL)
    p = vu.build(SMALL)
    n, top = p["LEN_MAX"], p["PARTS_MAX"]
    rng = np.random.default_rng(5)
    ext = np.resize(np.array(I32), n)
    jobs = [vu.quant_job([I32[1]], [65535], True), vu.quant_job(ext, np.full(n, 65535), True),
            vu.quant_job(ext, np.full(n, 65535 | 63 << 16), True), vu.quant_job(ext, np.zeros(n, np.int64), False),
            vu.quant_job(values(rng, n), vu_scale_words(rng.uniform(1e-4, 0.5, n)), True),
            vu.deq_job(np.full((top, n), I32[0]), np.full(n, 65535), (1 << top) - 1, np.full(n, I32[0]), True),
            vu.deq_job(np.full((top, n), I32[1]), np.full(n, 65535), (1 << top) - 1, np.full(n, I32[1])),
            vu.deq_job(values(rng, n, 32)[None], vu_scale_words(rng.uniform(1e-6, 1e-3, n)), 0, sat16=True),
            vu.normq_job(np.zeros(n, np.int64), words(rng, n), 0), vu.normq_job(ext, np.full(n, 65535), 0),
            vu.normq_job([1], [65535 | 8 << 16], (1 << 32) - 1, False),
            vu.rope_job(values(rng, 2, 32), [(1 << 32) - 1], (1 << 32) - 1, 1),
            vu.rope_job(ext, vu_turns(10000.0 ** -(np.arange(16) / 16)), 8191, 16),
            vu.silu_job(np.resize(np.array([-(17 << 16), 17 << 16, -(16 << 16), 16 << 16, 0]), n), ext),
            vu.topk_job(np.zeros(n, np.int64), p["K_MAX"]), vu.topk_job([I32[0]], 1),
            vu.topk_job(ext, p["K_MAX"])]
    outs = [assert_run_equal(drv, job, p) for job in jobs]
    assert outs[1].saturated == n and outs[3].saturated == 0 and outs[5].saturated == n
    assert (outs[-3].y.reshape(-1, 2)[:, 0] == np.arange(p["K_MAX"])).all()     # ties: the lower index first


class ShortStream(RowStream):
    """A stream that loses the frame's last beat (a DMA programmed one beat short)."""

    def __init__(self, inner: RowStream) -> None:
        self.inner = inner

    def send(self, codes: np.ndarray) -> None:
        self.inner.send(codes[:-4])                  # 4 int16 words: one 64-bit beat


def raw_job(drv: VecUnit, job: vu.Job, beats: np.ndarray | None = None) -> None:
    """``job``'s registers, START and its frame (``beats``: these X / C rows instead), past the driver's checks."""
    for name, v in job.registers().items():
        drv.write_reg(name, v)
    drv.start()
    x, c = (job.x, job.c) if beats is None else beats
    drv.stream.send_parts([vu_frame_bytes(x, c)])


def test_core_errors_are_named_and_a_soft_reset_recovers():
    drv, model = golden_driver(SMALL)
    rng = np.random.default_rng(6)
    job = vu.silu_job(values(rng, 20), values(rng, 20))
    want = vu.run(job, SMALL).y
    # raw register traffic leaves the core in error: the next call is refused, naming it, until a soft reset
    drv.write_reg("LEN", 0)
    drv.start()
    assert drv.read_fields("STATUS")["ERROR"] and drv.cmap.decode_err(drv.read_reg("ERR")) == ["BAD_LEN"]
    with pytest.raises(CoreError, match="BAD_LEN"):
        drv.run(job)
    drv.soft_reset()
    assert (drv.run(job).y == want).all()
    # raw jobs whose frame ends a beat short or runs a beat long: SHORT_STREAM / LONG_STREAM, no output
    for beats, bit in (((job.x[:-1], job.c[:-1]), "SHORT_STREAM"),
                       ((np.append(job.x, 1), np.append(job.c, 0)), "LONG_STREAM")):
        raw_job(drv, job, beats)
        assert drv.cmap.decode_err(drv.read_reg("ERR")) == [bit] and not model.frames
        with pytest.raises(CoreError, match=bit):
            drv.run(job)
        drv.soft_reset()
        assert (drv.run(job).y == want).all()
    # a raw START whose frame never comes: the core is BUSY, the call refused without a write
    drv.write_reg("OP", VU_OP["TOPK"])
    drv.start()
    with pytest.raises(SpecdecError, match="BUSY"):
        drv.run(job)
    assert drv.read_reg("OP") == VU_OP["TOPK"]
    drv.soft_reset()
    assert (drv.run(job).y == want).all()
    # the driver's own job cut short on the way: CoreError, and the driver leaves the core idle
    good = drv.stream
    drv.attach(ShortStream(good), drv.sink)
    with pytest.raises(CoreError, match="SHORT_STREAM"):
        drv.run(job)
    assert drv.read_reg("ERR") == 0 and not drv.read_fields("STATUS")["BUSY"]
    drv.attach(good, drv.sink)
    assert (drv.run(job).y == want).all()
    # a start check only the core makes (the driver believes in a larger build): its ERR bit, then idle
    drv.params = {**drv.params, "K_MAX": 8}
    with pytest.raises(CoreError, match="BAD_K"):
        drv.topk(np.arange(10), 6)
    assert drv.read_reg("ERR") == 0 and not drv.read_fields("STATUS")["BUSY"]
    assert (drv.run(job).y == want).all()


def test_bad_input_is_refused_before_the_core():
    drv, model = golden_driver(SMALL)
    rng = np.random.default_rng(2)
    x, w = values(rng, 8), words(rng, 8)
    base = drv.quant(x, w)
    quant = vu.quant_job(x, w)
    cases = [(lambda: drv.quant(np.append(x[:-1], 1 << 31), w), r"X words: value 2147483648 outside"),
             (lambda: drv.quant(x, np.append(w[:-1], 1 << 32)), r"C words: value 4294967296 outside"),
             (lambda: drv.quant(x, w[:-1]), r"8 X words and 7 C words"),
             (lambda: drv.quant(x.astype(float), w), r"QUANT values must be a 1-D integer vector"),
             (lambda: drv.quant(np.zeros(0, np.int64), np.zeros(0, np.int64)), r"QUANT: LEN=0 outside .*1..256"),
             (lambda: drv.quant(np.zeros(257, np.int64), np.zeros(257, np.int64)), r"LEN=257 outside .*1..256"),
             (lambda: drv.deq(np.zeros((5, 8), np.int64), w, 0), r"DEQ: PARTS=5 outside the core's 1..4"),
             (lambda: drv.deq(np.zeros((2, 8), np.int64), w, 1 << 32), r"WMASK=4294967296 does not fit"),
             (lambda: drv.normq(x, w, -1), r"EPS=-1 does not fit"),
             (lambda: drv.rope(np.zeros(64, np.int64), np.zeros(32, np.int64), 0, 32),
              r"ROPE: HALF=32 must be 1..16"),
             (lambda: drv.rope(x, np.zeros(4, np.int64), 1 << 32, 4), r"POS=4294967296 does not fit"),
             (lambda: drv.rope(x, np.zeros(3, np.int64), 0, 3), r"whole heads of 2 \* 3"),
             (lambda: drv.run(vu.Job(VU_OP["ROPE"], 8, x, w, half=3)), r"HALF=3 .* LEN=8 a multiple of 2 \* HALF"),
             (lambda: drv.topk(x, 0), r"TOPK: K=0 outside 1..4"),
             (lambda: drv.topk(x[:3], 4), r"K=4 outside 1..3 .* at most LEN=3"),
             (lambda: drv.run(vu.Job(6, 8, x, w)), r"OP=6 is not an operation"),
             (lambda: drv.run(vu.Job(VU_OP["SILU"], 8, x, w)), r"SILU of LEN=8 takes 16 s_axis beats, got a frame "
                                                               r"of 8"),
             (lambda: drv.run(vu.Job(VU_OP["QUANT"], 8, x, w, pos=1.0)), r"POS must be an integer")]
    for call, words_ in cases:
        regs = {r: drv.read_reg(r) for r in REGS}
        with pytest.raises(ValueError, match=words_):
            call()
        assert {r: drv.read_reg(r) for r in REGS} == regs and model.pending is None and not model.frames
        assert not drv.read_fields("STATUS")["BUSY"] and drv.read_reg("ERR") == 0
    assert np.array_equal(drv.quant(x, w), base) and drv.run(quant).err == 0


def test_beats_are_packed_as_the_contract_says():
    """An s_axis beat is the little-endian 64-bit word X (bits 31..0, two's complement) | C << 32, as the C++
    reference packs it; the golden model's unpacking inverts it; m_axis words read back as int32 values; a word
    outside its width is refused by name."""
    rng = np.random.default_rng(9)
    x = np.concatenate([values(rng, 30, 32), I32])
    c = np.concatenate([rng.integers(0, 1 << 32, 30), [0, (1 << 32) - 1]])
    data = vu_frame_bytes(x, c)
    assert data.shape == (32, 8) and data.dtype == np.uint8
    word = data.view("<u8").ravel()
    assert (word == ((x & 0xFFFFFFFF) | c << 32).astype(np.uint64)).all()
    assert (word == cpp.vecunit_beats(x, c)).all()
    gx, gc = vu_frame_words(data.reshape(-1).view("<i2"))
    assert (gx == x).all() and (gc == c).all()
    assert vu_out_values([0, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]).tolist() == [0, I32[1], I32[0], -1]
    with pytest.raises(ValueError, match=r"X words: value -2147483649 outside"):
        vu_frame_bytes([I32[0] - 1], [0])
    with pytest.raises(ValueError, match=r"a frame is whole beats of 8 bytes, got 12 bytes"):
        vu_frame_words(np.zeros(12, np.uint8))


def test_unattached_driver_is_refused():
    dev = GoldenDevice({0: "vecunit"}, {0: {}})
    drv = VecUnit(description("vecunit", dev))
    with pytest.raises(SpecdecError, match="no stream or sink attached"):
        drv.silu([1], [2])
    drv.attach(dev.stream(0), dev.sink(0))
    assert drv.silu([1 << 16], [1 << 16]).tolist() == vu.run(vu.silu_job([1 << 16], [1 << 16])).y.tolist()


def test_the_driver_on_the_rtl():
    """``bench_vecunit`` (specdec.sim.cocotb_bench): the driver over the RTL simulation (Verilator, the default
    build), every operation on the EAGLE head's shapes: every output equals the golden model's (checked inside),
    SATURATED too, and BUSY - STALL is the cycle model; a SILU frame a beat short, after Y words have left, raises
    CoreError naming SHORT_STREAM, and the same job then runs clean."""
    res = run_bench("vecunit", "bench_vecunit", "verilator", {}, seed=3)
    assert set(res) == set(VU_OP) | {"SHORT_STREAM"}
    rec = res.pop("SHORT_STREAM")
    assert rec["bits"] == ["SHORT_STREAM"] and rec["cycles"] == rec["model_cycles"]
    for r in res.values():
        assert r["cycles"] == r["cycles_busy"] - r["cycles_stall"] == r["model_cycles"]
