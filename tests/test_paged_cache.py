"""The paged KV cache (``specdec.kv.paged``) over the kvpage golden core: same logits as ``DynamicCache``.

* forwards of varying lengths crossing page boundaries, with rollbacks into a page (copy on write), for
  the config-built GPT-2 and OPT targets and a tiny Llama, at 4 and 16 tokens per page;
* tree forwards and ``commit_path`` (the kept entries moved within the branch's pages);
* after every step the host's row -> page mirror equals the core's TRANSLATE answers, and once everything
  is freed every page is back in the pool;
* greedy speculative decoding (chain and tree) with paged caches on target and draft, sharing one core,
  is token-identical to target-only decoding with ``DynamicCache``;
* an exhausted page pool raises KVPageError naming POOL_EMPTY, and the cache stays usable;
* the default paged cache serves the target's whole context: the page size comes from it and the core's
  limits (``specdec.kv.layout``), a prompt over 1,024 tokens decodes as with dense caches, the pools grow
  only as pages are used, and a context the core cannot hold is refused naming ``--dense-kv``.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import model_pairs  # noqa: E402
from specdec.app import runner  # noqa: E402
from specdec.app.pairs import Pair  # noqa: E402
from specdec.decoding import drafters, loop, trees  # noqa: E402
from specdec.decoding.base import GenConfig  # noqa: E402
from specdec.hw import cores  # noqa: E402
from specdec.hw.drivers.base import description  # noqa: E402
from specdec.hw.drivers.kvpage import KVPage, KVPageError  # noqa: E402
from specdec.hw.golden import GoldenDevice  # noqa: E402
from specdec.kv import layout as kvlayout  # noqa: E402
from specdec.kv.layout import KVCapacityError, pick_block, rows_for  # noqa: E402
from specdec.kv.paged import INITIAL_POOL_PAGES, PagedCache  # noqa: E402
from specdec.models import loading  # noqa: E402
from specdec.models.lm import CacheStateError, CausalLM  # noqa: E402
from hwcontract.regmap import KV_MAX_BLOCKS, KV_MAX_PAGES  # noqa: E402
from model_pairs import tiny_llama  # noqa: E402
from tree_helpers import assert_close, make_tree, masks  # noqa: E402

pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]

#: Forward lengths (tokens) and rollbacks ("rb", tokens to drop) of the script of test (a), scaled by the
#: block so that forwards cross page boundaries and rollbacks land inside pages.
SCRIPT = [("fw", 1.75), ("fw", 0.25), ("fw", 1.25), ("rb", 0.75), ("fw", 0.5), ("fw", 2.25), ("rb", 1.5),
          ("fw", 0.25), ("fw", 0.25), ("fw", 0.25), ("rb", 0.25), ("fw", 1.0), ("rb", 0.0), ("fw", 0.75)]


def make_kv(pages: int = 256, max_blocks: int = 64) -> KVPage:
    """A kvpage driver over the golden model."""
    dev = GoldenDevice({0: "kvpage"}, {0: {"pages": pages, "max_blocks": max_blocks}})
    return KVPage(description("kvpage", dev))


@pytest.fixture(scope="module")
def family_models(torch_threads):
    return {"gpt2": model_pairs.gpt2_pair_models()[0], "opt": model_pairs.opt_pair_models()[0],
            "llama": tiny_llama()}


@pytest.fixture(scope="module")
def pairs(torch_threads):
    return {"gpt2": model_pairs.gpt2_pair_models(), "opt": model_pairs.opt_pair_models()}


def assert_table(lm: CausalLM, kv: KVPage) -> None:
    """The host mirror of the sequence's (and the open branch's) rows equals the core's TRANSLATE."""
    t = lm.cache.table
    for slot, rows in ((t.seq, t.seq_rows), (t.branch, t.branch_rows)):
        if slot is None:
            continue
        assert kv.info(slot).length == len(rows), f"slot {slot}: core rows != mirror {rows}"
        assert [kv.translate(slot, r) for r in range(len(rows))] == rows, f"slot {slot}"
    if t.seq is not None:
        assert kv.info(t.seq).kind == "SEQ"
    assert len(t.rows) >= rows_for(lm.length + lm.pending, t.block)
    assert lm.cache.get_seq_length() == lm.length + lm.pending


