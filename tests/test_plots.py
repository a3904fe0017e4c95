"""The run's figures with fifteen arms (dp_compare_small's): a distinct look per arm, one colour per
mechanism family, the legend outside the axes, integer rounds, coinciding curves said, and the two kinds of
ε on separate panels. The figures are real matplotlib figures, read back through matplotlib's objects."""

from __future__ import annotations

import colorsys
import itertools
import re

import pytest
from matplotlib import colormaps

from sifl_ray.arms import get_arm
from sifl_ray.plots import (
    accuracy_figure,
    accuracy_vs_epsilon_figure,
    arm_styles,
    coinciding,
    plot_accuracy,
    power_of_ten,
    summary_styles,
)

KINDS = ("nbafl", "dp_fedavg", "dp_fedavg_secagg")
EPSILONS = (1.0, 5.0, 10.0, 20.0)
ARMS = {"fl": "fl", "secagg": "secagg", "sifl_m2": "sifl_m2"} | {
    f"{k}_eps{e:g}": k for k in KINDS for e in EPSILONS
}
ROUNDS = 20


def _run() -> tuple[dict, dict, dict]:
    """A 15-arm run as the recorder hands it over: history, summary, ε per arm. fl, secagg and sifl_m2
    learn the same curve (secagg's is fl's up to the ring; sifl_m2's within its coding bound)."""
    history, arms, epsilons = {}, {}, {}
    for i, (arm, kind) in enumerate(ARMS.items()):
        eps = (
            None if kind in ("fl", "secagg") else (7e-4 if kind == "sifl_m2" else float(arm.split("eps")[1]))
        )
        same = kind in ("fl", "secagg", "sifl_m2")
        acc = [
            (0.95 if same else 0.1 + 0.02 * i) * (1 - 0.5**t) + (1e-5 * i if same else 0)
            for t in range(ROUNDS)
        ]
        history[arm] = [{"round": t, "test_accuracy": a} for t, a in enumerate(acc)]
        per_element = eps if kind == "sifl_m2" else None
        whole = eps if kind in KINDS else None
        epsilons[arm] = {"per_element": per_element, "global": None, "global_round0": None, "whole": whole}
        privacy = None if eps is None else {"delta": 1e-5}
        arms[arm] = {"kind": kind, "final_accuracy": acc[-1], "privacy": privacy}
    return history, {"scenario": "dp_compare_small", "arms": arms}, epsilons


def test_fifteen_arms_each_get_their_own_look_and_each_family_its_own_colour():
    _, summary, epsilons = _run()
    styles = summary_styles(summary, epsilons)
    assert set(styles) == set(ARMS)
    looks = {(s.color, s.linestyle, s.marker) for s in styles.values()}
    assert len(looks) == 15  # no two arms drawn alike
    assert len({s.color for s in styles.values()}) == 15  # not even in colour alone

    def shade_in(cmap_name: str, color: tuple) -> float | None:
        """Where on ``cmap_name`` ``color`` lies (``None``: not on it)."""
        cmap = colormaps[cmap_name]
        for k in range(1001):
            if max(abs(a - b) for a, b in zip(cmap(k / 1000), color, strict=True)) < 2e-3:
                return k / 1000
        return None

    def lightness(arm: str) -> float:
        r, g, b, _ = styles[arm].color
        return colorsys.rgb_to_hls(r, g, b)[1]

    declared = {kind: get_arm(kind).colormap for kind in set(ARMS.values())}
    assert None not in declared.values() and len(set(declared.values())) == len(declared)
    for arm, kind in ARMS.items():  # each arm in the colour map its arm declares, and in no other arm's
        assert shade_in(declared[kind], styles[arm].color) is not None, arm
        others = [m for m in declared.values() if m != declared[kind]]
        assert all(shade_in(m, styles[arm].color) is None for m in others), arm
    for kind in KINDS:  # a family: darker as ε grows (weaker privacy), and a dash of its own each
        members = [f"{kind}_eps{e:g}" for e in EPSILONS]
        shades = [lightness(a) for a in members]
        assert shades == sorted(shades, reverse=True), (kind, shades)
        assert len({styles[a].linestyle for a in members}) == 4, kind


