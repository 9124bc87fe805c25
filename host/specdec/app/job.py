"""A decode job: the prompts, the model pair and every generation option, typed and validated.

A job is plain data. :meth:`Job.to_json` and :meth:`Job.from_json` carry it into the RTL simulation
(``specdec.sim.cocotb_decode``), where :func:`specdec.app.runner.execute` runs it as it does in this process.
Every field is checked when a job is built, before any model loads; a bad one raises
:class:`~specdec.errors.OptionError` naming the field and the value. The JSON form::

    {"prompts": ["..."], "target": null, "draft": null, "max_new_tokens": 64, "gamma": 4,
     "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0}, "seed": 0,
     "tree": null or {"kind": "eagle", "budget": 16, ...}, "kv": {"block": "auto"}, {"block": 16} or false,
     "draft_vocab": null or 8192, "draft_engine": "host" or "fabric", "draft_confidence": null or 0.4}

Any field but ``prompts`` may be left out (its default applies); ``"kv": false`` keeps transformers' dense
KV caches.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Mapping

from hwcontract.regmap import integers

from ..decoding.calibration import Calibration
from ..decoding.drafters import PromptLookup
from ..decoding.tree import parents_from_paths
from ..decoding.base import ADAPTIVE_GAMMAS, GenConfig, Sampling, check_confidence
from ..errors import OptionError, check_int
from ..hw.builds import CORE_PARAMS, TREE_LIMIT
from ..kv.layout import BLOCK_MAX as KV_BLOCK_MAX

#: The largest job seed (a 32-bit word: numpy, torch and the samplers all take it, the prompt's index added).
SEED_MAX = (1 << 32) - 1

#: The ``draft`` that drafts by prompt lookup instead of with a model.
PROMPT_LOOKUP = PromptLookup.name
#: An EAGLE head's name with this suffix drafts by prompt lookup where the context's last n-gram was seen before,
#: with the head elsewhere (:class:`specdec.decoding.eagle.LookupEagleDraft`).
LOOKUP_SUFFIX = "+lookup"
#: Tree builders (:mod:`specdec.decoding.trees`, :mod:`specdec.decoding.sequoia`): Medusa-style static paths,
#: EAGLE-2's dynamic tree, Sequoia's DP topology.
TREE_KINDS = ("static", "eagle", "sequoia")
#: How an EAGLE tree ranks its nodes: by the draft's log-probabilities along the path (EAGLE-2), or by the
#: probabilities that the target takes each token, measured on corpus passages
#: (:class:`specdec.decoding.calibration.Calibration`).
TREE_SCORES = ("draft", "calibrated")
#: The TreeSpec fields each tree kind reads (``calibration_passages``: when it measures its acceptance vector or
#: its scores on the corpus); a value given for a field its kind does not read would shape nothing.
TREE_READS: Mapping[str, tuple[str, ...]] = {
    "static": ("budget", "depth", "paths"),
    "eagle": ("budget", "depth", "topk", "expand", "scores", "calibration", "calibration_passages"),
    "sequoia": ("budget", "depth", "topk", "acceptance", "calibration_passages"),
}
#: Where the draft model runs: ``host`` (transformers, float) or ``fabric`` (the int8 draft engine: its golden
#: model on backend ``ref``, its RTL on ``sim``, the board's overlay on ``pynq``; docs/draftengine.md).
DRAFT_ENGINES = ("host", "fabric")
#: The backends a fabric draft runs on.
FABRIC_BACKENDS = ("ref", "sim", "pynq")
#: ``kv_block`` that leaves the page size to the runtime: the smallest power of two from
#: ``specdec.kv.layout.DEFAULT_BLOCK`` (16) on at which the target's whole context fits the kvpage core
#: (``specdec.kv.layout.pick_block``). A job may ask for any page size up to KV_BLOCK_MAX instead.
KV_AUTO = "auto"


def split_lookup(draft) -> tuple[str, bool]:
    """(the head's name, True) for ``<head>+lookup`` (:data:`LOOKUP_SUFFIX`), else (``draft``, False)."""
    if isinstance(draft, str) and draft.endswith(LOOKUP_SUFFIX):
        return draft.removesuffix(LOOKUP_SUFFIX), True
    return draft, False


def tree_readers(field: str) -> str:
    """The tree kinds that read TreeSpec ``field``, in words."""
    return " and ".join(k for k in TREE_KINDS if field in TREE_READS[k])


@dataclass(frozen=True)
class TreeSpec:
    """Token-tree speculation: the builder and the tree's shape."""

    kind: str                                       # one of TREE_KINDS
    budget: int = 16                                # nodes, root included
    depth: int = 6                                  # largest node depth
    topk: int = 4                                   # eagle: children per expanded node; sequoia: ranks measured
    expand: int | None = None                       # eagle: nodes expanded per depth (None: topk, as EAGLE-2)
    scores: str = "draft"                           # eagle: rank by the draft's log-probabilities or "calibrated"
    calibration: tuple[tuple[float, ...], ...] | None = None    # eagle, calibrated: tree.Calibration's coef
    calibration_passages: int = 8                   # sequoia, calibrated eagle: corpus passages measured on
    acceptance: tuple[float, ...] | None = None     # sequoia: acceptance by draft rank (None: measure it)
    paths: tuple[tuple[int, ...], ...] | None = None    # static: Medusa paths (None: tree.default_paths)

    @property
    def max_depth(self) -> int:
        """The largest node depth a tree of this spec has: its longest path, or ``depth``."""
        return max(map(len, self.paths)) if self.kind == "static" and self.paths else self.depth

    def __post_init__(self) -> None:
        if self.kind not in TREE_KINDS:
            raise OptionError("tree kind", self.kind, f"one of {', '.join(TREE_KINDS)}")
        check_int("tree budget", self.budget, 2, TREE_LIMIT,
                  f"an integer in 2..{TREE_LIMIT} (the cores take trees of up to {TREE_LIMIT} nodes)")
        check_int("tree depth", self.depth, 1, TREE_LIMIT - 1)
        check_int("tree topk", self.topk, 1, TREE_LIMIT - 1)
        check_int("tree calibration_passages", self.calibration_passages, 1)
        if self.expand is not None:
            check_int("tree expand", self.expand, 1, TREE_LIMIT - 1)
        if self.scores not in TREE_SCORES:
            raise OptionError("tree scores", self.scores, f"one of {', '.join(TREE_SCORES)}")
        if self.calibration is not None:
            if self.kind != "eagle" or self.scores != "calibrated":
                raise OptionError("tree calibration", self.calibration, "None unless kind is 'eagle' with scores "
                                                                        "'calibrated' (nothing else reads it)")
            try:
                coef = Calibration(self.calibration).coef
            except ValueError as err:
                raise OptionError("tree calibration", self.calibration, str(err)) from None
            object.__setattr__(self, "calibration", coef)
        if self.acceptance is not None:
            object.__setattr__(self, "acceptance", _acceptance(self.acceptance))
        if self.paths is not None:
            object.__setattr__(self, "paths", _paths(self.paths))
            nodes = len(parents_from_paths(self.paths))
            if nodes > self.budget:         # the tree would be cut to the budget, the result still naming them all
                raise OptionError("tree paths", self.paths, f"paths of at most {self.budget} nodes, the root "
                                                            f"included (the budget; these make {nodes})")
        # a field another kind reads, given a value: it would shape nothing (a field left at its default is not
        # checked: a spec cannot tell it from one given)
        for f in dataclasses.fields(self):
            name, default = f.name, f.default
            if name != "kind" and getattr(self, name) != default and name not in TREE_READS[self.kind]:
                a = "an" if self.kind[0] in "aeiou" else "a"
                raise OptionError(f"tree {name}", getattr(self, name),
                                  f"{default!r} for {a} {self.kind} tree (only {tree_readers(name)} trees read it)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TreeSpec:
        """The spec of a job's ``tree`` object (missing keys take their defaults)."""
        _known("tree", d, _names(cls))
        return cls(**{"kind": None, **d})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Job:
    """Prompts run through the decode loop with one model pair and one set of options."""

    prompts: tuple[str, ...]
    target: str | None = None           # a demo name, a local directory or a hub id (None: the demo target)
    draft: str | None = None            # the same, or PROMPT_LOOKUP (None: the target's usual draft)
    max_new_tokens: int = 64
    gamma: int | str = 4                # draft tokens per round, "auto", "model", or 0 (target-only decoding)
    sampling: Sampling = Sampling()
    seed: int = 0
    tree: TreeSpec | None = None        # token-tree speculation instead of chains
    kv_block: int | str | None = KV_AUTO    # tokens per page of the paged KV caches (None: dense caches)
    draft_vocab: int | None = None      # the draft's hot vocabulary: its N most frequent tokens (None: all)
    draft_engine: str = "host"          # where the draft model runs: DRAFT_ENGINES
    draft_confidence: float | None = None   # a chain stops after a draft token below this draft probability

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", _prompts(self.prompts))
        for name in ("target", "draft"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise OptionError(name, value, "a model name or directory (None: the default)")
        if self.gamma not in ADAPTIVE_GAMMAS:
            gmax = CORE_PARAMS["GAMMA_MAX"]
            check_int("gamma", self.gamma, 0, gmax, f"an integer in 0..{gmax} (the verifier core's GAMMA_MAX), "
                                                    f"'auto' or 'model'")
        if not isinstance(self.sampling, Sampling):
            raise OptionError("sampling", self.sampling, "a specdec.decoding.base.Sampling")
        if self.tree is not None and not isinstance(self.tree, TreeSpec):
            raise OptionError("tree", self.tree, "a TreeSpec or None")
        if self.kv_block is not None and self.kv_block != KV_AUTO:
            check_int("kv_block", self.kv_block, 1, KV_BLOCK_MAX,
                      f"{KV_AUTO!r} or an integer number of tokens per KV page in 1..{KV_BLOCK_MAX}")
        if self.tree is not None and self.draft == PROMPT_LOOKUP:
            raise OptionError("draft", self.draft, "a model for tree speculation (tree speculation drafts "
                                                   "with a model; prompt lookup builds no trees)")
        if split_lookup(self.draft)[1] and self.tree is not None:
            raise OptionError("draft", self.draft, f"a draft without {LOOKUP_SUFFIX!r} for a tree (prompt lookup "
                                                   "drafts chains)")
        if self.draft_vocab is not None:
            check_int("draft_vocab", self.draft_vocab, 1, allowed="a hot-vocabulary size >= 1 (none: all tokens)")
            if self.draft == PROMPT_LOOKUP:
                raise OptionError("draft_vocab", self.draft_vocab, "none with prompt lookup (it has no LM head)")
        if check_confidence(self.draft_confidence) is not None:
            if self.draft == PROMPT_LOOKUP or self.tree is not None:
                raise OptionError("draft_confidence", self.draft_confidence,
                                  "none with prompt lookup or a tree (it stops a draft model's chain)")
        if self.draft_engine not in DRAFT_ENGINES:
            raise OptionError("draft_engine", self.draft_engine, f"one of {', '.join(DRAFT_ENGINES)}")
        if self.draft_engine == "fabric" and self.draft == PROMPT_LOOKUP:
            raise OptionError("draft_engine", self.draft_engine, "'host' with prompt lookup (there is no draft "
                                                                 "model to run on the engine)")
        # here too: config() adds the prompt's index, which makes True an int
        check_int("seed", self.seed, 0, SEED_MAX)
        self.config()       # max_new_tokens and seed: GenConfig's checks

    def check_backend(self, backend: str) -> None:
        """OptionError when this job cannot run on ``backend`` (a fabric draft off FABRIC_BACKENDS)."""
        if self.draft_engine == "fabric" and backend not in FABRIC_BACKENDS:
            raise OptionError("draft_engine", self.draft_engine,
                              f"'host' on backend {backend!r}: a fabric draft runs on backend "
                              f"{' or '.join(FABRIC_BACKENDS)}")

    @property
    def speculative(self) -> bool:
        """False for target-only decoding (gamma 0, no tree): no drafter and no verifier."""
        return self.gamma != 0 or self.tree is not None

    def config(self, index: int = 0) -> GenConfig:
        """The loop's settings for prompt ``index`` (its sampler seeded with ``seed + index``)."""
        return GenConfig(self.max_new_tokens, self.gamma, self.sampling, self.seed + index,
                         tree_budget=self.tree.budget if self.tree else 0,
                         tree_depth=self.tree.max_depth if self.tree else 0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Job:
        """The job of a JSON object (see the module docstring); unknown keys are refused."""
        _known("job", d, _names(cls) - {"kv_block"} | {"kv"})
        kw = {k: v for k, v in d.items() if k not in ("sampling", "tree", "kv")}
        kw["prompts"] = d.get("prompts")
        if "sampling" in d:
            s = d["sampling"] or {}
            _known("sampling", s, _names(Sampling))
            kw["sampling"] = Sampling(**s)
        if d.get("tree"):
            kw["tree"] = d["tree"] if isinstance(d["tree"], TreeSpec) else TreeSpec.from_dict(d["tree"])
        if "kv" in d:
            kw["kv_block"] = _kv_block(d["kv"])
        return cls(**kw)

    def to_dict(self) -> dict:
        return {"prompts": list(self.prompts), "target": self.target, "draft": self.draft,
                "max_new_tokens": self.max_new_tokens, "gamma": self.gamma,
                "sampling": dataclasses.asdict(self.sampling), "seed": self.seed,
                "tree": self.tree.to_dict() if self.tree else None,
                "kv": False if self.kv_block is None else {"block": self.kv_block}, "draft_vocab": self.draft_vocab,
                "draft_engine": self.draft_engine, "draft_confidence": self.draft_confidence}

    @classmethod
    def from_json(cls, text: str) -> Job:
        return cls.from_dict(json.loads(text))

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def as_job(job: Job | Mapping[str, Any]) -> Job:
    """``job`` itself, or the job of its JSON object form."""
    return job if isinstance(job, Job) else Job.from_dict(job)


def _names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _known(what: str, d, names: set[str]) -> None:
    """Refuse ``d`` unless it is a mapping whose keys are among ``names``, naming the first stranger."""
    if not isinstance(d, Mapping):
        raise OptionError(what, d, f"a JSON object with keys among {', '.join(sorted(names))}")
    unknown = sorted(set(d) - names)
    if unknown:
        raise OptionError(f"{what} field", unknown[0], f"one of {', '.join(sorted(names))}")


def _prompts(prompts) -> tuple[str, ...]:
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise OptionError("prompts", prompts, "a non-empty list of prompt texts")
    for p in prompts:
        if not isinstance(p, str) or not p:
            raise OptionError("prompt", p, "non-empty text")
        try:
            p.encode("utf-8")               # a lone surrogate: the tokenizer fails on it, naming no prompt
        except UnicodeEncodeError as e:
            raise OptionError("prompt", p, f"text that UTF-8 can encode (a lone surrogate at {e.start})") from None
    return tuple(prompts)


def _kv_block(kv) -> int | None:
    """A job's ``kv`` entry: false (dense caches), or {"block": B} (B tokens per page, or "auto", the default)."""
    if kv is False:
        return None
    if kv is None or kv is True:
        return KV_AUTO
    _known("kv", kv, {"block"})
    return kv.get("block", KV_AUTO)


def _acceptance(acc) -> tuple[float, ...]:
    try:
        values = tuple(float(a) for a in acc)
    except (TypeError, ValueError):
        values = ()
    if not values or any(not 0 <= a <= 1 for a in values):
        raise OptionError("tree acceptance", acc, "one value in [0, 1] per draft rank")
    return values


def _paths(paths) -> tuple[tuple[int, ...], ...]:
    try:
        out = tuple(tuple(integers(p, "a path's ranks")) for p in paths)
        nodes = len(parents_from_paths(out))
    except (TypeError, ValueError) as err:
        raise OptionError("tree paths", paths, f"Medusa paths that form a tree ({err})") from None
    if not out:                             # () built the default tree while the result named no path
        raise OptionError("tree paths", paths, "one path at least (None: the default paths)")
    if nodes > TREE_LIMIT:
        raise OptionError("tree paths", paths, f"at most {TREE_LIMIT - 1} paths (trees of up to {TREE_LIMIT} "
                                               f"nodes)")
    return out
