"""Shared checks of the greedy-identity proofs (tests/test_runtime.py, tests/test_tree_decode.py).

Greedy speculative decoding must be token-identical to Hugging Face greedy ``generate`` of the target alone.
"""
from __future__ import annotations

import shutil

import pytest

import model_pairs

N_NEW = 64          # new tokens per prompt in the identity proofs
N_LONG = 50         # prompts under `long`


def greedy_job(dirs, prompts: list[str], gamma, n_new: int = N_NEW) -> dict:
    """A greedy job (its JSON form) over the pair saved in ``dirs`` (target dir, draft dir)."""
    return {"target": dirs[0], "draft": dirs[1], "prompts": prompts, "max_new_tokens": n_new, "gamma": gamma,
            "seed": 0, "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0}}


class Reference:
    """HF greedy outputs of a pair's target, computed once per prompt."""

    def __init__(self, pair) -> None:
        self.model, self.cache = pair.target.model, {}

    def __call__(self, ids: list[int], n: int) -> list[int]:
        key = (tuple(ids), n)
        if key not in self.cache:
            self.cache[key] = model_pairs.hf_greedy(self.model, ids, n)
        return self.cache[key]


def assert_identical(result: dict, ref: Reference, n_new: int = N_NEW) -> None:
    """Every generation of ``result`` equals the target-only HF greedy output."""
    for i, g in enumerate(result["generations"]):
        want = ref(g["prompt_ids"], n_new)
        assert g["tokens"] == want, f"prompt {i}: speculative output differs from HF greedy generate"


def assert_exercised(result: dict) -> None:
    """Both accepts and rejects happened, and outputs are not one token repeated."""
    s = result["summary"]
    assert 0.05 < s["acceptance"] < 0.95, f"acceptance {s['acceptance']} gives a weak identity test"
    assert all(model_pairs.is_varied(g["tokens"]) for g in result["generations"])


def sim_available() -> bool:
    """Verilator is on PATH and cocotb imports (skips the test when cocotb is missing)."""
    pytest.importorskip("cocotb")
    from specdec.sim import harness
    try:
        harness.verilator_on_path()
    except Exception:
        return False
    return shutil.which("verilator") is not None
