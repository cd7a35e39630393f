"""``build_compare``: several stored runs compared on their shared source pairs.

Runs are labelled A, B, C, ... (A, the first, is the baseline); a condition is one
system whatever its label (``ConditionSpec.system``).  docs/reports.md says which
systems are compared with which, in what order the rows come, and what the gate
(``audit compare --fail-on-regression``, ``Gate``) fails or refuses.
"""

from __future__ import annotations

import hashlib
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pandas as pd

from audit.reportdata._comparisons import (
    COMPARISON_COLUMNS,
    NOISE_COLUMNS,
    comparison_row,
    forest_chart,
    with_holm,
)
from audit.reportdata._context import Options, pair_bounds, proportion_columns
from audit.reportdata._glance import integrity_alert
from audit.rundir import RunData, load_source_pairs
from audit.scoring import (
    COMPARED_SCORES,
    VERDICT_COLUMNS,
    PairedTable,
    Verdict,
    detectable_difference,
    floor_findings,
    paired_comparison,
    reader_agreement,
    reader_checks,
    score_results,
    sentence,
    tango_paired,
    unreadable,
    verdicts,
    writer_checks,
)
from compressors import UnknownCompressorError, parse_spec
from reports import (
    Alert,
    Block,
    Bullets,
    Code,
    Column,
    Document,
    Facts,
    Flag,
    Inline,
    Paragraph,
    Section,
    Strong,
    Table,
    Text,
)

VERDICT_COLUMN = Column(
    "verdict",
    "not a verdict?",
    "text",
    help="the reader cannot read these histories (its check on full), or no valid reader "
    "can read the writer's memories: this row says nothing about the memory",
)
RunSystem = tuple[str, str, str, int]
"""(run label, reader, condition, budget)."""

EXIT_REGRESSION = 6
"""Exit status of ``audit compare --fail-on-regression`` when a later run's system is
worse than the baseline's by the gate's rule (``Gate``)."""
EXIT_NOT_COMPARABLE = 7
"""Exit status of ``audit compare --fail-on-regression`` for runs that cannot be
compared: other pairs, transforms or scoring version, or nothing paired."""


@dataclass(frozen=True)
class Gate:
    """The answer of ``audit compare --fail-on-regression`` (docs/reports.md, "A gate
    for CI"): refused, failed or passed, and why."""

    rule: str
    """What fails a later run's system, in words (``... is {rule}``)."""
    refusals: tuple[str, ...] = ()
    """Why the runs cannot be compared: a verdict on them would mean nothing."""
    regressions: tuple[str, ...] = ()
    """Each comparison the rule fails, then each later run's compressor that raised (it
    has not been audited), in one line."""
    judged: int = 0
    """Comparisons of a later run's system the rule was applied to."""
    raised: int = 0
    """How many of ``regressions`` are compressors that raised, not comparisons."""

    def failed(self) -> str:
        """Why the gate failed, in one sentence (the terminal's and the page's)."""
        worse = len(self.regressions) - self.raised
        parts = [
            f"{worse} of {self.judged} compared system{'' if self.judged == 1 else 's'} of a "
            f"later run {'is' if worse == 1 else 'are'} {self.rule}"
        ] if worse else []  # fmt: skip
        if self.raised:
            many = "s" if self.raised > 1 else ""
            parts.append(f"{self.raised} compressor{many} of a later run raised (not audited)")
        return " and ".join(parts) + ":"

    @property
    def status(self) -> int:
        """The exit status: 7 refused, 6 a regression, 0 passed."""
        if self.refusals:
            return EXIT_NOT_COMPARABLE
        return EXIT_REGRESSION if self.regressions else 0


@dataclass(frozen=True)
class Comparison:
    """``build_compare``'s answer: the document, and the gate's verdict on it."""

    document: Document
    gate: Gate


class Match(StrEnum):
    """Why two systems are compared (``compare.csv``'s ``match``)."""

    ONLY = "only in one run"
    """A system in one run alone, against the other run's best strict condition."""
    REFERENCE = "--reference"
    SAME = "the same condition"


@dataclass(frozen=True)
class Planned:
    """One comparison: ``system`` minus ``against``, and why these two."""

    against: RunSystem
    system: RunSystem
    match: Match
    why: str
    group: int
    """Display order: 0 the later runs' own systems, 1 the baseline's own, 2 against
    ``--reference``, 3 the same condition (then split: results differ or not)."""


def run_labels(count: int) -> list[str]:
    """Short run labels, A, B, ... (a timestamped directory name made every line wrap)."""
    letters = string.ascii_uppercase
    return [letters[i] if i < len(letters) else f"R{i + 1}" for i in range(count)]


def condition_systems(run: RunData) -> dict[str, str]:
    """Each condition label of a run -> its system (``ConditionSpec.system``), from the
    plan (both stages); a label the plan does not name is parsed as a spec."""
    plan = run.plan
    specs = [*plan.conditions, *(plan.llm.conditions if plan.llm else [])] if plan else []
    named = {spec.label: spec.system for spec in specs}
    labels = dict.fromkeys([*run.conditions, *run.results["condition"].astype(str)])
    return {label: named.get(label) or system_name(label) for label in labels}


