"""Configuration: every problem at once, each naming its key and fix; exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.arms import arm_names
from sifl_ray.config import ConfigError, load_config, scenario_names

ROOT = Path(__file__).resolve().parent.parent


def test_every_bundled_scenario_loads():
    names = scenario_names()
    assert {"quickstart", "dp_compare", "scale_1000", "paper_mnist_mlp_sgd", "paper_fmnist_cnn2_adam"} <= set(
        names
    )
    for name in names:
        if name.startswith("attack_"):
            continue  # attack scenarios have their own schema (sifl attack)
        cfg = load_config([f"scenario={name}"])
        assert cfg.scenario == name


def test_overrides_apply_and_config_is_frozen():
    cfg = load_config(["train.rounds=3", "coding.noise.sigma1=5", "nbafl.epsilons=[1,5]"])
    assert cfg.train.rounds == 3 and cfg.coding.noise.sigma1 == 5.0
    assert arm_names(cfg) == ["fl", "sifl_m1", "sifl_m2", "nbafl_eps1", "nbafl_eps5"]
    with pytest.raises(Exception):  # noqa: B017 - OmegaConf's ReadonlyConfigError
        cfg.train.rounds = 4


def test_all_problems_reported_at_once():
    bad = [
        "train.lr=0",
        "coding.n_extra=0",
        "coding.p=1",
        "data.dirichlet_alpha=-1",
        "trian.rounds=3",
        "train.rounds=abc",
        "clients.num_clients=5000",
        "coding.dtype=float32",
        "data.partition=zipf",
        "train.optimizer=adamw_typo",
        "coding.backend=fats",
        "faults.inject=[{kind: worker_kil, worker: 0, round: 1}]",
    ]
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    text = str(info.value)
    for needle in [
        "train.lr",
        "coding.n_extra",
        "coding.p",
        "data.dirichlet_alpha",
        "did you mean train",
        "train.rounds: expected int",
        "data.partition: expected one of",
        "train.optimizer: expected one of sgd, momentum, adam, or a torch.optim class name",
        "coding.backend: expected one of dense, fast, block, got 'fats'; did you mean fast?",
        "faults.inject[0].kind: expected one of worker_exit",
    ]:
        assert needle in text, needle
    assert len(info.value.problems) >= 10


def test_missing_data_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.root"):
        load_config(["data.name=mnist", f"data.root={tmp_path / 'nope'}", "data.download=false"])
    with pytest.raises(ConfigError, match=r"samples"):
        load_config(["clients.num_clients=2000"])


def test_cli_config_error_exit_code_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "run.py", "train.lr=-1", "coding.p=1", "bogus=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "3 configuration problems" in proc.stderr
    assert "train.lr" in proc.stderr and "coding.p" in proc.stderr and "bogus" in proc.stderr


def test_nbafl_exposures_and_calibration_keys():
    """Two independent choices: how many uploads (ε, δ) covers, and the Gaussian formula; each validated
    with its key, what it expects (and means) and the fix."""
    assert load_config([]).nbafl.exposures == "multi_round"  # the guarantee NbAFL's Theorem 1 states
    dp = load_config(["scenario=dp_compare"]).nbafl
    assert (dp.exposures, dp.calibration) == ("multi_round", "classical")
    cfg = load_config(["nbafl.exposures=per_round", "nbafl.calibration=analytic"])
    assert (cfg.nbafl.exposures, cfg.nbafl.calibration) == ("per_round", "analytic")
    with pytest.raises(ConfigError) as info:
        load_config(["nbafl.exposures=all_rounds", "nbafl.calibration=per_round"])
    text = str(info.value)
    assert "2 configuration problems" in text
    assert "nbafl.exposures: expected one of multi_round, per_round" in text
    assert "(ε, δ) for all T uploads of a client" in text and "set nbafl.exposures=multi_round" in text
    assert "nbafl.calibration: expected one of classical, analytic" in text
    assert (
        "How many uploads it covers is nbafl.exposures" in text and "set nbafl.calibration=classical" in text
    )


def test_partition_choices_are_read_from_the_partitioner_registry():
    from sifl_ray.data.partition import PARTITIONERS

    registered = ", ".join(PARTITIONERS)  # read, not pinned: a new partitioner changes no test
    with pytest.raises(ConfigError, match=rf"data\.partition: expected one of {registered}, got 'toy'"):
        load_config(["data.partition=toy"])
    with PARTITIONERS.restored():
        PARTITIONERS.register("toy", PARTITIONERS["iid"])
        assert load_config(["data.partition=toy"]).data.partition == "toy"


def test_keys_that_moved_into_a_components_section_are_refused_with_their_new_name():
    """A built-in data set's or partitioner's knob lives in its own section: the old ``data.*`` key is
    refused by name, saying the new one, every one at once, from a scenario file as from an override."""
    from sifl_ray.config import RENAMED

    old = ["data.dirichlet_alpha=0.1", "data.shards_per_client=3", "data.n_train=500", "data.n_test=100"]
    old += ["data.test_path=t.json"]
    with pytest.raises(ConfigError) as info:
        load_config(old)
    assert info.value.problems == [
        "data.dirichlet_alpha: renamed dirichlet.alpha (the section of the component that reads it); write "
        "dirichlet.alpha=0.1 instead",
        "data.shards_per_client: renamed shards.per_client (the section of the component that reads it); "
        "write shards.per_client=3 instead",
        "data.n_train: renamed synthetic.n_train (the section of the component that reads it); write "
        "synthetic.n_train=500 instead",
        "data.n_test: renamed synthetic.n_test (the section of the component that reads it); write "
        "synthetic.n_test=100 instead",
        "data.test_path: renamed leaf.test_path (the section of the component that reads it); write "
        "leaf.test_path=t.json instead",
    ]
    assert set(RENAMED) == {key.split("=")[0] for key in old} | {"data.path"}
    for name, new in (("arrays", "arrays.path"), ("leaf", "leaf.path")):  # the data set that reads it
        with pytest.raises(ConfigError, match=rf"data\.path: renamed {new} .*; write {new}=x instead"):
            load_config([f"data.name={name}", "data.path=x"])
    cfg = load_config(
        ["data.partition=shards", "shards.per_client=3", "data.name=synthetic", "synthetic.n_train=90"]
    )
    assert (cfg.shards.per_client, cfg.synthetic.n_train) == (3, 90)
    with pytest.raises(
        ConfigError, match=r"shards\.per_client: 10 clients × 10 shards = 100 shards, more than"
    ):
        load_config(
            ["data.partition=shards", "shards.per_client=10", "data.name=synthetic", "synthetic.n_train=90"]
        )


def test_validation_stays_free_of_torch():
    """``sifl run`` validates before the heavy imports so that a typo answers at once; reading the
    registries (partitioners, models, optimizers, coding backends, noise laws, NbAFL, fault kinds) must not
    pull torch in."""
    code = (
        "import sys; from sifl_ray.config import load_config; "
        "load_config(['data.partition=shards', 'shards.per_client=3', 'data.name=synthetic', "
        "'synthetic.n_train=900', 'train.model=cnn2', 'train.optimizer=momentum', "
        "'coding.backend=block', 'coding.left_inverse=pinv', 'coding.noise.distribution=laplace', "
        "'nbafl.calibration=analytic', 'ray.num_workers=2', "
        "'faults.inject=[{kind: corrupt_partial, worker: 0, round: 1, corruption: inf}]']); "
        "from sifl_ray.config.help import describe_keys; describe_keys(load_config([])); "
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_choices_are_read_from_the_registries_that_own_them(monkeypatch):
    """A name added to its registry is a valid choice at once: validation holds no copy of any list."""
    from sifl_ray.config import names

    bad = ["coding.backend=toy", "train.model=toy_net", "train.optimizer=lion", "nbafl.calibration=exact"]
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert [p.split(":")[0] for p in info.value.problems] == [
        "train.model",
        "train.optimizer",
        "coding.backend",
        "nbafl.calibration",
    ]
    with names.SERVER_KEYS.restored(), names.MODELS.restored(), names.OPTIMIZERS.restored():
        names.SERVER_KEYS.declare("toy", "toy_codes:ToyKey")  # declared by path: never imported here
        names.MODELS.declare("toy_net", "toy_models:net")
        names.OPTIMIZERS.register("lion", names.TorchOptimizer("Lion"))
        monkeypatch.setattr(names, "NBAFL_CALIBRATIONS", (*names.NBAFL_CALIBRATIONS, "exact"))
        cfg = load_config(bad)
    assert (cfg.coding.backend, cfg.train.model, cfg.train.optimizer) == ("toy", "toy_net", "lion")
    assert cfg.nbafl.calibration == "exact"
    fault = ["ray.num_workers=2", "faults.inject=[{kind: worker_hang, worker: 0, round: 1}]"]
    with pytest.raises(ConfigError, match=r"faults\.inject\[0\]\.kind: expected one of worker_exit"):
        load_config(fault)
    monkeypatch.setattr(names, "FAULT_KINDS", (*names.FAULT_KINDS, "worker_hang"))
    assert load_config(fault).faults.inject[0].kind == "worker_hang"


def test_no_registry_needs_a_hand_kept_copy_of_its_names():
    """Every registry, enumerated: each declared entry imports from its path and is what its name says, and
    the owners read their entries from the registry (a model, an optimizer, a coding backend registered
    there is built, made and keyed by the owner with no other edit)."""
    import sifl_ray.arms
    import sifl_ray.attacks.builtin
    import sifl_ray.data  # noqa: F401 - every registry's module, so that REGISTRIES holds them all
    from sifl_ray.coding import keys
    from sifl_ray.config import names
    from sifl_ray.config.registry import REGISTRIES
    from sifl_ray.models import MODEL_NAMES, build_model
    from sifl_ray.optim.trainer import make_optimizer_factory

    assert {"arm", "attack", "partitioner", "data set", "model", "optimizer", "coding backend"} <= set(
        REGISTRIES
    )
    for registry in REGISTRIES.values():
        for name in registry:
            assert registry[name] is not None, (registry.kind, name)  # a declared path that imports
    assert all(cls.backend == name for name, cls in names.SERVER_KEYS.items())
    assert keys.SERVER_KEYS is names.SERVER_KEYS and names.MODELS.names() == MODEL_NAMES
    torch = pytest.importorskip("torch")
    with names.MODELS.restored(), names.OPTIMIZERS.restored():
        names.MODELS.declare("digits_mlp_twin", "sifl_ray.models:digits_mlp")
        names.OPTIMIZERS.register("rms", names.TorchOptimizer("RMSprop", {"alpha": 0.9}))
        net = build_model(
            "digits_mlp_twin", input_shape=(1, 8, 8), num_classes=10, generator=torch.Generator()
        )
        params = list(net.parameters())
        assert isinstance(make_optimizer_factory("rms", 0.1)(params), torch.optim.RMSprop)


def test_the_fixed_choices_are_the_owners_types():
    """The method's fixed choices (not registries: a formula, not an entry) are spelled once in
    sifl_ray.config.names; the owners' Literal types must say the same."""
    import typing

    from sifl_ray.coding import _common, base, precision
    from sifl_ray.config import names
    from sifl_ray.privacy import nbafl

    assert _common.LEFT_INVERSES == names.LEFT_INVERSES
    assert typing.get_args(base.NoiseDistribution) == names.NOISE_DISTRIBUTIONS
    policy = typing.get_type_hints(precision.check_precision)["policy"]
    assert typing.get_args(policy) == names.PRECISION_POLICIES
    assert typing.get_args(nbafl.Exposures) == nbafl.EXPOSURES == names.NBAFL_EXPOSURES
    assert typing.get_args(nbafl.Calibration) == nbafl.CALIBRATIONS == names.NBAFL_CALIBRATIONS
    assert tuple(nbafl.GUARANTEES) == nbafl.EXPOSURES


