"""What every RTL agreement stage shares: the vector spec in, the results out.

tests/test_agreement.py runs a cocotb module ``tb/<core>/agree_<core>.py`` through
``specdec.sim.harness.run`` with the environment of :func:`environment`: the seed and the count of
the ``hls_ref.vectors`` set to run, and where to write the results. The module builds the same vectors
inside the simulator, pushes them through the core with the pynq driver and writes one result dict per
vector as JSON; the test compares them with the golden model.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

SEED, COUNT, OUT, LIMIT = "AGREE_SEED", "AGREE_COUNT", "AGREE_OUT", "AGREE_LIMIT"
CROSS_LIMIT = "AGREE_CROSS_LIMIT"


def environment(seed: int, count: int, out: Path, limit: int | None = None,
                cross_limit: int | None = None) -> dict[str, str]:
    """The simulator's extra environment for a set of ``count`` vectors from ``seed``, results to ``out``;
    ``limit``: run only the set's first ``limit`` vectors (a slow stage's prefix); ``cross_limit``: a stateful
    sequence run whole on the quiet bus, and only its first ``cross_limit`` vectors under the other three
    stimulus combinations."""
    env = {SEED: str(seed), COUNT: str(count), OUT: str(out)}
    if limit is not None:
        env[LIMIT] = str(limit)
    if cross_limit is not None:
        env[CROSS_LIMIT] = str(cross_limit)
    return env


def vector_limit(stim_index: int = 0) -> int | None:
    """How many of the set's vectors to run (None: all), inside the simulator, under stimulus combination
    ``stim_index`` (:attr:`tb.common.Stimulus.index`; 0 is the quiet bus)."""
    limits = [int(os.environ[name]) for name in (LIMIT,) + ((CROSS_LIMIT,) if stim_index else ())
              if name in os.environ]
    return min(limits, default=None)


def vector_spec() -> tuple[int, int]:
    """``(seed, count)`` of the vector set, inside the simulator."""
    try:
        return int(os.environ[SEED]), int(os.environ[COUNT])
    except KeyError as e:
        raise KeyError(f"{e.args[0]} is not set: run the agreement modules from tests/test_agreement.py") from None


def results_path(out: Path, index: int) -> Path:
    """Where the results of stimulus combination ``index`` (0..3, :attr:`tb.common.Stimulus.index`) go."""
    return out.with_name(f"{out.stem}.{index}{out.suffix}")


def write_results(results: list, index: int) -> None:
    """Write the results (JSON-able) of stimulus combination ``index`` where the test reads them."""
    results_path(Path(os.environ[OUT]), index).write_text(json.dumps(results))


def read_results(out: Path) -> list[list]:
    """The results of the four stimulus combinations, in :attr:`tb.common.Stimulus.index` order."""
    return [json.loads(results_path(out, i).read_text()) for i in range(4)]


def merge_dealt(parts: list[list]) -> list:
    """The results of vectors dealt round-robin across the combinations (``Stimulus.deal``), in vector order."""
    n = sum(len(p) for p in parts)
    return [parts[i % len(parts)][i // len(parts)] for i in range(n)]
