"""specdec.kernels: the linear layers' kernel chosen by rows gives F.linear's values, and models load with it."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from specdec import kernels  # noqa: E402


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
    """A model from specdec.models.load multiplies by rows (Llama and OPT: nn.Linear; GPT-2 keeps its Conv1D)."""
    from specdec import models
    model, _ = models.load(models.DEMO_DRAFT)
    plain = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert plain and all("forward" in vars(m) for m in plain)
