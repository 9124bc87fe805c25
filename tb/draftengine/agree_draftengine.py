"""draftengine agreement stage: the jobs of ``hls_ref.vectors.draftengine_set`` through the pynq driver.

:func:`draftengine_results` is plain synchronous driver code, run on the golden backend by
tests/test_agreement.py and on the RTL by the cocotb test :func:`agree` (in a ``cocotb.task.bridge``
thread), which writes the results for the test to compare with the golden model.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref import draftengine as golden
from hls_ref.vectors import draftengine_set
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.draftengine import DraftEngine
from specdec.sim.device import AxilTB, SimDevice, SimSink, SimStream
from tb.agree import vector_limit, vector_spec, write_results
from tb.common import Stimulus, cross_test


def draftengine_results(drv: DraftEngine, jobs: list[golden.Job]) -> list[dict]:
    """Per job: the outputs, SATURATED, the beats in and out, and the active cycles
    ``CYCLES_BUSY - CYCLES_STALL``."""
    out = []
    for job in jobs:
        res = drv.run(job)
        out.append({"y": res.y.tolist(), "saturated": res.saturated, "beats_in": drv.read_reg("BEATS_IN"),
                    "beats_out": drv.read_reg("BEATS_OUT"), "cycles": drv.cycles - drv.stall})
    return out


@cross_test
async def agree(dut, stim: Stimulus):
    """The jobs of ``AGREE_SEED``/``AGREE_COUNT`` (the first ``AGREE_LIMIT``), dealt across the four combinations, through the driver."""
    tb = AxilTB(dut, core("draftengine"))
    stream, sink = SimStream(dut), SimSink(dut, timeout_us=100_000.0)
    await tb.reset()
    stim.apply(tb, sources=[stream.source], sinks=[sink.sink])
    seed, count = vector_spec()

    def run() -> list[dict]:
        drv = DraftEngine(description("draftengine", SimDevice(tb.axil)), stream, sink)
        return draftengine_results(drv, stim.deal(draftengine_set(seed, count)[:vector_limit()]))

    write_results(await bridge(run)(), stim.index)
