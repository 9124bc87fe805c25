"""Model pairs: a target, its draft source and their shared tokenizer, opened for a job; and the drafter a job asks
for. What a job is refused for before anything loads is :mod:`specdec.app.checks`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..decoding import calibration as calib
from ..decoding.base import Drafter
from ..decoding.drafters import ModelDraft, PromptLookup
from ..decoding.eagle import EagleDraft, HeadLM, LookupEagleDraft, load_head
from ..decoding.sequoia import SequoiaTree
from ..decoding.trees import EagleTree, StaticTree, default_paths
from ..errors import OptionError
from ..kv.layout import pick_block
from ..models import loading
from ..models.hotvocab import hot_head_model, hot_ids
from ..models.int8draft import demo_draft, engine_modules
from ..models.int8eagle import STATS_FILE, Int8Head, quantize_head
from ..models.lm import CausalLM, context_length
from .checks import HOT_VOCAB, check_budget, check_kv_fits, check_sources, draft_name, eagle_dir, head_dir
from .job import KV_AUTO, LOOKUP_SUFFIX, PROMPT_LOOKUP, Job, TreeSpec, split_lookup


@dataclass(frozen=True)
class Pair:
    """A target, its draft source and their shared tokenizer."""

    target: CausalLM
    draft: ModelDraft | PromptLookup | EagleDraft
    tokenizer: object
    target_name: str
    draft_name: str

    @property
    def vocab(self) -> int:
        return self.target.vocab


def open_pair(target: str | None = None, draft: str | None = None, draft_vocab: int | None = None,
              draft_engine: str = "host") -> Pair:
    """Load a target and its draft (a model, an EAGLE head (:mod:`specdec.decoding.eagle`, by directory or by name
    under models/), ``<head>+lookup`` (:class:`~specdec.decoding.eagle.LookupEagleDraft`: prompt lookup where it
    matches, the head elsewhere) or ``"prompt-lookup"``), checking they share a vocabulary.
    ``draft_vocab``: the draft's LM head keeps only that many most frequent tokens (:mod:`specdec.models.hotvocab`;
    an EAGLE head the first that many of its own hot tokens).
    ``draft_engine="fabric"``: the draft's linear layers run on the int8 draft engine's golden model
    (:mod:`specdec.models.int8draft`, calibrated on the corpus's training passages; an EAGLE head's layer, its
    int8 KV cache and its hot head as :mod:`specdec.models.int8eagle` runs them).

    Raises
    ------
    ModelError
        A model that cannot be loaded, or two vocabularies.
    OptionError
        No draft given for a target that has no default draft; a path that names no model directory.
    """
    target, draft = check_sources(target, draft, draft_vocab, draft_engine)
    where = head_dir(draft)             # None for prompt lookup and draft models
    t_model, t_tok = loading.load(target, "target")
    t_lm = CausalLM(t_model, "target")
    if draft == PROMPT_LOOKUP:
        return Pair(t_lm, PromptLookup(t_lm.vocab), t_tok, target, draft)
    if where is not None:
        head = load_head(where, t_model, draft_vocab)
        if draft_engine == "fabric":
            head = quantize_head(head, t_model, t_tok, stats=where / STATS_FILE)
        cls = LookupEagleDraft if split_lookup(draft)[1] else EagleDraft
        return Pair(t_lm, cls(head, t_lm), t_tok, target, draft_name(draft, draft_vocab, draft_engine))
    # a pair saved with one tokenizer reads it once (the draft's is only compared with the target's)
    d_model, d_tok = loading.load(draft, "draft", t_tok if loading.same_tokenizer(target, draft) else None)
    vocab = loading.check_pair(t_model, t_tok, d_model, d_tok, target, draft)
    if draft_vocab is not None:
        d_model = hot_head_model(d_model, hot_ids(t_tok, draft_vocab, vocab))
    if draft_engine == "fabric":
        d_model = demo_draft(d_model.float(), t_tok)
    return Pair(t_lm, ModelDraft(CausalLM(d_model, "draft")), t_tok, target,
                draft_name(draft, draft_vocab, draft_engine))


def check_serves(pair: Pair, job: Job) -> None:
    """ValueError where a loaded ``pair``, given for ``job``, contradicts the draft options the job states: prompt
    lookup, a hot vocabulary or a draft on the draft engine (int8 layers), that the pair's draft is not (the pair
    would run, and the result describe a draft the job did not ask for). A pair given with another draft than the
    job's draft model is the caller's choice (a test's int8 twin, prompt lookup for a model job)."""
    if job.draft == PROMPT_LOOKUP and not isinstance(pair.draft, PromptLookup):
        raise ValueError(f"the job asks for draft {PROMPT_LOOKUP!r}, the pair given drafts with {pair.draft_name!r}: "
                         "give a prompt-lookup pair, or no pair (the job's models are then loaded)")
    if job.draft_engine == "fabric" and not fabric_draft(pair):
        raise ValueError(f"the job runs its draft on the draft engine (draft_engine 'fabric'), the pair given drafts "
                         f"with {pair.draft_name!r}, which has no int8 engine layers: give a pair whose draft "
                         "int8draft.quantize made, or no pair (the job's models are then loaded)")
    if job.draft_vocab is not None and HOT_VOCAB.format(job.draft_vocab) not in pair.draft_name:
        raise ValueError(f"the job asks for a draft with a hot vocabulary of {job.draft_vocab}, the pair given drafts "
                         f"with {pair.draft_name!r}: give pairs.open_pair(..., draft_vocab={job.draft_vocab}), or "
                         "no pair")


def fabric_draft(pair: Pair) -> bool:
    """Whether ``pair`` drafts on the draft engine: a draft model with int8 engine layers, or an int8 EAGLE head."""
    if isinstance(pair.draft, EagleDraft):
        return isinstance(pair.draft.head, Int8Head)
    return isinstance(pair.draft, ModelDraft) and bool(engine_modules(pair.draft.lm.model))


def open_job_pair(job: Job, kv=None) -> Pair:
    """The pair of ``job`` (:func:`open_pair` with its models and draft options). With ``kv``, the kvpage core
    whose pages the caches will take (:func:`paged_pair`), a ``kv_block`` the target's context cannot take is
    refused first, from its config, before anything loads (:func:`check_kv_fits`)."""
    check_budget(job)
    if kv is not None and job.kv_block is not None:
        check_kv_fits(job.target, job.draft, kv.pages, kv.max_blocks, job.kv_block, job.draft_engine)
    return open_pair(job.target, job.draft, job.draft_vocab, job.draft_engine)


def paged_pair(pair: Pair, kv, block: int | str = KV_AUTO) -> Pair:
    """``pair`` with both models' caches in page pools whose pages the kvpage core ``kv`` assigns, ``block``
    tokens a page (the same weights; new :class:`~specdec.models.lm.CausalLM` wrappers). ``"auto"``: the
    smallest page size from 16 on at which the target's whole context fits the core
    (:func:`specdec.kv.layout.pick_block`); ``pair.target.block`` tells which.

    Raises
    ------
    KVCapacityError
        The target's context does not fit the core at ``block`` (at any page size, for ``"auto"``): the
        message names the numbers, a page size that fits, and ``--dense-kv``.
    """
    # caches sharing the core's pool: a draft model's, and an int8 EAGLE head's (its one layer's pages, the
    # tree-attention unit's context); the float head's cache stays on the host
    shared = isinstance(pair.draft, ModelDraft) or (isinstance(pair.draft, EagleDraft)
                                                    and isinstance(pair.draft.head, Int8Head))
    sequences = 2 if shared else 1
    block = pick_block(context_length(pair.target.model), sequences, kv.pages, kv.max_blocks,
                       None if block == KV_AUTO else block)
    target = CausalLM(pair.target.model, pair.target.name, kv=kv, block=block)
    if isinstance(pair.draft, ModelDraft):
        draft = ModelDraft(CausalLM(pair.draft.lm.model, pair.draft.lm.name, kv=kv, block=block))
    elif isinstance(pair.draft, EagleDraft):       # it reads the new target's features (prompt lookup first, too)
        draft = type(pair.draft)(pair.draft.head, target)
    else:
        draft = PromptLookup(target.vocab, pair.draft.max_ngram)
    return dataclasses.replace(pair, target=target, draft=draft)


def encode(tokenizer, text: str) -> list[int]:
    """The token ids of a prompt text (at least one)."""
    if not isinstance(text, str) or not text:
        raise OptionError("prompt", text, "non-empty text")
    ids = tokenizer(text)["input_ids"]
    if not ids:
        raise OptionError("prompt", text, "text that encodes to at least one token")
    return [int(t) for t in ids]


def drafter(pair: Pair, tree: TreeSpec | None, confidence: float | None = None) -> Drafter:
    """The job's drafter: the pair's draft source for chains (a draft model's chain stopping after a token below
    ``confidence``, when given), or the tree builder ``tree`` over its draft model (Sequoia's acceptance vector
    must be set: see :func:`calibrated`)."""
    if tree is None:
        if confidence is not None:
            if isinstance(pair.draft, EagleDraft):      # <head>+lookup: the confidence stops the head's chains
                return type(pair.draft)(pair.draft.head, pair.target, confidence)
            if not isinstance(pair.draft, ModelDraft):
                raise OptionError("draft_confidence", confidence, "none with prompt lookup (no draft probabilities)")
            return ModelDraft(pair.draft.lm, confidence)
        return pair.draft
    lm = draft_lm(pair)
    if tree.kind == "static":
        return StaticTree(lm, tree.paths or default_paths(tree.budget, tree.depth))
    if tree.kind == "eagle":
        if tree.scores == "calibrated" and tree.calibration is None:
            raise ValueError("a calibrated EAGLE tree needs its calibration: pass the spec through calibrated() "
                             "first")
        return EagleTree(lm, tree.budget, tree.depth, tree.topk, tree.expand,
                         calib.Calibration(tree.calibration) if tree.calibration else None)
    if tree.acceptance is None:
        raise ValueError("a Sequoia tree needs its acceptance vector: pass the spec through calibrated() first")
    return SequoiaTree(lm, tree.acceptance, tree.budget, tree.depth)


def other_draft(pair: Pair, name: str) -> Drafter:
    """A further chain drafter over ``pair``'s target, for a run that compares drafts side by side: prompt lookup,
    an EAGLE head (by name or directory, over the target's features), or ``<head>+lookup``
    (:class:`~specdec.decoding.eagle.LookupEagleDraft`). OptionError for a draft model (it would
    need its own cache and kvpage sequence) or a name that is neither."""
    if name == PROMPT_LOOKUP:
        return PromptLookup(pair.target.vocab)
    base, both = split_lookup(name)
    head = eagle_dir(base)
    if head is None:
        raise OptionError("also_drafts", name, f"{PROMPT_LOOKUP}, an EAGLE head (a name under models/ or a "
                                               f"directory) or a head's name with {LOOKUP_SUFFIX!r} (prompt lookup "
                                               "first, the head elsewhere); a draft model runs as --draft")
    cls = LookupEagleDraft if both else EagleDraft
    return cls(load_head(head, pair.target.model), pair.target)


def draft_lm(pair: Pair):
    """What the tree builders expand: the draft model, or an EAGLE head over the target's features
    (:class:`specdec.decoding.eagle.HeadLM`). Prompt lookup builds no trees (OptionError)."""
    if isinstance(pair.draft, EagleDraft):
        return HeadLM(pair.draft.head, pair.target)
    if not isinstance(pair.draft, ModelDraft):
        raise OptionError("draft", pair.draft_name, "a draft model or an EAGLE head for tree speculation (prompt "
                                                    "lookup builds no trees)")
    return pair.draft.lm
