"""The simulated devices: a pynq device whose register accesses run on the cocotb simulation of the RTL, and the
streams into and out of its cores (cocotb only: the simulator's test modules import this module, the host never).

The driver runs in a thread started with ``cocotb.task.bridge``; every register access resumes a
coroutine that drives ``cocotbext.axi.AxiLiteMaster``, so simulated time advances with each access and
polling STATUS works as on a board.

Use inside a cocotb test::

    dev = SimDevice(axil_master)
    await bridge(lambda: exercise(Rng(description("rng", dev))))()

:class:`SimStream` is the matching row stream (``s_axis``) for the verifier driver, :class:`SimSink` the word
stream (``m_axis``) out of the treemask core. :class:`FeedStream` sends the verifier's rows through the
``system`` toplevel's row feeder (``fpga.system.row_feed``) instead: a whole row per file and pulse, not
beat by beat from Python.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable

import numpy as np
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame, AxiStreamSink,
                          AxiStreamSource)

from hwcontract.regmap import RESP_OKAY, CoreMap

from ..errors import BusError, CoreTimeout, SpecdecError, error_record
from ..hw.streams import RegisterDevice, RowStream, WordSink
from .harness import FEED_ENV, RESULT_ENV


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


class SimStream(RowStream):
    """Row stream over a cocotbext-axi ``AxiStreamSource`` on the toplevel's ``s_axis`` port.

    Build it inside the cocotb test (the source starts coroutines); :meth:`send` is then called from the
    driver's bridge thread and resumes a coroutine that sends one frame and waits until it is taken.
    """

    def __init__(self, dut, prefix: str = "s_axis") -> None:
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, prefix), dut.clk, dut.rst)
        self.source.log.setLevel(logging.WARNING)
        self._send = resume(self._asend)

    async def _asend(self, data: bytes) -> None:
        await self.source.send(AxiStreamFrame(tdata=data))
        await self.source.wait()

    def send(self, codes: np.ndarray) -> None:
        data = np.ascontiguousarray(codes, dtype="<i2").tobytes()
        if not data or len(data) % self.source.byte_lanes:
            raise ValueError(f"a frame is whole beats of {self.source.byte_lanes} bytes, got {len(data)} bytes")
        self._send(data)


class FeedStream(RowStream):
    """Row stream through the row feeder of the ``system`` toplevel (``feed_load``, ``feed_len``, ``feed_busy``).

    :meth:`send` writes the row's beats into the rows file (one hex word a line, lane 0 in the low bits),
    pulses ``feed_load`` and waits until ``feed_busy`` falls: the feeder has offered every beat, one a clock
    under the verifier's TREADY, and the verifier has taken the last. The beats and their cycles are those of
    :class:`SimStream`; Python does one file write a row instead of one coroutine step a beat.

    Build it inside the cocotb test; the rows file is the one named by ``$SPECDEC_ROWS``, which the
    simulation's plusarg ``+specdec_rows=<path>`` names too (``specdec.app.runner`` sets both).

    Raises
    ------
    SpecdecError
        ``$SPECDEC_ROWS`` is not set (the feeder would have no file to read).
    """

    def __init__(self, dut) -> None:
        path = os.environ.get(FEED_ENV)
        if not path:
            raise SpecdecError(f"${FEED_ENV} is not set: the row feeder reads its rows from the file it names "
                               f"(and the simulation's +specdec_rows plusarg)")
        self.dut, self.path = dut, Path(path)
        self.lanes = len(dut.s_axis_tdata) // 16
        self.depth = -(-int(os.environ["PARAM_VOCAB_MAX"]) // self.lanes)     # the feeder's frame memory
        self._send = resume(self._asend)

    async def _asend(self, beats: int) -> None:
        self.dut.feed_len.value = beats
        self.dut.feed_load.value = 1
        await RisingEdge(self.dut.clk)
        await FallingEdge(self.dut.clk)
        self.dut.feed_load.value = 0
        if self.dut.feed_busy.value:
            await FallingEdge(self.dut.feed_busy)

    def send(self, codes: np.ndarray) -> None:
        codes = np.ascontiguousarray(codes, dtype=np.int16)
        if not codes.size or codes.size % self.lanes:
            raise ValueError(f"a frame is whole beats of {self.lanes} lanes, got {codes.size} codes")
        beats = codes.size // self.lanes
        if beats > self.depth:
            raise ValueError(f"a frame of {beats} beats is longer than the row feeder's {self.depth}")
        # a beat's hex word: its lanes high to low, 4 digits each
        digits = codes.view(np.uint16).reshape(beats, self.lanes)[:, ::-1].astype(">u2").tobytes().hex()
        width = 4 * self.lanes
        self.path.write_text("\n".join(digits[i:i + width] for i in range(0, len(digits), width)) + "\n")
        self._send(beats)


class SimSink(WordSink):
    """Word stream over a cocotbext-axi ``AxiStreamSink`` on the toplevel's ``m_axis`` port.

    Build it inside the cocotb test (the sink starts coroutines; it takes every beat the core offers, or
    follows ``pause`` as backpressure); :meth:`recv` is then called from the driver's bridge thread and
    resumes a coroutine that waits for one frame, at most ``timeout_us`` of simulated time.
    """

    def __init__(self, dut, prefix: str = "m_axis", timeout_us: float = 1000.0) -> None:
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, prefix), dut.clk, dut.rst)
        self.sink.log.setLevel(logging.WARNING)
        self.timeout_us = timeout_us
        self._recv = resume(self._arecv)
        self._drop = resume(self._adrop)

    async def _arecv(self):
        from cocotb.triggers import SimTimeoutError, with_timeout
        try:
            return await with_timeout(self.sink.recv(), self.timeout_us, "us")
        except SimTimeoutError:
            return None

    async def _adrop(self) -> int:
        n = self.sink.count()
        self.sink.clear()
        return n

    def pending(self) -> int:
        return self.sink.count()

    def drop(self) -> int:
        return self._drop()

    def recv(self) -> list[int]:
        frame = self._recv()
        if frame is None:
            raise CoreTimeout(f"no frame on the output stream within {self.timeout_us} us of simulated time")
        nb = self.sink.byte_lanes
        data = bytes(frame.tdata)
        return [int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)]


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


async def run_job(dut, run: Callable[[], dict], backend: str) -> None:
    """Run ``run`` (a job through the drivers) in a bridge thread and write its result, ``backend`` added, as JSON
    into ``$SPECDEC_RESULT``. A bad input it raises (:func:`specdec.errors.error_record`) is written as
    ``{"error": ...}`` for the host to raise again; any other error fails the test with its traceback."""
    try:
        result = await bridge(run)()
    except Exception as err:        # noqa: BLE001 (a bad input goes back to the host as itself, a bug fails here)
        record = error_record(err)
        if record is None:
            raise
        dut._log.warning("the run stopped: %s", err)
        result = {"error": record}
    else:
        result["backend"] = backend
    Path(os.environ[RESULT_ENV]).write_text(json.dumps(result))
