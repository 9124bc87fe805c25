"""draftengine: cocotb tests of the RTL (fpga/draftengine.py) against the golden model (hls_ref.draftengine).

The coroutines run inside the simulator; ``test_draftengine`` (pytest) builds the core per parameter set and
runs them. Every test runs four times (tb.common.cross_test): with and without idle cycles on the AXI-Lite
master and the s_axis source, and with and without backpressure (BREADY/RREADY and the m_axis sink's
TREADY). The build parameters are read from the PARAMS registers after reset, as the driver does, and
checked against what the runner asked for.
"""
from __future__ import annotations

import numpy as np
import pytest
from cocotb.task import bridge

from hls_ref import draftengine as golden
from hls_ref.vectors import DRAFT_SHAPES, draftengine_job
from hwcontract.formats import de_act_beats, de_unpack_outputs
from hwcontract import board
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.draftengine import DraftEngine
from specdec.sim import harness
from specdec.sim.device import AxilTB, SimDevice, SimSink, SimStream
from tb.common import Stimulus, cross_names, cross_test, param
from tb.draftengine.driver_checks import check_draftengine_driver, check_job

CMAP = core("draftengine")
#: The demo draft's (M, K, N) at M = 1 and 16 (the large build runs them).
LARGE = tuple((m, k, n) for k, n in DRAFT_SHAPES for m in (1, 16))


def _driver(dut, stim: Stimulus) -> tuple[AxilTB, SimStream, SimSink]:
    tb = AxilTB(dut, CMAP)
    stream, sink = SimStream(dut), SimSink(dut, timeout_us=100_000.0)
    stim.apply(tb, sources=[stream.source], sinks=[sink.sink])
    return tb, stream, sink


@cross_test
async def pynq_driver(dut, stim: Stimulus):
    """The unmodified driver in a bridge thread: random jobs (K and N off the array's multiples, M = 1..M_MAX,
    every output width), host-side checks, every core error and its recovery; no stall cycles unless the
    stimulus pauses a stream."""
    tb, stream, sink = _driver(dut, stim)
    await tb.reset()

    def run() -> None:
        drv = DraftEngine(description("draftengine", SimDevice(tb.axil)), stream, sink)
        assert (drv.rows, drv.cols, drv.wdepth, drv.pdepth, drv.k_max, drv.m_max, drv.uram) == tuple(
            param(n) for n in ("ROWS", "COLS", "WDEPTH", "PDEPTH", "K_MAX", "M_MAX", "URAM"))
        check_draftengine_driver(drv, seed=3 + stim.index, count=6,
                                 exact_cycles=not (stim.idle or stim.backpressure))

    await bridge(run)()


@cross_test
async def start_while_busy(dut, stim: Stimulus):
    """START while a job waits for its activations is ignored: the job completes once, as the golden model
    says, and a layer placed once serves two jobs."""
    tb, stream, sink = _driver(dut, stim)
    await tb.reset()

    def run() -> None:
        drv = DraftEngine(description("draftengine", SimDevice(tb.axil)), stream, sink)
        rnd = np.random.default_rng(11)
        job = draftengine_job(rnd, 2, 3 * drv.cols + 1, drv.rows + 2, 16)
        at = drv.place(job.w, job.bias, job.mult, job.shift)
        cfg = drv.cmap.reg("CONFIG")
        for name, v in dict(M=2, K=at.k, N=at.n, WBASE=at.wbase, PBASE=at.pbase).items():
            drv.write_reg(name, v)
        drv.write_reg("CONFIG", cfg.encode(OP=cfg.field("OP").code("RUN"), OUT=cfg.field("OUT").code("OUT16")))
        drv.start()
        drv.start()                                   # busy: ignored
        assert drv.read_fields("STATUS")["BUSY"] == 1
        drv.send_beats(de_act_beats(job.x, drv.rows, drv.cols))
        words = sink.recv()
        drv.wait_done()
        lanes = np.frombuffer(b"".join(w.to_bytes(4 * drv.rows, "little") for w in words), "<i4").reshape(-1, drv.rows)
        assert np.array_equal(de_unpack_outputs(lanes, 2, at.n, drv.rows), golden.run(job).y)
        y2, sat2 = drv.matmul(job.x[::-1], at, 16)    # the same placement, another job
        ref = golden.run(golden.Job(job.x[::-1], job.w, job.bias, job.mult, job.shift, 16))
        assert np.array_equal(y2, ref.y) and sat2 == ref.saturated

    await bridge(run)()


