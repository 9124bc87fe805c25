"""Backends and jobs: the cores on a backend, and a job's prompts run through the decode loop.

Backends (the decode loop does not know which it has):

* ``ref``  the golden register models (``hls_ref`` behind the same drivers), in this process;
* ``sim``  the RTL under Verilator through cocotb: the whole job runs inside the simulator's Python
  (``specdec/backends/sim_decode.py``), the drivers in a thread as on a board;
* ``pynq`` a board: :class:`specdec.overlay.SpecdecOverlay` (pynq ``Overlay``, the drivers bound by VLNV, rows
  and results DMA'd through ``pynq.allocate`` buffers), the draft engine included. With ``SPECDEC_EMULATE`` set
  to a board name (``kv260``, ``pynq-z2``) the same classes run on the emulated board
  (:class:`specdec.emuboard.EmulatedBoard`: pynq's Overlay, DMA and buffers over the golden register models),
  e.g. ``SPECDEC_EMULATE=kv260 specdec generate --backend pynq``.

A job (:class:`specdec.job.Job`) is plain data, so the same :func:`execute` runs in this process or in the
simulator. The model pairs and drafters are in :mod:`specdec.pairs`, the core builds in :mod:`specdec.builds`,
the records and summaries in :mod:`specdec.metrics`.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from hwcontract import params as hwparams

from . import models, paths
from .builds import CORE_PARAMS, KV_PARAMS, TREEMASK_PARAMS
from .decode import Drafter, Generation, generate
from .errors import raise_record
from .job import Job, as_job
from .kvlayout import KVCapacityError
from .metrics import kv_report, record, summarize
from .pairs import (Pair, calibrated, check_job, check_kv_fits, check_serves, drafter, encode, open_job_pair,
                    paged_pair)

if TYPE_CHECKING:
    from .drivers import DraftEngine, KVPage, TreeMask, Verifier
    from .overlay import SpecdecOverlay

BACKENDS = ("ref", "sim", "pynq")
#: Set to a board name to run ``--backend pynq`` on that board emulated (:mod:`specdec.emuboard`) instead of
#: on the board this process runs on.
EMULATE_ENV = paths.EMULATE_ENV


@dataclass(frozen=True)
class Cores:
    """The drivers of one backend's cores (None for a core the backend lacks)."""

    verifier: Verifier | None = None
    masker: TreeMask | None = None
    kv: KVPage | None = None


def cores(backend: str) -> Cores:
    """The cores of backend ``ref`` (golden models) or ``pynq`` (a board); ``sim`` runs jobs inside the
    simulation instead (:func:`run_sim`)."""
    if backend == "ref":
        return Cores(golden_verifier(), golden_masker(), golden_kvpage())
    if backend == "pynq":
        return pynq_cores()
    raise ValueError(f"backend {backend!r}: cores in this process come from 'ref' or 'pynq'")


def _golden_params(core: str, build: Mapping[str, int], params: Mapping[str, Any] | None) -> dict[str, int]:
    """``build``'s parameters overridden by ``params``, checked by the contract (``hwcontract.params``), as the
    golden model's keywords. An unknown name raises KeyError listing the valid ones: it had been ignored, so
    ``golden_verifier({"lanes": 8})`` built the default LANES 4, and ``golden_kvpage({"SLOTS": 16})`` 64 slots."""
    return {k.lower(): v for k, v in hwparams.check(core, {**build, **(params or {})}).items()}


def golden_verifier(params: dict | None = None) -> Verifier:
    """The verifier driver over the golden register model (backend ``ref``); ``params`` override the project's
    build (``hwcontract.params`` names: ``{"LANES": 8}``)."""
    from .backends.golden import GoldenDevice
    from .drivers import Verifier
    from .drivers.base import description
    dev = GoldenDevice({0: "verifier"}, {0: _golden_params("verifier", CORE_PARAMS, params)})
    return Verifier(description("verifier", dev), dev.stream(0))


def golden_draftengine(params: dict | None = None):
    """The draft engine driver over the golden register model (backend ``ref``), at the build that holds the
    whole demo draft (``specdec.builds.DRAFTENGINE_PARAMS``)."""
    from .backends.golden import GoldenDevice
    from .builds import DRAFTENGINE_PARAMS
    from .drivers import DraftEngine
    from .drivers.base import description
    dev = GoldenDevice({0: "draftengine"}, {0: _golden_params("draftengine", DRAFTENGINE_PARAMS, params)})
    return DraftEngine(description("draftengine", dev), dev.stream(0), dev.sink(0))


