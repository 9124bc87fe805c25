"""The bitstream flow's launcher: ``make bitstream BOARD=kv260|pynq-z2`` runs ``scripts/bitstream.sh``, which checks
for Vivado, makes the flow's small environment (numpy and MyHDL only) and runs ``python -m fpga.blockdesign``.

:func:`main` checks for Vivado first and stops at once without it; otherwise converts every core at the board's
parameters into ``build/<board>/verilog/`` and runs ``bitstreams/build.tcl`` with ``build/<board>/`` as Vivado's
working folder and its log and journal there (so vivado.log, vivado.jou and .Xil stay out of the repository's
tree). build.tcl sources ``bitstreams/<board>/design.tcl`` (``scripts/gen_design.py`` renders it from
``hwcontract.board``), resolves every Xilinx IP and the board part from the running Vivado, builds down the fabric
clock ladder, and writes the products into ``host/specdec/data/overlays/<board>/``.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from fpga.convert import convert
from hwcontract import board as bd

ROOT = Path(__file__).resolve().parents[1]
BUILD_TCL = ROOT / "bitstreams" / "build.tcl"


VIVADO_MISSING = ("make bitstream: Vivado is not on PATH (`vivado` not found). The bitstream flow needs Vivado "
                  "{releases} with the {part} part and the board files of {family} (Vivado's board store): source "
                  "its settings64.sh and run again. Nothing was built. Without Vivado, the emulated board runs the "
                  "same drivers through pynq's classes: SPECDEC_EMULATE={board}.")


def work_dir(board: str) -> Path:
    """Vivado's working folder for ``board``: its project, runs, cores, logs and per-rung reports."""
    return ROOT / "build" / board


def vivado_command(vivado: str, board: str, vdir: Path, jobs: int) -> list[str]:
    """The batch command running build.tcl, its log and journal in :func:`work_dir`."""
    work = work_dir(board)
    return [vivado, "-mode", "batch", "-log", str(work / "vivado.log"), "-journal", str(work / "vivado.jou"),
            "-source", str(BUILD_TCL), "-tclargs", board, str(vdir), str(jobs)]


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
        print(VIVADO_MISSING.format(releases=", ".join(bd.VIVADO_RELEASES), part=d.part, family=d.board_family,
                                    board=a.board), file=sys.stderr)
        return 2
    work = work_dir(a.board)
    vdir = work / "verilog"
    for c in d.cells:
        print(f"converting {c.name} {dict(c.params)}", flush=True)
        convert(c.name, dict(c.params), vdir)
    work.mkdir(parents=True, exist_ok=True)
    cmd = vivado_command(vivado, a.board, vdir, a.jobs)
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=work).returncode


if __name__ == "__main__":
    sys.exit(main())
