"""Model pairs: a target, its draft source and their shared tokenizer; and the drafter a job asks for."""
from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from pathlib import Path

from . import models, paths
from .decode import Drafter, ModelDraft, PromptLookup, check_room, eos_ids
from .eagle import EagleDraft
from .errors import OptionError
from .int8draft import engine_modules
from .job import KV_AUTO, PROMPT_LOOKUP, Job, TreeSpec
from .kvlayout import pick_block

#: Seed of the corpus passages Sequoia's acceptance vector is measured on (not the benchmarks' held-out ones).
CALIBRATION_SEED = 4321


@dataclass(frozen=True)
class Pair:
    """A target, its draft source and their shared tokenizer."""

    target: models.CausalLM
    draft: ModelDraft | PromptLookup | EagleDraft
    tokenizer: object
    target_name: str
    draft_name: str

    @property
    def vocab(self) -> int:
        return self.target.vocab


def open_pair(target: str | None = None, draft: str | None = None, draft_vocab: int | None = None,
              draft_engine: str = "host") -> Pair:
    """Load a target and its draft (a model, an EAGLE head (:mod:`specdec.eagle`, by directory or by name
    under models/) or ``"prompt-lookup"``), checking they share a vocabulary.
    ``draft_vocab``: the draft's LM head keeps only that many most frequent tokens (:mod:`specdec.hotvocab`).
    ``draft_engine="fabric"``: the draft's linear layers run on the int8 draft engine's golden model
    (:mod:`specdec.int8draft`, calibrated on the corpus's training passages).

    Raises
    ------
    ModelError
        A model that cannot be loaded, or two vocabularies.
    OptionError
        No draft given for a target that has no default draft; a path that names no model directory.
    """
    target, draft = check_sources(target, draft, draft_vocab, draft_engine)
    head_dir = eagle_dir(draft) if draft != PROMPT_LOOKUP else None
    t_model, t_tok = models.load(target, "target")
    t_lm = models.CausalLM(t_model, "target")
    if draft == PROMPT_LOOKUP:
        return Pair(t_lm, PromptLookup(t_lm.vocab), t_tok, target, draft)
    if head_dir is not None:
        from .eagle import load_head
        return Pair(t_lm, EagleDraft(load_head(head_dir, t_model), t_lm), t_tok, target, draft)
    # a pair saved with one tokenizer reads it once (the draft's is only compared with the target's)
    d_model, d_tok = models.load(draft, "draft", t_tok if models.same_tokenizer(target, draft) else None)
    vocab = models.check_pair(t_model, t_tok, d_model, d_tok, target, draft)
    if draft_vocab is not None:
        from .hotvocab import hot_head_model, hot_ids
        d_model = hot_head_model(d_model, hot_ids(t_tok, draft_vocab, vocab))
    if draft_engine == "fabric":
        from .int8draft import demo_draft
        d_model = demo_draft(d_model.float(), t_tok)
    return Pair(t_lm, ModelDraft(models.CausalLM(d_model, "draft")), t_tok, target,
                draft_name(draft, draft_vocab, draft_engine))


#: How a draft's name says its hot vocabulary (:func:`draft_name`; :func:`check_serves` looks for it).
_HOT_VOCAB = "(hot vocabulary {})"


def draft_name(draft: str, draft_vocab: int | None = None, draft_engine: str = "host") -> str:
    """The name a pair gives its draft model ``draft`` run with a hot vocabulary of ``draft_vocab`` tokens and on
    ``draft_engine`` (the results report it; :func:`check_serves` reads the hot vocabulary from it)."""
    name = draft if draft_vocab is None else f"{draft} {_HOT_VOCAB.format(draft_vocab)}"
    return name if draft_engine == "host" else f"{name} on the int8 draft engine"


def eagle_dir(draft: str):
    """The directory of the EAGLE head ``draft`` names (a directory, or the name of a model shipped with the
    package: :func:`specdec.paths.model_dir`), else None."""
    from .eagle import is_head_dir
    shipped = [paths.model_dir(draft)] if draft and Path(draft).name == draft else []
    for path in (*shipped, Path(draft)):
        if is_head_dir(path):
            return path
    return None


