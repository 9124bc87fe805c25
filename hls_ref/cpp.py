"""Compile and load the HLS-style C++ references (``hls_ref/cpp/<core>.cpp``) through ctypes.

:func:`load` builds ``build/cpp/lib<core>-<digest>.so`` once, where the digest covers the source, every
header under ``hls_ref/include`` and the compiler flags, so an edit to any of them rebuilds and an
unchanged tree reuses the cached library. Typed wrappers per core (:func:`rng_run`, :func:`verifier_round`,
:func:`verifier_tree_round`, :func:`treemask_run`, :class:`KvpageCpp`, :func:`kvpage_id_hash`,
:func:`draftengine_run`, :func:`treeattn_run`, :func:`vecunit_run`) sit on top.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from hls_ref import treeattn as golden_treeattn
from hls_ref import treemask as golden_treemask
from hls_ref import vecunit as golden_vecunit
from hls_ref import verifier as golden_verifier
from hwcontract import params as hwparams
from hwcontract.formats import (EH_SIZE, EL_SIZE, EXP_LIMIT, VU_OP, VU_SIN_STEPS, draft_tokens, integers_in,
                                vu_sigmoid_table, vu_frame_bytes)
from hwcontract.regmap import KV_SLOTS, TREE_MAX_NODES, VERIFIER_MAX_GAMMA, VOCAB_LIMIT, core, flag, integer
from hwcontract.tree import check_field_widths, node_entries

ROOT = Path(__file__).resolve().parents[1]
SRC_DIR = ROOT / "hls_ref" / "cpp"
INCLUDE_DIR = ROOT / "hls_ref" / "include"
BUILD_DIR = ROOT / "build" / "cpp"
CXX = "g++"
CXXFLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wno-unknown-pragmas")

_u32p = ctypes.POINTER(ctypes.c_uint32)


class CompileError(RuntimeError):
    """The C++ compiler failed; the message carries its command line and output."""


# ------------------------------------------------------------------------------------------------
# Generic: compile, cache, load
# ------------------------------------------------------------------------------------------------

def source(core: str) -> Path:
    """The C++ source of ``core``; a clear error lists the available ones."""
    path = SRC_DIR / f"{core}.cpp"
    if not path.is_file():
        known = sorted(p.stem for p in SRC_DIR.glob("*.cpp"))
        raise FileNotFoundError(f"no C++ reference for core {core!r} at {path}; available: {known}")
    return path


def digest(core: str) -> str:
    """12 hex digits of SHA-1 over the source, the headers (name and content) and the flags."""
    h = hashlib.sha1()
    h.update(source(core).read_bytes())
    for hdr in sorted(INCLUDE_DIR.glob("*.h")):
        h.update(b"\0" + hdr.name.encode() + b"\0" + hdr.read_bytes())
    h.update("\0".join((CXX,) + CXXFLAGS).encode())
    return h.hexdigest()[:12]


def library_path(core: str, build_dir: Path = BUILD_DIR) -> Path:
    """Where the shared library of ``core`` for the current sources lives."""
    return build_dir / f"lib{core}-{digest(core)}.so"


def compile_command(src: Path, dst: Path) -> list[str]:
    """The compiler command line building ``dst`` from ``src``."""
    return [CXX, *CXXFLAGS, "-I", str(INCLUDE_DIR), "-o", str(dst), str(src)]


def build(core: str, build_dir: Path = BUILD_DIR) -> Path:
    """Compile ``core`` unless its library for the current sources already exists.

    Parameters
    ----------
    core : str
        Core name; the source is ``hls_ref/cpp/<core>.cpp``.
    build_dir : Path
        Cache directory (default ``build/cpp`` in the repository).

    Returns
    -------
    Path
        The shared library.

    Raises
    ------
    CompileError
        The compiler is missing or failed (the message holds its output).
    """
    lib = library_path(core, build_dir)
    if lib.is_file():
        return lib
    return compile_library(lambda out: compile_command(source(core), out), lib,
                           f"the C++ reference of {core!r}")


def compile_library(command: Callable[[Path], list[str]], lib: Path, what: str) -> Path:
    """Run the compiler line ``command(out)`` into a private file next to ``lib``, then rename it to ``lib``:
    concurrent builders never load a half-written file. Returns ``lib``.

    Raises
    ------
    CompileError
        The compiler is missing or failed; the message names ``what`` and holds the command and its output.
    """
    cmd = command(Path("out.so"))
    if shutil.which(cmd[0]) is None:
        raise CompileError(f"{cmd[0]} not found on PATH: cannot build {what}")
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{lib.stem}-", suffix=".so", dir=lib.parent)
    os.close(fd)
    cmd = command(Path(tmp))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"building {what} failed (exit {proc.returncode}):\n"
                               f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


@functools.lru_cache(maxsize=None)
def _load_path(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


def load(core: str, build_dir: Path = BUILD_DIR) -> ctypes.CDLL:
    """The C++ reference of ``core`` as a ``ctypes.CDLL`` (built on first use, cached on disk).

    Parameters
    ----------
    core : str
        Core name, e.g. ``"rng"``.
    build_dir : Path
        Cache directory for the shared libraries.

    Returns
    -------
    ctypes.CDLL
        The loaded library (one handle per library file per process).
    """
    return _load_path(str(build(core, build_dir)))


def u32_ptr(a: np.ndarray) -> "ctypes._Pointer[ctypes.c_uint32]":
    """A ``uint32_t *`` to a C-contiguous uint32 array."""
    if a.dtype != np.uint32 or not a.flags.c_contiguous:
        raise TypeError(f"need a C-contiguous uint32 array, got {a.dtype} (contiguous={a.flags.c_contiguous})")
    return a.ctypes.data_as(_u32p)


# ------------------------------------------------------------------------------------------------
# rng
# ------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _rng() -> ctypes.CDLL:
    lib = load("rng")
    lib.rng_run.argtypes = [_u32p, ctypes.c_uint32, _u32p]
    lib.rng_run.restype = ctypes.c_int
    lib.rng_run_xor.argtypes = [_u32p, ctypes.c_uint32, _u32p, _u32p]
    lib.rng_run_xor.restype = ctypes.c_int
    lib.rng_id_hash.argtypes = []
    lib.rng_id_hash.restype = ctypes.c_uint32
    return lib


def _state_words(state) -> np.ndarray:
    """``state`` as a fresh uint32[4] array; words outside 0..2**32-1 raise ValueError."""
    s = np.asarray(state)
    if s.shape != (4,):
        raise ValueError(f"state must have 4 words s[0..3], got shape {s.shape}")
    return integers_in("state words", s, 0, 0xFFFFFFFF).astype(np.uint32)


def _check_n(n: int) -> int:
    n = integer(n, "n")            # not int(), which runs 2.5 steps as 2
    if not 0 <= n <= 0xFFFFFFFF:
        raise ValueError(f"n must be in 0..2**32-1, got {n}")
    return n


def rng_run(state, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``n`` xoshiro128++ outputs from the C++ reference.

    Parameters
    ----------
    state : array_like of int, shape (4,)
        s[0..3]. An all-zero state is not rejected here: the core reports it as ``ERR.SEED_ZERO``.
    n : int
        Steps.

    Returns
    -------
    out : ndarray of uint32, shape (n,)
        The outputs (zeros when ``err`` is non-zero).
    new_state : ndarray of uint32, shape (4,)
        The state after the run (the input state when ``err`` is non-zero).
    err : int
        ``ERR`` bits: the SEED_ZERO mask for an all-zero state, else 0.
    """
    s = _state_words(state)
    n = _check_n(n)
    out = np.zeros(n, dtype=np.uint32)
    err = _rng().rng_run(u32_ptr(s), n, u32_ptr(out))
    return out, s, int(err)


