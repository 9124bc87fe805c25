"""Model loading and pairing (``specdec.models``): tokenizer, bad inputs, KV-cache rollback."""
from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import model_pairs
from specdec.app import pairs
from specdec.models import lm as models_lm, loading
from specdec.models.lm import CausalLM
from specdec.models.loading import ModelError

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]


def test_gpt2_tokenizer_is_the_real_bpe():
    tok = loading.gpt2_tokenizer()
    assert tok("Hello world")["input_ids"] == [15496, 995]
    assert len(tok.get_vocab()) == 50257
    assert tok.decode([15496, 995]) == "Hello world"


def test_unknown_hub_model_offline_names_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "no-such-org/no-such-model-specdec"
    with pytest.raises(ModelError) as exc:
        loading.load(name, "target")
    msg = str(exc.value)
    assert name in msg and "HF_HUB_OFFLINE" in msg and "--target /path/to/no-such-model-specdec" in msg
    with pytest.raises(ModelError, match="--draft /path/to/no-such-model-specdec"):
        loading.check_source(name, "draft")              # before anything loads
    loading.check_source("smollm2-135m-instruct", "target")    # the demo target: the GGUF, converted on first use


def test_a_model_directory_may_start_from_home(gpt2_dirs, monkeypatch):
    home = Path(gpt2_dirs[0]).parent
    monkeypatch.setenv("HOME", str(home))
    loading.check_source(f"~/{Path(gpt2_dirs[0]).name}", "target")
    model, _ = loading.load(f"~/{Path(gpt2_dirs[0]).name}", "target")
    assert model.config.n_layer == 2


def test_context_length_from_the_config_file_equals_the_loaded_models(gpt2_pair, opt_pair, gpt2_dirs, opt_dirs):
    """Read from config.json before anything loads (GPT-2 names it ``n_positions``), it is the loaded model's;
    so is the vocabulary size, the width of the loaded pair's logits."""
    for pair, dirs in ((gpt2_pair, gpt2_dirs), (opt_pair, opt_dirs)):
        assert loading.config_context_length(dirs[0]) == models_lm.context_length(pair.target.model) == 512
        assert loading.config_vocab_size(dirs[1]) == pair.vocab == (50257 if pair is gpt2_pair else 50272)


@pytest.mark.parametrize("text, want", [
    ('{"max_position_embeddings": 8192, "n_positions": 4}', 8192),
    ('{"n_positions": 1024}', 1024),
    ('{"text_config": {"max_position_embeddings": 4096}, "max_position_embeddings": 7}', 4096),
    ('{"hidden_size": 64}', None),                       # named otherwise: checked once the model loads
    ('{"max_position_embeddings": 0}', None),
    ('{"max_position_embeddings": true}', None),
    ('{"max_position_embeddings": "2048"}', None),
    ('[2048]', None),
    ('{"max_position_embeddings": 20', None),           # not JSON: loading the model says what is wrong
])
def test_context_length_from_a_config_file(tmp_path, text, want):
    (tmp_path / "config.json").write_text(text)
    assert loading.config_context_length(str(tmp_path)) == want


def test_the_demo_targets_config_is_read_without_importing_transformers(tmp_path):
    """The checks before a run (the budget against the context, the vocabulary) read the demo target's converted
    copy's config.json in a process that may never load a model (backend ``sim``: the models load inside the
    simulation). Naming the copy imported transformers for its version, 1.5 s of every ``make demo``."""
    snippet = (
        "import json, sys\n"
        "from specdec.models import loading\n"
        "where = loading._converted_dir()\n"
        "where.mkdir(parents=True)\n"
        "(where / 'config.json').write_text(json.dumps({'max_position_embeddings': 8192, 'vocab_size': 49152}))\n"
        "got = (loading.config_context_length(loading.DEMO_TARGET), loading.config_vocab_size(loading.DEMO_TARGET))\n"
        "print(json.dumps([got, [m for m in ('transformers', 'torch') if m in sys.modules]]))\n")
    proc = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120,
                          env={**os.environ, loading.CACHE_ENV: str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[8192, 49152], []]


def test_empty_model_name_raises():
    with pytest.raises(ModelError, match="no model given"):
        loading.load("")


def test_directory_without_model_raises(tmp_path):
    with pytest.raises(ModelError, match=str(tmp_path)):
        loading.load(str(tmp_path))


def test_directory_without_tokenizer_raises(gpt2_dirs, tmp_path):
    d = tmp_path / "weights-only"
    d.mkdir()
    for f in Path(gpt2_dirs[0]).iterdir():
        if f.name in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, d)
    with pytest.raises(ModelError, match="tokenizer"):
        loading.load(str(d))


def test_pair_loads_at_real_vocab_sizes(gpt2_pair, opt_pair):
    assert gpt2_pair.vocab == 50257 and opt_pair.vocab == 50272
    assert gpt2_pair.draft.lm.vocab == 50257 and opt_pair.draft.lm.vocab == 50272
    assert gpt2_pair.target.model.config.n_layer == 2 and gpt2_pair.draft.lm.model.config.n_layer == 1


def test_width_mismatch_raises(gpt2_dirs, opt_dirs):
    with pytest.raises(ModelError, match="50272.*50257|50257.*50272"):
        pairs.open_pair(gpt2_dirs[0], opt_dirs[1])


