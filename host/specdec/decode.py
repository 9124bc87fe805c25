"""The speculative decoding loop.

One round (:func:`speculative_round`) reads top to bottom::

    the drafter proposes (a chain of g tokens and its rows q, or a token tree)
    ->  a tree's attention mask comes from the treemask core
    ->  the target scores every drafted position in one pass (rows p)
    ->  the verifier decides (quantize, stream, accept/reject, resample or bonus)
    ->  the tokens are emitted (cut at EOS and the budget), both KV caches keep them
    ->  the round's record

Every draft source is a :class:`Drafter`: a draft model (:class:`ModelDraft`), prompt lookup
(:class:`PromptLookup`) or a tree builder of :mod:`specdec.tree`. The verifier is a
:class:`specdec.drivers.Verifier` on any backend (golden model, RTL simulation, board); this module never asks
which. ``gamma = 0`` is target-only decoding (:class:`NoDraft`, the host picks each token), the baseline the
benchmarks compare against.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Protocol, runtime_checkable

import numpy as np

from hwcontract.formats import INV_TEMP_MAX, LOGIT_NEG_INF, fixed_point_dist, inv_temp, quantize
from hwcontract.regmap import TREE_MAX_NODES, integers
from .errors import OptionError, SpecdecError, check_int
from .models import CausalLM, context_length
from .threads import owned_threads
from .tree import Tree

if TYPE_CHECKING:
    import torch

    from .drivers import TreeMask, Verifier

#: Gammas that adapt per round: "auto" (+2 after a fully accepted round, -1 otherwise, like the "heuristic"
#: schedule of Hugging Face assisted generation) and "model" (the gamma the break-even model of
#: :mod:`specdec.breakeven` predicts fastest from this generation's own measurements).
ADAPTIVE_GAMMAS = ("auto", "model")
#: First gamma of an adaptive schedule.
AUTO_GAMMA_START = 4


# --- settings ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen: ``temperature == 0`` is greedy; top-k / top-p mask p and q alike."""

    temperature: float = 0.0
    top_k: int = 0          # 0 = off
    top_p: float = 1.0      # 1 = off

    def __post_init__(self) -> None:
        try:
            if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
                raise TypeError
            inv_temp(self.temperature)          # the core's INV_TEMP register must hold 256/T
        except (TypeError, ValueError):
            raise OptionError("temperature", self.temperature, f"0 (greedy) or a T > 0 whose INV_TEMP = "
                              f"round(256/T) lies in 1..{INV_TEMP_MAX}") from None
        check_int("top_k", self.top_k, 0, allowed="an integer >= 0 (0 = off)")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise OptionError("top_p", self.top_p, "in (0, 1] (1 = off)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class GenConfig:
    """One generation: the token budget, gamma (int >= 0, "auto" or "model"), sampling, seed and tree size."""

    max_new_tokens: int = 64
    gamma: int | str = 4
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    stop_at_eos: bool = True
    tree_budget: int = 0    # > 0: tree speculation with trees of this many nodes (root included)
    tree_depth: int = 0     # a tree's largest node depth (0: not known, tree_budget - 1 at most)

    def __post_init__(self) -> None:
        check_int("max_new_tokens", self.max_new_tokens, 1)
        if self.gamma not in ADAPTIVE_GAMMAS:
            check_int("gamma", self.gamma, 0, allowed="an integer >= 0, 'auto' or 'model'")
        check_int("seed", self.seed, 0, (1 << 63) - 1)     # torch.manual_seed's range (the HF peers)
        check_int("tree_budget", self.tree_budget, 0, TREE_MAX_NODES,
                  allowed=f"a node count in 1..{TREE_MAX_NODES} (0 = chain)")
        check_int("tree_depth", self.tree_depth, 0, TREE_MAX_NODES - 1)


class GammaSchedule:
    """Constant gamma; "auto": +2 after a round that accepted every draft token, -1 otherwise; "model": after
    every round, the gamma that maximizes predicted tokens per second, ``E(g) / (g d + C(g + 1))``, where
    ``E`` comes from the acceptance per position seen so far (each position's count starts with one
    pseudo-round at its predecessor's estimate, so a position never reached takes that estimate and a
    schedule that accepts everything explores deeper), ``d`` the mean draft step and ``C(n)`` the rest of a
    round over n target positions, a least-squares line over the rounds seen (flat while only one n has been
    seen, so the schedule explores upwards)."""

    def __init__(self, gamma: int | str, gamma_max: int) -> None:
        self.mode = gamma if gamma in ADAPTIVE_GAMMAS else "constant"
        self.gamma_max = gamma_max
        self.gamma = min(AUTO_GAMMA_START, gamma_max) if self.mode != "constant" else int(gamma)
        if self.mode == "constant" and self.gamma > gamma_max:
            raise ValueError(f"gamma {self.gamma} exceeds the verifier core's GAMMA_MAX {gamma_max}")
        self._reached = [0] * gamma_max
        self._taken = [0] * gamma_max
        self._draft = [0.0, 0]                  # draft seconds, draft steps
        self._cost: dict[int, list] = {}        # target positions -> [seconds of the round but drafting, rounds]

    def update(self, n_accept: int, g: int, rnd: Round | None = None) -> None:
        if self.mode == "auto" and g:
            self.gamma = min(self.gamma + 2, self.gamma_max) if n_accept == g else max(1, self.gamma - 1)
        elif self.mode == "model" and g and rnd is not None:
            for j in range(min(g, n_accept + 1)):
                self._reached[j] += 1
                self._taken[j] += j < n_accept
            self._draft[0] += rnd.draft_s
            self._draft[1] += g
            c = self._cost.setdefault(g + 1, [0.0, 0])
            c[0] += rnd.total_s - rnd.draft_s
            c[1] += 1
            self.gamma = self.predicted_best()

    def predicted_best(self) -> int:
        """The gamma in 1..GAMMA_MAX with the highest predicted tokens per second (see the class docstring)."""
        from .breakeven import expected_tokens
        acc: list[float] = []
        for t, r in zip(self._taken, self._reached):     # one pseudo-round at the predecessor's estimate
            prior = acc[-1] if acc else 0.5
            acc.append((t + prior) / (r + 1))
        d = self._draft[0] / self._draft[1] if self._draft[1] else 0.0
        pts = {n: c[0] / c[1] for n, c in self._cost.items()}
        if len(pts) > 1:
            slope, base = np.polyfit(list(pts), list(pts.values()), 1)
            slope = max(0.0, float(slope))
        else:
            slope, base = 0.0, next(iter(pts.values()), 0.0)

        def rate(g: int) -> float:
            cost = g * d + pts.get(g + 1, base + slope * (g + 1))
            return expected_tokens(acc, g) / cost if cost > 0 else 0.0
        return max(range(1, self.gamma_max + 1), key=rate)


# --- rows -------------------------------------------------------------------------------------------------


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
    their mass reaches ``top_p``), not by sorting the whole row: the sort was most of a sampled round's host
    time at V = 49,152, and a top-k partition (``argpartition``) still 0.4-0.65 ms a row.

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


