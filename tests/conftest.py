"""Shared fixtures: one Ray session for each process of the test run (two when pytest-xdist spreads the
suite, :data:`SUITE_PROCESSES`), and warm party hosts reused by every run of the process's tests on each
backend (:mod:`sifl_ray.runner.hosts`): a run after the first pays neither Ray's start
nor a process per party, and every test that compares numbers checks, on the way, that a host started
again gives a fresh host's numbers."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")

#: The processes a run of whole folders (``pytest``, ``pytest -m "not slow"``) spreads its test files over
#: (pytest-xdist, ``--dist loadfile``: a module's tests and fixtures stay in one process). Why two: run one
#: after another, the suite left a third of this 2-core machine idle (its slow tests wait on processes they
#: start: clusters, runs, drills), and two fill it; each process has its own Ray session (2 CPUs, as
#: :func:`ray_session` says) and its own warm hosts. More would only queue on two cores.
SUITE_PROCESSES = 2


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Spread a run of whole folders over :data:`SUITE_PROCESSES` processes when pytest-xdist is installed
    (the ``[test]`` extra) and the command line does not say ``-n`` itself; a run of named files or tests
    (a developer's loop) stays in this process, and ``-n 0`` or ``-p no:xdist`` keeps any run here."""
    if not config.pluginmanager.hasplugin("xdist") or "PYTEST_XDIST_WORKER" in os.environ:
        return
    if config.option.numprocesses is not None or config.option.dist != "no" or config.option.usepdb:
        return
    from sifl_ray.canvas import usable_cpus

    cpus = usable_cpus()
    if cpus < 2 or not all(os.path.isdir(arg.split("::", 1)[0]) for arg in config.args):
        return
    config.option.numprocesses = min(SUITE_PROCESSES, cpus)
    config.option.dist = "loadfile"
    config.option.loadscopereorder = False  # the modules go out in the order below (longest_first)


#: The checkout's own packages, compiled once before any test (:func:`compile_checkout`).
CHECKOUT_PACKAGES = ("sifl_ray", "bench")


def compile_checkout(root) -> None:
    """Write the bytecode of the checkout's own packages once, before the suite starts its processes.

    Why: with ``PYTHONDONTWRITEBYTECODE`` set (this machine's environment sets it, and CI starts from that
    environment), Python reads cached bytecode but never writes it, and an editable install ships none (a
    wheel's install compiles its own). So every process the suite starts (~120 party processes, ~100
    ``sifl`` and example processes) compiled the modules of ``sifl_ray`` it imports from source again:
    0.42–0.57 CPU-s for a party's imports against 0.17–0.25 from bytecode (2026-11-29, five alternating
    runs). Compiling every module once takes about 0.5 CPU-s. Python checks each cached file against its
    source's size and time, so an edited module is compiled afresh; the files land in ``__pycache__``
    folders, which git ignores (``tests/test_suite_setup.py`` checks that they are there)."""
    import compileall

    for name in CHECKOUT_PACKAGES:
        if (root / name).is_dir():
            compileall.compile_dir(root / name, quiet=2)


def pytest_configure(config):
    """The checkout's bytecode written once by the process that starts the run (:func:`compile_checkout`),
    before pytest-xdist starts its processes; and one PyTorch thread in each process of a spread run
    (:data:`SUITE_PROCESSES` of them on as many cores). Why the thread: PyTorch's OpenMP threads wait for
    work by spinning, so two processes of two threads each on two cores took turns spinning against each
    other: a coding test that takes 0.03 s alone took 6 s in the quick subset (2026-11-29). A run in one
    process keeps PyTorch's own choice."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        import torch

        torch.set_num_threads(1)
    else:
        compile_checkout(config.rootpath)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs and 4 *declared* GPUs (Ray accepts them on a CPU machine), so placement of
    fractional-GPU workers can be tested here; CUDA itself is absent and workers fall back to the CPU."""
    import ray

    if not ray.is_initialized():
        _start_ray(ray)
    from sifl_ray.backends.ray import RayBackend
    from sifl_ray.runner.hosts import WarmHosts, use_default

    with use_default("ray", WarmHosts(RayBackend())):
        yield ray
    ray.shutdown()