def rng_run_xor(state, n: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """As :func:`rng_run`, plus the value of the ``XOR`` register (XOR of the outputs) before ``err``."""
    s = _state_words(state)
    n = _check_n(n)
    out = np.zeros(n, dtype=np.uint32)
    acc = np.zeros(1, dtype=np.uint32)
    err = _rng().rng_run_xor(u32_ptr(s), n, u32_ptr(out), u32_ptr(acc))
    return out, s, int(acc[0]), int(err)


def rng_id_hash() -> int:
    """``SPECDEC_RNG_ID_HASH`` as compiled into the library."""
    return int(_rng().rng_id_hash())


# ------------------------------------------------------------------------------------------------
# verifier
# ------------------------------------------------------------------------------------------------

_i16p = ctypes.POINTER(ctypes.c_int16)
_u16p = ctypes.POINTER(ctypes.c_uint16)

_VERIFIER = core("verifier")
#: Keys of :func:`verifier_round`'s result, in the order of the C entry's ``result`` words: the verifier's
#: ``RESULT`` register group in lower case, then the ERR bits and the cycle model's sampling beats.
VERIFIER_FIELDS = _VERIFIER.group("RESULT").fields + ("err", "sample_beats")


@functools.lru_cache(maxsize=None)
def _verifier() -> ctypes.CDLL:
    lib = load("verifier")
    lib.verifier_round.argtypes = [_i16p, ctypes.c_int, _i16p, ctypes.c_int, _u16p, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_uint32, _u32p, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int, _u32p]
    lib.verifier_round.restype = ctypes.c_int
    lib.verifier_tree_round.argtypes = [_i16p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint8), _u16p, ctypes.c_int,
                                        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_uint32, _u32p, ctypes.c_int,
                                        ctypes.c_int, ctypes.c_int, _u32p]
    lib.verifier_tree_round.restype = ctypes.c_int
    lib.verifier_tables.argtypes = [_u32p, _u32p]
    lib.verifier_tables.restype = None
    lib.verifier_exp.argtypes = [ctypes.c_int32]
    lib.verifier_exp.restype = ctypes.c_uint32
    lib.verifier_id_hash.argtypes = []
    lib.verifier_id_hash.restype = ctypes.c_uint32
    return lib


