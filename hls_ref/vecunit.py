"""vecunit: golden model of the vector unit (docs/vecunit.md).

A job streams one vector through one operation. Its s_axis beats carry a data word X (int32) and a constant word
C (uint32); its m_axis beats one word Y each. Values are Q15.16 (``VQ_FRAC``); every right shift is arithmetic
(floor) and every rounding half up (``(v + 2**(S-1)) >> S``, no constant at S = 0). ``sat_b`` clips to
-2**(b-1)..2**(b-1)-1 and counts the clipped outputs in SATURATED.

* QUANT (LEN beats, C = MULT | SHIFT << 16 per column): ``u = X * MULT``, ``x1 = clip127(rnd(u, S))``, and with
  PLANES2 ``x2 = clip127(rnd((u - x1 * 2**S) * 127, S))`` (the first plane's residual at 1/127 of its step);
  Y = x1 & 0xff | (x2 & 0xff) << 8, sign-extended from bit 15. A clipped x1 counts.
* DEQ (per element PARTS beats, and one more with RES): ``acc = sum_p X_p * (127 if WMASK bit p else 1)``,
  ``v = rnd(acc * MULT, S)`` with the first part's C, ``+ X_res`` with RES, then sat_32 (sat_16 with SAT16).
* NORMQ (the row twice): pass 1 ``ss = sum X**2`` (exact, Q.32), ``m = ((ss * NORM_MULT) >> 32) + EPS``,
  ``r = min(isqrt(floor(2**80 / m)), 2**40 - 1)`` (``2**40 - 1`` for m = 0: 1 / sqrt(mean) in Q.24); pass 2
  ``t = sat_32 uncounted (rnd(X * r, 24))``, then QUANT of t with the beat's C.
* ROPE (LEN = heads * 2 HALF beats, C = the element's frequency F in turns a position, Q.32): for i < HALF of
  a head, with F from the beat of element i + HALF, ``p = (POS * F) mod 2**32``, cos and sin of p from the
  quarter-wave table (:func:`sincos`), ``y_i = sat_32(rnd(x_i c - x_{i+HALF} s, 15))`` and
  ``y_{i+HALF} = sat_32(rnd(x_{i+HALF} c + x_i s, 15))``.
* SILU (per element g then u): ``y = sat_32(rnd(rnd(g * sigmoid(g), 16) * u, 16))`` with sigmoid from the
  table (:func:`sigmoid`) in Q0.16.
* TOPK (LEN beats): the K largest X (ties: the lower index first), as 2 K beats: index, then value.

The functions are pure: the same integers in give the same integers out, and every face of the core (C++, MyHDL,
the driver on any backend) is checked against them. :func:`cycles` is the cycle model.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hwcontract import params as hwparams
from hwcontract.formats import (VQ_FRAC, VU_NORM_SHIFT, VU_OP, VU_PLANE, VU_RSQRT_BITS, VU_RSQRT_FRAC, VU_SIG_FRAC,
                                VU_SIG_RANGE, VU_SIG_STEP_BITS, VU_SIN_STEPS, VU_TRIG_FRAC, as_array, integer_dtype,
                                integers_in, vu_sigmoid_table, vu_sin_table)
from hwcontract.latency import VU_CHECK, VU_RSQRT, VU_TAIL
from hwcontract.regmap import REG_BITS, VU_OPS, core, integer

_MAP = core("vecunit")
ERR = {f.name: f.mask for f in _MAP.reg("ERR").fields}
FLAG = {f.name: f.mask for f in _MAP.reg("FLAGS").fields}
ACT_MAX = VU_PLANE                  # int8 codes are clipped to +-127
SIN_TAB = vu_sin_table()
SIG_TAB = vu_sigmoid_table()
_I32 = (-(1 << 31), (1 << 31) - 1)
_I16 = (-(1 << 15), (1 << 15) - 1)
_QUARTER = 1 << 30
_SIN_IDX = 30 - (VU_SIN_STEPS.bit_length() - 1)       # a quarter turn's top 8 bits index the table
_SIN_FRAC = 16                                       # ... and the next 16 interpolate


def build(params: Mapping[str, object] | None = None) -> dict[str, int]:
    """The build parameters (hwcontract.params core "vecunit"): the defaults overridden by ``params``."""
    return hwparams.check("vecunit", params)


@dataclass(frozen=True)
class Job:
    """One job: its registers and its s_axis frame (``x``: the X words, int32 values; ``c``: the C words, uint32
    values; one each a beat, in stream order)."""

    op: int
    length: int
    x: np.ndarray
    c: np.ndarray
    flags: int = 0
    parts: int = 1
    wmask: int = 0
    pos: int = 0
    half: int = 32
    eps: int = 0
    norm_mult: int = 0
    k: int = 1

    def registers(self) -> dict[str, int]:
        """The rw registers the job writes, by name."""
        return {"OP": self.op, "LEN": self.length, "FLAGS": self.flags, "PARTS": self.parts, "WMASK": self.wmask,
                "POS": self.pos, "HALF": self.half, "EPS": self.eps, "NORM_MULT": self.norm_mult, "K": self.k}


@dataclass(frozen=True)
class Output:
    """What a job produces: ``y`` its m_axis words (int64 values, empty on an error), the ERR bits, SATURATED and
    the cycle model's ``CYCLES_BUSY - CYCLES_STALL`` (0 on an error)."""

    y: np.ndarray
    err: int
    saturated: int
    cycles: int


