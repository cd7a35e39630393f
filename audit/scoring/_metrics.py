"""What each score is: its name, its unit, the reads it counts, what NA does to it.

Every score of memory-audit is defined here and nowhere else; the console,
``summary.json``, the report and ``audit compare`` read the numbers computed from
these definitions (``_table``), so the same name never means two things.

Units.  A score is counted in one of:

* **source pairs**: independent evidence.  A source pair's transformed instances and
  repeats are not independent of it; they are folded into one value per source pair.
* **blocks**: a block is one (instance, repeat) of a pair, an instance being the
  source pair itself or one transformed copy: the reads a score needs (both variants;
  for joint J both the reveal and the override branch).  It passes when all its reads
  pass.
* **reads**: one reader's answer on one memory (variant x branch x instance x repeat).

An NA read is unknown, so a block with NA is computed twice, NA as fail and NA as
pass, and the two results are **bounds**.  A source pair passes when **every** one of
its blocks passes (at identity with one repeat there is one block); the share of its
blocks that pass is its block pass rate.  Repeats are never folded by majority vote.
The source-pair figure is the worst case either way: for a failure (a collision) a
source pair counts when **any** of its blocks does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LATE_REFERENCE = "late_reference"
"""The family whose reveal makes the query copy a key no earlier update touched."""
ALL = "all"
"""The family of a cell that counts every family."""
IDENTITY = "identity"

Unit = Literal["source pairs", "blocks", "reads"]
UNITS: dict[str, Unit] = {"pairs": "source pairs", "blocks": "blocks", "reads": "reads"}
"""The suffix of a score's column (``reveal_pairs_k``) -> its unit."""


@dataclass(frozen=True)
class Metric:
    """One score: which reads it counts and how."""

    name: str
    title: str
    column: str
    """The 0/1 column of results that says whether a read passes."""
    branches: tuple[str, ...]
    """The branches whose reads make up a block."""
    na: Literal["bounds", "exclude"]
    """``bounds``: an empty value (an NA read; a memory the exact reader cannot parse, for
    adequacy) computed as fail and as pass; ``exclude``: blocks with one left out (no
    score does that any more: a smaller n flatters)."""
    description: str
    family: str | None = None
    """Only this family's pairs count (late-reference adequacy)."""
    failure: bool = False
    """The score counts a failure (a collision): a source pair then counts when *any* of
    its blocks does, so the source-pair figure stays the worst case."""
    on_error: float | None = None
    """The value a read of outcome ``error`` (the compressor raised) takes in ``column``,
    whatever the results hold: the compressor's fault, so a failure (no adequate memory;
    a collision: no memory tells the variants apart), never a smaller n."""
    per_read: bool = True
    """Whether the score has a form in reads (a collision is a property of two memories,
    not of one read)."""


METRICS: tuple[Metric, ...] = (
    Metric(
        "current", "current accuracy", "correct", ("current",), "bounds",
        "both variants answered right before any future",
    ),
    Metric(
        "reveal", "reveal accuracy", "correct", ("reveal",), "bounds",
        "both variants answered right after the reveal future (strict)",
    ),
    Metric(
        "override", "override accuracy", "correct", ("override",), "bounds",
        "both variants answered right after the override future (the control)",
    ),
    Metric(
        "joint_J", "joint J", "correct", ("reveal", "override"), "bounds",
        "both variants answered right on both futures",
    ),
    Metric(
        "adequacy", "retained-state adequacy", "adequate", ("reveal",), "bounds",
        "E_q on the memory after the reveal future gives the gold answer, both variants "
        "(no reader involved; a memory E_q cannot parse is undetermined: bounds)",
        on_error=0.0,
    ),
    Metric(
        "late_reference_adequacy", "late-reference adequacy", "adequate", ("reveal",),
        "bounds", "adequacy on the late-reference family", family=LATE_REFERENCE,
        on_error=0.0,
    ),
    Metric(
        "collision", "collision", "collision", ("current",), "bounds",
        "the two variants' memories are byte-identical after the prefix, or the exact "
        "reader gives both one answer after the reveal future (whose right answers "
        "differ): at most one of them can be right (a compressor that raised left no "
        "memory to tell them apart: a collision)", failure=True, on_error=1.0,
        per_read=False,
    ),
)  # fmt: skip
LENIENT_METRICS: tuple[Metric, ...] = (
    Metric(
        "current_lenient", "current accuracy (lenient)", "correct_lenient", ("current",),
        "bounds", "as current accuracy, also accepting a bare {key: value} answer",
    ),
    Metric(
        "reveal_lenient", "reveal accuracy (lenient)", "correct_lenient", ("reveal",),
        "bounds", "as reveal accuracy, also accepting a bare {key: value} answer",
    ),
    Metric(
        "override_lenient", "override accuracy (lenient)", "correct_lenient", ("override",),
        "bounds", "as override accuracy, also accepting a bare {key: value} answer",
    ),
    Metric(
        "joint_J_lenient", "joint J (lenient)", "correct_lenient", ("reveal", "override"),
        "bounds", "as joint J, also accepting a bare {key: value} answer",
    ),
)  # fmt: skip
BY_NAME: dict[str, Metric] = {m.name: m for m in (*METRICS, *LENIENT_METRICS)}
COMPARED_SCORES: dict[str, str] = {
    m.name: m.title for m in METRICS if not m.failure and m.family is None
}
"""The strict scores ``audit compare --score`` compares (a pass is good, every family
counts), each with its title: current, reveal, override, joint J, adequacy."""

SCORING_VERSION = 1
"""The version of what a run's rows and scores mean, recorded in every new run's
``config.json`` (``scoring``); bump it whenever a score's definition (here) or a read's
judgement (``correct``, ``adequate``, ``collision``) changes, so ``audit compare`` never
compares runs scored two ways (exit 7).  A run made before it was recorded is version 0."""
