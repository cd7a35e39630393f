"""The ``memory_audit`` pytest fixture: a small audit of a compressor inside a test.

Installing memory-audit registers this module with pytest (entry point ``pytest11``),
so any test can ask for the fixture::

    def test_keeps_what_tail_keeps(memory_audit):
        memory_audit("my_memory:NewestFirst", baseline="tail").assert_keeps_at_least()

It imports nothing of the audit until a test asks for the fixture: pytest loads every
installed plugin at start-up, and a broken or partial installation must never break
a user's test session, only the tests that use it (docs/reports.md, "A gate for CI").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Kept:
    """What one condition kept: source pairs passing the score, of those audited."""

    condition: str
    k: int
    """Passing source pairs (an undetermined one counts as failing)."""
    n: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else math.nan

    def text(self) -> str:
        return f"{self.condition} {self.k}/{self.n}"


@dataclass(frozen=True)
class AuditResult:
    """A small audit of a compressor beside a baseline on the same source pairs."""

    run_dir: Path
    """The run directory: ``audit report`` it to see every pair."""
    score: str
    title: str
    compressor: Kept
    baseline: Kept
    compressor_alone: int
    """Source pairs the compressor passes and the baseline fails."""
    baseline_alone: int
    """Source pairs the baseline passes and the compressor fails."""
    errors: tuple[str, ...] = ()
    """The compressor's errors (each distinct one; its reads scored 0)."""

    def assert_keeps_at_least(self, margin: float = 0.0) -> None:
        """Fail the test unless the compressor passes at least as large a share of the
        source pairs as the baseline, less ``margin`` (a share: 0.05 is five points).
        The exact reader is a function, so the counts are exact on these pairs; a
        significance test needs more pairs than a unit test runs (``audit compare
        --fail-on-regression`` on a full audit)."""
        if not 0.0 <= margin <= 1.0:  # a negative margin made a keeper "keep less"
            from audit.errors import PlanError

            raise PlanError(f"margin: a share between 0 and 1, not {margin!r}")
        if self.errors:
            raise AssertionError(
                f"{self.compressor.condition} raised (its reads score 0): "
                + "; ".join(self.errors)
                + f"; the run: {self.run_dir}"
            )
        if self.compressor.rate >= self.baseline.rate - margin - 1e-12:
            return
        raise AssertionError(
            f"{self.compressor.condition} keeps less than {self.baseline.condition} on "
            f"{self.title}: {self.compressor.text()} source pairs against "
            f"{self.baseline.text()}"
            + (f" (margin {margin:g})" if margin else "")
            + f"; {self.baseline.condition} alone passes {self.baseline_alone}, "
            f"{self.compressor.condition} alone {self.compressor_alone}; the run: "
            f"{self.run_dir} (audit report it to see each pair)"
        )


