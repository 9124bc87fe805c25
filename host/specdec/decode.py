"""The speculative decoding loop.

One round reads top to bottom::

    draft proposes g tokens (and its rows q)  ->  target scores g+1 positions in one pass (rows p)
    ->  the verifier decides (quantize, stream, accept/reject, resample or bonus)
    ->  both KV caches keep the accepted prefix  ->  tokens are emitted, the round's metrics recorded

The verifier is a :class:`specdec.drivers.Verifier` on any backend (golden model, RTL simulation, board);
this module never asks which. ``gamma = 0`` is target-only decoding on the host, the baseline the
benchmarks compare against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hls_ref.verifier import fixed_point_dist, quantize
from hwcontract.formats import inv_temp
from .errors import SpecdecError
from .models import CausalLM
from hwcontract.regmap import TREE_MAX_NODES

#: First gamma of the adaptive schedule (then +2 after a fully accepted round, -1 otherwise, like the
#: "heuristic" schedule of Hugging Face assisted generation).
AUTO_GAMMA_START = 4


@dataclass
class Sampling:
    """How tokens are chosen: ``temperature == 0`` is greedy; top-k / top-p mask p and q alike."""

    temperature: float = 0.0
    top_k: int = 0          # 0 = off
    top_p: float = 1.0      # 1 = off

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.temperature and not 256 / self.temperature <= 0xFFFF:
            raise ValueError(f"temperature {self.temperature} is below the core's smallest, 256/65535")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class GenConfig:
    """One generation: the token budget, gamma (int >= 0 or "auto"), sampling and seed."""

    max_new_tokens: int = 64
    gamma: int | str = 4
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    stop_at_eos: bool = True
    tree_budget: int = 0    # > 0: tree speculation with trees of this many nodes (root included)

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.gamma != "auto" and not (isinstance(self.gamma, int) and self.gamma >= 0):
            raise ValueError(f"gamma must be an integer >= 0 or 'auto', got {self.gamma!r}")
        if not isinstance(self.tree_budget, int) or not 0 <= self.tree_budget <= TREE_MAX_NODES:
            raise ValueError(f"tree budget must be 1..{TREE_MAX_NODES} nodes (0 = chain), got {self.tree_budget!r}")


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
        order = np.argsort(-x, axis=-1, kind="stable")
        z = np.take_along_axis(x, order, -1) / s.temperature
        pr = np.exp(z - z[..., :1])
        cum = np.cumsum(pr, -1) / pr.sum(-1, keepdims=True)
        drop = (cum - pr / pr.sum(-1, keepdims=True)) >= s.top_p    # mass before this token already enough
        np.put_along_axis(x, order, np.where(drop, -np.inf, np.take_along_axis(x, order, -1)), -1)
    return x


def sample_codes(codes: np.ndarray, s: Sampling, rng: np.random.Generator) -> int:
    """A sample from the distribution the verifier's fixed-point arithmetic gives a row of codes, so draft
    proposals follow exactly the q the core tests them against."""
    dist = fixed_point_dist(codes, inv_temp(s.temperature))
    return int(rng.choice(len(dist), p=dist))


class ModelDraft:
    """A draft model proposing with its own KV cache."""

    name = "model"

    def __init__(self, lm: CausalLM) -> None:
        self.lm = lm

    def start(self, context: list[int]) -> None:
        self.lm.reset()
        if len(context) > 1:
            self.lm.forward(context[:-1])

    def propose(self, context: list[int], g: int, s: Sampling, rng: np.random.Generator):
        """g tokens and their rows q as Q7.8 codes (int16, shape (g, V); None when greedy)."""
        if g == 0:
            return [], None
        logits = self.lm.forward(context[self.lm.length:])[-1:]
        tokens, rows = [], []
        for i in range(g):
            _check_finite(logits[-1:], self.lm.name or "draft")
            row = mask_logits(logits[-1], s)
            if s.greedy:
                tokens.append(int(np.argmax(row)))
            else:       # quantized once: the driver streams these codes as they are
                rows.append(quantize(row))
                tokens.append(sample_codes(rows[-1], s, rng))
            if i + 1 < g:
                logits = self.lm.forward(tokens[-1:])
        return tokens, np.stack(rows) if rows else None     # greedy verification reads no q

    def commit(self, valid: int) -> None:
        """The first ``valid`` tokens of the context are final: drop cache entries past them."""
        self.lm.rollback(min(self.lm.length, valid))


class PromptLookup:
    """Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the context's
    last n-gram (n from ``max_ngram`` down to 1). Its q is a point mass on each proposed token."""

    name = "prompt-lookup"

    def __init__(self, vocab: int, max_ngram: int = 3) -> None:
        self.vocab, self.max_ngram = vocab, max_ngram

    def start(self, context: list[int]) -> None:
        pass

    def propose(self, context: list[int], g: int, s: Sampling, rng: np.random.Generator):
        tokens = lookup(context, g, self.max_ngram)
        if not tokens:
            return [], None
        q = np.full((len(tokens), self.vocab), -np.inf, dtype=np.float32)
        q[np.arange(len(tokens)), tokens] = 0.0
        return tokens, q

    def commit(self, valid: int) -> None:
        pass


def lookup(context: list[int], g: int, max_ngram: int = 3) -> list[int]:
    """Up to g tokens following the latest earlier match of the context's last n-gram, longest n first."""
    if g == 0:
        return []
    ctx = np.asarray(context)
    for n in range(min(max_ngram, len(ctx) - 1), 0, -1):
        tail = ctx[-n:]
        win = np.lib.stride_tricks.sliding_window_view(ctx[:-1], n)     # windows that end before the tail
        hits = np.nonzero((win == tail).all(axis=1))[0]
        if hits.size:
            start = int(hits[-1]) + n
            return [int(t) for t in ctx[start:start + g]]
    return []


