"""Testbench pieces shared by every core: clock/reset, AXI-Lite master, idle/backpressure, registers by name."""
from __future__ import annotations

import itertools
import logging
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from specdec.regmap import RESP_OKAY, CoreMap


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


class AxilTB:
    """Clock, reset and an AXI-Lite master on ``s_axil``, with register access by name.

    Parameters
    ----------
    dut : cocotb handle
        Toplevel with ``clk``, ``rst`` and ``s_axil_*`` ports.
    cmap : CoreMap
        The core's register map.
    prefix : str
        The register port's signal prefix (a toplevel holding several cores names each port).
    clock : bool
        Start the clock (False for a second port on a toplevel whose clock already runs).
    """

    def __init__(self, dut, cmap: CoreMap, period_ns: int = 10, prefix: str = "s_axil", clock: bool = True) -> None:
        self.dut, self.cmap = dut, cmap
        self.log = logging.getLogger("cocotb.tb")
        if clock:
            Clock(dut.clk, period_ns, unit="ns").start()
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, prefix), dut.clk, dut.rst)
        # cocotbext-axi logs every transaction at INFO under cocotb.<toplevel>.s_axil: keep warnings only
        self.axil.write_if.log.setLevel(logging.WARNING)
        self.axil.read_if.log.setLevel(logging.WARNING)

    def set_idle_generator(self, generator=None) -> None:
        """Pause the master's AW, W and AR channels (idle cycles on the slave's inputs)."""
        if generator:
            for ch in (self.axil.write_if.aw_channel, self.axil.write_if.w_channel, self.axil.read_if.ar_channel):
                ch.set_pause_generator(generator())

    def set_backpressure_generator(self, generator=None) -> None:
        """Deassert the master's BREADY and RREADY in a pattern (backpressure on the slave's outputs)."""
        if generator:
            for ch in (self.axil.write_if.b_channel, self.axil.read_if.r_channel):
                ch.set_pause_generator(generator())

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def write(self, name: str, value: int | None = None, **fields: int) -> None:
        """Write a register by name (whole value, or fields); assert an OKAY response."""
        reg = self.cmap.reg(name)
        word = reg.encode(**fields) if value is None else value
        resp = await self.axil.write(reg.offset, int(word).to_bytes(4, "little"))
        assert int(resp.resp) == RESP_OKAY, f"write {name}={word:#x} answered {resp.resp}"

    async def read(self, name: str) -> int:
        reg = self.cmap.reg(name)
        resp = await self.axil.read(reg.offset, 4)
        assert int(resp.resp) == RESP_OKAY, f"read {name} answered {resp.resp}"
        return int.from_bytes(resp.data, "little")

    async def read_fields(self, name: str) -> dict[str, int]:
        return self.cmap.reg(name).decode(await self.read(name))
