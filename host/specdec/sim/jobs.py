"""Jobs run in the RTL simulation: a decode job on the ``system`` toplevel (backend ``sim``), a job, a recording's
replay or the self-test on an emulated board whose PL is the RTL, and the cores' benchmarks.

Each launches one cocotb test module through :func:`specdec.sim.harness.run` and reads back the JSON result it
writes. The modules run inside the simulator, named here by their module paths (cocotb imports them there; nothing
here imports them, so this module needs no cocotb):

* :data:`DECODE_TESTS` (:mod:`specdec.sim.cocotb_decode`): a job's prompts through
  :func:`specdec.app.runner.execute` with the RTL's verifier, treemask core, kvpage core and draft engine;
* :data:`BOARD_TESTS` (:mod:`specdec.sim.cocotb_board`): pynq's own classes on an emulated board whose PL is the
  simulation of its whole overlay;
* :data:`BENCH_TESTS` (:mod:`specdec.sim.cocotb_bench`): each core's benchmark through its driver.

The settings travel in the environment (:data:`JOB_ENV`, :data:`BOARD_ENV`, ...), which the test modules read.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from hwcontract import board as bd
from hwcontract.params import ROWS_PLUSARG, system_params

from ..app.job import Job, as_job
from ..app.checks import check_job, check_kv_fits
from ..errors import raise_record
from ..hw.builds import CORE_PARAMS, DRAFTENGINE_PARAMS, KV_PARAMS, TREEMASK_PARAMS
from ..hw.recording import load
from ..kv.layout import KVCapacityError
from ..models.loading import ModelError
from . import harness

#: The cocotb test module of a decode job on the ``system`` toplevel (backend ``sim``).
DECODE_TESTS = "specdec.sim.cocotb_decode"
#: The cocotb test module of the emulated board whose PL is the ``overlay`` toplevel.
BOARD_TESTS = "specdec.sim.cocotb_board"
#: The cocotb test module of the cores' benchmarks (``specdec bench``).
BENCH_TESTS = "specdec.sim.cocotb_bench"

#: Environment: the job file (:meth:`specdec.app.job.Job.to_json`) a decode or board test runs.
JOB_ENV = "SPECDEC_JOB"
#: Environment: the board whose overlay the simulation is.
BOARD_ENV = "SPECDEC_BOARD"
#: Environment: a recording (:mod:`specdec.hw.recording`) to replay on the board's verifier instead of running a
#: job.
REPLAY_ENV = "SPECDEC_REPLAY"
#: Environment: set to run the board self-test instead of a job.
SELFTEST_ENV = "SPECDEC_SELFTEST"
#: Environment: where a benchmark writes its figures (JSON); each setting ``name`` travels as ``BENCH_<NAME>``.
BENCH_OUT_ENV = "BENCH_OUT"


def overlay_params(design: bd.Board) -> dict[str, int]:
    """The ``overlay`` toplevel's parameters for ``design``: every cell's build parameters, named as the toplevel
    names them (``hwcontract.params.system_params``: the treeattn core's with ``TA_``)."""
    return system_params("overlay", design.core_params())


def run_sim(job: Job | Mapping[str, Any], sim: str = "verilator", waves: str | os.PathLike | None = None) -> dict:
    """Run ``job`` inside the RTL simulation (backend ``sim``) and return its result: the toplevel holding the
    verifier, the treemask core, the kvpage core and the draft engine (``fpga.system``; a chain job leaves the
    treemask core idle, a job without a fabric draft the engine). With ``waves``, every signal of that
    toplevel over the whole run is dumped into the FST file ``waves`` (from the toplevel's waves build); the
    result names it under ``waves``."""
    job = as_job(job)
    job.check_backend("sim")
    if job.kv_block is not None:        # refused before the simulation builds and the models load
        check_kv_fits(job.target, job.draft, KV_PARAMS["PAGES"], KV_PARAMS["MAX_BLOCKS"], job.kv_block,
                      job.draft_engine)
    params = {**CORE_PARAMS, **TREEMASK_PARAMS, **KV_PARAMS, **DRAFTENGINE_PARAMS}
    res = _simulate(job, "system", DECODE_TESTS, sim, params, waves=waves, feed=True)
    if waves is not None:
        res["waves"] = str(Path(waves).resolve())
    return res


def run_board_sim(job: Job | Mapping[str, Any], board: str = "kv260", sim: str = "verilator") -> dict:
    """Run ``job`` on the emulated ``board`` whose PL is the RTL (:data:`BOARD_TESTS`): pynq's ``Overlay``, MMIO,
    ``allocate`` and ``lib.dma.DMA`` drive the simulation of the board's whole overlay (toplevel ``overlay`` at the
    board's parameters), as :func:`specdec.app.runner.run` with backend ``pynq`` drives a board."""
    job = as_job(job)
    return _simulate(job, "overlay", BOARD_TESTS, sim, overlay_params(bd.design(board)), {BOARD_ENV: board})


def replay_board_sim(path: str | os.PathLike, board: str = "pynq-z2", sim: str = "verilator") -> dict:
    """Replay the recording at ``path`` (:mod:`specdec.hw.recording`) on the verifier of the emulated ``board``
    whose PL is the RTL (as :func:`run_board_sim`); returns :func:`specdec.hw.recording.replay`'s report under
    ``replay``, with the board's figures."""
    load(path)      # before the build: a missing or damaged file is named here, not inside the simulation
    job = as_job({"prompts": ["(replay)"]})          # the harness carries a job file; the replay ignores it
    return _simulate(job, "overlay", BOARD_TESTS, sim, overlay_params(bd.design(board)),
                     {BOARD_ENV: board, REPLAY_ENV: str(Path(path).resolve())})


def selftest_board_sim(board: str = "pynq-z2", sim: str = "verilator") -> dict:
    """The board self-test (:func:`specdec.hw.selftest.run`) on the emulated ``board`` whose PL is the RTL (as
    :func:`run_board_sim`); returns its report (:meth:`specdec.hw.selftest.Report.to_dict`) under ``selftest``,
    with the board's figures."""
    job = as_job({"prompts": ["(selftest)"]})        # the harness carries a job file; the self-test ignores it
    return _simulate(job, "overlay", BOARD_TESTS, sim, overlay_params(bd.design(board)),
                     {BOARD_ENV: board, SELFTEST_ENV: "1"})


def _simulate(job: Job, top: str, module: str, sim: str, params: dict, env: dict | None = None,
              waves: str | os.PathLike | None = None, feed: bool = False) -> dict:
    """Run cocotb test module ``module`` on toplevel ``top`` built at ``params`` with ``job``; its result (the
    run's waves into the file ``waves`` when given). ``feed``: the toplevel has the verifier's row feeder
    (``fpga.system.row_feed``), whose rows file is named by ``$SPECDEC_ROWS`` and the plusarg."""
    check_job(job)      # before the build: the models load inside the simulation
    with tempfile.TemporaryDirectory() as tmp:
        job_file, out_file, rows = Path(tmp) / "job.json", Path(tmp) / "result.json", Path(tmp) / "rows.hex"
        job_file.write_text(job.to_json())
        env = {**(env or {}), **({harness.FEED_ENV: str(rows)} if feed else {})}
        harness.run(top, module, sim, params=params, waves=False if waves is None else waves,
                    plusargs=[f"+{ROWS_PLUSARG}={rows}"] if feed else [],
                    extra_env={JOB_ENV: str(job_file), harness.RESULT_ENV: str(out_file),
                               "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
                               "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                               # cocotbext-axi's cocotb-2 deprecation notices, once per access otherwise
                               "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "ignore::DeprecationWarning"),
                               **env},
                    quiet=True, progress="generating")     # tool output to build/logs; progress bars only
        if not out_file.is_file():
            raise RuntimeError(f"the {sim} simulation ended without a result; see its log in {harness.LOGS}")
        result = json.loads(out_file.read_text())
    if "error" in result:       # a bad input the run found inside the simulation: raised here as itself
        raise_record(result["error"], (ModelError, KVCapacityError))
    return result


def bench_environment(out: Path, **settings) -> dict[str, str]:
    """The simulation's environment for a benchmark writing to ``out`` with ``settings`` (name=value)."""
    return {BENCH_OUT_ENV: str(out), **{f"BENCH_{k.upper()}": str(v) for k, v in settings.items()}}


def bench_setting(name: str, default: str | None = None) -> str:
    """A benchmark setting inside the simulation (see :func:`bench_environment`)."""
    value = os.environ.get(f"BENCH_{name.upper()}", default)
    if value is None:
        raise KeyError(f"BENCH_{name.upper()} is not set: run the benchmarks through `specdec bench`")
    return value


def run_bench(core: str, test: str, sim: str, params: dict, **settings) -> dict:
    """Run the benchmark ``test`` of :data:`BENCH_TESTS` on a ``core`` build with ``params`` (quietly: the tools'
    output goes to build/logs) and return the figures it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        harness.run(core, BENCH_TESTS, sim, params=params, testcase=test,
                    extra_env=bench_environment(out, **settings), quiet=True)
        return json.loads(out.read_text())