def test_accuracy_plot_puts_the_legend_outside_uses_integer_rounds_and_says_which_curves_coincide(tmp_path):
    history, summary, epsilons = _run()
    styles = summary_styles(summary, epsilons)
    fig = accuracy_figure(history, styles, "dp_compare_small: test accuracy")
    fig.canvas.draw()
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == list(ARMS)
    inside, box = ax.get_window_extent(), legend.get_window_extent()
    assert box.x0 >= inside.x1  # entirely to the right of the axes: it covers no curve
    ticks = [t for t in ax.get_xticks() if 0 <= t <= ROUNDS - 1]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    # every line carries its arm's style
    for line in ax.get_lines():
        style = styles[line.get_label()]
        assert (tuple(line.get_color()), line.get_linestyle(), line.get_marker()) == (
            style.color,
            {"-": "-", "--": "--", "-.": "-.", ":": ":"}[style.linestyle],
            style.marker,
        )
    captions = " ".join(t.get_text() for t in fig.texts)
    assert "fl, secagg and sifl_m2 coincide" in captions
    assert "nbafl" not in captions
    path = plot_accuracy(tmp_path, history, styles, "t")
    assert path.stat().st_size > 10_000


def test_accuracy_against_epsilon_keeps_per_element_and_whole_model_epsilon_on_separate_panels():
    _, summary, epsilons = _run()
    styles = summary_styles(summary, epsilons)
    fig = accuracy_vs_epsilon_figure(summary, epsilons, styles, "dp_compare_small: final accuracy against ε")
    fig.canvas.draw()
    whole, per_element = fig.axes
    assert "whole model" in whole.get_xlabel() and "per element" in per_element.get_xlabel()

    def xs(ax) -> set[float]:
        return {float(x) for line in ax.get_lines() for x in line.get_xdata() if line.get_marker() != "None"}

    assert xs(whole) == set(EPSILONS)  # NbAFL, DP-FedAvg, DP-FedAvg + secagg
    assert xs(per_element) == {7e-4}  # SIFL alone
    assert whole.get_xscale() == per_element.get_xscale() == "log"
    legend = per_element.get_legend()
    assert legend.get_window_extent().x0 >= per_element.get_window_extent().x1
    labels = [t.get_text() for t in legend.get_texts()]
    assert set(labels) == set(ARMS) - {"fl", "secagg"} | {"fl (ε = ∞)", "secagg (ε = ∞)"}
    # fl and secagg end at one accuracy: said, and drawn with different dashes so both show
    captions = " ".join(t.get_text() for t in fig.texts)
    assert "fl and secagg coincide" in captions and "different figures" in captions
    flat = [
        line for line in whole.get_lines() if line.get_marker() == "None" and len(set(line.get_ydata())) == 1
    ]
    assert len({line.get_linestyle() for line in flat}) == 2
    assert "δ = 1e-05" in fig._suptitle.get_text()


@pytest.mark.parametrize(
    "curves, groups",
    [
        ({"a": [1.0, 2.0], "b": [1.05, 2.0], "c": [5.0, 6.0]}, [["a", "b"]]),
        ({"a": [1.0, 2.0], "b": [1.5, 2.0]}, []),  # 0.5 pp apart: two curves a reader can tell apart
        ({"a": [0.0], "b": [0.08], "c": [0.16]}, [["a", "b", "c"]]),  # linked through b
        ({"a": [1.0, 2.0], "b": [1.0]}, []),  # different lengths never coincide
    ],
)
def test_coinciding_groups_curves_within_the_tolerance(curves, groups):
    assert coinciding(curves) == groups


def test_a_family_of_one_and_an_unknown_family_still_get_distinct_colours():
    styles = arm_styles(
        {"fl": ("Greys", "fl", None), "my_arm": (None, "plugin", 2.0), "other": (None, "plugin2", None)}
    )
    assert len({s.color for s in styles.values()}) == 3


def test_the_sifl_modes_are_one_family_because_they_declare_one_colour_map():
    assert get_arm("sifl_m1").colormap == get_arm("sifl_m2").colormap
    summary = {"arms": {"sifl_m1": {"kind": "sifl_m1"}, "sifl_m2": {"kind": "sifl_m2"}}}
    styles = summary_styles(summary, {"sifl_m1": {"per_element": 1e-3}, "sifl_m2": {"per_element": 1e-6}})
    # one family: two shades of one map, and two dashes
    assert styles["sifl_m1"].linestyle != styles["sifl_m2"].linestyle


def test_a_plug_in_arm_is_drawn_in_the_colour_map_it_declares_and_a_spare_map_is_nobody_elses():
    from sifl_ray.arms import Arm, register_arm, unregister_arm

    class Teal(Arm):
        kind = "teal_plot_test"
        colormap = "Reds"  # also the first spare map: a spare must then not be Reds

    class Plain(Arm):
        kind = "plain_plot_test"

    register_arm(Teal())
    register_arm(Plain())
    try:
        summary = {"arms": {a: {"kind": a} for a in ("teal_plot_test", "plain_plot_test", "unknown_kind")}}
        styles = summary_styles(summary, {})
    finally:
        unregister_arm("teal_plot_test")
        unregister_arm("plain_plot_test")
    assert styles["teal_plot_test"].color == tuple(float(c) for c in colormaps["Reds"](0.7))
    reds = [colormaps["Reds"](k / 1000) for k in range(1001)]
    for arm in ("plain_plot_test", "unknown_kind"):  # declared none, or not registered: a spare, not Reds
        assert all(max(abs(a - b) for a, b in zip(c, styles[arm].color, strict=True)) > 2e-3 for c in reds)
    assert styles["plain_plot_test"].color != styles["unknown_kind"].color


