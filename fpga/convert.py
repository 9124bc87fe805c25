"""Convert a core to Verilog: one file per core and parameter set, the same bytes in every process.

MyHDL's output depends on the interpreter's string-hash seed (the order of some declarations) and carries a
date line and its own path, and a second conversion in one process renames internals. :func:`convert` therefore converts in
a fresh interpreter with ``PYTHONHASHSEED=0`` and drops the date line, so an unchanged core gives an
unchanged file and the simulators' build caches hit across runs. Every memory carries the ``ram_style`` its
block declared (``fpga.pipe.Ram``), so Vivado is asked to map each memory as the resource report counts it.

Parameters, defaults and allowed values are the contract's (:mod:`hwcontract.params`).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

from hwcontract import params as hwparams

# core or system toplevel -> (MyHDL module, top block)
BLOCKS = {
    "rng": ("fpga.rng", "rng"),
    "verifier": ("fpga.verifier", "verifier"),
    "treemask": ("fpga.treemask", "treemask"),
    "kvpage": ("fpga.kvpage", "kvpage"),
    "draftengine": ("fpga.draftengine", "draftengine"),
    "treeattn": ("fpga.treeattn", "treeattn"),
    "vecunit": ("fpga.vecunit", "vecunit"),
    "system": ("fpga.system", "system"),     # verifier + treemask + kvpage + draft engine (the whole loop)
    "overlay": ("fpga.overlay_top", "overlay"),   # every core cell of a board's block design (the emulated board)
    "axil": ("fpga.axil_top", "axil_top"),   # the AXI-Lite register slave alone (the report's axil row)
}
CORES = tuple(hwparams.CORES)       # the cores (each has five faces); "system" is a toplevel, not a core
#: The module that holds each FSM's ``ST_*`` state codes (a split block keeps them beside its sub-blocks): what a
#: waves dump's ``state`` register is decoded with (``specdec.sim.waves``). ``rng`` has no FSM.
FSM = {"verifier": "fpga.verifier_defs", "treemask": "fpga.treemask", "kvpage": "fpga.kvpage_defs",
       "draftengine": "fpga.draftengine_ctrl", "treeattn": "fpga.treeattn", "vecunit": "fpga.vecunit"}
WRAPPERS = ("axil",)                # toplevels without build parameters (not in hwcontract.params)

_ROOT = Path(__file__).resolve().parents[1]


toplevel_name = hwparams.toplevel_name      # the module name: the contract's (bitstreams/<board>/design.tcl uses it)


def params_for(core: str, given: dict | None = None) -> dict[str, int]:
    """Validated parameters for ``core``: defaults overridden by ``given`` (ints, or strings from the CLI)."""
    if core not in BLOCKS:
        raise KeyError(f"unknown core {core!r}; valid cores: {sorted(CORES)} (and toplevels "
                       f"{sorted(set(BLOCKS) - set(CORES))})")
    if core in WRAPPERS:
        if given:
            raise KeyError(f"toplevel {core!r} has no parameters; got {sorted(given)}")
        return {}
    return hwparams.check(core, given)


def source_digest() -> str:
    """A digest of every source the Verilog depends on: the MyHDL blocks and the contract."""
    h = hashlib.sha256()
    for pkg in (_ROOT / "fpga", _ROOT / "hwcontract"):
        for f in sorted(pkg.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def convert(core: str, params: dict | None = None, out_dir: str | Path = "build/verilog") -> Path:
    """Convert ``core`` with ``params`` to ``out_dir/<toplevel>.v`` (in a fresh interpreter); its path.

    A file converted from the same sources and parameters is reused (a ``.stamp`` beside it holds the
    digest), and a lock serialises conversions of one toplevel across processes (pytest workers).
    MyHDL's conversion warnings are re-issued here as ``UserWarning`` (also when the file is reused).

    Raises
    ------
    KeyError, ValueError
        An unknown core or parameter, or a value outside its range (before anything runs).
    RuntimeError
        The conversion failed; the message holds the end of its error output.
    """
    values = params_for(core, params)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = toplevel_name(core, values)
    vfile, stamp = out_dir / f"{name}.v", out_dir / f".{name}.stamp"
    digest = hashlib.sha256(repr((source_digest(), sorted(values.items()))).encode()).hexdigest()
    with open(out_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if vfile.is_file() and stamp.is_file() and stamp.read_text().split("\n", 1)[0] == digest:
            warns = json.loads(stamp.read_text().split("\n", 1)[1])
        else:
            stamp.unlink(missing_ok=True)
            warns = _convert_fresh(core, values, out_dir)
            stamp.write_text(digest + "\n" + json.dumps(warns))
    for w in warns:
        warnings.warn(w, UserWarning, stacklevel=2)
    return vfile


def fresh_env() -> dict[str, str]:
    """The environment of a conversion's fresh interpreter: hash seed 0, this checkout first on the path."""
    return {**os.environ, "PYTHONHASHSEED": "0",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}


