"""treemask: cocotb tests of the RTL (fpga/treemask.py) against the golden model (hls_ref.treemask).

The coroutines run inside the simulator; ``test_treemask`` (pytest) builds the core per parameter set and
runs them. Every tree's stream words, ROWS, MAX_DEPTH, ERR and ``CYCLES_BUSY - CYCLES_STALL`` are compared
with ``hls_ref.treemask``. Every test runs four times (tb.common.cross_test): with and without idle cycles
on the AXI-Lite master, and with and without backpressure (BREADY/RREADY and the m_axis sink's TREADY).
NODES_MAX is read from the PARAMS register after reset, as the driver does.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
from cocotb.task import bridge
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamSink

from hls_ref import treemask as golden
from specdec.hw.drivers.base import description
from specdec.hw.drivers.treemask import TreeMask
from specdec.sim.device import AxilTB, SimDevice, SimSink
from hwcontract.regmap import TREE_MAX_NODES, core
from specdec.decoding.tree import parents_from_paths
from specdec.sim import harness
from tb.common import QUIET, Stimulus, cross_test, param
from hls_ref.vectors import CHAIN3_PATHS, MEDUSA_PATHS, random_parents
from tb.treemask.driver_checks import check_treemask_driver

CMAP = core("treemask")
PER_REG = len(CMAP.reg("PARENT0").fields)


class TreemaskTB(AxilTB):
    """AXI-Lite master, an AxiStreamSink on ``m_axis`` and the golden comparison of one tree per call.

    ``nodes_max`` (PARAMS.NODES_MAX) is known after :meth:`reset`.
    """

    def __init__(self, dut, stim: Stimulus = QUIET) -> None:
        super().__init__(dut, CMAP)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.sink.log.setLevel(logging.WARNING)
        self.pauses = stim.apply(self, sinks=[self.sink])

    async def reset(self) -> None:
        """Reset, then read the build parameters from PARAMS."""
        await super().reset()
        self.nodes_max = (await self.read_fields("PARAMS"))["NODES_MAX"]

    def hold_sink(self, hold: bool) -> None:
        """Hold TREADY low (``hold``), or hand it back to the stimulus (always ready, or its pauses)."""
        self.pauses.hold(self.sink, hold)

    async def write_tree(self, parents) -> None:
        """NODES and the PARENT registers holding nodes 0..N-1 (node 0's byte 0; N > 64: NODES only)."""
        n = len(parents)
        vals = [0] + [int(p) for p in parents[1:]]
        if n <= TREE_MAX_NODES:
            for k in range(-(-n // PER_REG)):
                chunk = vals[PER_REG * k:PER_REG * k + PER_REG]
                await self.write(f"PARENT{k}", **{f"P{j}": v for j, v in enumerate(chunk)})
        await self.write("NODES", n)

    async def wait_stop(self) -> dict:
        for _ in range(4 * TREE_MAX_NODES + 50):
            st = await self.read_fields("STATUS")
            if not st["BUSY"]:
                return st
        raise AssertionError("the core never left BUSY")

    async def run_tree(self, parents) -> golden.Masks:
        """One tree: START, the frame from the sink, the result registers, all against the golden model."""
        want = golden.tree_mask(parents, self.nodes_max)
        await self.write_tree(parents)
        await self.write("CTRL", START=1)
        n = len(parents)
        if not want.err:
            frame = await with_timeout(self.sink.recv(), 100, "us")
            nb = self.sink.byte_lanes
            data = bytes(frame.tdata)
            words = [int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)]
            assert words == golden.stream_words(want), f"parents {list(parents)}: words differ"
        st = await self.wait_stop()
        assert st == {"BUSY": 0, "DONE": int(not want.err), "ERROR": int(bool(want.err))}, st
        assert await self.read("ERR") == want.err
        assert await self.read("ROWS") == len(want.rows)
        assert await self.read("MAX_DEPTH") == want.max_depth
        busy, stall = await self.read("CYCLES_BUSY"), await self.read("CYCLES_STALL")
        assert busy - stall == (golden.cycles(n) if not want.err else 0), (n, busy, stall)
        self.last = (busy, stall)
        return want

    async def expect_silence(self, cycles: int = 20) -> None:
        await ClockCycles(self.dut.clk, cycles)
        assert self.sink.empty() and self.dut.m_axis_tvalid.value == 0, "the core streamed after an error"

    async def recover(self) -> None:
        nodes = await self.read("NODES")
        await self.write("CTRL", SOFT_RESET=1)
        assert await self.read("ERR") == 0
        assert await self.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
        assert await self.read("NODES") == nodes


async def _tb(dut, stim: Stimulus = QUIET) -> TreemaskTB:
    tb = TreemaskTB(dut, stim)
    await tb.reset()
    return tb


@cross_test
async def registers(dut, stim: Stimulus):
    """ID, PARAMS (the build's NODES_MAX), reset values, the stream idle."""
    tb = await _tb(dut, stim)
    assert await tb.read("ID") == CMAP.map_hash()
    assert tb.nodes_max == param("NODES_MAX"), (tb.nodes_max, param("NODES_MAX"))
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert dut.m_axis_tvalid.value == 0


@cross_test
async def examples(dut, stim: Stimulus):
    """The chain and the Medusa-style tree, also against their masks written out literally."""
    tb = await _tb(dut, stim)
    chain = parents_from_paths(CHAIN3_PATHS)
    assert chain == (-1, 0, 1, 2)
    want = await tb.run_tree(chain)
    assert want.rows == (0b1, 0b11, 0b111, 0b1111) and want.depth == (0, 1, 2, 3)
    if tb.nodes_max >= 7:
        tree = parents_from_paths(MEDUSA_PATHS)
        assert tree == (-1, 0, 0, 1, 1, 2, 2)
        want = await tb.run_tree(tree)
        assert want.rows == (0b1, 0b11, 0b101, 0b1011, 0b10011, 0b100101, 0b1000101)
        assert want.depth == (0, 1, 1, 2, 2, 2, 2) and want.max_depth == 2


@cross_test
async def random_trees(dut, stim: Stimulus):
    """Random trees of the sizes 1..NODES_MAX dealt across the four combinations (every size once), the
    chain and the star of NODES_MAX nodes in each; stalls counted only under backpressure."""
    tb = await _tb(dut, stim)
    rnd = np.random.default_rng(tb.nodes_max + stim.index)
    stalls = 0
    for n in stim.deal(range(1, tb.nodes_max + 1)):
        await tb.run_tree(random_parents(rnd, n))
        stalls += tb.last[1]
    for parents in ([-1] + list(range(tb.nodes_max - 1)),     # the chain
                    [-1] + [0] * (tb.nodes_max - 1)):         # a star: every row two bits
        await tb.run_tree(parents)
        stalls += tb.last[1]
    assert (stalls > 0) == stim.backpressure, (stim, stalls)


@cross_test
async def errors(dut, stim: Stimulus):
    """BAD_NODES (0, NODES_MAX + 1), BAD_PARENT (== i, > i, on the last node): nothing streamed, START
    ignored until SOFT_RESET, then a good tree; no hang."""
    tb = await _tb(dut, stim)
    nmax = tb.nodes_max
    rnd = np.random.default_rng(9 + stim.index)
    cases = [[], [-1] + [0] * nmax]
    if nmax >= 2:
        cases += [[-1] + list(range(nmax - 2)) + [nmax - 1], [-1] + list(range(nmax - 2)) + [nmax + 5]]
        cases.append([-1, 1])                     # node 1 its own parent
    for parents in cases:
        want = await tb.run_tree(parents)
        assert want.err in (golden.ERR_BAD_NODES, golden.ERR_BAD_PARENT), parents
        await tb.expect_silence()
        await tb.write("CTRL", START=1)           # ignored while in error
        await tb.expect_silence(10)
        assert await tb.read("ERR") == want.err and await tb.read("ROWS") == 0
        await tb.recover()
        await tb.run_tree(random_parents(rnd, int(rnd.integers(1, nmax + 1))))
    # BAD_NODES takes precedence over a bad parent
    want = await tb.run_tree([-1] + [5] * nmax)
    assert want.err == golden.ERR_BAD_NODES
    await tb.recover()


@cross_test
async def start_while_busy(dut, stim: Stimulus):
    """START during a stalled stream is ignored: the frame completes once, with the same words."""
    tb = await _tb(dut, stim)
    tb.hold_sink(True)
    parents = random_parents(np.random.default_rng(4), tb.nodes_max)
    want = golden.tree_mask(parents, tb.nodes_max)
    await tb.write_tree(parents)
    await tb.write("CTRL", START=1)
    await tb.write("CTRL", START=1)
    assert (await tb.read_fields("STATUS"))["BUSY"] == 1
    tb.hold_sink(False)
    frame = await with_timeout(tb.sink.recv(), 100, "us")
    nb = tb.sink.byte_lanes
    data = bytes(frame.tdata)
    assert [int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)] == golden.stream_words(want)
    await tb.wait_stop()
    await tb.expect_silence()
    busy, stall = await tb.read("CYCLES_BUSY"), await tb.read("CYCLES_STALL")
    assert busy - stall == golden.cycles(tb.nodes_max) and stall > 0


@cross_test
async def pynq_driver(dut, stim: Stimulus):
    """The unmodified driver, in a bridge thread, through SimDevice and SimSink (golden checks; no stall
    cycles unless the sink applies backpressure)."""
    tb = AxilTB(dut, CMAP)
    sink = SimSink(dut)
    stim.apply(tb, sinks=[sink.sink])
    await tb.reset()

    def run() -> None:
        drv = TreeMask(description("treemask", SimDevice(tb.axil)), sink)
        sizes = sorted({1, 2, 5, drv.nodes_max})
        check_treemask_driver(drv, sizes=sizes, exact_cycles=not stim.backpressure)

    await bridge(run)()


@pytest.mark.icarus(long=True)
@pytest.mark.parametrize("nodes_max", [64, pytest.param(8, marks=pytest.mark.long)])
def test_treemask(sim, waves, nodes_max):
    harness.run("treemask", "tb.treemask.test_treemask", sim, params={"NODES_MAX": nodes_max}, waves=waves)
