"""specdec.models.kernels: the linear layers' kernel chosen by rows (rowgemm, W @ x.T, F.linear) gives F.linear's
values, falls back to torch when rowgemm cannot run, and models load with it."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from specdec.models import kernels, loading  # noqa: E402


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 16, 64])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_equals_f_linear(rows, bias):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(300, 96, generator=g)
    b = torch.randn(300, generator=g) if bias else None
    x = torch.randn(1, rows, 96, generator=g)
    with torch.inference_mode():
        got = kernels.linear(x, w, b)
    want = torch.nn.functional.linear(x, w, b)
    assert got.shape == want.shape == (1, rows, 300)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _reference(x, w, b):
    """The product in float64 (what both kernels round)."""
    y = x.double() @ w.double().T
    return (y + b.double() if b is not None else y).float()


needs_rowgemm = pytest.mark.skipif(kernels._rowgemm()[0] is None, reason=kernels.kernel())


@needs_rowgemm
@pytest.mark.parametrize("k", [8, 97, 576])            # a multiple of 8, and one with a 1-lane tail
@pytest.mark.parametrize("n", [1, 63, 64, 301])        # under 64: one thread; odd: a last unpaired W row
@pytest.mark.parametrize("threads", [1, 2])
def test_rowgemm_equals_the_float64_product(k, n, threads):
    """Every row count up to ROWGEMM_ROWS_MAX (blocks of four rows and their remainders) and one beyond it,
    with and without a bias, within float32 rounding of the float64 product; and as close as F.linear."""
    g = torch.Generator().manual_seed(k * 1000 + n)
    w = torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows in list(range(1, 10)) + [15, kernels.ROWGEMM_ROWS_MAX, kernels.ROWGEMM_ROWS_MAX + 1]:
            x = torch.randn(rows, k, generator=g)
            for bias in (None, b):
                with torch.inference_mode():
                    got = kernels.linear(x, w, bias)
                want = _reference(x, w, bias)
                assert got.shape == (rows, n) and got.dtype == torch.float32
                err = (got - want).abs().max().item()
                ref = (torch.nn.functional.linear(x, w, bias) - want).abs().max().item()
                assert err <= max(4 * ref, 1e-5 * k ** 0.5), (rows, bias is not None, err, ref)
    finally:
        torch.set_num_threads(saved)


@needs_rowgemm
def test_rowgemm_takes_strided_inputs_and_leaves_other_dtypes_to_torch():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(70, 40, generator=g)
    x = torch.randn(40, 6, generator=g).T                  # not contiguous
    with torch.inference_mode():
        torch.testing.assert_close(kernels.linear(x, w), _reference(x, w, None), rtol=1e-5, atol=1e-5)
        wt = torch.randn(40, 70, generator=g).T             # a transposed weight: the torch path
        torch.testing.assert_close(kernels.linear(x, wt), _reference(x, wt, None), rtol=1e-5, atol=1e-5)
        xd, wd = x.double(), w.double()
        assert kernels.linear(xd, wd).dtype == torch.float64
        torch.testing.assert_close(kernels.linear(xd, wd), xd @ wd.T)


@needs_rowgemm
@pytest.mark.parametrize("threads", [1, 2])
def test_a_rows_product_does_not_depend_on_the_rows_beside_it(threads):
    """rowgemm multiplies up to seven rows one W row at a time and more rows three W rows at a time in groups of up
    to four rows (8, 9 = 3 + 3 + 3, 10 = 4 + 3 + 3, 13, 32); every output sums in the same order either way, so a
    position's logits are the same bits whether the target scores it alone, in a chain or in a tree (float32 and
    float16 weights; N not a multiple of three or of the threads leaves a remainder of W rows)."""
    g = torch.Generator().manual_seed(5)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for k, n in ((576, 301), (97, 1000)):
            w = torch.randn(n, k, generator=g)
            x = torch.randn(kernels.ROWGEMM_ROWS_MAX, k, generator=g)
            for weight in (w, w.half()):
                with torch.inference_mode():
                    alone = torch.cat([kernels.linear(x[i:i + 1], weight) for i in range(len(x))])
                    for rows in (2, 4, 5, 6, 7, 8, 9, 10, 13, kernels.ROWGEMM_ROWS_MAX):
                        assert torch.equal(kernels.linear(x[:rows], weight), alone[:rows]), (k, n, rows)
    finally:
        torch.set_num_threads(saved)


@needs_rowgemm
@pytest.mark.parametrize("k", [8, 97, 576])
@pytest.mark.parametrize("n", [63, 301])
@pytest.mark.parametrize("threads", [1, 2])
def test_half_weights_give_the_float32_products_bit_for_bit(k, n, threads):
    """A float16 weight (rowgemm_h, widened in registers) gives exactly the product of its float32 copy: every
    row count through rowgemm, one beyond it (the torch path multiplies the copy), with and without a bias."""
    g = torch.Generator().manual_seed(k * 7 + n)
    w = torch.randn(n, k, generator=g).half()
    b = torch.randn(n, generator=g)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows in list(range(1, 10)) + [kernels.ROWGEMM_ROWS_MAX, kernels.ROWGEMM_ROWS_MAX + 1]:
            x = torch.randn(rows, k, generator=g)
            for bias in (None, b):
                with torch.inference_mode():
                    got, want = kernels.linear(x, w, bias), kernels.linear(x, w.float(), bias)
                assert got.dtype == torch.float32 and torch.equal(got, want), (rows, bias is not None)
    finally:
        torch.set_num_threads(saved)


def test_half_weights_hold_only_exact_routed_layers(monkeypatch):
    """half_weights converts a routed layer whose weights are float16 values (same outputs, bit for bit), leaves
    a layer that would round and an unrouted one alone, and converts nothing where rowgemm does not run (the
    torch path would multiply a float32 copy at every call)."""
    class Sub(torch.nn.Linear):
        pass

    def model():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Linear(24, 8), Sub(8, 8))
        with torch.no_grad():
            m[0].weight.copy_(m[0].weight.half().float())
            m[2].weight.copy_(m[2].weight.half().float())
        kernels.use_row_kernels(m)
        return m
    x = torch.randn(3, 16)
    m = model()
    with torch.inference_mode():
        want = m(x)
        if kernels._rowgemm()[0] is None:
            assert kernels.half_weights(m) == 0
            return
        assert kernels.half_weights(m) == 1
        assert [layer.weight.dtype for layer in m] == [torch.float16, torch.float32, torch.float32]
        assert torch.equal(m(x), want)
    try:
        monkeypatch.setenv(kernels.KERNEL_ENV, "torch")
        kernels._rowgemm.cache_clear()
        with torch.inference_mode():
            assert kernels.half_weights(model()) == 0
            assert torch.equal(m(x), model()(x))     # a float16 layer on the torch path: its float32 copy's product
    finally:
        kernels._rowgemm.cache_clear()


def _q8(n, k, g):
    """A Q8_0 weight as GGUF de-quantizes it: per block of 32, int8 codes whose largest magnitude is 127, times a
    float16 scale."""
    q = torch.randint(-127, 128, (n, k // 32, 32), generator=g).float()
    q[:, :, 7] = torch.where(torch.rand(n, k // 32, generator=g) < 0.5, 127.0, -127.0)
    d = torch.rand(n, k // 32, 1, generator=g).mul(0.1).half().float()
    return (q * d).view(n, k)


@needs_rowgemm
@pytest.mark.parametrize("threads", [1, 2])
def test_block_q8_gives_the_float32_products_bit_for_bit(threads):
    """A Q8_0 weight recovered as int8 codes and block scales (block_q8) multiplies to exactly its float32 form's
    products through rowgemm_q8, every row count, with and without a bias; beyond rowgemm's rows and with
    autograd its float32 copy multiplies."""
    g = torch.Generator().manual_seed(11)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n, k in ((301, 576), (63, 64), (1000, 96)):
            w = _q8(n, k, g)
            bq = kernels.block_q8(w)
            assert bq is not None and bq.codes.dtype == torch.int8 and bq.scales.shape == (n, k // 32)
            assert torch.equal(bq.float(), w)
            b = torch.randn(n, generator=g)
            for rows in list(range(1, 10)) + [kernels.ROWGEMM_ROWS_MAX, kernels.ROWGEMM_ROWS_MAX + 1]:
                x = torch.randn(rows, k, generator=g)
                for bias in (None, b):
                    with torch.inference_mode():
                        assert torch.equal(kernels.linear(x, bq, bias), kernels.linear(x, w, bias)), (n, k, rows)
    finally:
        torch.set_num_threads(saved)
    x = torch.randn(3, 96, requires_grad=True)
    torch.testing.assert_close(kernels.linear(x, bq), torch.nn.functional.linear(x, w))


class _Tied(torch.nn.Module):
    """A token embedding and the LM head that shares its weight, as SmolLM2's."""

    def __init__(self, weight):
        super().__init__()
        self.embed = torch.nn.Embedding(*weight.shape)
        self.head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.embed.weight = self.head.weight = torch.nn.Parameter(weight)

    def get_output_embeddings(self):
        return self.head

    def forward(self, x):
        return self.head(x)


