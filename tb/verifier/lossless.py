"""Losslessness checks shared by the golden-model tests and the RTL testbench.

A round is lossless when the first token it emits follows the target's fixed-point distribution while the
draft tokens follow the draft's. Each check is a chi-square goodness-of-fit test at a false-alarm rate of
``ALPHA`` (bins with expected count < 5 pooled into one).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from hwcontract.formats import LOGIT_NEG_INF

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


# ------------------------------------------------------------------------------------------------
# Tree mode
# ------------------------------------------------------------------------------------------------

#: The fixed test tree: three children at the root (nodes 1, 2, 3; node 3 repeats node 1's token), two
#: under the first child (nodes 4, 5).
TREE_PARENTS = (0, 0, 0, 0, 1, 1)


def make_tree_case(vocab: int, rng: np.random.Generator, inv_temp: int):
    """Rows (one per node of :data:`TREE_PARENTS`) and tokens: the root's children propose its two most
    likely tokens and the most likely once more (a duplicate); node 1's children its two most likely
    tokens. ``vocab`` >= 2."""
    from hls_ref.verifier import fixed_point_dist
    rows = rng.integers(-1500, 1, (len(TREE_PARENTS), vocab)).astype(np.int16)
    top0 = np.argsort(-fixed_point_dist(rows[0], inv_temp), kind="stable")
    top1 = np.argsort(-fixed_point_dist(rows[1], inv_temp), kind="stable")
    tokens = (0, int(top0[0]), int(top0[1]), int(top0[0]), int(top1[0]), int(top1[1]))
    return rows, tokens


def tree_emitted(path: int, next_token: int, tokens) -> list[int]:
    """The tokens a tree round emits: those of the accepted path (``path`` bits; an ancestor has a lower
    index than its descendants), then NEXT_TOKEN."""
    return [int(tokens[j]) for j in range(1, len(tokens)) if path >> j & 1] + [int(next_token)]


def check_tree_lossless(emitted: list[list[int]], rows, tokens, inv_temp: int, greedy: bool = False) -> dict:
    """Chi-square checks of a tree's emitted tokens: the first follows p of the root; given that the first
    is the token of root child c, the second follows p of c. Returns the p-values by name; asserts each
    exceeds ALPHA (a conditional bin with fewer than 200 samples is skipped)."""
    from hls_ref.verifier import fixed_point_dist
    vocab = rows.shape[1]
    first = np.bincount([e[0] for e in emitted], minlength=vocab)
    pvals = {"first": chi2_pvalue(first, fixed_point_dist(rows[0], inv_temp, greedy))}
    for c in range(1, len(TREE_PARENTS)):
        if TREE_PARENTS[c] != 0 or tokens[c] in tokens[1:c]:
            continue                    # not a root child, or a duplicate (never accepted)
        second = [e[1] for e in emitted if e[0] == tokens[c]]
        if len(second) >= 200:
            pvals[f"second|node{c}"] = chi2_pvalue(np.bincount(second, minlength=vocab),
                                                   fixed_point_dist(rows[c], inv_temp, greedy))
    for name, pv in pvals.items():
        assert pv > ALPHA, f"tree {name}: chi-square p-value {pv:.2e} (alpha {ALPHA})"
    return pvals
