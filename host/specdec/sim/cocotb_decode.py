"""A whole decode job (models, loop, drivers) with the RTL as the cores (a cocotb test module: the simulator
imports it, by name, :data:`specdec.sim.jobs.DECODE_TESTS`).

``specdec generate --backend sim`` and :func:`specdec.sim.jobs.run_sim` run this module through
:func:`specdec.sim.harness.run`: the job (JSON, ``SPECDEC_JOB``) is the same one :func:`specdec.app.runner.execute`
runs on the golden model; the result goes to ``SPECDEC_RESULT``. The driver runs unchanged in a thread
(``cocotb.task.bridge``); every register access and row advances simulated time.

The toplevel is ``system`` (``fpga.system``): the verifier on ``ver_axil``, its rows through the row feeder
(:class:`specdec.sim.device.FeedStream`), the treemask core on ``tm_axil`` / ``m_axis`` and the kvpage core on
``kv_axil``; a job with a token tree drives the first two from the same thread, and every job's KV caches take their
pages from the kvpage core (unless the job says ``"kv": false``). A job with a fabric draft
(``draft_engine="fabric"``) runs the draft's linear layers on the draft engine (``de_axil``, ``de_s_axis``,
``de_m_axis``), its weights loaded once; other jobs leave it idle.

The job reports the tokens it has generated through :func:`specdec.sim.harness.report_progress`
(each verifier round, each prompt), which a quiet run draws as a progress bar; everything else it prints
goes to the simulation's log.
"""
from __future__ import annotations

import os
from pathlib import Path

import cocotb

from hwcontract.regmap import core

from ..app.job import Job
from ..app.runner import execute
from ..hw.cores import Fabric
from ..hw.drivers import DraftEngine, KVPage, TreeMask, Verifier
from ..hw.drivers.base import description
from .device import AxilTB, FeedStream, SimDevice, SimSink, SimStream, run_job
from .harness import report_progress
from .jobs import JOB_ENV


class TokenProgress:
    """Tokens generated so far out of ``prompts * max_new_tokens``, reported as they come.

    A prompt that stops early (end of text) counts as whole once it is done.
    """

    def __init__(self, prompts: int, max_new_tokens: int) -> None:
        self.max_new, self.total = max_new_tokens, prompts * max_new_tokens
        self.done = self.current = 0

    def _report(self, desc: str) -> None:
        report_progress(self.done + self.current, self.total, "tok", desc)

    def start(self) -> None:
        """Before the models load."""
        self._report("loading models")

    def round(self, tokens: int) -> None:
        """A round emitted ``tokens`` tokens."""
        self.current = min(self.current + tokens, self.max_new)
        self._report("generating")

    def prompt(self, finished: int, prompts: int) -> None:
        """``finished`` of ``prompts`` prompts are done (:func:`specdec.app.runner.execute`'s progress callback)."""
        self.done, self.current = finished * self.max_new, 0
        self._report("generating")


class ReportingVerifier(Verifier):
    """The verifier driver, calling ``on_round`` with the number of tokens each round emits."""

    def __init__(self, description: dict, stream, on_round) -> None:
        super().__init__(description, stream)
        self.on_round = on_round

    def verify(self, *args, **kwargs):
        res = super().verify(*args, **kwargs)
        self.on_round(len(res.tokens))
        return res

    def verify_tree(self, *args, **kwargs):
        res = super().verify_tree(*args, **kwargs)
        self.on_round(len(res.tokens))
        return res


@cocotb.test()
async def decode_job(dut):
    """Run the job file's prompts through the decode loop with this RTL verifier."""
    job = Job.from_json(Path(os.environ[JOB_ENV]).read_text())
    tree = job.tree is not None
    tb = AxilTB(dut, core("verifier"), prefix="ver_axil")
    stream = FeedStream(dut)        # the rows through the toplevel's row feeder, a file write a row
    tm = AxilTB(dut, core("treemask"), prefix="tm_axil", clock=False)
    sink = SimSink(dut, "m_axis")
    kv_tb = AxilTB(dut, core("kvpage"), prefix="kv_axil", clock=False)
    fabric = job.draft_engine == "fabric"       # the draft engine on de_*
    if fabric:
        de_tb = AxilTB(dut, core("draftengine"), prefix="de_axil", clock=False)
        de_stream, de_sink = SimStream(dut, "de_s_axis"), SimSink(dut, "de_m_axis", timeout_us=100_000.0)
    await tb.reset()
    progress = TokenProgress(len(job.prompts), job.max_new_tokens)
    progress.start()

    def run() -> dict:
        drv = ReportingVerifier(description("verifier", SimDevice(tb.axil)), stream, progress.round)
        masker = TreeMask(description("treemask", SimDevice(tm.axil)), sink) if tree else None
        kv = KVPage(description("kvpage", SimDevice(kv_tb.axil)))
        engine = DraftEngine(description("draftengine", SimDevice(de_tb.axil)), de_stream, de_sink) \
            if fabric else None
        return execute(job, drv if job.speculative else None, progress=progress.prompt,
                       masker=masker, kv=kv, fabric=Fabric(engine) if engine is not None else None)

    await run_job(dut, run, f"sim:{cocotb.SIM_NAME}")
