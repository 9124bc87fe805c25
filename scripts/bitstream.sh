#!/usr/bin/env bash
# make bitstream BOARD=<board>: the board's overlay with Vivado, needing only Vivado and a small Python environment.
#
#   scripts/bitstream.sh <board> [jobs]
#
# 1. Vivado first: without `vivado` on PATH it stops at once (nothing made), naming the releases the flow supports,
#    the part and the emulated board, all read from bitstreams/<board>/design.tcl (generated from the contract).
# 2. The flow's environment, build/hdl-venv (SPECDEC_HDL_VENV): numpy and MyHDL from scripts/requirements-hdl.txt,
#    made once and reused; no torch, no sudo, no apt. On a machine without network, copy the wheels over and name
#    their folder: SPECDEC_HDL_WHEELS=/path/to/wheels (pip installs from it alone; bitstreams/README.md).
# 3. python -m fpga.blockdesign: converts the cores and runs bitstreams/build.tcl in build/<board>/.
set -euo pipefail
cd "$(dirname "$0")/.."

BOARD=${1:-kv260}
JOBS=${2:-4}
design="bitstreams/$BOARD/design.tcl"
if [ ! -f "$design" ]; then
  boards=$(ls bitstreams/*/design.tcl 2>/dev/null | cut -d/ -f2 | paste -sd, - | sed 's/,/, /g')
  echo "make bitstream: unknown BOARD='$BOARD'; boards: $boards" >&2
  exit 2
fi
# the value of `set NAME VALUE` in the board's design.tcl, braces dropped
design_var() { sed -n "s/^set $1 //p" "$design" | tr -d '{}'; }

if ! command -v vivado >/dev/null 2>&1; then
  releases=$(design_var vivado_releases | sed 's/ /, /g')
  cat >&2 <<MSG
make bitstream: Vivado is not on PATH (\`vivado\` not found). The bitstream flow supports Vivado $releases,
with the $(design_var part) part and the board files of $(design_var board_family) (Vivado's board store):
source Vivado's settings64.sh and run again. Nothing was built, no environment was made. Without Vivado,
the emulated board runs the same drivers through pynq's classes: SPECDEC_EMULATE=$BOARD.
MSG
  exit 2
fi

VENV=${SPECDEC_HDL_VENV:-build/hdl-venv}
PY=${PYTHON:-python3}
stamp="$VENV/.stamp-$(sha1sum scripts/requirements-hdl.txt | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  if ! command -v "$PY" >/dev/null 2>&1; then
    echo "make bitstream: $PY not found: the flow makes its environment with a Python 3 (PYTHON=...)" >&2
    exit 2
  fi
  echo "[bitstream] making $VENV (scripts/requirements-hdl.txt: numpy, myhdl)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  pip_args=(-q --disable-pip-version-check)
  [ -n "${SPECDEC_HDL_WHEELS:-}" ] && pip_args+=(--no-index --find-links "$SPECDEC_HDL_WHEELS")
  "$VENV/bin/python" -m pip install "${pip_args[@]}" -r scripts/requirements-hdl.txt
  rm -f "$VENV"/.stamp-*
  touch "$stamp"
fi
exec "$VENV/bin/python" -m fpga.blockdesign --board "$BOARD" --jobs "$JOBS"