#: Settings of Ray's log monitor for the test session's instance. The instance forwards no worker output
#: (``log_to_driver=False``), yet its log monitor looks for new log files in the session's folder ten
#: times a second and checks every file it found, and the suite leaves about 250 there (two for each of
#: its ~120 party processes): 1 CPU-s every 30 s idle after 40 workers, growing with each (measured,
#: 2026-11-29), for each of the suite's two instances. With these (Ray's own knobs, read by the monitor
#: at its start) it looks for new files once an hour: 0.06 CPU-s in the same 30 s. Only this instance:
#: the runs the tests start in processes of their own (``sifl run``) forward their workers' lines.
QUIET_LOG_MONITOR = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "LOG_NAME_UPDATE_INTERVAL_S": "3600"}


def _start_ray(ray) -> None:
    """The test session's instance (:func:`ray_session`), its log monitor quieted (QUIET_LOG_MONITOR)."""
    from sifl_ray.backends.cluster import PRIVATE_SYSTEM_CONFIG

    # address="local": a Ray of its own even when `ray start` left a record of a cluster in /tmp (ray.init()
    # would join it, or a stale one, and refuse num_cpus / num_gpus there); the settings a run's private
    # instance starts with (its raylet's quick socket retries)
    with pytest.MonkeyPatch.context() as env:  # only while Ray starts its processes, which inherit it
        for key, value in QUIET_LOG_MONITOR.items():
            env.setenv(key, value)
        ray.init(
            address="local",
            num_cpus=2,
            num_gpus=4,
            _system_config=PRIVATE_SYSTEM_CONFIG,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
        )


@pytest.fixture(scope="session", autouse=True)
def warm_local_hosts():
    """In-process runs take the hosts the runs before them left, started again (a session's behaviour)."""
    from sifl_ray.backends.local import LocalBackend
    from sifl_ray.runner.hosts import WarmHosts, use_default

    with use_default("local", WarmHosts(LocalBackend())):
        yield


