"""treeattn: cocotb tests of the RTL (fpga/treeattn.py) against the golden model (hls_ref.treeattn).

The coroutines run inside the simulator; the pytest functions at the end build the core per parameter set and
run them. Every job's m_axis codes, ERR, MACS and ``CYCLES_BUSY - CYCLES_STALL`` are compared with
``hls_ref.treeattn`` (``run_frame``: the outputs, the errors, and the cycle model). Every test runs four times
(tb.common.cross_test): with and without idle cycles on the AXI-Lite master and the s_axis source, and with and
without backpressure (BREADY/RREADY and the m_axis sink's TREADY). The build parameters are read from the PARAMS
and CTX_MAX registers after reset, as a driver does, and checked against what the runner asked for.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hls_ref import treeattn as golden
from hls_ref.vectors import chain_mask, random_parents, tree_rows, treeattn_errors, treeattn_job
from hwcontract.board import KV260_TREEATTN
from hwcontract.regmap import core
from specdec.sim import harness
from specdec.sim.device import AxilTB
from tb.common import QUIET, Stimulus, cross_names, cross_test, param

CMAP = core("treeattn")
PARAMS = ("HEAD_DIM", "GROUP", "NODES_MAX", "LANES", "BLOCK")
#: Simulated time a job may take (the largest jobs here, NODES_MAX = 64 rows, take about 90,000 cycles of 10 ns,
#: with pauses).
JOB_US = 2000


class TreeattnTB(AxilTB):
    """AXI-Lite master, an AxiStreamSource on ``s_axis``, an AxiStreamSink on ``m_axis``; one job per call,
    compared with the golden model. ``p`` (the build's parameters) is known after :meth:`reset`."""

    def __init__(self, dut, stim: Stimulus = QUIET) -> None:
        super().__init__(dut, CMAP)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.source.log.setLevel(logging.WARNING)
        self.sink.log.setLevel(logging.WARNING)
        self.stim = stim
        self.pauses = stim.apply(self, sources=[self.source], sinks=[self.sink])
        self.stalls = 0

    async def reset(self) -> None:
        """Reset, then read the build parameters from PARAMS and CTX_MAX."""
        await super().reset()
        self.p = dict(await self.read_fields("PARAMS"), CTX_MAX=await self.read("CTX_MAX"))

    async def start(self, ctx: int, n: int, mult: int, shift: int) -> None:
        await self.write("CTX", ctx)
        await self.write("NODES", n)
        await self.write("MULT", mult)
        await self.write("SHIFT", shift)
        await self.write("CTRL", START=1)

    async def wait_stop(self) -> dict:
        for _ in range(2000):
            st = await self.read_fields("STATUS")
            if not st["BUSY"]:
                return st
            await ClockCycles(self.dut.clk, 50)
        raise AssertionError("the core never left BUSY")

    async def send(self, data: np.ndarray) -> None:
        """One s_axis frame ((beats, 16) uint8), TLAST on its last beat."""
        if len(data):
            await self.source.send(AxiStreamFrame(tdata=np.ascontiguousarray(data, dtype=np.uint8).tobytes()))

    async def recv(self, n: int) -> np.ndarray:
        frame = await with_timeout(self.sink.recv(), JOB_US, "us")
        data = bytes(frame.tdata)
        nb = self.sink.byte_lanes
        beats = [int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)]
        return golden.unpack_out(beats, n, self.p)

    async def run_frame(self, data: np.ndarray, ctx: int, n: int, mult: int, shift: int) -> golden.Output:
        """One job from its registers and an s_axis frame, every result against ``golden.run_frame``; on an error,
        the core drains the frame, streams nothing, and a soft reset recovers it."""
        want = golden.run_frame(data, ctx, n, mult, shift, self.p)
        await self.start(ctx, n, mult, shift)
        await self.send(data)
        if not want.err:
            out = await self.recv(n)
            assert np.array_equal(out, want.out), f"L={ctx} N={n}: outputs differ at {np.argwhere(out != want.out)[:8]}"
        await with_timeout(self.source.wait(), JOB_US, "us")
        st = await self.wait_stop()
        assert st == {"BUSY": 0, "DONE": int(not want.err), "ERROR": int(bool(want.err))}, (st, want.err)
        assert await self.read("ERR") == want.err
        assert await self.read("MACS") == want.macs
        busy, stall = await self.read("CYCLES_BUSY"), await self.read("CYCLES_STALL")
        assert busy - stall == want.cycles, (ctx, n, busy, stall, want.cycles)
        self.stalls += stall
        self.log.info("L=%d N=%d err=%#x: %d cycles (BUSY %d, STALL %d), MACS %d", ctx, n, want.err, want.cycles, busy,
                      stall, want.macs)
        if want.err:
            await self.expect_silence()
            await self.recover()
        return want

    async def run(self, job: golden.Job) -> golden.Output:
        return await self.run_frame(golden.stream_bytes(job, self.p), job.ctx, job.n, job.mult, job.shift)

    async def expect_silence(self, cycles: int = 20) -> None:
        await ClockCycles(self.dut.clk, cycles)
        assert self.sink.empty() and self.dut.m_axis_tvalid.value == 0, "the core streamed after an error"

    async def recover(self) -> None:
        await self.write("CTRL", SOFT_RESET=1)
        assert await self.read("ERR") == 0
        assert await self.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}


