"""The draft engine's C++ reference (hls_ref/cpp/draftengine.cpp) against the golden model on the shared
vectors (hls_ref.vectors.draftengine_set): every output and the saturation count, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import cpp, vectors
from hls_ref import draftengine as golden

pytestmark = pytest.mark.skipif(cpp.shutil.which(cpp.CXX) is None, reason="no C++ compiler")


def test_cpp_agrees_with_golden():
    jobs = vectors.draftengine_set(seed=21, count=40)
    saturated = 0
    for i, job in enumerate(jobs):
        ref = golden.run(job)
        y, sat = cpp.draftengine_run(job)
        assert np.array_equal(y, ref.y), f"job {i}: M={job.x.shape[0]} K={job.x.shape[1]} N={job.w.shape[0]}"
        assert sat == ref.saturated, f"job {i}"
        saturated += sat
    assert saturated > 0 and any(golden.run(j).saturated < j.x.shape[0] * j.w.shape[0] for j in jobs)


def test_cpp_refuses_what_golden_refuses():
    job = vectors.draftengine_set(seed=1, count=0)[0]
    bad = golden.Job(job.x, job.w, job.bias, job.mult, np.array([49]), job.out_bits)
    with pytest.raises(ValueError, match="shift: value 49"):
        cpp.draftengine_run(bad)


def test_extreme_sums_reach_the_accumulator_limit():
    job = vectors.draftengine_set(seed=1, count=0)[1]          # count 0: the first largest sum, K = 4096, every operand -128, OUT_BITS 32
    y, sat = cpp.draftengine_run(job)
    want = np.clip(4096 * 128 * 128 + job.bias.astype(np.int64), -(2 ** 31), 2 ** 31 - 1)
    assert (y == want[None, :]).all() and sat == 2 * int((want != 4096 * 128 * 128 + job.bias).sum())
