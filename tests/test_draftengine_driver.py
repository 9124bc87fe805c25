"""draftengine driver: the shared checks on the golden backend, placements, and the host-side API."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import draftengine as golden
from hls_ref.vectors import DRAFT_SHAPES, draftengine_job
from hwcontract.formats import de_act_beats, de_param_beats, de_unpack_outputs, de_weight_beats
from specdec.errors import CoreError, CoreTimeout, SpecdecError
from specdec.hw.drivers.base import description
from specdec.hw.drivers.draftengine import DraftEngine
from specdec.hw.golden import GoldenDevice
from tb.draftengine.driver_checks import check_draftengine_driver, check_job

SMALL = dict(rows=4, cols=16, wdepth=256, pdepth=16, k_max=256, m_max=5)


def golden_engine(**params) -> tuple[DraftEngine, GoldenDevice]:
    dev = GoldenDevice({0: "draftengine"}, params={0: params})
    return DraftEngine(description("draftengine", dev), dev.stream(0), dev.sink(0)), dev


@pytest.mark.parametrize("params", [{}, SMALL, dict(SMALL, wdepth=8192, uram=1)], ids=["default", "r4c16", "uram"])
def test_driver_on_golden_model(params):
    drv, _ = golden_engine(**params)
    check_draftengine_driver(drv, count=30, exact_cycles=True)


def test_draft_shapes_on_golden_model():
    """Every demo-draft shape at M = 1 and 16, the hot head included, on a build that holds it."""
    drv, _ = golden_engine(wdepth=24576, pdepth=1024, k_max=4096)
    rnd = np.random.default_rng(2)
    for i, (k, n) in enumerate(DRAFT_SHAPES):
        for m in (1, 16):
            check_job(drv, draftengine_job(rnd, m, k, n, (8, 16, 32)[i % 3]), exact_cycles=True)


def test_placements_serve_many_jobs():
    """Layers placed one after another keep their memory; jobs on each in any order match the golden model."""
    drv, _ = golden_engine()
    rnd = np.random.default_rng(5)
    layers = [draftengine_job(rnd, 1, k, n, 16) for k, n in ((40, 12), (100, 30), (17, 9))]
    places = [drv.place(j.w, j.bias, j.mult, j.shift) for j in layers]
    assert [p.wbase for p in places] == [0, 2 * 5, 2 * 5 + 4 * 13] and [p.pbase for p in places] == [0, 2, 6]
    for i in (2, 0, 1, 0):
        j = layers[i]
        x = rnd.integers(-128, 128, (3, j.x.shape[1]))
        y, sat = drv.matmul(x, places[i], 16)
        ref = golden.run(golden.Job(x, j.w, j.bias, j.mult, j.shift, 16))
        assert np.array_equal(y, ref.y) and sat == ref.saturated
    assert drv.free() == (1024 - (10 + 52 + 2 * 3), 256 - (2 + 4 + 2))
    drv.reset_memory()
    assert drv.free() == (1024, 256)


def test_stream_packing_round_trip():
    """The beat packers follow the map: weight tile bytes, parameter words, activation beats, output lanes."""
    rnd = np.random.default_rng(1)
    w = rnd.integers(-128, 128, (10, 19))
    beats = de_weight_beats(w, 4, 8).view(np.int8)
    assert beats.shape == (3 * 3, 32)
    assert beats[1 * 3 + 2, 1 * 8 + 0] == w[4 + 1, 16]            # tile 1, chunk 2, row 1, column 0
    assert beats[2 * 3 + 2, 2 * 8 + 3] == 0                       # past N and K: zero
    p = de_param_beats([-2, 7], [300, 5], [3, 48], 4, 8)
    word = int.from_bytes(p[0, 8:16].tobytes(), "little")
    assert p.shape == (1, 32) and word == (7 | 5 << 32 | 48 << 48)
    assert int.from_bytes(p[0, :8].tobytes(), "little") & 0xFFFFFFFF == 0xFFFFFFFE
    a = de_act_beats(rnd.integers(-128, 128, (2, 40)), 4, 8)
    assert a.shape == (2 * 2, 32)
    lanes = np.arange(2 * 3 * 4).reshape(3 * 2, 4)                # NT = 3 tiles x M = 2 tokens
    y = de_unpack_outputs(lanes, 2, 10, 4)
    assert y.shape == (2, 10) and y[1, 5] == lanes[1 * 2 + 1, 1] and y[0, 9] == lanes[2 * 2, 1]
    with pytest.raises(ValueError, match="sends 6 beats"):
        de_unpack_outputs(lanes[:5], 2, 10, 4)
    with pytest.raises(ValueError, match="ROWS must be in"):
        de_weight_beats(w, 3, 8)


def test_cycle_model_and_utilisation():
    from hwcontract.latency import DE_CHECK, de_pipe
    assert golden.cycles("LOAD_W", 7) == DE_CHECK + 7
    assert golden.cycles("RUN", 3, 1, 192, 512) == DE_CHECK + 3 + 64 * 24 + de_pipe(8) + 1
    for k, n in DRAFT_SHAPES:          # every demo-draft shape is a multiple of the 8 x 8 array: no padding
        assert golden.mac_utilisation(1, k, n, 8, 8) == 1.0
    assert golden.mac_utilisation(1, 9, 9, 8, 8) == 81 / (2 * 2 * 64)


def test_the_uram_build_pipelines_its_weight_read_and_the_driver_reads_it_from_params():
    """The KV260's build (weights in UltraRAM) reads its weights through the 7-deep cascade's rows plus its one
    column of registers: 8 more cycles a job, which the cycle model adds; the driver learns the build from
    PARAMS.URAM and WDEPTH, as it learns the array's shape."""
    from hwcontract import board
    from hwcontract.latency import de_pipe, de_wpipe
    assert de_wpipe(32768, 1) == 8 + 1 and de_wpipe(36864, 1) == 8 + 2 and de_wpipe(4096, 1) == 2
    assert de_wpipe(32768, 0) == 0 and de_pipe(8, 9) == de_pipe(8) + 9
    assert golden.cycles("RUN", 3, 1, 192, 512, wpipe=9) == golden.cycles("RUN", 3, 1, 192, 512) + 9
    assert golden.cycles("LOAD_W", 7, wpipe=9) == golden.cycles("LOAD_W", 7)        # loads read no weights
    drv, _ = golden_engine(**{k.lower(): v for k, v in board.KV260_DRAFTENGINE.items()})
    assert (drv.uram, drv.wpipe, drv.wdepth) == (1, 8, 28672) and de_wpipe(28672, 1) == 7 + 1
    check_job(drv, draftengine_job(np.random.default_rng(3), 2, 192, 64, 16), exact_cycles=True)
    assert (golden_engine()[0].uram, golden_engine()[0].wpipe) == (0, 0)


