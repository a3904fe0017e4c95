"""What only an arm may say about itself, it declares, and the platform reads the declaration: the arm it is
paired with (:attr:`Arm.paired_with`), the label of its clients' noise (:attr:`Arm.noise_stream`), what it
uploads (:attr:`Arm.uploads`) and its colour in the figures (``tests/test_plots.py``). Outside the arm
registry and the arm modules, no module compares an arm's name with a literal."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from sifl_ray.arms import (
    ARMS,
    Arm,
    ArmContext,
    arm_kinds,
    baseline_arm,
    get_arm,
    play_order,
    reference_of,
    register_arm,
    unpaired_arms,
    unregister_arm,
)
from sifl_ray.arms.base import UPLOADS
from sifl_ray.arms.fedavg import FedAvg
from sifl_ray.config import arm_names, load_config
from sifl_ray.party_seeds import CLIENT_NOISE_STREAM, ClientNoiseSeeds, party_seed
from sifl_ray.seeding import secret_torch_generator

ROOT = Path(__file__).resolve().parents[1]


class Reference(Arm):
    kind = "ref_decl_test"


class Follower(Arm):
    kind = "follower_decl_test"
    paired_with = "ref_decl_test"


class UpdateFedAvg(FedAvg):
    """FedAvg whose clients upload their update: it inherits FedAvg's releases and declares its upload."""

    kind = "update_fedavg_decl_test"
    uploads = "update"


@pytest.fixture(autouse=True)
def plug_ins():
    arms = [Reference(), Follower(), UpdateFedAvg()]
    for arm in arms:
        register_arm(arm)
    yield
    for arm in arms:
        unregister_arm(arm.kind)


def _cfg(*arms: str):
    return load_config([f"arms=[{','.join(arms)}]"])


def test_a_paired_arm_plays_after_the_arm_it_declares_whatever_the_order_listed():
    cfg = _cfg("follower_decl_test", "nbafl", "ref_decl_test")
    arms = arm_names(cfg)
    assert reference_of(cfg, "follower_decl_test") == "ref_decl_test"
    assert reference_of(cfg, "ref_decl_test") is None
    assert play_order(cfg, arms) == ["ref_decl_test", "follower_decl_test", "nbafl_eps1"]
    assert unpaired_arms(cfg, arms) == {}
    # the built-in pairs are declared the same way
    cfg = _cfg("sifl_m1", "secagg", "fl", "sifl_m2")
    assert play_order(cfg, arm_names(cfg)) == ["fl", "sifl_m1", "secagg", "sifl_m2"]
    assert {a: reference_of(cfg, a) for a in arm_names(cfg)} == {
        "sifl_m1": "fl",
        "secagg": "fl",
        "fl": None,
        "sifl_m2": "fl",
    }


def test_the_baseline_every_arms_accuracy_is_compared_with_is_the_arm_that_declares_it():
    cfg = _cfg("nbafl", "update_fedavg_decl_test", "fl", "sifl_m1")
    # a subclass of FedAvg inherits the declaration: the first listed one is the run's baseline
    assert baseline_arm(cfg, arm_names(cfg)) == "update_fedavg_decl_test"
    assert baseline_arm(cfg, ["nbafl_eps1", "sifl_m1"]) is None
    built_in = [k for k in arm_kinds() if type(get_arm(k)).__module__.startswith("sifl_ray.")]
    assert [k for k in built_in if get_arm(k).baseline] == ["fl"]


def test_a_paired_arm_without_its_reference_is_named_with_the_reference_it_lacks():
    cfg = _cfg("follower_decl_test", "sifl_m1")
    assert unpaired_arms(cfg, arm_names(cfg)) == {"follower_decl_test": "ref_decl_test", "sifl_m1": "fl"}
    cfg = _cfg("nbafl", "ref_decl_test")  # nobody paired: the scenario's order
    assert play_order(cfg, arm_names(cfg)) == ["nbafl_eps1", "ref_decl_test"]


def test_an_arm_cannot_be_paired_with_itself_nor_upload_something_undeclared():
    class Selfish(Arm):
        kind = "selfish_decl_test"
        paired_with = "selfish_decl_test"

    class Gradients(Arm):
        kind = "gradients_decl_test"
        uploads = "gradient"

    with pytest.raises(ValueError, match="paired_with"):
        register_arm(Selfish())
    with pytest.raises(ValueError, match="uploads says what a client uploads, one of model, update"):
        register_arm(Gradients())
    assert "selfish_decl_test" not in ARMS and "gradients_decl_test" not in ARMS


