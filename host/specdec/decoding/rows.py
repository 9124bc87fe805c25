"""Row arithmetic of the decoding loop: masking, sampling, a draft's token, ranking and log-probabilities.

Every function takes one logits row (or a few) as a numpy array or a float32 tensor and answers in numpy; none
keeps state. The chain drafters, the tree builders, their calibration and the loop share them.
"""
from __future__ import annotations

import math

import numpy as np

from hwcontract.formats import LOGIT_NEG_INF, fixed_point_dist, inv_temp, quantize

from ..errors import SpecdecError
from .base import Sampling, Support


def mask_logits(logits, s: Sampling) -> np.ndarray:
    """float32 rows with top-k / top-p applied (masked entries -inf); the same function serves p and q.

    Without masking (greedy, or neither top-k nor top-p) the rows come back uncopied, as a view.

    Top-p keeps the smallest set of most likely tokens whose probability at temperature T reaches
    ``top_p`` (always at least one token).
    """
    x = logits.detach().cpu().numpy() if hasattr(logits, "detach") else np.asarray(logits)
    if s.greedy or (s.top_k == 0 and s.top_p >= 1):
        return np.asarray(x, dtype=np.float32)       # nothing to mask: no copy (callers only read it)
    x = np.array(x, dtype=np.float32, copy=True)
    vocab = x.shape[-1]
    if 0 < s.top_k < vocab:
        kth = np.partition(x, vocab - s.top_k, axis=-1)[..., vocab - s.top_k, None]
        x[x < kth] = -np.inf
    if s.top_p < 1:
        flat = x.reshape(-1, vocab)
        for r in range(len(flat)):
            keep = _top_p_keep(flat[r], s.temperature, s.top_p)
            row = np.full(vocab, -np.inf, dtype=np.float32)
            row[keep] = flat[r, keep]
            flat[r] = row
    return x