def assert_no_leak(kv: KVPage) -> None:
    assert kv.live() == ([], []), f"live slots after freeing everything: {kv.live()}"
    assert kv.free_pages == kv.pages


def tokens(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    return rng.integers(0, vocab, n).tolist()


# ------------------------------------------------------------------------------------------------
# (a) forwards and rollbacks, (c) page table
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", [4, 16])
@pytest.mark.parametrize("family", ["gpt2", "opt", "llama"])
def test_forwards_and_rollbacks_equal_dense(family_models, family, block):
    model = family_models[family]
    kv = make_kv()
    paged, dense = CausalLM(model, family, kv=kv, block=block), CausalLM(model, family)
    assert isinstance(paged.cache, PagedCache) and paged.paged and not dense.paged
    rng = np.random.default_rng(block)
    inside = dropped = 0                         # rollbacks that land inside a page, that drop rows
    for i, (op, scale) in enumerate(SCRIPT):
        n = max(1, round(scale * block))
        if op == "fw":
            ids = tokens(rng, paged.vocab, n)
            got, want = paged.forward(ids), dense.forward(ids)
            assert got.shape == want.shape == (n, paged.vocab)
            for r in range(n):
                assert_close(got[r], want[r], f"{family} block {block} step {i} row {r}")
        else:
            keep = paged.length - round(scale * block)
            inside += keep % block != 0
            dropped += rows_for(keep, block) < len(paged.cache.table.seq_rows)
            paged.rollback(keep)
            dense.rollback(keep)
            assert paged.cache.table.branch is None
            assert paged.cache.table.pages_held == rows_for(keep, block)
        assert paged.length == dense.length
        assert_table(paged, kv)
    st = paged.cache.stats()
    # the forwards write in place (no branch, no copy); a rollback forks and commits only to drop rows; the
    # pages taken after a drop follow other pages, so some forwards gather their slots and some read a run
    assert inside >= 2 and dropped >= 2 and st["copy"] == 0, st
    assert st["commit"] == st["fork"] == dropped and st["new"] == 1
    assert 0 < st["gather"] < sum(op == "fw" for op, _ in SCRIPT), st
    assert kv.pages - kv.free_pages == st["pages_held"]
    paged.reset()                                 # frees the sequence, opens an empty one
    assert kv.free_pages == kv.pages and paged.length == 0
    assert_close(paged.forward([3, 4, 5])[-1], CausalLM(model).forward([3, 4, 5])[-1], f"{family} after reset")
    paged.free()
    assert_no_leak(kv)


# ------------------------------------------------------------------------------------------------
# (b) trees
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "opt", "llama"])
def test_tree_and_commit_path_equal_dense(family_models, family):
    """Two tree rounds (a random tree, then the full 64-node one) at block 4, each committing a path
    that is not a prefix of the pending entries, then a plain forward: same logits as the dense cache."""
    model = family_models[family]
    kv = make_kv()
    paged, dense = CausalLM(model, family, kv=kv, block=4), CausalLM(model, family)
    ctx = tokens(np.random.default_rng(1), paged.vocab, 9)
    for lm in (paged, dense):
        lm.forward(ctx)
    for rnd, (kind, seed) in enumerate((("random", 3), ("full", 4))):
        tr = make_tree(kind, paged.vocab, seed=seed)
        mask, depth = masks(tr)
        got, want = paged.forward_tree(tr.tokens, mask, depth), dense.forward_tree(tr.tokens, mask, depth)
        for v in range(tr.n):
            assert_close(got[v], want[v], f"{family} round {rnd} node {v}")
        assert_table(paged, kv)
        with pytest.raises(CacheStateError, match="pending"):
            paged.forward([1])
        leaf = max(range(tr.n), key=lambda v: (len(tr.path_to(v)), v))
        path = tr.path_to(leaf)
        assert path != list(range(len(path)))
        paged.commit_path(path)
        dense.commit_path(path)
        assert (paged.length, paged.pending) == (dense.length, 0)
        assert paged.cache.table.branch is None
        assert_table(paged, kv)
        nxt = [5, 17, 29]
        got, want = paged.forward(nxt), dense.forward(nxt)
        for r in range(len(nxt)):
            assert_close(got[r], want[r], f"{family} round {rnd} forward after commit_path, row {r}")
        assert_table(paged, kv)
    st = paged.cache.stats()
    assert st["moved"] > 0 and st["copy"] > 0, st
    # a tree rolled back instead of committed: the pending entries go with the branch
    tr = make_tree("wide", paged.vocab, seed=5)
    paged.forward_tree(tr.tokens, *masks(tr))
    dense.forward_tree(tr.tokens, *masks(tr))
    paged.rollback(paged.length - 2)
    dense.rollback(dense.length - 2)
    assert_close(paged.forward([8])[-1], dense.forward([8])[-1], f"{family} after tree rollback")
    paged.free()
    assert_no_leak(kv)