# --- drafters ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Chain:
    """A chain proposal: draft tokens x_0..x_{g-1} after the context, and their rows q (Q7.8 codes from a
    sampling draft model, float logits from prompt lookup; None when greedy or nothing was drafted)."""

    tokens: tuple[int, ...] = ()
    q: np.ndarray | None = None

    @property
    def drafted(self) -> int:
        """Draft tokens proposed."""
        return len(self.tokens)

    @property
    def height(self) -> int:
        """The deepest draft position (a chain's is its length)."""
        return len(self.tokens)


#: What a drafter proposes for one round: a chain, or a token tree rooted at the context's last token.
Proposal = Chain | Tree


@runtime_checkable
class Drafter(Protocol):
    """A draft source. Per generation the loop calls :meth:`start` once, then per round :meth:`propose` and,
    when the round's tokens are final, :meth:`commit`; :meth:`free` at the end, also after a failure."""

    name: str

    def start(self, context: list[int]) -> None:
        """Take the prompt ``context`` (its last token is fed by the first round)."""

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        """A proposal after ``context`` for a target pass over at most ``budget`` positions (the context's
        last token and the drafted ones): a :class:`Chain` of at most ``budget - 1`` tokens, or a
        :class:`~specdec.tree.Tree` of at most ``budget`` nodes, root included."""

    def commit(self, valid: int) -> None:
        """The first ``valid`` tokens of the context are final: drop what lies past them."""

    def free(self) -> None:
        """Release what the drafter holds (a paged KV cache's pages go back to the pool)."""