def _top_p_keep(x: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """The ids top-p keeps in the row ``x``: the most likely tokens (ties by id) until the mass before the next
    one reaches ``top_p``. Found among the tokens within ``d`` of the tempered maximum (``d`` grown by half until
    their mass reaches ``top_p``), not by sorting the whole row: a sort or a top-k partition of a row of
    V = 49,152 costs more than the rest of a sampled round's host work (docs/benchmarks.md).

    The candidates are every token whose tempered logit is at least a threshold: a prefix of the row's
    order (by logit, then id), ties included. So the masses before each candidate are the whole sort's,
    and once one of them reaches ``top_p`` no token after it is kept."""
    z = x / temperature
    zmax = z.max()
    e = np.exp(z - zmax).astype(np.float64)     # float64 sums: the cut does not hang on the summation order
    total = e[e > 0].sum()      # over the nonzero terms only: a compact row (Support) sums as its full row
    d = 8.0
    while True:
        top = np.flatnonzero(z >= zmax - d) if np.isfinite(d) else np.arange(len(x))
        order = top[np.lexsort((top, -x[top]))]            # by logit, then by id (a stable sort's order)
        pr = e[order]
        before = (np.cumsum(pr) - pr) / total                # mass before each token
        m = int(np.count_nonzero(before < top_p))
        if m < len(order) or not np.isfinite(d):
            return order[:m]
        d = 1.5 * d if d < 200 else np.inf


def sample_codes(codes: np.ndarray, s: Sampling, rng: np.random.Generator) -> int:
    """A sample from the distribution the verifier's fixed-point arithmetic gives a row of codes, so draft
    proposals follow exactly the q the core tests them against."""
    dist = fixed_point_dist(codes, inv_temp(s.temperature))
    return int(rng.choice(len(dist), p=dist))


def choose_host(row: np.ndarray, s: Sampling, rng: np.random.Generator) -> int:
    """Target-only decoding's choice on the host: argmax, or a float64 softmax sample at temperature T."""
    if s.greedy:
        return int(np.argmax(row))
    z = row.astype(np.float64) / s.temperature
    e = np.exp(z - z.max())
    return int(rng.choice(len(e), p=e / e.sum()))


def draft_token(logits, i: int, who: str, sampling: Sampling, rng: np.random.Generator, rows: list,
                confidence: float | None = None, support: Support | None = None) -> tuple[int, bool]:
    """The token a draft proposes at chain position ``i`` from its logits row ``logits`` (shape (1, V)): the
    argmax (greedy), or a sample from the row's Q7.8 codes, which are appended to ``rows`` (quantized once: the
    driver streams these codes as they are). Also whether the chain stops after it (its probability under the
    masked row below ``confidence``).

    With ``support``, ``logits`` holds only the entries at ``support.ids`` (shape (1, N)) and the rest of the row
    is -inf: the token, the codes (-inf codes elsewhere) and the random draws are those of the full row, found
    on its N entries (a hot head's rows: 8,192 of 49,152 tokens)."""
    ids = None if support is None else support.ids
    check_finite(logits, who, f"q_{i} (the draft's row at position {i})", ids)
    row = mask_logits(logits[0], sampling)
    if sampling.greedy:
        j = int(np.argmax(row))
    else:
        codes = quantize(row)
        j = sample_codes(codes, sampling, rng)
        if support is not None:
            full = np.full(support.vocab, LOGIT_NEG_INF, dtype=np.int16)
            full[ids] = codes
            codes = full
        rows.append(codes)
    stop = confidence is not None and _probability(row, j, sampling) < confidence
    return (j if ids is None else int(ids[j])), stop


def _probability(row: np.ndarray, token: int, s: Sampling) -> float:
    """The draft's probability of ``token`` from its masked logits ``row`` (tempered when sampling)."""
    z = row / (s.temperature or 1.0)
    top = np.max(z)
    e = np.exp(z - top)
    return float(e[token] / e[e > 0].sum())        # the nonzero terms: a compact row's sum is its full row's


def check_finite(logits, who: str, row: str = "row {0}", ids: np.ndarray | None = None) -> None:
    """Refuse NaN or +inf logits before they reach the verifier, naming the model, the row (``row.format(i)``
    for row i of ``logits``: p_i of the target, q_i of the draft, a tree node's) and the token (``ids[j]`` for
    column j when the row is compact, see :class:`Support`)."""
    import torch
    total = float(logits.sum())        # one pass: NaN or +inf anywhere makes the sum NaN or +inf (-inf alone not)
    if not (math.isnan(total) or total == math.inf):
        return
    bad = torch.isnan(logits) | torch.isposinf(logits)
    if bool(bad.any()):
        i, j = (int(v) for v in bad.nonzero()[0])
        raise SpecdecError(f"{who or 'target'} produced a non-finite logit ({float(logits[i, j])}) in "
                           f"{row.format(i)}, token {j if ids is None else int(ids[j])}: refusing to verify it")


def as_row(logits) -> np.ndarray:
    """One logits row as a numpy array (a float32 tensor's own memory, no copy)."""
    return np.asarray(logits.detach().numpy() if hasattr(logits, "detach") else logits)


def ranked(logits, k: int) -> np.ndarray:
    """The ``k`` highest-ranked tokens of one logits row, best first (ties: lower token id first).

    Found among the tokens within ``d`` of the row's maximum (``d`` grown until there are ``k`` of them): those
    are a prefix of the row's order, ties included, so the result is the whole sort's, in two passes over the row
    where a partition of the whole row takes more (docs/benchmarks.md; an EAGLE-2 tree ranks a row per expanded
    node every round)."""
    if hasattr(logits, "detach") and logits.dim() == 1 and k < logits.numel():
        # a tensor row: torch's top k + 1, exact when their values are finite and strictly decreasing (no tie to
        # break), and cheaper than the search below
        import torch
        vals, idx = torch.topk(logits.detach(), k + 1)
        v = vals.tolist()
        if math.isfinite(v[0]) and all(a > b for a, b in zip(v, v[1:])):
            return idx[:k].numpy()
    row = as_row(logits)
    if k >= row.size:
        return np.argsort(-row.astype(np.float64), kind="stable")
    top = row.max()
    if np.isfinite(top):
        for d in (4.0, 16.0, 64.0):
            cand = np.flatnonzero(row >= top - d)
            if cand.size >= k:
                return cand[np.argsort(-row[cand].astype(np.float64), kind="stable")][:k]
    x = row.astype(np.float64)          # a flat or non-finite row: the partition of the whole row
    cand = np.flatnonzero(x >= np.partition(x, x.size - k)[x.size - k])   # the top k and ties
    return cand[np.argsort(-x[cand], kind="stable")][:k]


#: Terms more than this below a row's maximum are left out of its log-sum-exp: together at most V * e^-40
#: (2e-13 at V = 49,152) of the sum, below float64's rounding of a sum of that many terms.
LSE_RANGE = 40.0


def log_probs(logits, tokens) -> np.ndarray:
    """The draft's log-softmax (float64) of one logits row at ``tokens``."""
    row = as_row(logits)
    top = float(row.max())
    z = row[row >= top - LSE_RANGE].astype(np.float64) - top
    return row[np.asarray(tokens, dtype=np.int64)].astype(np.float64) - top - np.log(np.exp(z).sum())
