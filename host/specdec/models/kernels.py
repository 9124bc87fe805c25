"""The linear layers' kernel, chosen by the number of rows (tokens) a forward multiplies.

Speculative decoding runs the target over a few positions at once (gamma + 1, or a tree's nodes), and the
speedup rests on that forward costing little more than a one-token step. A product with a few rows is bound by
reading the weights, and the libraries' kernels (torch's ``F.linear``, MKL, OpenBLAS) read them at half the
memory's speed or less on the project's CPU, a 2-core AMD EPYC with AVX2 (docs/benchmarks.md, "Kernels by rows",
has the measurements). So the model's linear layers multiply through :func:`linear`:

* up to :data:`ROWGEMM_ROWS_MAX` rows through ``rowgemm`` (``csrc/rowgemm.cpp``): each thread streams its share
  of W's rows once, with a software prefetch (into L2 where several rows of x fill L1), against the few rows of x
  held in L1 (AVX2/FMA, OpenMP on torch's thread count). Up to seven rows, each W row meets all of them in one
  pass; more go in groups as equal as can be (9 rows: 3 + 3 + 3). From 5 rows on the FMAs bound it rather than
  reading W, and it takes three W rows at a time (twelve accumulators). Every output sums in the same order (eight
  lanes over k, their sum, the tail, the bias), so a row's product is the same bits whatever rows are multiplied
  beside it. It is compiled with g++ on first use and cached in the build folder's ``kernels/``
  (:func:`specdec.paths.build_dir`);
* more rows through ``W @ x.T`` (MKL with the weight as the row-major left operand, faster than ``F.linear``
  from 2 rows up).

Off x86-64 (an ARM64 board such as the KV260), without g++ or AVX2/FMA, or with ``SPECDEC_KERNEL=torch`` in the
environment, every product takes the torch path (:func:`kernel` says which). All give the float32 product up to
rounding (a few 1e-5 on the logits; ``tests/test_kernels.py``).

Two weight layouts read fewer bytes for the same products, bit for bit. A layer whose weights are float16 values
(the EAGLE head's, saved in float16) holds them in float16 (:func:`half_weights`): ``rowgemm_h`` widens them in
registers (F16C), half the bytes. A weight that is exactly int8 codes times a scale per block of 32 (SmolLM2's
Q8_0 token embedding, which is its LM head and whose 8,192 hot rows are the EAGLE head's) is held so
(:class:`BlockQ8`, :func:`block_q8`, :func:`q8_output_head`): ``rowgemm_q8`` multiplies it out in registers, a
quarter of the bytes. The target's other weights are no float16 values (dequantized Q4_1), so they stay float32.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hls_ref.cpp import CompileError, compile_library

from .. import paths

if TYPE_CHECKING:       # imported where used: importing this module must not load torch
    import torch

#: Rows up to which :func:`linear` uses rowgemm (the table above: it loses to MKL from about 40 rows).
ROWGEMM_ROWS_MAX = 32
#: The environment variable that picks the kernel: ``torch`` turns rowgemm off (A/B measurements).
KERNEL_ENV = "SPECDEC_KERNEL"
SOURCE = Path(__file__).resolve().parent / "csrc" / "rowgemm.cpp"
CXX = "g++"
CXXFLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-Wall")


def _cache_dir() -> Path:
    """``kernels/`` in the build folder (:func:`specdec.paths.build_dir`)."""
    return paths.build_dir() / "kernels"


def _build() -> Path:
    """The shared library of the current source and flags, compiled unless cached (``hls_ref.cpp``'s
    compile-and-rename, as the C++ references are built)."""
    digest = hashlib.sha1(SOURCE.read_bytes() + "\0".join((CXX,) + CXXFLAGS).encode()).hexdigest()[:12]
    lib = _cache_dir() / f"librowgemm-{digest}.so"
    if lib.is_file():
        return lib
    return compile_library(lambda out: [CXX, *CXXFLAGS, "-o", str(out), str(SOURCE)], lib, "the rowgemm kernel")


@functools.lru_cache(maxsize=None)
def _rowgemm() -> tuple[dict | None, str]:
    """(the library's functions by weight layout, ``"float32"``: ``rowgemm``, ``"float16"``: ``rowgemm_h``, ``"q8"``:
    ``rowgemm_q8``, or None; the kernel's description): loaded once per process."""
    if os.environ.get(KERNEL_ENV, "").lower() == "torch":
        return None, f"torch ({KERNEL_ENV}=torch)"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None, f"torch (rowgemm is written for x86-64 with AVX2; this CPU is {platform.machine()})"
    try:
        lib = ctypes.CDLL(str(_build()))
    except (CompileError, OSError) as e:
        return None, f"torch (rowgemm unavailable: {str(e).splitlines()[0]})"
    if not lib.rowgemm_supported():
        return None, "torch (rowgemm needs AVX2, FMA and F16C, which this CPU lacks)"
    p, i = ctypes.c_void_p, ctypes.c_int
    for f in (lib.rowgemm, lib.rowgemm_h):
        f.argtypes = [p, i, i, p, i, p, p, i]
        f.restype = None
    lib.rowgemm_q8.argtypes = [p, i, i, p, p, i, p, p, i]
    lib.rowgemm_q8.restype = None
    return {"float32": lib.rowgemm, "float16": lib.rowgemm_h, "q8": lib.rowgemm_q8}, \
        f"rowgemm (AVX2/FMA/F16C, up to {ROWGEMM_ROWS_MAX} rows; W @ x.T above)"


#: The block of a :class:`BlockQ8` weight along K (GGUF's Q8_0 layout).
Q8_BLOCK = 32


@dataclass(frozen=True, eq=False)
class BlockQ8:
    """A weight of shape (N, K) held as int8 ``codes`` (N, K) times one float32 scale per block of
    :data:`Q8_BLOCK` along K (``scales``, (N, K // 32)): GGUF's Q8_0 layout, exactly equal to the float32 weight
    it was recovered from (:func:`block_q8`). :func:`linear` multiplies it through ``rowgemm_q8``, reading a
    quarter of the float32 bytes for the same products bit for bit (an int8 code times a scale with at most 11
    significant bits is exact in float32), or multiplies its float32 copy."""

    codes: torch.Tensor
    scales: torch.Tensor

    def __post_init__(self) -> None:
        # rowgemm_q8 reads both by these shapes: anything else would read out of bounds
        import torch
        c, sc = self.codes, self.scales
        if not (c.dtype == torch.int8 and c.dim() == 2 and c.shape[1] % Q8_BLOCK == 0 and c.is_contiguous()
                and sc.dtype == torch.float32 and sc.is_contiguous()
                and tuple(sc.shape) == (c.shape[0], c.shape[1] // Q8_BLOCK)):
            raise ValueError(f"BlockQ8 needs contiguous int8 codes (N, K), K a multiple of {Q8_BLOCK}, and float32 "
                             f"scales (N, K // {Q8_BLOCK}); got codes {c.dtype} {tuple(c.shape)}, scales {sc.dtype} "
                             f"{tuple(sc.shape)}")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def float(self):
        """The float32 weight."""
        n, k = self.shape
        return (self.codes.float().view(n, -1, Q8_BLOCK) * self.scales[..., None]).view(n, k)


def block_q8(weight) -> BlockQ8 | None:
    """``weight`` (float32, (N, K)) as a :class:`BlockQ8` when rowgemm runs here and every block of 32 along K is
    exactly a scale times integers in -127..127 (a Q8_0 tensor de-quantized, such as SmolLM2's token embedding
    and tied LM head: Q8_0 scales a block by its largest magnitude / 127); else None."""
    import torch
    if not row_kernel() or weight.dtype != torch.float32 or weight.dim() != 2 or weight.shape[1] % Q8_BLOCK:
        return None
    n, k = weight.shape
    b = weight.detach().contiguous().view(n, k // Q8_BLOCK, Q8_BLOCK)
    d = b.abs().amax(-1, keepdim=True) / 127
    q = torch.where(d > 0, b / torch.where(d > 0, d, 1), 0).round()
    if q.abs().max() > 127 or not torch.equal(q * d, b):
        return None
    return BlockQ8(q.to(torch.int8).view(n, k).contiguous(), d.view(n, k // Q8_BLOCK).contiguous())


def kernel() -> str:
    """Which kernel :func:`linear` uses in this process, in words (the benchmarks record it)."""
    return _rowgemm()[1]


def row_kernel() -> bool:
    """Whether :func:`linear` multiplies up to :data:`ROWGEMM_ROWS_MAX` rows through rowgemm in this process."""
    return _rowgemm()[0] is not None


def routed(module) -> bool:
    """Whether ``module``'s forward is :func:`linear` (:func:`use_row_kernels` routed it)."""
    return getattr(module.forward, "__func__", None) is _forward


def linear(x, weight, bias=None):
    """``torch.nn.functional.linear(x, weight, bias)``, by rows (see the module docstring): rowgemm up to
    :data:`ROWGEMM_ROWS_MAX` float32 rows, else one row through ``F.linear`` and more through
    ``(weight @ x.T).T``; training (autograd) keeps ``F.linear``.

    ``weight`` may be float16 (see :func:`half_weights`) for float32 ``x``, or a :class:`BlockQ8`: rowgemm widens it
    in registers, so the product is exactly that of its float32 copy; the torch paths multiply that copy."""
    import torch
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    q8 = isinstance(weight, BlockQ8)
    half = not q8 and weight.dtype == torch.float16                                  # a half_weights layer
    training = torch.is_grad_enabled() and (x.requires_grad or (not q8 and weight.requires_grad))
    layout = "q8" if q8 else "float16" if half else "float32" if weight.dtype == torch.float32 else None
    fs = _rowgemm()[0]
    f = None if fs is None or layout is None or x.dtype != torch.float32 or training else fs[layout]
    # shapes that do not fit go to torch, which raises its own error (rowgemm would read out of bounds); a
    # BlockQ8 checked its own layout
    if (f is not None and 0 < rows <= ROWGEMM_ROWS_MAX and x.device.type == "cpu"
            and (q8 or (weight.device.type == "cpu" and weight.dim() == 2 and weight.is_contiguous()))
            and weight.shape[1] == k
            and (bias is None or (bias.dtype == torch.float32 and bias.is_contiguous()
                                  and bias.shape == weight.shape[:1]))):
        x = x.contiguous()
        n = weight.shape[0]
        y = torch.empty(*x.shape[:-1], n, dtype=torch.float32)
        w = (weight.codes.data_ptr(), weight.scales.data_ptr()) if q8 else (weight.data_ptr(),)
        f(x.data_ptr(), rows, k, *w, n, None if bias is None else bias.data_ptr(), y.data_ptr(),
          torch.get_num_threads())
        return y
    if q8 or (half and x.dtype == torch.float32):     # the torch paths multiply the float32 weight
        weight = weight.float()
    if training or rows < 2:
        return torch.nn.functional.linear(x, weight, bias)
    y = (weight @ x.reshape(rows, k).T).T
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _forward(self, x):
    return linear(x, self.weight, self.bias)


def _forward_q8(self, x):
    """A forward of :func:`q8_output_head`'s LM head: its :class:`BlockQ8` for the few rows of a decode step or a
    round, the float32 weight (the same values) for more rows and for training."""
    import torch
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    fast = 0 < rows <= ROWGEMM_ROWS_MAX and not torch.is_grad_enabled()
    return linear(x, self.q8 if fast else self.weight, self.bias)


def q8_output_head(model) -> bool:
    """Hold ``model``'s LM head also as a :class:`BlockQ8` when its weight is exactly Q8_0 values (SmolLM2's LM
    head, tied to its Q8_0 token embedding) and it multiplies by rows (:func:`use_row_kernels`): a forward's
    logits read a quarter of the head's float32 bytes, bit for bit the same. The float32 weight stays (the
    embedding shares it) and serves more rows than :data:`ROWGEMM_ROWS_MAX` and training. Every caller of the
    model's forward takes the same path (the decode loop and transformers' ``generate`` alike). Returns whether
    it did."""
    import torch
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear or not routed(head):
        return False
    q8 = block_q8(head.weight)
    if q8 is None:
        return False
    head.q8 = q8
    head.forward = types.MethodType(_forward_q8, head)
    return True


def use_row_kernels(model) -> int:
    """Route every plain ``torch.nn.Linear`` of ``model`` (not a subclass: a quantized layer keeps its own
    forward) through :func:`linear`; returns how many. The weights are untouched; a copy of the model
    (``copy.deepcopy``) keeps the routing."""
    import torch
    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.forward = types.MethodType(_forward, module)
            n += 1
    return n


def half_weights(module) -> int:
    """Hold the weights of ``module``'s plain ``torch.nn.Linear`` layers in float16 when each is exactly a float16
    value and rowgemm runs here (half the bytes to read a product, the same products: :func:`linear`); returns
    how many were converted. Layers routed through :func:`use_row_kernels` only: another forward would meet a
    float16 weight with float32 inputs."""
    import torch
    if not row_kernel():
        return 0
    n = 0
    for m in module.modules():
        w = m.weight if type(m) is torch.nn.Linear and routed(m) else None
        if w is None or w.dtype != torch.float32:
            continue
        h = w.detach().to(torch.float16)
        if torch.equal(h.to(torch.float32), w.detach()):
            m.weight = torch.nn.Parameter(h.contiguous(), requires_grad=False)
            n += 1
    return n