@needs_rowgemm
def test_q8_output_head_gives_the_same_logits_from_a_quarter_of_the_bytes():
    """A routed LM head whose (tied) weight is exactly Q8_0 is also held as a BlockQ8 and multiplies through it up to
    ROWGEMM_ROWS_MAX rows, bit for bit the float32 logits; more rows and autograd use the float32 weight, which the
    embedding keeps sharing; a copy keeps the routing. A head of other values, or one not routed, is left alone."""
    g = torch.Generator().manual_seed(13)
    model = _Tied(_q8(300, 64, g))
    assert not kernels.q8_output_head(model)                 # not routed through linear() yet
    kernels.use_row_kernels(model)
    want = {rows: torch.randn(1, rows, 64, generator=g) for rows in (1, 2, 7, kernels.ROWGEMM_ROWS_MAX,
                                                                       kernels.ROWGEMM_ROWS_MAX + 1)}
    with torch.inference_mode():
        floats = {rows: model(x) for rows, x in want.items()}
    assert kernels.q8_output_head(model) and isinstance(model.head.q8, kernels.BlockQ8)
    assert model.embed.weight is model.head.weight and torch.equal(model.head.q8.float(), model.head.weight)
    picked = []
    real = kernels.linear
    try:
        kernels.linear = lambda x, w, b=None: (picked.append(type(w)), real(x, w, b))[1]
        with torch.inference_mode():
            for rows, x in want.items():
                assert torch.equal(model(x), floats[rows]), rows
    finally:
        kernels.linear = real
    assert picked == [kernels.BlockQ8] * 4 + [torch.nn.Parameter]
    x = torch.randn(2, 64, requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None
    twin = copy.deepcopy(model)
    with torch.inference_mode():
        assert torch.equal(twin(want[1]), floats[1]) and twin.head.q8 is not model.head.q8
    other = _Tied(torch.randn(300, 64, generator=g))
    kernels.use_row_kernels(other)
    assert not kernels.q8_output_head(other) and not hasattr(other.head, "q8")


def test_block_q8_refuses_weights_that_are_not_q8_0(monkeypatch):
    """No exact Q8_0 form: random float32 values, a block whose largest code is not 127 (another scale), K not
    a multiple of 32, float64; and none at all where rowgemm does not run."""
    g = torch.Generator().manual_seed(12)
    w = _q8(16, 64, g)
    off = w.clone()
    off[3, 40] += w[3, 32:64].abs().max() / 254     # half that block's scale: a code of n + 0.5
    for bad in (torch.randn(16, 64, generator=g), off, _q8(16, 64, g)[:, :48].contiguous(), w.double()):
        assert kernels.block_q8(bad) is None
    if kernels._rowgemm()[0] is None:
        assert kernels.block_q8(w) is None
        return
    assert kernels.block_q8(w) is not None
    codes = torch.zeros(4, 64, dtype=torch.int8)
    for bad in ((codes.float(), torch.zeros(4, 2)), (codes[:, :48], torch.zeros(4, 1)), (codes, torch.zeros(4, 3)),
                (codes.T, torch.zeros(64, 0))):
        with pytest.raises(ValueError, match="BlockQ8 needs"):
            kernels.BlockQ8(*bad)
    try:
        monkeypatch.setenv(kernels.KERNEL_ENV, "torch")
        kernels._rowgemm.cache_clear()
        assert kernels.block_q8(w) is None
    finally:
        kernels._rowgemm.cache_clear()


def test_mismatched_shapes_raise_torchs_error():
    """A weight or bias that does not fit x never reaches rowgemm (which would read past them): torch's own
    shape error (from ``F.linear`` for one row, from ``W @ x.T`` for more)."""
    for rows in (1, 3):
        x = torch.randn(rows, 16)
        for w, b in ((torch.randn(5, 15), None), (torch.randn(5, 17), None), (torch.randn(5, 16), torch.randn(4))):
            with torch.inference_mode(), pytest.raises(RuntimeError, match=r"shape|size|mat"):
                kernels.linear(x, w, b)


def test_kernel_falls_back_to_torch_and_says_why(monkeypatch, tmp_path):
    """SPECDEC_KERNEL=torch, or a compiler that fails: the torch path, named with the reason; values kept."""
    monkeypatch.setattr(kernels, "_cache_dir", lambda: tmp_path)
    x, w = torch.randn(3, 16), torch.randn(5, 16)
    try:
        monkeypatch.setenv(kernels.KERNEL_ENV, "torch")
        kernels._rowgemm.cache_clear()
        assert kernels.kernel() == f"torch ({kernels.KERNEL_ENV}=torch)"
        monkeypatch.delenv(kernels.KERNEL_ENV)
        with monkeypatch.context() as m:                    # an ARM64 board: not even a compile is tried
            m.setattr(kernels.platform, "machine", lambda: "aarch64")
            kernels._rowgemm.cache_clear()
            assert kernels.kernel() == "torch (rowgemm is written for x86-64 with AVX2; this CPU is aarch64)"
        if kernels.platform.machine().lower() not in ("x86_64", "amd64"):
            return
        monkeypatch.setattr(kernels, "CXX", "false")       # runs, fails, prints nothing
        kernels._rowgemm.cache_clear()
        assert kernels.kernel().startswith("torch (rowgemm unavailable: building the rowgemm kernel failed (exit 1)")
        with torch.inference_mode():
            torch.testing.assert_close(kernels.linear(x, w), _reference(x, w, None), rtol=1e-5, atol=1e-5)
        assert not list(tmp_path.iterdir())                 # no library, no temporary file left behind
    finally:
        kernels._rowgemm.cache_clear()


def test_training_keeps_autograd():
    w = torch.nn.Parameter(torch.randn(8, 4))
    x = torch.randn(3, 4)
    kernels.linear(x, w).sum().backward()
    assert w.grad is not None and w.grad.shape == (8, 4)


def test_use_row_kernels_routes_plain_linears_only():
    class Sub(torch.nn.Linear):
        pass
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), Sub(5, 4), torch.nn.Linear(4, 3))
    x = torch.randn(2, 7, 6)
    with torch.inference_mode():
        want = model(x)
        assert kernels.use_row_kernels(model) == 2
        assert "forward" in vars(model[0]) and "forward" not in vars(model[2])
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
        twin = copy.deepcopy(model)             # the copy routes through its own weights
        twin[0].weight.zero_()
        assert not torch.allclose(twin(x), model(x))


@pytest.mark.ml
def test_loaded_models_use_row_kernels(torch_threads):
    """A model from specdec.models.loading.load multiplies by rows (Llama and OPT: nn.Linear; GPT-2 keeps its
    Conv1D)."""
    model, _ = loading.load(loading.DEMO_DRAFT)
    plain = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert plain and all("forward" in vars(m) for m in plain)
