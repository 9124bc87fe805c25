"""``specdec waves FILE``: the cycles each core's FSM spends in each state, read from a waves dump
(host/specdec/sim/waves.py), on VCD files written here with known state sequences and on a real treemask dump; and
``specdec`` quiet when the reader of its stdout goes away (``specdec ... | head -1``)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fpga.convert import CORES, FSM
from specdec import cli
from specdec.sim import waves

pytest.importorskip("pywellen")

PERIOD = 10          # the written dumps' clock period, in their time unit


def codes(core: str) -> dict[str, int]:
    """State name -> code of ``core`` (its ST_* constants), so that sequences are written by name."""
    return {name: code for code, name in waves.state_names(core).items()}


def write_vcd(path: Path, signals: dict[str, tuple[int, list]], scope: str = "system", at_edge: bool = True) -> Path:
    """A VCD with ``clk`` and the ``signals`` (name -> (width, one value per cycle)) in ``scope``.

    Cycle ``k`` (k = 1..n) ends at the rising edge at ``k * PERIOD``. A value is an int or a string of bits
    (``"x"``: every bit x). With ``at_edge`` each value is written at the rising edge that starts its cycle, as a
    register changes (the edge itself still samples the old value); otherwise half a period later.
    """
    ids = {name: chr(34 + i) for i, name in enumerate(signals)}
    head = ["$timescale 1ns $end", f"$scope module {scope} $end", "$var wire 1 ! clk $end"]
    head += [f"$var reg {w} {ids[name]} {name} [{w - 1}:0] $end" for name, (w, _) in signals.items()]
    head += ["$upscope $end", "$enddefinitions $end"]
    n = len(next(iter(signals.values()))[1])
    changes: dict[int, list[str]] = {t: [] for t in range(0, (n + 1) * PERIOD, PERIOD // 2)}
    for k in range(n + 1):
        changes[k * PERIOD].append("0!" if k == 0 else "1!")
        changes[k * PERIOD + PERIOD // 2].append("0!")
    for name, (width, values) in signals.items():
        prev = None
        for k, value in enumerate(values):
            if value != prev:
                bits = format(value, f"0{width}b") if isinstance(value, int) else value.rjust(width, value[0])
                changes[k * PERIOD + (0 if at_edge or k == 0 else PERIOD // 2)].append(f"b{bits} {ids[name]}")
            prev = value
    body = [line for t in sorted(changes) for line in (f"#{t}", *changes[t])]
    path.write_text("\n".join(head + body) + "\n")
    return path


#: A verifier's state, cycle by cycle: x and z before reset (one entry of x), two rounds, an undefined code (15:
#: no ST_ constant has it), a z glitch.
VERIFIER = ["x", "z", "IDLE", "IDLE", "CHECK", "STREAM", "STREAM", "STREAM", "ROWEND", "STREAM", "DONE", "DONE",
            "CHECK", "STREAM", "DONE", 15, "z", "IDLE"]
#: Its profile, counted by hand: name -> (cycles, entries); busy = CHECK + STREAM + ROWEND.
VERIFIER_STATES = {"x": (3, 2), "IDLE": (3, 2), "CHECK": (2, 2), "STREAM": (5, 3), "ROWEND": (1, 1),
                   "DONE": (3, 2), "15": (1, 1)}
VERIFIER_BUSY = 8


def verifier_values() -> list:
    c = codes("verifier")
    return [c[s] if isinstance(s, str) and s in c else s for s in VERIFIER]


def seen(core_profile: dict) -> dict[str, tuple[int, int]]:
    """The states a core was in: name -> (cycles, entries)."""
    return {name: (st["cycles"], st["entries"]) for name, st in core_profile["states"].items() if st["cycles"]}


@pytest.mark.parametrize("at_edge", [True, False], ids=["changes-at-the-edge", "changes-mid-cycle"])
def test_a_whole_chip_dump_profiles_every_core_by_instance(tmp_path, at_edge):
    """``<core><n>_state`` registers (the system toplevel's), one x cycle from a z, an unnamed code by its number:
    exact cycles, entries and busy cycles, the same whether a register changes at the rising edge (sampled from
    the next edge on) or between edges; every named state listed, the unvisited ones at 0."""
    tm = codes("treemask")
    treemask = ["x", "x"] + ["IDLE"] * 6 + ["RUN"] * 4 + ["DONE"] * 5 + ["RUN"]
    dump = write_vcd(tmp_path / "system.vcd", {"verifier0_state": (4, verifier_values()),
                                               "treemask0_state": (2, [tm.get(s, s) for s in treemask])},
                     at_edge=at_edge)
    prof = waves.profile(dump)
    assert prof["cycles"] == len(VERIFIER) and prof["clock"] == "system.clk" and prof["format"] == "VCD"
    assert list(prof["cores"]) == ["verifier0", "treemask0"]
    ver, tmk = prof["cores"]["verifier0"], prof["cores"]["treemask0"]
    assert (ver["core"], ver["signal"]) == ("verifier", "system.verifier0_state")
    assert seen(ver) == VERIFIER_STATES and ver["busy_cycles"] == VERIFIER_BUSY
    assert list(ver["states"])[:len(codes("verifier"))] == list(codes("verifier"))    # code order, zeros kept
    assert ver["states"]["TCHECK"] == {"cycles": 0, "entries": 0}
    assert seen(tmk) == {"x": (2, 1), "IDLE": (6, 1), "RUN": (5, 2), "DONE": (5, 1)} and tmk["busy_cycles"] == 5
    json.dumps(prof)


def test_a_core_dump_keys_its_state_by_the_core_scope(tmp_path):
    """One core's own dump: ``state`` in the scope of its toplevel (``treemask_nodes_max8``), a clock that
    starts high (no edge at time 0); a ``state`` in a scope that is no core's is not a core."""
    tm = codes("treemask")
    dump = write_vcd(tmp_path / "tm.vcd", {"state": (2, [tm[s] for s in ["IDLE", "RUN", "RUN", "DONE", "ERR"]])},
                     scope="treemask_nodes_max8")
    text = dump.read_text().replace("#0\n0!", "#0\n1!", 1)
    dump.write_text(text)
    prof = waves.profile(dump)
    assert prof["cycles"] == 5 and list(prof["cores"]) == ["treemask_nodes_max8"]
    core = prof["cores"]["treemask_nodes_max8"]
    assert core["core"] == "treemask" and core["signal"] == "treemask_nodes_max8.state"
    assert seen(core) == {"IDLE": (1, 1), "RUN": (2, 1), "DONE": (1, 1), "ERR": (1, 1)} and core["busy_cycles"] == 2
    other = write_vcd(tmp_path / "fifo.vcd", {"state": (2, [0, 1, 2])}, scope="fifo")
    assert waves.profile(other)["cores"] == {}


def test_rising_edges_and_state_names():
    """Edges: 0 -> 1 and x -> 1, not a clock's first value; names: the ST_* constants without the prefix, every
    FSM core with the resting states; a core without an FSM, or no core, refused by name."""
    assert waves.rising_edges([(0, 1), (5, 0), (10, 1), (15, "x"), (20, 1), (25, 0), (30, "z")]) == [10, 20]
    assert waves.state_names("treemask") == {0: "IDLE", 1: "RUN", 2: "DONE", 3: "ERR"}
    assert set(FSM) == set(CORES) - {"rng"}        # every core with an FSM names the module of its states
    for core in FSM:
        assert set(waves.RESTING) <= set(waves.state_names(core).values()), core
    with pytest.raises(ValueError, match="'rng' has no FSM"):
        waves.state_names("rng")
    with pytest.raises(ValueError, match="unknown core 'system'.*treemask"):
        waves.state_names("system")


def table_rows(out: str, key: str) -> dict[str, tuple[int, int]]:
    """The rows printed under ``key``'s heading: name -> (cycles, entries)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(key + " ")) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        name, cycles, _share, entries = line.split()
        rows[name] = (int(cycles), int(entries))
    return rows


def test_cli_prints_the_table_and_writes_the_json(tmp_path, capsys):
    """``specdec waves FILE --json OUT``: a table with each visited state's cycles and entries and the busy
    cycles; OUT holds the profile."""
    dump = write_vcd(tmp_path / "system.vcd", {"verifier0_state": (4, verifier_values())})
    out = tmp_path / "profile.json"
    assert cli.main(["waves", str(dump), "--json", str(out)]) == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == f"{dump} (VCD): {len(VERIFIER)} cycles of system.clk"
    assert f"verifier0 (verifier, system.verifier0_state): busy {VERIFIER_BUSY} cycles (44.4%)" in printed
    assert table_rows(printed, "verifier0") == VERIFIER_STATES
    assert f"wrote {out}" in printed
    assert json.loads(out.read_text()) == waves.profile(dump)


def test_cli_errors_name_the_file(tmp_path, capsys):
    """A missing FILE and a directory: exit 2 before anything is read; a file that is no dump (text, a cut FST
    header) or a dump without ``clk``: exit 1, one line naming the file; ``--json`` into a missing directory, or
    onto the dump itself: exit 2."""
    dump = write_vcd(tmp_path / "ok.vcd", {"verifier0_state": (4, [0, 1])})
    cases = [([str(tmp_path / "missing.fst")], cli.EXIT_USAGE, f"FILE {tmp_path / 'missing.fst'}: no such file"),
             ([str(tmp_path)], cli.EXIT_USAGE, f"FILE {tmp_path}: is a directory"),
             ([str(dump), "--json", str(tmp_path / "no" / "p.json")], cli.EXIT_USAGE, "does not exist"),
             ([str(dump), "--json", str(dump)], cli.EXIT_USAGE, "is the dump FILE itself")]
    (tmp_path / "notes.txt").write_text("not a dump\n")
    (tmp_path / "cut.fst").write_bytes(b"\x00\x00\x00\x00\x00\x00\x00\x00\x21garbage")
    for bad in ("notes.txt", "cut.fst"):
        cases.append(([str(tmp_path / bad)], cli.EXIT_FAIL,
                      f"specdec: waves failed: {tmp_path / bad}: not a waves dump (FST or VCD)"))
    noclk = tmp_path / "noclk.vcd"
    noclk.write_text(dump.read_text().replace(" clk ", " clock "))
    cases.append(([str(noclk)], cli.EXIT_FAIL, f"{noclk}: no signal named 'clk'"))
    for argv, status, message in cases:
        assert cli.main(["waves", *argv]) == status, argv
        err = capsys.readouterr().err
        assert message in err and len(err.splitlines()) == 1, (argv, err)
    assert dump.read_text().startswith("$timescale")      # --json onto the dump left it alone


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_closed_stdout_ends_quietly(tmp_path, unbuffered):
    """``specdec waves FILE | head -1`` with head already gone: exit 1, nothing on stderr. Before, a block-buffered
    stdout failed at the interpreter's exit ("Exception ignored ... BrokenPipeError", status 120), and an
    unbuffered one (PYTHONUNBUFFERED) in the run ("specdec: waves failed: [Errno 32] Broken pipe")."""
    dump = write_vcd(tmp_path / "system.vcd", {"verifier0_state": (4, verifier_values())})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)                  # the reader has gone before specdec writes its first line
    try:
        proc = subprocess.run([sys.executable, "-c", "import sys; from specdec.cli import main; sys.exit(main())",
                               "waves", str(dump)], stdout=write, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (cli.EXIT_FAIL, "")


def test_a_treemask_run_on_verilator(tmp_path):
    """A real dump: the treemask testbench's ``examples`` (a 4-node chain, then a 7-node tree, no backpressure)
    on Verilator. Every cycle is in one state; RUN is entered once per tree and lasts N + 1 cycles each (the
    cycle model, hls_ref.treemask.cycles); the busy cycles are those in which the core's own ``busy`` is high."""
    from hls_ref import treemask as golden
    from hls_ref.vectors import CHAIN3_PATHS, MEDUSA_PATHS
    from specdec.sim import harness
    from specdec.decoding.tree import parents_from_paths
    from tb.common import SWITCH
    harness.verilator_on_path()
    if shutil.which("verilator") is None:
        pytest.skip("verilator not found")
    dump = tmp_path / "treemask.fst"
    harness.run("treemask", "tb.treemask.test_treemask", "verilator", params={"NODES_MAX": 8},
                testcase=f"examples/idle={SWITCH[0].name}/backpressure={SWITCH[0].name}", waves=dump, quiet=True)
    prof = waves.profile(dump)
    core = prof["cores"]["treemask_nodes_max8"]
    assert sum(st["cycles"] for st in core["states"].values()) == prof["cycles"] > 0
    trees = [len(parents_from_paths(paths)) for paths in (CHAIN3_PATHS, MEDUSA_PATHS)]      # what examples runs
    assert core["states"]["RUN"] == {"cycles": sum(golden.cycles(n) for n in trees), "entries": len(trees)}
    assert "x" not in core["states"]            # Verilator: two-state

    import pywellen
    signals = {v.full_name: v for v in pywellen.Waveform(str(dump)).all_vars()}
    edges = waves.rising_edges(signals[prof["clock"]].tv)
    busy = list(signals["treemask_nodes_max8.busy"].tv)
    high = sum(1 for edge in edges if [value for t, value in busy if t < edge][-1] == 1)
    assert core["busy_cycles"] == high == core["states"]["RUN"]["cycles"]
