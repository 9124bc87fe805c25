"""Losslessness checks shared by the golden-model tests and the RTL testbench.

A round is lossless when the first token it emits follows the target's fixed-point distribution while the
draft tokens follow the draft's. Each check is a chi-square goodness-of-fit test at a false-alarm rate of
``ALPHA`` (bins with expected count < 5 pooled into one).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from hls_ref.vectors import TREE_PARENTS

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


# ------------------------------------------------------------------------------------------------
# Tree mode
# ------------------------------------------------------------------------------------------------

def tree_emitted(path: int, next_token: int, tokens) -> list[int]:
    """The tokens a tree round emits: those of the accepted path (``path`` bits; an ancestor has a lower
    index than its descendants), then NEXT_TOKEN."""
    return [int(tokens[j]) for j in range(1, len(tokens)) if path >> j & 1] + [int(next_token)]


def check_tree_lossless(emitted: list[list[int]], rows, tokens, inv_temp: int, greedy: bool = False,
                        min_samples: int = 200) -> dict:
    """Chi-square checks of a tree's emitted tokens: the first follows p of the root; given that the first
    is the token of root child c, the second follows p of c. Returns the p-values by name; asserts each
    exceeds ALPHA (a conditional bin with fewer than ``min_samples`` samples is skipped). The tree is
    ``hls_ref.vectors.TREE_PARENTS`` with the rows and tokens of ``hls_ref.vectors.make_tree_case``."""
    from hwcontract.formats import fixed_point_dist
    vocab = rows.shape[1]
    first = np.bincount([e[0] for e in emitted], minlength=vocab)
    pvals = {"first": chi2_pvalue(first, fixed_point_dist(rows[0], inv_temp, greedy))}
    for c in range(1, len(TREE_PARENTS)):
        if TREE_PARENTS[c] != 0 or tokens[c] in tokens[1:c]:
            continue                    # not a root child, or a duplicate (never accepted)
        second = [e[1] for e in emitted if e[0] == tokens[c]]
        if len(second) >= min_samples:
            pvals[f"second|node{c}"] = chi2_pvalue(np.bincount(second, minlength=vocab),
                                                   fixed_point_dist(rows[c], inv_temp, greedy))
    for name, pv in pvals.items():
        assert pv > ALPHA, f"tree {name}: chi-square p-value {pv:.2e} (alpha {ALPHA})"
    return pvals
