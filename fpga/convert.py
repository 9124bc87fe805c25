"""Convert a core to Verilog (one file per core and parameter set)."""
from __future__ import annotations

import importlib
from pathlib import Path

# core name -> (module, top block, port factory, {param: (default, allowed values or None, doc)})
CORES = {
    "rng": ("fpga.rng", "rng", {}),
    "verifier": ("fpga.verifier", "verifier", {
        "VOCAB_MAX": (64, None, "Largest VOCAB accepted: depth of the two on-chip row buffers (tokens)."),
        "LANES": (4, {1, 2, 4, 8}, "Logit codes per stream beat (TDATA is 16 * LANES bits)."),
        "GAMMA_MAX": (16, range(1, 17), "Largest GAMMA (draft tokens per round) accepted."),
        "TREE_MAX": (64, range(1, 65), "Largest NODES (token-tree nodes, root included) accepted in tree mode."),
    }),
    "treemask": ("fpga.treemask", "treemask", {
        "NODES_MAX": (64, range(1, 65), "Largest NODES (tree nodes, root included) accepted."),
    }),
    "kvpage": ("fpga.kvpage", "kvpage", {
        "PAGES": (256, {1 << k for k in range(4, 11)}, "Physical pages in the pool (a power of two)."),
        "MAX_BLOCKS": (64, {1 << k for k in range(2, 11)}, "Rows of each slot's block table (a power of two)."),
    }),
}
# Toplevels that hold several cores (simulation of the whole loop; not a core of their own).
SYSTEMS = {
    "system": ("fpga.system", "system", {**CORES["verifier"][2], **CORES["treemask"][2], **CORES["kvpage"][2]}),
}

# Parameter overrides for the logic-depth (abc9 + sta) run. yosys 0.23's abc9 aborts on a design with
# RAMB36E1 cells, so a verifier with block-RAM row buffers is timed on the same datapath with VOCAB_MAX 64
# (buffers in LUTs, counters narrower): the arrival printed for it says so.
TIMING_PARAMS = {"verifier": {"VOCAB_MAX": 64}}


def _entry(core: str):
    """(module, top block, parameter spec) of a core or a system toplevel."""
    if core in CORES:
        return CORES[core]
    if core in SYSTEMS:
        return SYSTEMS[core]
    raise KeyError(f"unknown core {core!r}; valid cores: {sorted(CORES)} (and toplevels {sorted(SYSTEMS)})")


def params_for(core: str, given: dict[str, str] | None = None) -> dict[str, int]:
    """Validated parameters for ``core``: defaults overridden by ``given`` (strings from the CLI)."""
    spec = _entry(core)[2]
    out = {k: v[0] for k, v in spec.items()}
    for key, raw in (given or {}).items():
        if key not in spec:
            raise KeyError(f"core {core!r} has no parameter {key!r}; valid parameters: {sorted(spec) or 'none'}")
        try:
            val = int(raw, 0) if isinstance(raw, str) else int(raw)
        except ValueError:
            raise ValueError(f"parameter {key}={raw!r} of core {core!r} is not an integer") from None
        allowed = spec[key][1]
        if allowed is not None and val not in allowed:
            raise ValueError(f"parameter {key}={val} of core {core!r} not in {sorted(allowed)}")
        out[key] = val
    return out


def toplevel_name(core: str, params: dict[str, int]) -> str:
    """Verilog module name: the core name, suffixed with non-default parameters."""
    spec = _entry(core)[2]
    suffix = "".join(f"_{k.lower()}{v}" for k, v in sorted(params.items()) if v != spec[k][0])
    return core + suffix


def convert(core: str, params: dict[str, int] | None = None, out_dir: str | Path = "build/verilog") -> Path:
    """Convert ``core`` with ``params`` to ``out_dir/<toplevel>.v``; returns the file's path."""
    params = params_for(core, {k: str(v) for k, v in (params or {}).items()})
    modname, top, _ = _entry(core)
    mod = importlib.import_module(modname)
    name = toplevel_name(core, params)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    inst = getattr(mod, top)(*mod.make_ports(**params), **params)
    inst.convert(hdl="Verilog", path=str(out_dir), name=name, no_testbench=True, timescale="1ns/1ps")
    return out_dir / f"{name}.v"


if __name__ == "__main__":
    import sys
    for c in sys.argv[1:] or sorted(CORES):
        print(convert(c))
