# specdec: two commands on a fresh clone.
#   make demo   the main job: the demo target and its best draft (the EAGLE-style head) generate through the RTL cores
#   make test   the default suite (cocotb on Verilator, the agreement flow on Verilator and Icarus); make test-long: the sweeps
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
VBIN  := $(shell ls -d $(VENV)/lib/python3*/site-packages/verilator/bin 2>/dev/null | head -1)
export PATH := $(abspath $(VBIN)):$(abspath $(VENV)/bin):$(PATH)
# the build folder of specdec's simulations and kernels (specdec.paths.build_dir): this checkout's build/
export SPECDEC_BUILD ?= $(abspath build)
# bytecode is cached (__pycache__, git-ignored): pytest keeps its assertion-rewritten test modules there too, and
# without it every test worker and simulation parsed and rewrote them again (a shell may have set it)
unexport PYTHONDONTWRITEBYTECODE
PYTEST_ARGS ?=

.PHONY: setup demo demo-tree test test-long test-icarus gen check-generated report bitstream clean

setup:
	@bash scripts/setup.sh --ml

DEMO_PROMPT ?= HAMLET:\nTo be, or not to be, that is the question:\n
export DEMO_PROMPT          # the recipes read it from the environment: a prompt may hold quotes ("It's")
DEMO_DRAFT  ?= smollm2-eagle-head    # the project's best draft (the demo pair's own: smollm2-shakespeare-draft-4x192)
DEMO_ARGS   ?= --gamma 4 --max-new-tokens 48      # greedy; add --temperature 0.8 --top-p 0.95 to sample

# the demo target (SmolLM2-135M-Instruct) drafted by the EAGLE-style head, every round through the chip's RTL in one
# Verilator toplevel (--backend sim): the verifier scores the rows, the kvpage core pages both KV caches. Quiet: a
# progress bar for the one-time RTL build and one for generation, then the text and the stats line (tok/s,
# acceptance, tokens per target call); the tools' output goes to build/logs/ (a failure prints its log's path and
# error lines)
demo: setup
	@HF_HUB_OFFLINE=1 $(VENV)/bin/specdec generate --backend sim --prompt "$$DEMO_PROMPT" --draft $(DEMO_DRAFT) \
	    $(DEMO_ARGS)

# the same with the head's fastest tree, a calibrated EAGLE tree of 7 nodes at depth 5 (its scores measured on
# corpus passages before the generation): the verifier in tree mode and the treemask core as RTL too
demo-tree: setup
	@HF_HUB_OFFLINE=1 $(VENV)/bin/specdec generate --backend sim --prompt "$$DEMO_PROMPT" --draft $(DEMO_DRAFT) \
	    --tree eagle --tree-budget 7 --tree-depth 5 --tree-topk 3 --tree-expand 1 --tree-scores calibrated \
	    --max-new-tokens 48

# two pytest workers (CI has 2 cores); a test file stays on one worker, builds are locked per toplevel; the files
# go out in the order conftest.HEAVY_FIRST gives (xdist would order them by their number of tests)
PYTEST_JOBS ?= -n 2 --dist loadfile --no-loadscope-reorder

test: setup check-generated
	$(PY) -m pytest -q -m "not long and not board and not vivado" $(PYTEST_JOBS) $(PYTEST_ARGS)

test-long: setup
	$(PY) -m pytest -q -m "long" $(PYTEST_ARGS)

test-icarus: setup
	$(PY) -m pytest -q -m "not long and not board and not vivado" --sim icarus tb $(PYTEST_ARGS)

gen: setup
	$(PY) scripts/gen.py

check-generated: setup
	$(PY) scripts/gen.py --check

report: setup
	$(VENV)/bin/specdec hw report --json build/report.json

# the board's overlay with Vivado (bitstreams/README.md): scripts/bitstream.sh checks for Vivado first (without it
# it stops at once, naming the supported releases), makes the flow's own small environment (build/hdl-venv: numpy and
# MyHDL only; not the project's setup), converts the cores and runs bitstreams/build.tcl in build/$(BOARD)/, which
# builds down the board's fabric clock ladder and writes specdec.bit, .hwh, build.json and the timing/utilization
# reports into host/specdec/data/overlays/$(BOARD)/.
BOARD ?= kv260
bitstream:
	@bash scripts/bitstream.sh $(BOARD)

clean:
	rm -rf build
