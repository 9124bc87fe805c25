"""A job run in this process: the cores of a backend, a job's prompts through the decode loop on them, and a job's
verifier rounds recorded.

Backends (the decode loop does not know which it has):

* ``ref``  the golden register models (``hls_ref`` behind the same drivers, :mod:`specdec.hw.cores`), in this
  process;
* ``pynq`` a board: :class:`specdec.hw.overlay.SpecdecOverlay` (pynq ``Overlay``, the drivers bound by VLNV, rows
  and results DMA'd through ``pynq.allocate`` buffers), the draft engine included, in this process. With
  ``SPECDEC_EMULATE`` set to a board name (``kv260``, ``pynq-z2``) the same classes run on the emulated board
  (:class:`specdec.hw.emuboard.EmulatedBoard`: pynq's Overlay, DMA and buffers over the golden register models),
  e.g. ``SPECDEC_EMULATE=kv260 specdec generate --backend pynq``;
* ``sim``  the RTL under Verilator through cocotb: the whole job runs inside the simulator's Python, the drivers
  in a thread as on a board (:mod:`specdec.sim.jobs`, which runs this module's :func:`execute` there).

A job (:class:`specdec.app.job.Job`) is plain data, so the same :func:`execute` runs in this process or in the
simulator. The model pairs and drafters are :mod:`specdec.app.pairs`, the core builds :mod:`specdec.hw.builds`,
the records and summaries :mod:`specdec.decoding.metrics`.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import numpy as np

from ..decoding import metrics
from ..decoding.loop import generate
from ..decoding.base import Drafter, Generation
from ..hw.cores import Cores, Fabric, golden_fabric, golden_kvpage, golden_masker, golden_verifier
from ..hw.drivers import KVPage, TreeMask, Verifier
from ..hw.overlay import pynq_cores, pynq_overlay
from ..hw.recording import Recording, RecordingVerifier
from ..decoding.eagle import EagleDraft
from ..models import int8eagle
from ..models.int8draft import bind
from ..models.lm import CausalLM
from .job import Job, as_job
from .calibrate import calibrated
from .checks import check_job
from .pairs import Pair, check_serves, drafter, encode, open_job_pair, paged_pair

#: Every backend a job runs on: ``ref`` and ``pynq`` in this process (:func:`run`), ``sim`` in the simulation
#: (:func:`specdec.sim.jobs.run_sim`).
BACKENDS = ("ref", "sim", "pynq")
#: The backends whose cores run in this process.
HERE = ("ref", "pynq")


def cores(backend: str) -> Cores:
    """The cores of backend ``ref`` (golden models) or ``pynq`` (a board); ``sim`` runs jobs inside the
    simulation instead (:func:`specdec.sim.jobs.run_sim`)."""
    if backend == "ref":
        return Cores(golden_verifier(), golden_masker(), golden_kvpage())
    if backend == "pynq":
        return pynq_cores()
    raise ValueError(f"backend {backend!r}: cores in this process come from 'ref' or 'pynq'")


def open_backend(job: Job, backend: str, pair: Pair | None = None) -> tuple[Cores, Fabric | None]:
    """The cores ``job`` runs on at ``backend`` (``ref`` or ``pynq``), and the fabric of a fabric-draft job on a
    board (its engine, vector unit and tree-attention unit; None elsewhere: :func:`execute` takes the golden
    engine). On ``pynq`` one overlay, one download: its cores and its fabric; without a ``pair`` given, a model or draft option this machine cannot take is refused
    before the download (:func:`specdec.app.checks.check_job`)."""
    if backend not in HERE:
        raise ValueError(f"backend {backend!r} not in {HERE} (a sim job runs in the simulation: "
                         f"specdec.sim.jobs.run_sim)")
    job.check_backend(backend)
    if backend == "ref":
        return cores("ref"), None
    if pair is None:
        check_job(job)
    ol = pynq_overlay()
    return ol.cores(), ol.fabric() if job.draft_engine == "fabric" else None


def job_pair(job: Job, kv: KVPage | None, pair: Pair | None = None) -> Pair:
    """The pair ``job`` runs with: ``pair`` (refused where it contradicts the job's draft options,
    :func:`specdec.app.pairs.check_serves`) or the job's own, loaded here; both models' caches in page pools of the
    kvpage core ``kv`` unless ``kv`` is None or the job keeps dense caches. A page size the target cannot take is
    refused before the models load."""
    if pair is not None:
        check_serves(pair, job)
    pair = pair or open_job_pair(job, kv)
    if kv is not None and job.kv_block is not None:
        pair = paged_pair(pair, kv, job.kv_block)
    return pair


def seed_words(seed: int, index: int) -> tuple[int, ...]:
    """The verifier RNG seed for prompt ``index`` of a job seeded with ``seed`` (never all zero)."""
    return tuple(int(w) for w in np.random.default_rng([seed, index]).integers(1, 1 << 32, 4))


def execute(job: Job | Mapping[str, Any], verifier: Verifier | None, pair: Pair | None = None,
            progress: Callable[[int, int], None] | None = None, masker: TreeMask | None = None,
            kv: KVPage | None = None, fabric: Fabric | None = None) -> dict:
    """Run every prompt of ``job`` (a :class:`~specdec.app.job.Job` or its JSON object) through
    :func:`specdec.decoding.loop.generate`.

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
    fabric : Fabric, optional
        A fabric-draft job (``draft_engine="fabric"``): the draft engine its draft's linear layers run on
        (loaded here, :func:`specdec.models.int8draft.bind`, or :func:`specdec.models.int8eagle.bind` for an
        EAGLE head, whose glue and attention run on the fabric's vector and tree-attention units where it has
        them, its KV cache in ``kv``'s pages beside the target's); default the golden engine alone
        (:func:`specdec.hw.cores.golden_fabric`).

    Returns
    -------
    dict
        ``generations`` (:func:`specdec.decoding.metrics.record` per prompt), ``summary``
        (:func:`specdec.decoding.metrics.summarize`), ``tree`` (the tree spec used), ``kv`` (the kvpage core's
        report) and ``draft_engine`` (the engine's jobs and cycles) when they apply.
    """
    job = as_job(job)
    pair = job_pair(job, kv, pair)
    engine_report = None
    if job.draft_engine == "fabric":
        fabric = fabric or golden_fabric()
        engine = fabric.engine
        if isinstance(pair.draft, EagleDraft):
            paged = kv is not None and job.kv_block is not None
            engine_report = int8eagle.bind(pair.draft.head, engine, vector=fabric.vector,
                                           attention=fabric.attention, kv=kv if paged else None,
                                           block=pair.target.block, allocate=fabric.allocate)
        else:
            engine_report = bind(pair.draft.lm.model, engine)
    tree = calibrated(pair, job.tree)
    source = drafter(pair, tree, job.draft_confidence)
    gens, records = [], []
    for i, text in enumerate(job.prompts):
        ids = encode(pair.tokenizer, text)
        gen = generate_one(job, i, ids, pair.target, source, verifier, masker)
        gens.append(gen)
        records.append(metrics.record(text, ids, gen, pair.tokenizer.decode(gen.tokens)))
        if progress is not None:
            progress(i + 1, len(job.prompts))
    res = {"generations": records, "summary": metrics.summarize(gens)}
    if tree is not None:
        res["tree"] = tree.to_dict()
    if kv is not None and job.kv_block is not None:
        res["kv"] = metrics.kv_report(kv, pair.target.block)
    if engine_report is not None:
        res["draft_engine"] = {**engine_report, "jobs": engine.jobs, "busy_cycles": engine.busy_cycles}
    return res


def generate_one(job: Job, index: int, ids: list[int], target: CausalLM, source: Drafter,
                 verifier: Verifier | None, masker: TreeMask | None = None) -> Generation:
    """Prompt ``index`` of ``job`` (token ``ids``): the verifier's RNG seeded from (seed, index), the loop's
    sampler from seed + index."""
    if verifier is not None and job.speculative:
        verifier.seed(seed_words(job.seed, index))
    return generate(target, source, verifier, ids, job.config(index), masker)


def run(job: Job | Mapping[str, Any], backend: str = "ref", pair: Pair | None = None,
        progress: Callable[[int, int], None] | None = None) -> dict:
    """Run ``job`` on ``backend`` (``ref`` or ``pynq``, :func:`open_backend`); see :func:`execute`."""
    job = as_job(job)
    c, fabric = open_backend(job, backend, pair)
    return execute(job, c.verifier, pair, progress, c.masker, c.kv, fabric)


def record(job: Job | Mapping[str, Any], backend: str = "ref", pair: Pair | None = None) -> tuple[Recording, dict]:
    """Run ``job`` (:func:`execute`) on ``backend`` (``ref`` or ``pynq``) with its verifier recorded
    (:class:`specdec.hw.recording.RecordingVerifier`); returns the recording (its ``info``: the job and the texts
    generated) and the job's result."""
    job = as_job(job)
    if backend not in HERE:
        raise ValueError(f"backend {backend!r}: a recording runs on ref or pynq (the sim backend's verifier runs "
                         f"inside the simulation)")
    c, fabric = open_backend(job, backend, pair)
    rv = RecordingVerifier(c.verifier)
    res = execute(job, rv, pair, masker=c.masker, kv=c.kv, fabric=fabric)
    rv.recording.info = {"job": json.loads(job.to_json()), "backend": backend,
                         "texts": [g["text"] for g in res["generations"]],
                         "tokens": [g["tokens"] for g in res["generations"]]}
    return rv.recording, res