def _convert_fresh(core: str, values: dict[str, int], out_dir: Path) -> list[str]:
    """Run the conversion in a fresh interpreter with ``PYTHONHASHSEED=0``; MyHDL's warnings."""
    cmd = [sys.executable, "-m", "fpga.convert", "--core", core, "--out-dir", str(out_dir),
           *(f"{k}={v}" for k, v in sorted(values.items()))]
    proc = subprocess.run(cmd, env=fresh_env(), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"conversion of {core} {values} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["warnings"]


def _frames() -> list[inspect.FrameInfo]:
    """``inspect.stack()`` without the source lookups: the caller's frame records, outermost last, with no
    code context. MyHDL reads only a record's frame and function name."""
    out, frame = [], sys._getframe(1)
    while frame is not None:
        out.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                                     None, None))
        frame = frame.f_back
    return out


class _MyhdlInspect(types.ModuleType):
    """The ``inspect`` module as MyHDL's block and instance decorators see it, with :func:`_frames` for
    ``stack``. MyHDL calls ``inspect.stack()`` for every block and generator it elaborates; the standard
    one reads every frame's source file (and searches ``sys.modules`` for frames without one), which would be
    most of a conversion's time."""

    stack = staticmethod(_frames)

    def __getattr__(self, name: str):
        return getattr(inspect, name)


def _fast_elaboration() -> None:
    """Give MyHDL's elaboration :class:`_MyhdlInspect` (same frames, so the same Verilog)."""
    from myhdl import _block, _instance
    _block.inspect = _instance.inspect = _MyhdlInspect("inspect")


def _convert_here(core: str, values: dict[str, int], out_dir: Path) -> tuple[Path, list[str]]:
    """The conversion itself (run by :func:`convert` in a fresh interpreter)."""
    _fast_elaboration()
    modname, top = BLOCKS[core]
    mod = importlib.import_module(modname)
    name = toplevel_name(core, values)
    out_dir.mkdir(parents=True, exist_ok=True)
    styles = capture_styles()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inst = getattr(mod, top)(*mod.make_ports(**values), **values)
        inst.convert(hdl="Verilog", path=str(out_dir), name=name, no_testbench=True, timescale="1ns/1ps")
    path = out_dir / f"{name}.v"
    text = path.read_text()
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith(("// Date:", "// File:"))]
    path.write_text(mark_memories("".join(lines), core, styles))
    return path, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


#: Cores whose module says ``shreg_extract = "no"``: their delay lines stay flip-flops, not SRL16/SRL32 shift
#: registers, which take a LUT each. The verifier is LUT-bound (its budget is 15% of the xc7z020) and uses
#: 7% of the flip-flops, so its delay lines spend flip-flops, not LUTs. Vivado reads the attribute; yosys does
#: not, so ``fpga.hw`` synthesises such a module with ``synth_xilinx -nosrl``.
NO_SRL = {"verifier"}
NO_SRL_ATTRIBUTE = '(* shreg_extract = "no" *)'


def capture_styles() -> dict[str, str]:
    """A dict that the next Verilog conversion in this process fills: Verilog memory name -> ``ram_style`` of
    every memory its block declared as an ``fpga.pipe.Ram``. MyHDL's converter hands its memories, named, to
    ``_convert_filter`` (its hook for such checks) and clears the names afterwards."""
    from myhdl.conversion._toVerilog import toVerilog
    styles: dict[str, str] = {}

    def capture(self, h, intf, siglist, memlist, genlist) -> None:
        styles.update({m.name: m.mem.style for m in memlist if hasattr(m.mem, "style")})

    type(toVerilog)._convert_filter = capture          # the converter has __slots__: the hook is its class's
    return styles


