"""treeattn C++ reference (hls_ref/cpp/treeattn.cpp) == golden model (hls_ref.treeattn), code for code: the
agreement vectors of several builds (long contexts included), every ERR bit, and frames cut short or run long."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import cpp
from hls_ref import treeattn as ta
from hls_ref.vectors import chain_mask, treeattn_job, treeattn_set
from hwcontract.board import KV260_TREEATTN
from hwcontract.regmap import core

pytestmark = pytest.mark.skipif(cpp.shutil.which(cpp.CXX) is None, reason="no C++ compiler")

BUILDS = [None, dict(HEAD_DIM=32, GROUP=1, NODES_MAX=4, LANES=8, CTX_MAX=16, BLOCK=16),
          dict(HEAD_DIM=128, GROUP=8, NODES_MAX=16, LANES=32, CTX_MAX=512, BLOCK=16), dict(NODES_MAX=1),
          KV260_TREEATTN]


def agree(job, params) -> ta.Output:
    want = ta.run(job, params)
    out, res = cpp.treeattn_run(job, params)
    assert res == {"macs": want.macs, "err": want.err}, (job.ctx, job.mask)
    assert out.dtype == np.int16 and out.shape == want.out.shape and (out == want.out).all(), (job.ctx, job.mask)
    return want


def test_id_hash():
    assert cpp.treeattn_id_hash() == core("treeattn").map_hash()


@pytest.mark.parametrize("params", BUILDS, ids=["default", "tiny", "wide", "one-node", "kv260"])
def test_vector_set(params):
    jobs = treeattn_set(67, 12, params)
    errs = {agree(j, params).err for j in jobs}
    assert errs == {0, ta.ERR_BAD_CTX, ta.ERR_BAD_NODES, ta.ERR_BAD_SCALE, ta.ERR_BAD_MASK}
    assert max(j.ctx for j in jobs if not ta.run(j, params).err) == ta.build(params)["CTX_MAX"]


def test_stream_errors_and_frames():
    rng = np.random.default_rng(1)
    p = ta.build()
    job = treeattn_job(rng, 40, chain_mask(3), p)
    frame = ta.stream_bytes(job)
    for data, err in ((frame, 0), (frame[:-1], ta.ERR_SHORT_STREAM), (frame[:2], ta.ERR_SHORT_STREAM),
                      (np.concatenate([frame, frame[:3]]), ta.ERR_LONG_STREAM)):
        out, res = cpp.treeattn_frame(data, 40, 3, job.mult, job.shift)
        want = ta.run_frame(data, 40, 3, job.mult, job.shift)
        assert res["err"] == want.err == err and (out == want.out).all() and out.shape == want.out.shape
    bad = frame.copy()
    bad[2, 0] = 3                                   # row 2 without bit 2
    assert cpp.treeattn_frame(bad, 40, 3, job.mult, job.shift)[1]["err"] == ta.ERR_BAD_MASK
    assert cpp.treeattn_frame(frame, 40, 0, job.mult, job.shift)[1]["err"] == ta.ERR_BAD_NODES


def test_bad_build_and_registers_are_refused():
    with pytest.raises(ValueError, match=r"parameter HEAD_DIM=48 of core 'treeattn' not in \{32, 64, 128\}"):
        cpp.treeattn_frame(np.zeros((1, 16), np.uint8), 0, 1, 1, 0, dict(HEAD_DIM=48))
    with pytest.raises(ValueError, match=r"CTX=4294967296 does not fit its 32-bit register"):
        cpp.treeattn_frame(np.zeros((1, 16), np.uint8), 1 << 32, 1, 1, 0)
