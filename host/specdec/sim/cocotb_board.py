"""The emulated board on the RTL: pynq's own classes drive the whole overlay's simulation (a cocotb test module:
the simulator imports it, by name, :data:`specdec.sim.jobs.BOARD_TESTS`).

:func:`specdec.sim.jobs.run_board_sim` runs this module through :func:`specdec.sim.harness.run` on the toplevel
``overlay`` (:mod:`fpga.overlay_top`: every core cell of the board's block design, at the board's parameters).
Inside the cocotb test, :class:`SimPL` is the programmable logic of a :class:`specdec.hw.emuboard.EmulatedBoard`:
each core cell's register window is its AXI-Lite port in the simulation (``cocotbext.axi.AxiLiteMaster``), and
the AXI DMA models move their buffers through the cores' streams (``AxiStreamSource`` / ``AxiStreamSink``). The
decode job (``SPECDEC_JOB``, the one :func:`specdec.app.runner.execute` runs on every backend) then runs in a
thread
(``cocotb.task.bridge``) exactly as on a board: ``pynq.Overlay`` parses the generated hardware description and
binds the drivers by VLNV, the cores' registers go through pynq's ``MMIO``, their streams through
``pynq.lib.dma.DMA`` and ``pynq.allocate`` buffers. Every access advances simulated time.

The result (``SPECDEC_RESULT``) is the job's, with the board, the simulated time and each DMA's transfers. With
``SPECDEC_REPLAY`` naming a recording (:mod:`specdec.hw.recording`) the test replays it on the board's verifier
instead, as a PYNQ-Z2 without the models does (:func:`specdec.sim.jobs.replay_board_sim`); with
``SPECDEC_SELFTEST`` set it runs the board self-test (:mod:`specdec.hw.selftest`,
:func:`specdec.sim.jobs.selftest_board_sim`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import cocotb
from cocotb.task import resume
from cocotb.utils import get_sim_time

from hwcontract import board as bd
from hwcontract.params import SYSTEMS
from hwcontract.regmap import core

from ..app.job import Job
from ..app.runner import execute
from ..hw import recording, selftest
from ..hw.emuboard import EmulatedBoard
from ..hw.overlay import pynq_overlay
from .device import AxilTB, SimDevice, SimSink, SimStream, run_job
from .jobs import BOARD_ENV, JOB_ENV, REPLAY_ENV, SELFTEST_ENV

#: Simulated time an S2MM poll waits for the core's frame (the DMA model checks at every register read).
POLL_US = 0.2
#: The inputs of a core's ports that start a transfer: held low for a core the board's design lacks.
IDLE_INPUTS = ("axil_awvalid", "axil_wvalid", "axil_arvalid", "axil_bready", "axil_rready", "s_axis_tvalid",
               "s_axis_tlast", "m_axis_tready")




class SimPL:
    """The PL of an emulated board as the RTL: toplevel ``overlay``'s ports, named after the cells.

    Build it inside the cocotb test (it starts the clock and the stream coroutines); the board calls
    :meth:`configure` (power-on, a download: the overlay's reset) from the driver's bridge thread. The toplevel's
    cores that the board's design lacks get their inputs held idle (:data:`IDLE_INPUTS`): nothing reaches them.
    """

    def __init__(self, dut, design: bd.Board) -> None:
        self.dut, self.design = dut, design
        cells = {c.name for c in design.cells}
        for name in SYSTEMS["overlay"]:
            if name not in cells:
                for port in IDLE_INPUTS:
                    if hasattr(dut, f"{name}_{port}"):
                        getattr(dut, f"{name}_{port}").value = 0
        self.tbs = {c.name: AxilTB(dut, core(c.name), prefix=f"{c.name}_axil", clock=i == 0)
                    for i, c in enumerate(design.cells)}
        self.ports = {name: SimDevice(tb.axil) for name, tb in self.tbs.items()}
        self.streams = {m.core: SimStream(dut, f"{m.core}_{m.mm2s}") for m in design.dmas if m.mm2s}
        self.sinks = {m.core: SimSink(dut, f"{m.core}_{m.s2mm}", timeout_us=POLL_US) for m in design.dmas if m.s2mm}
        self.resets = 0
        self._reset = resume(next(iter(self.tbs.values())).reset)

    def configure(self, design: bd.Board) -> None:
        if design != self.design:
            raise ValueError(f"the simulation is the overlay of {self.design.name}, not of {design.name}")
        for s in self.sinks.values():
            s.sink.clear()
        self._reset()
        self.resets += 1

    def port(self, cell: str) -> SimDevice:
        return self.ports[cell]

    def stream(self, cell: str) -> SimStream:
        return self.streams[cell]

    def sink(self, cell: str) -> SimSink:
        return self.sinks[cell]


@cocotb.test()
async def decode_on_board(dut):
    """Run the job file's prompts through pynq's classes on the emulated board whose PL is this RTL."""
    replaying, selftesting = os.environ.get(REPLAY_ENV), os.environ.get(SELFTEST_ENV)
    job = None if replaying or selftesting else Job.from_json(Path(os.environ[JOB_ENV]).read_text())
    design = bd.design(os.environ[BOARD_ENV])
    pl = SimPL(dut, design)

    def run() -> dict:
        t0, ns0 = time.perf_counter(), get_sim_time("ns")
        board = EmulatedBoard(design.name, pl=pl)
        ol = pynq_overlay(device=board)
        if selftesting:             # before any driver is bound: the self-test reads the IDs first
            res = {"selftest": selftest.run(ol).to_dict()}
        elif replaying:
            res = {"replay": recording.replay(recording.load(replaying), ol.cores().verifier)}
        else:
            c = ol.cores()
            fabric = ol.fabric() if job.draft_engine == "fabric" else None
            res = execute(job, c.verifier if job.speculative else None, masker=c.masker, kv=c.kv, fabric=fabric)
        res["board"] = {"name": design.name, "resets": pl.resets, "sim_ns": get_sim_time("ns") - ns0,
                        "wall_s": time.perf_counter() - t0,
                        "dmas": {cell: {"transfers": d.transfers, "bytes": d.bytes} for cell, d in board.dmas.items()},
                        "drivers": {n: type(getattr(ol, n)).__name__
                                    for n in [*(c.name for c in design.cells), *(m.cell for m in design.dmas)]}}
        return res

    await run_job(dut, run, f"pynq:emulated-{design.name}:{cocotb.SIM_NAME}")