def unknown_names(runs: Sequence[RunData], names: Sequence[str]) -> list[str]:
    """The names (``--only``, ``--reference``) that are no condition of any run, by
    label or by system."""
    known: set[str] = set()
    for run in runs:
        systems = condition_systems(run)
        known |= set(systems) | set(systems.values())
    return [name for name in names if name not in known and system_name(name) not in known]


def _power_of(row: dict[str, Any], comparisons: int) -> dict[str, Any]:
    """The minimum detectable difference of one comparison among ``comparisons``."""
    table = PairedTable(row["both_pass"], row["only_a"], row["only_b"], row["neither"])
    detectable = detectable_difference(table, comparisons=comparisons)
    return {
        "min_detectable": detectable,
        "underpowered": bool(math.isnan(detectable) or abs(row["delta"]) < detectable),
    }


def pair_identities(run: RunData) -> tuple[dict[str, str], str | None]:
    """Each source pair id of a run -> the sha256 of the pair itself, so runs are paired
    on the same histories, not on ids that different seeds or files reuse; and a note
    when the pairs cannot be rebuilt (then ids stand in, only within one dataset)."""
    source = load_source_pairs(run)
    if source.note is not None:
        return {}, source.note
    return {
        pid: hashlib.sha256(pair.to_json().encode()).hexdigest()
        for pid, pair in source.pairs.items()
    }, None


def not_comparable(runs: Sequence[RunData]) -> list[str]:
    """Why a later run cannot be compared with the first (the baseline): other pairs,
    other transforms or another scoring version.  ``audit compare`` says so loudly and,
    with ``--fail-on-regression``, refuses them (exit 7)."""
    labels = run_labels(len(runs))
    first, base = runs[0], labels[0]
    found = []
    for label, run in zip(labels[1:], runs[1:], strict=True):
        mine, theirs = first.raw_config.get("pairs_sha256"), run.raw_config.get("pairs_sha256")
        if mine is None or mine != theirs:
            found.append(
                f"{base} and {label} were made on other pair sets (pairs sha256 "
                f"{str(mine)[:12]} and {str(theirs)[:12]}): give both runs the same --preset "
                "or --pairs file"
            )
        if _transforms(first) != _transforms(run):
            found.append(
                f"{base} and {label} ran other transforms ({' + '.join(_transforms(first))} "
                f"and {' + '.join(_transforms(run))}): give both the same --transforms"
            )
        if first.scoring != run.scoring:
            found.append(
                f"{base} and {label} were scored under other scoring versions "
                f"({first.scoring} and {run.scoring}; 0: made before versions were recorded): "
                "their scores do not mean the same; run the older one again with this "
                "memory-audit"
            )
    return found


def _transforms(run: RunData) -> list[str]:
    """The transforms a run planned (both stages), as written, sorted."""
    plan = run.plan
    if plan is None:
        listed = run.raw_config.get("transforms")
        return sorted(map(str, listed)) if isinstance(listed, list) else []
    llm = [f"{t} (LLM stage)" for t in plan.llm.transforms] if plan.llm else []
    return sorted({*map(str, plan.transforms), *llm})