async def _tb(dut, stim: Stimulus) -> TreeattnTB:
    tb = TreeattnTB(dut, stim)
    await tb.reset()
    return tb


def _trees(rng: np.random.Generator, n: int, nodes_max: int) -> tuple[int, ...]:
    return tree_rows(random_parents(rng, n, "random"), nodes_max)


@cross_test
async def registers(dut, stim: Stimulus):
    """ID, PARAMS and CTX_MAX (the build asked for), the rw registers' reset values, the streams idle."""
    tb = await _tb(dut, stim)
    assert await tb.read("ID") == CMAP.map_hash()
    assert tb.p == {k: param(k) for k in (*PARAMS, "CTX_MAX")}, tb.p
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert dut.m_axis_tvalid.value == 0


@cross_test
async def chains_and_trees(dut, stim: Stimulus):
    """Chains and random trees over contexts of 0 keys, short last blocks and whole blocks, and two jobs of
    NODES_MAX rows (under idle cycles), dealt across the four combinations; stalls counted only where the stimulus
    pauses."""
    tb = await _tb(dut, stim)
    p, rng = tb.p, np.random.default_rng(20 + stim.index)
    blk, nm = p["BLOCK"], p["NODES_MAX"]
    ctxs = [0, 1, blk - 1, blk, blk + 3, 2 * blk + 5]
    specs = [(ctx, int(rng.integers(1, min(6, nm) + 1))) for ctx in ctxs]
    specs[2:2] = [(2, nm), (3, nm)]                 # dealt to the idle combinations
    for i, (ctx, n) in enumerate(stim.deal(specs)):
        mask = chain_mask(n) if i % 2 == 0 else _trees(rng, n, nm)
        await tb.run(treeattn_job(rng, min(ctx, p["CTX_MAX"]), mask, p))
    assert (tb.stalls > 0) == (stim.idle or stim.backpressure), (stim, tb.stalls)


@cross_test
async def extremes(dut, stim: Stimulus):
    """Codes at -128 and 127 (the widest scores and sums), flat and clamped distances (MULT 1 at SHIFT 31, MULT
    65535 at SHIFT 0), and an output that saturates at -128.0."""
    tb = await _tb(dut, stim)
    p, rng = tb.p, np.random.default_rng(40 + stim.index)
    blk, nm = p["BLOCK"], p["NODES_MAX"]
    jobs = [treeattn_job(rng, blk + 7, chain_mask(min(3, nm)), p, extreme=True),
            treeattn_job(rng, 9, chain_mask(min(2, nm)), p, mult_shift=(1, 31)),
            treeattn_job(rng, 9, _trees(rng, min(7, nm), nm), p, mult_shift=((1 << 16) - 1, 0))]
    q = np.full((1, p["GROUP"], p["HEAD_DIM"]), 127)
    k = np.full((blk + 1, p["HEAD_DIM"]), -128)
    jobs.append(golden.Job(q, k, k, k[:1], k[:1], (1,), *golden.multiplier(0.02, 0.02, p["HEAD_DIM"])))
    for job in stim.deal(jobs) if stim.index else jobs:
        await tb.run(job)