# The quick subset, `pytest -m "not slow"`: these tests are marked `slow` here (beside the few marked in
# their own files). Chosen from the durations of one full run (`pytest --durations=0 -q`, 2026-11-28, on
# the 2-core machine at load ≈ 1.2: 1,563 tests in 762 s): every module whose tests each start a cluster,
# kill parties or run whole benchmarks, and every other test (setup included) that took 1 s or more
# there. The quick tests left took 72 s of those 762. The full suite, slow tests included, is what CI runs.
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
    "tests/test_platform.py::test_a_private_instance_retries_its_sockets_quickly_and_stops_its_monitor_at_once",
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
    # 1 s to 8 s (2026-11-28)
    "tests/attacks/test_attack_suite.py::test_full_rank_after_n_over_clients_minus_one_rounds[dense-pinv]",
    "tests/clock/test_clock_runs.py::test_a_hand_computed_round_gives_the_simulated_duration_exactly",
    "tests/clock/test_clock_runs.py::test_the_clock_is_bit_identical_on_both_backends",
    "tests/data/test_data_own.py::test_mnist_sample_is_real_28x28_digits_split_stratified_by_seed",
    "tests/data/test_sampling_glue.py::test_a_poisson_run_samples_each_client_independently",
    "tests/privacy/test_audit_in_run.py::test_a_resumed_run_audits_the_same_canaries_as_the_run_it_continues",
    "tests/privacy/test_audit_in_run.py::test_a_zero_out_arm_keeps_its_left_out_canaries_in_the_round",
    "tests/privacy/test_audit_wiring.py::test_a_rollback_to_the_start_clears_the_canary_record",
    "tests/privacy/test_audit_wiring.py::test_a_weak_add_remove_arm_is_refuted_and_the_honest_one_is_not",
    "tests/privacy/test_audit_wiring.py::test_a_weak_zero_out_arm_is_refuted_through_its_left_out_canaries",
    "tests/privacy/test_audit_wiring.py::test_secure_aggregation_audited_beside_fl_stays_paired_with_it",
    "tests/privacy/test_audit_wiring.py::test_the_accountants_cross_check_is_run_at_the_arms_own_sampling_rate",
    "tests/privacy/test_audit_wiring.py::test_the_audit_table_states_its_family_wise_level_and_bonferroni_holds_it",
    "tests/privacy/test_audit_wiring.py::test_the_canaries_add_no_noise_beyond_the_deployed_arms",
    "tests/privacy/test_audit_wiring.py::test_the_figures_are_the_estimators_on_the_record_at_the_arms_delta",
    "tests/privacy/test_canary_record.py::test_canaries_whose_directions_outgrow_a_party_are_refused_with_the_numbers_and_a_fix",
    "tests/privacy/test_dp_fedavg.py::test_epsilon_per_round_is_cumulative_and_ends_at_epsilon",
    "tests/privacy/test_dp_fedavg.py::test_pld_matches_dp_accounting_own_subsampled_value",
    "tests/privacy/test_dp_fedavg.py::test_rdp_matches_the_published_tf_privacy_values[0.6-30-9.74]",
    "tests/privacy/test_dp_fedavg_arm.py::test_the_quick_audit_of_the_arms_step_refutes_a_tenth_of_its_noise",
    "tests/privacy/test_dp_fedavg_crosscheck.py::test_a_planted_mismatch_is_flagged",
    "tests/privacy/test_dp_fedavg_edges.py::test_calibrate_defaults_to_rdp_and_meets_its_tolerance",
    "tests/privacy/test_one_run_audit.py::test_both_bounds_stay_below_the_epsilon_of_a_gaussian_mechanism",
    "tests/privacy/test_one_run_audit.py::test_estimate_without_a_shift_is_small",
    "tests/privacy/test_one_run_audit.py::test_lower_bound_is_zero_without_signal",
    "tests/privacy/test_one_run_audit.py::test_lower_bound_stays_below_the_true_epsilon_and_finds_it",
    "tests/privacy/test_one_run_audit.py::test_the_estimate_can_lie_above_the_true_epsilon_where_the_spreads_are_estimated",
    "tests/privacy/test_one_run_audit.py::test_the_pipeline_on_a_gaussian_mechanism_over_canary_directions",
    "tests/privacy/test_one_run_audit.py::test_two_gaussians_epsilon_is_gdp_at_equal_spreads_and_the_hockey_stick_divergence_otherwise",
    "tests/privacy/test_privacy_run_paths.py::test_a_poisson_round_with_nobody_sampled_still_releases_the_central_noise",
    "tests/privacy/test_release_guarantee.py::test_every_arm_releases_in_an_empty_round_what_its_guarantee_says",
    "tests/test_actor_process.py::test_real_actors_keep_freed_memory_and_the_driver_does_not",
    "tests/test_cli.py::test_run_refuses_an_unknown_optimizer_up_front_with_a_suggestion",
    "tests/test_examples.py::test_own_arm_runs_as_a_script_with_its_setting",
    "tests/test_extending_recipes.py::test_the_attack_recipe_adds_its_figure_to_the_report",
    "tests/test_lazy_imports.py::test_a_run_that_audits_nothing_imports_no_scipy",
    "tests/test_lazy_imports.py::test_the_imports_beside_rays_start_leave_matplotlib_to_the_rounds",
    "tests/test_lazy_imports.py::test_the_parties_import_cryptography_only_for_a_secure_arm",
    "tests/test_package.py::test_the_wheel_installs_sifl_ray_alone_with_every_scenario",
    "tests/test_platform.py::test_compact_placement_shares_one_process_among_the_light_parties_and_changes_no_number",
    "tests/test_platform.py::test_ray_and_in_process_runs_agree",
    "tests/test_progress.py::test_a_runs_configuration_loads_before_ray_is_imported",
    "tests/test_progress.py::test_on_a_terminal_it_is_a_bar_that_redraws_in_place",
    "tests/test_resume_cli.py::test_the_scenario_folder_resumes_its_latest_run_and_each_round_is_logged_once",
    "tests/test_session.py::test_a_started_again_host_gives_a_fresh_hosts_numbers_on_every_arm[local]",
    "tests/test_tensorboard_layout.py::test_writers_opened_again_in_the_same_second_are_read_after_the_rounds_they_continue",
    "tests/test_vectorised_runs.py::test_a_fallback_is_said_once_per_run",
    # 1.6 s to 4.1 s of their process's CPU in the quick subset (2026-11-29)
    "tests/attacks/test_attack_suite.py::test_full_rank_after_n_over_clients_minus_one_rounds[dense-oblique]",
    "tests/attacks/test_attack_suite.py::test_projection_near_round_off_under_pinv_at_moderate_noise",
    "tests/attacks/test_attack_audit.py::test_epsilon_lower_bound_holds_with_the_stated_confidence",
    "tests/privacy/test_privacy_run_paths.py::test_distributed_dp_states_zero_out_and_counts_every_round",
    "tests/privacy/test_dp_glue.py::test_dp_fedavg_aggregator_divides_by_qN_and_adds_noise_of_std_zC_over_qN",
    "tests/privacy/test_release_guarantee.py::test_a_plugin_dp_arm_whose_step_cannot_noise_an_empty_round_is_refused_at_set_up",
    "tests/privacy/test_dp_fedavg_arm.py::test_dp_fedavg_run_reports_the_accountants_epsilon_round_by_round",
    "tests/privacy/test_dp_fedavg_edges.py::test_one_round_and_no_noise_are_exact_edge_cases",
    "tests/test_extending_recipes.py::test_the_dp_arm_recipe_releases_its_noise_in_every_round",
    "tests/test_plots.py::test_fifteen_arms_each_get_their_own_look_and_each_family_its_own_colour",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """Marks SLOW_MODULES and SLOW_TESTS `slow`, and refuses an entry that names no module or test (a test
    renamed would otherwise leave the quick subset silently slower); in a process of a spread run, puts
    the longest modules first (:func:`longest_first`)."""
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
    if "PYTEST_XDIST_WORKER" in os.environ:
        items[:] = longest_first(items)


