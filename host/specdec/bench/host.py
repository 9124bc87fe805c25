"""What every bench's JSON records of the machine it measured on."""
from __future__ import annotations

import os
import platform


def cpu_model(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The processor's model name (``model name`` in Linux's ``cpuinfo``), else what ``platform`` says (the
    architecture at least; an ARM board's cpuinfo names no model): the benches' host timings mean little
    without it, and ``platform.processor()`` is empty on Linux."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> dict:
    """What every bench's JSON records of the machine it measured on: Python, the CPU count, the CPU's model."""
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu": cpu_model()}
