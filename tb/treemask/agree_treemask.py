"""treemask agreement stage: the trees of ``hls_ref.vectors.treemask_set`` through the pynq driver.

:func:`treemask_results` is plain synchronous driver code, run on the golden backend by
tests/test_agreement.py and on the RTL by the cocotb test :func:`agree` (in a ``cocotb.task.bridge``
thread), which writes the results for the test to compare with the golden model. Trees the core refuses
are part of the set: they are written raw (past the driver's host-side checks) and recovered from with a
soft reset.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref.vectors import treemask_set
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.treemask import TreeMask
from specdec.sim.device import AxilTB, SimDevice, SimSink
from tb.agree import vector_spec, write_results
from tb.common import Stimulus, cross_test


def treemask_results(drv: TreeMask, trees: list[list[int]]) -> list[dict]:
    """Per tree: the m_axis words (none when the core refuses it), ROWS, MAX_DEPTH, ERR and the active
    cycles ``CYCLES_BUSY - CYCLES_STALL``."""
    out = []
    for parents in trees:
        drv.write_tree(parents)
        drv.start()
        words = []
        if not drv.read_fields("STATUS")["ERROR"]:
            words = drv.sink.recv()
            drv.wait_done()
        res = {"words": words, "rows": drv.read_reg("ROWS"), "max_depth": drv.read_reg("MAX_DEPTH"),
               "err": drv.read_reg("ERR"), "cycles": drv.read_reg("CYCLES_BUSY") - drv.read_reg("CYCLES_STALL")}
        if res["err"]:
            drv.soft_reset()
        out.append(res)
    return out


@cross_test
async def agree(dut, stim: Stimulus):
    """The trees of ``AGREE_SEED``/``AGREE_COUNT`` for this build's NODES_MAX, through the driver."""
    tb = AxilTB(dut, core("treemask"))
    sink = SimSink(dut)
    await tb.reset()
    stim.apply(tb, sinks=[sink.sink])
    seed, count = vector_spec()

    def run() -> list[dict]:
        drv = TreeMask(description("treemask", SimDevice(tb.axil)), sink)
        return treemask_results(drv, stim.deal(treemask_set(seed, count, drv.nodes_max)))

    write_results(await bridge(run)(), stim.index)
