"""What a job can be refused for before its models load: the names it resolves to, its sources, its draft options,
its token budget and its KV pages, each named in an OptionError or KVCapacityError (the CLI's exit 2)."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..decoding.eagle import head_fusion_layers, head_hot_vocab, is_head_dir
from ..decoding.loop import check_room
from ..errors import OptionError
from ..kv.layout import pick_block
from ..models import loading
from ..models.hotvocab import check_size
from .job import KV_AUTO, LOOKUP_SUFFIX, PROMPT_LOOKUP, Job, split_lookup


#: How a draft's name says its hot vocabulary (:func:`draft_name`; :func:`check_serves` looks for it).
HOT_VOCAB = "(hot vocabulary {})"


def draft_name(draft: str, draft_vocab: int | None = None, draft_engine: str = "host") -> str:
    """The name a pair gives its draft model ``draft`` run with a hot vocabulary of ``draft_vocab`` tokens and on
    ``draft_engine`` (the results report it; :func:`check_serves` reads the hot vocabulary from it)."""
    name = draft if draft_vocab is None else f"{draft} {HOT_VOCAB.format(draft_vocab)}"
    return name if draft_engine == "host" else f"{name} on the int8 draft engine"


def eagle_dir(draft: str):
    """The directory of the EAGLE head ``draft`` names (a directory, or the name of a model shipped with the
    package: :func:`specdec.paths.model_dir`), else None."""
    shipped = [paths.model_dir(draft)] if draft and Path(draft).name == draft else []
    for path in (*shipped, Path(draft)):
        if is_head_dir(path):
            return path
    return None


def head_dir(draft: str):
    """The directory of the EAGLE head ``draft`` drafts with: an EAGLE head's (:func:`eagle_dir`) or, for
    ``<head>+lookup`` (:func:`~specdec.app.job.split_lookup`), the head's; None for prompt lookup or a draft
    model. OptionError where the part before the suffix is no EAGLE head."""
    base, lookup = split_lookup(draft)
    head = eagle_dir(base)
    if lookup and head is None:
        raise OptionError("draft", draft, f"an EAGLE head's name or directory before {LOOKUP_SUFFIX!r} (prompt "
                                          f"lookup first, the head elsewhere); {base!r} is none")
    return head


def resolve_names(target: str | None, draft: str | None) -> tuple[str, str]:
    """(target, draft) with the defaults filled in: the demo target, the target's usual draft. Without a draft,
    a target that has no usual one is an OptionError naming ``draft`` (a bad argument), once
    :func:`specdec.models.loading.check_source` has found the target itself (a missing target is named first)."""
    target = target or loading.DEMO_TARGET
    if draft is None:
        draft = loading.DEFAULT_DRAFT.get(target)
        if draft is None:
            loading.check_source(target, "target")   # a target that is not there is named as such first
            raise OptionError("draft", None, f"a draft model's hub id or directory, or {PROMPT_LOOKUP} (target "
                                             f"{target!r} has no default draft)")
    return target, draft


def check_sources(target: str | None, draft: str | None, draft_vocab: int | None = None,
                  draft_engine: str = "host") -> tuple[str, str]:
    """:func:`resolve_names`, then :func:`specdec.models.loading.check_source` on the target and on a draft model (not
    prompt lookup, not an EAGLE head): a model this machine cannot load is refused before anything loads. So are
    the draft options the draft cannot take: a ``draft_vocab`` beyond an EAGLE head's own hot vocabulary (it keeps
    the first that many of its hot tokens), and a ``draft_vocab`` beyond a draft model's vocabulary where its saved
    config tells
    (:func:`specdec.models.loading.config_vocab_size`; otherwise :func:`open_pair` refuses it once the models load)."""
    target, draft = resolve_names(target, draft)
    loading.check_source(target, "target")
    if draft == PROMPT_LOOKUP:
        return target, draft
    head = head_dir(draft)
    if head is not None:
        if draft_engine == "fabric" and head_fusion_layers(head):
            raise OptionError("draft_engine", draft_engine, f"host with the EAGLE-3 head {draft!r}: the int8 engine "
                                                            "path runs EAGLE-1 heads (no fusion layer)")
        if draft_vocab is not None:
            most = head_hot_vocab(head)
            if isinstance(draft_vocab, bool) or not isinstance(draft_vocab, int) or not 1 <= draft_vocab <= most:
                raise OptionError("draft_vocab", draft_vocab, f"1 to {most} with the EAGLE head {draft!r} (the first "
                                                              "that many of its hot tokens, the most frequent)")
        return target, draft
    loading.check_source(draft, "draft")
    vocab = loading.config_vocab_size(draft) if draft_vocab is not None else None
    if vocab is not None:
        check_size(draft_vocab, vocab)
    return target, draft


def check_kv_fits(target: str | None, draft: str | None, pages: int, max_blocks: int,
                  block: int | str = KV_AUTO, draft_engine: str = "host") -> None:
    """The check of :func:`paged_pair` before the pair loads: KVCapacityError when the target's context (from
    its config, :func:`specdec.models.loading.config_context_length`) does not fit a kvpage core of ``pages`` pages
    and ``max_blocks`` rows at ``block``. Nothing is checked when the config cannot be read without loading
    the model."""
    target, draft = resolve_names(target, draft)
    # as paged_pair counts them: a draft model's cache shares the pool, and so does an EAGLE head's on the fabric;
    # prompt lookup and an EAGLE head on the host have none
    own = draft == PROMPT_LOOKUP or (head_dir(draft) is not None and draft_engine != "fabric")
    sequences = 1 if own else 2
    pick_block(loading.config_context_length(target), sequences, pages, max_blocks,
               None if block == KV_AUTO else block)


def check_budget(job: Job) -> None:
    """:func:`specdec.decoding.loop.check_room` before anything loads, the prompt not yet tokenized: a token budget
    (and a tree round's depth past it) that no prompt fits the target's context (from its config,
    :func:`specdec.models.loading.config_context_length`; nothing is checked where that needs the model)."""
    target, _ = resolve_names(job.target, job.draft)
    check_room(job.config(), loading.config_context_length(target))


def check_job(job: Job) -> None:
    """Everything about ``job`` that can be refused before its models load: :func:`check_sources` with its draft
    options, and :func:`check_budget` (for a run whose models load elsewhere, or after a step to keep cheap)."""
    check_sources(job.target, job.draft, job.draft_vocab, job.draft_engine)
    check_budget(job)
