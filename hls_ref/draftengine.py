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

from hwcontract.formats import DE_BIAS_BITS, DE_K_LIMIT, DE_MULT_BITS, DE_OPERAND_BITS, DE_OUT_BITS, DE_SHIFT_MAX

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
    arr = np.asarray(a)
    if arr.ndim != ndim or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"{name}: expected a {ndim}-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = arr[(arr < lo) | (arr > hi)]
    if bad.size:
        raise ValueError(f"{name}: value {int(bad.flat[0])} outside {lo}..{hi}")
    return arr


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