def test_two_close_epsilons_get_tick_labels_that_do_not_overlap():
    """The quickstart's per-element panel: sifl_m1 and sifl_m2 at close ε (a tenth apart, as fresh keys can
    give), where matplotlib would label its minor ticks and the labels run into each other."""
    arms, epsilons = {}, {}
    for arm, eps in (("fl", None), ("sifl_m1", 4.6e-4), ("sifl_m2", 4.9e-4), ("nbafl_eps1", None)):
        kind = arm.split("_eps")[0]
        arms[arm] = {
            "kind": kind,
            "final_accuracy": 0.95,
            "privacy": None if eps is None else {"delta": 1e-5},
        }
        epsilons[arm] = {"per_element": eps, "global": None, "global_round0": None, "whole": None}
    arms["nbafl_eps1"]["final_accuracy"] = 0.09
    epsilons["nbafl_eps1"]["whole"] = 1.0
    summary = {"scenario": "quickstart", "arms": arms}
    fig = accuracy_vs_epsilon_figure(summary, epsilons, summary_styles(summary, epsilons), "quickstart")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        shown = [t for t in [*ax.get_xticklabels(), *ax.get_xticklabels(minor=True)] if t.get_text()]
        lo, hi = ax.get_xlim()
        shown = [t for t in shown if lo <= t.get_position()[0] <= hi]
        assert len(shown) >= 2, ax.get_xlabel()  # a reader can still read the scale
        boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.x0)
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes)), [t.get_text() for t in shown]
        # decades in plain text, never TeX ($\mathdefault{10^{-4}}$ loads the TeX parser at the run's end)
        labels = [t.get_text() for t in shown]
        assert all(re.fullmatch("1|10[⁻¹²³⁴⁵⁶⁷⁸⁹⁰]+", label) for label in labels), labels


@pytest.mark.parametrize(
    ("value", "label"),
    [
        (1e-4, "10⁻⁴"),
        (1e-10, "10⁻¹⁰"),
        (1.0, "1"),
        (10.0, "10¹"),
        (1e20, "10²⁰"),
        (3e-4, "0.0003"),
        (2.5, "2.5"),
        (0.0, ""),
        (-10.0, ""),
        (float("nan"), ""),
        (float("inf"), ""),
    ],
)
def test_a_log_axis_is_labelled_in_plain_text_powers_of_ten(value, label):
    assert power_of_ten(value) == label


def test_the_audit_figure_draws_infinite_estimates_and_intervals_above_their_estimate(tmp_path):
    """What the audit reports, drawn as reported: the aggregator's view reads canaries exactly (an
    infinite estimate, at the top with "∞"), a bootstrap interval can lie above its estimate, an arm can
    claim nothing; the figure is written and its axes stay finite."""
    import math

    from matplotlib.image import imread

    from sifl_ray.plots import plot_audit

    def row(estimate, low, high, bound, claim):
        return {
            "estimate": estimate,
            "estimate_low": low,
            "estimate_high": high,
            "lower_bound": bound,
            "ceiling": 2.77,
            "claimed_epsilon": claim,
            "verdict": "no claim" if claim is None else "not refuted",
        }

    audits = {
        "fl": {
            "final_model": row(40.3, 37.5, 72.9, 2.04, None),
            "uploads": row(math.inf, math.inf, math.inf, 2.04, None),
        },
        "secagg": {
            "final_model": row(40.3, 37.5, 72.9, 2.04, None),
            "uploads": row(0.23, 0.25, 7.1, 0.0, None),
        },
        "dp_fedavg_eps5": {
            "final_model": row(7.85, 3.96, 16.0, 0.32, 5.0),
            "uploads": row(None, None, None, 0.0, None),
        },
    }
    summary = {"arms": {arm: {"audit": a} for arm, a in audits.items()}}
    path = plot_audit(tmp_path, summary, "audit_small: the in-run audit against the claimed ε")
    assert path == tmp_path / "audit.png"
    pixels = imread(path)
    assert pixels.shape[0] > 300 and (pixels[..., :3] < 0.5).any()  # drawn, not blank
    assert plot_audit(tmp_path, {"arms": {"fl": {"audit": None}}}, "none") is None
