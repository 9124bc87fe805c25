"""vecunit: cocotb tests of the RTL (fpga/vecunit.py) against the golden model (hls_ref.vecunit).

The coroutines run inside the simulator; the pytest functions at the end build the core per parameter set and
run them. Every job's m_axis words, ERR, SATURATED, BEATS_IN / BEATS_OUT and ``CYCLES_BUSY - CYCLES_STALL`` are
compared with ``hls_ref.vecunit.run`` (the outputs, the errors and the cycle model). Every test runs four times
(tb.common.cross_test): with and without idle cycles on the AXI-Lite master and the s_axis source, and with and
without backpressure (BREADY/RREADY and the m_axis sink's TREADY). The build parameters are read from the PARAMS
and LEN_MAX registers after reset, as a driver does, and checked against what the runner asked for.
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hls_ref import vecunit as golden
from hls_ref.vectors import vecunit_directed, vecunit_errors, vecunit_job
from hwcontract.formats import VU_OP, vu_frame_bytes, vu_out_values
from hwcontract.regmap import VU_OPS, core
from specdec.sim import harness
from specdec.sim.device import AxilTB
from tb.common import QUIET, Stimulus, cross_names, cross_test, param

CMAP = core("vecunit")
PARAMS = ("LEN_MAX", "PARTS_MAX", "HALF_MAX", "K_MAX")
#: Simulated time a job may take (the longest job here is a few thousand cycles of 10 ns, with pauses).
JOB_US = 500


class VecunitTB(AxilTB):
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
        self.closed = 0         # stream errors whose sent Y words were closed by a zero word

    async def reset(self) -> None:
        """Reset, then read the build parameters from PARAMS and LEN_MAX."""
        await super().reset()
        self.p = dict(await self.read_fields("PARAMS"), LEN_MAX=await self.read("LEN_MAX"))

    async def start(self, job: golden.Job) -> None:
        for name, value in job.registers().items():
            await self.write(name, value)
        await self.write("CTRL", START=1)

    async def wait_stop(self) -> dict:
        for _ in range(2000):
            st = await self.read_fields("STATUS")
            if not st["BUSY"]:
                return st
            await ClockCycles(self.dut.clk, 20)
        raise AssertionError("the core never left BUSY")

    async def send(self, job: golden.Job) -> None:
        """The job's s_axis frame, TLAST on its last beat."""
        if len(job.x):
            self.source.send_nowait(AxiStreamFrame(tdata=vu_frame_bytes(job.x, job.c).tobytes()))

    async def recv(self) -> np.ndarray:
        frame = await with_timeout(self.sink.recv(), JOB_US, "us")
        data = bytes(frame.tdata)
        nb = self.sink.byte_lanes
        return vu_out_values([int.from_bytes(data[k:k + nb], "little") for k in range(0, len(data), nb)])

    async def run(self, job: golden.Job) -> golden.Output:
        """One job from its registers and s_axis frame, every result against ``golden.run``; on an error the core
        drains the frame, closes the frame of any Y words it sent with one zero word, streams nothing more, and a
        soft reset recovers it."""
        job = golden.check(job)
        want = golden.run(job, self.p)
        await self.start(job)
        await self.send(job)
        what = f"{VU_OPS[job.op] if 0 <= job.op < len(VU_OPS) else job.op} LEN={job.length}"
        if not want.err:
            out = await self.recv()
            assert np.array_equal(out, want.y), \
                f"{what}: outputs differ at {np.argwhere(out != want.y)[:8].ravel()}: {out[:8]} != {want.y[:8]}"
        await with_timeout(self.source.wait(), JOB_US, "us")
        st = await self.wait_stop()
        assert st == {"BUSY": 0, "DONE": int(not want.err), "ERROR": int(bool(want.err))}, (what, st, want.err)
        assert await self.read("ERR") == want.err, what
        assert await self.read("SATURATED") == want.saturated, what
        busy, stall = await self.read("CYCLES_BUSY"), await self.read("CYCLES_STALL")
        assert busy - stall == want.cycles, (what, busy, stall, want.cycles)
        beats_in, beats_out = await self.read("BEATS_IN"), await self.read("BEATS_OUT")
        if not want.err:
            assert (beats_in, beats_out) == (len(job.x), len(want.y)), (what, beats_in, beats_out)
        elif golden.start_error(job, self.p):
            assert (beats_in, beats_out) == (0, 0), (what, beats_in, beats_out)
        elif beats_out:
            sent = await self.recv()
            assert len(sent) == beats_out and sent[-1] == 0, (what, sent, beats_out)
            self.closed += 1
        self.stalls += stall
        self.log.info("%s err=%#x: %d cycles (BUSY %d, STALL %d)", what, want.err, want.cycles, busy, stall)
        if want.err:
            await self.expect_silence()
            await self.recover()
        return want

    async def expect_silence(self, cycles: int = 40) -> None:
        await ClockCycles(self.dut.clk, cycles)
        assert self.sink.empty() and self.dut.m_axis_tvalid.value == 0, "the core streamed after an error"

    async def recover(self) -> None:
        await self.write("CTRL", SOFT_RESET=1)
        assert await self.read("ERR") == 0
        assert await self.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}