def test_every_arms_upload_release_says_what_it_declares_it_uploads():
    for kind in arm_kinds():
        arm = get_arm(kind)
        (upload,) = [r.content for r in arm.releases() if r.name == "upload"]
        assert ("w_i - w^t" in upload) == (arm.uploads == "update"), (kind, upload)
    # an arm that inherits FedAvg's releases says it uploads its update, because it declares so
    (upload,) = [r.content for r in get_arm("update_fedavg_decl_test").releases() if r.name == "upload"]
    assert upload == UPLOADS["update"]


def _ctx(arm: str, key_seed: int = 7) -> ArmContext:
    cfg = SimpleNamespace(coding=SimpleNamespace(key_seed=key_seed))
    return ArmContext(cfg=cfg, arm=arm, n=10, local_size=1, total_size=1)


@pytest.mark.parametrize("kind", ["nbafl", "dp_fedavg_secagg"])
def test_the_built_in_client_noise_is_drawn_under_the_label_its_arm_declares(kind):
    """The label derives every draw: the built-in noisy arms declare ``nbafl``, the stream their clients
    have always drawn from, so a run's figures do not depend on where the label is written."""
    import torch

    arm = get_arm(kind)
    assert arm.noise_stream == "nbafl"
    seeds = arm.client_noise_seeds(_ctx(f"{kind}_eps1"))
    expected = secret_torch_generator(party_seed(7, f"{kind}_eps1", "client-3"), "noise", "nbafl", 2)
    got = seeds.generator(f"{kind}_eps1", 3, 2)
    assert torch.equal(torch.randn(8, generator=got), torch.randn(8, generator=expected))
    assert pickle.loads(pickle.dumps(seeds)).stream == "nbafl"


def test_a_plug_in_arms_noise_is_drawn_under_its_own_label():
    import torch

    class Labelled(Arm):
        kind = "labelled_decl_test"
        noise_stream = "labelled-noise"

    plain = Arm().client_noise_seeds(_ctx("a"))
    labelled = Labelled().client_noise_seeds(_ctx("a"))
    assert Arm.noise_stream == CLIENT_NOISE_STREAM == ClientNoiseSeeds().stream
    draws = [torch.randn(8, generator=s.generator("a", 0, 0)) for s in (plain, labelled)]
    assert not torch.equal(*draws)
    expected = secret_torch_generator(party_seed(7, "a", "client-0"), "noise", "labelled-noise", 0)
    assert torch.equal(draws[1], torch.randn(8, generator=expected))


# Where a module outside the arm registry still compares an arm's name with a literal, with what it should
# read instead. The owner of each file removes its entry with the fix; an entry that no longer finds its
# comparison fails the test, so the list only shrinks.
PENDING = {
    # delta_vs_fl_pp: the run's baseline (arms.baseline_arm)
    "sifl_ray/runner/summary.py": {"fl"},
    # the file name of the M2 attack's transcripts: the arm's name, whichever arm
    "sifl_ray/attacks/m2.py": {"sifl_m2"},
}


def _named_arms(path: Path, names: set[str]) -> set[str]:
    """The arm names ``path`` compares with a literal: ``==``/``!=``/``in`` against a string or a tuple of
    strings, ``.startswith``/``.endswith`` of one, or a subscript by one."""
    found: set[str] = set()

    def literals(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found.update(v for v in literals(side) if v in names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith"):
                for arg in node.args:
                    found.update(v for v in literals(arg) if any(n.startswith(v) for n in names))
        elif isinstance(node, ast.Subscript):
            found.update(v for v in literals(node.slice) if v in names)
    return found


def test_no_module_outside_the_arm_registry_compares_an_arm_name_with_a_literal():
    from sifl_ray.arms import builtin

    builtin_kinds = {arm.kind for arm in ARMS.values() if type(arm).__module__.startswith("sifl_ray.arms")}
    assert {"fl", "sifl_m1", "nbafl"} <= builtin_kinds, builtin
    names = builtin_kinds | {"sifl"}
    arms_dir = ROOT / "sifl_ray" / "arms"
    got = {}
    for path in sorted((ROOT / "sifl_ray").rglob("*.py")):
        if arms_dir in path.parents:
            continue
        found = _named_arms(path, names)
        if found:
            got[str(path.relative_to(ROOT))] = found
    assert got == PENDING
