"""rng agreement stage: the vectors of ``hls_ref.vectors.rng_set`` through the pynq driver.

:func:`rng_results` is plain synchronous driver code, run on the golden backend by tests/test_agreement.py
and on the RTL by the cocotb test :func:`agree` (in a ``cocotb.task.bridge`` thread), which writes the
results for the test to compare with the golden model.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref.vectors import RngCase, rng_set
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.rng import Rng
from specdec.sim.device import AxilTB, SimDevice
from tb.agree import vector_spec, write_results
from tb.common import Stimulus, cross_test


def rng_results(drv: Rng, cases: list[RngCase]) -> list[dict]:
    """Per case: load the seed, ``steps`` STEPs (OUT after each: ``first``), a burst (``out``, ``xor``,
    ``steps``: the registers OUT, XOR and STEPS after it)."""
    out = []
    for c in cases:
        drv.seed(c.seed)
        first = [int(x) for x in drv.draw(c.steps)]
        out.append({"first": first, **drv.burst(c.burst)})
    return out


@cross_test
async def agree(dut, stim: Stimulus):
    """The rng set of ``AGREE_SEED``/``AGREE_COUNT`` through the driver on the RTL."""
    tb = AxilTB(dut, core("rng"))
    await tb.reset()
    stim.apply(tb)
    seed, count = vector_spec()
    results = await bridge(lambda: rng_results(Rng(description("rng", SimDevice(tb.axil))),
                                               stim.deal(rng_set(seed, count))))()
    write_results(results, stim.index)