def test_unloaded_memory_reads_as_the_golden_models_unloaded_value():
    """A RUN over weight and parameter beats never loaded computes from :data:`hls_ref.draftengine.UNLOADED` in
    the golden register model (the RTL's memories hold no initial value: X in Icarus, so no test or driver runs
    one; the driver runs only layers it placed)."""
    drv, dev = golden_engine(**SMALL)
    assert golden.UNLOADED == 0
    model = next(iter(dev.models.values()))
    assert (model.wmem == golden.UNLOADED).all() and (model.pmem == golden.UNLOADED).all()
    cfg = drv.cmap.reg("CONFIG")
    for name, v in dict(M=1, K=drv.cols, N=drv.rows, WBASE=0, PBASE=0).items():
        drv.write_reg(name, v)
    drv.write_reg("CONFIG", cfg.encode(OP=cfg.field("OP").code("RUN"), OUT=cfg.field("OUT").code("OUT32")))
    drv.start()
    drv.send_beats(de_act_beats(np.ones((1, drv.cols), np.int64), drv.rows, drv.cols))
    assert drv.sink.recv() == [0]            # zero weights, zero bias: every lane 0
    drv.wait_done()


def test_unattached_and_timeouts():
    dev = GoldenDevice({0: "draftengine"})
    drv = DraftEngine(description("draftengine", dev))
    job = draftengine_job(np.random.default_rng(0), 1, 8, 8, 8)
    with pytest.raises(SpecdecError, match="attach"):
        drv.run(job)
    assert drv.read_fields("STATUS")["BUSY"] == 0              # the failed load was soft-reset
    drv.attach(dev.stream(0), dev.sink(0))
    assert np.array_equal(drv.run(job).y, golden.run(job).y)
    with pytest.raises(CoreTimeout):
        dev.sink(0).recv()
    with pytest.raises(ValueError, match="'weights' or 'params'"):
        drv.load("acts", 0, np.zeros((1, 64), np.uint8))
    with pytest.raises(ValueError, match="outside the memory"):
        drv.load("params", 255, np.zeros((2, 64), np.uint8))