def build_compare(runs: Sequence[RunData], options: Options | None = None) -> Comparison:
    """Systems across runs on the source pairs they share (the same histories, by
    content): paired deltas of a score (joint J unless ``options.score``) at identity,
    every reader with every reader; and the gate's verdict on them."""
    options = options or Options()
    score = options.score
    title = COMPARED_SCORES[score]
    labels = run_labels(len(runs))
    values: dict[RunSystem, dict[str, float]] = {}
    bounds: dict[RunSystem, dict[str, tuple[int, int]]] = {}
    families: dict[str, str] = {}
    order: list[RunSystem] = []
    notes: list[str] = []
    no_verdict: dict[RunSystem, str] = {}
    """The "not a verdict" mark of a system (``scoring._readers``)."""
    answers: dict[RunSystem, Verdict] = {}
    """Each system's verdict in its own run (``scoring._verdicts``)."""
    kinds: dict[str, dict[str, str]] = {}
    systems_of = {lab: condition_systems(run) for lab, run in zip(labels, runs, strict=True)}
    digests = {
        lab: run.raw_config.get("pairs_sha256") for lab, run in zip(labels, runs, strict=True)
    }
    one_dataset = len(set(digests.values())) == 1 and None not in digests.values()
    for label, run in zip(labels, runs, strict=True):
        scores = score_results(run.results, run.conditions)
        kinds[label] = dict(scores.kinds)
        identities, note = pair_identities(run)
        if note is not None:
            if not one_dataset:
                notes.append(
                    f"{label}: left out: its pairs cannot be rebuilt ({note}), so which of "
                    "its pairs are the same histories as another run's is unknown"
                )
                continue
            notes.append(f"{label}: pairs not rebuilt ({note}); paired by id within one dataset")
        for pid, family in scores.families.items():
            families.setdefault(identities.get(pid, pid), family)
        checks = reader_checks(scores)
        unread = writer_checks(scores, checks)
        writers = {(w.condition, w.budget): w.verdict for w in unread}
        findings = floor_findings(scores, unreadable(checks))
        for verdict in verdicts(scores, findings, checks, unread):  # the report's verdicts
            answers[(label, verdict.reader, verdict.condition, verdict.budget)] = verdict
        for check in checks:
            if check.verdict:
                notes.append(f"{label}: reader {check.reader}: {check.verdict} ({check.text()})")
        marks = {c.reader: c.verdict for c in checks if c.verdict}
        for reader, condition, budget in scores.systems:
            mark = marks.get(reader) or writers.get((condition, budget))
            if mark:
                no_verdict[(label, reader, condition, budget)] = mark
        per_system = pair_bounds(scores, score)  # values as pair_values gives them
        for system in scores.systems:
            if system in per_system:
                key = (label, *system)
                bounds[key] = {identities.get(p, p): b for p, b in per_system[system].items()}
                values[key] = {
                    p: float(lo) if lo == hi else math.nan for p, (lo, hi) in bounds[key].items()
                }
                order.append(key)
    included = list(dict.fromkeys(key[0] for key in order)) or labels
    shared = (
        set.intersection(
            *(set().union(*(set(v) for k, v in values.items() if k[0] == lab)) for lab in included)
        )
        if values
        else set()
    )
    context = _Pairing(
        order, values, shared, systems_of, kinds, no_verdict, runs, labels, options.only
    )
    systems = []
    for key in order:
        label, reader, condition, budget = key
        shared_bounds = [bounds[key][p] for p in sorted(shared) if p in bounds[key]]
        row = {"run": label, "reader": reader, "condition": condition, "budget": budget,
               "system": systems_of[label].get(condition, condition),
               "selected": context.selected(key), "verdict": no_verdict.get(key, "")}  # fmt: skip
        answer = answers.get(key)
        cells = answer.cells() if answer is not None else {}
        row.update({f"own_{k}": cells.get(k, "-") for k, _ in VERDICT_COLUMNS})
        counts = {
            "shared_k": sum(lo for lo, _ in shared_bounds),
            "shared_k_high": sum(hi for _, hi in shared_bounds),
            "shared_n": len(shared_bounds),
        }  # the same counting as the report's: NA gives bounds, never a smaller n
        row.update(proportion_columns(score, counts, "shared"))
        systems.append(row)
    baseline = included[0]
    planned = context.plan(baseline, options.reference) if shared else []
    rows: list[dict[str, Any]] = []
    for plan in planned:  # no shared pair: nothing to compare, no test
        ref, key = plan.against, plan.system
        result = paired_comparison(
            {p: v for p, v in values[ref].items() if p in shared},
            {p: v for p, v in values[key].items() if p in shared},
            families,
            test=options.test,
        )
        row = comparison_row(key[1], key[3], _name(ref), _name(key), result)
        row.update(
            run_a=ref[0],
            run_b=key[0],
            condition_a=ref[2],
            condition_b=key[2],
            reader_a=ref[1],
            reader_b=key[1],
            label=f"{row['b']} minus {row['a']}",
            match=plan.match.value,
            why=plan.why,
            differs=bool(result.table.only_a or result.table.only_b),
            group=plan.group if plan.match != Match.SAME else 3,
            verdict=no_verdict.get(ref) or no_verdict.get(key) or "",
            gated=key[0] != baseline and kinds[key[0]].get(key[2], "strict") == "strict",
        )
        if plan.match == Match.SAME and not row["differs"] and not context.changed(ref, key):
            row["group"] = SAME_GROUP  # the same result on every shared pair: one line for all
        rows.append(row)
    rows.sort(key=lambda row: row["group"])  # stable: plan order within a group
    floors = {lab: _reader_floors(run) for lab, run in zip(labels, runs, strict=True)}
    tested = sum(1 for row in rows if row["differs"])
    for row in rows:  # alpha / m: the minimum detectable difference over the tested rows
        row.update(_power_of(row, max(1, tested)))
        row.update(_noise_of(row, floors))
    comparisons = _with_holm(pd.DataFrame(rows))
    system_frame, refused = pd.DataFrame(systems), not_comparable(runs)
    gate = _gate(
        comparisons, refused, baseline, labels, options, bool(shared),
        _unvouched(system_frame, comparisons, baseline, kinds, options, labels, runs),
    )  # fmt: skip
    if not one_dataset:
        notes.append(
            "the runs were made on different pair sets: they are compared on the pairs whose "
            "histories are identical (matched by content, not by id)"
        )
    notes.append(
        f"{len(shared)} source pairs shared by all runs; every rate and test here uses only them"
    )
    left = uncompared(system_frame, comparisons, baseline)
    unpaired: list[Inline] = []
    if left:  # names are data: pieces of text, never read for backquotes
        unpaired = [
            f"not compared (the baseline {baseline} has no system to pair them with): "
            + "; ".join(left)
        ]
        if not options.reference:
            unpaired += ["; ", Code("--reference CONDITION"), " compares every system with "
                         "one condition of the baseline"]  # fmt: skip
    method = (
        f"baseline: {baseline}; each system of another run against the baseline's "
        + (f"{options.reference!r}" if options.reference else "same condition")
        + " at the same budget, read by every reader of the baseline (an LLM backend against "
        "another and against the exact reader)"
        + (
            ""
            if options.reference
            else "; a condition in one run only, against the other run's best strict "
            f"condition by {title} on the shared pairs (chosen from the data: post hoc)"
        )
        + f"; unit: the source pair shared by all runs (passes when {title} passes on every "
        "block of it at identity); exact McNemar on the discordant pairs, Holm-corrected "
        "across every comparison in this table that has a discordant pair (one without "
        "cannot reach any level, Tarone's rule)"
        + (f", --only {', '.join(options.only)}" if options.only else "")
        + ("; mid-p McNemar in place of the exact test" if options.test == "mid-p" else "")
        + "; delta intervals: Newcombe's for paired proportions; underpowered: the observed "
        "difference is below what these pairs detect with 80 % power (a miss is not "
        "evidence of no difference; a significant one is real but its size likely "
        "overstated)"
    )
    run_rows = [
        {
            "label": lab,
            "name": run.label,
            "path": str(run.path),
            "created": run.created or "",
            "conditions": ", ".join(run.conditions),
            "budgets": ", ".join(map(str, run.plan.budgets)) if run.plan else "",
            "readers": ", ".join(dict.fromkeys(run.results["reader"].astype(str))),
            "pairs_sha256": (digests[lab] or "")[:12],
            "n_source_pairs": int(run.results["source_pair_id"].nunique()),
            "baseline": lab == baseline,
        }
        for lab, run in zip(labels, runs, strict=True)
    ]
    notes += _noise_notes(floors, rows)
    empty = (
        None
        if shared
        else "No source pair is shared by every run: nothing to compare (a paired test needs "
        "the same histories in both runs)."
    )
    alerts = [block for run in runs for block in integrity_alert(run)]
    if refused:  # said first and loudly, with or without the gate
        alerts.append(Alert("warn", [Flag("Not comparable")], "", list(refused)))
    if options.gate:
        alerts.append(_gate_block(gate))
    document = _document(
        pd.DataFrame(run_rows), system_frame, comparisons,
        [*notes, *([unpaired] if unpaired else [])], method, alerts, empty, score,
    )  # fmt: skip
    return Comparison(document, gate)


