"""treemask: cocotb tests of the RTL (fpga/treemask.py) against the golden model (hls_ref.treemask).

The coroutines run inside the simulator; ``test_treemask`` (pytest) builds the core per parameter set and
runs them. Every tree's stream words, ROWS, MAX_DEPTH, ERR and ``CYCLES_BUSY - CYCLES_STALL`` are compared
with ``hls_ref.treemask``, with the AXI-Lite idle/backpressure and m_axis backpressure patterns swept.
"""
from __future__ import annotations

import logging

import cocotb
import numpy as np
import pytest
from cocotb.task import bridge
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamSink

from hls_ref import treemask as golden
from specdec.backends.sim import SimDevice, SimSink
from specdec.drivers import TreeMask
from specdec.drivers.base import description
from hwcontract.regmap import TREE_MAX_NODES, core
from specdec.tree import parents_from_paths
from specdec.backends import simulator as harness
from tb.common import STIMULUS, AxilTB, param
from tb.treemask.driver_checks import EXAMPLE_PATHS, check_treemask_driver, random_parents

CMAP = core("treemask")
PER_REG = len(CMAP.reg("PARENT0").fields)


class TreemaskTB(AxilTB):
    """AXI-Lite master, an AxiStreamSink on ``m_axis`` and the golden comparison of one tree per call."""

    def __init__(self, dut, idle: str = "none", backpressure: str = "none") -> None:
        super().__init__(dut, CMAP)
        self.nodes_max = param("NODES_MAX", 64)
        self.set_idle_generator(STIMULUS[idle])
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.sink.log.setLevel(logging.WARNING)
        if STIMULUS[backpressure]:
            self.sink.set_pause_generator(STIMULUS[backpressure]())

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


async def _tb(dut, idle="none", backpressure="none") -> TreemaskTB:
    tb = TreemaskTB(dut, idle, backpressure)
    await tb.reset()
    return tb


@cocotb.test()
async def registers(dut):
    """ID, PARAMS, reset values, the stream idle."""
    tb = await _tb(dut)
    assert await tb.read("ID") == CMAP.map_hash()
    assert await tb.read_fields("PARAMS") == {"NODES_MAX": tb.nodes_max}
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert dut.m_axis_tvalid.value == 0


@cocotb.test()
async def examples(dut):
    """The chain and the Medusa-style tree, also against their masks written out literally."""
    tb = await _tb(dut)
    chain = parents_from_paths([(0,), (0, 0), (0, 0, 0)])
    assert chain == (-1, 0, 1, 2)
    want = await tb.run_tree(chain)
    assert want.rows == (0b1, 0b11, 0b111, 0b1111) and want.depth == (0, 1, 2, 3)
    if tb.nodes_max >= 7:
        tree = parents_from_paths(EXAMPLE_PATHS)
        assert tree == (-1, 0, 0, 1, 1, 2, 2)
        want = await tb.run_tree(tree)
        assert want.rows == (0b1, 0b11, 0b101, 0b1011, 0b10011, 0b100101, 0b1000101)
        assert want.depth == (0, 1, 1, 2, 2, 2, 2) and want.max_depth == 2


@cocotb.test()
@cocotb.parametrize(stim=[("none", "none"), ("cycle", "cycle"), ("random", "random")])
async def random_trees(dut, stim):
    """A random tree of every size 1..NODES_MAX and the chain of NODES_MAX nodes, stalls counted."""
    idle, backpressure = stim
    tb = await _tb(dut, idle, backpressure)
    rnd = np.random.default_rng(tb.nodes_max + len(idle))
    stalls = 0
    for n in range(1, tb.nodes_max + 1):
        await tb.run_tree(random_parents(rnd, n))
        stalls += tb.last[1]
    await tb.run_tree([-1] + list(range(tb.nodes_max - 1)))
    await tb.run_tree([-1] + [0] * (tb.nodes_max - 1))      # a star: every row two bits
    if backpressure == "none":
        assert stalls == 0
    else:
        assert stalls > 0


@cocotb.test()
@cocotb.parametrize(stim=[("none", "none"), ("cycle", "random")])
async def errors(dut, stim):
    """BAD_NODES (0, NODES_MAX + 1), BAD_PARENT (== i, > i, on the last node): nothing streamed, START
    ignored until SOFT_RESET, then a good tree; no hang."""
    tb = await _tb(dut, *stim)
    nmax = tb.nodes_max
    rnd = np.random.default_rng(9)
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


@cocotb.test()
async def start_while_busy(dut):
    """START during a stalled stream is ignored: the frame completes once, with the same words."""
    tb = await _tb(dut)
    tb.sink.pause = True
    parents = random_parents(np.random.default_rng(4), tb.nodes_max)
    want = golden.tree_mask(parents, tb.nodes_max)
    await tb.write_tree(parents)
    await tb.write("CTRL", START=1)
    await tb.write("CTRL", START=1)
    assert (await tb.read_fields("STATUS"))["BUSY"] == 1
    tb.sink.pause = False
    frame = await with_timeout(tb.sink.recv(), 100, "us")
    nb = tb.sink.byte_lanes
    data = bytes(frame.tdata)
    assert [int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)] == golden.stream_words(want)
    await tb.wait_stop()
    await tb.expect_silence()
    busy, stall = await tb.read("CYCLES_BUSY"), await tb.read("CYCLES_STALL")
    assert busy - stall == golden.cycles(tb.nodes_max) and stall > 0


@cocotb.test()
async def pynq_driver(dut):
    """The unmodified driver, in a bridge thread, through SimDevice and SimSink (golden checks)."""
    tb = AxilTB(dut, CMAP)
    sink = SimSink(dut)
    await tb.reset()

    def run() -> None:
        drv = TreeMask(description("treemask", SimDevice(tb.axil)), sink)
        sizes = sorted({1, 2, 5, drv.nodes_max})
        check_treemask_driver(drv, sizes=sizes, exact_cycles=True)

    await bridge(run)()


@pytest.mark.icarus
@pytest.mark.parametrize("nodes_max", [64, 8])
def test_treemask(sim, waves, nodes_max):
    harness.run("treemask", "tb.treemask.test_treemask", sim, params={"NODES_MAX": nodes_max}, waves=waves)
