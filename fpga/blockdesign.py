"""The bitstream flow: ``make bitstream BOARD=kv260|pynq-z2`` runs ``python -m fpga.blockdesign --board B``.

``bitstreams/build.tcl`` sources ``bitstreams/<board>/design.tcl`` (``scripts/gen_design.py`` renders it from
``hwcontract.board``); nothing in build.tcl names a core, a width or an address. :func:`main`: checks for Vivado first and stops at once without
it; otherwise converts every core at the board's parameters into ``build/<board>/verilog/`` and runs
build.tcl, which writes ``specdec.bit``, ``specdec.hwh`` and the timing and utilization reports into
``bitstreams/<board>/`` and fails when the design misses its clock.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from hwcontract import board as bd

ROOT = Path(__file__).resolve().parents[1]
BUILD_TCL = ROOT / "bitstreams" / "build.tcl"


VIVADO_MISSING = ("make bitstream: Vivado is not on PATH (`vivado` not found). The bitstream flow needs Vivado "
                  "2022.2 or later with the {part} part installed: source its settings64.sh and run again. Nothing "
                  "was built (no bitstream has been built for any board yet: README, 'On a PYNQ board'). Without "
                  "Vivado, the emulated board runs the same drivers through pynq's classes: SPECDEC_EMULATE={board}.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build a board's overlay bitstream with Vivado.")
    ap.add_argument("--board", required=True, help=f"one of {', '.join(bd.BOARDS)}")
    ap.add_argument("--jobs", type=int, default=4)
    a = ap.parse_args(argv)
    if a.board not in bd.BOARDS:
        print(f"make bitstream: unknown BOARD={a.board!r}; boards: {', '.join(bd.BOARDS)}", file=sys.stderr)
        return 2
    d = bd.design(a.board)
    vivado = shutil.which("vivado")
    if vivado is None:
        print(VIVADO_MISSING.format(part=d.part, board=a.board), file=sys.stderr)
        return 2
    from fpga.convert import convert
    vdir = ROOT / "build" / a.board / "verilog"
    for c in d.cells:
        print(f"converting {c.name} {dict(c.params)}", flush=True)
        convert(c.name, dict(c.params), vdir)
    cmd = [vivado, "-mode", "batch", "-nojournal", "-source", str(BUILD_TCL), "-tclargs", a.board, str(vdir),
           str(a.jobs)]
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
