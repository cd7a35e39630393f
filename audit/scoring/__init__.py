"""Every score and statistic of an audit, each defined once, with its unit.

``_metrics`` says what each score is; ``_table`` computes them all from a run's
reads (``score_results``); ``_gaps``, ``_selection`` and ``_stats`` build on them;
``_summary`` writes them out as ``summary.json``.  The console, the report and
``audit compare`` take their numbers from here, so one name never means two things.
"""

from audit.scoring._agreement import ReaderAgreement, noise_floor, reader_agreement
from audit.scoring._claims import equivariance_alerts
from audit.scoring._compactions import COMPACTION_LEVELS, REPEATED_COMPACTION, compaction_curve
from audit.scoring._gaps import GAP_METRICS, shortcut_gaps
from audit.scoring._metrics import (
    ALL,
    BY_NAME,
    IDENTITY,
    LATE_REFERENCE,
    LENIENT_METRICS,
    METRICS,
    UNITS,
    Metric,
    Unit,
)
from audit.scoring._power import (
    DEFAULT_TARGET,
    MAX_PAIRS,
    Discordance,
    alpha_per_test,
    minimum_detectable_difference,
    pairs_needed,
    power,
)
from audit.scoring._probes import (
    article,
    grouped_matches,
    listed,
    probe_advice,
    probe_facts,
    probe_matches,
)
from audit.scoring._replication import REPLICATED, heterogeneity_p, heterogeneity_test, replicate
from audit.scoring._selection import selection_warnings
from audit.scoring._stats import (
    ALPHA,
    BOOTSTRAP_POOLED,
    BOOTSTRAP_WITHIN,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_STRATUM_CLUSTERS,
    NEWCOMBE,
    Interval,
    PairedComparison,
    PairedTable,
    Proportion,
    bootstrap_mean,
    cluster_bootstrap,
    cluster_bootstrap_interval,
    detectable_difference,
    holm,
    is_degenerate,
    mcnemar_exact,
    newcombe_paired,
    paired_comparison,
    proportion,
    wilson,
    wilson_arrays,
)
from audit.scoring._summary import UNIT_NOTES, cell_entry, summarize, summary_of
from audit.scoring._table import CELL, GROUP, PAIR_KEYS, SYSTEM, Scores, score_results

SCORED_COLUMNS = (
    "condition", "kind", "budget", "transform", "reader", "reader_model", "family", "branch",
    "variant", "pair_id", "source_pair_id", "repeat", "outcome", "correct",
    "correct_lenient", "adequate", "collision", "equivariant", "overflow", "memory_bytes",
)  # fmt: skip
"""The result columns scoring reads (``finish`` loads only these)."""

__all__ = [
    "ALL",
    "ALPHA",
    "BOOTSTRAP_POOLED",
    "BOOTSTRAP_WITHIN",
    "BY_NAME",
    "CELL",
    "COMPACTION_LEVELS",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "DEFAULT_TARGET",
    "GAP_METRICS",
    "GROUP",
    "IDENTITY",
    "LATE_REFERENCE",
    "LENIENT_METRICS",
    "MAX_PAIRS",
    "METRICS",
    "MIN_STRATUM_CLUSTERS",
    "NEWCOMBE",
    "PAIR_KEYS",
    "REPEATED_COMPACTION",
    "REPLICATED",
    "SCORED_COLUMNS",
    "SYSTEM",
    "UNITS",
    "UNIT_NOTES",
    "Discordance",
    "Interval",
    "Metric",
    "PairedComparison",
    "PairedTable",
    "Proportion",
    "ReaderAgreement",
    "Scores",
    "Unit",
    "alpha_per_test",
    "article",
    "bootstrap_mean",
    "cell_entry",
    "cluster_bootstrap",
    "cluster_bootstrap_interval",
    "compaction_curve",
    "detectable_difference",
    "equivariance_alerts",
    "grouped_matches",
    "heterogeneity_p",
    "heterogeneity_test",
    "holm",
    "is_degenerate",
    "listed",
    "mcnemar_exact",
    "minimum_detectable_difference",
    "newcombe_paired",
    "noise_floor",
    "paired_comparison",
    "pairs_needed",
    "power",
    "probe_advice",
    "probe_facts",
    "probe_matches",
    "proportion",
    "reader_agreement",
    "replicate",
    "score_results",
    "selection_warnings",
    "shortcut_gaps",
    "summarize",
    "summary_of",
    "wilson",
    "wilson_arrays",
]
