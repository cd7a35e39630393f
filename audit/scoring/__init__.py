"""Every score and statistic of an audit, each defined once, with its unit.

``_metrics`` says what each score is; ``_table`` computes them all from a run's
reads (``score_results``); ``_gaps``, ``_selection`` and ``_stats`` build on them;
``_summary`` writes them out as ``summary.json``.  The console, the report and
``audit compare`` take their numbers from here, so one name never means two things.
"""

from audit.scoring._agreement import noise_floor, reader_agreement
from audit.scoring._claims import (
    EquivarianceFinding,
    budget_alerts,
    equivariance_alerts,
    spelling_text,
)
from audit.scoring._compactions import compaction_curve
from audit.scoring._gaps import shortcut_gaps
from audit.scoring._metrics import (
    COMPARED_SCORES,
    IDENTITY,
    SCORING_VERSION,
    Metric,
    Unit,
)
from audit.scoring._power import (
    Discordance,
    minimum_detectable_difference,
    pairs_needed,
    power,
)
from audit.scoring._probes import (
    FloorFinding,
    floor_findings,
    floor_message,
    listed,
    sentence,
)
from audit.scoring._readers import (
    READ_THRESHOLD,
    READER_CONTROL,
    ReaderCheck,
    WriterCheck,
    reader_checks,
    unreadable,
    writer_checks,
)
from audit.scoring._replication import REPLICATED, heterogeneity_p, replicate
from audit.scoring._selection import (
    Inversion,
    SelectionWarning,
    noise_note,
    selection_warnings,
)
from audit.scoring._stats import (
    ALPHA,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_STRATUM_CLUSTERS,
    Interval,
    PairedComparison,
    PairedTable,
    PairedTest,
    bootstrap_mean,
    cluster_bootstrap,
    cluster_bootstrap_interval,
    detectable_difference,
    holm,
    is_degenerate,
    newcombe_paired,
    paired_comparison,
    proportion,
    tango_paired,
    wilson_arrays,
)
from audit.scoring._summary import (
    Count,
    Summary,
    SummaryCell,
    load_summary,
    summarize,
    summary_of,
)
from audit.scoring._table import GROUP, SYSTEM, Scores, score_pieces, score_results
from audit.scoring._transfer import RankAgreement, independent_difference_p, rank_agreement
from audit.scoring._verdicts import (
    VERDICT_COLUMNS,
    VERDICT_LEGEND,
    Verdict,
    VerdictRow,
    best_of,
    verdict_rows,
    verdicts,
)

SCORED_COLUMNS = (
    "condition", "kind", "budget", "transform", "reader", "reader_model", "family", "branch",
    "variant", "pair_id", "source_pair_id", "repeat", "outcome", "correct",
    "correct_lenient", "adequate", "collision", "equivariant", "overflow", "memory_bytes",
    "wrong_answer",
)  # fmt: skip
"""The result columns scoring reads (``finish`` loads only these)."""

__all__ = [
    "ALPHA",
    "COMPARED_SCORES",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "GROUP",
    "IDENTITY",
    "MIN_STRATUM_CLUSTERS",
    "READER_CONTROL",
    "READ_THRESHOLD",
    "REPLICATED",
    "SCORED_COLUMNS",
    "SCORING_VERSION",
    "SYSTEM",
    "VERDICT_COLUMNS",
    "VERDICT_LEGEND",
    "Count",
    "Discordance",
    "EquivarianceFinding",
    "FloorFinding",
    "Interval",
    "Inversion",
    "Metric",
    "PairedComparison",
    "PairedTable",
    "PairedTest",
    "RankAgreement",
    "ReaderCheck",
    "Scores",
    "SelectionWarning",
    "Summary",
    "SummaryCell",
    "Unit",
    "Verdict",
    "VerdictRow",
    "WriterCheck",
    "best_of",
    "bootstrap_mean",
    "budget_alerts",
    "cluster_bootstrap",
    "cluster_bootstrap_interval",
    "compaction_curve",
    "detectable_difference",
    "equivariance_alerts",
    "floor_findings",
    "floor_message",
    "heterogeneity_p",
    "holm",
    "independent_difference_p",
    "is_degenerate",
    "listed",
    "load_summary",
    "minimum_detectable_difference",
    "newcombe_paired",
    "noise_floor",
    "noise_note",
    "paired_comparison",
    "pairs_needed",
    "power",
    "proportion",
    "rank_agreement",
    "reader_agreement",
    "reader_checks",
    "replicate",
    "score_pieces",
    "score_results",
    "selection_warnings",
    "sentence",
    "shortcut_gaps",
    "spelling_text",
    "summarize",
    "summary_of",
    "tango_paired",
    "unreadable",
    "verdict_rows",
    "verdicts",
    "wilson_arrays",
    "writer_checks",
]
