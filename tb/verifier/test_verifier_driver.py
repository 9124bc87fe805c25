"""verifier: the pynq driver over the RTL simulation (the same checks as on the golden model).

``tests/test_verifier_driver.py::test_driver_on_rtl`` (pytest) builds the core and runs this module.
"""
from __future__ import annotations

import cocotb
from cocotb.task import bridge

from specdec.backends.sim import SimDevice, SimStream
from specdec.drivers import Verifier
from specdec.drivers.base import description
from hwcontract.regmap import core
from tb.common import AxilTB
from tb.verifier.driver_checks import check_verifier_driver


@cocotb.test()
async def pynq_driver(dut):
    """The unmodified driver, running in a thread, against the RTL."""
    tb = AxilTB(dut, core("verifier"))
    stream = SimStream(dut)
    await tb.reset()

    def run() -> dict:
        return check_verifier_driver(Verifier(description("verifier", SimDevice(tb.axil)), stream))

    kinds = await bridge(run)()
    tb.log.info("paths: %s", kinds)
