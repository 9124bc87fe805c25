"""The decoding loop's shared types: settings, proposals, the drafter protocol and the records of a generation.

A leaf of :mod:`specdec.decoding`: the drafters, the tree builders, the loop and the metrics take their types from
here, and this module imports none of them. The token tree itself is :class:`specdec.decoding.tree.Tree`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from hwcontract.formats import INV_TEMP_MAX, inv_temp
from hwcontract.regmap import TREE_MAX_NODES

from ..errors import OptionError, check_int
from .tree import Tree


#: Gammas that adapt per round: "auto" (+2 after a fully accepted round, -1 otherwise, like the "heuristic"
#: schedule of Hugging Face assisted generation) and "model" (the gamma the break-even model of
#: :mod:`specdec.decoding.breakeven` predicts fastest from this generation's own measurements).
ADAPTIVE_GAMMAS = ("auto", "model")
#: First gamma of an adaptive schedule.
AUTO_GAMMA_START = 4


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
    #: True when a proposal reads the target's cache or features (an EAGLE head): the loop then has the target
    #: take the prompt before the first round (``specdec.decoding.loop.prefill``).
    reads_target: bool

    def start(self, context: list[int]) -> None:
        """Take the prompt ``context`` (its last token is fed by the first round)."""

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        """A proposal after ``context`` for a target pass over at most ``budget`` positions (the context's
        last token and the drafted ones): a :class:`Chain` of at most ``budget - 1`` tokens, or a
        :class:`~specdec.decoding.tree.Tree` of at most ``budget`` nodes, root included."""

    def commit(self, valid: int) -> None:
        """The first ``valid`` tokens of the context are final: drop what lies past them."""

    def free(self) -> None:
        """Release what the drafter holds (a paged KV cache's pages go back to the pool)."""


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


def check_confidence(value: float | None) -> float | None:
    """``value`` if it is a usable draft confidence (a probability in (0, 1)) or None; OptionError otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0.0 < value < 1.0):
        raise OptionError("draft_confidence", value, "a probability in (0, 1), or none")
    return value


@dataclass(frozen=True, kw_only=True)
class Round:
    """One round's record: what was proposed, accepted and emitted, and where its time went (seconds)."""

    g: int                          # draft tokens proposed (a tree's nodes after the root)
    n_accept: int                   # draft tokens the verifier accepted (a tree round's may outnumber the tokens
                                    # emitted where the budget or an EOS cuts the last round)
    emitted: int                    # tokens emitted (accepted, then the next token; cut at EOS / the budget)
    depth: int                      # deepest draft position: a chain's g, a tree's largest node depth
    prompt: int = 0                 # prompt tokens the round's target pass took besides its g + 1 positions (the
                                    # first round of a generation whose target started empty: loop.prefill)
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
