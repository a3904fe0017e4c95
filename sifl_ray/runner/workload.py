"""What every arm shares: the data set, its split over the clients and of the clients over the workers, the
model and its initial parameters. Each comes from the run seed and its own stream name, so every arm (and a
resumed run) sees the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from sifl_ray.config.sections import component_section
from sifl_ray.data import partition_dataset
from sifl_ray.data.own import load_any_dataset
from sifl_ray.data.partition import partition_report
from sifl_ray.models import build_model, flatten_params, resolve_model_factory
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import ModelSpec


def component_settings(cfg: DictConfig, kind: str, name: str) -> dict[str, Any] | None:
    """The typed values of the section the component ``kind`` ``name`` declared (``"model"``,
    ``"my_cnn"`` → ``cfg.my_cnn``), as the keyword arguments it receives; ``None`` when it declared none.

    Why read here and nowhere else: the validated section holds every key (the dataclass's defaults where
    the scenario set none), so a component receives exactly what the configuration shows and saves.
    """
    if component_section(kind, name) is None:
        return None
    return OmegaConf.to_container(cfg[name], resolve=True)


def partition(cfg: DictConfig, labels: np.ndarray, groups: np.ndarray | None = None) -> list[np.ndarray]:
    """The clients' training indices; ``groups`` is the data's own client id per sample (``natural``)."""
    return partition_dataset(
        labels,
        scheme=cfg.data.partition,
        num_clients=cfg.clients.num_clients,
        seed=cfg.seed,
        groups=groups,
        settings=component_settings(cfg, "partitioner", cfg.data.partition),
    )


@dataclass
class Workload:
    """What every arm of a run shares: the data, its split over clients and workers, the model's recipe and
    its initial parameters."""

    dataset: Any
    sizes: np.ndarray  # |D_i| of every client i
    partitions: list[dict[int, np.ndarray]]  # worker k → {client: its training indices}
    owner: dict[int, int]  # client → its worker
    model_spec: ModelSpec
    w0: torch.Tensor  # the initial model, float64
    partition: dict[str, Any] = field(default_factory=dict)  # every client's size and labels (summary.json)

    @property
    def n(self) -> int:
        return int(self.w0.numel())


def load_data(cfg: DictConfig, *, download: bool | None = None) -> Any:
    """The run's data set, whatever ``data.name`` names (built-in, arrays, LEAF, registered, import path).

    ``download=False``: only what is on disk (``sifl describe`` never downloads; its pre-flight check has
    made sure of the files); default ``data.download``. A data set receives its section's values when it
    declared one (:func:`component_settings`: ``synthetic.n_train``, ``arrays.path``), else ``data.args``.
    """
    settings = component_settings(cfg, "data set", cfg.data.name)
    return load_any_dataset(
        cfg.data.name,
        args=OmegaConf.to_container(cfg.data.args) if settings is None else settings,
        seed=cfg.seed,
        root=cfg.data.root or "data_cache",
        download=cfg.data.download if download is None else download,
        mirrors=None if cfg.data.mirrors is None else list(cfg.data.mirrors),
        test_fraction=cfg.data.test_fraction,
        limit_train=cfg.data.limit_train,
        limit_test=cfg.data.limit_test,
    )


def model_for(cfg: DictConfig, dataset: Any) -> tuple[ModelSpec, torch.nn.Module]:
    """The model's recipe for the parties (what each builds) and the initial model built from it, from
    the run seed's ``init`` stream: every party, the driver and ``sifl describe`` build the same one. A
    registered model's factory receives its section's values when it declared one, else
    ``train.model_args``."""
    settings = component_settings(cfg, "model", cfg.train.model)
    spec = ModelSpec(
        name=cfg.train.model,
        input_shape=dataset.x_train.shape[1:],
        num_classes=int(dataset.num_classes),
        dtype=cfg.train.dtype,
        args=OmegaConf.to_container(cfg.train.model_args) if settings is None else settings,
        factory=resolve_model_factory(cfg.train.model),
    )
    net = build_model(
        spec.name,
        input_shape=spec.input_shape,
        num_classes=spec.num_classes,
        generator=torch_generator(cfg.seed, "init"),
        args=spec.args,
        factory=spec.factory,
    )
    return spec, net


def load_workload(cfg: DictConfig, num_workers: int) -> Workload:
    """Load the data set, split it over the clients and the clients over ``num_workers`` workers (in
    contiguous blocks), and build the initial model."""
    dataset = load_data(cfg)
    parts = partition(cfg, np.asarray(dataset.y_train), dataset.client_train)
    owners = np.array_split(np.arange(cfg.clients.num_clients), num_workers)
    model_spec, net = model_for(cfg, dataset)
    return Workload(
        dataset=dataset,
        sizes=np.array([len(p) for p in parts], dtype=np.int64),
        partitions=[{int(c): parts[c] for c in owners[k]} for k in range(num_workers)],
        owner={int(c): k for k, cs in enumerate(owners) for c in cs},
        model_spec=model_spec,
        w0=flatten_params(net).to(torch.float64),
        partition=partition_report(
            parts, np.asarray(dataset.y_train), int(dataset.num_classes), scheme=str(cfg.data.partition)
        ),
    )