def _unvouched(
    systems: pd.DataFrame,
    comparisons: pd.DataFrame,
    baseline: str,
    kinds: dict[str, dict[str, str]],
    options: Options,
    labels: list[str],
    runs: Sequence[RunData],
) -> tuple[list[str], list[str]]:
    """What the gate cannot vouch for, found by an adversary: (refusals) a strict
    system of a later run compared with nothing, and a --reference that is a probe or
    an archive (a later system "not worse than a probe" passed whatever it lost);
    (failures) a later run whose compressor raised, which has not been audited."""
    refusals: list[str] = []
    reference = options.reference
    if reference is not None and kinds.get(baseline, {}).get(reference, "strict") != "strict":
        refusals.append(
            f"--reference {reference} is a {kinds[baseline][reference]} of the baseline: "
            "the gate judges a later run's systems against a strict condition"
        )
    for (run, reader, budget), names in _unpaired(systems, comparisons, baseline).items():
        strict = [n for n in names if kinds.get(run, {}).get(n, "strict") == "strict"]
        if strict:
            refusals.append(
                f"{run} ({reader}, {budget} B): {', '.join(strict)} compared with nothing, "
                "so the gate cannot vouch for it (--reference CONDITION names a condition of "
                "the baseline to compare it with)"
            )
    failures: list[str] = []
    for label, later in zip(labels, runs, strict=True):
        if label == baseline or "outcome" not in later.results:
            continue
        raised = later.results[later.results["outcome"].astype(str) == "error"]
        for condition, reads in raised.groupby("condition", sort=False).size().items():
            failures.append(
                f"{label}: {condition} raised: {reads} reads failed (its run.log): a "
                "compressor that raises has not been audited"
            )
    return refusals, failures