# ------------------------------------------------------------------------------------------------
# The frame's size, the start checks and the cycle model
# ------------------------------------------------------------------------------------------------

def frame_beats(op: int, length: int, parts: int = 1, flags: int = 0) -> int:
    """s_axis beats of a job (``op`` a VU_OPS index)."""
    name = VU_OPS[op]
    if name == "DEQ":
        return length * (parts + (1 if flags & FLAG["RES"] else 0))
    if name in ("NORMQ", "SILU"):
        return 2 * length
    return length


def out_beats(op: int, length: int, k: int = 1) -> int:
    """m_axis beats of a job."""
    return 2 * k if VU_OPS[op] == "TOPK" else length


def start_error(job: Job, params: Mapping[str, object] | None = None) -> int:
    """CTRL.START's checks in order, the first failing one's bit (BAD_OP, BAD_LEN, then the op's own: BAD_PARTS,
    BAD_HALF, BAD_K); 0 when all pass."""
    p = build(params)
    if not 0 <= job.op < len(VU_OPS):
        return ERR["BAD_OP"]
    if not 1 <= job.length <= p["LEN_MAX"]:
        return ERR["BAD_LEN"]
    name = VU_OPS[job.op]
    if name == "DEQ" and not 1 <= job.parts <= p["PARTS_MAX"]:
        return ERR["BAD_PARTS"]
    if name == "ROPE" and not (1 <= job.half <= p["HALF_MAX"] and job.length % (2 * job.half) == 0):
        return ERR["BAD_HALF"]
    if name == "TOPK" and not 1 <= job.k <= min(p["K_MAX"], job.length):
        return ERR["BAD_K"]
    return 0


def cycles(op: int, length: int, parts: int = 1, flags: int = 0, half: int = 32, k: int = 1) -> int:
    """The cycle model (docs/vecunit.md, "Cycle model"): ``CYCLES_BUSY - CYCLES_STALL`` of a legal job. One cycle
    an s_axis beat, after the start checks; NORMQ's reciprocal square root between its passes; ROPE's last
    stored half-head and TOPK's 2 K words after the frame; then the drain."""
    name = VU_OPS[op]
    extra = {"NORMQ": VU_RSQRT, "ROPE": half, "TOPK": 2 * k}.get(name, 0)
    return VU_CHECK + frame_beats(op, length, parts, flags) + extra + VU_TAIL


# ------------------------------------------------------------------------------------------------
# The arithmetic
# ------------------------------------------------------------------------------------------------

