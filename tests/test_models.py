"""The paper's models: exact sizes, shapes, generator-only initialisation, and the flat-vector bridge."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from torch import nn

from sifl_ray.models import (
    MODEL_INPUT_SHAPES,
    MODEL_NAMES,
    MODEL_PARAM_COUNTS,
    build_model,
    count_params,
    flatten_params,
    load_flat_params_,
)
from sifl_ray.seeding import torch_generator


def _build(name: str, seed: int = 0, shape=None, num_classes: int = 10) -> nn.Module:
    return build_model(
        name,
        input_shape=shape or MODEL_INPUT_SHAPES[name],
        num_classes=num_classes,
        generator=torch_generator(seed, "test", "init"),
    )


@pytest.mark.parametrize(("name", "expected"), [("mlp", 199_210), ("cnn", 1_199_882), ("cnn2", 582_026)])
def test_paper_models_have_the_papers_parameter_counts(name: str, expected: int) -> None:
    # The literals are the paper's (§6, Table 3 gives ñ − n from them); the table must agree as well.
    assert count_params(_build(name)) == expected
    assert MODEL_PARAM_COUNTS[name] == expected


def test_digits_model_count_and_table_cover_every_model() -> None:
    assert set(MODEL_PARAM_COUNTS) == set(MODEL_NAMES) == set(MODEL_INPUT_SHAPES)
    assert (
        count_params(_build("digits_mlp")) == MODEL_PARAM_COUNTS["digits_mlp"] == 64 * 32 + 32 + 32 * 10 + 10
    )
    wide = count_params(_build("digits_mlp_wide"))
    assert wide == MODEL_PARAM_COUNTS["digits_mlp_wide"] == 64 * 128 + 128 + 128 * 10 + 10


def test_paper_layer_shapes() -> None:
    """The counts could match by accident; the layer shapes pin the architectures down."""
    shapes = {name: [tuple(p.shape) for p in _build(name).parameters()] for name in ("mlp", "cnn", "cnn2")}
    assert shapes["mlp"] == [(200, 784), (200,), (200, 200), (200,), (10, 200), (10,)]
    assert shapes["cnn"] == [
        (32, 1, 3, 3),
        (32,),
        (64, 32, 3, 3),
        (64,),
        (128, 9216),
        (128,),
        (10, 128),
        (10,),
    ]
    assert shapes["cnn2"] == [
        (32, 1, 5, 5),
        (32,),
        (64, 32, 5, 5),
        (64,),
        (512, 1024),
        (512,),
        (10, 512),
        (10,),
    ]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_shape(name: str) -> None:
    model = _build(name)
    x = torch.randn(5, *MODEL_INPUT_SHAPES[name], generator=torch.Generator().manual_seed(1))
    out = model(x)
    assert out.shape == (5, 10)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_other_input_shapes_and_class_counts() -> None:
    assert _build("mlp", shape=(1, 8, 8), num_classes=3)(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    assert _build("cnn", shape=(1, 8, 8))(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert _build("cnn2", shape=(3, 32, 32))(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "resnet"}, "unknown model 'resnet'"),
        ({"name": "cnn2", "input_shape": (1, 8, 8)}, "at least 16×16"),
        ({"name": "cnn", "input_shape": (1, 5, 5)}, "at least 6×6"),
        ({"name": "mlp", "input_shape": (784,)}, "input_shape must be (C, H, W)"),
        ({"name": "mlp", "num_classes": 1}, "num_classes must be at least 2"),
    ],
)
def test_build_model_errors(kwargs: dict, message: str) -> None:
    args = {"input_shape": (1, 28, 28), "num_classes": 10, "generator": torch.Generator().manual_seed(0)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_model(**args)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_init_depends_on_the_generator_only(name: str) -> None:
    torch.manual_seed(1)
    a = flatten_params(_build(name, seed=7))
    torch.manual_seed(2)
    _ = torch.rand(100)  # move the global stream on: it must not matter
    b = flatten_params(_build(name, seed=7))
    c = flatten_params(_build(name, seed=8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.slow  # another Python process
def test_build_model_imports_nothing_heavy_and_leaves_parameters_trainable() -> None:
    """Materialising the meta-device model imports no sympy (``Module.to_empty`` did: ~0.3–0.9 s of CPU and
    ~33 MiB in every process that builds one)."""
    import subprocess
    import sys

    code = (
        "import sys; from sifl_ray.models import build_model; from sifl_ray.seeding import torch_generator; "
        "m = build_model('cnn2', input_shape=(1, 28, 28), num_classes=10, "
        "generator=torch_generator(0, 'i')); "
        "print('sympy' in sys.modules, "
        "all(p.requires_grad and p.device.type == 'cpu' for p in m.parameters()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


def test_build_model_leaves_the_global_rng_alone() -> None:
    before = torch.random.get_rng_state()
    _build("cnn")
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("name", ["mlp", "cnn2"])
def test_init_follows_pytorch_default_law(name: str) -> None:
    """Every Linear/Conv2d tensor is U(-1/√fan_in, 1/√fan_in): inside the bound and spread over it."""
    for module in _build(name).modules():
        if isinstance(module, nn.Linear | nn.Conv2d):
            bound = 1.0 / math.sqrt(module.weight[0].numel())
            for p in (module.weight, module.bias):
                assert p.abs().max() <= bound
                if p.numel() >= 500:  # std of U(-b, b) is b/√3
                    assert p.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)


def test_flatten_order_is_parameters_order() -> None:
    model = _build("cnn2")
    w = flatten_params(model)
    assert w.dtype == torch.float64 and w.shape == (MODEL_PARAM_COUNTS["cnn2"],)
    offset = 0
    for p in model.parameters():
        assert torch.equal(w[offset : offset + p.numel()], p.detach().reshape(-1).double())
        offset += p.numel()


def test_flatten_returns_a_copy_and_fills_out() -> None:
    model = _build("digits_mlp")
    w = flatten_params(model)
    w.zero_()
    assert flatten_params(model).abs().sum() > 0  # zeroing the copy did not touch the model
    out = torch.empty(count_params(model), dtype=torch.float64)
    assert flatten_params(model, out=out) is out
    assert torch.equal(out, flatten_params(model))
    with pytest.raises(ValueError, match="float64 vector of length 2410"):
        flatten_params(model, out=torch.empty(count_params(model), dtype=torch.float32))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_load_flatten_round_trip_keeps_parameter_identity(name: str) -> None:
    model = _build(name)
    params_before = list(model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = count_params(model)
    w = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert load_flat_params_(model, w) is model
    assert torch.equal(flatten_params(model), w.float().double())  # exact up to the float32 cast
    assert all(a is b for a, b in zip(params_before, model.parameters(), strict=True))
    assert all(p is q for p, q in zip(opt.param_groups[0]["params"], model.parameters(), strict=True))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.floats(1e-3, 1e3))
def test_round_trip_property_on_the_digits_model(seed: int, scale: float) -> None:
    model = _build("digits_mlp")
    w = scale * torch.randn(2410, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    load_flat_params_(model, w)
    back = flatten_params(model)
    assert torch.equal(back, w.float().double())
    # Loading what we read is the identity.
    load_flat_params_(model, back)
    assert torch.equal(flatten_params(model), back)


def test_loaded_parameters_drive_the_forward_pass() -> None:
    a, b = _build("mlp", seed=1), _build("mlp", seed=2)
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(a(x), b(x))
    load_flat_params_(b, flatten_params(a))
    assert torch.equal(a(x), b(x))


def test_load_rejects_wrong_shapes() -> None:
    model = _build("digits_mlp")
    with pytest.raises(ValueError, match="length 2410"):
        load_flat_params_(model, torch.zeros(2409, dtype=torch.float64))
    with pytest.raises(ValueError, match="length 2410"):
        load_flat_params_(model, torch.zeros(1, 2410, dtype=torch.float64))