class GammaSchedule:
    """Constant gamma, or "auto": +2 after a round that accepted every draft token, -1 otherwise."""

    def __init__(self, gamma: int | str, gamma_max: int) -> None:
        self.auto = gamma == "auto"
        self.gamma_max = gamma_max
        self.gamma = min(AUTO_GAMMA_START, gamma_max) if self.auto else int(gamma)
        if not self.auto and self.gamma > gamma_max:
            raise ValueError(f"gamma {self.gamma} exceeds the verifier core's GAMMA_MAX {gamma_max}")

    def update(self, n_accept: int, g: int) -> None:
        if self.auto and g:
            self.gamma = min(self.gamma + 2, self.gamma_max) if n_accept == g else max(1, self.gamma - 1)


@dataclass
class Round:
    """One round's record: what was proposed, accepted and emitted, and where its time went (seconds)."""

    g: int
    n_accept: int
    emitted: int
    draft_s: float
    target_s: float
    quantize_transfer_s: float
    verify_s: float
    total_s: float
    cycles: int = 0
    depth: int = -1         # deepest draft position (a chain's g; a tree's largest node depth); -1 = g
    mask_s: float = 0.0     # tree rounds: the treemask core's time (driver call)
    mask_cycles: int = 0    # tree rounds: the treemask core's CYCLES_BUSY
    kv_ops: int = 0         # paged KV caches: kvpage operations this round (both models)
    kv_cycles: int = 0      # ... and their CYCLES_BUSY
    kv_pages: int = 0       # ... and pages in use after the round

    def __post_init__(self) -> None:
        if self.depth < 0:
            self.depth = self.g

    @property
    def host_s(self) -> float:
        return max(0.0, self.total_s - self.draft_s - self.target_s - self.quantize_transfer_s - self.verify_s
                   - self.mask_s)


@dataclass
class Generation:
    """The new tokens of one generation and its rounds."""

    tokens: list[int]
    rounds: list[Round]
    prefill_s: float
    wall_s: float
    stopped_at_eos: bool