def test_optimizer_is_validated_up_front():
    """A typo in train.optimizer is a configuration problem with a suggestion, not a crash in a worker;
    the registry's short names and any torch.optim class name are accepted."""
    with pytest.raises(ConfigError) as info:
        load_config(["train.optimizer=adamw_typo"])
    (problem,) = info.value.problems
    assert problem.startswith(
        "train.optimizer: expected one of sgd, momentum, adam, or a torch.optim class name"
    )
    assert problem.endswith("got 'adamw_typo'; did you mean AdamW? set train.optimizer=AdamW")
    for name in ("sgd", "momentum", "adam", "AdamW", "RMSprop"):
        assert load_config([f"train.optimizer={name}"]).train.optimizer == name
    with pytest.raises(ConfigError, match=r"train\.optimizer"):
        load_config(["train.optimizer=Optimizer"])  # the base class is no optimizer


def test_parties_receive_frozen_specs_built_from_the_configuration():
    """What an actor gets of the configuration is a frozen, typed value, not a dict read by string key."""
    import dataclasses
    import pickle

    from sifl_ray.specs import CodingSpec, ModelSpec, TrainSpec

    cfg = load_config(
        ["coding.kappa=3", "coding.key_seed=7", "coding.noise.sigma2=5", "train.optimizer=adam"]
    )
    coding = CodingSpec.from_config(cfg)
    assert (coding.kappa, coding.key_seed, coding.sigma1, coding.sigma2) == (3.0, 7, 1e3, 5.0)
    assert coding.noise_distribution == "gaussian" and coding.backend == cfg.coding.backend
    assert CodingSpec.from_config(load_config([])).kappa is None
    train = TrainSpec.from_config(cfg)
    assert (train.optimizer, train.lr, train.skip_training) == ("adam", cfg.train.lr, False)
    model = ModelSpec(name="digits_mlp", input_shape=[1, 8, 8], num_classes=10)
    assert model.input_shape == (1, 8, 8) and model.dtype == "float32"
    for spec in (coding, train, model):
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.p = 3  # type: ignore[misc]
        assert pickle.loads(pickle.dumps(spec)) == spec  # crosses the process boundary intact


