"""verifier: the pynq driver over the RTL simulation (the same checks as on the golden model).

``tests/test_verifier_driver.py::test_driver_on_rtl`` (pytest) builds the core and runs this module. The
test runs four times (tb.common.cross_test): with and without idle cycles on the AXI-Lite master and the
row stream, and with and without backpressure on BREADY/RREADY; the random rounds are dealt across the
four, every error path runs in each.
"""
from __future__ import annotations

from cocotb.task import bridge

from specdec.hw.drivers.base import description
from specdec.hw.drivers.verifier import Verifier
from specdec.sim.device import AxilTB, SimDevice, SimStream
from hwcontract.regmap import core
from tb.common import Stimulus, cross_test
from tb.verifier.driver_checks import check_verifier_driver

#: Random rounds through the driver per build, dealt across the four stimulus combinations.
ROUNDS = 32


@cross_test
async def pynq_driver(dut, stim: Stimulus):
    """The unmodified driver, running in a thread, against the RTL."""
    tb = AxilTB(dut, core("verifier"))
    stream = SimStream(dut)
    stim.apply(tb, sources=[stream.source])
    await tb.reset()

    def run() -> dict:
        drv = Verifier(description("verifier", SimDevice(tb.axil)), stream)
        return check_verifier_driver(drv, rounds=stim.share(ROUNDS), seed=5 + stim.index)

    kinds = await bridge(run)()
    tb.log.info("%s: paths %s", stim, kinds)
