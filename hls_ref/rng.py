"""rng: golden model of the xoshiro128++ generator (bit-exact with fpga.rng and hls_ref/cpp/rng.cpp).

Pure functions: a state goes in, outputs and the new state come out; nothing is hidden.
"""
from __future__ import annotations

import numpy as np

from hwcontract.formats import integers_in
from hwcontract.regmap import integer

M32 = 0xFFFFFFFF


def _rotl(x: np.ndarray, k: int) -> np.ndarray:
    return (x << np.uint32(k)) | (x >> np.uint32(32 - k))


def check_seed(seed) -> np.ndarray:
    """A seed as a uint32[4] array (s[0] first); an all-zero or ill-sized seed raises ValueError."""
    s = np.asarray(seed)
    if s.shape[-1:] != (4,):
        raise ValueError(f"seed must have 4 words s[0..3], got shape {s.shape}")
    s = integers_in("seed words", s, 0, M32).astype(np.uint32)
    if np.any(np.all(s == 0, axis=-1)):
        raise ValueError("seed is all zero: xoshiro128++ would output zeros forever")
    return s


def xoshiro128pp(state, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` outputs of xoshiro128++ from ``state``.

    Parameters
    ----------
    state : array_like of uint32, shape (..., 4)
        s[0..3]; leading axes run independent generators side by side (vectorised).
    n : int
        Steps.

    Returns
    -------
    out : ndarray of uint32, shape (..., n)
    new_state : ndarray of uint32, shape (..., 4)
    """
    n = integer(n, "n")             # 2.5 and True refused by name, not as numpy's
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    s = check_seed(state).copy()
    if s.ndim == 1:
        return _one_generator(s, n)
    s0, s1, s2, s3 = (s[..., i].copy() for i in range(4))
    out = np.empty(s.shape[:-1] + (n,), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for i in range(n):
            out[..., i] = _rotl(s0 + s3, 7) + s0
            t = s1 << np.uint32(9)
            s2 ^= s0
            s3 ^= s1
            s1 ^= s2
            s0 ^= s3
            s2 ^= t
            s3 = _rotl(s3, 11)
    return out, np.stack([s0, s1, s2, s3], axis=-1)


def _one_generator(s: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`xoshiro128pp` for one generator, on Python ints: the same words, without numpy's cost per
    operation on a scalar (about 20 times the arithmetic's)."""
    s0, s1, s2, s3 = (int(v) for v in s)
    out = [0] * n
    for i in range(n):
        r = (s0 + s3) & M32
        out[i] = (((r << 7) | (r >> 25)) + s0) & M32
        t = (s1 << 9) & M32
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 11) | (s3 >> 21)) & M32
    return np.array(out, dtype=np.uint32), np.array([s0, s1, s2, s3], dtype=np.uint32)


def uniform(words: np.ndarray, bits: int = 24) -> np.ndarray:
    """The uniform fraction in [0, 1) that the hardware compares with: the top ``bits`` (1..32) of each word."""
    if not 1 <= integer(bits, "bits") <= 32:
        raise ValueError(f"bits must be in 1..32 (of a 32-bit word), got {bits}")     # 40: the shift gives zeros
    return (np.asarray(words, dtype=np.uint32) >> np.uint32(32 - bits)).astype(np.float64) / float(1 << bits)
