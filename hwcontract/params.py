"""One parameter spec per core: names, defaults, allowed values and the error a bad value gets.

The MyHDL blocks (``fpga``), the conversion and report tools, the golden register models, the C++
references, the testbenches and the benchmarks all validate build parameters here, so a range is written
once. A toplevel that holds several cores (``system``, ``overlay``) takes the union of their parameters, a
core's named with its prefix where :data:`SYSTEM_PREFIXES` gives one.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Mapping

from hwcontract.regmap import (DE_COLS, DE_M_MAX, DE_ROWS, KV_MAX_BLOCKS, KV_MAX_PAGES, KV_SLOTS, TA_CTX_LIMIT, VU_LEN_LIMIT,
                               TREE_MAX_NODES, VERIFIER_MAX_GAMMA, VOCAB_LIMIT)


@dataclass(frozen=True)
class Param:
    """One build parameter of a core."""

    name: str
    default: int
    allowed: range | tuple[int, ...]
    doc: str

    def describe(self) -> str:
        """The allowed values in words, for error messages and docs."""
        a = self.allowed
        if isinstance(a, range) and a.step == 1:
            return f"{a.start}..{a.stop - 1}"
        if isinstance(a, range) and len(a) > 8:
            return f"{a.start}..{a[-1]} in steps of {a.step}"
        return "{" + ", ".join(str(v) for v in a) + "}"

    def check(self, value, core: str = "") -> int:
        """``value`` as an int, or ValueError naming the core, the parameter, the value and what is allowed."""
        where = f" of core {core!r}" if core else ""
        v = _whole(value)
        if v is None:
            raise ValueError(f"parameter {self.name}={value!r}{where} is not an integer")
        if v not in self.allowed:
            raise ValueError(f"parameter {self.name}={v}{where} not in {self.describe()}")
        return v


def _whole(value) -> int | None:
    """``value`` as an int: a Python or numpy integer, a string in any base ``int(s, 0)`` reads, or a float
    (Python or numpy) with no fraction; None for anything else, bools included (``int()`` would have taken
    numpy's 4.5 as 4 and True as 1)."""
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b":     # numpy's too
        return None
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    try:
        return operator.index(value)
    except TypeError:
        pass
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(f) if f.is_integer() else None


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(lo.bit_length() - 1, hi.bit_length()))


CORES: dict[str, tuple[Param, ...]] = {
    "rng": (),
    "verifier": (
        Param("VOCAB_MAX", 64, range(1, VOCAB_LIMIT + 1),
              "Largest VOCAB accepted: depth of the two on-chip row buffers (tokens)."),
        Param("LANES", 4, (1, 2, 4, 8), "Logit codes per stream beat (TDATA is 16 * LANES bits)."),
        Param("GAMMA_MAX", VERIFIER_MAX_GAMMA, range(1, VERIFIER_MAX_GAMMA + 1),
              "Largest GAMMA (draft tokens per round) accepted."),
        Param("TREE_MAX", TREE_MAX_NODES, range(1, TREE_MAX_NODES + 1),
              "Largest NODES (token-tree nodes, root included) accepted in tree mode."),
        Param("ROW_URAM", 0, range(0, 2), "1: each row buffer is one UltraRAM memory (ram_style ultra, no tail "
                                          "split); 0: block RAM with a distributed tail. The read takes "
                                          "VER_BUF_READ cycles either way."),
    ),
    "treemask": (
        Param("NODES_MAX", TREE_MAX_NODES, range(1, TREE_MAX_NODES + 1),
              "Largest NODES (tree nodes, root included) accepted."),
    ),
    "kvpage": (
        Param("PAGES", 256, _pow2(16, KV_MAX_PAGES), "Physical pages in the pool (a power of two)."),
        Param("MAX_BLOCKS", 64, _pow2(4, KV_MAX_BLOCKS), "Rows of each slot's block table (a power of two)."),
        Param("SLOTS", KV_SLOTS, _pow2(16, KV_SLOTS), "Slots (sequences and branches; a power of two): the "
                                                      "per-slot state and its multiplexers scale with it."),
    ),
    "draftengine": (
        Param("ROWS", 8, DE_ROWS, "Array rows: output channels per tile (m_axis is 32 * ROWS bits)."),
        Param("COLS", 8, DE_COLS, "Array columns: input features per chunk (s_axis is 8 * ROWS * COLS bits)."),
        Param("WDEPTH", 1024, range(256, 65536 + 1, 256), "Weight memory depth in beats (a multiple of 256)."),
        Param("PDEPTH", 256, _pow2(16, 8192), "Parameter memory depth in tiles of ROWS channels (a power of two)."),
        Param("K_MAX", 1024, _pow2(256, 8192), "Largest K (a power of two): the activation memory holds "
                                                "M_MAX * K_MAX / (ROWS * COLS) beats."),
        Param("M_MAX", DE_M_MAX, range(1, DE_M_MAX + 1), "Largest M (tokens per job)."),
        Param("URAM", 0, range(0, 2), "1: the weight memory is UltraRAM (ram_style ultra), its read pipelined "
                                 "(hwcontract.latency.de_wpipe); 0: block RAM, one read register."),
    ),
    "treeattn": (
        Param("HEAD_DIM", 64, (32, 64, 128), "Dimensions of a head (E = HEAD_DIM / 16 stream beats a vector)."),
        Param("GROUP", 3, range(1, 9), "Query heads per KV head (grouped-query attention)."),
        Param("NODES_MAX", TREE_MAX_NODES, range(1, TREE_MAX_NODES + 1),
              "Largest NODES (step rows: a chain's positions or a tree's nodes) accepted."),
        Param("LANES", 16, (8, 16, 32), "Multiply-accumulates per cycle (<= HEAD_DIM): D = HEAD_DIM / LANES cycles "
                                        "a vector."),
        Param("CTX_MAX", TA_CTX_LIMIT, range(16, TA_CTX_LIMIT + 1), "Largest CTX (committed context keys) accepted."),
        Param("BLOCK", 32, (16, 32, 64), "Context keys per block buffer (two buffers, ping-pong): a pass's "
                                              "fill is paid once a block."),
    ),
    "vecunit": (
        Param("LEN_MAX", 16384, _pow2(256, VU_LEN_LIMIT), "Largest LEN (a power of two): the job's element "
                                                         "counters (no memory holds a vector)."),
        Param("PARTS_MAX", 16, range(1, 17), "Largest PARTS of a DEQ job (int32 parts an element)."),
        Param("HALF_MAX", 64, _pow2(16, 128), "Largest HALF of a ROPE job (a power of two): the depth of the "
                                             "two half-head buffers."),
        Param("K_MAX", 8, range(1, 17), "Largest K of a TOPK job (the kept values are registers)."),
    ),
}
#: Toplevels that hold several cores (simulation of the whole loop): the union of their parameters.
SYSTEMS: dict[str, tuple[str, ...]] = {"system": ("verifier", "treemask", "kvpage", "draftengine"),
                                      "overlay": ("verifier", "treemask", "kvpage", "draftengine", "rng",
                                                  "treeattn", "vecunit")}
