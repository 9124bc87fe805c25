"""rng driver: seed, step and burst the xoshiro128++ IP."""
from __future__ import annotations

import numpy as np

from hwcontract.regmap import integer

from .base import SpecdecIP, vlnv


class Rng(SpecdecIP):
    """Driver of the ``rng`` core (golden model ``hls_ref.rng``, RTL ``fpga.rng``)."""

    core_name = "rng"
    bindto = [vlnv("rng")]

    def step(self) -> int:
        """One step; returns the new 32-bit output. ValueError before :meth:`seed`."""
        self.check_seeded("rng: a draw")
        self.write_fields("CTRL", STEP=1)
        self.check()
        return self.read_reg("OUT")

    def draw(self, n: int) -> np.ndarray:
        """``n`` outputs, one STEP and one OUT read each."""
        n = integer(n, "rng draw: n")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.check_seeded("rng: a draw")
        return np.array([self.step() for _ in range(n)], dtype=np.uint32)

    def burst(self, n: int) -> dict[str, int]:
        """Run ``n`` steps in hardware (one per clock); returns the last output, XOR of all and STEPS."""
        n = integer(n, "rng burst: n")
        if not 0 <= n < 1 << 32:
            raise ValueError(f"burst length {n} outside 0..2**32-1")
        self.check_seeded("rng: a burst")
        self.write_reg("COUNT", n)
        self.start()
        self.wait_done()
        return {"out": self.read_reg("OUT"), "xor": self.read_reg("XOR"), "steps": self.read_reg("STEPS")}