def golden_masker(params: dict | None = None) -> TreeMask:
    """The treemask driver over the golden register model (backend ``ref``)."""
    from .backends.golden import GoldenDevice
    from .drivers import TreeMask
    from .drivers.base import description
    dev = GoldenDevice({0: "treemask"}, {0: _golden_params("treemask", TREEMASK_PARAMS, params)})
    return TreeMask(description("treemask", dev), dev.sink(0))


def golden_kvpage(params: dict | None = None) -> KVPage:
    """The kvpage driver over the golden register model (backend ``ref``)."""
    from .backends.golden import GoldenDevice
    from .drivers import KVPage
    from .drivers.base import description
    dev = GoldenDevice({0: "kvpage"}, {0: _golden_params("kvpage", KV_PARAMS, params)})
    return KVPage(description("kvpage", dev))


def pynq_board_here() -> bool:
    """Whether pynq finds a device on this machine (a PYNQ board's PL); off a board pynq's warning is muted."""
    try:
        from pynq import Device
    except ImportError:
        return False
    with warnings.catch_warnings():          # off a board pynq warns that it found no device
        warnings.simplefilter("ignore")
        try:
            return bool(Device.devices)
        except Exception:                    # noqa: BLE001  (a broken XRT install is no board either)
            return False


def pynq_overlay(bitstream: str | os.PathLike | None = None, device=None) -> SpecdecOverlay:
    """The specdec overlay on a board (backend ``pynq``), loaded.

    ``device``: the pynq device to load it on (an :class:`~specdec.emuboard.EmulatedBoard`, or None: the board
    ``SPECDEC_EMULATE`` names, emulated, when it is set; else pynq's device, the board this runs on).
    ``bitstream``: default the emulated board's own, else :func:`specdec.paths.bitstream`'s (``SPECDEC_BITSTREAM``,
    or the overlay shipped with the package for the board this machine reports).
    """
    from .overlay import SpecdecOverlay
    if device is None and os.environ.get(EMULATE_ENV):
        from hwcontract.board import BOARDS
        from .emuboard import EmulatedBoard
        name = os.environ[EMULATE_ENV]
        if name not in BOARDS:
            raise ValueError(f"{EMULATE_ENV}={name!r} is not a board; boards: {', '.join(BOARDS)}")
        device = EmulatedBoard(name)
    given = bitstream or getattr(device, "bitfile", None)
    try:
        path = Path(given) if given else paths.bitstream()
    except paths.OverlayNotFound as err:
        raise paths.OverlayNotFound(f"backend pynq: {err}; or use --backend ref or --backend sim") from None
    if not path.is_file():
        raise paths.OverlayNotFound(f"backend pynq: no bitstream at {path}; off a board use --backend ref or "
                                    f"--backend sim, or the emulated board: {EMULATE_ENV}=kv260")
    if device is None and not pynq_board_here():
        raise RuntimeError(f"backend pynq: pynq finds no board on this machine to load {path} on (pynq: \"No "
                           f"Devices Found\"); off a board use --backend ref or --backend sim, or the emulated "
                           f"board: {EMULATE_ENV}=kv260")
    return SpecdecOverlay(path, device=device)


def pynq_cores(bitstream: str | os.PathLike | None = None, device=None) -> Cores:
    """The verifier, the treemask core and the kvpage core on a board (backend ``pynq``, see
    :func:`pynq_overlay`), the first two with their DMA channels; None for a core the overlay lacks."""
    return pynq_overlay(bitstream, device).cores()


def pynq_draftengine(bitstream: str | os.PathLike | None = None, device=None) -> DraftEngine:
    """The draft engine on a board (backend ``pynq``, see :func:`pynq_overlay`) with its DMA stream and sink."""
    return pynq_overlay(bitstream, device).draft_engine()


def seed_words(seed: int, index: int) -> tuple[int, ...]:
    """The verifier RNG seed for prompt ``index`` of a job seeded with ``seed`` (never all zero)."""
    return tuple(int(w) for w in np.random.default_rng([seed, index]).integers(1, 1 << 32, 4))