def check_sources(target: str | None, draft: str | None, draft_vocab: int | None = None,
                  draft_engine: str = "host") -> tuple[str, str]:
    """:func:`resolve_names`, then :func:`specdec.models.check_source` on the target and on a draft model (not
    prompt lookup, not an EAGLE head): a model this machine cannot load is refused before anything loads. So are
    the draft options the draft cannot take: ``draft_vocab`` or the ``fabric`` engine with an EAGLE head, and a
    ``draft_vocab`` beyond the draft's vocabulary where its saved config tells
    (:func:`specdec.models.config_vocab_size`; otherwise :func:`open_pair` refuses it once the models load)."""
    target, draft = resolve_names(target, draft)
    models.check_source(target, "target")
    if draft == PROMPT_LOOKUP:
        return target, draft
    if eagle_dir(draft) is not None:
        if draft_vocab is not None:
            raise OptionError("draft_vocab", draft_vocab, f"none with the EAGLE head {draft!r} (its hot vocabulary "
                                                          "is fixed by its training)")
        if draft_engine != "host":
            raise OptionError("draft_engine", draft_engine, f"'host' with the EAGLE head {draft!r}")
        return target, draft
    models.check_source(draft, "draft")
    vocab = models.config_vocab_size(draft) if draft_vocab is not None else None
    if vocab is not None:
        from .hotvocab import check_size
        check_size(draft_vocab, vocab)
    return target, draft


def resolve_names(target: str | None, draft: str | None) -> tuple[str, str]:
    """(target, draft) with the defaults filled in: the demo target, the target's usual draft. Without a draft,
    a target that has no usual one is an OptionError naming ``draft`` (a bad argument), once
    :func:`specdec.models.check_source` has found the target itself (a missing target is named first)."""
    target = target or models.DEMO_TARGET
    if draft is None:
        draft = models.DEFAULT_DRAFT.get(target)
        if draft is None:
            models.check_source(target, "target")   # a target that is not there is named as such first
            raise OptionError("draft", None, f"a draft model's hub id or directory, or {PROMPT_LOOKUP} (target "
                                             f"{target!r} has no default draft)")
    return target, draft


def check_kv_fits(target: str | None, draft: str | None, pages: int, max_blocks: int,
                  block: int | str = KV_AUTO) -> None:
    """The check of :func:`paged_pair` before the pair loads: KVCapacityError when the target's context (from
    its config, :func:`specdec.models.config_context_length`) does not fit a kvpage core of ``pages`` pages
    and ``max_blocks`` rows at ``block``. Nothing is checked when the config cannot be read without loading
    the model."""
    target, draft = resolve_names(target, draft)
    # as paged_pair counts them: a draft model's cache shares the pool; prompt lookup and an EAGLE head have none
    sequences = 1 if draft == PROMPT_LOOKUP or eagle_dir(draft) is not None else 2
    pick_block(models.config_context_length(target), sequences, pages, max_blocks,
               None if block == KV_AUTO else block)


def check_budget(job: Job) -> None:
    """:func:`specdec.decode.check_room` before anything loads, the prompt not yet tokenized: a token budget (and a
    tree round's depth past it) that no prompt fits the target's context (from its config,
    :func:`specdec.models.config_context_length`; nothing is checked where that needs the model)."""
    target, _ = resolve_names(job.target, job.draft)
    check_room(job.config(), models.config_context_length(target))


def check_job(job: Job) -> None:
    """Everything about ``job`` that can be refused before its models load: :func:`check_sources` with its draft
    options, and :func:`check_budget` (for a run whose models load elsewhere, or after a step to keep cheap)."""
    check_sources(job.target, job.draft, job.draft_vocab, job.draft_engine)
    check_budget(job)