def rnd(v: np.ndarray, s) -> np.ndarray:
    """``(v + 2**(s-1)) >> s`` (0 added at s = 0), element by element, int64 (``v`` below 2**62)."""
    v = np.asarray(v, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    return (v + half) >> s


def _sat(v: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, int]:
    y = np.clip(v, lo, hi)
    return y, int((y != v).sum())


def scale_fields(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MULT and SHIFT of C words (vu_scale format)."""
    c = np.asarray(c, dtype=np.int64)
    return c & 0xFFFF, (c >> 16) & 0x3F


def quantize(x: np.ndarray, c: np.ndarray, planes2: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """QUANT's planes ``(x1, x2)`` (int64) of values ``x`` at C words ``c``, and how many x1 clipped."""
    mult, s = scale_fields(c)
    u = np.asarray(x, dtype=np.int64) * mult                         # |u| < 2**47
    x1, sat = _sat(rnd(u, s), -ACT_MAX, ACT_MAX)
    if not planes2:
        return x1, np.zeros_like(x1), sat
    # u - x1 * 2**S exactly: at S >= 48 every |u| < 2**(S-1) rounds to x1 = 0
    d = u - np.where(s < 48, x1 << np.minimum(s, 47), 0)             # |d| < 2**48
    x2, _ = _sat(rnd(d * VU_PLANE, s), -ACT_MAX, ACT_MAX)
    return x1, x2, sat


def plane_words(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """QUANT's Y words of planes x1 and x2: x1 in bits 7..0, x2 in 15..8, sign-extended from bit 15."""
    w = (np.asarray(x1, dtype=np.int64) & 0xFF) | ((np.asarray(x2, dtype=np.int64) & 0xFF) << 8)
    return np.where(w >= 1 << 15, w - (1 << 16), w)


def unpack_planes(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The planes (x1, x2) of QUANT / NORMQ Y words."""
    y = np.asarray(y, dtype=np.int64)
    lo, hi = y & 0xFF, (y >> 8) & 0xFF
    return np.where(lo >= 128, lo - 256, lo), np.where(hi >= 128, hi - 256, hi)


def sum_squares(x: np.ndarray) -> int:
    """``sum x**2`` exactly (a Python int) for int32 values, by 16-bit halves in int64."""
    x = np.asarray(x, dtype=np.int64)
    hi, lo = x >> 16, x & 0xFFFF
    return (int((hi * hi).sum()) << 32) + (int((hi * lo).sum()) << 17) + int((lo * lo).sum())


def rsqrt(ss: int, norm_mult: int, eps: int) -> int:
    """NORMQ's r: 1 / sqrt(mean + eps) in Q.24 for a sum of squares ``ss`` (Q.32)."""
    m = ((ss * norm_mult) >> VU_NORM_SHIFT) + eps
    top = (1 << VU_RSQRT_BITS) - 1
    if m == 0:
        return top
    return min(math.isqrt((1 << (2 * VU_RSQRT_BITS)) // m), top)


def normalize(x: np.ndarray, r: int) -> np.ndarray:
    """``sat_32(rnd(x * r, 24))`` exactly in int64 (x int32, r < 2**40), saturations uncounted."""
    x = np.asarray(x, dtype=np.int64)
    r_hi, r_lo = r >> 20, r & 0xFFFFF
    a = x * r_hi                                                     # x * r = a * 2**20 + b
    b = x * r_lo + (1 << (VU_RSQRT_FRAC - 1))
    # (a * 2**20 + b) >> 24 with a = 16 aq + ar
    t = (a >> 4) + ((((a & 0xF) << 20) + b) >> VU_RSQRT_FRAC)
    return np.clip(t, *_I32)


def _quarter(a: np.ndarray) -> np.ndarray:
    """sin(pi / 2 * a / 2**30) in Q1.15 for a in 0..2**30, from the table by linear interpolation."""
    idx = a >> _SIN_IDX
    frac = (a >> (_SIN_IDX - _SIN_FRAC)) & 0xFFFF
    lo = SIN_TAB[np.minimum(idx, VU_SIN_STEPS)]
    hi = SIN_TAB[np.minimum(idx + 1, VU_SIN_STEPS)]
    return lo + rnd((hi - lo) * frac, _SIN_FRAC)


def _sin(p: np.ndarray) -> np.ndarray:
    q, a = p >> 30, p & (_QUARTER - 1)
    v = _quarter(np.where(q & 1, _QUARTER - a, a))
    return np.where(q >= 2, -v, v)


def sincos(phase: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) in Q1.15 of phases in turns (Q.32, 0..2**32-1)."""
    p = np.asarray(phase, dtype=np.int64) & 0xFFFFFFFF
    return _sin((p + _QUARTER) & 0xFFFFFFFF), _sin(p)


def sigmoid(g: np.ndarray) -> np.ndarray:
    """sigmoid(g / 2**16) in Q0.16 from the table by linear interpolation (0 below -16, 2**16 at and above 16)."""
    g = np.asarray(g, dtype=np.int64)
    top = VU_SIG_RANGE << VQ_FRAC
    z = np.clip(g + top, 0, 2 * top - 1)
    idx, frac = z >> VU_SIG_STEP_BITS, z & ((1 << VU_SIG_STEP_BITS) - 1)
    lo, hi = SIG_TAB[idx], SIG_TAB[idx + 1]
    v = lo + rnd((hi - lo) * frac, VU_SIG_STEP_BITS)
    return np.where(g < -top, 0, np.where(g >= top, 1 << VU_SIG_FRAC, v))


# ------------------------------------------------------------------------------------------------
# A job
# ------------------------------------------------------------------------------------------------

def check(job: Job) -> Job:
    """``job`` with int64 beat arrays if every register and word fits its width: ValueError naming the first that
    does not (X outside int32, C outside uint32, a register outside 32 bits, x and c of different lengths). The
    registers' legal ranges are the core's start checks (:func:`start_error`), reported as ERR bits."""
    regs = {name: integer(v, f"vecunit: {name}") for name, v in job.registers().items()}
    for name, v in regs.items():
        if not 0 <= v < 1 << REG_BITS:
            raise ValueError(f"vecunit: {name}={v} does not fit its {REG_BITS}-bit register")
    x, c = as_array("vecunit: X words", job.x).ravel(), as_array("vecunit: C words", job.c).ravel()
    for name, a in (("X words", x), ("C words", c)):
        if not (integer_dtype(a.dtype) or a.size == 0):
            raise ValueError(f"vecunit: {name} must be integers, got dtype {a.dtype}")
    if x.shape != c.shape:
        raise ValueError(f"vecunit: {x.size} X words and {c.size} C words: one of each a beat")
    x = integers_in("vecunit: X words", x, *_I32).astype(np.int64)
    c = integers_in("vecunit: C words", c, 0, (1 << 32) - 1).astype(np.int64)
    return Job(regs["OP"], regs["LEN"], x, c, regs["FLAGS"], regs["PARTS"], regs["WMASK"], regs["POS"],
               regs["HALF"], regs["EPS"], regs["NORM_MULT"], regs["K"])


def run(job: Job, params: Mapping[str, object] | None = None) -> Output:
    """A job as the core runs it: the start checks (no beat taken on an error), then SHORT_STREAM for a frame
    shorter than the job's, LONG_STREAM for a longer one, else the operation."""
    p = build(params)
    j = check(job)
    empty = np.zeros(0, np.int64)
    err = start_error(j, p)
    if err:
        return Output(empty, err, 0, 0)
    want = frame_beats(j.op, j.length, j.parts, j.flags)
    if len(j.x) != want:
        return Output(empty, ERR["SHORT_STREAM"] if len(j.x) < want else ERR["LONG_STREAM"], 0, 0)
    y, sat = _OPS[VU_OPS[j.op]](j)
    return Output(np.asarray(y, dtype=np.int64), 0, sat, cycles(j.op, j.length, j.parts, j.flags, j.half, j.k))


def _quant(j: Job):
    x1, x2, sat = quantize(j.x, j.c, bool(j.flags & FLAG["PLANES2"]))
    return plane_words(x1, x2), sat


def _deq(j: Job):
    res = 1 if j.flags & FLAG["RES"] else 0
    beats = j.x.reshape(j.length, j.parts + res)
    weight = np.array([VU_PLANE if j.wmask >> p & 1 else 1 for p in range(j.parts)], dtype=np.int64)
    acc = beats[:, :j.parts] @ weight                                 # |acc| < 16 * 127 * 2**31 < 2**42
    mult, s = scale_fields(j.c.reshape(j.length, j.parts + res)[:, 0])
    v = rnd(acc * mult, s)                                            # |acc * MULT| < 2**58
    if res:
        v = v + beats[:, j.parts]
    return _sat(v, *(_I16 if j.flags & FLAG["SAT16"] else _I32))


def _normq(j: Job):
    first, second = j.x[:j.length], j.x[j.length:]
    t = normalize(second, rsqrt(sum_squares(first), j.norm_mult, j.eps))
    x1, x2, sat = quantize(t, j.c[j.length:], bool(j.flags & FLAG["PLANES2"]))
    return plane_words(x1, x2), sat


def _rope(j: Job):
    h = j.half
    x = j.x.reshape(-1, 2, h)
    f = j.c.reshape(-1, 2, h)[:, 1]
    phase = ((np.uint64(j.pos) * f.astype(np.uint64)) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    c, s = sincos(phase)
    lo, hi = x[:, 0], x[:, 1]
    y_lo, s1 = _sat(rnd(lo * c - hi * s, VU_TRIG_FRAC), *_I32)
    y_hi, s2 = _sat(rnd(hi * c + lo * s, VU_TRIG_FRAC), *_I32)
    return np.stack([y_lo, y_hi], 1).reshape(-1), s1 + s2


def _silu(j: Job):
    g, u = j.x[0::2], j.x[1::2]
    sg = rnd(g * sigmoid(g), VU_SIG_FRAC)                             # |g * sigmoid| < 2**47
    return _sat(rnd(sg * u, VQ_FRAC), *_I32)                          # |sg * u| < 2**62


def _topk(j: Job):
    order = np.lexsort((np.arange(j.length), -j.x))[:j.k]
    return np.stack([order, j.x[order]], 1).reshape(-1), 0


_OPS = {"QUANT": _quant, "DEQ": _deq, "NORMQ": _normq, "ROPE": _rope, "SILU": _silu, "TOPK": _topk}


# ------------------------------------------------------------------------------------------------
# Jobs from vectors (what the runtime sends), and their outputs
# ------------------------------------------------------------------------------------------------

def _vec(name: str, a) -> np.ndarray:
    arr = as_array(f"vecunit: {name}", a)
    if arr.ndim != 1 or not (integer_dtype(arr.dtype) or arr.size == 0):
        raise ValueError(f"vecunit: {name} must be a 1-D integer vector, got shape {arr.shape} dtype {arr.dtype}")
    return arr.astype(np.int64)


def quant_job(x, words, planes2: bool = True) -> Job:
    """QUANT of values ``x`` (LEN,) at C words ``words`` (LEN,)."""
    x, w = _vec("QUANT values", x), _vec("QUANT C words", words)
    return Job(VU_OP["QUANT"], len(x), x, w, FLAG["PLANES2"] if planes2 else 0)


def deq_job(parts, words, wmask: int, residual=None, sat16: bool = False) -> Job:
    """DEQ of ``parts`` (PARTS, LEN) int32 sums at C words ``words`` (LEN,), part p weighing 127 where bit p of
    ``wmask`` is set; ``residual`` (LEN,) Q15.16 values added; ``sat16``: Q7.8 codes out."""
    parts = np.asarray(parts)
    if parts.ndim != 2:
        raise ValueError(f"vecunit: DEQ parts must be (PARTS, LEN), got shape {parts.shape}")
    n, length = parts.shape
    w = _vec("DEQ C words", words)
    if len(w) != length:
        raise ValueError(f"vecunit: {len(w)} DEQ C words for {length} elements")
    cols = [parts[i] for i in range(n)]
    flags = FLAG["SAT16"] if sat16 else 0
    if residual is not None:
        res = _vec("DEQ residual", residual)
        if len(res) != length:
            raise ValueError(f"vecunit: a residual of {len(res)} values for {length} elements")
        cols.append(res)
        flags |= FLAG["RES"]
    x = np.stack(cols, 1).reshape(-1)
    c = np.zeros((length, len(cols)), dtype=np.int64)
    c[:, 0] = w
    return Job(VU_OP["DEQ"], length, x, c.reshape(-1), flags, n, wmask)


def normq_job(x, words, eps: int, planes2: bool = True) -> Job:
    """NORMQ of values ``x`` (LEN,) (the mean over LEN elements) at C words ``words`` (LEN,), epsilon ``eps``
    (Q.32)."""
    x, w = _vec("NORMQ values", x), _vec("NORMQ C words", words)
    if len(w) != len(x):
        raise ValueError(f"vecunit: {len(w)} NORMQ C words for {len(x)} values")
    nm = min(round((1 << VU_NORM_SHIFT) / max(len(x), 1)), (1 << 32) - 1)
    return Job(VU_OP["NORMQ"], len(x), np.concatenate([x, x]), np.concatenate([np.zeros_like(w), w]),
               FLAG["PLANES2"] if planes2 else 0, eps=eps, norm_mult=nm)


def rope_job(x, turns, pos: int, half: int) -> Job:
    """ROPE of values ``x`` (heads * 2 half,) at position ``pos``; ``turns`` (half,): each pair's frequency
    (:func:`hwcontract.formats.vu_turns`)."""
    x, t = _vec("ROPE values", x), _vec("ROPE turns", turns)
    if len(t) != half or len(x) % (2 * half):
        raise ValueError(f"vecunit: ROPE of {len(x)} values with {len(t)} frequencies: whole heads of 2 * {half}")
    c = np.tile(np.concatenate([t, t]), len(x) // (2 * half))
    return Job(VU_OP["ROPE"], len(x), x, c, pos=pos, half=half)


def silu_job(g, u) -> Job:
    """SILU-and-multiply of gates ``g`` and ups ``u`` (LEN,) each."""
    g, u = _vec("SILU gates", g), _vec("SILU ups", u)
    if g.shape != u.shape:
        raise ValueError(f"vecunit: {len(g)} gates and {len(u)} ups")
    return Job(VU_OP["SILU"], len(g), np.stack([g, u], 1).reshape(-1), np.zeros(2 * len(g), np.int64))


def topk_job(x, k: int) -> Job:
    """TOPK of values ``x`` (LEN,)."""
    x = _vec("TOPK values", x)
    return Job(VU_OP["TOPK"], len(x), x, np.zeros(len(x), np.int64), k=k)


def unpack_topk(y) -> tuple[np.ndarray, np.ndarray]:
    """(indices, values) of TOPK's Y words."""
    y = np.asarray(y, dtype=np.int64).reshape(-1, 2)
    return y[:, 0], y[:, 1]


# ------------------------------------------------------------------------------------------------
# The operations on vectors, over any unit that runs a job
# ------------------------------------------------------------------------------------------------

class Ops:
    """The six operations on numpy vectors over :meth:`run` (a :class:`Job` to its :class:`Output`, raising on an
    error): the one interface of the golden unit (:class:`Unit`) and the driver
    (:class:`specdec.hw.drivers.vecunit.VecUnit`). ``last``: the last job's :class:`Output` (its SATURATED and its
    cycle count, ``CYCLES_BUSY - CYCLES_STALL``)."""

    last: Output | None = None

    def run(self, job: Job) -> Output:
        """One job on the unit: its :class:`Output`, or an error raised. Each unit defines it (:class:`Unit`: the
        golden model; the driver: the core through its registers and streams); an ``Ops`` alone runs nothing. (Not
        an ``abc`` abstract method: the driver's other base, pynq's ``DefaultIP``, has a metaclass of its own.)"""
        raise NotImplementedError(f"{type(self).__name__} defines no run(job): Ops is the interface, not a unit")

    def _y(self, job: Job) -> np.ndarray:
        self.last = self.run(job)
        return self.last.y

    def quant(self, x, words, planes2: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """QUANT: the int8 planes ``(x1, x2)`` (int64, (LEN,)) of Q15.16 values ``x`` at C words ``words``
        (:func:`hwcontract.formats.vu_scale_words`); ``x2`` is 0 without ``planes2``."""
        return unpack_planes(self._y(quant_job(x, words, planes2)))

    def deq(self, parts, words, wmask: int, residual=None, sat16: bool = False) -> np.ndarray:
        """DEQ: Q15.16 values (Q7.8 codes with ``sat16``), int64 (LEN,), of the engine's int32 sums ``parts``
        (PARTS, LEN) at C words ``words``, part p weighing 127 where bit p of ``wmask`` is set, plus ``residual``."""
        return self._y(deq_job(parts, words, wmask, residual, sat16))

    def normq(self, x, words, eps: int, planes2: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """NORMQ: RMSNorm of Q15.16 values ``x`` (epsilon ``eps`` in Q.32), then QUANT at ``words``: ``(x1, x2)``."""
        return unpack_planes(self._y(normq_job(x, words, eps, planes2)))

    def rope(self, x, turns, pos: int, half: int) -> np.ndarray:
        """ROPE: Q15.16 values ``x`` (heads * 2 half,) rotated to position ``pos``; ``turns`` (half,) each pair's
        frequency (:func:`hwcontract.formats.vu_turns`)."""
        return self._y(rope_job(x, turns, pos, half))

    def silu(self, g, u) -> np.ndarray:
        """SILU: ``silu(g) * u`` of Q15.16 gates and ups (LEN,) each."""
        return self._y(silu_job(g, u))

    def topk(self, x, k: int) -> tuple[np.ndarray, np.ndarray]:
        """TOPK: the indices and values of the ``k`` largest of ``x`` (LEN,), largest first (ties: lower index)."""
        return unpack_topk(self._y(topk_job(x, k)))


class Unit(Ops):
    """The golden model as a unit of build ``params``: a job the core would refuse raises ValueError naming ERR."""

    def __init__(self, params: Mapping[str, object] | None = None) -> None:
        self.params = build(params)

    def run(self, job: Job) -> Output:
        out = run(job, self.params)
        if out.err:
            raise ValueError(f"vecunit ({VU_OPS[job.op]} of {job.length} elements): ERR {out.err:#x}")
        return out