def _gate(
    comparisons: pd.DataFrame,
    refused: list[str],
    baseline: str,
    labels: list[str],
    options: Options,
    shared: bool,
    unvouched: tuple[list[str], list[str]],
) -> Gate:
    """The gate's verdict, with its ``worse`` column set on ``comparisons`` in place:
    each comparison of a later run's strict system judged by the rule (the baseline's
    own systems against a later run's best are not a later run's regression, a probe
    or an archive is no contestant, and a row that is not a verdict is no evidence)."""
    title = COMPARED_SCORES[options.score]
    margin = options.margin
    if margin is None:
        rule = (
            f"significantly worse in {title} than the baseline's system it is compared "
            f"with ({options.test} McNemar on the shared source pairs, Holm p < 0.05)"
        )
    else:
        rule = (
            f"possibly behind the baseline's system it is compared with by more than "
            f"{margin:g} in {title} (the upper end of Tango's 95 % interval of the "
            "baseline's rate minus its rate: non-inferiority not shown)"
        )
    refusals = refused + unvouched[0]
    if baseline != labels[0]:
        refusals.append(f"the baseline {labels[0]}'s pairs cannot be rebuilt: see the notes")
    if comparisons.empty:
        if not refusals:
            refusals.append(
                "nothing was paired: the runs share no source pair"
                if not shared
                else f"no system of a later run meets one of the baseline {baseline}"
            )
        return Gate(rule, tuple(refusals))
    judged = comparisons["gated"] & comparisons["verdict"].eq("")
    worse: list[bool] = []
    leads: list[float] = []
    for judge, (_, row) in zip(judged.tolist(), comparisons.iterrows(), strict=True):
        table = PairedTable(row["both_pass"], row["only_a"], row["only_b"], row["neither"])
        lead = -tango_paired(table)[0] if judge and margin is not None else math.nan
        leads.append(lead)
        if margin is None:
            worse.append(judge and bool(row["significant"]) and float(row["delta"]) < 0)
        else:  # nan (no pair determined in both): not shown
            worse.append(judge and not lead <= margin)
    if margin is not None:
        comparisons["baseline_lead_high"] = leads
    comparisons["worse"] = worse
    if not judged.any() and not refusals:
        refusals.append(
            f"no strict system of a later run was compared with one of the baseline "
            f"{baseline} (a probe or an archive is not judged, and a row that is not a "
            "verdict is no evidence)"
        )
    lines: list[str] = []
    for _, row in comparisons[comparisons["worse"]].iterrows():
        budget = f" at {int(row['budget'])} B" if comparisons["budget"].nunique() > 1 else ""
        if margin is None:
            lines.append(
                f"{row['b']} against {row['a']}{budget}: {float(row['delta']):+.2f} "
                f"[{float(row['delta_low']):+.2f}, {float(row['delta_high']):+.2f}], "
                f"Holm p{_p(float(row['p_holm']))}"
            )
        else:
            lead = float(row["baseline_lead_high"])
            shown = (
                "no pair was determined in both"
                if math.isnan(lead)
                else f"the baseline may lead by up to {lead:.3f}"
            )
            lines.append(
                f"{row['b']} against {row['a']}{budget}: {float(row['delta']):+.2f}; {shown} "
                f"(margin {margin:g})"
            )
    raised = unvouched[1]
    return Gate(rule, tuple(refusals), (*lines, *raised), int(judged.sum()), len(raised))


def _p(p: float) -> str:
    """``=0.012``, ``<0.001`` or `` n/a`` after ``p``."""
    return " n/a" if math.isnan(p) else "<0.001" if p < 0.001 else f"={p:.3f}"


def _gate_block(gate: Gate) -> Block:
    """The gate's answer, first on the page (``--fail-on-regression``)."""
    if gate.refusals:
        refused = f"Gate: refused (exit {gate.status}): the runs cannot be compared"
        return Alert("warn", [Flag(refused)], "", list(gate.refusals))
    if gate.regressions:
        failed = [Flag(f"Gate: failed (exit {gate.status})")]
        return Alert("warn", failed, gate.failed(), list(gate.regressions))
    passed = f"No system of a later run ({gate.judged} compared) is {gate.rule}."
    return Alert("ok", "Gate: passed", passed)


def _name(key: RunSystem) -> str:
    """``B: newest_first``, with its reader where that is an LLM."""
    return f"{key[0]}: {key[2]}" + ("" if key[1] == "exact" else f" ({key[1]})")


def _with_holm(table: pd.DataFrame) -> pd.DataFrame:
    """Holm over the comparisons with a discordant pair; one without has McNemar p 1 and
    cannot reach any level (Tarone), so counting it would only weaken the others."""
    if table.empty:
        return table
    tested = with_holm(table[table["differs"]].copy())
    untested = table[~table["differs"]].copy()
    untested["p_holm"] = untested["p_value"]
    untested["significant"] = False
    untested["power_reading"] = ""
    return pd.concat([tested, untested]).loc[table.index]