def _rows(a, name: str) -> np.ndarray:
    """``a`` as a C-contiguous int16 [rows, vocab] array of logit codes (a 1-D array is one row)."""
    arr = np.asarray(a)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be [rows, vocab] logit codes, got shape {arr.shape}")
    return np.ascontiguousarray(golden_verifier.check_codes(arr, name), dtype=np.int16)


def verifier_round(p, q, draft, *, greedy: bool, inv_temp: int, words, lanes: int, vocab_max: int = VOCAB_LIMIT,
                   gamma_max: int = VERIFIER_MAX_GAMMA) -> dict:
    """One verifier round from the C++ reference (docs/verifier.md).

    Parameters
    ----------
    p : array_like of int16, shape (rows_p, V)
        Target logit codes, row i = p_i (at least gamma + 1 rows are read as the round needs them).
    q : array_like of int16, shape (rows_q, V)
        Draft logit codes, row i = q_i (ignored in greedy mode; may be None or have 0 rows there).
    draft : sequence of int
        Draft tokens x_0 .. x_{gamma-1} (16-bit register fields); gamma = len(draft).
    greedy : bool
        ``CONFIG.GREEDY``.
    inv_temp : int
        ``INV_TEMP`` (Q8.8, 256 = 1.0).
    words : array_like of uint32
        The RNG words the round may take, in order (None = none).
    lanes : int
        Logits per stream beat.
    vocab_max, gamma_max : int
        The instance's ``VOCAB_MAX`` and ``GAMMA_MAX`` (hwcontract.params; ``lanes`` is ``LANES``).

    Returns
    -------
    dict
        :data:`VERIFIER_FIELDS`: ``n_accept, next_token, accept_bits, rows, words, last_ep, last_eq, last_sp,
        last_sq, err, sample_beats`` (``words`` is the count taken; ``err`` the ERR bits, 0 when the round
        completed).

    Raises
    ------
    ValueError
        The round needed more RNG words than given, or more rows than ``p``/``q`` hold, or an argument is
        out of range (a build parameter's message names its allowed values).
    """
    lanes, vocab_max, gamma_max = golden_verifier.check_build(lanes, vocab_max, "GAMMA_MAX", gamma_max)
    inv_temp = golden_verifier.check_inv_temp(inv_temp)
    p_arr = _rows(p, "p")
    vocab = p_arr.shape[1]
    q_arr = np.zeros((0, vocab), dtype=np.int16) if q is None else np.asarray(q)
    if q_arr.size == 0:
        q_arr = np.zeros((0, vocab), dtype=np.int16)
    q_arr = _rows(q_arr, "q")
    if q_arr.shape[0] and q_arr.shape[1] != vocab:
        raise ValueError(f"p and q rows differ in length: {vocab} vs {q_arr.shape[1]}")
    d = draft_tokens(draft)                 # not int(), which takes token 1.5 as 1
    d_arr = np.array(d if d else [0], dtype=np.uint16)
    w = golden_verifier.rng_words(words)
    w_arr = w if w.size else np.zeros(1, dtype=np.uint32)
    result = np.zeros(len(VERIFIER_FIELDS), dtype=np.uint32)
    rc = _verifier().verifier_round(
        p_arr.ctypes.data_as(_i16p), p_arr.shape[0], q_arr.ctypes.data_as(_i16p), q_arr.shape[0],
        d_arr.ctypes.data_as(_u16p), len(d), vocab, lanes, int(flag(greedy, "greedy")), inv_temp, u32_ptr(w_arr),
        len(w), vocab_max, gamma_max, u32_ptr(result))
    if rc == -1:
        raise ValueError(f"the round needed more RNG words than the {len(w)} given")
    if rc == -2:
        raise ValueError(f"the round needed more rows than given (p: {p_arr.shape[0]}, q: {q_arr.shape[0]})")
    if rc != 0:
        raise ValueError(f"bad arguments: lanes={lanes}, vocab_max={vocab_max}, gamma_max={gamma_max}")
    return {k: int(v) for k, v in zip(VERIFIER_FIELDS, result, strict=True)}


#: Keys of :func:`verifier_tree_round`'s result: :data:`VERIFIER_FIELDS`, then the ``TREE_RESULT`` register
#: group in lower case (``cur_node, path_lo, path_hi``).
VERIFIER_TREE_FIELDS = VERIFIER_FIELDS + _VERIFIER.group("TREE_RESULT").fields