class ModelDraft:
    """A draft model proposing with its own KV cache."""

    name = "model"

    def __init__(self, lm: CausalLM, confidence: float | None = None) -> None:
        """``confidence``: stop a chain early, after the first drafted token whose probability under the draft
        (its masked, tempered row) is below this (HF's ``assistant_confidence_threshold``); None: draft the
        whole budget. Where the chain stops depends on the draft's rows only, so the round stays lossless."""
        self.lm, self.confidence = lm, check_confidence(confidence)

    def start(self, context: list[int]) -> None:
        self.lm.prefill(context)

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        """``budget - 1`` tokens and their rows q as Q7.8 codes (int16, shape (g, V); None when greedy)."""
        g = budget - 1
        if g <= 0:
            return Chain()
        logits = self.lm.forward(context[self.lm.length:])[-1:]
        tokens, rows = [], []
        for i in range(g):
            token, stop = draft_token(logits[-1:], i, self.lm.name or "draft", sampling, rng, rows, self.confidence)
            tokens.append(token)
            if stop:
                break
            if i + 1 < g:
                logits = self.lm.forward(tokens[-1:])
        return Chain(tuple(tokens), np.stack(rows) if rows else None)     # greedy verification reads no q

    def commit(self, valid: int) -> None:
        self.lm.rollback(min(self.lm.length, valid))

    def free(self) -> None:
        self.lm.free()


@dataclass(frozen=True, eq=False)
class Support:
    """Where a compact draft row's entries sit: ``ids`` (ascending token ids, one per entry) in a vocabulary of
    ``vocab`` tokens; every other token's logit is -inf (a hot-vocabulary head's row)."""

    ids: np.ndarray
    vocab: int

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        if ids.ndim != 1 or ids.size == 0 or (np.diff(ids) <= 0).any() or ids[0] < 0 or ids[-1] >= self.vocab:
            raise ValueError(f"draft row support: expected strictly ascending token ids in 0..{self.vocab - 1}, "
                             f"got {ids.size} ids from {ids.min(initial=0)} to {ids.max(initial=0)}")


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
    _check_finite(logits, who, f"q_{i} (the draft's row at position {i})", ids)
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


def check_confidence(value: float | None) -> float | None:
    """``value`` if it is a usable draft confidence (a probability in (0, 1)) or None; OptionError otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0.0 < value < 1.0):
        raise OptionError("draft_confidence", value, "a probability in (0, 1), or none")
    return value


def _probability(row: np.ndarray, token: int, s: Sampling) -> float:
    """The draft's probability of ``token`` from its masked logits ``row`` (tempered when sampling)."""
    z = row / (s.temperature or 1.0)
    top = np.max(z)
    e = np.exp(z - top)
    return float(e[token] / e[e > 0].sum())        # the nonzero terms: a compact row's sum is its full row's