@cross_test
async def errors(dut, stim: Stimulus):
    """Every ERR bit: the START checks (no beat taken: a beat sent after one is drained), BAD_MASK,
    SHORT_STREAM and LONG_STREAM (the rest of the frame drained); START ignored in the error state; each
    recovered by SOFT_RESET, then a good job."""
    tb = await _tb(dut, stim)
    p, rng = tb.p, np.random.default_rng(60 + stim.index)
    wide = treeattn_job(rng, 3, chain_mask(1), p, mult_shift=(1 << 16, 0))      # MULT above 16 bits
    for job in treeattn_errors(rng, p) + [wide]:
        refused_at_start = golden.start_error(job.ctx, job.n, job.mult, job.shift, p)
        data = np.zeros((1, golden.BEAT_BYTES), np.uint8) if refused_at_start else golden.stream_bytes(job, p)
        out = await tb.run_frame(data, job.ctx, job.n, job.mult, job.shift)
        assert out.err, job
    good = treeattn_job(rng, p["BLOCK"] + 2, chain_mask(min(3, p["NODES_MAX"])), p)
    data = golden.stream_bytes(good, p)
    for frame in (data[:-1], data[:len(data) // 2], np.concatenate([data, data[:3]])):
        want = await tb.run_frame(frame, good.ctx, good.n, good.mult, good.shift)
        assert want.err in (golden.ERR_SHORT_STREAM, golden.ERR_LONG_STREAM)
    # START in the error state is ignored; SOFT_RESET recovers
    await tb.start(p["CTX_MAX"] + 1, 1, 1, 0)
    await tb.wait_stop()
    await tb.write("CTRL", START=1)
    await tb.expect_silence()
    assert await tb.read("ERR") == golden.ERR_BAD_CTX
    await tb.recover()
    await tb.run(good)


#: The small build of most tests (HEAD_DIM 32, GROUP 2, NODES_MAX 16, CTX_MAX 256, BLOCK 16, LANES 16).
SMALL = {"HEAD_DIM": 32, "GROUP": 2, "NODES_MAX": 16, "CTX_MAX": 256, "BLOCK": 16}


@cross_test
async def start_while_busy(dut, stim: Stimulus):
    """START while a job waits for its frame is ignored: the job completes once, as the golden model says."""
    tb = await _tb(dut, stim)
    p, rng = tb.p, np.random.default_rng(80 + stim.index)
    job = treeattn_job(rng, p["BLOCK"] + 1, _trees(rng, min(4, p["NODES_MAX"]), p["NODES_MAX"]), p)
    want = golden.run(job, p)
    await tb.start(job.ctx, job.n, job.mult, job.shift)
    await tb.write("CTRL", START=1)
    assert (await tb.read_fields("STATUS"))["BUSY"] == 1
    await tb.send(golden.stream_bytes(job, p))
    assert np.array_equal(await tb.recv(job.n), want.out)
    await tb.wait_stop()
    await tb.expect_silence()
    busy, stall = await tb.read("CYCLES_BUSY"), await tb.read("CYCLES_STALL")
    assert busy - stall == want.cycles and await tb.read("MACS") == want.macs


@pytest.mark.icarus
def test_treeattn(sim, waves):
    """The small build on both simulators: every test under the idle x backpressure cross."""
    harness.run("treeattn", "tb.treeattn.test_treeattn", sim, params=SMALL, waves=waves)


@pytest.mark.icarus(long=True)
@pytest.mark.parametrize("lanes", [8, 32])
def test_treeattn_lanes(sim, waves, lanes):
    """The other LANES: 8 (two compute chunks a memory word) and 32 (two beats a memory word, D = 1)."""
    harness.run("treeattn", "tb.treeattn.test_treeattn", sim, params=dict(SMALL, LANES=lanes), waves=waves)


@pytest.mark.icarus(long=True)
def test_treeattn_real(sim, waves):
    """The contract's default build (HEAD_DIM 64, GROUP 3, NODES_MAX 64, LANES 16, CTX_MAX 8192, BLOCK 32):
    chains and trees, NODES_MAX = 64 rows included, and the errors."""
    harness.run("treeattn", "tb.treeattn.test_treeattn", sim, waves=waves,
                testcase=cross_names("registers", "chains_and_trees", "errors"))


@pytest.mark.icarus(long=True)
def test_treeattn_kv260(sim, waves):
    """The KV260's build (``hwcontract.board.KV260_TREEATTN``, its blocks of 64 keys): chains and trees over short
    and whole blocks, NODES_MAX rows included, extreme codes and distances, and the errors."""
    harness.run("treeattn", "tb.treeattn.test_treeattn", sim, params=KV260_TREEATTN, waves=waves,
                testcase=cross_names("registers", "chains_and_trees", "extremes", "errors"))
