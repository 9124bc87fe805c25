"""The speculative decoding loop.

One round (:func:`speculative_round`) reads top to bottom::

    the drafter proposes (a chain of g tokens and its rows q, or a token tree)
    ->  a tree's attention mask comes from the treemask core
    ->  the target scores every drafted position in one pass (rows p)
    ->  the verifier decides (quantize, stream, accept/reject, resample or bonus)
    ->  the tokens are emitted (cut at EOS and the budget), both KV caches keep them
    ->  the round's record

Every draft source is a :class:`~specdec.decoding.base.Drafter`: a draft model or prompt lookup
(:mod:`specdec.decoding.drafters`), a tree builder (:mod:`specdec.decoding.trees`, :mod:`specdec.decoding.sequoia`)
or the EAGLE head (:mod:`specdec.decoding.eagle`). The verifier is a :class:`specdec.hw.drivers.Verifier` on any
backend (golden model, RTL simulation, board); this module never asks which. ``gamma = 0`` is target-only decoding
(:class:`~specdec.decoding.drafters.NoDraft`, the host picks each token), the baseline the benchmarks compare
against.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import numpy as np

from hwcontract.regmap import integers

from ..errors import OptionError
from ..models.lm import CausalLM, context_length
from .breakeven import expected_tokens
from .drafters import NoDraft
from .rows import check_finite, choose_host, mask_logits
from .threads import owned_threads
from .tree import Tree
from .base import ADAPTIVE_GAMMAS, AUTO_GAMMA_START, Drafter, GenConfig, Generation, Proposal, Round, Sampling

if TYPE_CHECKING:
    import torch

    from ..hw.drivers import TreeMask, Verifier


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
            if not rnd.prompt:                  # a round that took the prompt is no round over g + 1 positions
                c = self._cost.setdefault(g + 1, [0.0, 0])
                c[0] += rnd.total_s - rnd.draft_s
                c[1] += 1
            self.gamma = self.predicted_best()

    def predicted_best(self) -> int:
        """The gamma in 1..GAMMA_MAX with the highest predicted tokens per second (see the class docstring)."""
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


# --- records ----------------------------------------------------------------------------------------------


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
        drafter (``specdec.decoding.trees``); ignored (may be None) for target-only decoding (``gamma == 0``).
    verifier : specdec.hw.drivers.verifier.Verifier or None
        Any backend; ignored (may be None) for target-only decoding.
    prompt : list of int
        The prompt's token ids (at least one).
    cfg : GenConfig
    masker : specdec.hw.drivers.treemask.TreeMask, optional
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
    # numpy's BLAS pool on one thread (specdec.decoding.threads); a paged cache's sequence goes back to the pool, also
    # when a round fails
    with owned_threads(), _released(target, drafter):
        prefill(target, drafter, ctx, bool(cfg.tree_budget))
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


def prefill(target: CausalLM, drafter: Drafter, ctx: list[int], trees: bool = False) -> None:
    """The drafter takes the prompt but its last token, which the first round feeds. The target takes it too
    where the first round needs it cached: tree rounds (a tree's root is the context's last token over a
    committed prefix) and a drafter that reads the target (:attr:`Drafter.reads_target`: an EAGLE head drafts
    from the target's features of the prompt). Otherwise the target starts empty and the first round's pass
    takes the whole prompt with the drafted tokens: one target forward fewer a generation, as transformers'
    ``generate`` runs."""
    if trees or drafter.reads_target:
        target.prefill(ctx)
    else:
        target.reset()
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
    prompt = len(ctx) - 1 - dec.target.length       # context the target has not cached yet, but the last token
    clock = _Stopwatch()
    proposal = dec.drafter.propose(ctx, budget, dec.sampling, dec.rng)
    draft_s = clock.lap()
    mask = tree_mask(dec.masker, proposal)
    mask_s = clock.lap()
    raw = score(dec.target, ctx, proposal, mask)
    target_s = clock.lap()
    check_finite(raw, dec.target.name, "the target's row at tree node {0}" if isinstance(proposal, Tree)
                  else "p_{0} (the target's row at position {0})")
    p = mask_logits(raw, dec.sampling)          # host work: counted in the round's host time
    clock.lap()
    decision = decide(dec, proposal, p)
    verify_s = clock.lap() - decision.transfer_s
    out, stopped = _cut(decision.tokens, dec.eos, left)
    commit(dec, len(ctx) + len(out) - 1, decision.path)
    return out, stopped, Round(
        g=proposal.drafted, n_accept=decision.n_accept, emitted=len(out), depth=proposal.height, prompt=prompt,
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
    return target.forward(ctx[target.length:] + list(proposal.tokens), keep=proposal.drafted + 1)


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
                         "(specdec.app.pairs.encode(pair.tokenizer, text))")
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




def eos_ids(lm: CausalLM) -> set[int]:
    """The tokens that end a generation of ``lm`` (its generation config's EOS ids; empty when none)."""
    e = lm.eos_token_id
    if e is None:
        return set()
    return {int(x) for x in (e if isinstance(e, (list, tuple)) else [e])}