class PromptLookup:
    """Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the context's
    last n-gram (n from ``max_ngram`` down to 1). Its q is a point mass on each proposed token."""

    name = "prompt-lookup"

    def __init__(self, vocab: int, max_ngram: int = 3) -> None:
        self.vocab, self.max_ngram = vocab, max_ngram

    def start(self, context: list[int]) -> None:
        pass

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        tokens = lookup(context, budget - 1, self.max_ngram)
        if not tokens:
            return Chain()
        q = np.full((len(tokens), self.vocab), -np.inf, dtype=np.float32)
        q[np.arange(len(tokens)), tokens] = 0.0
        return Chain(tuple(tokens), q)

    def commit(self, valid: int) -> None:
        pass

    def free(self) -> None:
        pass


class NoDraft:
    """Target-only decoding: proposes nothing, so each round the target scores one position."""

    name = "none"

    def start(self, context: list[int]) -> None:
        pass

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        return Chain()

    def commit(self, valid: int) -> None:
        pass

    def free(self) -> None:
        pass


def lookup(context: list[int], g: int, max_ngram: int = 3) -> list[int]:
    """Up to g tokens following the latest earlier match of the context's last n-gram, longest n first."""
    if g <= 0:
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


# --- records ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Round:
    """One round's record: what was proposed, accepted and emitted, and where its time went (seconds)."""

    g: int                          # draft tokens proposed (a tree's nodes after the root)
    n_accept: int                   # draft tokens the verifier accepted (a tree round's may outnumber the tokens
                                    # emitted where the budget or an EOS cuts the last round)
    emitted: int                    # tokens emitted (accepted, then the next token; cut at EOS / the budget)
    depth: int                      # deepest draft position: a chain's g, a tree's largest node depth
    total_s: float                  # the whole round, caches committed
    draft_s: float = 0.0
    mask_s: float = 0.0             # tree rounds: the treemask core (driver call)
    target_s: float = 0.0
    quantize_transfer_s: float = 0.0
    verify_s: float = 0.0
    cycles: int = 0                 # the verifier's CYCLES_BUSY
    mask_cycles: int = 0            # tree rounds: the treemask core's CYCLES_BUSY
    kv_ops: int = 0                 # paged KV caches: kvpage operations this round (both models)
    kv_cycles: int = 0              # ... and their CYCLES_BUSY
    kv_pages: int = 0               # ... and pages in use after the round

    @property
    def host_s(self) -> float:
        """The round's time outside the drafter, the cores and the target: masking, bookkeeping, commits."""
        return max(0.0, self.total_s - self.draft_s - self.mask_s - self.target_s - self.quantize_transfer_s
                   - self.verify_s)


@dataclass
class Generation:
    """The new tokens of one generation and its rounds."""

    tokens: list[int]
    rounds: list[Round]
    prefill_s: float
    wall_s: float
    stopped_at_eos: bool


@dataclass(frozen=True)
class Decision:
    """What the verifier (target-only: the host) decided in one round."""

    tokens: list[int]                   # to emit: the accepted draft tokens, then the next token
    n_accept: int
    cycles: int = 0                     # the verifier's CYCLES_BUSY
    transfer_s: float = 0.0             # the driver's quantize + transfer seconds
    path: tuple[int, ...] | None = None     # a tree's root and accepted nodes: the target's entries to keep


@dataclass(frozen=True)
class Decoder:
    """What one generation's rounds talk to."""

    target: CausalLM
    drafter: Drafter
    verifier: Verifier | None           # None: target-only decoding, the host picks each token
    masker: TreeMask | None             # the treemask core (tree proposals only)
    sampling: Sampling
    rng: np.random.Generator            # the draft's and the host's sampler
    eos: frozenset[int]                 # tokens that end the generation (empty: run to the budget)


# --- the loop ---------------------------------------------------------------------------------------------


