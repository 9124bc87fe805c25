"""verifier: a whole decode job (models, loop, driver) with the RTL as the verifier backend.

``specdec generate --backend sim`` and ``specdec.runtime.run_sim`` run this module through
``tb.harness``: the job (JSON, ``SPECDEC_JOB``) is the same one ``specdec.runtime.execute`` runs on the
golden model; the result goes to ``SPECDEC_RESULT``. The driver runs unchanged in a thread
(``cocotb.task.bridge``); every register access and row advances simulated time.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.task import bridge

from specdec import runtime
from specdec.backends.sim import SimDevice, SimStream
from specdec.drivers import Verifier
from specdec.drivers.base import description
from specdec.regmap import core
from tb.common import AxilTB


@cocotb.test()
async def decode_job(dut):
    """Run the job file's prompts through the decode loop with this RTL verifier."""
    job = json.loads(Path(os.environ["SPECDEC_JOB"]).read_text())
    tb = AxilTB(dut, core("verifier"))
    stream = SimStream(dut)
    await tb.reset()

    def run() -> dict:
        drv = Verifier(description("verifier", SimDevice(tb.axil)), stream)
        return runtime.execute(job, drv if job.get("gamma", 4) != 0 else None,
                               progress=lambda i, n: tb.log.info("prompt %d/%d done", i, n))

    result = await bridge(run)()
    result["backend"] = f"sim:{cocotb.SIM_NAME}"
    Path(os.environ["SPECDEC_RESULT"]).write_text(json.dumps(result))