async def _tb(dut, stim: Stimulus) -> VecunitTB:
    tb = VecunitTB(dut, stim)
    await tb.reset()
    return tb


@cross_test
async def registers(dut, stim: Stimulus):
    """ID, PARAMS and LEN_MAX (the build asked for), the rw registers' reset values, the streams idle."""
    tb = await _tb(dut, stim)
    assert await tb.read("ID") == CMAP.map_hash()
    assert tb.p == {k: param(k) for k in PARAMS}, tb.p
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert dut.m_axis_tvalid.value == 0


@cross_test
async def edges(dut, stim: Stimulus):
    """The edge jobs of every operation (hls_ref.vectors.vecunit_directed: int32 extremes, SHIFT 0 and 63,
    saturation, PARTS_MAX parts, m = 0, HALF 1 and HALF_MAX, SILU beyond the table, ties and K = LEN), dealt
    across the four combinations."""
    tb = await _tb(dut, stim)
    jobs = vecunit_directed(np.random.default_rng(7), tb.p)
    for job in stim.deal(jobs):
        await tb.run(job)


@cross_test
async def random_jobs(dut, stim: Stimulus):
    """A random job of every operation over 1..48 elements in each combination (its own seed), X words small,
    wide, at the edges or mixed; stalls counted only where the stimulus pauses."""
    tb = await _tb(dut, stim)
    rng = np.random.default_rng(20 + stim.index)
    styles = ("mixed", "small", "wide", "edge")
    for i, op in enumerate(VU_OPS):
        await tb.run(vecunit_job(rng, op, int(rng.integers(1, 49)), tb.p, style=styles[(i + stim.index) % 4]))
    assert (tb.stalls > 0) == (stim.idle or stim.backpressure), (stim, tb.stalls)


@cross_test
async def longest(dut, stim: Stimulus):
    """Jobs of LEN_MAX elements, one per combination: NORMQ of int32 extremes (the largest sum of squares, EPS and
    NORM_MULT at their tops), QUANT of wide words, TOPK of K_MAX over many ties, SILU of wide words."""
    tb = await _tb(dut, stim)
    n, rng = tb.p["LEN_MAX"], np.random.default_rng(90 + stim.index)
    ext = np.resize(np.array([-(1 << 31), (1 << 31) - 1], np.int64), n)
    words = rng.integers(0, 1 << 22, n)
    jobs = [golden.Job(VU_OP["NORMQ"], n, np.concatenate([ext, ext]), np.concatenate([words, words]),
                       flags=golden.FLAG["PLANES2"], eps=(1 << 32) - 1, norm_mult=(1 << 32) - 1),
            golden.quant_job(rng.integers(-(1 << 31), 1 << 31, n), words),
            golden.topk_job(rng.integers(-2, 3, n), tb.p["K_MAX"]),
            golden.silu_job(rng.integers(-(1 << 31), 1 << 31, n), rng.integers(-(1 << 31), 1 << 31, n))]
    await tb.run(jobs[stim.index])