def generate(target: CausalLM, draft, verifier, prompt: list[int], cfg: GenConfig, masker=None) -> Generation:
    """Generate up to ``cfg.max_new_tokens`` tokens after ``prompt``.

    Parameters
    ----------
    target : CausalLM
    draft : ModelDraft, PromptLookup, a tree drafter (``specdec.tree``) or None
        None only for ``gamma == 0`` (target-only decoding); a tree drafter when ``cfg.tree_budget > 0``.
    verifier : specdec.drivers.Verifier or None
        Any backend; None only for ``gamma == 0``.
    masker : specdec.drivers.TreeMask, optional
        The treemask core's driver (tree speculation only).
    prompt : list of int
        The prompt's token ids (at least one).
    cfg : GenConfig

    Raises
    ------
    ValueError
        Empty prompt, token ids outside the vocabulary, gamma over the core's GAMMA_MAX, NaN logits.
    """
    if not len(prompt):
        raise ValueError("the prompt is empty: give at least one token")
    if min(prompt) < 0 or max(prompt) >= target.vocab:
        raise ValueError(f"prompt token ids must lie in 0..{target.vocab - 1}, got {min(prompt)}..{max(prompt)}")
    s = cfg.sampling
    baseline = cfg.gamma == 0 and not cfg.tree_budget
    if not baseline and (draft is None or verifier is None):
        raise ValueError(f"gamma={cfg.gamma} needs a draft source and a verifier")
    if cfg.tree_budget:
        if masker is None or baseline:
            raise ValueError("tree speculation needs a tree drafter, a verifier and the treemask driver")
        if cfg.tree_budget > min(verifier.tree_max, masker.nodes_max):
            raise ValueError(f"tree budget {cfg.tree_budget} exceeds the cores' limits: verifier TREE_MAX "
                             f"{verifier.tree_max}, treemask NODES_MAX {masker.nodes_max}")
    schedule = GammaSchedule(cfg.gamma, verifier.gamma_max if verifier is not None else 0)
    rng = np.random.default_rng(cfg.seed)
    eos = _eos_ids(target)

    t_start = time.perf_counter()
    ctx = list(int(t) for t in prompt)
    target.reset()
    if len(ctx) > 1:
        target.forward(ctx[:-1])
    if draft is not None and not baseline:
        draft.start(ctx)
    prefill_s = time.perf_counter() - t_start

    new: list[int] = []
    rounds: list[Round] = []
    stopped = False
    kv = target.kv if target.paged else None
    try:
        while len(new) < cfg.max_new_tokens and not stopped:
            mark = (kv.total_ops, kv.total_cycles) if kv is not None else None
            if cfg.tree_budget:
                out, rnd = tree_round(target, draft, verifier, masker, ctx, cfg, rng)
                out, stopped = _stop(out, eos, cfg, len(new))
                ctx += out
                new += out
                target.rollback(len(ctx) - 1)
                draft.commit(len(ctx) - 1)
                rnd.emitted = len(out)
                rnd.total_s = time.perf_counter() - rnd.total_s
            else:
                out, rnd = chain_round(target, draft, verifier, schedule, ctx, cfg, rng, baseline, len(new))
                out, stopped = _stop(out, eos, cfg, len(new))
                ctx += out
                new += out
                target.rollback(len(ctx) - 1)
                if not baseline:
                    draft.commit(len(ctx) - 1)
                    schedule.update(rnd.n_accept, rnd.g)
                rnd.emitted = len(out)
                rnd.total_s = time.perf_counter() - rnd.total_s
            if kv is not None:
                rnd.kv_ops, rnd.kv_cycles = kv.total_ops - mark[0], kv.total_cycles - mark[1]
                rnd.kv_pages = kv.pages - kv.free_pages
            rounds.append(rnd)
    finally:        # a paged cache's sequence goes back to the pool, also when a round failed
        target.free()
        if draft is not None and hasattr(draft, "lm"):
            draft.lm.free()
    return Generation(new, rounds, prefill_s, time.perf_counter() - t_start, stopped)


