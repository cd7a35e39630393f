"""Equivariance the audit checked and found broken: claims that do not hold.

Two checks run per read (``equivariant`` in the results):

* under ``permute``, for a condition that claims ``order_invariant``: its memory must
  hold the same lines whatever order the log arrived in.  A violation on any source
  pair means the claim is false: a warning, first thing in the summary;
* under ``rename`` and ``decoy`` (same-length renamings), for every condition:
  C(rename(H)) == rename(C(H)).  Nothing claims it, but a violation says the
  condition's choices depend on how identifiers are spelled: a note.

(``relabel`` changes label lengths, and ``rerev`` and ``revalue`` record sizes, so a
budgeted memory may rightly keep other records there: not checked.)
"""

from __future__ import annotations

from typing import Any

from audit.scoring._metrics import ALL
from audit.scoring._table import Scores
from histories import TRANSFORMS


def equivariance_alerts(scores: Scores) -> list[dict[str, Any]]:
    """One entry per (system, check) with a violation on any source pair: ``check`` is
    ``order`` (a false order-invariance claim) or ``labels`` (spelling dependence),
    with the transform and the source pairs violated (``k``) of those checked (``n``)."""
    out: list[dict[str, Any]] = []
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
                    {
                        "reader": reader,
                        "condition": condition,
                        "budget": budget,
                        "kind": scores.kinds.get(condition, "strict"),
                        "check": check,
                        "transform": transform,
                        "k": int(cell["equivariance_violation_pairs_k"]),
                        "n": int(cell["equivariance_violation_pairs_n"]),
                        "reads_k": int(cell["equivariance_violation_reads_k"]),
                        "reads_n": int(cell["equivariance_violation_reads_n"]),
                    }
                )
                break  # one label check per system: rename, else decoy
    return out
