"""The hot-vocabulary draft head (specdec.models.hotvocab): its map is checked, its logits are the full head's on
the hot rows and -inf elsewhere, and the loop stays lossless with it."""
from __future__ import annotations

import numpy as np
import pytest

import model_pairs
from specdec.app.job import PROMPT_LOOKUP, Job
from specdec.decoding import loop
from specdec.decoding.base import GenConfig, Sampling
from specdec.decoding.drafters import ModelDraft
from specdec.errors import OptionError
from specdec.hw import cores
from specdec.models import hotvocab, loading

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_threads")

V = 64


@pytest.mark.parametrize("ids,message", [
    (None, "no token map"),
    ([], "non-empty"),
    ([[1, 2]], "1-D"),
    ([0.5, 1.0], "1-D array of token ids"),
    ([3, 64], "token id 64 outside 0..63"),
    ([-1, 3], "token id -1 outside"),
    ([5, 7, 5], "token id 5 appears twice"),
])
def test_a_missing_or_wrong_map_raises(ids, message):
    with pytest.raises(ValueError, match=message):
        hotvocab.check_map(ids, V)


def test_hot_head_keeps_the_hot_rows_and_masks_the_rest():
    model = model_pairs.tiny_gpt2(V, 1, seed=3)
    ids = np.array([7, 0, 33, 12, 63])
    hot = hotvocab.hot_head_model(model, ids)
    x = torch.tensor([[1, 5, 9, 2]])
    with torch.inference_mode():
        full, part = model(x).logits[0], hot(x).logits[0]
    assert torch.allclose(part[:, ids], full[:, ids], rtol=1e-5, atol=1e-6)
    others = np.setdiff1d(np.arange(V), ids)
    assert torch.isneginf(part[:, others]).all()
    assert model.get_output_embeddings().weight.shape[0] == V          # the original is unchanged
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_hot_ids_are_the_most_frequent_training_tokens():
    tok = loading.gpt2_tokenizer()
    ids = hotvocab.hot_ids(tok, 200, 50257)
    assert len(ids) == len(set(ids.tolist())) == 200
    counts = hotvocab._counts(tok)
    c = [counts.get(int(t), 0) for t in ids]
    assert c == sorted(c, reverse=True) and c[-1] > 0
    assert tok("\n")["input_ids"][0] in ids[:10]             # a line break ends every verse line
    with pytest.raises(OptionError, match="draft_vocab"):
        hotvocab.hot_ids(tok, 0, 50257)


def test_counts_are_kept_on_disk_keyed_by_text_and_tokenizer(tmp_path, monkeypatch):
    from specdec.models import corpus
    tok = loading.gpt2_tokenizer()
    texts = ["To be, or not to be", "that is the question:", "to be"]
    monkeypatch.setattr(corpus, "passages", lambda held_out: list(texts))
    monkeypatch.setenv(loading.CACHE_ENV, str(tmp_path))
    hotvocab._counts.cache_clear()
    first = hotvocab._counts(tok)
    assert first[tok(" be")["input_ids"][0]] == 3
    kept = list((tmp_path / "hotvocab").iterdir())
    assert len(kept) == 1 and kept[0].suffix == ".npz"
    hotvocab._counts.cache_clear()
    assert hotvocab._counts(tok) == first                    # read back from the file
    texts.append("be")                                       # other text: another key, counted afresh
    hotvocab._counts.cache_clear()
    assert hotvocab._counts(tok)[tok("be")["input_ids"][0]] == first[tok("be")["input_ids"][0]] + 1
    assert len(list((tmp_path / "hotvocab").iterdir())) == 2
    monkeypatch.setenv(loading.CACHE_ENV, "off")
    hotvocab._counts.cache_clear()
    assert hotvocab._counts(tok) and len(list((tmp_path / "hotvocab").iterdir())) == 2
    hotvocab._counts.cache_clear()


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=1.0)], ids=["greedy", "sampled"])
def test_loop_with_a_hot_draft(sampling):
    """Greedy: target-only's tokens. Sampled: every token can still come out, also those outside the hot set
    (the verifier resamples them from the target)."""
    from specdec.models.lm import CausalLM
    target = CausalLM(model_pairs.tiny_gpt2(V, 2, seed=1, init_std=0.1), "target")      # spread-out rows
    hot_ids = np.arange(0, V, 2)                         # the even tokens only
    draft = ModelDraft(CausalLM(hotvocab.hot_head_model(model_pairs.tiny_gpt2(V, 1, seed=2, init_std=0.1), hot_ids),
                                "draft"))
    cfg = GenConfig(24, 3, sampling=sampling, seed=1, stop_at_eos=False)
    verifier = cores.golden_verifier()
    verifier.seed([5, 6, 7, 8])
    gen = loop.generate(target, draft, verifier, [3, 17, 5], cfg)
    if sampling.greedy:
        base = loop.generate(target, None, None, [3, 17, 5], GenConfig(24, 0, stop_at_eos=False))
        assert gen.tokens == base.tokens
    else:
        assert any(t % 2 for t in gen.tokens)            # an odd token: not from the draft's head
    drafted = [r for r in gen.rounds if r.g]
    assert drafted


def test_job_checks_the_option():
    with pytest.raises(OptionError, match="draft_vocab"):
        Job(prompts=("x",), draft_vocab=0)
    with pytest.raises(OptionError, match="draft_vocab"):
        Job(prompts=("x",), draft=PROMPT_LOOKUP, draft_vocab=100)
    assert Job.from_dict(Job(prompts=("x",), draft_vocab=512).to_dict()).draft_vocab == 512