# ------------------------------------------------------------------------------------------------
# (d) decoding
# ------------------------------------------------------------------------------------------------
PROMPT_LENS = (9, 10, 11)
N_NEW = 24


def prompt_ids(vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(2024)
    return [tokens(rng, vocab, n) for n in PROMPT_LENS]


@pytest.mark.parametrize("family", ["gpt2", "opt"])
def test_speculative_decoding_identity(pairs, family):
    """Greedy gamma 4 with paged target (block 4) and paged draft (block 16) on one kvpage core equals
    target-only greedy decoding with DynamicCache, 3 prompts x 24 new tokens."""
    target_model, draft_model = pairs[family]
    kv = make_kv()
    target = CausalLM(target_model, "target", kv=kv, block=4)
    draft = drafters.ModelDraft(CausalLM(draft_model, "draft", kv=kv))
    ref = CausalLM(target_model, "reference")
    verifier = cores.golden_verifier()
    accepted = rejected = 0
    for prompt in prompt_ids(target.vocab):
        want = loop.generate(ref, None, None, prompt, GenConfig(N_NEW, 0, stop_at_eos=False)).tokens
        gen = loop.generate(target, draft, verifier, prompt, GenConfig(N_NEW, 4, stop_at_eos=False))
        assert gen.tokens == want, f"{family} prompt {prompt}"
        accepted += sum(r.n_accept for r in gen.rounds)
        rejected += sum(r.n_accept < r.g for r in gen.rounds)
        for lm in (target, draft.lm):
            assert_table(lm, kv)
    assert accepted > 0 and rejected > 0, "a weak test: no accepts or no rejections"
    for lm in (target, draft.lm):       # chains write in place; the two caches' pages interleave: gathered
        st = lm.cache.stats()
        assert st["copy"] == 0 and st["fork"] == st["commit"] and st["gather"] > 0, st
    target.free()
    draft.lm.free()
    assert_no_leak(kv)


def test_tree_decoding_identity(pairs):
    """Greedy tree speculation (EAGLE-style drafter on a paged draft, paged target) equals target-only."""
    target_model, draft_model = pairs["gpt2"]
    kv = make_kv()
    target = CausalLM(target_model, "target", kv=kv, block=4)
    drafter = trees.EagleTree(CausalLM(draft_model, "draft", kv=kv, block=4), budget=16, depth=6, topk=4)
    ref = CausalLM(target_model, "reference")
    verifier, masker = cores.golden_verifier(), cores.golden_masker()
    for prompt in prompt_ids(target.vocab)[:2]:
        want = loop.generate(ref, None, None, prompt, GenConfig(N_NEW, 0, stop_at_eos=False)).tokens
        gen = loop.generate(target, drafter, verifier, prompt,
                              GenConfig(N_NEW, 4, stop_at_eos=False, tree_budget=16), masker=masker)
        assert gen.tokens == want, f"tree prompt {prompt}"
        for lm in (target, drafter.lm):
            assert_table(lm, kv)
    assert drafter.lm.cache.stats()["moved"] > 0 or target.cache.stats()["moved"] > 0
    target.free()
    drafter.lm.free()
    assert_no_leak(kv)


# ------------------------------------------------------------------------------------------------
# (e) pool exhaustion
# ------------------------------------------------------------------------------------------------
def test_pool_exhaustion_raises(family_models):
    model = family_models["gpt2"]
    kv = make_kv(pages=16, max_blocks=64)
    paged, dense = CausalLM(model, "gpt2", kv=kv, block=2), CausalLM(model, "gpt2")
    rng = np.random.default_rng(9)
    ids = tokens(rng, paged.vocab, 20)
    paged.forward(ids)
    dense.forward(ids)
    more = tokens(rng, paged.vocab, 20)          # 10 more pages: the pool has 6
    with pytest.raises(KVPageError, match="POOL_EMPTY") as exc:
        paged.forward(more)
    assert exc.value.op == "WRITE"
    assert any("paged KV cache: writing row" in n and "--dense-kv" in n for n in exc.value.__notes__)
    assert (paged.length, paged.pending, paged.cache.get_seq_length()) == (20, 0, 20)
    assert kv.free_pages == 0
    # still usable: 4 more tokens fit in the rows the failed forward mapped, logits as the dense cache
    got, want = paged.forward(more[:4]), dense.forward(more[:4])
    for r in range(4):
        assert_close(got[r], want[r], f"after POOL_EMPTY, row {r}")
    paged.rollback(24)
    assert kv.free_pages == 16 - 12
    assert_table(paged, kv)
    paged.free()
    assert_no_leak(kv)


# ------------------------------------------------------------------------------------------------
# (f) the default paged cache serves the target's context
# ------------------------------------------------------------------------------------------------
def test_pick_block_serves_the_context():
    """The page size: the smallest power of two from 16 at which every cache of the pair holds the whole
    context (its rows within MAX_BLOCKS, all of them and a copied page each within PAGES)."""
    full = dict(pages=KV_MAX_PAGES, max_blocks=KV_MAX_BLOCKS)
    assert pick_block(1024, 2, **full) == 16                    # GPT-2: 64 rows, 130 pages
    assert pick_block(8192, 2, **full) == 32                    # SmolLM2: 16 would need 2 x 513 pages
    assert pick_block(8192, 1, **full) == 16                    # prompt lookup: one cache
    assert pick_block(8192, 2, **full, block=64) == 64          # a page size that fits is kept
    assert pick_block(None, 2, 256, 64) == kvlayout.DEFAULT_BLOCK   # the model does not say: unchecked
    with pytest.raises(KVCapacityError) as exc:
        pick_block(8192, 2, **full, block=16)
    for part in ("context of 8192 tokens", "512 rows", "2 x 513 = 1026 pages", f"{KV_MAX_PAGES} pages",
                 "--kv-block 32 or larger", "--dense-kv"):
        assert part in str(exc.value), (part, str(exc.value))
    with pytest.raises(KVCapacityError, match=f"no page size up to {kvlayout.BLOCK_MAX} tokens fits: use --dense-kv"):
        pick_block(10 ** 8, 2, **full)


@pytest.mark.parametrize("board", ["kv260", "pynq-z2"])
def test_each_boards_page_table_serves_the_demo_targets_context(board):
    """Every board's kvpage build holds the demo pair's two caches at SmolLM2's whole context (8,192 tokens);
    the KV260's 256-row tables take the page size the full 1,024 x 1,024 build takes for the pair."""
    from hwcontract.board import design
    kv = design(board).core_params()["kvpage"]
    on_board = dict(pages=kv["PAGES"], max_blocks=kv["MAX_BLOCKS"])
    block = pick_block(8192, 2, **on_board)
    assert kvlayout.fits(8192, 2, block, **on_board)
    if board == "kv260":
        assert block == pick_block(8192, 2, pages=KV_MAX_PAGES, max_blocks=KV_MAX_BLOCKS) == 32
        assert kv["MAX_BLOCKS"] < KV_MAX_BLOCKS          # not the largest build: the tables are its block RAM


@pytest.fixture(scope="module")
def long_pair(torch_threads):
    """The GPT-2 pair with 2,048 tokens of context, and a prompt text of more than 1,024 tokens."""
    target, draft = model_pairs.gpt2_pair_models(n_positions=2048)
    tok = loading.gpt2_tokenizer()
    pair = Pair(CausalLM(target, "target"), drafters.ModelDraft(CausalLM(draft, "draft")), tok,
                      "gpt2-2048", "gpt2-2048-draft")
    passages = model_pairs.prompts(200)
    text = ""
    while len(tok(text)["input_ids"]) <= 1100:
        text += passages.pop() + "\n"
    return pair, text


def test_long_prompt_with_the_default_paged_cache(long_pair):
    """A prompt of more than 1,024 tokens (the old default's limit: 64 rows of 16 tokens) on a 2,048-token
    model: the default paged cache decodes it token-identical to dense caches, and frees every page."""
    pair, text = long_pair
    job = {"prompts": [text], "max_new_tokens": 8, "gamma": 4, "sampling": {"temperature": 0.0}}
    kv = cores.golden_kvpage()
    paged = runner.execute(job, cores.golden_verifier(), pair, kv=kv)
    dense = runner.execute({**job, "kv": False}, cores.golden_verifier(), pair)
    assert len(paged["generations"][0]["prompt_ids"]) > 1024
    assert paged["generations"][0]["tokens"] == dense["generations"][0]["tokens"]
    assert len(paged["generations"][0]["tokens"]) == 8
    assert paged["kv"]["block"] == 16 and paged["kv"]["free_pages_after"] == kv.pages


def test_context_beyond_the_core_names_dense_kv(long_pair):
    """A page size at which the target's context does not fit the kvpage core is refused before the first
    forward, naming the numbers, a page size that fits and --dense-kv."""
    pair, text = long_pair
    job = {"prompts": [text], "max_new_tokens": 8, "sampling": {"temperature": 0.0}, "kv": {"block": 1}}
    kv = cores.golden_kvpage()
    with pytest.raises(KVCapacityError) as exc:
        runner.execute(job, cores.golden_verifier(), pair, kv=kv)
    for part in ("context of 2048 tokens", "2048 rows", f"{kv.max_blocks} rows", "--kv-block 16", "--dense-kv"):
        assert part in str(exc.value), (part, str(exc.value))
    assert kv.total_ops == 0, "the kvpage core was used before the refusal"


def test_pools_grow_as_pages_are_used(family_models):
    """On a full-size core (1,024 pages) the pools start small and double as higher pages are handed out;
    the logits stay those of the dense cache."""
    model = family_models["gpt2"]
    kv = make_kv(pages=KV_MAX_PAGES, max_blocks=KV_MAX_BLOCKS)
    paged, dense = CausalLM(model, "gpt2", kv=kv, block=2), CausalLM(model, "gpt2")
    rng = np.random.default_rng(12)
    sizes = []
    for n in (6, 40, 30):
        ids = tokens(rng, paged.vocab, n)
        got, want = paged.forward(ids), dense.forward(ids)
        for r in range(n):
            assert_close(got[r], want[r], f"row {r} of a {n}-token forward")
        sizes.append(paged.cache.layers[0].pool_pages)
        assert sizes[-1] > max(paged.cache.table.rows)
    assert sizes == [INITIAL_POOL_PAGES, 32, 64], sizes
    paged.free()
    assert_no_leak(kv)