def verifier_tree_round(rows, parents, tokens, *, greedy: bool, inv_temp: int, words, lanes: int,
                        vocab_max: int = VOCAB_LIMIT, tree_max: int = TREE_MAX_NODES) -> dict:
    """One tree-mode round from the C++ reference (docs/verifier.md, "Tree mode").

    Parameters
    ----------
    rows : array_like of int16, shape (n_rows, V)
        ``rows[v]`` is the target row of node v (only the rows of the walked path are read).
    parents, tokens : sequence of int, length N
        The tree (node 0's entries are ignored; ``parents[0]`` may be -1). Parents must fit 8 bits and
        tokens 16 bits (the register fields).
    greedy, inv_temp, words, lanes :
        As :func:`verifier_round`.
    vocab_max, tree_max : int
        The instance's ``VOCAB_MAX`` and ``TREE_MAX`` (hwcontract.params).

    Returns
    -------
    dict
        :data:`VERIFIER_TREE_FIELDS`: the chain fields, plus ``cur_node`` (CUR_NODE: the path's last node),
        ``path_lo`` and ``path_hi`` (the accepted nodes' bits).

    Raises
    ------
    ValueError
        The round needed more RNG words than given, or the row of a node ``rows`` does not hold, or an
        argument is out of range.
    """
    lanes, vocab_max, tree_max = golden_verifier.check_build(lanes, vocab_max, "TREE_MAX", tree_max)
    inv_temp = golden_verifier.check_inv_temp(inv_temp)
    r_arr = _rows(rows, "rows")
    vocab = r_arr.shape[1]
    par, tok = node_entries("parents", parents), node_entries("tokens", tokens)   # not int(), which takes 0.7 as 0
    if len(par) != len(tok):
        raise ValueError(f"a tree needs one token per node: {len(par)} parents, {len(tok)} tokens")
    if len(par) > TREE_MAX_NODES + 1:
        raise ValueError(f"a tree register set holds at most {TREE_MAX_NODES} nodes ({TREE_MAX_NODES + 1} to test "
                         f"BAD_TREE), got {len(par)}")
    check_field_widths(par, tok)
    p_arr = np.array(par, dtype=np.uint8)
    t_arr = np.array(tok, dtype=np.uint16)
    w = golden_verifier.rng_words(words)
    w_arr = w if w.size else np.zeros(1, dtype=np.uint32)
    result = np.zeros(len(VERIFIER_TREE_FIELDS), dtype=np.uint32)
    rc = _verifier().verifier_tree_round(
        r_arr.ctypes.data_as(_i16p), r_arr.shape[0], p_arr.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
        t_arr.ctypes.data_as(_u16p), len(par), vocab, lanes, int(flag(greedy, "greedy")), inv_temp, u32_ptr(w_arr),
        w.size, vocab_max, tree_max, u32_ptr(result))
    if rc == -1:
        raise ValueError(f"the round needed more RNG words than the {len(w)} given")
    if rc == -2:
        raise ValueError(f"the round needed the row of a node past the {r_arr.shape[0]} rows given")
    if rc != 0:
        raise ValueError(f"bad arguments: lanes={lanes}, vocab_max={vocab_max}, tree_max={tree_max}")
    return {k: int(v) for k, v in zip(VERIFIER_TREE_FIELDS, result, strict=True)}


def verifier_tables() -> tuple[np.ndarray, np.ndarray]:
    """The exp tables ``EH[EH_SIZE]`` and ``EL[EL_SIZE]`` as compiled into the C++ reference."""
    eh = np.zeros(EH_SIZE, dtype=np.uint32)
    el = np.zeros(EL_SIZE, dtype=np.uint32)
    _verifier().verifier_tables(u32_ptr(eh), u32_ptr(el))
    return eh, el


def verifier_exp(d: int) -> int:
    """``EXP(d)`` (Q1.15) of the C++ reference for a distance ``d >= 0`` (a negative one raises ValueError, as
    ``hwcontract.formats.exp_q15`` does)."""
    d = integer(d, "EXP distance")
    if d < 0:
        raise ValueError(f"EXP distance must be >= 0, got {d}")
    return int(_verifier().verifier_exp(min(d, EXP_LIMIT)))


def verifier_id_hash() -> int:
    """``SPECDEC_VERIFIER_ID_HASH`` as compiled into the library."""
    return int(_verifier().verifier_id_hash())


# ------------------------------------------------------------------------------------------------
# treemask
# ------------------------------------------------------------------------------------------------

_u64p = ctypes.POINTER(ctypes.c_uint64)


@functools.lru_cache(maxsize=None)
def _treemask() -> ctypes.CDLL:
    lib = load("treemask")
    lib.treemask_run.argtypes = [ctypes.c_uint32, _u32p, ctypes.c_uint32, _u64p, _u32p]
    lib.treemask_run.restype = ctypes.c_int
    lib.treemask_parent_regs.argtypes = []
    lib.treemask_parent_regs.restype = ctypes.c_uint32
    lib.treemask_id_hash.argtypes = []
    lib.treemask_id_hash.restype = ctypes.c_uint32
    return lib


#: Keys of :func:`treemask_words`' result: the treemask's ``RESULT`` register group in lower case, then the ERR
#: bits and the cycle model's CYCLES_BUSY.
TREEMASK_FIELDS = core("treemask").group("RESULT").fields + ("err", "cycles")


