"""kvpage agreement stage: the operations of ``hls_ref.vectors.kvpage_set`` through the pynq driver.

:func:`kvpage_results` is plain synchronous driver code, run on the golden backend by
tests/test_agreement.py and on the RTL by the cocotb test :func:`agree` (in a ``cocotb.task.bridge``
thread), which writes the results for the test to compare with the golden model. Each operation's operands
are written raw (the driver's methods would refuse the deliberately bad ones); after it, ERR, CYCLES_BUSY,
every result register (what each holds, written by this operation or an earlier one), the state
registers and OPS are read, and an error is followed by a soft reset.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref import kvpage as kv
from hls_ref.vectors import kvpage_set
from hwcontract.regmap import core
from specdec.errors import CoreError
from specdec.hw.drivers.base import description
from specdec.hw.drivers.kvpage import KVPage
from specdec.sim.device import AxilTB, SimDevice
from tb.agree import vector_limit, vector_spec, write_results
from tb.common import Stimulus, cross_test

CMAP = core("kvpage")
#: The registers read after every operation: ERR, then the RESULT, STATE and COUNTERS groups.
READ = ("ERR",) + tuple(r for g in ("RESULT", "STATE", "COUNTERS") for r in CMAP.group(g).registers)


def kvpage_results(drv: KVPage, ops: list[kv.Op]) -> list[dict]:
    """Per operation: the registers named in the module docstring, by register name."""
    out = []
    for op in ops:
        for name, value in (("SLOT", op.slot), ("ROW", op.row), ("PAGE", op.page),
                            ("MASK_LO", op.mask & 0xFFFFFFFF), ("MASK_HI", op.mask >> 32)):
            drv.write_reg(name, value)
        drv.write_fields("OP", CODE=kv.OPS[op.code])
        drv.start()
        try:
            drv.wait_done()
        except CoreError:
            pass                                    # ERR is read with the other registers
        res = {r: drv.read_reg(r) for r in READ}
        if res["ERR"]:
            drv.soft_reset()
        out.append(res)
    return out


@cross_test
async def agree(dut, stim: Stimulus):
    """The operations of ``AGREE_SEED``/``AGREE_COUNT`` for this build's PAGES and MAX_BLOCKS (under a busy
    bus, the prefix ``AGREE_CROSS_LIMIT`` says, if set)."""
    tb = AxilTB(dut, CMAP)
    await tb.reset()
    stim.apply(tb)
    seed, count = vector_spec()

    def run() -> list[dict]:
        drv = KVPage(description("kvpage", SimDevice(tb.axil)))
        ops = kvpage_set(seed, count, pages=drv.pages, max_blocks=drv.max_blocks)[:vector_limit(stim.index)]
        return kvpage_results(drv, ops)

    write_results(await bridge(run)(), stim.index)
