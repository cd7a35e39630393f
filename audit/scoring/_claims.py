"""Equivariance the audit checked and found broken: claims that do not hold.

Under ``permute``, a condition that claims ``order_invariant`` must keep the same lines
whatever order the log arrived in: one violated source pair makes the claim false (a
warning, first in the summary).  Under ``rename`` and ``decoy`` (same-length renamings)
every condition should satisfy C(rename(H)) == rename(C(H)); a violation says its
choices depend on how identifiers are spelled (a note).  ``relabel``, ``rerev`` and
``revalue`` change sizes, so a budgeted memory may rightly keep other records: not
checked.

A budgeted condition claims its memory fits the byte budget: a memory over it is
emptied (its reads then fail, ``overflow``), so a condition that goes over is scored on
empty memories, not on what it chose to keep (a warning, ``budget_alerts``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from audit.scoring._metrics import ALL
from audit.scoring._table import Scores
from histories import TRANSFORMS

Name = TypeVar("Name")


class EquivarianceFinding(BaseModel):
    """One broken equivariance of one system, with the one text the console and the
    report both show (summary.json keeps the fields)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    reader: str
    condition: str
    budget: int
    kind: str
    check: Literal["order", "labels"]
    transform: str
    k: int
    """Source pairs violated, of ``n`` checked."""
    n: int
    reads_k: int
    reads_n: int

    def text(self) -> str:
        """An ``order`` finding: the false claim, with its counts."""
        return (
            f"{self.condition} claims order invariance, but at {self.budget} B its memory "
            f"changed under {self.transform} on {self.k}/{self.n} source pairs "
            f"({self.reads_k}/{self.reads_n} reads): the claim is false."
        )


class BudgetFinding(BaseModel):
    """A condition whose memory went over the byte budget on some reads, with the one
    text the console and the report both show."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    condition: str
    budget: int
    k: int
    """Reads whose memory went over the budget on its way (and was emptied), of ``n``."""
    n: int

    def text(self) -> str:
        return (
            f"{self.condition}'s memory went over the {self.budget} B budget on "
            f"{self.k}/{self.n} reads: a memory over the budget is emptied, so those reads "
            "score an empty memory, not what it kept (a compressor keeps its memory within "
            "the budget it is given)"
        )


def budget_alerts(scores: Scores) -> list[BudgetFinding]:
    """One finding per (condition, budget) whose memory went over the budget on any read,
    over every transform (the memories are the exact reader's, the first reader's
    where it has none)."""
    found: dict[tuple[str, int], BudgetFinding] = {}
    for reader, condition, budget in scores.systems:
        if (condition, budget) in found:
            continue
        cells = [scores.cell((reader, condition, budget), t, ALL) for t in scores.transforms()]
        k = sum(int(c["over_budget_reads_k"]) for c in cells if c is not None)
        if k:
            n = sum(int(c["over_budget_reads_n"]) for c in cells if c is not None)
            found[condition, budget] = BudgetFinding(condition=condition, budget=budget, k=k, n=n)
    return list(found.values())


def spelling_text(
    findings: Sequence[EquivarianceFinding], label: Callable[[EquivarianceFinding], Name]
) -> list[str | Name]:
    """The ``labels`` findings as one sentence, however many systems show it, in parts:
    ``label`` names a system as its reader sees it (plain text, or the report's bold)."""
    several = len({f.transform for f in findings}) > 1
    transform = "" if several else f" under {findings[0].transform}"
    parts: list[str | Name] = [
        "these memories keep other records when labels are renamed (equivariance violated"
        f"{transform}, source pairs): "
    ]
    for index, finding in enumerate(findings):
        under = f" under {finding.transform}" if several else ""
        parts += [", " if index else "", label(finding), f" {finding.k}/{finding.n}{under}"]
    return [*parts, ". Their choices depend on how identifiers are spelled."]


def _kind(found: object) -> str:
    """A condition's kind; ``strict`` where the frame has none (NaN in an older one)."""
    return found if isinstance(found, str) else "strict"


def equivariance_alerts(scores: Scores) -> list[EquivarianceFinding]:
    """One finding per (system, check) with a violation on any source pair: ``check`` is
    ``order`` (a false order-invariance claim) or ``labels`` (spelling dependence),
    with the transform and the source pairs violated (``k``) of those checked (``n``)."""
    out: list[EquivarianceFinding] = []
    transforms = scores.transforms()
    for system in scores.systems:
        reader, condition, budget = system
        checks = {
            "order": [t.name for t in TRANSFORMS.values() if t.order_only],
            "labels": [t.name for t in TRANSFORMS.values() if t.same_lengths],
        }
        for check, candidates in checks.items():
            for transform in candidates:
                if transform not in transforms:
                    continue
                cell = scores.cell(system, transform, ALL)
                if cell is None or not cell["equivariance_violation_pairs_k"]:
                    continue
                out.append(
                    EquivarianceFinding(
                        reader=reader, condition=condition, budget=budget,
                        kind=_kind(scores.kinds.get(condition)), check=check,
                        transform=transform,
                        k=int(cell["equivariance_violation_pairs_k"]),
                        n=int(cell["equivariance_violation_pairs_n"]),
                        reads_k=int(cell["equivariance_violation_reads_k"]),
                        reads_n=int(cell["equivariance_violation_reads_n"]),
                    )
                )  # fmt: skip
                break  # one label check per system: rename, else decoy
    return out
