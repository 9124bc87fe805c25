"""The draftengine driver's checks, run unchanged on every backend (golden model, Verilator, Icarus, a board).

Plain synchronous code, as a user would write it on a board: in simulation it runs in a thread started
with ``cocotb.task.bridge``. Every job's outputs and saturation count are compared with
``hls_ref.draftengine``, and its cycles with the cycle model.
"""
from __future__ import annotations

import numpy as np

from hls_ref import draftengine as golden
from hls_ref.vectors import draftengine_job
from hwcontract.formats import DE_K_LIMIT, de_act_beats, de_weight_beats
from specdec.errors import CoreError
from specdec.hw.drivers.draftengine import DraftEngine


def check_job(drv: DraftEngine, job: golden.Job, exact_cycles: bool) -> None:
    """One job through the driver against the golden model: outputs, SATURATED, beats, cycles."""
    m, k = job.x.shape
    n = job.w.shape[0]
    out = drv.run(job)
    ref = golden.run(job)
    assert out.y.shape == (m, n) and out.y.dtype == np.int64
    assert np.array_equal(out.y, ref.y), f"M={m} K={k} N={n} OUT={job.out_bits}: outputs differ"
    assert out.saturated == ref.saturated, (out.saturated, ref.saturated)
    nt, kc, ab = golden.tiles(m, k, n, drv.rows, drv.cols)
    assert drv.read_reg("BEATS_IN") == m * ab and drv.read_reg("BEATS_OUT") == nt * m
    want = golden.cycles("RUN", m * ab, m, k, n, drv.rows, drv.cols, drv.wpipe)
    assert drv.cycles - drv.stall == want, (drv.cycles, drv.stall, want, (m, k, n))
    if exact_cycles:
        assert drv.stall == 0, drv.stall
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 1, "ERROR": 0}


def expect_core_error(drv: DraftEngine, bits: list[str], op: str, frame: np.ndarray | None = None, **regs) -> None:
    """Registers written raw (past the host checks), START, then ``frame`` if given: CoreError with ``bits``;
    START is ignored while in error, SOFT_RESET recovers and keeps the rw registers."""
    cfg = drv.cmap.reg("CONFIG")
    for name, value in regs.items():
        drv.write_reg(name, value)
    code = regs.pop("CONFIG", None)
    if code is None:
        drv.write_reg("CONFIG", cfg.encode(OP=cfg.field("OP").code(op), OUT=cfg.field("OUT").code("OUT8")))
    drv.start()
    if frame is not None:
        drv.send_beats(frame)
    try:
        drv.wait_done()
    except CoreError as e:
        assert e.bits == bits, f"CoreError bits {e.bits}, expected {bits}"
    else:
        raise AssertionError(f"no CoreError, expected {bits}")
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 1}
    drv.start()                                   # ignored while in error
    assert drv.read_fields("STATUS")["ERROR"] == 1
    kept = drv.read_reg("K")
    drv.soft_reset()
    assert drv.read_reg("ERR") == 0 and drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert drv.read_reg("K") == kept


def shapes(drv: DraftEngine, rnd: np.random.Generator, count: int) -> list[tuple[int, int, int]]:
    """Random (M, K, N) that fit the build: K and N mostly not multiples of the array, M = 1 among them."""
    out = [(1, 1, 1), (1, drv.cols + 1, drv.rows + 1), (drv.m_max, drv.rows * drv.cols + 3, 2 * drv.rows - 1)]
    while len(out) < count:
        m = 1 if rnd.random() < 0.3 else int(rnd.integers(1, drv.m_max + 1))
        k = int(rnd.integers(1, min(drv.k_max, 300) + 1))
        n = int(rnd.integers(1, 3 * drv.rows * 4))
        nt, kc, _ = golden.tiles(m, k, n, drv.rows, drv.cols)
        if nt * kc <= drv.wdepth and nt <= drv.pdepth:
            out.append((m, k, n))
    return out