#: Per toplevel, the prefix of a core's parameters there, where they would clash with another core's: the
#: overlay's treeattn takes ``TA_LANES`` beside the verifier's ``LANES``, ``TA_NODES_MAX`` beside the treemask
#: core's ``NODES_MAX``; its vecunit ``VU_K_MAX`` beside the draft engine's ``K_MAX``.
SYSTEM_PREFIXES: dict[str, dict[str, str]] = {"overlay": {"treeattn": "TA_", "vecunit": "VU_"}}
#: The plusarg naming the file the ``system`` toplevel's simulation-only row feeder (``fpga.system.row_feed``)
#: reads the verifier's rows from: ``+specdec_rows=<path>``; the host's simulation harness passes it.
ROWS_PLUSARG = "specdec_rows"


def spec(core: str) -> dict[str, Param]:
    """The parameters of a core or a system toplevel, by name."""
    if core in CORES:
        return {p.name: p for p in CORES[core]}
    if core in SYSTEMS:
        out: dict[str, Param] = {}
        for c in SYSTEMS[core]:
            prefix = SYSTEM_PREFIXES.get(core, {}).get(c, "")
            for p in CORES[c]:
                name = prefix + p.name
                if name in out:
                    raise KeyError(f"toplevel {core!r}: parameter {name} of core {c!r} clashes with another core's "
                                   f"(give {c!r} a prefix in SYSTEM_PREFIXES)")
                out[name] = replace(p, name=name)
        return out
    raise KeyError(f"unknown core {core!r}; valid cores: {sorted(CORES)} (and toplevels {sorted(SYSTEMS)})")


def system_params(system: str, cores: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The parameters of toplevel ``system`` holding ``cores`` (core -> its build parameters), each core's named
    as the toplevel names it (its prefix of :data:`SYSTEM_PREFIXES`). KeyError for a core the toplevel lacks."""
    if system not in SYSTEMS:
        raise KeyError(f"unknown toplevel {system!r}; toplevels: {sorted(SYSTEMS)}")
    out: dict[str, int] = {}
    for c, values in cores.items():
        if c not in SYSTEMS[system]:
            raise KeyError(f"toplevel {system!r} holds no core {c!r}; its cores: {list(SYSTEMS[system])}")
        prefix = SYSTEM_PREFIXES.get(system, {}).get(c, "")
        out.update({prefix + k: v for k, v in values.items()})
    return out


def defaults(core: str) -> dict[str, int]:
    """Every parameter of ``core`` at its default."""
    return {n: p.default for n, p in spec(core).items()}


def check(core: str, given: Mapping[str, object] | None = None) -> dict[str, int]:
    """Validated parameters for ``core``: the defaults overridden by ``given`` (ints, or strings from a CLI).

    Raises
    ------
    KeyError
        An unknown core or parameter (the message lists the valid ones).
    ValueError
        A value outside its allowed set (the message names it and the set).
    """
    sp = spec(core)
    out = defaults(core)
    for key, raw in (given or {}).items():
        if key not in sp:
            raise KeyError(f"core {core!r} has no parameter {key!r}; valid parameters: {sorted(sp) or 'none'}")
        out[key] = sp[key].check(raw, core)
    return out


def toplevel_name(core: str, values: Mapping[str, int]) -> str:
    """The Verilog module (and file stem) of ``core`` built at ``values``: the core name, suffixed with each
    non-default parameter (``verifier_lanes8_vocab_max50272``). A toplevel without parameters keeps its name."""
    default = defaults(core) if values else {}
    return core + "".join(f"_{k.lower()}{v}" for k, v in sorted(values.items()) if v != default[k])