def execute(job: Job | Mapping[str, Any], verifier: Verifier | None, pair: Pair | None = None,
            progress: Callable[[int, int], None] | None = None, masker: TreeMask | None = None,
            kv: KVPage | None = None, engine=None) -> dict:
    """Run every prompt of ``job`` (a :class:`~specdec.job.Job` or its JSON object) through
    :func:`specdec.decode.generate`.

    Parameters
    ----------
    job : Job or mapping
    verifier, masker : drivers on any backend
        The verifier (None: target-only jobs only) and the treemask core (tree jobs only).
    pair : Pair, optional
        The loaded pair (default: the job's ``target`` and ``draft``, loaded here).
    progress : callable, optional
        Called with (prompts done, prompts) after each prompt.
    kv : KVPage, optional
        The kvpage core: both models' KV caches then live in page pools whose pages it assigns (forks per
        round, commits, rollbacks). None, or a job with dense caches, keeps transformers' caches.
    engine : DraftEngine, optional
        A fabric-draft job (``draft_engine="fabric"``): the draft engine its draft's linear layers run on
        (loaded here, :func:`specdec.int8draft.bind`); default the golden register model.

    Returns
    -------
    dict
        ``generations`` (:func:`specdec.metrics.record` per prompt), ``summary``
        (:func:`specdec.metrics.summarize`), ``tree`` (the tree spec used) and ``kv`` (the kvpage core's
        report) when they apply.
    """
    job = as_job(job)
    if pair is not None:
        check_serves(pair, job)
    pair = pair or open_job_pair(job, kv)       # a page size the target cannot take: refused before it loads
    engine_report = None
    if job.draft_engine == "fabric":
        from .int8draft import bind
        engine = engine or golden_draftengine()
        engine_report = bind(pair.draft.lm.model, engine)
    paged = kv is not None and job.kv_block is not None
    if paged:
        pair = paged_pair(pair, kv, job.kv_block)
    tree = calibrated(pair, job.tree)
    source = drafter(pair, tree, job.draft_confidence)
    gens, records = [], []
    for i, text in enumerate(job.prompts):
        ids = encode(pair.tokenizer, text)
        gen = generate_one(job, i, ids, pair.target, source, verifier, masker)
        gens.append(gen)
        records.append(record(text, ids, gen, pair.tokenizer.decode(gen.tokens)))
        if progress is not None:
            progress(i + 1, len(job.prompts))
    res = {"generations": records, "summary": summarize(gens)}
    if tree is not None:
        res["tree"] = tree.to_dict()
    if paged:
        res["kv"] = kv_report(kv, pair.target.block)
    if engine_report is not None:
        res["draft_engine"] = {**engine_report, "jobs": engine.jobs, "busy_cycles": engine.busy_cycles}
    return res


def generate_one(job: Job, index: int, ids: list[int], target: models.CausalLM, source: Drafter,
                 verifier: Verifier | None, masker: TreeMask | None = None) -> Generation:
    """Prompt ``index`` of ``job`` (token ``ids``): the verifier's RNG seeded from (seed, index), the loop's
    sampler from seed + index."""
    if verifier is not None and job.speculative:
        verifier.seed(seed_words(job.seed, index))
    return generate(target, source, verifier, ids, job.config(index), masker)


def run_sim(job: Job | Mapping[str, Any], sim: str = "verilator", waves: str | os.PathLike | None = None) -> dict:
    """Run ``job`` inside the RTL simulation (backend ``sim``) and return its result: the toplevel holding the
    verifier, the treemask core, the kvpage core and the draft engine (``fpga.system``; a chain job leaves the
    treemask core idle, a job without a fabric draft the engine). With ``waves``, every signal of that
    toplevel over the whole run is dumped into the FST file ``waves`` (from the toplevel's waves build); the
    result names it under ``waves``."""
    from .builds import DRAFTENGINE_PARAMS
    job = as_job(job)
    if job.kv_block is not None:        # refused before the simulation builds and the models load
        check_kv_fits(job.target, job.draft, KV_PARAMS["PAGES"], KV_PARAMS["MAX_BLOCKS"], job.kv_block)
    params = {**CORE_PARAMS, **TREEMASK_PARAMS, **KV_PARAMS, **DRAFTENGINE_PARAMS}
    res = _simulate(job, "system", "specdec.backends.sim_decode", sim, params, waves=waves, feed=True)
    if waves is not None:
        res["waves"] = str(Path(waves).resolve())
    return res


def run_board_sim(job: Job | Mapping[str, Any], board: str = "kv260", sim: str = "verilator") -> dict:
    """Run ``job`` on the emulated ``board`` whose PL is the RTL (``specdec.backends.sim_board``): pynq's
    ``Overlay``, MMIO, ``allocate`` and ``lib.dma.DMA`` drive the simulation of the board's whole overlay
    (toplevel ``overlay`` at the board's parameters), as :func:`run` with backend ``pynq`` drives a board."""
    from hwcontract.board import design
    from .backends.sim_board import BOARD_ENV, overlay_params
    job = as_job(job)
    return _simulate(job, "overlay", "specdec.backends.sim_board", sim, overlay_params(design(board)),
                     {BOARD_ENV: board})


