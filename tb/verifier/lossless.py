"""Losslessness checks shared by the golden-model tests and the RTL testbench.

A round is lossless when the first token it emits follows the target's fixed-point distribution while the
draft tokens follow the draft's. Each check is a chi-square goodness-of-fit test at a false-alarm rate of
``ALPHA`` (bins with expected count < 5 pooled into one).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from specdec.regmap import LOGIT_NEG_INF

ALPHA = 1e-3


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit; bins with expected count < 5 are pooled into one bin.

    A token of probability 0 that came out gives 0.0.
    """
    n = counts.sum()
    exp = probs * n
    zero = exp == 0
    if counts[zero].any():
        return 0.0
    big = exp >= 5
    obs_b, exp_b = list(counts[big]), list(exp[big])
    small = ~big & ~zero
    if small.any():
        obs_b.append(counts[small].sum())
        exp_b.append(exp[small].sum())
    obs_b, exp_b = np.array(obs_b, dtype=float), np.array(exp_b)
    if len(obs_b) < 2:
        return 1.0
    return float(stats.chisquare(obs_b, exp_b * obs_b.sum() / exp_b.sum()).pvalue)


def make_family(name: str, vocab: int, rng: np.random.Generator, g: int):
    """Target rows p (g+1, V) and draft rows q (g, V) of one of the test families.

    ``random``: independent rows; ``equal``: q == p; ``disjoint``: p lives on the upper half of the
    vocabulary, q on the lower; ``peaked_p`` / ``peaked_q``: one token carries almost all the mass.
    """
    p = rng.integers(-1500, 1, (g + 1, vocab)).astype(np.int16)
    q = rng.integers(-1500, 1, (g, vocab)).astype(np.int16)
    if name == "equal":
        q = p[:g].copy()
    elif name == "disjoint":
        half = vocab // 2
        p[:, :half] = LOGIT_NEG_INF
        q[:, half:] = LOGIT_NEG_INF
    elif name == "peaked_p":
        p = rng.integers(-12000, -6000, (g + 1, vocab)).astype(np.int16)
        p[:, 1] = 0
    elif name == "peaked_q":
        q = rng.integers(-12000, -6000, (g, vocab)).astype(np.int16)
        q[:, 2] = 0
    elif name != "random":
        raise ValueError(f"unknown family {name!r}")
    return p, q
