"""Shared fixtures: one Ray session for the whole test run, and warm party hosts reused by every run of
the suite on each backend (:mod:`sifl_ray.runner.hosts`): a run after the first pays neither Ray's start
nor a process per party, and every test that compares numbers checks, on the way, that a host started
again gives a fresh host's numbers."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs and 4 *declared* GPUs (Ray accepts them on a CPU machine), so placement of
    fractional-GPU workers can be tested here; CUDA itself is absent and workers fall back to the CPU."""
    import ray

    if not ray.is_initialized():
        # address="local": a Ray of its own even when `ray start` left a record of a cluster in /tmp
        # (ray.init() would join it, or a stale one, and refuse num_cpus / num_gpus there)
        ray.init(
            address="local",
            num_cpus=2,
            num_gpus=4,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
        )
    from sifl_ray.backends.ray import RayBackend
    from sifl_ray.runner.hosts import WarmHosts, use_default

    with use_default("ray", WarmHosts(RayBackend())):
        yield ray
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def warm_local_hosts():
    """In-process runs take the hosts the runs before them left, started again (a session's behaviour)."""
    from sifl_ray.backends.local import LocalBackend
    from sifl_ray.runner.hosts import WarmHosts, use_default

    with use_default("local", WarmHosts(LocalBackend())):
        yield


# The quick subset, `pytest -m "not slow"`: these tests are marked `slow` here (beside the few marked in
# their own files). Chosen from the durations of one full run (`pytest --durations=80 -q`, 2026-11-27, on
# the shared 2-core machine at load 5–18: 1,062 tests in 1,793 s): every module whose tests each start a
# cluster, kill parties or run whole benchmarks, and every other test (setup included) that took 8 s or
# more there. They took at least 1,510 of those 1,793 s. The full suite, slow tests included, is what CI runs.
SLOW_MODULES = (
    "tests/test_cluster.py",  # a real two-node `ray start` cluster and `ray job submit`
    "tests/reliability/test_reliability_workers.py",  # fault drills: dead, late and dropped workers
    "tests/reliability/test_reliability_resume.py",  # SIGKILLed drivers, corrupted checkpoints
    "tests/reliability/test_reliability_parties.py",  # dead server and aggregator actors restored
    "tests/reliability/test_reliability_inputs.py",  # bad uploads over whole runs
    "tests/reliability/test_reliability_soak.py",  # 1000 clients × 20 rounds
    "tests/bench/test_bench_platform.py",  # the benchmarks themselves, scaled down
    "tests/attacks/test_attack_cli.py",  # `sifl attack` end to end on every arm
)
SLOW_TESTS = (  # module::test, or a prefix of its parametrised ids
    "tests/test_cli.py::test_describe_prints_table3_sizes[cnn",  # the paper's CNN keys (cnn, cnn2)
    "tests/test_arms.py::test_toy_arm_runs_on_ray_and_in_process_with_identical_numbers",
    "tests/test_platform.py::test_workers_are_pinned_to_declared_gpus",
    "tests/test_platform.py::test_a_private_instance_stops_its_autoscaler_monitor_at_once_and_shuts_down",
    "tests/test_vectorised_runs.py::test_ray_and_in_process_runs_agree_with_vectorised_clients",
    "tests/coding/test_coding_registry.py::test_a_process_that_never_registered_it_imports_it_from_its_path",
    "tests/optim/test_optim_rules.py::test_the_trainer_does_not_import_dynamo",
    "tests/bench/test_bench_gpu.py::test_a_rehearsal_runs_every_section_through_the_platform",
    "tests/attacks/test_attack_audit_verdicts.py::test_the_secure_aggregate_under_add_remove_refutes_todays_dp_fedavg_secagg",
    "tests/attacks/test_attack_audit_verdicts.py::test_the_secure_aggregate_under_zero_out_is_not_refuted",
    "tests/attacks/test_attack_audit_verdicts.py::test_noise_four_times_weaker_than_claimed_is_refuted_and_the_claimed_noise_is_not",
    "tests/privacy/test_secagg_arm.py::test_secagg_survives_workers_that_die_before_and_after_masking_and_a_straggler_on_ray",
    "tests/privacy/test_audit_in_run.py::test_ray_and_in_process_runs_audit_alike",
    "tests/privacy/test_audit_in_run.py::test_the_audit_refutes_weak_noise_and_not_the_honest_arm",
    "tests/privacy/test_privacy_run_paths.py::test_an_aggregator_killed_mid_run_replays_the_releases_it_made",
    "tests/privacy/test_dp_fedavg_arm.py::test_the_audit_of_the_arms_own_noise_stays_below_the_accountants_epsilon",
    "tests/privacy/test_privacy_formulas.py::test_two_laplace_sum_density_is_right",
    "tests/privacy/test_dp_fedavg_edges.py::test_fixed_size_sampling_reaches_every_entry_point_with_its_population",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """Marks SLOW_MODULES and SLOW_TESTS `slow`, and refuses an entry that names no module or test (a test
    renamed would otherwise leave the quick subset silently slower)."""
    root = config.rootpath
    stale = [m for m in SLOW_MODULES if not (root / m).is_file()]
    modules = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        modules.setdefault(path, getattr(item, "module", None))
        if path in SLOW_MODULES or item.nodeid.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
    for entry in SLOW_TESTS:
        path, name = entry.split("::", 1)
        module = modules.get(path)
        missing = module is not None and not hasattr(module, name.split("[", 1)[0])
        if missing or not (root / path).is_file():
            stale.append(entry)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py: slow entries that name no module or test: {stale}")
