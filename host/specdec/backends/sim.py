"""Simulation backend: a pynq device whose register accesses run on the cocotb simulation of the RTL.

The driver runs in a thread started with ``cocotb.task.bridge``; every register access resumes a
coroutine that drives ``cocotbext.axi.AxiLiteMaster``, so simulated time advances with each access and
polling STATUS works as on a board.

Use inside a cocotb test::

    dev = SimDevice(axil_master)
    await bridge(lambda: exercise(Rng(description("rng", dev))))()
"""
from __future__ import annotations

from cocotb.task import resume

from ..errors import BusError
from ..regmap import RESP_OKAY
from .device import RegisterDevice


class SimDevice(RegisterDevice):
    """pynq ``REGISTER_RW`` device over a cocotbext-axi ``AxiLiteMaster`` (one core at base 0)."""

    name = "specdec-cocotb"

    def __init__(self, axil_master, base: int = 0) -> None:
        self.axil = axil_master
        self.base = base
        self._read = resume(self._aread)
        self._write = resume(self._awrite)

    async def _aread(self, address: int):
        return await self.axil.read(address - self.base, 4)

    async def _awrite(self, address: int, value: int):
        return await self.axil.write(address - self.base, int(value).to_bytes(4, "little"))

    def read_word(self, address: int) -> int:
        resp = self._read(address)
        if int(resp.resp) != RESP_OKAY:
            raise BusError("read", address, int(resp.resp))
        return int.from_bytes(resp.data, "little")

    def write_word(self, address: int, value: int) -> None:
        resp = self._write(address, value)
        if int(resp.resp) != RESP_OKAY:
            raise BusError("write", address, int(resp.resp))
