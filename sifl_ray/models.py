"""The paper's models (docs/method.md "The paper's experiments") and the flat-vector view the codes work on.

The immersion codes act on one flat parameter vector ``w ∈ R^n`` (float64, docs/method.md "Precision"), while
torch trains a module. :func:`flatten_params` and :func:`load_flat_params_` are the bridge, in a fixed order
(``model.parameters()``), so every party agrees on which coordinate is which weight.

Initialisation draws only from the ``torch.Generator`` passed in: models are built on the ``meta`` device
(no global RNG is touched, no throw-away init is paid for) and then every parameter is drawn from the
generator with PyTorch's default law (``U(-1/√fan_in, 1/√fan_in)`` for weights and biases of ``Linear``
and ``Conv2d``, what ``kaiming_uniform_(a=√5)`` gives). So the same generator seed gives the same model in
any process, whatever else has used the global seed.

Your own model: ``train.model=<name>`` for a factory registered with :func:`register_model`
(in a plug-in module, ``SIFL_PLUGINS``), or ``train.model=package.module:factory``. Either way the factory is
called as ``factory(input_shape, num_classes, **settings)`` and returns any ``torch.nn.Module``. A
registered model declares its settings as a dataclass (``register_model("my_cnn", settings=MyCnn)``): the
section ``my_cnn`` of the configuration, validated like every section, whose typed values are ``settings``.
An import path, which validation cannot import, takes the free-form ``train.model_args`` instead (so does a
registered model that declares no settings).
A user's layers have initialisers this module cannot know, so the factory runs on the CPU with torch's
global generator seeded from the run's ``init`` stream inside :func:`torch.random.fork_rng`: every party
builds the same ``w^0`` and the caller's global generator is left as it was. What such a model may not have
is said by :func:`model_refusal`: SIFL codes the vector ``model.parameters()`` and nothing else.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from sifl_ray.config.import_paths import import_object, is_import_path
from sifl_ray.config.names import MODELS
from sifl_ray.config.sections import component_section, section_defaults
from sifl_ray.errors import SiflError

__all__ = [
    "CNN",
    "CNN2",
    "MLP",
    "MODEL_INPUT_SHAPES",
    "MODEL_NAMES",
    "MODEL_PARAM_COUNTS",
    "ModelError",
    "build_model",
    "count_params",
    "flatten_params",
    "load_flat_params_",
    "model_refusal",
    "register_model",
    "resolve_model_factory",
    "unregister_model",
]


class MLP(nn.Module):
    """Fully connected ReLU network on the flattened input.

    The paper's MLP is ``MLP(784, (200, 200), 10)`` (199,210 parameters); the digits model is
    ``MLP(64, (32,), 10)`` (2,410 parameters).
    """

    def __init__(self, in_features: int, hidden: Sequence[int], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


def _conv_out(size: int, kernel: int) -> int:
    return size - kernel + 1  # stride 1, no padding, as in the paper


class CNN(nn.Module):
    """The paper's first CNN: conv3×3 (→32), ReLU, conv3×3 (→64), ReLU, maxpool 2×2, fc 128, ReLU, fc.

    1,199,882 parameters on 1×28×28 inputs with 10 classes (most of them in the 9216→128 layer).
    """

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        h2, w2 = (_conv_out(_conv_out(s, 3), 3) // 2 for s in (h, w))
        if h2 < 1 or w2 < 1:
            raise ValueError(
                f"model 'cnn' needs inputs of at least 6×6 pixels; got input_shape={tuple(input_shape)}"
            )
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()
        )
        self.classifier = nn.Sequential(nn.Linear(64 * h2 * w2, 128), nn.ReLU(), nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class CNN2(nn.Module):
    """The paper's second CNN: conv5×5 (→32), ReLU, pool, conv5×5 (→64), ReLU, pool, fc 512, ReLU, fc.

    582,026 parameters on 1×28×28 inputs with 10 classes. Used for Fashion-MNIST and the DP comparison.
    """

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        h2, w2 = (_conv_out(_conv_out(s, 5) // 2, 5) // 2 for s in (h, w))
        if h2 < 1 or w2 < 1:
            raise ValueError(
                f"model 'cnn2' needs inputs of at least 16×16 pixels; got input_shape={tuple(input_shape)}"
            )
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        )  # fmt: skip
        self.classifier = nn.Sequential(nn.Linear(64 * h2 * w2, 512), nn.ReLU(), nn.Linear(512, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def mlp(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The paper's MLP: two hidden layers of 200 units."""
    return MLP(math.prod(input_shape), (200, 200), num_classes)


