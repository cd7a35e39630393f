"""Every score and statistic of an audit, each defined once, with its unit.

Console, ``summary.json``, the report and ``audit compare`` all take their numbers
from here.
"""

from audit.scoring._reads import SCORED_COLUMNS, summarize
from audit.scoring._stats import (
    ALPHA,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    PairedComparison,
    PairedTable,
    Proportion,
    bootstrap_mean,
    cluster_bootstrap,
    holm,
    mcnemar_exact,
    paired_comparison,
    proportion,
    wilson,
)

__all__ = [
    "ALPHA",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "SCORED_COLUMNS",
    "PairedComparison",
    "PairedTable",
    "Proportion",
    "bootstrap_mean",
    "cluster_bootstrap",
    "holm",
    "mcnemar_exact",
    "paired_comparison",
    "proportion",
    "summarize",
    "wilson",
]
