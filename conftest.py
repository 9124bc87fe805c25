"""pytest options for the cocotb testbenches.

``--sim verilator`` (default) runs every cocotb test on Verilator and the ``icarus``-marked smoke subset
on Icarus too; ``--sim icarus`` runs everything on Icarus; ``--sim all`` runs everything on both.
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
    if choice == "all":
        sims = ["verilator", "icarus"]
    elif choice == "icarus":
        sims = ["icarus"]
    elif metafunc.definition.get_closest_marker("icarus"):
        sims = ["verilator", "icarus"]
    else:
        sims = ["verilator"]
    metafunc.parametrize("sim", sims)


@pytest.fixture
def waves(request) -> bool:
    return request.config.getoption("--waves")