@cross_test
async def errors(dut, stim: Stimulus):
    """Every ERR bit (hls_ref.vectors.vecunit_errors, dealt across the four combinations): the START checks in
    their order (no beat taken: the frame is drained), SHORT_STREAM and LONG_STREAM of every operation (a frame of
    Y words already sent closed by a zero word); START ignored in the error state; each recovered by SOFT_RESET,
    then a good job."""
    tb = await _tb(dut, stim)
    rng = np.random.default_rng(60)
    for job in stim.deal(vecunit_errors(rng, tb.p)):
        assert (await tb.run(job)).err, job
    quant = vecunit_job(rng, "QUANT", 64, tb.p)       # longer than the pipeline: words leave before the error
    assert (await tb.run(replace(quant, x=quant.x[:-1], c=quant.c[:-1]))).err == golden.ERR["SHORT_STREAM"]
    assert tb.closed > 0, "no stream error came after a Y word"
    bad = golden.Job(VU_OP["TOPK"], 4, np.zeros(4, np.int64), np.zeros(4, np.int64), k=0)
    await tb.start(bad)
    await tb.wait_stop()
    await tb.write("CTRL", START=1)
    await tb.expect_silence()
    assert await tb.read("ERR") == golden.ERR["BAD_K"]
    await tb.recover()
    await tb.run(vecunit_job(rng, "NORMQ", 5, tb.p))


@cross_test
async def start_while_busy(dut, stim: Stimulus):
    """START while a job waits for its frame is ignored: the job completes once, as the golden model says."""
    tb = await _tb(dut, stim)
    job = golden.check(vecunit_job(np.random.default_rng(80 + stim.index), "ROPE", 8, tb.p))
    want = golden.run(job, tb.p)
    await tb.start(job)
    await tb.write("CTRL", START=1)
    assert (await tb.read_fields("STATUS"))["BUSY"] == 1
    await tb.send(job)
    assert np.array_equal(await tb.recv(), want.y)
    await tb.wait_stop()
    await tb.expect_silence()
    busy, stall = await tb.read("CYCLES_BUSY"), await tb.read("CYCLES_STALL")
    assert busy - stall == want.cycles


@cross_test
async def soft_reset_while_busy(dut, stim: Stimulus):
    """SOFT_RESET while a job waits for its frame returns the core to IDLE with nothing streamed; the next job runs
    as the golden model says (its counters, pipeline and kept TOPK registers start afresh)."""
    tb = await _tb(dut, stim)
    rng = np.random.default_rng(100 + stim.index)
    await tb.start(golden.check(vecunit_job(rng, "TOPK", 9, tb.p)))
    assert (await tb.read_fields("STATUS"))["BUSY"] == 1
    await tb.recover()
    await tb.expect_silence()
    await tb.run(vecunit_job(rng, "TOPK", 12, tb.p))


#: The build of the default suite: the contract's PARTS_MAX, HALF_MAX and K_MAX, LEN_MAX 256 (a LEN_MAX job is
#: cheap; the counters' widths at the contract's LEN_MAX are the long test's).
SMALL = {"LEN_MAX": 256}


@pytest.mark.icarus
def test_vecunit(sim, waves):
    """The LEN_MAX 256 build on both simulators: every test under the idle x backpressure cross."""
    harness.run("vecunit", "tb.vecunit.test_vecunit", sim, params=SMALL, waves=waves)


@pytest.mark.long
@pytest.mark.icarus
def test_vecunit_default(sim, waves):
    """The contract's default build (LEN_MAX 16384, PARTS_MAX 16, HALF_MAX 64, K_MAX 8): the edge jobs, jobs of
    LEN_MAX elements (NORMQ's widest sum of squares) and the errors."""
    harness.run("vecunit", "tb.vecunit.test_vecunit", sim, waves=waves,
                testcase=cross_names("registers", "edges", "longest", "errors"))
