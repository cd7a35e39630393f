"""Where a shortcut probe does as well as a real condition: the audit's blind spots.

A probe (``compressors`` kind ``probe``) knows nothing of semantics, only labels,
arrival order and the surface of records.  If a probe's joint J (blocks) is at least
a strict condition's under *every* transform the run made, then this audit cannot
tell that condition from the probe's heuristic.  Each built-in probe declares what
it exploits and which transforms break it (``Compressor.exploits``,
``Compressor.broken_by``): the advice names the ones the run lacks (add them), or,
when the run has them all and the probe still does as well, says that the
condition's score is no evidence of more than the heuristic.
"""

from __future__ import annotations

from typing import Any

from audit.scoring._metrics import ALL
from audit.scoring._table import Scores


def _rate(cell: dict[str, Any] | None) -> float | None:
    if cell is None or not cell["joint_J_blocks_n"]:
        return None
    return float(cell["joint_J_blocks_k"]) / float(cell["joint_J_blocks_n"])


def _at_least(probe: float | None, condition: float | None) -> bool:
    return probe is not None and condition is not None and probe >= condition


def probe_facts(probe: str) -> dict[str, Any]:
    """What a probe declares: its kind of heuristic, what it exploits, the transforms
    that break it (a built-in's class attributes; a plugin probe's are unknown here)."""
    from compressors import builtins

    found = builtins().get(probe.partition(":")[0])
    if found is None:
        return {"heuristic": "shortcut", "exploits": "", "broken_by": []}
    return {
        "heuristic": found.heuristic,
        "exploits": found.exploits,
        "broken_by": list(found.broken_by),
    }


def article(word: str) -> str:
    """``a`` or ``an`` before a word."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def listed(words: list[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def probe_advice(condition: str, matched: list[dict[str, Any]], transforms: list[str]) -> str:
    """What to do about the probes that match a condition (each declaring what breaks
    it, ``probe_facts``), given the transforms the run has."""
    missing = list(dict.fromkeys(
        t for facts in matched for t in facts["broken_by"] if t not in transforms
    ))  # fmt: skip
    breaking = list(dict.fromkeys(t for facts in matched for t in facts["broken_by"]))
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
            f"heuristic{'' if one else 's'}, and {'the probe' if one else 'the probes'} still "
            f"{'does' if one else 'do'} as well: {condition}'s score is no evidence that it "
            f"does better than {'this heuristic' if one else 'these heuristics'}"
        )
    return (
        f"no transform breaks {'this probe' if one else 'these probes'}: {condition}'s score "
        f"is no evidence that it does better than {'it' if one else 'they do'}"
    )


def grouped_matches(matches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probe matches of one condition together (reader, condition, budget): the
    probes, their kinds of heuristic (``heuristics``, for "a naming or order
    heuristic") and one piece of advice for them all."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for match in matches:
        key = (match["reader"], match["condition"], match["budget"])
        groups.setdefault(key, []).append(match)
    return [
        {
            "reader": reader,
            "condition": condition,
            "budget": budget,
            "matches": found,
            "heuristics": list(dict.fromkeys(m["heuristic"] for m in found)),
            "transforms": found[0]["transforms"],
            "advice": probe_advice(condition, found, found[0]["transforms"]),
        }
        for (reader, condition, budget), found in groups.items()
    ]


def probe_matches(scores: Scores) -> list[dict[str, Any]]:
    """One entry per (strict condition, probe) pair at the same reader and budget where
    the probe's joint J is at least the condition's under every transform, with what the
    probe declares (``probe_facts``), the transforms that break it and the run lacks, and
    the advice (``probe_advice``)."""
    probes = [s for s in scores.systems if scores.kinds.get(s[1]) == "probe"]
    transforms = scores.transforms()
    out = []
    for system in scores.contestants():
        reader, condition, budget = system
        own = {t: _rate(scores.cell(system, t, ALL)) for t in transforms}
        if not any(rate for rate in own.values()):
            continue  # a condition that passes nothing needs no probe to be doubted
        for probe in probes:
            if (probe[0], probe[2]) != (reader, budget):
                continue
            theirs = {t: _rate(scores.cell(probe, t, ALL)) for t in transforms}
            if all(_at_least(theirs[t], own[t]) for t in transforms):
                facts = probe_facts(probe[1])
                out.append(
                    {
                        "reader": reader,
                        "budget": budget,
                        "condition": condition,
                        "probe": probe[1],
                        "transforms": transforms,
                        "condition_joint_J": own,
                        "probe_joint_J": theirs,
                        **facts,
                        "missing_transforms": [
                            t for t in facts["broken_by"] if t not in transforms
                        ],
                        "advice": probe_advice(condition, [facts], transforms),
                    }
                )
    return out