def check_serves(pair: Pair, job: Job) -> None:
    """ValueError where a loaded ``pair``, given for ``job``, contradicts the draft options the job states: prompt
    lookup, a hot vocabulary or a draft on the draft engine (int8 layers), that the pair's draft is not (the pair would run, and the result describe a draft
    the job did not ask for). A pair given with another draft than the job's draft model is the caller's choice
    (a test's int8 twin, prompt lookup for a model job)."""
    if job.draft == PROMPT_LOOKUP and not isinstance(pair.draft, PromptLookup):
        raise ValueError(f"the job asks for draft {PROMPT_LOOKUP!r}, the pair given drafts with {pair.draft_name!r}: "
                         "give a prompt-lookup pair, or no pair (the job's models are then loaded)")
    if job.draft_engine == "fabric" and not (isinstance(pair.draft, ModelDraft)
                                             and engine_modules(pair.draft.lm.model)):
        raise ValueError(f"the job runs its draft on the draft engine (draft_engine 'fabric'), the pair given drafts "
                         f"with {pair.draft_name!r}, which has no int8 engine layers: give a pair whose draft "
                         "int8draft.quantize made, or no pair (the job's models are then loaded)")
    if job.draft_vocab is not None and _HOT_VOCAB.format(job.draft_vocab) not in pair.draft_name:
        raise ValueError(f"the job asks for a draft with a hot vocabulary of {job.draft_vocab}, the pair given drafts "
                         f"with {pair.draft_name!r}: give pairs.open_pair(..., draft_vocab={job.draft_vocab}), or "
                         "no pair")


def open_job_pair(job: Job, kv=None) -> Pair:
    """The pair of ``job`` (:func:`open_pair` with its models and draft options). With ``kv``, the kvpage core
    whose pages the caches will take (:func:`paged_pair`), a ``kv_block`` the target's context cannot take is
    refused first, from its config, before anything loads (:func:`check_kv_fits`)."""
    check_budget(job)
    if kv is not None and job.kv_block is not None:
        check_kv_fits(job.target, job.draft, kv.pages, kv.max_blocks, job.kv_block)
    return open_pair(job.target, job.draft, job.draft_vocab, job.draft_engine)


def paged_pair(pair: Pair, kv, block: int | str = KV_AUTO) -> Pair:
    """``pair`` with both models' caches in page pools whose pages the kvpage core ``kv`` assigns, ``block``
    tokens a page (the same weights; new :class:`~specdec.models.CausalLM` wrappers). ``"auto"``: the
    smallest page size from 16 on at which the target's whole context fits the core
    (:func:`specdec.kvlayout.pick_block`); ``pair.target.block`` tells which.

    Raises
    ------
    KVCapacityError
        The target's context does not fit the core at ``block`` (at any page size, for ``"auto"``): the
        message names the numbers, a page size that fits, and ``--dense-kv``.
    """
    sequences = 2 if isinstance(pair.draft, ModelDraft) else 1         # caches sharing the core's pool (an
    # EAGLE head's one-layer cache stays on the host)
    block = pick_block(models.context_length(pair.target.model), sequences, kv.pages, kv.max_blocks,
                       None if block == KV_AUTO else block)
    target = models.CausalLM(pair.target.model, pair.target.name, kv=kv, block=block)
    if isinstance(pair.draft, ModelDraft):
        draft = ModelDraft(models.CausalLM(pair.draft.lm.model, pair.draft.lm.name, kv=kv, block=block))
    elif isinstance(pair.draft, EagleDraft):       # it reads the new target's features
        draft = EagleDraft(pair.draft.head, target)
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
            if isinstance(pair.draft, EagleDraft):
                return EagleDraft(pair.draft.head, pair.target, confidence)
            if not isinstance(pair.draft, ModelDraft):
                raise OptionError("draft_confidence", confidence, "none with prompt lookup (no draft probabilities)")
            return ModelDraft(pair.draft.lm, confidence)
        return pair.draft
    from . import tree as trees
    lm = draft_lm(pair)
    if tree.kind == "static":
        return trees.StaticTree(lm, tree.paths or trees.default_paths(tree.budget, tree.depth))
    if tree.kind == "eagle":
        if tree.scores == "calibrated" and tree.calibration is None:
            raise ValueError("a calibrated EAGLE tree needs its calibration: pass the spec through calibrated() "
                             "first")
        return trees.EagleTree(lm, tree.budget, tree.depth, tree.topk, tree.expand,
                               trees.Calibration(tree.calibration) if tree.calibration else None)
    if tree.acceptance is None:
        raise ValueError("a Sequoia tree needs its acceptance vector: pass the spec through calibrated() first")
    return trees.SequoiaTree(lm, tree.acceptance, tree.budget, tree.depth)