def replay_board_sim(path: str | os.PathLike, board: str = "pynq-z2", sim: str = "verilator") -> dict:
    """Replay the recording at ``path`` (:mod:`specdec.recording`) on the verifier of the emulated ``board``
    whose PL is the RTL (as :func:`run_board_sim`); returns :func:`specdec.recording.replay`'s report under
    ``replay``, with the board's figures."""
    from hwcontract.board import design
    from .backends.sim_board import BOARD_ENV, REPLAY_ENV, overlay_params
    from .recording import load
    load(path)      # before the build: a missing or damaged file had failed inside the simulation, naming neither
    job = as_job({"prompts": ["(replay)"]})          # the harness carries a job file; the replay ignores it
    return _simulate(job, "overlay", "specdec.backends.sim_board", sim, overlay_params(design(board)),
                     {BOARD_ENV: board, REPLAY_ENV: str(Path(path).resolve())})


def selftest_board_sim(board: str = "pynq-z2", sim: str = "verilator") -> dict:
    """The board self-test (:func:`specdec.selftest.run`) on the emulated ``board`` whose PL is the RTL (as
    :func:`run_board_sim`); returns its report (:meth:`specdec.selftest.Report.to_dict`) under ``selftest``,
    with the board's figures."""
    from hwcontract.board import design
    from .backends.sim_board import BOARD_ENV, SELFTEST_ENV, overlay_params
    job = as_job({"prompts": ["(selftest)"]})        # the harness carries a job file; the self-test ignores it
    return _simulate(job, "overlay", "specdec.backends.sim_board", sim, overlay_params(design(board)),
                     {BOARD_ENV: board, SELFTEST_ENV: "1"})


def _simulate(job: Job, top: str, module: str, sim: str, params: dict, env: dict | None = None,
              waves: str | os.PathLike | None = None, feed: bool = False) -> dict:
    """Run cocotb test module ``module`` on toplevel ``top`` built at ``params`` with ``job``; its result (the
    run's waves into the file ``waves`` when given). ``feed``: the toplevel has the verifier's row feeder
    (``fpga.system.row_feed``), whose rows file is named by ``$SPECDEC_ROWS`` and the plusarg."""
    from fpga.system import ROWS_PLUSARG
    from specdec.backends import simulator as harness
    check_job(job)      # before the build: the models load inside the simulation
    with tempfile.TemporaryDirectory() as tmp:
        job_file, out_file, rows = Path(tmp) / "job.json", Path(tmp) / "result.json", Path(tmp) / "rows.hex"
        job_file.write_text(job.to_json())
        env = {**(env or {}), **({harness.FEED_ENV: str(rows)} if feed else {})}
        harness.run(top, module, sim, params=params, waves=False if waves is None else waves,
                    plusargs=[f"+{ROWS_PLUSARG}={rows}"] if feed else [],
                    extra_env={"SPECDEC_JOB": str(job_file), harness.RESULT_ENV: str(out_file),
                               "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
                               "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                               # cocotbext-axi's cocotb-2 deprecation notices, once per access otherwise
                               "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "ignore::DeprecationWarning"),
                               **(env or {})},
                    quiet=True, progress="generating")     # tool output to build/logs; progress bars only
        if not out_file.is_file():
            raise RuntimeError(f"the {sim} simulation ended without a result; see its log in {harness.LOGS}")
        result = json.loads(out_file.read_text())
    if "error" in result:       # a bad input the run found inside the simulation: raised here as itself
        raise_record(result["error"], (models.ModelError, KVCapacityError))
    return result


def run(job: Job | Mapping[str, Any], backend: str = "ref", pair: Pair | None = None,
        progress: Callable[[int, int], None] | None = None, waves: str | os.PathLike | None = None) -> dict:
    """Run ``job`` on ``backend`` (``ref``, ``sim`` or ``pynq``); see :func:`execute`. ``waves`` (backend
    ``sim`` only): the FST file the simulation dumps every signal into (:func:`run_sim`)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} not in {BACKENDS}")
    if waves is not None and backend != "sim":
        raise ValueError(f"waves {waves}: only the sim backend has signals to dump, not {backend!r}")
    job = as_job(job)
    job.check_backend(backend)
    if backend == "sim":
        return run_sim(job, waves=waves)
    if backend == "pynq":               # one overlay, one download: its cores and, for a fabric draft, its engine
        if pair is None:    # a model or draft option this machine cannot take: refused before the download
            check_job(job)  # (ref: in open_job_pair; sim: in _simulate)
        ol = pynq_overlay()
        c = ol.cores()
        engine = ol.draft_engine() if job.draft_engine == "fabric" else None
        return execute(job, c.verifier, pair, progress, c.masker, c.kv, engine)
    c = cores(backend)
    return execute(job, c.verifier, pair, progress, c.masker, c.kv)