def test_a_placement_from_before_a_reset_or_outside_the_core_is_refused_and_run_keeps_the_placed_layers():
    """``run`` places its job in the memories left free and frees them again: a layer placed before still gives
    its own results (``run`` used to reset the memories and write over it, and the old placement then ran on the
    job's weights). After ``reset_memory`` an old placement is refused; so is one reaching past the memories
    (it used to leave the core in BAD_RANGE, failing every later job)."""
    import dataclasses
    drv, _ = golden_engine()
    rnd = np.random.default_rng(9)
    a, b = (draftengine_job(rnd, 2, 40, 12, 16) for _ in range(2))
    at = drv.place(a.w, a.bias, a.mult, a.shift)
    free = drv.free()
    out = drv.run(b)
    assert np.array_equal(out.y, golden.run(b).y) and drv.free() == free
    y, _ = drv.matmul(a.x, at, 16)
    assert np.array_equal(y, golden.run(a).y)
    for bad, match in ((dataclasses.replace(at, wbase=70_000), "outside this core"),
                       (dataclasses.replace(at, n=10 ** 6), "outside this core"),
                       ((0, 0, 12, 40), "expected a Placement from place")):
        with pytest.raises(ValueError, match=match):
            drv.matmul(a.x, bad, 16)
    assert drv.read_fields("STATUS")["ERROR"] == 0
    drv.reset_memory()
    with pytest.raises(ValueError, match=r"made before the memories were reset \(epoch 0, now 1\)"):
        drv.matmul(a.x, at, 16)
    at = drv.place(a.w, a.bias, a.mult, a.shift)
    assert np.array_equal(drv.matmul(a.x, at, 16)[0], golden.run(a).y)


def test_an_error_or_a_job_left_by_raw_register_traffic_is_not_taken_for_the_next_job():
    """A core left in error (a raw START of an unknown operation) or BUSY (a raw RUN whose activations never
    came) by traffic this driver did not run: the next job is refused naming that, nothing written; after
    soft_reset() it runs. Before, the stale error was reported as the new job's."""
    drv, dev = golden_engine()
    rnd = np.random.default_rng(4)
    a = draftengine_job(rnd, 1, 40, 12, 8)
    at = drv.place(a.w, a.bias, a.mult, a.shift)
    codes = {v for _, v, _ in drv.cmap.reg("CONFIG").field("OP").values}
    drv.write_fields("CONFIG", OP=next(c for c in range(16) if c not in codes))
    drv.start()
    with pytest.raises(CoreError, match="still in error from an earlier operation") as e:
        drv.matmul(a.x, at)
    assert e.value.bits == ["BAD_OP"] and drv.read_fields("STATUS")["ERROR"] == 1      # left as it was
    drv.soft_reset()
    drv.write_fields("CONFIG", OP=drv._ops["RUN"], OUT=0)
    for name, v in dict(M=1, K=40, N=12, WBASE=at.wbase, PBASE=at.pbase).items():
        drv.write_reg(name, v)
    drv.start()                                                  # a RUN waiting for its activations
    with pytest.raises(SpecdecError, match="BUSY with an operation this driver did not start"):
        drv.matmul(a.x, at)
    drv.soft_reset()
    assert np.array_equal(drv.matmul(a.x, at)[0], golden.run(a).y)


