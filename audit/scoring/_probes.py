"""The floor check: which strict conditions this audit cannot tell from a shortcut probe.

A strict condition is told apart from the floor only where it beats **every** probe
of the run **significantly** under **every** transform that tests for a shortcut,
paired over source pairs (its joint J block rate NA as fail minus the probe's NA as
pass; ``paired_p``).  The claim is an intersection, so an intersection-union test
(Berger 1982): every test at ``ALPHA``, no multiplicity correction, so a condition's
answer never depends on its other tests or the run's other conditions, and a probe
added can only take a "yes" away (docs/method.md, "Metamorphic transforms").

A condition that fails any test is a ``FloorFinding``, the one typed value that
summary.json (``probe_matches``), the console and the report read, with its one text
(``floor_message``); its advice names the transforms that break the probes it did not
beat (``Compressor.broken_by``).  A condition that passes nothing is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, computed_field

from audit.scoring._gaps import sign_flip_p
from audit.scoring._metrics import ALL
from audit.scoring._stats import ALPHA, PairedTable, mcnemar_exact
from audit.scoring._table import Scores

System = tuple[str, str, int]


class ProbeFacts(BaseModel):
    """What a probe declares: its kind of heuristic, what it exploits, the transforms
    that break it (a built-in's class attributes; a plugin probe's are unknown)."""

    probe: str
    heuristic: str = "shortcut"
    exploits: str = ""
    broken_by: list[str] = []


class FloorTest(BaseModel):
    """One condition against the best probe under one transform, over source pairs."""

    transform: str
    probe: str
    """The probe the condition beats least under this transform (the highest p)."""
    condition_rate: float
    probe_rate: float
    """Joint J block pass rates (the condition NA as fail, the probe NA as pass)."""
    condition_blocks: int | None = None
    probe_blocks: int | None = None
    blocks: int | None = None
    """The same rates as k/n blocks (None: a summary written before they were kept)."""
    n_pairs: int
    """Source pairs both determined, the unit of the test."""
    delta: float
    """Mean per-pair difference, condition minus probe."""
    p: float
    """Two-sided sign-flip permutation p (exact McNemar on pass/fail pairs)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def beats(self) -> bool:
        """The condition beats the probe here: above it, significantly (one test of an
        intersection-union test: at ``ALPHA``, unadjusted)."""
        return self.delta > 0 and self.p < ALPHA

    @property
    def beaten(self) -> bool:
        """The probe beats the condition here: above it, significantly (at ``ALPHA``)."""
        return self.delta < 0 and self.p < ALPHA

    def text(self) -> str:
        """``identity: probe_lowrev 45/84 vs 39/84 blocks, p 1`` (probe first, as
        the report has always shown it; k/n like every other count)."""
        if self.blocks and self.probe_blocks is not None and self.condition_blocks is not None:
            rates = (
                f"{self.probe_blocks}/{self.blocks} vs {self.condition_blocks}/{self.blocks} blocks"
            )
        else:
            rates = f"{self.probe_rate:.2f} vs {self.condition_rate:.2f}"
        return f"{self.transform}: {self.probe} {rates}, p {self.p:.2g}"


class FloorFinding(BaseModel):
    """A strict condition this audit cannot tell from the probe floor."""

    reader: str
    budget: int
    condition: str
    transforms: list[str]
    """Every transform it was tested under (the run's)."""
    tests: list[FloorTest]
    probes: list[ProbeFacts]
    """The probes it did not beat, under the transforms where it did not."""
    missing_transforms: list[str]
    """Transforms that break those probes and that the run lacks."""
    advice: str

    @property
    def failed(self) -> list[FloorTest]:
        return [t for t in self.tests if not t.beats]

    @property
    def beaten(self) -> bool:
        """A probe scores significantly higher than the condition under some transform."""
        return any(t.beaten for t in self.tests)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def heuristics(self) -> list[str]:
        return list(dict.fromkeys(p.heuristic for p in self.probes))

    def line(self) -> str:
        """Where it did not beat the floor: the first such transform's best probe
        against it, and how many more (``summary.json`` has every test)."""
        failed = self.failed
        more = len(failed) - 1
        others = f"{more} other transform" + ("s" if more > 1 else "")
        return failed[0].text() + (
            f"; not beaten under {others} either ({len(failed)} of the {len(self.tests)} tested)"
            if more
            else ""
        )


