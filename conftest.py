"""pytest options for the cocotb testbenches.

``--sim verilator`` (default) runs every cocotb test on Verilator and the ``icarus``-marked smoke subset
on Icarus too; ``--sim icarus`` runs everything on Icarus; ``--sim all`` runs everything on both. A test
marked ``icarus(only=True)`` runs on Icarus alone, whatever ``--sim`` says: its Verilator twin is another
test (the same build and cocotb tests), which need not run twice. ``icarus(long=True)``: the Icarus run is
under the ``long`` marker (the default suite runs every core on Icarus in tests/test_agreement.py).
``--waves`` dumps waveforms into the build directory (build/sim/<sim>/<toplevel>-waves/).
"""
from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

#: The build folder (``specdec.paths.build_dir``: simulation builds, compiled kernels, tool logs) is the checkout's
#: build/ under the tests, as under the Makefile; an installed specdec defaults to the user's cache folder.
os.environ.setdefault("SPECDEC_BUILD", str(Path(__file__).resolve().parent / "build"))

#: The default suite's heaviest files (seconds of test time, measured on 2 cores 2026-11-29), run first: the two
#: xdist workers take whole files (``--dist loadfile``), and longest-first keeps one of them from running the
#: last long file alone. Files not named keep their order after these.
HEAVY_FIRST = ("tests/test_agreement.py",          # 75 s
               "tests/test_cli_generate.py",       # 42
               "tests/test_eagle.py",              # 33
               "tests/test_tree_decode.py",        # 30
               "tests/test_simulator.py",          # 25
               "tb/kvpage/test_kvpage.py",         # 22
               "tb/verifier/test_verifier.py",     # 21
               "tests/test_runtime.py",            # 20
               "tests/test_verifier_golden.py",    # 17
               "tb/verifier/test_tree.py",         # 16
               "tests/test_notebooks.py",          # 13
               "tests/test_emuboard.py",           # 13
               "tests/test_demo_pair.py")          # 12


def pytest_addoption(parser):
    parser.addoption("--sim", default="verilator", choices=("verilator", "icarus", "all"),
                     help="simulator(s) for cocotb tests")
    parser.addoption("--waves", action="store_true", help="dump waveforms of cocotb runs")


def pytest_generate_tests(metafunc):
    if "sim" not in metafunc.fixturenames:
        return
    choice = metafunc.config.getoption("--sim")
    marker = metafunc.definition.get_closest_marker("icarus")
    if marker is not None and marker.kwargs.get("only"):
        sims = ["icarus"]
    elif choice == "all":
        sims = ["verilator", "icarus"]
    elif choice == "icarus":
        sims = ["icarus"]
    elif marker is not None:
        sims = ["verilator", pytest.param("icarus", marks=pytest.mark.long) if marker.kwargs.get("long")
                else "icarus"]
    else:
        sims = ["verilator"]
    metafunc.parametrize("sim", sims)


@pytest.fixture
def waves(request) -> bool:
    return request.config.getoption("--waves")


def pytest_collection_modifyitems(config, items):
    root = Path(str(config.rootpath))

    def rank(item) -> int:
        path = Path(str(item.path)).relative_to(root).as_posix()
        return HEAVY_FIRST.index(path) if path in HEAVY_FIRST else len(HEAVY_FIRST)
    items.sort(key=rank)          # stable: the order within a file, and of the other files, is kept


def pytest_collection_finish(session):
    """Collection imported what the tests use (torch and transformers among it): hundreds of thousands of objects
    that live as long as the worker. Frozen out of the garbage collector's sight (as
    ``specdec.models.loading.import_ml_stack`` does in a run), they are not walked again in every full collection."""
    gc.freeze()