#: A module's expected cost in the estimate :func:`longest_first` sorts by, roughly in seconds: a module of
#: SLOW_MODULES, each test marked ``slow`` and each other test.
COST_OF_A_SLOW_MODULE, COST_OF_A_SLOW_TEST, COST_OF_A_TEST = 30.0, 5.0, 0.1


def longest_first(items: list) -> list:
    """The items, their modules in order of expected cost, longest first (each module's tests in their
    own order; equal costs in collection order).

    Why: pytest-xdist hands a process its next module when it is nearly done with its last, in the order
    it gets them. It puts the modules with the most tests first, and the longest modules (a cluster, fault
    drills, whole benchmarks) have few tests, so they ran last: one process ran test_resume_cli.py's
    46 s and test_typed_round.py's 29 s while the other had finished, and the two ended 28 s apart
    (2026-11-29). Longest first (the classic rule for spreading jobs over machines) leaves the short
    modules for the end, where they even out the two processes. The cost comes from the ``slow`` marks,
    which a full run's durations set (:data:`SLOW_MODULES`, :data:`SLOW_TESTS`): no timing file to keep.
    Every worker sorts alike (the same items, the same marks), as pytest-xdist requires."""
    cost: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        slow = item.get_closest_marker("slow") is not None
        cost[module] = cost.get(module, COST_OF_A_SLOW_MODULE if module in SLOW_MODULES else 0.0) + (
            COST_OF_A_SLOW_TEST if slow else COST_OF_A_TEST
        )
    rank = {module: i for i, module in enumerate(sorted(cost, key=lambda m: -cost[m]))}
    return sorted(items, key=lambda item: rank[item.nodeid.split("::", 1)[0]])