@dataclass(frozen=True)
class MemoryAudit:
    """The fixture's value: call it to audit a compressor (``__call__``)."""

    root: Path

    def __call__(
        self,
        compressor: type[Any] | str,
        *,
        baseline: str = "tail",
        preset: str = "cca-pilot",
        pairs_per_family: int = 4,
        transforms: Sequence[str] = ("identity",),
        budget: int = 1200,
        score: str = "joint_J",
        seed: int = 0,
    ) -> AuditResult:
        """Audit ``compressor`` (a ``Compressor`` class defined at a module's top level,
        or a condition as ``audit run --conditions`` takes it: ``module:Class``, a
        plugin's name) and ``baseline`` on ``pairs_per_family`` pairs of each family of
        a generated ``preset``, under ``transforms``, at ``budget`` bytes, read by the
        exact reader; ``score`` is one of ``audit compare --score``'s; ``seed`` seeds
        the transforms (fixed by default: a test must give the same answer twice)."""
        from audit.engine import execute
        from audit.errors import PlanError
        from audit.plan import RunPlan, parse_conditions, parse_transforms
        from audit.reportdata import pair_values
        from audit.rundir import CompressorError, load_run, preset_source
        from audit.scoring import COMPARED_SCORES, paired_comparison, score_results
        from compressors import build

        if score not in COMPARED_SCORES:
            raise PlanError(
                f"memory_audit: score {score!r} is not one of {', '.join(COMPARED_SCORES)}"
            )
        if not isinstance(compressor, type | str):
            raise PlanError(
                "memory_audit: give a Compressor class or a condition name, not an instance "
                f"({type(compressor).__name__})"
            )
        if pairs_per_family < 1 or budget < 1:
            raise PlanError("memory_audit: pairs_per_family and budget must be at least 1")
        if isinstance(compressor, type) and (
            "<locals>" in compressor.__qualname__ or compressor.__module__ == "__main__"
        ):
            raise PlanError(f"memory_audit: {_unfound(compressor)}")
        specs = parse_conditions(f"{_condition(compressor)},{baseline}", "memory_audit")
        if len(specs) != 2:
            raise PlanError(f"memory_audit: baseline {baseline!r} is not one condition")
        spec, against = specs
        built = {s.label: build(s) for s in (spec, against)}
        for label, made in built.items():
            if made.uses_llm or made.needs_llm_reader:
                raise PlanError(
                    f"memory_audit: {label} needs a model; the fixture runs the exact reader "
                    "alone (audit run --llm-conditions audits it)"
                )
        if isinstance(compressor, type) and type(built[spec.label]) is not compressor:
            raise PlanError(f"memory_audit: {_unfound(compressor)}")
        try:
            source, pairs, digest = preset_source(preset, pairs_per_family=pairs_per_family)
        except (KeyError, ValueError):
            raise PlanError(
                f"memory_audit: preset {preset!r}: give a generated preset (cca-pilot, "
                "cca-pilot-paper)"
            ) from None
        plan = RunPlan(
            pairs=source,
            pairs_sha256=digest,
            conditions=[spec, against],
            compressor_versions={label: c.label for label, c in built.items()},
            budgets=[budget],
            transforms=parse_transforms(",".join(transforms), with_identity=True),
            seed=seed,
        )
        run_dir = self.root / f"{_safe(spec.label)}-{len(list(self.root.iterdir())) + 1}"
        summary = execute(run_dir, plan, pairs, workers=1, measure_backends=False)
        errors = tuple(
            (e.error if e.error.startswith(e.type) else f"{e.type}: {e.error}")
            + (f" at {e.raised_at}" if e.raised_at else "")
            for e in map(CompressorError.model_validate, summary.get("compressor_errors", []))
            if e.condition == spec.label
        )
        scores = score_results(load_run(run_dir).results, plan.condition_labels)
        values = pair_values(scores, score)
        kept = {}
        for label in (spec.label, against.label):
            cell = scores.cell(("exact", label, budget)) or {}
            kept[label] = Kept(
                label, int(cell.get(f"{score}_pairs_k", 0)), int(cell.get(f"{score}_pairs_n", 0))
            )
        paired = paired_comparison(
            values.get(("exact", against.label, budget), {}),
            values.get(("exact", spec.label, budget), {}),
            scores.families,
        ).table
        return AuditResult(
            run_dir, score, COMPARED_SCORES[score], kept[spec.label], kept[against.label],
            paired.only_b, paired.only_a, errors,
        )  # fmt: skip


def _condition(compressor: type[Any] | str) -> str:
    """A class as the ``module:Class`` condition that finds it again."""
    if isinstance(compressor, str):
        return compressor
    return f"{compressor.__module__}:{compressor.__qualname__}"


def _unfound(compressor: type[Any]) -> str:
    return (
        f"{compressor.__qualname__} cannot be found again by its name "
        f"{_condition(compressor)!r} (the run builds its compressors by name): define it "
        "at the top level of an importable module"
    )


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in label)[:60] or "run"


@pytest.fixture
def memory_audit(tmp_path_factory: pytest.TempPathFactory) -> MemoryAudit:
    """A small audit of a compressor against a baseline: ``memory_audit(MyCompressor)``
    returns an ``AuditResult``; ``.assert_keeps_at_least()`` fails the test, naming the
    scores, when it keeps less than the baseline (``tail`` unless ``baseline=``)."""
    return MemoryAudit(tmp_path_factory.mktemp("memory-audit"))