def test_vectorised_clients_are_a_switch_on_by_default():
    """``train.vectorise`` (sifl_ray.optim.vectorised): on unless turned off, as ``false`` or ``off`` (YAML
    reads both as false); anything but a boolean is refused with the key named."""
    from sifl_ray.specs import TrainSpec

    assert load_config([]).train.vectorise is True and TrainSpec.from_config(load_config([])).vectorise
    for off in ("false", "off", "no"):
        assert TrainSpec.from_config(load_config([f"train.vectorise={off}"])).vectorise is False
    with pytest.raises(ConfigError, match=r"train\.vectorise: expected bool, got 'auto'"):
        load_config(["train.vectorise=auto"])


def test_the_old_ray_backend_key_is_refused_with_the_new_one_and_its_new_value():
    """``backend`` is a top-level key (what hosts the parties, Ray or not); ``ray.backend`` is refused by
    name, and its in-process value ``sequential`` is said as ``local``, from a scenario as from an
    override."""
    for old, new in (("sequential", "local"), ("ray", "ray")):
        with pytest.raises(ConfigError) as info:
            load_config([f"ray.backend={old}"])
        assert info.value.problems == [
            f"ray.backend: renamed backend (what hosts the parties, Ray or not); write backend={new} instead"
        ]
    with pytest.raises(ConfigError) as info:
        load_config(scenario=None, sections={"ray": {"backend": "sequential"}, "train": {"rounds": 0}})
    assert any(p.startswith("ray.backend: renamed backend") for p in info.value.problems)
    assert load_config(["backend=local"]).backend == "local"
    with pytest.raises(ConfigError, match="backend: expected one of local, ray, got 'threads'"):
        load_config(["backend=threads"])


def test_a_fault_that_kills_a_party_is_refused_where_the_backend_cannot_kill():
    fault = "faults.inject=[{kind: worker_kill, worker: 0, round: 1}]"
    with pytest.raises(ConfigError, match="backend local cannot"):
        load_config(["backend=local", fault, "faults.deadline_s=5"])
    assert load_config(["backend=ray", fault]).faults.inject[0].kind == "worker_kill"
