"""What every RTL agreement stage shares: the vector spec in, the results out.

tests/test_agreement.py runs a cocotb module ``tb/<core>/agree_<core>.py`` through
``specdec.backends.simulator.run`` with the environment of :func:`environment`: the seed and the count of
the ``hls_ref.vectors`` set to run, and where to write the results. The module builds the same vectors
inside the simulator, pushes them through the core with the pynq driver and writes one result dict per
vector as JSON; the test compares them with the golden model.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

SEED, COUNT, OUT = "AGREE_SEED", "AGREE_COUNT", "AGREE_OUT"


def environment(seed: int, count: int, out: Path) -> dict[str, str]:
    """The simulator's extra environment for a set of ``count`` vectors from ``seed``, results to ``out``."""
    return {SEED: str(seed), COUNT: str(count), OUT: str(out)}


def vector_spec() -> tuple[int, int]:
    """``(seed, count)`` of the vector set, inside the simulator."""
    try:
        return int(os.environ[SEED]), int(os.environ[COUNT])
    except KeyError as e:
        raise KeyError(f"{e.args[0]} is not set: run the agreement modules from tests/test_agreement.py") from None


def write_results(results: list) -> None:
    """Write the results (JSON-able) where the test reads them."""
    Path(os.environ[OUT]).write_text(json.dumps(results))