@dataclass
class _Pairing:
    """What choosing each comparison needs: every system, its pairs and its run's."""

    order: list[RunSystem]
    values: dict[RunSystem, dict[str, float]]
    shared: set[str]
    systems_of: dict[str, dict[str, str]]
    kinds: dict[str, dict[str, str]]
    no_verdict: dict[RunSystem, str]
    runs: Sequence[RunData]
    labels: list[str]
    only: tuple[str, ...] = ()

    def identity(self, key: RunSystem) -> tuple[str, int]:
        """(system, budget): what makes two runs' conditions one."""
        return self.systems_of[key[0]].get(key[2], key[2]), key[3]

    def passes(self, key: RunSystem) -> float:
        found = [v for p, v in self.values[key].items() if p in self.shared and v == v]
        return float(sum(found))

    def best_strict(self, label: str, reader: str, budget: int) -> RunSystem | None:
        """A run's best strict condition by the compared score on the shared pairs at a
        reader and budget (the first listed of a tie); None: it has none that gives a verdict."""
        strict = [
            key
            for key in self.order
            if (key[0], key[1], key[3]) == (label, reader, budget)
            and self.kinds[label].get(key[2], "strict") == "strict"
            and key not in self.no_verdict
        ]
        return max(strict, key=self.passes) if strict else None

    def changed(self, first: RunSystem, second: RunSystem) -> str:
        """``frontier@1 -> frontier@2`` where the two runs ran other versions of it."""
        versions = []
        for key in (first, second):
            plan = self.runs[self.labels.index(key[0])].plan
            versions.append(plan.compressor_versions.get(key[2], "") if plan else "")
        return f"{versions[0]} -> {versions[1]}" if all(versions) and len(set(versions)) > 1 else ""

    def selected(self, key: RunSystem) -> bool:
        """Whether ``--only`` names the system (by label or spec); True without it."""
        system = self.identity(key)[0]
        return not self.only or any(
            name == key[2] or system_name(name) == system for name in self.only
        )

    def plan(self, baseline: str, reference: str | None) -> list[Planned]:
        """Every comparison of a selected system, in display order (``Planned.group``)."""
        later = [key for key in self.order if key[0] != baseline]
        first = [key for key in self.order if key[0] == baseline]
        out: list[Planned] = []
        reference = None if reference is None else system_name(reference)
        for key in later:
            if not self.selected(key):
                continue
            if reference is not None:  # every later system against that one
                for ref in first:
                    if ref[3] == key[3] and reference in (ref[2], self.identity(ref)[0]):
                        out.append(Planned(ref, key, Match.REFERENCE, f"--reference {ref[2]}", 2))
                continue
            partners = [ref for ref in first if self.identity(ref) == self.identity(key)]
            for ref in partners:
                version = self.changed(ref, key)
                why = "the same condition" + (f"; versions {version}" if version else "")
                out.append(Planned(ref, key, Match.SAME, why, 3))
            if not partners:
                out += self._against_best(key, baseline, 0)
        if reference is None:  # the baseline's own strict, against each later run's best
            for key in first:
                # (its ceiling and floor are no contestants: compared with a later run
                # that lacks them, they only added comparisons to the Holm family)
                if not self.selected(key) or self.kinds[key[0]].get(key[2], "strict") != "strict":
                    continue
                for label in dict.fromkeys(other[0] for other in later):
                    if not any(
                        self.identity(other) == self.identity(key)
                        for other in later
                        if other[0] == label
                    ):
                        out += self._against_best(key, label, 1)
        unique: dict[frozenset[RunSystem], Planned] = {}  # each two once, the first by group:
        for plan in sorted(out, key=lambda plan: plan.group):  # B's own against A's best,
            unique.setdefault(frozenset((plan.against, plan.system)), plan)  # not A's against B's
        return list(unique.values())

    def _against_best(self, key: RunSystem, other: str, group: int) -> list[Planned]:
        """A system in one run only, against the other run's best strict condition at
        its budget, read by each of that run's readers."""
        readers = dict.fromkeys(k[1] for k in self.order if k[0] == other and k[3] == key[3])
        out = []
        for reader in readers:
            best = self.best_strict(other, reader, key[3])
            if best is not None:
                why = f"only in {key[0]}, against {other}'s best strict"
                out.append(Planned(best, key, Match.ONLY, why, group))
        return out


def system_name(condition: str) -> str:
    """A condition label as a system (``ConditionSpec.system``): the budget is a column
    of its own, so ``bm25:budget=1200`` at 1200 B is ``bm25`` at 1200 B."""
    try:
        return parse_spec(condition).system
    except UnknownCompressorError:
        return condition


def _unpaired(
    systems: pd.DataFrame, comparisons: pd.DataFrame, baseline: str
) -> dict[tuple[str, str, int], list[str]]:
    """(later run, reader, budget) -> the conditions there that no comparison pairs with
    the baseline."""
    if systems.empty:
        return {}
    keys = ["run_b", "condition_b", "budget", "reader_b"]
    paired = (
        set() if comparisons.empty else set(comparisons[keys].itertuples(index=False, name=None))
    )
    groups: dict[tuple[str, str, int], list[str]] = {}
    selected = systems["selected"] if "selected" in systems else [True] * len(systems)
    for run, condition, budget, reader, wanted in zip(
        systems["run"], systems["condition"], systems["budget"], systems["reader"], selected,
        strict=True,
    ):  # fmt: skip
        if wanted and run != baseline and (run, condition, budget, reader) not in paired:
            groups.setdefault((str(run), str(reader), int(budget)), []).append(str(condition))
    return groups


