"""A reader's own disagreement: the same memory, the same question, read twice.

Where a memory is identical across an LLM reader's repeats (same ``memory_sha256`` for
the same pair instance, branch, condition, budget and transform), every difference
between its reads is the reader's: the noise floor of any comparison of LLM reads.
Counted in read groups (one memory read at least twice; NA reads left out): answers
that differ, scores that flip, and source pairs where some read flipped
(``pair_disagreement``, the floor of a source-pair rate such as joint J).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

GROUP_KEYS = [
    "reader",
    "pair_id",
    "variant",
    "branch",
    "condition",
    "budget",
    "transform",
    "transform_index",
    "memory_sha256",
]
"""One memory read with one question (the pair instance, branch and transform fix it)."""


@dataclass(frozen=True)
class ReaderAgreement:
    """How often one reader disagreed with itself on an identical memory."""

    reader: str
    groups: int
    """Memories read at least twice (NA reads left out)."""
    answer_differs: int
    score_differs: int
    source_pairs: int = 0
    """Source pairs with at least one memory read twice."""
    source_pairs_differ: int = 0
    """Of those, the source pairs where some read changed its score: the pairs whose
    pass or fail the reader alone could move (the unit of joint J and its comparisons)."""

    @property
    def pair_disagreement(self) -> float | None:
        return self.source_pairs_differ / self.source_pairs if self.source_pairs else None

    @property
    def answer_disagreement(self) -> float | None:
        return self.answer_differs / self.groups if self.groups else None

    @property
    def score_disagreement(self) -> float | None:
        return self.score_differs / self.groups if self.groups else None

    def summary(self) -> str:
        if not self.groups:
            return f"{self.reader}: no memory was read twice (needs --repeats 2 or more)"
        return (
            f"{self.reader}: the same memory read again gave another answer in "
            f"{self.answer_differs}/{self.groups} read groups and another score in "
            f"{self.score_differs}/{self.groups}"
        )


def reader_agreement(results: pd.DataFrame) -> list[ReaderAgreement]:
    """Per LLM reader (the exact reader left out), its disagreement with itself."""
    if results.empty or "memory_sha256" not in results.columns:
        return []
    llm = results[(results["reader"] != "exact") & (results["outcome"] != "na")]
    llm = llm[llm["memory_sha256"].notna() & (llm["memory_sha256"] != "")]
    found: list[ReaderAgreement] = []
    for reader in sorted(results.loc[results["reader"] != "exact", "reader"].unique()):
        rows = llm[llm["reader"] == reader]
        if rows.empty:
            found.append(ReaderAgreement(str(reader), 0, 0, 0))
            continue
        answers = rows["answer"].fillna("").astype(str)
        scores = rows["correct"].fillna(-1).astype(int)
        frame = pd.DataFrame(
            {"answer": answers, "score": scores, "pair": rows["source_pair_id"].astype(str)}
        )
        grouped = frame.groupby([rows[k].astype(str) for k in GROUP_KEYS], sort=False)
        sizes = grouped.size()
        distinct = grouped.nunique()
        pair_of = grouped["pair"].first()
        twice = sizes >= 2
        flipped = twice & (distinct["score"] > 1)
        found.append(
            ReaderAgreement(
                reader=str(reader),
                groups=int(twice.sum()),
                answer_differs=int((distinct.loc[twice, "answer"] > 1).sum()),
                score_differs=int(flipped.sum()),
                source_pairs=int(pair_of[twice].nunique()),
                source_pairs_differ=int(pair_of[flipped].nunique()),
            )
        )
    return found


def noise_floor(agreements: list[ReaderAgreement]) -> float | None:
    """The largest source-pair disagreement among the readers measured (None: none
    measured): a difference in a source-pair rate below it can be the reader alone."""
    rates = [a.pair_disagreement for a in agreements if a.pair_disagreement is not None]
    return max(rates) if rates else None
