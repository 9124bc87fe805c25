"""The cores of a backend built in this process: :class:`Cores` (the verifier, the treemask core and the kvpage
core of one backend), and the drivers over the golden register models (backend ``ref``, :mod:`specdec.hw.golden`)
at the project's builds (:mod:`specdec.hw.builds`). A board's cores come from its overlay
(:meth:`specdec.hw.overlay.SpecdecOverlay.cores`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from hwcontract import params as hwparams

from .builds import CORE_PARAMS, DRAFTENGINE_PARAMS, KV_PARAMS, TREEATTN_PARAMS, TREEMASK_PARAMS, VECUNIT_PARAMS
from .drivers import DraftEngine, KVPage, TreeAttn, TreeMask, VecUnit, Verifier
from .drivers.base import description
from .golden import GoldenDevice


@dataclass(frozen=True)
class Cores:
    """The drivers of one backend's cores (None for a core the backend lacks)."""

    verifier: Verifier | None = None
    masker: TreeMask | None = None
    kv: KVPage | None = None


@dataclass(frozen=True)
class Fabric:
    """The cores a fabric draft runs on: the draft engine, and where the backend holds them the vector unit (the
    int8 EAGLE head's glue) and the tree-attention unit (its attention). None for a unit: the head runs that part
    on its golden model in this process, the same arithmetic."""

    engine: DraftEngine
    vector: VecUnit | None = None
    attention: TreeAttn | None = None
    #: ``allocate(shape=..., dtype=...)``: memory the units' DMAs read in place (the head's KV pool); None: numpy's.
    allocate: Callable | None = None


def _golden_params(core: str, build: Mapping[str, int], params: Mapping[str, Any] | None) -> dict[str, int]:
    """``build``'s parameters overridden by ``params``, checked by the contract (``hwcontract.params``), as the
    golden model's keywords. An unknown name (``{"lanes": 8}``, ``{"SLOTS": 16}``) raises KeyError listing the valid
    ones."""
    return {k.lower(): v for k, v in hwparams.check(core, {**build, **(params or {})}).items()}


def golden_verifier(params: dict | None = None) -> Verifier:
    """The verifier driver over the golden register model (backend ``ref``); ``params`` override the project's
    build (``hwcontract.params`` names: ``{"LANES": 8}``)."""
    dev = GoldenDevice({0: "verifier"}, {0: _golden_params("verifier", CORE_PARAMS, params)})
    return Verifier(description("verifier", dev), dev.stream(0))


def golden_draftengine(params: dict | None = None) -> DraftEngine:
    """The draft engine driver over the golden register model (backend ``ref``), at the build that holds the
    whole demo draft (:data:`specdec.hw.builds.DRAFTENGINE_PARAMS`)."""
    dev = GoldenDevice({0: "draftengine"}, {0: _golden_params("draftengine", DRAFTENGINE_PARAMS, params)})
    return DraftEngine(description("draftengine", dev), dev.stream(0), dev.sink(0))


def golden_masker(params: dict | None = None) -> TreeMask:
    """The treemask driver over the golden register model (backend ``ref``)."""
    dev = GoldenDevice({0: "treemask"}, {0: _golden_params("treemask", TREEMASK_PARAMS, params)})
    return TreeMask(description("treemask", dev), dev.sink(0))


def golden_kvpage(params: dict | None = None) -> KVPage:
    """The kvpage driver over the golden register model (backend ``ref``)."""
    dev = GoldenDevice({0: "kvpage"}, {0: _golden_params("kvpage", KV_PARAMS, params)})
    return KVPage(description("kvpage", dev))


def golden_fabric(params: dict | None = None) -> Fabric:
    """The golden draft engine (:func:`golden_draftengine`) alone: the head's glue and attention run on their
    golden models in the head itself."""
    return Fabric(golden_draftengine(params))


def golden_treeattn(params: dict | None = None) -> TreeAttn:
    """The treeattn driver over the golden register model (backend ``ref``), at the EAGLE head's build
    (:data:`specdec.hw.builds.TREEATTN_PARAMS`)."""
    dev = GoldenDevice({0: "treeattn"}, {0: _golden_params("treeattn", TREEATTN_PARAMS, params)})
    return TreeAttn(description("treeattn", dev), dev.stream(0), dev.sink(0))


def golden_vecunit(params: dict | None = None) -> VecUnit:
    """The vecunit driver over the golden register model (backend ``ref``), at the project's build
    (:data:`specdec.hw.builds.VECUNIT_PARAMS`)."""
    dev = GoldenDevice({0: "vecunit"}, {0: _golden_params("vecunit", VECUNIT_PARAMS, params)})
    return VecUnit(description("vecunit", dev), dev.stream(0), dev.sink(0))
