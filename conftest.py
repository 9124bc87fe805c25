"""pytest options for the cocotb testbenches.

``--sim verilator`` (default) runs every cocotb test on Verilator and the ``icarus``-marked smoke subset
on Icarus too; ``--sim icarus`` runs everything on Icarus; ``--sim all`` runs everything on both. A test
marked ``icarus(only=True)`` runs on Icarus alone, whatever ``--sim`` says: its Verilator twin is another
test (the same build and cocotb tests), which need not run twice. ``icarus(long=True)``: the Icarus run is
under the ``long`` marker (the default suite runs every core on Icarus in tests/test_agreement.py).
``--waves`` dumps waveforms into the build directory (build/sim/<sim>/<toplevel>-waves/).
"""
from __future__ import annotations

import pytest


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
