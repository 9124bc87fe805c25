"""treeattn agreement stage: the jobs of ``hls_ref.vectors.treeattn_set`` through the pynq driver.

:func:`treeattn_results` is plain synchronous driver code, run on the golden backend by tests/test_agreement.py
and on the RTL by the cocotb test :func:`agree` (in a ``cocotb.task.bridge`` thread), which writes the results for
the test to compare with the golden model. Jobs the core refuses are part of the set: the driver refuses them on
the host, so they are written raw (the registers, START, and for a MASK error the frame, which the core drains)
and recovered from with a soft reset.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref import treeattn as golden
from hls_ref.vectors import treeattn_set
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.treeattn import TreeAttn
from specdec.sim.device import AxilTB, SimDevice, SimSink, SimStream
from tb.agree import vector_limit, vector_spec, write_results
from tb.common import Stimulus, cross_test


def refused(drv: TreeAttn, job: golden.Job) -> dict:
    """A job the core refuses, past the driver's host checks: its ERR, MACS and active cycles; then a soft reset."""
    for name, v in (("CTX", job.ctx), ("NODES", job.n), ("MULT", job.mult), ("SHIFT", job.shift)):
        drv.write_reg(name, v)
    drv.start()
    if not drv.read_fields("STATUS")["ERROR"]:
        drv.stream.send_parts([golden.stream_bytes(job, drv.params)])
    res = {"out": [], "err": drv.read_reg("ERR"), "macs": drv.read_reg("MACS"),
           "cycles": drv.read_reg("CYCLES_BUSY") - drv.read_reg("CYCLES_STALL")}
    drv.soft_reset()
    return res


def treeattn_results(drv: TreeAttn, jobs: list[golden.Job]) -> list[dict]:
    """Per job: the output codes (nested lists, (N, GROUP, HEAD_DIM); empty on an error), ERR, MACS and the active
    cycles ``CYCLES_BUSY - CYCLES_STALL``."""
    out = []
    for job in jobs:
        p = drv.params
        if golden.start_error(job.ctx, job.n, job.mult, job.shift, p) or golden.mask_error(job.mask):
            out.append(refused(drv, job))
            continue
        res = drv.run(job)
        out.append({"out": res.out.tolist(), "err": res.err, "macs": res.macs, "cycles": res.cycles})
    return out


@cross_test
async def agree(dut, stim: Stimulus):
    """The jobs of ``AGREE_SEED``/``AGREE_COUNT`` (the first ``AGREE_LIMIT``) for this build, dealt across the four
    combinations, through the driver."""
    tb = AxilTB(dut, core("treeattn"))
    stream, sink = SimStream(dut), SimSink(dut, timeout_us=100_000.0)
    await tb.reset()
    stim.apply(tb, sources=[stream.source], sinks=[sink.sink])
    seed, count = vector_spec()

    def run() -> list[dict]:
        drv = TreeAttn(description("treeattn", SimDevice(tb.axil)), stream, sink)
        return treeattn_results(drv, stim.deal(treeattn_set(seed, count, drv.params)[:vector_limit()]))

    write_results(await bridge(run)(), stim.index)
