"""vecunit agreement stage: the jobs of ``hls_ref.vectors.vecunit_set`` through the pynq driver.

:func:`vecunit_results` is plain synchronous driver code, run on the golden backend by tests/test_agreement.py and
on the RTL by the cocotb test :func:`agree` (in a ``cocotb.task.bridge`` thread), which writes the results for the
test to compare with the golden model. Jobs the core refuses are part of the set: the driver refuses them on the
host, so they are written raw (the registers, START, and for a stream error the frame, which the core drains) and
recovered from with a soft reset.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref import vecunit as golden
from hls_ref.vectors import vecunit_set
from hwcontract.formats import vu_frame_bytes
from hwcontract.regmap import VU_OPS, core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.vecunit import VecUnit
from specdec.sim.device import AxilTB, SimDevice, SimSink, SimStream
from tb.agree import vector_limit, vector_spec, write_results
from tb.common import Stimulus, cross_test


def refused(drv: VecUnit, job: golden.Job) -> dict:
    """A job the core refuses, past the driver's host checks: its ERR, SATURATED and active cycles (no result
    words: the words a stream error lets out before it are no result); then the driver abandons it (:meth:`~specdec.hw.drivers.vecunit.VecUnit.abandon`: a frame the core
    closes after a stream error is discarded, and the jobs after this one show that nothing of it is left)."""
    for name, v in job.registers().items():
        drv.write_reg(name, v)
    drv.start()
    if not drv.read_fields("STATUS")["ERROR"] and len(job.x):
        drv.stream.send_parts([vu_frame_bytes(job.x, job.c)])
    res = {"err": drv.read_reg("ERR"), "saturated": drv.read_reg("SATURATED"),
           "cycles": drv.read_reg("CYCLES_BUSY") - drv.read_reg("CYCLES_STALL")}
    drv.abandon()
    return res


def vecunit_results(drv: VecUnit, jobs: list[golden.Job]) -> list[dict]:
    """Per job: ERR, SATURATED, the active cycles ``CYCLES_BUSY - CYCLES_STALL``, and for a job that ran its m_axis
    words (int values), BEATS_IN and BEATS_OUT."""
    out = []
    for job in jobs:
        j = golden.check(job)
        want = golden.frame_beats(j.op, j.length, j.parts, j.flags) if 0 <= j.op < len(VU_OPS) else -1
        if golden.start_error(j, drv.params) or len(j.x) != want:
            out.append(refused(drv, j))
            continue
        res = drv.run(j)
        out.append({"y": res.y.tolist(), "err": res.err, "saturated": res.saturated, "cycles": res.cycles,
                    "beats_in": drv.beats_in, "beats_out": drv.beats_out})
    return out


@cross_test
async def agree(dut, stim: Stimulus):
    """The jobs of ``AGREE_SEED``/``AGREE_COUNT`` (the first ``AGREE_LIMIT``) for this build, dealt across the four
    combinations, through the driver."""
    tb = AxilTB(dut, core("vecunit"))
    stream, sink = SimStream(dut), SimSink(dut, timeout_us=100_000.0)
    await tb.reset()
    stim.apply(tb, sources=[stream.source], sinks=[sink.sink])
    seed, count = vector_spec()

    def run() -> list[dict]:
        drv = VecUnit(description("vecunit", SimDevice(tb.axil)), stream, sink)
        return vecunit_results(drv, stim.deal(vecunit_set(seed, count, drv.params)[:vector_limit()]))

    write_results(await bridge(run)(), stim.index)