#: A memory's declaration as MyHDL writes it: ``reg [W-1:0] name [0:DEPTH-1];`` (``wire`` when driven
#: combinationally, ``signed`` for signed elements, no range for one-bit elements).
MEMORY_DECLARATION = re.compile(r"^(?:reg|wire) (?:signed )?(?:\[(\d+):0\] )?(\w+) \[0:(\d+)-1\];$")
#: The attribute written before a memory's declaration.
RAM_STYLE_ATTRIBUTE = '(* ram_style = "{}" *) '


@dataclass(frozen=True)
class Memory:
    """One memory of a converted core: its Verilog name, depth, element width and ``ram_style``."""

    name: str
    depth: int
    width: int
    style: str | None


def memories(text: str) -> list[Memory]:
    """Every memory declared in converted Verilog ``text``, with the ``ram_style`` written on it (None: none)."""
    out = []
    for line in text.splitlines():
        style = None
        m = re.match(r'^\(\* ram_style = "(\w+)" \*\) (.*)$', line)
        if m:
            style, line = m.group(1), m.group(2)
        d = MEMORY_DECLARATION.match(line)
        if d:
            width = int(d.group(1)) + 1 if d.group(1) is not None else 1
            out.append(Memory(d.group(2), int(d.group(3)), width, style))
    return out


def initialised(text: str) -> set[str]:
    """The memories an ``initial`` block of ``text`` assigns (MyHDL writes one per memory with
    ``initial_values``)."""
    return {n for body in re.findall(r"^initial begin(.*?)^end", text, re.M | re.S)
            for n in re.findall(r"(\w+)\[", body)}


def mark_memories(text: str, core: str, styles: dict[str, str]) -> str:
    """``text`` with the ``ram_style`` of ``styles`` (:func:`capture_styles`) before each memory's declaration and
    :data:`NO_SRL_ATTRIBUTE` on the module of a core in :data:`NO_SRL`.

    Raises
    ------
    ValueError
        A memory its block did not declare as an ``fpga.pipe.Ram`` (it would be mapped by each tool's own
        heuristics), or an UltraRAM memory that an ``initial`` block fills (a URAM288 has no initial value).
    """
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith("module ") and core in NO_SRL:
            line = f"{NO_SRL_ATTRIBUTE}\n" + line
        d = MEMORY_DECLARATION.match(line.rstrip("\n"))
        if d:
            if d.group(2) not in styles:
                raise ValueError(f"{core}: memory {d.group(2)} ({int(d.group(3))} words) has no ram_style: declare "
                                 f"it as fpga.pipe.Ram(style, depth, width), a style of fpga.pipe.RAM_STYLES")
            line = RAM_STYLE_ATTRIBUTE.format(styles[d.group(2)]) + line
        out.append(line)
    filled = sorted(n for n in initialised(text) if styles.get(n) == "ultra")
    if filled:
        raise ValueError(f"{core}: UltraRAM memories {filled} are filled by an initial block; a URAM288 has no "
                         f"initial value (convert without initial_values)")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fpga.convert", description="Convert one core to Verilog (deterministic).")
    ap.add_argument("--core", required=True, choices=sorted(BLOCKS))
    ap.add_argument("--out-dir", default="build/verilog", type=Path)
    ap.add_argument("param", nargs="*", help="KEY=VALUE")
    args = ap.parse_args(argv)
    given: dict[str, str] = {}
    for p in args.param:
        key, sep, value = p.partition("=")
        if not sep or not key or not value:
            ap.error(f"parameter {p!r}: expected KEY=VALUE, e.g. LANES=4")
        if key in given:
            ap.error(f"parameter {key} given twice ({key}={given[key]}, {p})")
        given[key] = value
    try:
        values = params_for(args.core, given)
    except (KeyError, ValueError) as err:       # an unknown name, or a value outside its range: named in err
        ap.error(err.args[0] if err.args else str(err))
    if os.environ.get("PYTHONHASHSEED") != "0":      # a direct call: run in a deterministic interpreter
        print(convert(args.core, values, args.out_dir))
        return 0
    path, warns = _convert_here(args.core, values, args.out_dir)
    print(json.dumps({"path": str(path), "warnings": warns}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
