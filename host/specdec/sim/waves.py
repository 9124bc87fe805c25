"""Profile a waves dump: the clock cycles each core's FSM spends in each of its states (``specdec waves FILE``).

A dump of the whole chip (``specdec generate --backend sim --waves FILE``, toplevel ``system``) holds each core's
state register as ``<core><n>_state`` (``verifier0_state``, ``treemask0_state``, ``kvpage0_state``,
``draftengine0_state``); a dump of one core (a cocotb testbench run with waves) holds it as ``state`` in the
core's own scope (``treemask_nodes_max8.state``). The states are named by the ``ST_*`` constants of the core's
MyHDL module (``fpga/<core>.py``), without the prefix: ``IDLE``, ``RUN``, ...

The state is sampled at every rising edge of ``clk`` as a flip-flop samples it, just before the edge: a register
that changes at an edge shows its new value from the next edge on. Each rising edge is one cycle, and each cycle
is in exactly one state, so a core's state cycles add up to the dump's cycles. A value with an x or z bit is the
state ``x`` (so is the time before the signal's first value); a value no ``ST_*`` constant names keeps its number.

Busy cycles are the cycles outside the resting states :data:`RESTING` (``IDLE``, ``DONE``, ``ERR``): the cycles in
which the core's ``STATUS.BUSY`` is set (every core computes BUSY so). A core stays in ``DONE`` after a job until
the next ``START``, so "not ``IDLE``" would count those waits as work.

Reading a dump needs ``pywellen`` (FST and VCD; ``scripts/requirements-base.txt``).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import re
import tempfile
from bisect import bisect_right
from pathlib import Path

from fpga.convert import CORES, FSM

from ..errors import SpecdecError

#: The states in which a core is not busy (its STATUS.BUSY is low): waiting for START, done, or in error.
RESTING = ("IDLE", "DONE", "ERR")
#: The state of a sample with an x or z bit, or of a cycle before the signal's first value.
UNKNOWN = "x"
#: The clock whose rising edges are the cycles.
CLOCK = "clk"
#: A state register in the whole chip's dump: ``<core><n>_state`` (instance ``<core><n>``).
INSTANCE_STATE = re.compile(r"(?P<core>[a-z]+)(?P<n>\d+)_state")


class WavesError(SpecdecError):
    """A file that is not a waves dump, or a dump without the clock to count cycles on; names the file."""


def state_names(core: str) -> dict[int, str]:
    """The FSM states of ``core``: code -> name, from the ``ST_*`` constants of the MyHDL module that holds them
    (:data:`fpga.convert.FSM`), the prefix dropped, in code order.

    Raises
    ------
    ValueError
        An unknown core (the message lists the cores), a core without ``ST_*`` constants (``rng``), or two
        constants with one code.
    """
    if core not in CORES:
        raise ValueError(f"unknown core {core!r}; valid cores: {sorted(CORES)}")
    if core not in FSM:
        raise ValueError(f"core {core!r} has no FSM (no ST_* state codes)")
    module = importlib.import_module(FSM[core])
    names: dict[int, str] = {}
    for const, code in vars(module).items():
        if not const.startswith("ST_") or not isinstance(code, int) or isinstance(code, bool):
            continue
        if code in names:
            raise ValueError(f"{module.__name__}: {const} and ST_{names[code]} both have the code {code}")
        names[code] = const[3:]
    if not names:
        raise ValueError(f"core {core!r} has no FSM: no ST_* constants in {module.__name__}")
    return dict(sorted(names.items()))


@contextlib.contextmanager
def _reading(path: Path):
    """Read the dump at ``path`` inside: a failure of pywellen's (a RuntimeError for a file in no format it
    knows, a Rust panic for a broken one: pyo3's PanicException, a BaseException) becomes a WavesError naming
    ``path``. The panic's own report (a backtrace under RUST_BACKTRACE), written to file descriptor 2, is kept
    off the terminal."""
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    except (KeyboardInterrupt, SystemExit, WavesError):
        raise
    except BaseException as err:    # noqa: B036 (the panic is no Exception)
        reason = (str(err).splitlines() or [type(err).__name__])[0]
        raise WavesError(f"{path}: not a waves dump (FST or VCD): {reason}") from None
    finally:
        os.close(saved)


def _scope(full_name: str) -> str:
    return full_name.rpartition(".")[0]


def _state_signals(variables, cores) -> list[tuple[str, str, str, object]]:
    """``(instance, core, full name, var)`` of every state register of one of ``cores`` among ``variables``
    (``(name, full name, var)``), in the dump's order. The instance is ``<core><n>`` or the scope of ``state``;
    one that occurs twice is keyed by its full name."""
    found = []
    for name, full_name, var in variables:
        m = INSTANCE_STATE.fullmatch(name)
        if m and m["core"] in cores:
            found.append((m["core"] + m["n"], m["core"], full_name, var))
        elif name == "state":
            scope = _scope(full_name).rpartition(".")[2]
            core = next((c for c in cores if scope == c or scope.startswith(c + "_")), None)
            if core:
                found.append((scope, core, full_name, var))
    keys = [key for key, *_ in found]
    return [(key if keys.count(key) == 1 else full_name, core, full_name, var) for key, core, full_name, var in found]


def _clock(variables, path: Path, near: str | None) -> tuple[str, str, object]:
    """The ``clk`` signal among ``variables``: the one in scope ``near`` if there is one, else the first."""
    clocks = [v for v in variables if v[0] == CLOCK]
    if not clocks:
        raise WavesError(f"{path}: no signal named {CLOCK!r} to count cycles on")
    return next((v for v in clocks if _scope(v[1]) == near), clocks[0])


def rising_edges(changes) -> list[int]:
    """The times at which a clock's ``(time, value)`` changes go to 1 from 0, x or z (not its first value)."""
    edges, prev = [], None
    for t, value in changes:
        if value == 1 and prev is not None and prev != 1:
            edges.append(t)
        prev = value
    return edges


