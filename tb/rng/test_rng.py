"""rng: cocotb tests of the RTL against the golden model, and the pynq driver over the simulation.

The coroutines run inside the simulator; ``test_rng`` (pytest) builds the core and runs them. Every test
runs four times, with and without idle cycles and backpressure on the AXI-Lite bus (tb.common.cross_test).
"""
from __future__ import annotations

import random

import cocotb
import numpy as np
import pytest
from cocotb.task import bridge
from cocotb.triggers import ClockCycles

from hls_ref import rng as golden
from specdec.sim.device import AxilTB, SimDevice
from hwcontract.regmap import RESP_DECERR, RESP_OKAY, RESP_SLVERR, core
from specdec.sim import harness
from tb.common import QUIET, Stimulus, cross_test
from tb.rng.driver_checks import check_rng_driver

CMAP = core("rng")


async def _tb(dut, stim: Stimulus = QUIET) -> AxilTB:
    tb = AxilTB(dut, CMAP)
    stim.apply(tb)
    await tb.reset()
    return tb


async def _seed(tb: AxilTB, seed) -> None:
    for i, w in enumerate(seed):
        await tb.write(f"SEED{i}", int(w))
    await tb.write("CTRL", LOAD_SEED=1)


@cross_test
async def registers(dut, stim: Stimulus):
    """Reset values, ID hash, byte strobes, SLVERR on read-only, DECERR outside the map."""
    tb = await _tb(dut, stim)
    assert await tb.read("ID") == CMAP.map_hash()
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    await tb.write("SEED1", 0x11223344)
    resp = await tb.axil.write(CMAP.offset("SEED1") + 2, b"\xaa")  # byte lane 2 only
    assert int(resp.resp) == RESP_OKAY
    assert await tb.read("SEED1") == 0x11AA3344
    resp = await tb.axil.write(CMAP.offset("ID"), (1).to_bytes(4, "little"))
    assert int(resp.resp) == RESP_SLVERR
    assert await tb.read("ID") == CMAP.map_hash()
    for off in (CMAP.span, (1 << CMAP.addr_width) - 4):
        r = await tb.axil.read(off, 4)
        assert int(r.resp) == RESP_DECERR and r.data == bytes(4)
        w = await tb.axil.write(off, (5).to_bytes(4, "little"))
        assert int(w.resp) == RESP_DECERR
    assert await tb.read("CTRL") == 0  # pulse registers read 0


@cross_test
async def steps_match_golden(dut, stim: Stimulus):
    """STEP outputs and a START burst equal the golden model for random seeds (three per combination)."""
    tb = await _tb(dut, stim)
    rnd = random.Random(1234 + stim.index)
    for _ in range(3):
        seed = np.array([rnd.getrandbits(32) for _ in range(4)], dtype=np.uint32)
        seed[0] |= 1
        await _seed(tb, seed)
        want, _ = golden.xoshiro128pp(seed, 8 + 1000)
        for i in range(8):
            await tb.write("CTRL", STEP=1)
            assert await tb.read("OUT") == int(want[i]), f"step {i}"
        await tb.write("COUNT", 1000)
        await tb.write("CTRL", START=1)
        for _ in range(2000):
            st = await tb.read_fields("STATUS")
            if st["DONE"]:
                break
        assert st == {"BUSY": 0, "DONE": 1, "ERROR": 0}, st
        assert await tb.read("OUT") == int(want[-1])
        assert await tb.read("XOR") == int(np.bitwise_xor.reduce(want))
        assert await tb.read("STEPS") == 1008


@cross_test
async def burst_cycles(dut, stim: Stimulus):
    """A START burst of N steps keeps BUSY for N+1 cycles: one output per clock. The cycles are counted
    from before CTRL is written: under backpressure the write's response comes after the burst began."""
    tb = await _tb(dut, stim)
    await _seed(tb, (1, 2, 3, 4))
    await tb.write("COUNT", 500)

    async def busy_cycles() -> int:
        busy = 0
        for _ in range(1000):
            await ClockCycles(dut.clk, 1)
            st = CMAP.reg("STATUS").decode(int(dut.r_status.value))
            busy += st["BUSY"]
            if busy and st["DONE"]:
                return busy
        raise AssertionError(f"no DONE within 1000 cycles ({busy} BUSY)")

    counter = cocotb.start_soon(busy_cycles())
    await tb.write("CTRL", START=1)
    assert await counter == 501


@cross_test
async def zero_seed_and_soft_reset(dut, stim: Stimulus):
    """All-zero seed: ERR.SEED_ZERO, STATUS.ERROR, commands ignored; SOFT_RESET recovers."""
    tb = await _tb(dut, stim)
    await _seed(tb, (0, 0, 0, 0))
    assert await tb.read_fields("ERR") == {"SEED_ZERO": 1}
    assert (await tb.read_fields("STATUS"))["ERROR"] == 1
    await tb.write("CTRL", STEP=1)
    assert await tb.read("STEPS") == 0
    await tb.write("CTRL", SOFT_RESET=1)
    assert await tb.read("ERR") == 0
    await _seed(tb, (5, 6, 7, 8))
    await tb.write("CTRL", STEP=1)
    assert await tb.read("OUT") == int(golden.xoshiro128pp([5, 6, 7, 8], 1)[0][0])


@cross_test
async def pynq_driver(dut, stim: Stimulus):
    """The unmodified pynq driver, running in a thread, against the RTL (same checks as golden)."""
    tb = await _tb(dut, stim)
    await bridge(check_rng_driver)(SimDevice(tb.axil), 300)


@pytest.mark.icarus(long=True)
def test_rng(sim, waves):
    harness.run("rng", "tb.rng.test_rng", sim, waves=waves)
