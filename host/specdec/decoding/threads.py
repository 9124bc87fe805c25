"""The runtime's thread pools: torch computes, numpy's BLAS stays on the calling thread.

The decode loop makes vector-sized numpy calls between torch forwards (quantization, top-p, the golden
verifier). numpy's OpenBLAS keeps a pool of worker threads that spin for a while after each call, and
torch's OpenMP pool spins likewise; on a machine with few cores the two pools fight over them, and a sampled
decode slows by an order of magnitude (docs/benchmarks.md, "Thread pools"). numpy's work here is too small to
gain from threads, so the runtime holds every BLAS pool that is not torch's to one thread for the length of
a generation (threadpoolctl, which finds the pools in the loaded libraries), and leaves torch's own pool at
its size.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from threadpoolctl import ThreadpoolController


def _mine(ctl: ThreadpoolController) -> list:
    return [p for p in ctl.select(user_api="blas").lib_controllers if "torch" not in p.filepath]


def numpy_pools() -> list[dict]:
    """The BLAS pools the runtime limits (threadpoolctl's info dicts): every BLAS library that is not torch's
    (torch's own BLAS, bundled in its package as on ARM64 boards, keeps its threads)."""
    return [p.info() for p in _mine(ThreadpoolController())]


@contextmanager
def owned_threads() -> Iterator[None]:
    """Hold the BLAS pools of :func:`numpy_pools` to one thread inside the block; torch's threads unchanged.

    The libraries are scanned on every entry (under a millisecond once warm), so a pool loaded late counts.
    """
    mine = _mine(ThreadpoolController())
    saved = [(p, p.num_threads) for p in mine]
    try:
        for p in mine:
            p.set_num_threads(1)
        yield
    finally:
        for p, n in saved:
            p.set_num_threads(n)
