"""The product's Python face: run an audit, load a run, score it, write its report,
from a notebook or a script, without the command line.

``audit run`` and ``audit.run`` share the plan (``audit.plan``) and the engine, so a
run made here is the same run directory, byte for byte, as the command's with the same
options and seed; ``audit report`` and ``audit resume`` take it as theirs.  The LLM
stage (readers and writers on a server) is the command line's (``--reader``,
``--config``); this face runs the exact reader.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from audit.engine import execute
from audit.errors import PlanError
from audit.plan import (
    DEFAULT_TRANSFORMS,
    PRESET_TRANSFORMS,
    RunPlan,
    compressor_versions,
    default_conditions,
    parse_budgets,
    parse_conditions,
    parse_transforms,
    preregistered,
)
from audit.reportdata import Options, build_report
from audit.rundir import (
    CONFIG_FILE,
    RunData,
    file_source,
    load_run,
    preset_source,
    read_config_file,
)
from audit.scoring import Scores, score_results
from histories import MemoryAuditError
from histories.natural import PRESET_NAMES
from reports import write_document


def transform_seed(given: int | None, root: Path, preset: str | None, replicated: bool) -> int:
    """``seed`` as given, else the seed a run already in ``root`` recorded (the same
    command resumes it), else 0 for the paper's pilot, else drawn at random: a fixed
    public seed makes every transformed instance public, and a compressor that
    remembered them scored 84/84 under every transform (docs/method.md)."""
    if given is not None:
        return given
    recorded = sorted(root.glob(f"seed-*/{CONFIG_FILE}")) if replicated else [root / CONFIG_FILE]
    for path in recorded:
        if path.exists():
            try:
                return read_config_file(path.parent).config.seed
            except MemoryAuditError:
                break  # a damaged or foreign directory: the run refuses it, with its reason
    if preset == "cca-pilot-paper":
        return 0
    return secrets.randbelow(2**31)


def run(
    out: Path | str,
    *,
    preset: str = "cca-pilot",
    pairs: Path | str | None = None,
    conditions: str | Sequence[str] | None = None,
    transforms: str | Sequence[str] | None = None,
    budgets: str | int | Sequence[int] = 1200,
    seed: int | None = None,
    reference: str | None = None,
    workers: int = 1,
    csv: bool = False,
) -> RunData:
    """Run (or resume) an audit in ``out`` and load it back.

    ``conditions``: a comma list as ``--conditions`` takes it, or a list of such items
    (``"frontier"``, ``"bm25:budget=600"``, ``"my_module:MyMemory"``, ``"baselines"``);
    default every deterministic built-in.  ``transforms``: as ``--transforms`` (default:
    the preset's).  ``budgets``: bytes, one or a list, or a comma list as ``--budget``.
    ``seed``: the transforms' seed (default: the one ``out`` recorded,
    else drawn at random, as ``audit run`` does).  Bad input raises a
    ``MemoryAuditError`` naming the option.
    """
    out = Path(out)
    if isinstance(budgets, str):
        budget_list = parse_budgets(budgets, "budgets")
    else:
        given = [budgets] if isinstance(budgets, int) else list(budgets)
        budget_list = parse_budgets(",".join(str(b) for b in given), "budgets")
    if conditions is None:
        specs = default_conditions()
    else:
        items = [conditions] if isinstance(conditions, str) else _texts(conditions, "conditions")
        specs = [spec for item in items for spec in parse_conditions(item)]
    if transforms is not None and not isinstance(transforms, str):
        transforms = ",".join(_texts(transforms, "transforms"))
    if pairs is not None:
        entry, pair_list, digest = file_source(Path(pairs))
    elif preset not in PRESET_NAMES:
        raise PlanError(f"preset: unknown {preset!r}; known: {', '.join(PRESET_NAMES)}")
    else:
        entry, pair_list, digest = preset_source(preset)
    named = preset if pairs is None else ""
    try:
        plan = RunPlan(
            pairs=entry,
            pairs_sha256=digest,
            conditions=specs,
            compressor_versions=compressor_versions(specs),
            budgets=budget_list,
            transforms=parse_transforms(
                transforms or PRESET_TRANSFORMS.get(named, DEFAULT_TRANSFORMS), with_identity=True
            ),
            seed=transform_seed(seed, out, named or None, replicated=False),
            reference=preregistered(reference, specs),
        )
    except ValidationError as error:  # a value of the wrong type: name the field
        where = ".".join(str(part) for part in error.errors()[0]["loc"])
        raise PlanError(f"{where}: {error.errors()[0]['msg']}") from None
    execute(out, plan, pair_list, workers=workers, csv=csv)
    return load_run(out)


def _texts(value: object, option: str) -> list[str]:
    """A list of strings, or a ``PlanError`` naming the option."""
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return list(value)
    raise PlanError(f"{option}: give a comma list or a list of strings, not {value!r}")


def _run_data(run: RunData | Path | str) -> RunData:
    return run if isinstance(run, RunData) else load_run(Path(run))


def scores(run: RunData | Path | str) -> Scores:
    """Every score of a run (a loaded one, or its directory; ``Scores.cells``: one row per
    reader, condition, budget, transform and family, each score as k, n and its
    interval), computed again from its reads as ``summary.json``'s were."""
    run_data = _run_data(run)
    return score_results(run_data.results, run_data.conditions)


def report(
    run: RunData | Path | str, out: Path | str | None = None, reference: str | None = None
) -> Path:
    """Write report.html, report.md and the CSV tables (``out``, default the run's
    report/ folder) of a run (a loaded one, or its directory); returns report.html's
    path.  A ``reference`` that is no condition of the run is refused, as ``audit report
    --reference`` refuses it."""
    run_data = _run_data(run)
    if reference is not None and reference not in set(run_data.results["condition"].astype(str)):
        raise PlanError(f"reference: no condition {reference!r} in {run_data.path}")
    target = Path(out) if out is not None else run_data.path / "report"
    write_document(build_report(run_data, Options(reference=reference)), target)
    return target / "report.html"


__all__ = ["MemoryAuditError", "RunData", "Scores", "load_run", "report", "run", "scores"]