def generate(target: CausalLM, drafter: Drafter | None, verifier: Verifier | None, prompt: list[int],
             cfg: GenConfig, masker: TreeMask | None = None) -> Generation:
    """Generate up to ``cfg.max_new_tokens`` tokens after ``prompt``.

    Parameters
    ----------
    target : CausalLM
    drafter : Drafter or None
        A chain drafter (:class:`ModelDraft`, :class:`PromptLookup`) or, when ``cfg.tree_budget > 0``, a tree
        drafter (``specdec.tree``); ignored (may be None) for target-only decoding (``gamma == 0``).
    verifier : specdec.drivers.Verifier or None
        Any backend; ignored (may be None) for target-only decoding.
    prompt : list of int
        The prompt's token ids (at least one).
    cfg : GenConfig
    masker : specdec.drivers.TreeMask, optional
        The treemask core's driver (tree speculation only).

    Raises
    ------
    ValueError
        Empty prompt, token ids outside the vocabulary, gamma over the core's GAMMA_MAX, a tree over the cores'
        limits, a missing drafter, verifier or treemask driver; an OptionError where the prompt and the token
        budget do not fit the target's context (:func:`check_room`).
    SpecdecError
        NaN or +inf logits (naming the model, row and token); a core's error.
    """
    ctx = _check_prompt(prompt, target.vocab)
    check_room(cfg, context_length(target.model), len(ctx))
    if cfg.gamma == 0 and not cfg.tree_budget:
        drafter, verifier, masker = NoDraft(), None, None
    else:
        _check_parts(cfg, drafter, verifier, masker)
    schedule = GammaSchedule(cfg.gamma, verifier.gamma_max if verifier is not None else 0)
    dec = Decoder(target, drafter, verifier, masker, cfg.sampling, np.random.default_rng(cfg.seed),
                  frozenset(eos_ids(target)) if cfg.stop_at_eos else frozenset())
    clock = _Stopwatch()
    new: list[int] = []
    rounds: list[Round] = []
    stopped = False
    # numpy's BLAS pool on one thread (specdec.threads); a paged cache's sequence goes back to the pool, also
    # when a round fails
    with owned_threads(), _released(target, drafter):
        prefill(target, drafter, ctx)
        prefill_s = clock.lap()
        while len(new) < cfg.max_new_tokens and not stopped:
            left = cfg.max_new_tokens - len(new)
            budget = cfg.tree_budget or min(schedule.gamma, left - 1) + 1
            out, stopped, rnd = speculative_round(dec, ctx, budget, left)
            ctx += out
            new += out
            schedule.update(rnd.n_accept, rnd.g, rnd)
            rounds.append(rnd)
    return Generation(new, rounds, prefill_s, clock.total(), stopped)


def prefill(target: CausalLM, drafter: Drafter, ctx: list[int]) -> None:
    """Both caches take the prompt but its last token, which the first round feeds."""
    target.prefill(ctx)
    drafter.start(ctx)


def speculative_round(dec: Decoder, ctx: list[int], budget: int, left: int) -> tuple[list[int], bool, Round]:
    """One round: draft, mask, score, verify, emit, commit.

    Parameters
    ----------
    dec : Decoder
    ctx : list of int
        The context so far (prompt and emitted tokens); its last token is in neither cache yet. Not modified.
    budget : int
        Positions the target scores this round (the context's last token and the drafted ones).
    left : int
        Tokens the generation may still emit.

    Returns
    -------
    (tokens, stopped, record)
        The tokens emitted (cut after EOS and to ``left``), whether EOS came, and the round's record.
    """
    kv_mark = _kv_counters(dec.target)
    clock = _Stopwatch()
    proposal = dec.drafter.propose(ctx, budget, dec.sampling, dec.rng)
    draft_s = clock.lap()
    mask = tree_mask(dec.masker, proposal)
    mask_s = clock.lap()
    raw = score(dec.target, ctx, proposal, mask)
    target_s = clock.lap()
    _check_finite(raw, dec.target.name, "the target's row at tree node {0}" if isinstance(proposal, Tree)
                  else "p_{0} (the target's row at position {0})")
    p = mask_logits(raw, dec.sampling)          # host work: counted in the round's host time
    clock.lap()
    decision = decide(dec, proposal, p)
    verify_s = clock.lap() - decision.transfer_s
    out, stopped = _cut(decision.tokens, dec.eos, left)
    commit(dec, len(ctx) + len(out) - 1, decision.path)
    return out, stopped, Round(
        g=proposal.drafted, n_accept=decision.n_accept, emitted=len(out), depth=proposal.height,
        total_s=clock.total(), draft_s=draft_s, mask_s=mask_s if mask is not None else 0.0, target_s=target_s,
        quantize_transfer_s=decision.transfer_s, verify_s=verify_s, cycles=decision.cycles,
        mask_cycles=dec.masker.cycles if mask is not None else 0, **_kv_usage(dec.target, kv_mark))