def _runs(changes, edges: list[int]) -> list[tuple[object, int]]:
    """``(value, cycles)`` for each stretch of edges that sample one change of ``changes``, in time order. The
    edge at ``t`` samples the last change before ``t``; edges up to the first change sample None."""
    out = []
    first = bisect_right(edges, changes[0][0]) if changes else len(edges)
    if first:
        out.append((None, first))
    for k, (t, value) in enumerate(changes):
        end = bisect_right(edges, changes[k + 1][0]) if k + 1 < len(changes) else len(edges)
        n = end - bisect_right(edges, t)
        if n > 0:
            out.append((value, n))
    return out


def _name(value, names: dict[int, str]) -> str:
    if not isinstance(value, int):          # None (no value yet) or a string with x or z bits
        return UNKNOWN
    return names.get(value, str(value))


def fsm_profile(changes, edges: list[int], names: dict[int, str]) -> dict:
    """One state register's profile over the cycles ``edges``: ``busy_cycles`` and, for each state (every
    named one, then others as seen), its ``cycles`` and ``entries`` (the runs of consecutive cycles in it; a
    state held from the first cycle counts once)."""
    states = {name: {"cycles": 0, "entries": 0} for name in names.values()}
    prev = None
    for value, n in _runs(list(changes), edges):
        name = _name(value, names)
        st = states.setdefault(name, {"cycles": 0, "entries": 0})
        st["cycles"] += n
        st["entries"] += int(name != prev)
        prev = name
    busy = sum(st["cycles"] for name, st in states.items() if name not in RESTING and name in names.values())
    return {"busy_cycles": busy, "states": states}


def profile(path: str | Path) -> dict:
    """Profile the dump at ``path`` (FST or VCD): its cycles (rising edges of ``clk``) and, for each core
    state register in it (keyed by instance: ``verifier0``, or the core's scope, ``treemask_nodes_max8``), the
    core, the signal, the busy cycles and each state's cycles and entries. JSON-able.

    Raises
    ------
    FileNotFoundError, IsADirectoryError
        ``path`` is missing or a directory.
    WavesError
        The file is not a waves dump, or has no ``clk``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "no such file", str(path))
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory", str(path))
    try:
        import pywellen
    except ImportError:
        raise WavesError(f"{path}: reading waves needs pywellen (pip install pywellen)") from None
    with open(path, "rb"):      # a file that cannot be opened raises its OSError here (pywellen would panic)
        pass
    with _reading(path):
        dump = pywellen.Waveform(str(path))
        variables = [(var.name, var.full_name, var) for var in dump.all_vars()]
        signals = _state_signals(variables, CORES)
        clock = _clock(variables, path, _scope(signals[0][2]) if signals else None)
        edges = rising_edges(clock[2].tv)
        changes = {key: list(var.tv) for key, _, _, var in signals}
    cores = {}
    for key, core, full_name, _ in signals:
        try:
            names = state_names(core)
        except ValueError:          # a core without an FSM (rng): its "state" is no state register
            continue
        cores[key] = {"core": core, "signal": full_name, **fsm_profile(changes[key], edges, names)}
    return {"file": str(path), "format": dump.file_format, "clock": clock[1], "cycles": len(edges),
            "cores": cores}


def format_profile(prof: dict) -> str:
    """A readable table of :func:`profile`'s result: per core, the states it was in (cycles, share, entries)."""
    total = prof["cycles"]

    def pct(n: int) -> str:
        return f"{100 * n / total:.1f}%" if total else "-"
    lines = [f"{prof['file']} ({prof['format']}): {total} cycles of {prof['clock']}"]
    if not prof["cores"]:
        lines.append("no core state register in it (<core><n>_state, or state in a core's scope)")
    for key, c in prof["cores"].items():
        seen = [(name, st) for name, st in c["states"].items() if st["cycles"]]
        width = max([len("state")] + [len(name) for name, _ in seen])
        lines += ["", f"{key} ({c['core']}, {c['signal']}): busy {c['busy_cycles']} cycles ({pct(c['busy_cycles'])})",
                  f"  {'state':<{width}} {'cycles':>10} {'share':>6} {'entries':>8}"]
        lines += [f"  {name:<{width}} {st['cycles']:>10} {pct(st['cycles']):>6} {st['entries']:>8}"
                  for name, st in seen]
    return "\n".join(lines)