def draft_lm(pair: Pair):
    """What the tree builders expand: the draft model, or an EAGLE head over the target's features
    (:class:`specdec.eagle.HeadLM`). Prompt lookup builds no trees (OptionError)."""
    if isinstance(pair.draft, EagleDraft):
        from .eagle import HeadLM
        return HeadLM(pair.draft.head, pair.target)
    if not isinstance(pair.draft, ModelDraft):
        raise OptionError("draft", pair.draft_name, "a draft model or an EAGLE head for tree speculation (prompt "
                                                    "lookup builds no trees)")
    return pair.draft.lm


def calibrated(pair: Pair, tree: TreeSpec | None) -> TreeSpec | None:
    """``tree`` with what its builder measures on ``pair`` filled in: Sequoia's acceptance vector, or a
    calibrated EAGLE tree's calibration, where the spec gives none (other trees unchanged)."""
    if tree is None:
        return tree
    if tree.kind == "sequoia" and tree.acceptance is None:
        return dataclasses.replace(tree, acceptance=tuple(calibrate(pair, tree.topk, tree.calibration_passages)))
    if tree.kind == "eagle" and tree.scores == "calibrated" and tree.calibration is None:
        return dataclasses.replace(tree, calibration=calibrate_scores(pair, tree.topk, tree.calibration_passages).coef)
    return tree


#: Calibration contexts already generated, per target model: a bench measuring both a Sequoia vector and an EAGLE
#: calibration generates the target's continuations once.
_CONTEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def calibration_contexts(pair: Pair, n_passages: int, prompt_tokens: int = 48,
                         new_tokens: int = 48) -> list[list[int]]:
    """Where a tree builder's statistics are measured: the target's own greedy continuations, ``new_tokens``
    after the first ``prompt_tokens`` of ``n_passages`` corpus passages (training passages, not the benchmark's
    held-out prompts). Score from position ``prompt_tokens - 1`` on (the continuation's). Generated once per
    target model and arguments."""
    key = (n_passages, prompt_tokens, new_tokens)
    done = _CONTEXTS.setdefault(pair.target.model, {})
    if key not in done:
        done[key] = _generate_contexts(pair, n_passages, prompt_tokens, new_tokens)
    return [list(c) for c in done[key]]


#: Calibration passages generated together: a CPU step over a few rows costs about one over a single row (the
#: weights are read once), so eight passages take about the time of two.
CALIBRATION_BATCH = 16


def _generate_contexts(pair: Pair, n_passages: int, prompt_tokens: int, new_tokens: int) -> list[list[int]]:
    """The passages' greedy continuations, :data:`CALIBRATION_BATCH` at a time: left-padded and masked, each row
    cut after its first end-of-sequence token, as a generation of that passage alone ends."""
    import torch
    from . import corpus
    texts = corpus.sample_passages(n_passages, held_out=False, seed=CALIBRATION_SEED)
    prompts = [encode(pair.tokenizer, t)[:prompt_tokens] for t in texts]
    model, pad, eos = pair.target.model, pair.tokenizer.pad_token_id, eos_ids(pair.target)
    contexts = []
    for first in range(0, len(prompts), CALIBRATION_BATCH):
        batch = prompts[first:first + CALIBRATION_BATCH]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                                 pad_token_id=pad)
        for p, row in zip(batch, out[:, width:].tolist()):
            end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            contexts.append(p + row[:end])
    return contexts


def calibrate(pair: Pair, k: int, n_passages: int, prompt_tokens: int = 48) -> list[float]:
    """Sequoia's acceptance vector (ranks 0..k-1) for the pair, on :func:`calibration_contexts`."""
    from . import tree
    contexts = calibration_contexts(pair, n_passages, prompt_tokens)
    return [float(a) for a in tree.measure_acceptance(pair.target, draft_lm(pair), contexts, k,
                                                      skip=prompt_tokens - 1)]


def calibrate_scores(pair: Pair, k: int, n_passages: int, prompt_tokens: int = 48):
    """A calibrated EAGLE tree's :class:`~specdec.tree.Calibration` (the draft's ranks 0..k-1) for the pair, on
    :func:`calibration_contexts`."""
    from . import tree
    contexts = calibration_contexts(pair, n_passages, prompt_tokens)
    return tree.measure_calibration(pair.target, draft_lm(pair), contexts, k, skip=prompt_tokens - 1)