def test_a_pair_saved_with_one_tokenizer_reads_it_once(gpt2_dirs, tmp_path, monkeypatch):
    """The GPT-2 pair's directories hold the same tokenizer files: ``open_pair`` reads them once, for the target.
    A draft whose files differ by a byte has its own read (and compared with the target's)."""
    from transformers import AutoTokenizer
    reads, read = [], AutoTokenizer.from_pretrained
    monkeypatch.setattr(AutoTokenizer, "from_pretrained",
                        lambda path, *a, **kw: reads.append(Path(path)) or read(path, *a, **kw))
    assert loading.same_tokenizer(*gpt2_dirs)
    pair = pairs.open_pair(*gpt2_dirs)
    assert reads == [Path(gpt2_dirs[0])] and pair.vocab == 50257
    draft = tmp_path / "draft"
    shutil.copytree(gpt2_dirs[1], draft)
    config = draft / "tokenizer_config.json"
    config.write_text(config.read_text() + "\n")
    assert not loading.same_tokenizer(gpt2_dirs[0], str(draft))
    reads.clear()
    pairs.open_pair(gpt2_dirs[0], str(draft))
    assert reads == [Path(gpt2_dirs[0]), draft]


def test_the_ml_import_is_frozen_out_of_the_collectors_sight_and_the_collector_left_as_found():
    """``loading.import_ml_stack`` (the first model load's step) freezes what the import made, here hundreds of
    thousands of objects (this worker has imported torch and transformers), and leaves the collector on or off
    as the caller had it."""
    gc.unfreeze()           # what the suite's collection froze (conftest.pytest_collection_finish)
    try:
        assert gc.get_freeze_count() == 0
        loading.import_ml_stack.__wrapped__()
        assert gc.get_freeze_count() > 100_000 and gc.isenabled()
        gc.disable()
        loading.import_ml_stack.__wrapped__()
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.freeze()


def changed_tokenizer():
    """GPT-2's tokenizer with the ids of two tokens swapped: same size, one mapping changed."""
    from transformers import GPT2TokenizerFast
    tok = loading.gpt2_tokenizer()
    vocab = tok.get_vocab()
    vocab["Hello"], vocab["world"] = vocab["world"], vocab["Hello"]
    return GPT2TokenizerFast(vocab=vocab, merges=_merges(tok))


def _merges(tok) -> list[tuple[str, str]]:
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]


def test_tokenizer_mismatch_raises(gpt2_dirs, tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(gpt2_dirs[1], draft)
    for f in draft.glob("*"):
        if "token" in f.name or f.name in ("vocab.json", "merges.txt"):
            f.unlink()
    changed_tokenizer().save_pretrained(draft)
    with pytest.raises(ModelError, match="tokenizer mismatch") as exc:
        pairs.open_pair(gpt2_dirs[0], str(draft))
    assert "Hello" in str(exc.value) or "world" in str(exc.value)


@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_rollback_then_forward_equals_fresh_forward(family, request):
    """KV-cache rollback: prefix + rejected tokens, roll back, new tokens == one fresh pass."""
    pair = request.getfixturevalue(f"{family}_pair")
    for lm in (pair.target, pair.draft.lm):
        prefix, rejected, accepted = [464, 3290, 318, 257], [1000, 2000, 3000], [50, 60, 70, 80]
        lm.reset()
        lm.forward(prefix)
        lm.forward(rejected)
        assert lm.length == len(prefix) + len(rejected)
        lm.rollback(len(prefix))
        assert lm.length == len(prefix)
        got = lm.forward(accepted)
        lm.reset()
        want = lm.forward(prefix + accepted)[len(prefix):]
        assert got.shape == (len(accepted), lm.vocab)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(got[0], lm.forward([1])[-1], atol=1e-3)   # positions matter


def test_rollback_out_of_range_raises(gpt2_pair):
    lm = gpt2_pair.target
    lm.reset()
    lm.forward([1, 2, 3])
    with pytest.raises(ValueError, match="cannot roll back to 4"):
        lm.rollback(4)
    with pytest.raises(ValueError, match="at least one token"):
        lm.forward([])


def test_causal_lm_reads_eos_from_generation_config(opt_pair):
    assert opt_pair.target.eos_token_id == model_pairs.EOS
    assert CausalLM(opt_pair.target.model).vocab == 50272


def test_forward_last_only_gives_the_last_row_and_fills_the_cache(gpt2_pair):
    """``forward(tokens, last_only=True)`` (the prefill's): one row, the full forward's last (to float rounding),
    and the cache as long as after a full forward, so the next step's logits agree too."""
    import torch
    lm = gpt2_pair.target
    ids = [464, 3290, 318, 257, 922]
    lm.reset()
    full = lm.forward(ids)
    step_full = lm.forward([13])
    lm.reset()
    last = lm.forward(ids, last_only=True)
    assert last.shape == (1, full.shape[1]) and lm.length == len(ids)
    torch.testing.assert_close(last[0], full[-1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lm.forward([13]), step_full, rtol=1e-4, atol=1e-4)
    lm.reset()


@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_forward_uses_the_current_cache_argument(family, request):
    """The cache goes to the model as ``cache`` (transformers 5 deprecates ``past_key_values``, to be removed in
    5.40): a forward and a rollback warn of nothing."""
    import warnings
    lm = request.getfixturevalue(f"{family}_pair").target
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm.reset()
        lm.forward([464, 3290, 318])
        lm.rollback(1)
        lm.forward([257])
    assert not [w for w in caught if "past_key_values" in str(w.message)], [str(w.message) for w in caught]