def tree_mask(masker: TreeMask | None, proposal: Proposal) -> tuple[np.ndarray, np.ndarray] | None:
    """A tree's ancestor mask and node depths from the treemask core; None for a chain (causal attention)."""
    if not isinstance(proposal, Tree):
        return None
    if masker is None:
        raise ValueError("a tree proposal needs the treemask driver (and GenConfig.tree_budget > 0)")
    return masker.masks(proposal.parents)


def score(target: CausalLM, ctx: list[int], proposal: Proposal, mask) -> torch.Tensor:
    """The target's logits for every drafted position, in one forward pass: a chain's g + 1 rows (after the
    context's last token and after each draft token), or one row per tree node."""
    if isinstance(proposal, Tree):
        return target.forward_tree(proposal.tokens, *mask)
    return target.forward(ctx[target.length:] + list(proposal.tokens))[-(proposal.drafted + 1):]


def decide(dec: Decoder, proposal: Proposal, p: np.ndarray) -> Decision:
    """The verifier's decision on the rows ``p`` (target-only decoding: the host's choice of one token)."""
    s = dec.sampling
    if dec.verifier is None:
        return Decision([choose_host(p[0], s, dec.rng)], 0)
    if isinstance(proposal, Tree):
        res = dec.verifier.verify_tree(proposal.parents, proposal.tokens, p, greedy=s.greedy,
                                       temperature=s.temperature or 1.0)
        path = (0, *res.path)
    else:
        res = dec.verifier.verify(list(proposal.tokens), p, None if s.greedy else proposal.q, greedy=s.greedy,
                                  temperature=s.temperature or 1.0)
        path = None
    timing = dec.verifier.timing
    return Decision(res.tokens, res.n_accept, res.cycles_busy, timing["quantize_s"] + timing["transfer_s"], path)


def commit(dec: Decoder, valid: int, path: tuple[int, ...] | None) -> None:
    """Both caches keep the first ``valid`` context tokens (a tree's accepted ``path`` first becomes the
    target's committed entries); the last emitted token is fed by the next round."""
    if path is not None:
        dec.target.commit_path(path)
    dec.target.rollback(valid)
    dec.drafter.commit(valid)


# --- helpers ----------------------------------------------------------------------------------------------


@contextmanager
def _released(target: CausalLM, drafter: Drafter) -> Iterator[None]:
    """Free both models' sequences when the block ends, also when it fails."""
    try:
        yield
    finally:
        target.free()
        drafter.free()


class _Stopwatch:
    """Seconds since the last lap, and since the start."""

    def __init__(self) -> None:
        self._start = self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        return seconds

    def total(self) -> float:
        return time.perf_counter() - self._start


def _cut(out: list[int], eos: frozenset[int], left: int) -> tuple[list[int], bool]:
    """``out`` cut after its first EOS and to ``left`` tokens; and whether an EOS came."""
    for k, tok in enumerate(out):
        if tok in eos:
            return out[:k + 1][:left], True
    return out[:left], False