def uncompared(systems: pd.DataFrame, comparisons: pd.DataFrame, baseline: str) -> list[str]:
    """The systems of later runs that no comparison pairs with the baseline, one entry
    per run, reader and budget: ``b (exact, 1200 B): full, bm25``."""
    return [
        f"{run} ({reader}, {budget} B): {', '.join(names)}"
        for (run, reader, budget), names in _unpaired(systems, comparisons, baseline).items()
    ]


def _reader_floors(run: RunData) -> dict[str, float | None]:
    """Per reader of a run: the share of source pairs whose pass the reader alone moved
    (0 for the exact reader, a function; None: no memory was read twice)."""
    floors: dict[str, float | None] = {"exact": 0.0}
    for agreement in reader_agreement(run.results):
        floors[agreement.reader] = agreement.pair_disagreement
    return floors


def _noise_of(row: dict[str, Any], floors: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The larger noise floor of the comparison's two readers, and whether the
    difference is within it (a difference at or below it can be the readers alone; with
    a floor of 0 nothing is)."""
    first = floors.get(row["run_a"], {}).get(str(row["reader_a"]))
    second = floors.get(row["run_b"], {}).get(str(row["reader_b"]))
    if first is None or second is None:
        return {"noise_floor": None, "within_noise": None}
    floor = max(first, second)
    delta = row.get("delta")
    # a reader that never changed its answer (the exact reader, floor 0) has no noise
    # for a difference to hide in: even a zero difference is "none", not "within noise"
    within = None if delta is None or pd.isna(delta) else bool(floor > 0 and abs(delta) <= floor)
    return {"noise_floor": floor, "within_noise": within}


def _noise_notes(
    floors: dict[str, dict[str, float | None]], rows: list[dict[str, Any]]
) -> list[str]:
    notes = []
    unknown = sorted(
        {f"{lab}: {reader}" for lab, by in floors.items() for reader, v in by.items() if v is None}
    )
    if unknown:
        notes.append(
            "noise floor unknown for "
            + ", ".join(unknown)
            + " (no memory read twice: run with --repeats 2 or more); a difference between "
            "their runs may be the reader's own nondeterminism"
        )
    within = sum(1 for r in rows if r.get("within_noise"))
    if within:
        notes.append(
            f"{within} difference(s) at or below the readers' noise floor (the share of "
            "source pairs whose pass the same reader changed on re-reading an identical "
            "memory): not distinguishable from reader noise"
        )
    return notes


SAME_GROUP = 4
"""``group`` of a comparison whose two systems passed the same shared pairs."""


def answer_text(comparisons: pd.DataFrame, score: str = "joint_J") -> str:
    """The comparison's answer in one sentence (compare.html's first line and the
    terminal's): how many systems were compared, how many differ significantly."""
    if comparisons.empty:
        return "Nothing was compared."
    shown = comparisons[comparisons["group"] < SAME_GROUP]
    same = len(comparisons) - len(shown)
    significant = int(shown["significant"].sum())
    text = (
        f"{len(shown)} comparison{'' if len(shown) == 1 else 's'} of {COMPARED_SCORES[score]} "
        f"on the shared source pairs: {significant or 'none'} significant after Holm (p < 0.05)"
    )
    if same:
        text += f"; {same} the same in both runs on every shared source pair"
    return text + "."


def same_text(comparisons: pd.DataFrame) -> str:
    """The systems whose result is the same on every shared pair, named once each."""
    if comparisons.empty:
        return ""
    same = comparisons[comparisons["group"] == SAME_GROUP]
    if same.empty:
        return ""
    names = list(
        dict.fromkeys(
            str(row["condition_b"])
            + ("" if row["reader_b"] == "exact" else f" ({row['reader_b']})")
            + (f" [{row['verdict']}]" if row["verdict"] else "")
            for _, row in same.iterrows()
        )
    )
    runs = " and ".join(dict.fromkeys([*same["run_a"].astype(str), *same["run_b"].astype(str)]))
    return (
        f"The same in {runs} (no shared source pair differs): {', '.join(names)}"
        + (f" ({len(names)} conditions)" if len(names) > 3 else "")
        + "; compare.csv has their rows."
    )


def _differences(comparisons: pd.DataFrame, several: bool, score: str) -> list[Block]:
    """compare.html's first table: every comparison but the identical ones, in order."""
    shown = comparisons[comparisons["group"] < SAME_GROUP].copy()
    if shown.empty:
        return []
    shown["joint_b_k"] = shown["both_pass"] + shown["only_b"]
    shown["joint_a_k"] = shown["both_pass"] + shown["only_a"]
    shown["joint_a_n"] = shown["joint_b_n"] = shown["n_pairs"]
    columns = [
        Column("b", "compared", "label"),
        Column("a", "against", "label"),
        Column("why", "why these two", "text"),
        *([Column("budget", "budget (B)", "integer")] if several else []),
        Column("joint_b", f"compared: {COMPARED_SCORES[score]} (shared source pairs)", "count"),
        Column("joint_a", f"against: {COMPARED_SCORES[score]}", "count"),
        Column(
            "delta",
            "difference (compared - against)",
            "signed",
            interval=("delta_low", "delta_high"),
            help=f"difference in {COMPARED_SCORES[score]} pass rate, with a 95 % Newcombe "
            "interval for paired data",
        ),
        *(c for c in COMPARISON_COLUMNS if c.key in ("p_holm", "significant", "power_reading")),
        *([VERDICT_COLUMN] if shown["verdict"].ne("").any() else []),
    ]
    return [Table("differences-table", columns, shown)]


def _document(
    runs: pd.DataFrame,
    systems: pd.DataFrame,
    comparisons: pd.DataFrame,
    notes: Sequence[Text],
    method: str,
    alerts: Sequence[Block] = (),
    empty: str | None = None,
    score: str = "joint_J",
) -> Document:
    """The answer first (which systems differ, by how much, significant or not), then
    the detail folded: every comparison, every system, the runs."""
    several = bool(len(systems)) and systems["budget"].nunique() > 1
    llm = bool(len(systems)) and systems["reader"].ne("exact").any()
    run_columns = [
        Column("label", "run", "label"),
        Column("baseline", "", "flag", flag_text="baseline"),
        Column("created", "created", "text"),
        Column("conditions", "conditions", "text"),
        Column("budgets", "budgets (B)", "text"),
        Column("readers", "readers", "text"),
        Column("n_source_pairs", "source pairs", "integer"),
        Column("pairs_sha256", "pairs sha256", "text"),
    ]
    system_columns = [
        Column("run", "run", "label"),
        Column("condition", "condition", "label"),
        Column("budget", "budget (B)", "integer"),
        *([Column("reader", "reader", "label")] if llm else []),
        Column(score, f"{COMPARED_SCORES[score]} (shared source pairs)", "proportion"),
        *(
            Column(
                f"own_{key}",
                f"{title}, in its run",
                "text",
                help="the system's verdict on every source pair of its own run "
                "(audit report's first table)",
            )
            for key, title in VERDICT_COLUMNS
        ),
        *([VERDICT_COLUMN] if systems.get("verdict", pd.Series(dtype=str)).ne("").any() else []),
    ]
    blocks: list[Any] = [Paragraph(method, muted=True)]
    first: list[Block] = []
    if comparisons.empty:
        first.append(
            Paragraph(
                empty
                or "No system of a later run matches a baseline system (same condition, "
                "budget and reader kind): nothing to compare."
            )
        )
    else:
        first.append(Paragraph([Strong(answer_text(comparisons, score))]))
        first += _differences(comparisons, several, score)
        same = same_text(comparisons)
        if same:
            first.append(Paragraph(same))
        hidden = {"p_value", "min_detectable", *([] if several else ["budget"])}
        columns = [c for c in COMPARISON_COLUMNS if c.key not in hidden]
        blocks.append(  # the first screen's table says why each two; this one, how
            Table(
                "comparisons-table",
                [
                    *columns,
                    *(NOISE_COLUMNS if llm else []),
                    *([VERDICT_COLUMN] if comparisons["verdict"].ne("").any() else []),
                ],
                comparisons,
                csv="compare.csv",
                caption="Every paired difference, with its 2x2 counts",
                collapsed=True,
            )
        )
        charted = comparisons[comparisons["group"] < SAME_GROUP]
        if not charted.empty:
            blocks.append(
                forest_chart(
                    charted,
                    None,
                    f"difference in {COMPARED_SCORES[score]} pass rate (second minus first), "
                    "source pairs",
                    f"Difference in {COMPARED_SCORES[score]} pass rate on shared source pairs, "
                    "95 % Newcombe intervals; filled: Holm-corrected McNemar p < 0.05.",
                    collapsed=True,
                )
            )
    key: list[tuple[str, Text]] = [
        (f"{label}{' (baseline)' if baseline else ''}", [Code(str(path))])
        for label, path, baseline in zip(runs["label"], runs["path"], runs["baseline"], strict=True)
    ]  # the key of the short run labels (a path, in a table, widened it past the window)
    return Document(
        title="memory audit: comparison of "
        + ", ".join(
            f"{lab} ({name})" for lab, name in zip(runs["label"], runs["name"], strict=True)
        ),
        facts=Facts(key),
        summary=[*alerts, *first, Bullets(notes)],
        sections=[
            Section("comparisons", "Paired differences", blocks),
            Section(
                "systems",
                f"{sentence(COMPARED_SCORES[score])} per system on the shared pairs",
                [
                    Table(
                        "systems-table",
                        system_columns,
                        systems,
                        csv="systems.csv",
                        caption="Every system of every run",
                        collapsed=True,
                    )
                ],
            ),
            Section("runs", "Runs", [Table("runs-table", run_columns, runs)]),
        ],
        stem="compare",
    )
