"""The verdict of each condition: the answer a user came for, computed once.

Per system (reader, condition, budget), at identity over all families: **keeps**
(joint J in source pairs, 95 % Wilson interval), **beats floor?** (``_probes``:
``yes`` only against every built-in probe, ``k/N probes`` against the ones the run
had), **collides** (pairs given byte-identical memories) and **flattered?** (current
accuracy ``FLATTER_GAP`` above joint J, significantly by each condition's own exact
McNemar test); docs/reports.md says what each shows.  An archive (the ceiling) and a
probe (the floor) get no floor or flattered answer (an archive no collisions); a reader
or writer that fails its check (``_readers``) gives no verdict.  ``Verdict`` is the one
value summary.json, the console, the report and ``audit compare`` read.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._probes import FloorFinding
from audit.scoring._readers import ReaderCheck, WriterCheck
from audit.scoring._selection import _passes
from audit.scoring._stats import ALPHA, PairedTable, mcnemar_exact, wilson
from audit.scoring._table import Scores
from compressors import baseline_conditions, resolve_class

FLATTER_GAP = 0.2
"""Current accuracy this far (a share of source pairs) above joint J, significantly,
flatters a condition: right now it looks far better than what it keeps."""

VERDICT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("keeps", "keeps (joint J)"),
    ("floor", "beats floor?"),
    ("collides", "collides"),
    ("flattered", "flattered?"),
)
"""Each answer's key and its column title (console and report)."""

VERDICT_LEGEND = (
    "A source pair: two histories, one answer now, different answers after one shared "
    "future update. keeps: pairs right after both futures (joint J, 95 % interval). "
    "beats floor?: above every shortcut probe (a heuristic that never reads a record's "
    "meaning, only labels, order or the label graph; the best is the floor) under every "
    "transform. collides: pairs given one memory, or one answer after the update. "
    f"flattered?: right now on {FLATTER_GAP * 100:.0f}+ points more pairs than it keeps. "
    "Each memory holds at most the budget (B); the ceiling re-reads the whole history."
)
"""What the verdict's words mean, said before the verdicts (console and report)."""


class Verdict(BaseModel):
    """One system's answer (module docstring)."""

    reader: str
    condition: str
    budget: int
    kind: str
    """``strict`` (a contestant), ``archive`` (the ceiling) or ``probe`` (the floor)."""
    keeps_k: int
    keeps_k_high: int
    n: int
    """Joint J at identity, source pairs (NA as fail, NA as pass, of n)."""
    keeps_low: float | None
    keeps_high: float | None
    """Its 95 % Wilson interval (the envelope over NA bounds); None: n is 0."""
    floor: str
    """``yes``, ``no``, ``k/N probes``, ``no probe``, or ``-`` (an archive or a probe)."""
    floor_probe: str | None = None
    """The best probe it did not beat under the first transform it failed."""
    collided_k: int
    collided_n: int
    current_k: int
    current_n: int
    flattered: bool
    flatter_p: float | None = None
    """The Holm-corrected McNemar p of current against joint J (None: not tested)."""
    not_a_verdict: str | None = None
    raised_reads: int = 0
    """Reads at identity its compressor failed by raising (scored 0): its row says so."""

    def keeps(self) -> str:
        """``40/84 [0.37, 0.58]``; ``-`` when nothing was measured."""
        if not self.n or self.keeps_low is None or self.keeps_high is None:
            return "-"
        k = str(self.keeps_k)
        if self.keeps_k_high != self.keeps_k:
            k += f"..{self.keeps_k_high}"
        return f"{k}/{self.n} [{self.keeps_low:.2f}, {self.keeps_high:.2f}]"

    def cells(self) -> dict[str, str]:
        """Each answer's text (``VERDICT_COLUMNS``), the one text of each finding."""
        if self.not_a_verdict:  # the reader's or writer's warning says why
            return {"keeps": self.keeps(), "floor": "not a verdict", "collides": "-",
                    "flattered": "-"}  # fmt: skip
        strict = self.kind == "strict"
        flattered = f"yes: {self.current_k}/{self.current_n}" if self.flattered else "no"
        return {
            "keeps": self.keeps(),
            "floor": self.floor,
            "collides": f"{self.collided_k}/{self.collided_n}"
            if self.kind != "archive" and self.collided_n
            else "-",
            "flattered": flattered if strict else "-",
        }


def _wilson(k: int, k_high: int, n: int) -> tuple[float | None, float | None]:
    if not n:
        return None, None
    return round(wilson(k, n)[0], 4), round(wilson(k_high, n)[1], 4)