def check_draftengine_driver(drv: DraftEngine, seed: int = 3, count: int = 8, exact_cycles: bool = False,
                             large: tuple[tuple[int, int, int], ...] = ()) -> None:
    """Random jobs (every output width), the ``large`` (M, K, N) shapes, host-side and core errors, recovery."""
    rnd = np.random.default_rng(seed)
    for i, (m, k, n) in enumerate(shapes(drv, rnd, count)):
        check_job(drv, draftengine_job(rnd, m, k, n, (8, 16, 32)[i % 3]), exact_cycles)
    for i, (m, k, n) in enumerate(large):
        check_job(drv, draftengine_job(rnd, m, k, n, (16, 8, 32)[i % 3]), exact_cycles)

    # a layer placed and another streamed through the window past it (specdec.models.int8draft.layout's mixed layout):
    # the streamed layer's loads land past the placed one, which still gives its outputs afterwards
    drv.reset_memory()
    kept, moving = draftengine_job(rnd, 2, 20, drv.rows + 3, 16), draftengine_job(rnd, 3, 20, 2 * drv.rows, 8)
    at = drv.place(kept.w, kept.bias, kept.mult, kept.shift)
    layer = drv.stream_layer(moving.w, moving.bias, moving.mult, moving.shift)
    assert (layer.wbase, layer.pbase) == drv.footprint(drv.rows + 3, 20), (layer.wbase, layer.pbase)
    y, sat = drv.matmul_streamed(moving.x, layer, moving.out_bits)
    assert np.array_equal(y, golden.run(moving).y) and sat == golden.run(moving).saturated
    y, _ = drv.matmul(kept.x, at, kept.out_bits)
    assert np.array_equal(y, golden.run(kept).y), "a streamed load overwrote the placed layer"
    drv.reset_memory()

    # host-side errors: nothing reaches the core (still DONE)
    good = draftengine_job(rnd, 2, 20, 5, 8)
    cases = [(golden.Job(good.x[:, :3], good.w, good.bias, good.mult, good.shift, 8), "activations have K=3"),
             (golden.Job(good.x, good.w, good.bias, good.mult, good.shift, 12), "out_bits=12"),
             (golden.Job(good.x, good.w, good.bias, good.mult, good.shift + 49, 8), "shift: value"),
             (golden.Job(good.x, good.w * 2, good.bias, good.mult, good.shift, 8), "weights: value"),
             (golden.Job(np.zeros((drv.m_max + 1, 20), np.int64), good.w, good.bias, good.mult, good.shift, 8),
              f"M={drv.m_max + 1}"),
             (golden.Job(np.zeros((1, drv.k_max + 1), np.int64), np.zeros((1, drv.k_max + 1), np.int64), [0], [0],
                         [0], 8), f"K={drv.k_max + 1}"),
             (golden.Job(np.zeros((1, DE_K_LIMIT + 1), np.int64), np.zeros((1, DE_K_LIMIT + 1), np.int64), [0],
                         [0], [0], 32), "accumulator could overflow")]
    for job, match in cases:
        try:
            drv.run(job)
        except ValueError as e:
            assert match in str(e), f"{match!r} not in {e}"
        else:
            raise AssertionError(f"no ValueError for {match}")
        assert drv.read_fields("STATUS")["ERROR"] == 0
    at = drv.place(good.w, good.bias, good.mult, good.shift)
    for x, match in ((good.x[:0], "with M >= 1, got shape (0, 20)"), (good.x[0], "got shape (20,)")):
        try:
            drv.matmul(x, at)
        except ValueError as e:
            assert match in str(e), f"{match!r} not in {e}"
        else:
            raise AssertionError(f"no ValueError for activations of shape {x.shape}")
    drv.reset_memory()
    wide = drv.rows * drv.pdepth + 1
    try:
        drv.place(np.zeros((wide, 8), np.int64), np.zeros(wide, np.int64), np.zeros(wide, np.int64),
                  np.zeros(wide, np.int64))
    except ValueError as e:
        assert "parameter tiles" in str(e)
    else:
        raise AssertionError("no ValueError for a layer larger than the memories")

    # core errors (registers written raw), each recovered by a soft reset and a good job
    rc = drv.rows * drv.cols
    beats = de_weight_beats(np.ones((drv.rows, 2 * drv.cols), np.int64), drv.rows, drv.cols)     # 2 beats
    expect_core_error(drv, ["BAD_OP"], "RUN", CONFIG=0)
    cfg = drv.cmap.reg("CONFIG")
    expect_core_error(drv, ["BAD_OUT"], "RUN", CONFIG=cfg.encode(OP=cfg.field("OP").code("RUN"), OUT=3),
                      M=1, K=8, N=8, WBASE=0, PBASE=0)
    expect_core_error(drv, ["BAD_SHAPE"], "RUN", M=0, K=8, N=8, WBASE=0, PBASE=0)
    expect_core_error(drv, ["BAD_SHAPE"], "RUN", M=drv.m_max + 1, K=8, N=8)
    expect_core_error(drv, ["BAD_SHAPE"], "RUN", M=1, K=drv.k_max + 1, N=8)
    expect_core_error(drv, ["BAD_SHAPE"], "RUN", M=1, K=0, N=8)
    expect_core_error(drv, ["BAD_SHAPE"], "RUN", M=1, K=8, N=0)
    expect_core_error(drv, ["BAD_SHAPE"], "RUN", M=1, K=8, N=drv.rows * drv.pdepth + 1)
    expect_core_error(drv, ["BAD_SHAPE", "BAD_OUT"], "RUN", CONFIG=cfg.encode(OP=cfg.field("OP").code("RUN"), OUT=3),
                      M=0, K=8, N=8)
    expect_core_error(drv, ["BAD_RANGE"], "RUN", M=1, K=8, N=drv.rows, WBASE=drv.wdepth, PBASE=0)
    expect_core_error(drv, ["BAD_RANGE"], "RUN", M=1, K=8, N=drv.rows, WBASE=0, PBASE=drv.pdepth)
    expect_core_error(drv, ["BAD_RANGE"], "LOAD_W", ADDR=drv.wdepth - 1, COUNT=2)
    expect_core_error(drv, ["BAD_RANGE"], "LOAD_W", ADDR=0, COUNT=0)
    expect_core_error(drv, ["BAD_RANGE"], "LOAD_P", ADDR=drv.pdepth, COUNT=1)
    expect_core_error(drv, ["SHORT_STREAM"], "LOAD_W", beats, ADDR=0, COUNT=3)
    expect_core_error(drv, ["LONG_STREAM"], "LOAD_P", np.concatenate([beats, beats]), ADDR=0, COUNT=3)
    expect_core_error(drv, ["SHORT_STREAM"], "RUN", de_act_beats(np.ones((1, rc), np.int64), drv.rows, drv.cols),
                      M=2, K=rc, N=drv.rows, WBASE=0, PBASE=0)
    expect_core_error(drv, ["LONG_STREAM"], "RUN", de_act_beats(np.ones((3, rc), np.int64), drv.rows, drv.cols),
                      M=2, K=rc, N=drv.rows, WBASE=0, PBASE=0)
    check_job(drv, draftengine_job(rnd, 3, 2 * rc + 5, drv.rows + 3, 16), exact_cycles)
