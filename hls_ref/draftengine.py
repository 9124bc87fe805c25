"""draftengine: golden model of the int8 draft engine's arithmetic (docs/draftengine.md).

One job multiplies M int8 activation vectors (tokens) by an N x K int8 weight matrix and requantizes each
output channel n in the fabric::

    acc[m, n] = sum_k x[m, k] * w[n, k]                     (int32: |acc| < 2**31 for K <= DE_K_LIMIT)
    t         = acc + BIAS[n]                               (exact, 33 bits)
    OUT_BITS 8 or 16:  y = sat_b((t * MULT[n] + R) >> SHIFT[n]),  R = 2**(SHIFT[n] - 1) if SHIFT[n] else 0
    OUT_BITS 32:       y = sat_32(t)

``>>`` is an arithmetic shift (floor), so the rounding is half up (towards +inf). ``sat_b`` clips to
-2**(b-1)..2**(b-1)-1 and each clipped output counts in the job's saturation count, which the driver
reports. The functions are pure: the same integers in give the same integers out, and every face of the
core (C++, MyHDL, the driver on any backend) is checked against them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwcontract.formats import (DE_BIAS_BITS, DE_K_LIMIT, DE_MULT_BITS, DE_OPERAND_BITS, DE_OUT_BITS, DE_SHIFT_MAX,
                                as_array, de_param_fields, integer_dtype, integers_in)
from hwcontract.latency import DE_CHECK, de_pipe

_LO, _HI = -(1 << (DE_OPERAND_BITS - 1)), (1 << (DE_OPERAND_BITS - 1)) - 1


@dataclass(frozen=True)
class Job:
    """One job's integers: activations ``x`` (M, K), weights ``w`` (N, K), and per-channel ``bias``, ``mult``,
    ``shift`` (N,), with the output width ``out_bits``."""

    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    out_bits: int


@dataclass(frozen=True)
class Output:
    """What a job produces: ``y`` (M, N) int64 values inside ``out_bits`` and the count of saturated outputs."""

    y: np.ndarray
    saturated: int


def _ints(name: str, a, lo: int, hi: int, ndim: int) -> np.ndarray:
    arr = as_array(name, a)
    if arr.ndim != ndim or not (integer_dtype(arr.dtype) or arr.size == 0):
        raise ValueError(f"{name}: expected a {ndim}-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    return integers_in(name, arr, lo, hi).astype(np.int64)       # the range before the cast


def check(job: Job) -> Job:
    """``job`` with every array as int64 if its shapes and ranges are legal; ValueError naming the bad one."""
    x = _ints("activations", job.x, _LO, _HI, 2)
    w = _ints("weights", job.w, _LO, _HI, 2)
    m, k = x.shape
    n = w.shape[0]
    if m < 1 or k < 1 or n < 1:
        raise ValueError(f"shape M={m} K={k} N={n}: every dimension must be at least 1")
    if w.shape[1] != k:
        raise ValueError(f"weights are {w.shape[0]} x {w.shape[1]}, activations have K={k} columns")
    if k > DE_K_LIMIT:
        raise ValueError(f"K={k} above {DE_K_LIMIT}: the int32 accumulator could overflow")
    if job.out_bits not in DE_OUT_BITS:
        raise ValueError(f"out_bits={job.out_bits!r} not in {DE_OUT_BITS}")
    half = 1 << (DE_BIAS_BITS - 1)
    bias = _ints("bias", job.bias, -half, half - 1, 1)
    mult = _ints("mult", job.mult, 0, (1 << DE_MULT_BITS) - 1, 1)
    shift = _ints("shift", job.shift, 0, DE_SHIFT_MAX, 1)
    for name, a in (("bias", bias), ("mult", mult), ("shift", shift)):
        if a.shape != (n,):
            raise ValueError(f"{name}: expected one value per output channel ({n}), got shape {a.shape}")
    return Job(x, w, bias, mult, shift, int(job.out_bits))


def matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` exactly, as int64 (M, N), for int8-range operands with K <= DE_K_LIMIT.

    The product runs as float64 BLAS: every partial sum is an integer below 2**31 < 2**53, so it is exact.
    """
    return (np.asarray(x, dtype=np.float64) @ np.asarray(w, dtype=np.float64).T).astype(np.int64)