def verdicts(
    scores: Scores,
    findings: Sequence[FloorFinding],
    checks: Sequence[ReaderCheck] = (),
    writers: Sequence[WriterCheck] = (),
) -> list[Verdict]:
    """Every system's verdict, in display order (``findings``: ``floor_findings`` of
    the same scores, so the floor check runs once)."""
    failed = {(f.reader, f.condition, f.budget): f for f in findings}
    marks = {c.reader: c.verdict for c in checks if c.verdict}
    unread = {(w.condition, w.budget): w.verdict for w in writers}
    probed: dict[tuple[str, int], set[str]] = {}
    for reader, condition, budget in scores.systems:
        if scores.kinds.get(condition) == "probe":
            probed.setdefault((reader, budget), set()).add(condition)
    floor = builtin_probes()
    current, joint = _passes(scores, "current"), _passes(scores, "joint_J")
    out: list[Verdict] = []
    tests: list[tuple[int, float]] = []
    for system in scores.systems:
        reader, condition, budget = system
        cell = scores.cell(system, IDENTITY, ALL)
        if cell is None:
            continue
        found = scores.kinds.get(condition)  # a frame without kinds: all strict
        kind = found if found in ("archive", "probe") else "strict"
        k, k_high, n = (int(cell[f"joint_J_pairs_{p}"]) for p in ("k", "k_high", "n"))
        low, high = _wilson(k, k_high, n)
        finding = failed.get(system)
        here = probed.get((reader, budget), set())
        if kind != "strict":
            answer = "-"
        elif not here:
            answer = "no probe"
        elif finding is not None or not k:
            answer = "no"
        else:  # beating some probes is not beating the floor: it is every built-in one
            answer = "yes" if floor <= here else f"{len(floor & here)}/{len(floor)} probes"
        now_k, now_n = int(cell["current_pairs_k"]), int(cell["current_pairs_n"])
        verdict = Verdict(
            reader=reader, condition=condition, budget=budget, kind=kind,
            keeps_k=k, keeps_k_high=k_high, n=n, keeps_low=low, keeps_high=high,
            floor=answer, floor_probe=finding.failed[0].probe if finding else None,
            collided_k=int(cell["collision_pairs_k"]), collided_n=int(cell["collision_pairs_n"]),
            current_k=now_k, current_n=now_n, flattered=False,
            not_a_verdict=marks.get(reader) or unread.get((condition, budget)),
            raised_reads=int(cell.get("outcome_error", 0) or 0),
        )  # fmt: skip
        if (
            kind == "strict"
            and not verdict.not_a_verdict
            and n
            and now_n
            and now_k / now_n - k_high / n >= FLATTER_GAP
        ):
            tests.append((len(out), _flatter_p(current.get(system, {}), joint.get(system, {}))))
        out.append(verdict)
    for index, p in tests:  # each condition's own test: its answer is not the run's
        out[index].flatter_p = p
        out[index].flattered = p < ALPHA
    return out


def builtin_probes() -> set[str]:
    """The built-in shortcut probes: the floor a "yes" must beat, all of it."""
    return {n for n in baseline_conditions() if resolve_class(n).kind == "probe"}


def _flatter_p(now: dict[str, int], later: dict[str, int]) -> float:
    """Exact McNemar p of each source pair's current pass against its joint J pass
    (the pairs both determined)."""
    shared = now.keys() & later.keys()
    pairs = [(now[p], later[p]) for p in shared]
    return mcnemar_exact(
        PairedTable(
            both=sum(bool(a and b) for a, b in pairs),
            only_a=sum(bool(a and not b) for a, b in pairs),
            only_b=sum(bool(b and not a) for a, b in pairs),
            neither=sum(bool(not a and not b) for a, b in pairs),
        )
    )


class VerdictRow(BaseModel):
    """One shown line of a group of verdicts (one reader and budget)."""

    label: str
    """The condition, or ``ceiling: NAME`` / ``floor: NAME``."""
    cells: dict[str, str]
    remark: str = ""
    """For the ceiling and the floor: what the row is (``(best of 3 archives)``)."""
    verdict: Verdict


def best_of(group: Sequence[Verdict], kind: str) -> list[Verdict]:
    """The best of ``kind`` among one reader's and budget's verdicts by joint J, ties
    included (the ceiling of the archives, the floor of the probes); none with no pair."""
    found = [v for v in group if v.kind == kind and v.n]
    top = max((v.keeps_k for v in found), default=None)
    return [v for v in found if v.keeps_k == top]


def verdict_rows(group: Sequence[Verdict]) -> list[VerdictRow]:
    """What a reader of one reader and budget is shown: a line per strict condition,
    then the ceiling (the best archive by joint J) and the floor (the best probe), each
    saying what it is; every condition when the run has no strict one."""
    strict = [v for v in group if v.kind == "strict"]
    if not strict:
        return [VerdictRow(label=v.condition, cells=v.cells(), verdict=v) for v in group]
    rows = [
        VerdictRow(label=v.condition + (" (raised)" if v.raised_reads else ""), cells=v.cells(),
                   verdict=v)
        for v in strict
    ]  # fmt: skip
    for kind, word in (("archive", "ceiling"), ("probe", "floor")):
        found = [v for v in group if v.kind == kind and v.n]
        if not found:
            continue
        best = best_of(found, kind)
        remark = f"(best of {len(found)} {kind}s" if len(found) > 1 else f"(the only {kind}"
        remark += f", a tie of {len(best)})" if len(best) > 1 else ")"
        cells = {key: "-" for key, _ in VERDICT_COLUMNS} | {"keeps": best[0].keeps()}
        rows.append(
            VerdictRow(label=f"{word}: {best[0].condition}", cells=cells, remark=remark,
                       verdict=best[0])
        )  # fmt: skip
    return rows