def probe_facts(probe: str) -> ProbeFacts:
    """A probe's declarations (``ProbeFacts``)."""
    from compressors import builtins

    found = builtins().get(probe.partition(":")[0])
    if found is None:
        return ProbeFacts(probe=probe)
    return ProbeFacts(
        probe=probe,
        heuristic=found.heuristic,
        exploits=found.exploits,
        broken_by=list(found.broken_by),
    )


def article(word: str) -> str:
    """``a`` or ``an`` before a word."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def sentence(text: str) -> str:
    """``text`` with its first letter upper-case: a finding's text begins a sentence."""
    return text[:1].upper() + text[1:]


def listed(words: Sequence[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def probe_advice(condition: str, matched: Sequence[ProbeFacts], transforms: list[str]) -> str:
    """What to do about the probes a condition did not beat, given the run's transforms."""
    missing = list(dict.fromkeys(
        t for facts in matched for t in facts.broken_by if t not in transforms
    ))  # fmt: skip
    breaking = list(dict.fromkeys(t for facts in matched for t in facts.broken_by))
    one = len(matched) == 1
    if missing:
        breaks = "it breaks" if len(missing) == 1 else "they break"
        return (
            f"add {listed(missing)} to the run's transforms ({breaks} "
            f"{'the probe' if one else 'these probes'}) before trusting {condition}'s score"
        )
    if breaking:
        return (
            f"the run already has {listed(breaking)}, which "
            f"{'breaks' if len(breaking) == 1 else 'break'} {'its' if one else 'their'} "
            f"heuristic{'' if one else 's'}, and {condition} does not beat "
            f"{'the probe' if one else 'the probes'} significantly under every transform: "
            f"{condition}'s score "
            f"is no evidence that it does better than "
            f"{'this heuristic' if one else 'these heuristics'}"
        )
    return (
        f"no transform breaks {'this probe' if one else 'these probes'}: {condition}'s score "
        f"is no evidence that it does better than {'it' if one else 'they do'}"
    )


class FloorMessage(BaseModel):
    """The one text of the findings at one reader and budget: the console prints it,
    the report boxes it."""

    headline: str
    """``This audit cannot tell X from a revision heuristic``."""
    body: str
    """The rule, what the probes exploit, and the advice."""
    items: list[tuple[str, str]]
    """Per condition: its name and where it did not beat the floor."""
    beaten: str = ""
    """Which of them a probe scores significantly higher than ("" when none): more than
    "cannot tell" says."""


RULE = (
    "a condition is told apart from the floor only where it beats every probe "
    "significantly (paired over source pairs, each test at the 5 % level) on joint J under "
    "every "
    "transform of the run"
)


def floor_message(findings: Sequence[FloorFinding], strict: int) -> FloorMessage:
    """The text of the findings of one reader and budget (``strict``: the strict
    conditions there, for "3 of 5")."""
    kinds = listed(list(dict.fromkeys(h for f in findings for h in f.heuristics)), "or")
    one = len(findings) == 1
    who = findings[0].condition if one else f"{len(findings)} of {strict} strict conditions"
    matched = list({p.probe: p for f in findings for p in f.probes}.values())
    legend = "; ".join(p.probe + (f" exploits {p.exploits}" if p.exploits else "") for p in matched)
    advice = (
        findings[0].advice
        if one
        else probe_advice("each condition", matched, findings[0].transforms)
    )
    body = (
        f"{sentence(RULE)} ({', '.join(findings[0].transforms)}); "
        f"{'it does' if one else 'these do'} not ({legend}). {sentence(advice)}."
    )
    worse = [f.condition for f in findings if f.beaten]
    than = "it" if one else "each of them"
    if 0 < len(worse) < len(findings):
        than = f"{len(worse)} of them ({listed(worse)})"
    return FloorMessage(
        headline=f"This audit cannot tell {who} from {article(kinds)} {kinds} heuristic",
        body=body,
        items=[(f.condition, f.line()) for f in findings],
        beaten=f"a probe scores significantly higher than {than}" if worse else "",
    )


def paired_p(differences: Sequence[float]) -> float:
    """Two-sided p that per-pair differences are symmetric about 0: the exact McNemar
    test where every non-zero difference has one size (pass/fail pairs, or equal block
    counts going one way or the other), else the sign-flip permutation test."""
    moved = [d for d in differences if d != 0]
    if not moved:
        return 1.0
    if len({round(abs(d), 12) for d in moved}) == 1:
        up = sum(d > 0 for d in moved)
        return mcnemar_exact(PairedTable(0, up, len(moved) - up, 0))
    return sign_flip_p(moved)


def _per_pair(scores: Scores) -> dict[tuple[Any, ...], dict[str, tuple[float, float]]]:
    """(reader, condition, budget, transform) -> {source pair: (block rate NA as fail,
    NA as pass)} of joint J."""
    frame = scores.pairs["joint_J"]
    out: dict[tuple[Any, ...], dict[str, tuple[float, float]]] = {}
    columns = ["reader", "condition", "budget", "transform", "source_pair_id",
               "blocks_lo", "blocks_hi", "blocks"]  # fmt: skip
    for reader, condition, budget, transform, pair, lo, hi, blocks in zip(
        *(frame[column].tolist() for column in columns), strict=True
    ):
        out.setdefault((reader, condition, int(budget), transform), {})[pair] = (
            lo / blocks,
            hi / blocks,
        )
    return out


def _block_counts(
    scores: Scores, system: System, transform: str, high: bool
) -> tuple[int, int] | None:
    """Joint J blocks passing (NA as pass when ``high``) and blocks, or None."""
    cell = scores.cell(system, transform, ALL)
    if cell is None or not cell["joint_J_blocks_n"]:
        return None
    k = cell["joint_J_blocks_k_high" if high else "joint_J_blocks_k"]
    return int(k), int(cell["joint_J_blocks_n"])


def _block_rate(scores: Scores, system: System, transform: str, high: bool) -> float | None:
    found = _block_counts(scores, system, transform, high)
    return None if found is None else found[0] / found[1]


def floor_findings(scores: Scores, skip_readers: Sequence[str] = ()) -> list[FloorFinding]:
    """Every strict condition the floor check cannot tell from the probes (module
    docstring), in display order; ``skip_readers`` (readers that cannot read the
    histories: no verdict, so no ranking) are left out."""
    probes = [s for s in scores.systems if scores.kinds.get(s[1]) == "probe"]
    transforms = scores.shortcut_transforms()
    if not probes or not transforms:
        return []
    values = _per_pair(scores)
    planned: list[tuple[System, list[FloorTest]]] = []
    for system in scores.contestants():
        reader, condition, budget = system
        if reader in skip_readers:
            continue
        own = {t: _block_rate(scores, system, t, high=False) for t in transforms}
        if not any(own.values()):
            continue  # a condition that passes nothing needs no probe to be doubted
        here = [p for p in probes if (p[0], p[2]) == (reader, budget)]
        if not here:
            continue
        tests = []
        for transform in transforms:
            rates = {p: _block_rate(scores, p, transform, high=True) for p in here}
            if own[transform] is None:
                continue
            mine = values.get((*system, transform), {})
            candidates = []
            for probe in (p for p in here if rates[p] is not None):
                theirs = values.get((*probe, transform), {})
                shared = sorted(mine.keys() & theirs.keys())
                differences = [mine[pair][0] - theirs[pair][1] for pair in shared]
                delta = sum(differences) / len(differences) if differences else 0.0
                probe_counts = _block_counts(scores, probe, transform, high=True)
                own_counts = _block_counts(scores, system, transform, high=False)
                same_n = probe_counts and own_counts and probe_counts[1] == own_counts[1]
                candidates.append(
                    FloorTest(
                        transform=transform,
                        probe=probe[1],
                        condition_rate=round(float(own[transform] or 0.0), 4),
                        probe_rate=round(rates[probe] or 0.0, 4),
                        condition_blocks=own_counts[0] if same_n and own_counts else None,
                        probe_blocks=probe_counts[0] if same_n and probe_counts else None,
                        blocks=own_counts[1] if same_n and own_counts else None,
                        n_pairs=len(shared),
                        delta=round(delta, 4),
                        p=paired_p(differences),
                    )
                )
            if candidates:  # the decisive one: a probe it fails, ahead by most; else the highest p
                tests.append(min(candidates, key=lambda t: (t.beats, -t.p if t.beats else t.delta)))
        planned.append((system, tests))
    out = []
    for (reader, condition, budget), tests in planned:
        failed = [t for t in tests if not t.beats]
        if not failed:
            continue
        facts = [probe_facts(name) for name in dict.fromkeys(t.probe for t in failed)]
        out.append(
            FloorFinding(
                reader=reader,
                budget=budget,
                condition=condition,
                transforms=transforms,
                tests=tests,
                probes=facts,
                missing_transforms=[
                    t
                    for t in dict.fromkeys(b for f in facts for b in f.broken_by)
                    if t not in transforms
                ],
                advice=probe_advice(condition, facts, transforms),
            )
        )
    return out