def chain_round(target: CausalLM, draft, verifier, schedule: GammaSchedule, ctx: list[int], cfg: GenConfig,
                rng: np.random.Generator, baseline: bool, done: int) -> tuple[list[int], Round]:
    """One chain round: the draft proposes g tokens, the target scores g + 1 positions in one pass, the
    verifier decides (target-only decoding: the host picks the next token).

    Returns the tokens the round emits (before EOS and budget truncation) and its record, whose
    ``total_s`` holds the round's start time (the caller finishes it, after committing the caches).
    """
    s = cfg.sampling
    t0 = time.perf_counter()
    g = min(schedule.gamma, cfg.max_new_tokens - done - 1)
    if baseline:
        draft_tokens, q = [], None
    else:
        draft_tokens, q = draft.propose(ctx, g, s, rng)
        g = len(draft_tokens)
    t1 = time.perf_counter()
    raw = target.forward(ctx[target.length:] + draft_tokens)[-(g + 1):]
    t2 = time.perf_counter()
    _check_finite(raw, target.name)
    p = mask_logits(raw, s)                     # host work: counted in the round's host overhead
    t3 = time.perf_counter()
    cycles = 0
    if baseline:
        out, n_acc, qt_s = [choose_host(p[0], s, rng)], 0, 0.0
        ver_s = time.perf_counter() - t3
    else:
        res = verifier.verify(draft_tokens, p, None if s.greedy else q, greedy=s.greedy,
                              temperature=s.temperature or 1.0)
        out, n_acc, cycles = res.tokens, res.n_accept, res.cycles_busy
        timing = verifier.timing
        qt_s = timing["quantize_s"] + timing["transfer_s"]
        ver_s = time.perf_counter() - t3 - qt_s
    return out, Round(g, n_acc, 0, t1 - t0, t2 - t1, qt_s, ver_s, t0, cycles)


def tree_round(target: CausalLM, drafter, verifier, masker, ctx: list[int], cfg: GenConfig,
               rng: np.random.Generator) -> tuple[list[int], Round]:
    """One tree round: the drafter builds a tree of ``cfg.tree_budget`` nodes rooted at ``ctx[-1]``, the
    treemask core gives its attention mask and depths, the target scores every node in one forward pass,
    the verifier walks the tree, and the target's cache keeps the accepted path.

    Returns the tokens the round emits (before EOS and budget truncation) and its record, whose
    ``total_s`` holds the round's start time (the caller finishes it).
    """
    s = cfg.sampling
    t0 = time.perf_counter()
    tree = drafter.propose(ctx, cfg.tree_budget)
    t1 = time.perf_counter()
    mask, depth = masker.masks(tree.parents)
    t2 = time.perf_counter()
    raw = target.forward_tree(tree.tokens, mask, depth)
    t3 = time.perf_counter()
    _check_finite(raw, target.name)
    p = mask_logits(raw, s)
    res = verifier.verify_tree(tree.parents, tree.tokens, p, greedy=s.greedy, temperature=s.temperature or 1.0)
    target.commit_path([0, *res.path])
    timing = verifier.timing
    qt_s = timing["quantize_s"] + timing["transfer_s"]
    ver_s = time.perf_counter() - t3 - qt_s
    rnd = Round(tree.n - 1, res.n_accept, 0, t1 - t0, t3 - t2, qt_s, ver_s, t0, res.cycles_busy,
                depth=int(depth.max()), mask_s=t2 - t1, mask_cycles=masker.cycles)
    return res.tokens, rnd


def _stop(out: list[int], eos: set[int], cfg: GenConfig, done: int) -> tuple[list[int], bool]:
    """``out`` cut after its first EOS (when stopping there) and to the token budget; and whether EOS came."""
    stopped = False
    if cfg.stop_at_eos:
        for k, tok in enumerate(out):
            if tok in eos:
                out, stopped = out[:k + 1], True
                break
    return out[:cfg.max_new_tokens - done], stopped


def choose_host(row: np.ndarray, s: Sampling, rng: np.random.Generator) -> int:
    """Target-only decoding's choice on the host: argmax, or a float64 softmax sample at temperature T."""
    if s.greedy:
        return int(np.argmax(row))
    z = row.astype(np.float64) / s.temperature
    e = np.exp(z - z.max())
    return int(rng.choice(len(e), p=e / e.sum()))


def _check_finite(logits, who: str) -> None:
    import torch
    bad = torch.isnan(logits) | torch.isposinf(logits)
    if bool(bad.any()):
        i, j = (int(v) for v in bad.nonzero()[0])
        raise SpecdecError(f"{who or 'target'} produced a non-finite logit ({float(logits[i, j])}) at row {i}, "
                           f"token {j}: refusing to verify it")


def _eos_ids(lm: CausalLM) -> set[int]:
    e = lm.eos_token_id
    if e is None:
        return set()
    return {int(x) for x in (e if isinstance(e, (list, tuple)) else [e])}