@cross_test
async def draft_shapes(dut, stim: Stimulus):
    """The demo draft's layer shapes at M = 1 and 16, the hot head (N = 8192) included, dealt across the
    four combinations (a build whose memories hold them: WDEPTH >= 24576, PDEPTH >= 1024)."""
    tb, stream, sink = _driver(dut, stim)
    await tb.reset()

    def run() -> None:
        drv = DraftEngine(description("draftengine", SimDevice(tb.axil)), stream, sink)
        rnd = np.random.default_rng(40 + stim.index)
        for i, (m, k, n) in enumerate(stim.deal(LARGE)):
            check_job(drv, draftengine_job(rnd, m, k, n, (16, 8, 32)[i % 3]),
                      exact_cycles=not (stim.idle or stim.backpressure))

    await bridge(run)()


#: Builds: the default (the xc7z020's), a 4 x 16 array with small memories, the large-shape build, and the
#: UltraRAM flavour (the KV260's weight memory) with small memories: 8,192 beats, two URAM288 deep, so its read
#: takes the read register and hwcontract.latency.de_wpipe(8192, 1) = 3 more.
SMALL = {"ROWS": 4, "COLS": 16, "WDEPTH": 256, "PDEPTH": 16, "K_MAX": 256, "M_MAX": 5}
LARGE_BUILD = {"WDEPTH": 24576, "PDEPTH": 1024, "K_MAX": 4096}
URAM_SMALL = {"ROWS": 4, "COLS": 16, "WDEPTH": 8192, "PDEPTH": 16, "K_MAX": 256, "M_MAX": 5, "URAM": 1}


@pytest.mark.icarus(long=True)
def test_draftengine(sim, waves):
    harness.run("draftengine", "tb.draftengine.test_draftengine", sim, waves=waves,
                testcase=cross_names("pynq_driver", "start_while_busy"))


@pytest.mark.long
def test_draftengine_r4c16(waves):
    """A 4 x 16 array with small memories (Verilator; the default build runs on both simulators)."""
    harness.run("draftengine", "tb.draftengine.test_draftengine", "verilator", params=SMALL, waves=waves,
                testcase=cross_names("pynq_driver", "start_while_busy"))


@pytest.mark.long
def test_draftengine_draft_shapes(waves):
    """The draft's shapes under every stimulus on Verilator (the agreement flow runs them on a quiet bus by
    default; Icarus takes minutes per hot-head job)."""
    harness.run("draftengine", "tb.draftengine.test_draftengine", "verilator", params=LARGE_BUILD, waves=waves,
                testcase=cross_names("draft_shapes"))


@pytest.mark.icarus
def test_draftengine_uram(sim, waves):
    """The UltraRAM build on both simulators: its weight reads pass through the pipeline registers during a
    stall and are read again after it (backpressure on m_axis), and every job's cycles equal the cycle model with
    the added stages; weights never loaded (X in Icarus) reach no result."""
    harness.run("draftengine", "tb.draftengine.test_draftengine", sim, params=URAM_SMALL, waves=waves,
                testcase=cross_names("pynq_driver", "start_while_busy"))


@pytest.mark.long
def test_draftengine_kv260(waves):
    """The KV260's build itself (hwcontract.board.KV260_DRAFTENGINE: 32,768 beats in UltraRAM, the read and nine
    registers) under every stimulus, on Verilator."""
    harness.run("draftengine", "tb.draftengine.test_draftengine", "verilator", params=board.KV260_DRAFTENGINE,
                waves=waves, testcase=cross_names("pynq_driver", "start_while_busy"))