def test_beats_and_activations_that_are_not_their_integers_are_refused_before_the_core():
    """Weight or parameter beats outside 0..255 or not integers (300 was stored as 44, -1.7 as 255), and
    activations of another kind (numpy files timedelta64 under its integers), are refused naming the values;
    the memories are unchanged and a streamed layer loads nothing for bad activations."""
    drv, dev = golden_engine(**SMALL)
    wmem = dev.models[0].wmem.copy()
    rc = drv.rows * drv.cols
    for beats, match in ((np.full((1, rc), 300), r"values 300\.\.300"), (np.full((1, rc), -1.7), "dtype float64"),
                         (np.full((1, rc), -1, np.int8), r"values -1\.\.-1")):
        with pytest.raises(ValueError, match=match):
            drv.load("weights", 0, beats)
        with pytest.raises(ValueError, match=match):
            drv.send_beats(beats)
    assert np.array_equal(dev.models[0].wmem, wmem) and drv.read_fields("STATUS")["BUSY"] == 0
    rnd = np.random.default_rng(6)
    a = draftengine_job(rnd, 1, 20, 8, 8)
    at = drv.place(a.w, a.bias, a.mult, a.shift)
    with pytest.raises(ValueError, match="timedelta64"):
        drv.matmul(np.ones((1, 20), "m8[ns]"), at)
    layer = drv.stream_layer(a.w, a.bias, a.mult, a.shift)
    for x in (np.ones((1, 20), "m8[ns]"), np.zeros((0, 20), np.int64), np.zeros(20, np.int64)):
        with pytest.raises(ValueError):
            drv.matmul_streamed(x, layer)
    assert drv.streamed_beats == 0
    assert np.array_equal(drv.matmul_streamed(a.x, layer)[0], golden.run(a).y)
    # a Placement given to matmul_streamed: the error had been about layers placed since (or, after
    # reset_memory, an AttributeError)
    for reset in (False, True):
        if reset:
            drv.reset_memory()
        with pytest.raises(ValueError, match="expected a Streamed from stream_layer"):
            drv.matmul_streamed(a.x, at)


def test_ragged_arrays_and_empty_layer_shapes_are_named():
    """Ragged weights or activations had raised numpy's "inhomogeneous shape" message, which names neither the
    argument nor the rows; ``footprint`` of a layer with no rows had answered (0, 0) and ``window_tiles(0)``
    raised ZeroDivisionError. Each is refused naming what was given, the memories unchanged."""
    drv, dev = golden_engine(**SMALL)
    wmem = dev.models[0].wmem.copy()
    with pytest.raises(ValueError, match=r"weights must be rows of one length, got rows of lengths \[2, 1\]"):
        drv.place([[1, 2], [3]], [0, 0], [1, 1], [0, 0])
    a = draftengine_job(np.random.default_rng(7), 1, 20, 8, 8)
    at = drv.place(a.w, a.bias, a.mult, a.shift)
    with pytest.raises(ValueError, match=r"activations must be rows of one length, got rows of lengths \[20, 3\]"):
        drv.matmul([[1] * 20, [1, 2, 3]], at)
    with pytest.raises(ValueError, match=r"beats must be rows of one length"):
        drv.send_beats([[0] * 64, [0]])
    with pytest.raises(ValueError, match=r"footprint: a layer has N, K >= 1, got -1 x 5"):
        drv.footprint(-1, 5)
    with pytest.raises(ValueError, match=r"window_tiles: a layer has K >= 1 columns, got 0"):
        drv.window_tiles(0)
    assert drv.footprint(8, 20) == (2 * 2, 2)                # 4 x 16 tiles: ceil(8 / 4) x ceil(20 / 16) beats
    assert drv.read_fields("STATUS")["BUSY"] == 0
    assert np.array_equal(dev.models[0].wmem[len(wmem) // 2:], wmem[len(wmem) // 2:])   # nothing past the layer
    assert np.array_equal(drv.matmul(a.x, at)[0], golden.run(a).y)
