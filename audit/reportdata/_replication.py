"""``audit report`` of a replication (``audit run --seeds``): per seed and pooled."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from audit.errors import RunDataError
from audit.rundir import REPLICATION_FILE
from audit.scoring import REPLICATED
from reports import Bullets, Code, Column, Document, Facts, Paragraph, Section, Table


def build_replication(root: Path) -> Document:
    """The replication in ``root`` (its replication.json) as a document."""
    path = root / REPLICATION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        seeds = [str(s) for s in data["seeds"]]
        systems = list(data["systems"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RunDataError(f"{path}: unreadable ({error})") from None
    sections = []
    for metric in REPLICATED:
        rows = []
        for system in systems:
            found = system.get(metric)
            if not found:
                continue
            row: dict[str, Any] = {k: system[k] for k in ("reader", "condition", "budget")}
            for seed in seeds:
                counts = found["per_seed"].get(seed, {"k": 0, "n": 0})
                row[f"seed_{seed}_k"], row[f"seed_{seed}_n"] = counts["k"], counts["n"]
                row[f"seed_{seed}_k_high"] = counts["k"]
            pooled = found["pooled"]
            row.update(pooled_k=pooled["k"], pooled_k_high=pooled["k"], pooled_n=pooled["n"],
                       pooled_low=_number(pooled["low"]), pooled_high=_number(pooled["high"]),
                       heterogeneity_p=_number(found["heterogeneity_p"]))  # fmt: skip
            rows.append(row)
        columns = [
            Column("condition", "condition", "label"),
            Column("budget", "budget (B)", "integer"),
            Column("reader", "reader", "label"),
            *(Column(f"seed_{seed}", f"seed {seed} (source pairs)", "count") for seed in seeds),
            Column("pooled", "pooled (source pairs)", "proportion"),
            Column("heterogeneity_p", "seeds differ? p", "pvalue",
                   help="exact test that the seeds share one rate: Fisher's for two seeds, "
                   "Fisher-Freeman-Halton (Monte Carlo, seeded) for more; a large p is no "
                   "evidence that they agree"),
        ]  # fmt: skip
        slug, frame = metric.replace("_", "-"), pd.DataFrame(rows)
        table = Table(f"replication-{slug}-table", columns, frame, csv=f"replication_{metric}.csv")
        title = f"{metric.replace('_', ' ')} per seed and pooled"
        sections.append(Section(f"replication-{slug}", title, [table]))
    return Document(
        title=f"memory audit replication: {root.resolve().name}",
        facts=Facts([("replication", [Code(str(root))]), ("generation seeds", ", ".join(seeds))]),
        summary=[
            Paragraph(
                "The same audit on datasets generated with each seed: the same families, "
                "sizes and labels, other histories. Pooled: every seed's source pairs together "
                "(independent histories), with a 95 % Wilson interval. A small heterogeneity "
                "p says the seeds disagree and the pooled number hides it; a large one is no "
                "evidence that they agree: with a few dozen source pairs a seed the test sees "
                "only large differences (low power). The test is exact: Fisher's for two "
                "seeds, Fisher-Freeman-Halton for more (its p estimated from 19,999 random "
                "tables, seeded)."
            ),
            Bullets([[f"each seed's own report: audit report {root}/seed-N"]]),
        ],
        sections=sections,
        stem="replication",
    )


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)
