"""Fixtures of the host-runtime tests: the GPT-2 and OPT model pairs, built once per session.

The hub is never contacted: HF_HUB_OFFLINE is set before transformers is imported, and every model is
built from a config and loaded from a local directory.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

import model_pairs  # noqa: E402


@pytest.fixture(scope="session")
def torch_threads():
    """One torch thread in every model test: tiny models gain nothing from more, and a 2-core CI box
    oversubscribed by torch threads slows every test."""
    try:
        import torch
    except ImportError:
        yield
        return
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def gpt2_dirs(tmp_path_factory, torch_threads) -> tuple[str, str]:
    """(target dir, draft dir) of the GPT-2 pair at V=50257, saved with GPT-2's tokenizer."""
    pytest.importorskip("transformers")
    return model_pairs.save_pair(*model_pairs.gpt2_pair_models(), tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def opt_dirs(tmp_path_factory, torch_threads) -> tuple[str, str]:
    """(target dir, draft dir) of the OPT pair at V=50272, saved with GPT-2's tokenizer."""
    pytest.importorskip("transformers")
    return model_pairs.save_pair(*model_pairs.opt_pair_models(), tmp_path_factory.mktemp("opt"))


@pytest.fixture(scope="session")
def gpt2_pair(gpt2_dirs):
    """The GPT-2 pair reloaded through ``pairs.open_pair`` (read-only: tests must not alter it)."""
    from specdec.app import pairs
    return pairs.open_pair(*gpt2_dirs)


@pytest.fixture(scope="session")
def opt_pair(opt_dirs):
    """The OPT pair reloaded through ``pairs.open_pair`` (read-only: tests must not alter it)."""
    from specdec.app import pairs
    return pairs.open_pair(*opt_dirs)