def digits_mlp(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A small MLP for scikit-learn's 8×8 digits: one hidden layer of 32 units."""
    return MLP(math.prod(input_shape), (32,), num_classes)


def digits_mlp_wide(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """``digits_mlp`` with 128 hidden units (9,610 parameters): room for a few thousand audit canaries,
    whose directions interfere in a model not much larger than their number (docs/privacy-audit.md)."""
    return MLP(math.prod(input_shape), (128,), num_classes)


#: The paper's models, the built-in entries of the model registry (:data:`sifl_ray.config.names.MODELS`,
#: where each is declared by name and import path, so validation knows them without torch).
MODEL_NAMES: tuple[str, ...] = tuple(n for n in MODELS.names() if MODELS.declared(n))

MODEL_INPUT_SHAPES: dict[str, tuple[int, int, int]] = {
    "mlp": (1, 28, 28),
    "cnn": (1, 28, 28),
    "cnn2": (1, 28, 28),
    "digits_mlp": (1, 8, 8),
    "digits_mlp_wide": (1, 8, 8),
}
"""The input shape each model is meant for (and for which :data:`MODEL_PARAM_COUNTS` holds)."""

MODEL_PARAM_COUNTS: dict[str, int] = {
    "mlp": 199_210,
    "cnn": 1_199_882,
    "cnn2": 582_026,
    "digits_mlp": 2_410,
    "digits_mlp_wide": 9_610,
}
"""Parameter counts n at :data:`MODEL_INPUT_SHAPES` with 10 classes; the first three are the paper's."""

ModelFactory = Callable[..., nn.Module]
"""``factory(input_shape, num_classes, **settings) -> nn.Module``: a user's model."""


class ModelError(SiflError, ValueError):
    """A user's model cannot be built or cannot be trained under the platform's coding; the message says
    why and what to change."""


def register_model(name: str, *, settings: type | None = None) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: make ``factory`` the model ``train.model=<name>`` builds, and return it unchanged.

    The factory is called as ``factory(input_shape, num_classes, **settings)`` (``input_shape`` is
    ``(C, H, W)`` of one sample) and must return a ``torch.nn.Module``. With ``settings`` (a dataclass whose
    fields have defaults and, through :func:`sifl_ray.config.setting`, ranges), the section ``<name>``
    is a key of the configuration (``my_cnn.width=64``), checked like every section, and its typed values
    are the factory's keyword arguments; without, the factory takes ``train.model_args``. It joins the model
    registry (:data:`sifl_ray.config.names.MODELS`), so validation accepts the name at once. The
    driver hands the factory and its arguments to every party (:attr:`sifl_ray.specs.ModelSpec.factory`;
    Ray pickles it by reference, or by value for a script's own function), so a worker need not have
    imported the plug-in.

    Raises:
        ValueError: ``name`` is a built-in model or already registered.
        SectionError: ``settings`` is no dataclass with defaults, the factory takes no keyword of one of
            its fields, or the section ``name`` is another component's (a ``ValueError`` too).
    """

    def register(factory: ModelFactory) -> ModelFactory:
        if name in MODELS:
            taken = "a built-in model" if MODELS.declared(name) else MODELS.path(name)
            raise ValueError(f"model {name!r} is already registered ({taken}); choose another name")
        MODELS.register(name, factory, settings=settings)
        return factory

    return register


def unregister_model(name: str) -> None:
    """Remove the registered model ``name`` and its section (tests that register models of their own)."""
    if name in MODELS and not MODELS.declared(name):
        MODELS.unregister(name)


def resolve_model_factory(name: str, *, key: str = "train.model") -> ModelFactory | None:
    """The user's factory ``name`` stands for (``None`` for a built-in model).

    Raises:
        ModelError: ``name`` is neither built in, registered in this process, nor an import path.
        ImportPathError: an import path that does not import (the message names ``key``).
    """
    if name in MODELS:
        return None if MODELS.declared(name) else MODELS[name]
    if is_import_path(name):
        return import_object(name, key=key)
    known = ", ".join(MODELS.names())
    raise ModelError(
        f"{key}: unknown model {name!r}; expected one of {known} or an import path package.module:factory. "
        "Fix: register yours with @sifl_ray.models.register_model in a module named in SIFL_PLUGINS"
    )


def model_refusal(model: nn.Module) -> str | None:
    """Why ``model`` cannot be trained under the platform's coding (``None``: it can).

    SIFL codes, sends and averages the parameter vector ``model.parameters()`` (:func:`flatten_params`) and
    nothing else. Running statistics (``BatchNorm`` with ``track_running_stats``) are buffers that training
    changes: they would be neither coded nor averaged, each worker's copy would drift with the data of the
    clients it hosts (another model in a Ray run than in-process), and evaluation would use the never-trained
    initial statistics. Sending them would publish each client's feature means in the clear, beside the
    coded parameters. So such a model is refused; ``GroupNorm``, ``LayerNorm`` or
    ``BatchNorm(track_running_stats=False)`` (batch statistics in training and evaluation) normalise without
    that state. Constant buffers (a fixed positional table, a mask) are allowed: every party builds the same.
    """
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
            return (
                f"layer {name or type(model).__name__} ({type(module).__name__}) keeps running statistics, "
                "buffers that training changes but that SIFL neither codes nor averages (it codes only "
                "model.parameters()); they would drift apart on each worker and evaluation would use "
                "untrained ones. Fix: GroupNorm or LayerNorm, or track_running_stats=False"
            )
    for name, p in model.named_parameters():
        if not p.is_floating_point():
            return f"parameter {name} is {p.dtype}; the coding needs floating-point parameters"
    if not any(True for _ in model.parameters()):
        return "the model has no parameters: there is nothing to train or code"
    return None


def _build_user_model(
    factory: ModelFactory,
    name: str,
    shape: tuple[int, int, int],
    num_classes: int,
    args: Mapping[str, Any],
    generator: torch.Generator,
    args_key: str,
) -> nn.Module:
    """Run a user's factory with torch's global generator seeded from ``generator`` (and restored after):
    whatever initialisers its layers use, every party gets the same model from the same stream."""
    try:  # checked apart from the call: a TypeError inside the factory is a bug of its own
        inspect.signature(factory).bind(shape, num_classes, **dict(args))
    except TypeError as err:
        raise ModelError(
            f"train.model: {name!r} cannot be called as factory(input_shape, num_classes, "
            f"**{dict(args)}) ({err}); give it that signature or fix {args_key}"
        ) from None
    except ValueError:  # no signature to read (a builtin): the call itself will tell
        pass
    seed = int(torch.randint(0, 2**62, (), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory(shape, num_classes, **dict(args))
    if not isinstance(model, nn.Module):
        raise ModelError(f"train.model: {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    refusal = model_refusal(model)
    if refusal is not None:
        raise ModelError(f"train.model: model {name!r} is refused: {refusal}")
    return model.float().train()


def build_model(
    name: str,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    generator: torch.Generator,
    args: Mapping[str, Any] | None = None,
    factory: ModelFactory | None = None,
) -> nn.Module:
    """Build model ``name`` on the CPU, initialised from ``generator`` only.

    Args:
        name: one of :data:`MODEL_NAMES` (``"mlp"``, ``"cnn"``, ``"cnn2"``, ``"digits_mlp"``), a name
            registered with :func:`register_model`, or an import path ``package.module:factory``.
        input_shape: ``(C, H, W)`` of one sample, e.g. ``(1, 28, 28)`` for MNIST, ``(1, 8, 8)`` for digits.
        num_classes: number of output logits.
        generator: a CPU ``torch.Generator``; use the run's named stream (``seeding.torch_generator(seed,
            "model_init")``) so every arm of a scenario starts from the same ``w^0``.
        args: a user factory's keyword arguments: its settings section's values (a model registered in
            this process with ``settings`` takes them over its dataclass's defaults), else
            ``train.model_args``; a built-in model takes none.
        factory: the user's factory ``name`` stands for, resolved by the driver
            (:func:`resolve_model_factory`) and handed to each party; ``None``: resolve ``name`` here.

    Returns:
        A float32 module in training mode whose parameters depend only on the generator's state.

    Raises:
        ValueError: unknown name, a malformed ``input_shape`` or ``num_classes``, an input too small for
            the convolutions, or a generator not on the CPU.
        ModelError: a user's model that cannot be built, or that :func:`model_refusal` refuses.
        ImportPathError: an import path that does not import.
    """
    if factory is None:
        factory = resolve_model_factory(name)
    schema = component_section("model", name)
    args_key = "train.model_args"
    if schema is not None:  # a worker that never imported the plug-in receives the full section instead
        args, args_key = {**section_defaults(schema), **(args or {})}, f"the section {name}"
    if factory is None and args:
        raise ModelError(
            f"train.model_args: the built-in model {name!r} takes no arguments, got {dict(args)}; "
            "set train.model_args={} or name your own factory in train.model"
        )
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"input_shape must be (C, H, W) with positive sizes; got {tuple(input_shape)}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be at least 2; got {num_classes}")
    if generator.device.type != "cpu":
        raise ValueError(
            f"build_model initialises on the CPU and needs a CPU generator; got one on {generator.device}. "
            "Build on the CPU, then move the model with .to(device)."
        )
    if factory is not None:
        return _build_user_model(factory, name, shape, int(num_classes), args or {}, generator, args_key)
    with torch.device("meta"):
        model = MODELS[name](shape, int(num_classes))
    _materialize_(model)
    _init_from_generator_(model, generator)
    return model


def _materialize_(model: nn.Module) -> None:
    """Give every parameter and buffer of a model built on the meta device uninitialised CPU storage.

    What ``model.to_empty(device="cpu")`` does, without its ``empty_like`` of meta tensors, which goes
    through torch's Python reference implementations and imports sympy on the way: CPU time and tens of MiB
    in every process that builds a model (the driver, the evaluator, each client worker), which
    ``python -m bench startup`` sees in a run's start-up and peak memory.
    """
    for module in model.modules():
        for key, p in list(module.named_parameters(recurse=False)):
            empty = torch.empty(p.shape, dtype=p.dtype, device="cpu")
            setattr(module, key, nn.Parameter(empty, requires_grad=p.requires_grad))
        for key, b in list(module.named_buffers(recurse=False)):
            setattr(module, key, torch.empty(b.shape, dtype=b.dtype, device="cpu"))


@torch.no_grad()
def _init_from_generator_(model: nn.Module, generator: torch.Generator) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Conv2d):
            fan_in = module.weight[0].numel()
            bound = 1.0 / math.sqrt(fan_in)
            module.weight.uniform_(-bound, bound, generator=generator)
            if module.bias is not None:
                module.bias.uniform_(-bound, bound, generator=generator)
        elif any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"no generator-driven initialiser for {type(module).__name__}; add one here")


def count_params(model: nn.Module) -> int:
    """n, the length of the vector the codes act on (all parameters, trainable or not)."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def flatten_params(model: nn.Module, out: torch.Tensor | None = None) -> torch.Tensor:
    """The parameters of ``model`` as one float64 vector of length n, in ``model.parameters()`` order.

    Args:
        model: any module.
        out: optional preallocated float64 vector of length n (on any device) to fill and return; the hot
            path of a client passes the same buffer every step, so nothing is allocated.

    Returns:
        ``out`` or a new CPU-or-model-device float64 tensor; never aliases the parameters.
    """
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    if out is None:
        device = params[0].device if params else torch.device("cpu")
        out = torch.empty(n, dtype=torch.float64, device=device)
    elif out.dim() != 1 or out.numel() != n or out.dtype != torch.float64:
        raise ValueError(
            f"out must be a float64 vector of length {n}; got dtype {out.dtype}, shape {tuple(out.shape)}"
        )
    offset = 0
    for p in params:
        k = p.numel()
        out[offset : offset + k].view_as(p).copy_(p)
        offset += k
    return out


@torch.no_grad()
def load_flat_params_(model: nn.Module, w: torch.Tensor) -> nn.Module:
    """Write the flat vector ``w`` (length n, any float dtype and device) into ``model``'s parameters.

    Each parameter is filled by one ``copy_`` from a view of ``w`` (the cast to the parameter dtype happens
    inside the copy), so no n-sized temporary is allocated and the parameter tensors keep their identity
    (an optimizer holding them stays valid).

    Returns:
        ``model``, for chaining.

    Raises:
        ValueError: ``w`` is not a vector of length n.
    """
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    if w.dim() != 1 or w.numel() != n:
        raise ValueError(
            f"expected a flat parameter vector of length {n} for {type(model).__name__}; "
            f"got shape {tuple(w.shape)}"
        )
    offset = 0
    for p in params:
        k = p.numel()
        p.copy_(w[offset : offset + k].view_as(p))
        offset += k
    return model
