"""verifier: a whole decode job (models, loop, driver) with the RTL as the verifier backend.

``specdec generate --backend sim`` and ``specdec.runtime.run_sim`` run this module through
``tb.harness``: the job (JSON, ``SPECDEC_JOB``) is the same one ``specdec.runtime.execute`` runs on the
golden model; the result goes to ``SPECDEC_RESULT``. The driver runs unchanged in a thread
(``cocotb.task.bridge``); every register access and row advances simulated time.

The toplevel is ``system`` (``fpga.system``): the verifier on ``ver_axil`` / ``s_axis``, the treemask core
on ``tm_axil`` / ``m_axis`` and the kvpage core on ``kv_axil``; a job with a token tree drives the first two
from the same thread, and every job's KV caches take their pages from the kvpage core (unless the job says
``"kv": false``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.task import bridge

from specdec import runtime
from specdec.backends.sim import AxilTB, SimDevice, SimSink, SimStream
from specdec.drivers import KVPage, TreeMask, Verifier
from specdec.drivers.base import description
from hwcontract.regmap import core


@cocotb.test()
async def decode_job(dut):
    """Run the job file's prompts through the decode loop with this RTL verifier."""
    job = json.loads(Path(os.environ["SPECDEC_JOB"]).read_text())
    tree = bool(job.get("tree"))
    tb = AxilTB(dut, core("verifier"), prefix="ver_axil")
    stream = SimStream(dut)
    tm = AxilTB(dut, core("treemask"), prefix="tm_axil", clock=False)
    sink = SimSink(dut, "m_axis")
    kv_tb = AxilTB(dut, core("kvpage"), prefix="kv_axil", clock=False)
    await tb.reset()

    def run() -> dict:
        drv = Verifier(description("verifier", SimDevice(tb.axil)), stream)
        masker = TreeMask(description("treemask", SimDevice(tm.axil)), sink) if tree else None
        kv = KVPage(description("kvpage", SimDevice(kv_tb.axil)))
        return runtime.execute(job, drv if job.get("gamma", 4) != 0 or tree else None,
                               progress=lambda i, n: tb.log.info("prompt %d/%d done", i, n), masker=masker,
                               kv=kv)

    result = await bridge(run)()
    result["backend"] = f"sim:{cocotb.SIM_NAME}"
    Path(os.environ["SPECDEC_RESULT"]).write_text(json.dumps(result))
