"""Testbench pieces shared by every core: clock/reset, AXI-Lite master, idle/backpressure, registers by name."""
from __future__ import annotations

import itertools
import os

from specdec.backends.sim import AxilTB  # noqa: F401  (clock, reset, AXI-Lite master, registers by name)


def cycle_pause():
    """Pause pattern for idle/backpressure inserters (1 = pause), as in verilog-axi's tests."""
    return itertools.cycle([1, 1, 1, 0])


def random_pause(seed: int = 1, p: float = 0.3):
    import random
    rnd = random.Random(seed)
    while True:
        yield rnd.random() < p


STIMULUS = {"none": None, "cycle": cycle_pause, "random": random_pause}


def param(name: str, default: int | None = None) -> int:
    """A core parameter handed to the simulation by tb.harness (``PARAM_<NAME>``)."""
    raw = os.environ.get(f"PARAM_{name}")
    if raw is None:
        if default is None:
            raise KeyError(f"parameter {name} was not passed to the simulation")
        return default
    return int(raw)
