"""``audit power``: how many source pairs a paired comparison needs, or what it can see."""

from __future__ import annotations

import math
from typing import Annotated

import typer

from audit.cli._common import echo_fitted, fail

_DIP_WINDOW = 10
"""Pairs beyond the answer checked for a dip below the target (the exact test's saw-tooth)."""


def power_command(
    effect: Annotated[
        float,
        typer.Option(help="Difference in pass rates to detect, p10 - p01, in (0, 1]."),
    ],
    discordance: Annotated[
        float | None,
        typer.Option(
            help="Share of pairs where exactly one condition passes, p10 + p01 "
            "(default: the effect, the most favourable case)."
        ),
    ] = None,
    comparisons: Annotated[
        int, typer.Option(help="Comparisons in the table: each test gets alpha / comparisons.")
    ] = 1,
    alpha: Annotated[float, typer.Option(help="Family-wise level, two-sided.")] = 0.05,
    target: Annotated[float, typer.Option("--power", help="Power to reach.")] = 0.8,
    pairs: Annotated[
        int | None,
        typer.Option(help="Source pairs you have: print their power and what they can detect."),
    ] = None,
) -> None:
    """Power of the exact McNemar test on source pairs, or the source pairs needed."""
    from audit.scoring import minimum_detectable_difference, pairs_needed, power

    # one line per bad value, naming the option, before any arithmetic
    if not 0 < effect <= 1:
        fail(f"--effect must be in (0, 1] (a difference in pass rates), got {effect:g}")
    if discordance is not None and not effect <= discordance <= 1:
        fail(
            f"--discordance must be in [--effect, 1] = [{effect:g}, 1], got {discordance:g}:"
            " every pair that changes the pass rate is a discordant pair"
        )
    if comparisons < 1:
        fail(f"--comparisons must be at least 1, got {comparisons}")
    if not 0 < alpha < 1:
        fail(f"--alpha must be in (0, 1), got {alpha:g}")
    if not 0 < target < 1:
        fail(f"--power must be in (0, 1), got {target:g}")
    if pairs is not None and pairs < 1:
        fail(f"--pairs must be at least 1, got {pairs}")
    psi = effect if discordance is None else discordance
    favourable = " (most favourable: every discordant pair one way)" if psi == effect else ""
    level = (
        f"alpha {alpha:g}"
        if comparisons == 1
        else f"alpha {alpha:g} / {comparisons} comparisons = {alpha / comparisons:.4g} per test"
        " (Bonferroni: Holm's first step)"
    )
    echo_fitted(f"exact McNemar test, two-sided, {level}")
    echo_fitted(f"effect {effect:g}, discordance {psi:g}{favourable}")
    try:
        if pairs is not None:
            achieved = power(pairs, effect, psi, alpha, comparisons)
            smallest = minimum_detectable_difference(pairs, discordance, alpha, comparisons, target)
            echo_fitted(f"power with {pairs} source pairs: {achieved:.1%}")
            floor = "" if discordance is None else f" (discordance max(it, {discordance:g}))"
            echo_fitted(
                f"smallest effect detected with {target:.0%} power: "
                + (
                    "none (the exact test cannot reject)"
                    if math.isnan(smallest)
                    else f"{smallest:.3f}"
                )
                + floor
            )
            return
        needed = pairs_needed(effect, psi, alpha, comparisons, target)
    except ValueError as error:  # e.g. more pairs than pairs_needed scans
        fail(str(error))
    echo_fitted(
        f"source pairs needed for {target:.0%} power: {needed}"
        f" (power {power(needed, effect, psi, alpha, comparisons):.1%})"
    )
    for more in range(needed + 1, needed + 1 + _DIP_WINDOW):
        dip = power(more, effect, psi, alpha, comparisons)
        if dip < target:
            echo_fitted(
                f"note: power is not monotone in pairs (the exact test is discrete):"
                f" {more} pairs give {dip:.1%}"
            )
            break