def requant(acc: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: np.ndarray,
            out_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The fabric's requantization of int32 sums ``acc`` (M, N): ``(y, saturated)``, both (M, N)."""
    t = np.asarray(acc, dtype=np.int64) + bias
    if out_bits == 32:
        v = t
    else:
        v = (t * mult + (np.left_shift(np.int64(1), shift) >> 1)) >> shift      # + 2**(SHIFT-1), 0 at SHIFT 0           # |t * mult| < 2**49: no int64 overflow
    lo, hi = -(1 << (out_bits - 1)), (1 << (out_bits - 1)) - 1
    y = np.clip(v, lo, hi)
    return y, y != v


def run(job: Job) -> Output:
    """One job, checked (ValueError on a bad shape or value), then computed."""
    j = check(job)
    y, sat = requant(matmul(j.x, j.w), j.bias, j.mult, j.shift, j.out_bits)
    return Output(y, int(sat.sum()))


# ------------------------------------------------------------------------------------------------
# The core around the arithmetic: its memories, its checks, its cycle count (fpga/draftengine.py)
# ------------------------------------------------------------------------------------------------

#: What a weight or parameter byte never loaded reads as in this model: zero. The core's memories have no
#: initial value (an UltraRAM has none; Icarus shows X, Verilator 0), so a RUN's result is defined only over
#: beats that were loaded: :func:`memory_run` computes from the beats WBASE.. and PBASE.. of the job's own tiles,
#: which the driver loads whole (``DraftEngine.place``: every tile's beats, padding included), and the core
#: reads no other beat into a result.
UNLOADED = 0

def tiles(m: int, k: int, n: int, rows: int, cols: int) -> tuple[int, int, int]:
    """``(NT, KC, AB)`` of a RUN: output tiles ceil(N/ROWS), weight chunks per tile ceil(K/COLS) and activation
    beats per token ceil(K/(ROWS*COLS))."""
    return -(-n // rows), -(-k // cols), -(-k // (rows * cols))


def cycles(op: str, beats: int, m: int = 0, k: int = 0, n: int = 0, rows: int = 8, cols: int = 8,
           wpipe: int = 0) -> int:
    """The RTL's ``CYCLES_BUSY - CYCLES_STALL`` of one operation that ran to DONE.

    ``DE_CHECK`` cycles, one per s_axis beat, and for a RUN one per MAC issue (``M * NT * KC``: the array
    does one weight beat per cycle) plus the pipeline (``hwcontract.latency.de_pipe``, with ``wpipe`` registers
    after the weight memory's read: ``hwcontract.latency.de_wpipe`` of the build) and the last beat's handshake.
    """
    c = DE_CHECK + beats
    if op == "RUN":
        nt, kc, _ = tiles(m, k, n, rows, cols)
        c += m * nt * kc + de_pipe(cols, wpipe) + 1
    return c


def mac_utilisation(m: int, k: int, n: int, rows: int, cols: int) -> float:
    """Useful MACs over the array's MAC slots in a RUN's issue cycles (padding past N and K is the loss)."""
    nt, kc, _ = tiles(m, k, n, rows, cols)
    return (m * k * n) / (m * nt * kc * rows * cols)


def memory_run(wbeats: np.ndarray, pbeats: np.ndarray, abeats: np.ndarray, m: int, k: int, n: int, out_bits: int,
               rows: int, cols: int) -> tuple[np.ndarray, int]:
    """A RUN computed from what the core's memories hold, as the RTL computes it: ``(lanes, saturated)``.

    ``wbeats`` (NT * KC, ROWS*COLS) uint8 are the weight beats WBASE.., ``pbeats`` (NT, ROWS*COLS) the parameter
    tiles PBASE.., ``abeats`` (M * AB, ROWS*COLS) the activation beats. Every lane of every tile is computed
    (lanes past N from whatever the memories hold there; features past K inside the last chunk included);
    ``lanes`` is (NT * M, ROWS) int64 in m_axis order, ``saturated`` counts lanes below N only.
    """
    nt, kc, ab = tiles(m, k, n, rows, cols)
    rc = rows * cols
    w = np.asarray(wbeats, np.uint8).view(np.int8).reshape(nt, kc, rows, cols).transpose(0, 2, 1, 3)
    w = w.reshape(nt * rows, kc * cols)
    x = np.asarray(abeats, np.uint8).view(np.int8).reshape(m, ab * rc)[:, :kc * cols]
    bias, mult, shift = de_param_fields(pbeats, rows)
    if out_bits == 32:
        mult, shift = np.ones_like(mult), np.zeros_like(shift)
    acc = matmul(x, w)
    acc = ((acc + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)        # the int32 accumulator wraps (K <= DE_K_LIMIT never does)
    y, sat = requant(acc, bias, mult, shift, out_bits)
    lanes = y.reshape(m, nt, rows).transpose(1, 0, 2).reshape(nt * m, rows)
    return lanes, int(sat[:, :n].sum())