def _check_prompt(prompt: list[int], vocab: int) -> list[int]:
    """The prompt as a list of token ids in 0..vocab-1 (text is refused: ``pairs.encode`` makes the ids)."""
    if isinstance(prompt, str):
        raise ValueError(f"the prompt must be token ids, got text {prompt[:60]!r}: encode it first "
                         "(specdec.pairs.encode(pair.tokenizer, text))")
    prompt = integers(prompt, "the prompt's token ids")
    if not prompt:
        raise ValueError("the prompt is empty: give at least one token")
    if min(prompt) < 0 or max(prompt) >= vocab:
        raise ValueError(f"prompt token ids must lie in 0..{vocab - 1}, got {min(prompt)}..{max(prompt)}")
    return prompt


def check_room(cfg: GenConfig, room: int | None, prompt_len: int | None = None) -> None:
    """The prompt and ``max_new_tokens`` must fit the target's context of ``room`` positions (None: unbounded), and
    with trees the positions past the last token a tree round may score (its depth: ``tree_depth``, else
    ``tree_budget - 1``). OptionError naming the prompt or the budget: past its context a model with learned
    positions fails (GPT-2: an index error deep in torch) and one with rotary positions runs on where it was
    never trained. ``prompt_len`` None (the prompt not yet tokenized): a prompt of one token at least."""
    if room is None:
        return
    extra = min(cfg.tree_depth or cfg.tree_budget - 1, cfg.tree_budget - 1) if cfg.tree_budget else 0
    why = f"the target's context holds {room} positions" + (
        f", and a tree round may score {extra} past the last token" if extra else "")
    n = 1 if prompt_len is None else prompt_len
    if prompt_len is not None and n + 1 + extra > room:
        raise OptionError("prompt", f"{n} tokens", f"at most {room - 1 - extra} tokens ({why})")
    if n + cfg.max_new_tokens + extra > room:
        after = "a prompt of one token at least" if prompt_len is None else f"this {n}-token prompt"
        raise OptionError("max_new_tokens", cfg.max_new_tokens, f"at most {room - n - extra} after {after} ({why})")


def _check_parts(cfg: GenConfig, drafter, verifier, masker) -> None:
    """Speculation has a drafter, a verifier and, for trees, a treemask driver whose limits take the tree."""
    if drafter is None or verifier is None:
        raise ValueError(f"gamma={cfg.gamma} needs a draft source and a verifier")
    if not isinstance(drafter, Drafter):
        raise TypeError(f"draft source {type(drafter).__name__} is not a Drafter (start, propose, commit, free)")
    if cfg.tree_budget:
        if masker is None:
            raise ValueError("tree speculation needs a tree drafter, a verifier and the treemask driver")
        if cfg.tree_budget > min(verifier.tree_max, masker.nodes_max):
            raise ValueError(f"tree budget {cfg.tree_budget} exceeds the cores' limits: verifier TREE_MAX "
                             f"{verifier.tree_max}, treemask NODES_MAX {masker.nodes_max}")


def _kv_counters(target: CausalLM) -> tuple[int, int] | None:
    """The kvpage core's operation and cycle counters (None: a dense cache)."""
    return (target.kv.total_ops, target.kv.total_cycles) if target.paged else None


def _kv_usage(target: CausalLM, mark: tuple[int, int] | None) -> dict[str, int]:
    """kvpage operations and cycles since ``mark``, and the pages in use now (nothing for a dense cache)."""
    if mark is None:
        return {}
    kv = target.kv
    return {"kv_ops": kv.total_ops - mark[0], "kv_cycles": kv.total_cycles - mark[1],
            "kv_pages": kv.pages - kv.free_pages}


def _check_finite(logits, who: str, row: str = "row {0}", ids: np.ndarray | None = None) -> None:
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


def eos_ids(lm: CausalLM) -> set[int]:
    """The tokens that end a generation of ``lm`` (its generation config's EOS ids; empty when none)."""
    e = lm.eos_token_id
    if e is None:
        return set()
    return {int(x) for x in (e if isinstance(e, (list, tuple)) else [e])}