def treemask_words(parents, nodes_max: int = TREE_MAX_NODES) -> tuple[list[int], dict]:
    """One tree through the C++ reference: the m_axis words and ``rows, max_depth, err, cycles``.

    Parameters
    ----------
    parents : sequence of int, length N (may be 0 or above TREE_MAX_NODES: NODES is written, the PARENT
        registers hold the first TREE_MAX_NODES entries)
        ``parents[0]`` (the root's) is ignored; the others must fit the 8-bit PARENT fields.
    nodes_max : int
        The build's ``NODES_MAX`` (hwcontract.params).

    Returns
    -------
    words : list of int
        One 128-bit word per node (empty on error).
    result : dict
        :data:`TREEMASK_FIELDS`: ``rows, max_depth, err, cycles`` (the cycle model's CYCLES_BUSY).
    """
    nodes_max = golden_treemask.check_nodes_max(nodes_max)
    reg = core("treemask").reg("PARENT0")
    per = len(reg.fields)
    lib = _treemask()
    nregs = int(lib.treemask_parent_regs())
    entries = node_entries("parents", parents)                # not int(), which takes parent 0.5 as node 0
    vals = entries[:nregs * per]
    regs = np.zeros(nregs, dtype=np.uint32)
    for k in range(-(-len(vals) // per)):
        regs[k] = reg.encode(**{f"P{j}": v for j, v in enumerate(vals[per * k:per * k + per])})
    n = len(entries)
    if not 0 <= n <= 0xFFFFFFFF:
        raise ValueError(f"{n} nodes do not fit the 32-bit NODES register")
    out = np.zeros(2 * nregs * per, dtype=np.uint64)
    result = np.zeros(len(TREEMASK_FIELDS), dtype=np.uint32)
    lib.treemask_run(n, u32_ptr(regs), nodes_max, out.ctypes.data_as(_u64p), u32_ptr(result))
    res = dict(zip(TREEMASK_FIELDS, (int(v) for v in result), strict=True))
    words = [int(out[2 * k]) | (int(out[2 * k + 1]) << 64) for k in range(res["rows"])]
    return words, res


def treemask_run(parents, nodes_max: int = TREE_MAX_NODES) -> tuple[list[int], list[int], int, int]:
    """The tree's mask rows (bit j of ``rows[i]``: node j is node i or an ancestor), depths, MAX_DEPTH and
    ERR bits from the C++ reference (empty rows and depths on error). See :func:`treemask_words`."""
    from hwcontract.formats import unpack_mask_word as unpack_word
    words, res = treemask_words(parents, nodes_max)
    fields = [unpack_word(w) for w in words]
    return [f[2] for f in fields], [f[1] for f in fields], res["max_depth"], res["err"]


def treemask_id_hash() -> int:
    """``SPECDEC_TREEMASK_ID_HASH`` as compiled into the library."""
    return int(_treemask().treemask_id_hash())


# ------------------------------------------------------------------------------------------------
# kvpage
# ------------------------------------------------------------------------------------------------

#: Registers of :class:`KvpageCpp`'s results, in the order of the C entry's register words: the kvpage
#: ``RESULT`` group (the registers an operation may write), then its ``STATE`` group (always visible).
KVPAGE_RES_REGS = core("kvpage").group("RESULT").registers
KVPAGE_STATUS_REGS = core("kvpage").group("STATE").registers


@functools.lru_cache(maxsize=None)
def _kvpage() -> ctypes.CDLL:
    lib = load("kvpage")
    lib.kvpage_create.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
    lib.kvpage_create.restype = ctypes.c_void_p
    lib.kvpage_destroy.argtypes = [ctypes.c_void_p]
    lib.kvpage_destroy.restype = None
    lib.kvpage_op.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
                              ctypes.c_uint64, _u32p]
    lib.kvpage_op.restype = ctypes.c_int
    for name in ("kvpage_result_words", "kvpage_id_hash"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_uint32
    # ERR, cycles and the written mask, then the RESULT and STATE groups (the header gives their layout).
    words = 3 + len(KVPAGE_RES_REGS) + len(KVPAGE_STATUS_REGS)
    if int(lib.kvpage_result_words()) != words:
        raise RuntimeError(f"kvpage library returns {lib.kvpage_result_words()} words, the groups need {words}")
    return lib


def _u32(name: str, v: int) -> int:
    v = integer(v, name)           # not int(), which takes slot 1.5 as 1
    if not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"{name} must fit 32 bits, got {v}")
    return v


class KvpageCpp:
    """One kvpage core in the C++ reference (hls_ref/cpp/kvpage.cpp), after reset.

    Parameters
    ----------
    pages, max_blocks, slots : int
        The build's ``PAGES``, ``MAX_BLOCKS`` and ``SLOTS`` (hwcontract.params).

    Raises
    ------
    ValueError
        Parameters the core does not support (the C entry refuses them).

    The C state is freed by :meth:`close` (also on ``with`` exit and garbage collection).
    """

    def __init__(self, pages: int = hwparams.spec("kvpage")["PAGES"].default,
                 max_blocks: int = hwparams.spec("kvpage")["MAX_BLOCKS"].default,
                 slots: int = hwparams.spec("kvpage")["SLOTS"].default):
        self._lib = _kvpage()
        self._h = None
        checked = hwparams.check("kvpage", dict(PAGES=pages, MAX_BLOCKS=max_blocks, SLOTS=slots))
        self.pages, self.max_blocks, self.slots = checked["PAGES"], checked["MAX_BLOCKS"], checked["SLOTS"]
        h = self._lib.kvpage_create(self.pages, self.max_blocks, self.slots)
        if not h:
            raise RuntimeError(f"kvpage: the C++ reference refused PAGES={pages}, MAX_BLOCKS={max_blocks}, "
                               f"SLOTS={slots}")
        self._h = h
        self._out = np.zeros(int(self._lib.kvpage_result_words()), dtype=np.uint32)
        #: Every result register's value after the last operation (written or kept), by name.
        self.registers: dict[str, int] = dict.fromkeys(KVPAGE_RES_REGS, 0)

    def close(self) -> None:
        """Free the C state (idempotent)."""
        if self._h:
            self._lib.kvpage_destroy(self._h)
            self._h = None

    def __enter__(self) -> "KvpageCpp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:       # interpreter shutdown: the library may be gone
            pass

    def run(self, code: int, slot: int = 0, row: int = 0, page: int = 0, mask: int = 0
            ) -> tuple[int, int, dict[str, int], dict[str, int]]:
        """One operation from raw register values (``code`` is OP.CODE, any 32-bit value: one that is no
        operation gives ERR.BAD_OP). Returns as :meth:`op`."""
        if not self._h:
            raise ValueError("kvpage: core closed")
        mask = integer(mask, "mask")
        if not 0 <= mask < 1 << KV_SLOTS:
            raise ValueError(f"mask must fit {KV_SLOTS} bits (one per slot), got {mask:#x}")
        out = self._out
        self._lib.kvpage_op(self._h, _u32("code", code), _u32("slot", slot), _u32("row", row), _u32("page", page),
                            mask, u32_ptr(out))
        err, cycles, written = (int(v) for v in out[:3])
        vals = [int(v) for v in out[3:]]
        n = len(KVPAGE_RES_REGS)
        self.registers = dict(zip(KVPAGE_RES_REGS, vals[:n]))
        regs = {k: v for i, (k, v) in enumerate(self.registers.items()) if written >> i & 1}
        return err, cycles, regs, dict(zip(KVPAGE_STATUS_REGS, vals[n:]))

    def op(self, op) -> tuple[int, int, dict[str, int], dict[str, int]]:
        """Run ``op`` (a :class:`hls_ref.kvpage.Op`).

        Returns
        -------
        err : int
            ERR bits (0: it ran; an error changes nothing).
        cycles : int
            The cycle model's CYCLES_BUSY.
        regs : dict
            The result registers the operation wrote (``RES_SLOT`` ...), like the golden ``Result.regs``.
        status : dict
            The ``STATE`` group (``FREE_PAGES, SEQS_LO, SEQS_HI, BRANCHES_LO, BRANCHES_HI``) after it, like
        ``hls_ref.kvpage.status_regs``.
        """
        from hls_ref.kvpage import OPS
        return self.run(OPS[op.code], op.slot, op.row, op.page, op.mask)


def kvpage_id_hash() -> int:
    """``SPECDEC_KVPAGE_ID_HASH`` as compiled into the library."""
    return int(_kvpage().kvpage_id_hash())


# ------------------------------------------------------------------------------------------------
# draftengine (the arithmetic; the core's registers come with its RTL)
# ------------------------------------------------------------------------------------------------

_DE_ERRORS = {-1: "bad shape", -2: "bad OUT_BITS", -3: "bad SHIFT"}


@functools.lru_cache(maxsize=None)
def _draftengine() -> ctypes.CDLL:
    lib = load("draftengine")
    p = ctypes.c_void_p
    lib.draftengine_run.argtypes = [ctypes.c_int32] * 3 + [p] * 5 + [ctypes.c_int32, p]
    lib.draftengine_run.restype = ctypes.c_int32
    return lib


def draftengine_run(job) -> tuple[np.ndarray, int]:
    """``(y, saturated)`` of one ``hls_ref.draftengine.Job`` from the C++ reference (checked by the golden
    model's :func:`~hls_ref.draftengine.check` first, so the C++ sees only legal jobs)."""
    from hls_ref import draftengine as golden
    j = golden.check(job)
    m, k = j.x.shape
    n = j.w.shape[0]
    arrs = [np.ascontiguousarray(a, dtype=t) for a, t in ((j.x, np.int8), (j.w, np.int8), (j.bias, np.int32),
                                                           (j.mult, np.uint16), (j.shift, np.uint8))]
    y = np.zeros((m, n), dtype=np.int32)
    sat = _draftengine().draftengine_run(m, k, n, *(a.ctypes.data for a in arrs), j.out_bits, y.ctypes.data)
    if sat < 0:
        raise ValueError(f"C++ draftengine_run refused the job: {_DE_ERRORS.get(sat, sat)}")
    return y.astype(np.int64), int(sat)


# ------------------------------------------------------------------------------------------------
# treeattn
# ------------------------------------------------------------------------------------------------

#: Keys of :func:`treeattn_frame`'s result: the treeattn's ``RESULT`` register group in lower case, then ERR.
TREEATTN_FIELDS = core("treeattn").group("RESULT").fields + ("err",)
_TA_PARAMS = ("HEAD_DIM", "GROUP", "NODES_MAX", "LANES", "CTX_MAX", "BLOCK")


@functools.lru_cache(maxsize=None)
def _treeattn() -> ctypes.CDLL:
    lib = load("treeattn")
    p = ctypes.c_void_p
    lib.treeattn_run.argtypes = [p] + [ctypes.c_uint32] * 4 + [p, ctypes.c_uint64, p, p]
    lib.treeattn_run.restype = ctypes.c_int
    lib.treeattn_id_hash.argtypes = []
    lib.treeattn_id_hash.restype = ctypes.c_uint32
    return lib


def treeattn_frame(frame, ctx: int, nodes: int, mult: int, shift: int, params=None) -> tuple[np.ndarray, dict]:
    """One job through the C++ reference from its registers and its s_axis frame.

    Parameters
    ----------
    frame : array of uint8, shape (beats, 16)
        The s_axis beats (``hls_ref.treeattn.stream_bytes``), TLAST on the last.
    ctx, nodes, mult, shift : int
        The CTX, NODES, MULT and SHIFT registers (32-bit values).
    params : mapping, optional
        Build parameters (hwcontract.params core "treeattn"; ValueError for a bad one).

    Returns
    -------
    out : ndarray of int16, shape (nodes, GROUP, HEAD_DIM)
        The m_axis codes; shape (0, GROUP, HEAD_DIM) on an error.
    result : dict
        :data:`TREEATTN_FIELDS`: ``macs, err``.
    """
    p = hwparams.check("treeattn", params)
    regs = [integer(v, f"treeattn: {n}") for n, v in (("CTX", ctx), ("NODES", nodes), ("MULT", mult),
                                                       ("SHIFT", shift))]
    for name, v in zip(("CTX", "NODES", "MULT", "SHIFT"), regs):
        if not 0 <= v <= 0xFFFFFFFF:
            raise ValueError(f"treeattn: {name}={v} does not fit its 32-bit register")
    data = np.ascontiguousarray(np.asarray(frame, dtype=np.uint8).reshape(-1, 16))
    pw = np.array([p[k] for k in _TA_PARAMS], dtype=np.uint32)
    n_ok = min(regs[1], p["NODES_MAX"])
    out = np.zeros(max(1, n_ok * p["GROUP"] * p["HEAD_DIM"]), dtype=np.int16)
    result = np.zeros(len(TREEATTN_FIELDS), dtype=np.uint64)
    rc = _treeattn().treeattn_run(pw.ctypes.data, *regs, data.ctypes.data, data.shape[0], out.ctypes.data,
                                  result.ctypes.data)
    if rc < 0:
        raise ValueError(f"C++ treeattn_run refused the build parameters {p}")
    res = dict(zip(TREEATTN_FIELDS, (int(v) for v in result), strict=True))
    rows = 0 if res["err"] else regs[1]
    return out[:rows * p["GROUP"] * p["HEAD_DIM"]].reshape(rows, p["GROUP"], p["HEAD_DIM"]), res


def treeattn_run(job, params=None) -> tuple[np.ndarray, dict]:
    """One ``hls_ref.treeattn.Job`` through the C++ reference (packed by the golden model's
    :func:`~hls_ref.treeattn.stream_bytes`, which checks it first): ``(out, {macs, err})``."""
    j = golden_treeattn.check(job, params)
    return treeattn_frame(golden_treeattn.stream_bytes(j, params), j.ctx, j.n, j.mult, j.shift, params)


def treeattn_id_hash() -> int:
    """``SPECDEC_TREEATTN_ID_HASH`` as compiled into the library."""
    return int(_treeattn().treeattn_id_hash())


# ------------------------------------------------------------------------------------------------
# vecunit
# ------------------------------------------------------------------------------------------------

#: Keys of :func:`vecunit_frame`'s result: the vecunit's ``RESULT`` register group in lower case, then ERR.
VECUNIT_FIELDS = core("vecunit").group("RESULT").fields + ("err",)
_VU_PARAMS = ("LEN_MAX", "PARTS_MAX", "HALF_MAX", "K_MAX")
_VU_REGS = ("OP", "LEN", "FLAGS", "PARTS", "WMASK", "POS", "HALF", "EPS", "NORM_MULT", "K")
_i32p = ctypes.POINTER(ctypes.c_int32)


@functools.lru_cache(maxsize=None)
def _vecunit() -> ctypes.CDLL:
    lib = load("vecunit")
    p = ctypes.c_void_p
    lib.vecunit_run.argtypes = [p, p, p, ctypes.c_uint64, p, ctypes.c_uint64, p]
    lib.vecunit_run.restype = ctypes.c_int
    lib.vecunit_tables.argtypes = [_i32p, _i32p]
    lib.vecunit_tables.restype = None
    lib.vecunit_sincos.argtypes = [ctypes.c_uint32, _i32p]
    lib.vecunit_sincos.restype = None
    lib.vecunit_id_hash.argtypes = []
    lib.vecunit_id_hash.restype = ctypes.c_uint32
    return lib


def vecunit_beats(x, c) -> np.ndarray:
    """The s_axis beats (uint64: X in bits 31..0, C in 63..32) of X words ``x`` (int32 values) and C words ``c``
    (uint32 values): :func:`hwcontract.formats.vu_frame_bytes` read as words; ValueError for a word outside its
    range or lengths that differ."""
    return vu_frame_bytes(x, c).reshape(-1).view("<u8").astype(np.uint64)


def vecunit_frame(registers, beats, params=None) -> tuple[np.ndarray, dict]:
    """One job through the C++ reference from its registers and its s_axis frame.

    Parameters
    ----------
    registers : mapping of str to int
        The rw registers by name (``OP, LEN, FLAGS, PARTS, WMASK, POS, HALF, EPS, NORM_MULT, K``: 32-bit values; a
        missing one takes its reset value).
    beats : array of uint64, shape (beats,)
        The s_axis beats (:func:`vecunit_beats`), TLAST on the last.
    params : mapping, optional
        Build parameters (hwcontract.params core "vecunit"; ValueError for a bad one).

    Returns
    -------
    y : ndarray of int64
        The m_axis words (LEN of them, TOPK 2 K); empty on an error.
    result : dict
        :data:`VECUNIT_FIELDS`: ``saturated, beats_in, beats_out, err``.
    """
    p = hwparams.check("vecunit", params)
    cmap = core("vecunit")
    unknown = sorted(set(registers) - set(_VU_REGS))
    if unknown:
        raise KeyError(f"vecunit: no register {unknown[0]!r} among {_VU_REGS}")
    regs = [integer(registers.get(n, cmap.reg(n).reset), f"vecunit: {n}") for n in _VU_REGS]
    for name, v in zip(_VU_REGS, regs):
        if not 0 <= v <= 0xFFFFFFFF:
            raise ValueError(f"vecunit: {name}={v} does not fit its 32-bit register")
    data = np.ascontiguousarray(np.asarray(beats).ravel())
    if data.dtype != np.uint64:
        raise ValueError(f"vecunit: s_axis beats must be uint64 words, got dtype {data.dtype}")
    r = dict(zip(_VU_REGS, regs))
    cap = 2 * r["K"] if r["OP"] == VU_OP["TOPK"] else r["LEN"]
    out = np.zeros(max(1, min(cap, 2 * p["LEN_MAX"])), dtype=np.int32)
    pw = np.array([p[k] for k in _VU_PARAMS], dtype=np.uint32)
    rw = np.array(regs, dtype=np.uint32)
    result = np.zeros(len(VECUNIT_FIELDS), dtype=np.uint32)
    rc = _vecunit().vecunit_run(pw.ctypes.data, rw.ctypes.data, data.ctypes.data, data.size, out.ctypes.data,
                                out.size, result.ctypes.data)
    if rc < 0:
        raise ValueError(f"C++ vecunit_run refused the build parameters {p}" if rc == -1 else
                         f"C++ vecunit_run: {out.size} output words are fewer than the job's")
    res = dict(zip(VECUNIT_FIELDS, (int(v) for v in result), strict=True))
    return out[:0 if res["err"] else res["beats_out"]].astype(np.int64), res


def vecunit_run(job, params=None) -> tuple[np.ndarray, dict]:
    """One ``hls_ref.vecunit.Job`` through the C++ reference (checked by the golden model's
    :func:`~hls_ref.vecunit.check` first): ``(y, {saturated, beats_in, beats_out, err})``."""
    j = golden_vecunit.check(job)
    return vecunit_frame(j.registers(), vecunit_beats(j.x, j.c), params)


def vecunit_tables() -> tuple[np.ndarray, np.ndarray]:
    """The sine and sigmoid tables compiled into the library (``SPECDEC_VU_SIN``, ``SPECDEC_VU_SIG``), int64."""
    sin = np.zeros(VU_SIN_STEPS + 1, dtype=np.int32)
    sig = np.zeros(len(vu_sigmoid_table()), dtype=np.int32)
    _vecunit().vecunit_tables(sin.ctypes.data_as(_i32p), sig.ctypes.data_as(_i32p))
    return sin.astype(np.int64), sig.astype(np.int64)


def vecunit_sincos(phase: int) -> tuple[int, int]:
    """(cos, sin) in Q1.15 of a phase in turns (Q.32, a 32-bit value) as the C++ reference computes them."""
    phase = _u32("phase", phase)
    cs = np.zeros(2, dtype=np.int32)
    _vecunit().vecunit_sincos(phase, cs.ctypes.data_as(_i32p))
    return int(cs[0]), int(cs[1])


def vecunit_id_hash() -> int:
    """``SPECDEC_VECUNIT_ID_HASH`` as compiled into the library."""
    return int(_vecunit().vecunit_id_hash())
