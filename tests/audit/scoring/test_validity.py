"""An audit that cannot be gamed: shortcuts exposed, probes as the floor, archives as
ceilings, preregistered references, replication across seeds, content-matched
comparisons.  Real runs through the command line, scored by audit.scoring."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.rundir import normalize
from audit.scoring import score_results, selection_warnings
from audit.scoring._gaps import sign_flip_p
from tests._rows import result_csv

runner = CliRunner()

SHORTCUT = '''
from compressors import Compressor, Stream, pack_positions


class ShortestIds(Compressor):
    """Knows nothing of semantics: keeps the records with the shortest ids."""

    name = "shortest_ids"

    def update(self, memory, chunk, query_keys, budget):
        stream = Stream.of(memory, chunk)
        order = sorted(range(len(stream)), key=lambda p: (len(stream.records[p].id), p))
        return stream.dump(pack_positions(order, stream.sizes, budget))


class TailClaimingOrder(Compressor):
    """Claims order invariance, and breaks it: the check must see it."""

    name = "tail_claiming_order"
    order_invariant = True

    def update(self, memory, chunk, query_keys, budget):
        stream = Stream.of(memory, chunk)
        newest = range(len(stream) - 1, -1, -1)
        return stream.dump(pack_positions(newest, stream.sizes, budget, contiguous=True))
'''


@pytest.fixture
def shortcut_plugin(plugin) -> str:
    return plugin("shortcut_plugin", SHORTCUT)


def run(*args: str):
    return runner.invoke(app, list(args))


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def config_of(out: Path) -> dict:
    """The run's configuration, as config.json records it."""
    return json.loads((out / "config.json").read_text())["config"]


def cell(summary: dict, condition: str, transform: str = "identity") -> dict:
    return next(
        e
        for e in summary["scores"]
        if e["condition"] == condition and e["transform"] == transform and e["family"] == "all"
    )


def rate(kn: dict) -> float:
    return kn["k"] / kn["n"]


def gap_of(summary: dict, condition: str, transform: str) -> dict:
    return next(
        g for g in summary["shortcut_gaps"]
        if g["condition"] == condition and g["transform"] == transform
    )  # fmt: skip


def matched(summary: dict) -> dict[tuple[str, str], dict]:
    """(condition, probe) -> what the probe declares and the finding's advice, for each
    probe a condition did not beat under some transform (the floor check)."""
    return {
        (m["condition"], p["probe"]): {**p, "missing_transforms": m["missing_transforms"],
                                       "advice": m["advice"]}
        for m in summary["probe_matches"]
        for p in m["probes"]
    }  # fmt: skip


# ------------------------------------------------------------------ shortcuts exposed


def test_a_label_length_shortcut_is_exposed_by_relabel_and_flagged_by_a_probe(
    shortcut_plugin: str, tmp_path: Path
):
    # the paper's label shape: task ids are shorter, so "shortest ids first" looks perfect
    out = tmp_path / "paper"
    shortest_spec, shortest = f"{shortcut_plugin}:ShortestIds", "shortest_ids"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"{shortest_spec},probe_shortest,frontier", "--transforms",
                 "identity,rename:3,permute:3,relabel:3", "--workers", "1", "--out", str(out),
                 "--verbose")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    identity = cell(summary, shortest)
    assert identity["source pairs"]["reveal"]["k"] == 24  # 24/24: it looks sufficient
    assert rate(cell(summary, shortest, "rename")["blocks"]["reveal"]) == 1.0  # same lengths
    relabelled = rate(cell(summary, shortest, "relabel")["blocks"]["reveal"])
    assert relabelled < 0.5  # relabel redraws lengths: the shortcut collapses
    gap = gap_of(summary, shortest, "relabel")
    assert gap["reveal_gap_blocks"] > 0.5
    assert gap["reveal_gap_low"] > 0.3  # the interval excludes no gap
    assert gap["reveal_gap_p"] < 0.01
    matches = set(matched(summary))
    assert (shortest, "probe_shortest") in matches  # a naming heuristic does as well
    said = " ".join(result.output.split())
    # the paper's labels make the probe perfect at identity (24/24): nothing can beat it
    # there, so no condition is told apart from the floor on this data
    assert "cannot tell 2 of 2 strict conditions from a naming heuristic at 1200 B" in said
    tests = {m["condition"]: {t["transform"]: t for t in m["tests"]}
             for m in summary["probe_matches"]}  # fmt: skip
    assert not tests[shortest]["relabel"]["beats"]  # the shortcut collapses with the probe
    assert tests["frontier"]["relabel"]["beats"]  # relabel tells frontier apart...
    assert not tests["frontier"]["identity"]["beats"]  # ...and identity does not


def test_without_relabel_the_audit_says_it_cannot_tell(shortcut_plugin: str, tmp_path: Path):
    out = tmp_path / "no-relabel"
    shortest_spec = f"{shortcut_plugin}:ShortestIds"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"frontier,{shortest_spec},probe_shortest", "--transforms", "identity,rename:3",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    matches = set(matched(summary_of(out)))
    # same-length renamings keep the paper's tell: frontier cannot be told from the probe
    assert ("frontier", "probe_shortest") in matches
    report = run("report", str(out))
    assert report.exit_code == 0, report.output
    md = (out / "report" / "report.md").read_text()
    assert "This audit cannot tell" in md
    assert md.index("This audit cannot tell") < md.index("### 1.")  # shortcut findings first
    # one box per budget, one line per matched condition (readable in a glance)
    assert md.count("This audit cannot tell") == 1
    assert "cannot tell 2 of 2 strict conditions from a naming heuristic (1200 B)" in md
    lines = [line for line in md.splitlines() if line.startswith("> - **")]
    assert len(lines) == 2, lines
    assert all("probe_shortest " in line for line in lines), lines


def test_readable_labels_of_the_default_pilot_give_a_length_shortcut_nothing(
    shortcut_plugin: str, tmp_path: Path
):
    out = tmp_path / "words"
    result = run("run", "--preset", "cca-pilot", "--conditions",
                 f"{shortcut_plugin}:ShortestIds", "--transforms", "identity",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    reveal = cell(summary_of(out), "shortest_ids")["source pairs"]["reveal"]
    assert reveal["k"] <= reveal["n"] // 2  # no tell in the labels: no better than chance-ish


def test_a_claim_of_order_invariance_is_checked(shortcut_plugin: str, tmp_path: Path):
    out = tmp_path / "order"
    liar_spec, liar = f"{shortcut_plugin}:TailClaimingOrder", "tail_claiming_order"
    result = run("run", "--preset", "cca-pilot", "--conditions",
                 f"full,dependency_closure,probe_shortest,{liar_spec}", "--transforms",
                 "identity,permute:3", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    for condition in ("full", "dependency_closure"):
        violations = cell(summary, condition, "permute")["equivariance_violations"]["reads"]
        assert violations["n"] == 84 * 3 * 6  # every read of a claimant is checked
        assert violations["k"] == 0, condition
    # a greedy packer claims nothing (its memory depends on the path): nothing is checked
    unclaimed = cell(summary, "probe_shortest", "permute")["equivariance_violations"]["reads"]
    assert unclaimed["n"] == 0
    liar_violations = cell(summary, liar, "permute")["equivariance_violations"]["reads"]
    assert liar_violations["k"] > 0
    (alert,) = summary["equivariance_alerts"]  # the false claim, and only it
    assert (alert["condition"], alert["check"], alert["transform"]) == (liar, "order", "permute")
    assert alert["k"] > 0
    assert alert["n"] == 84
    said = " ".join(result.output.split())
    assert f"{liar} claims order invariance, but at 1200 B its memory changed" in said
    assert "the claim is false" in said
    assert run("report", str(out)).exit_code == 0
    md = " ".join((out / "report" / "report.md").read_text().split())
    assert "claims order invariance, and the claim is false" in md


# ------------------------------------------- a methods review's gaming compressors

GAMING = r'''
import re

from compressors import Compressor, Stream, pack_positions

SHAPE = re.compile(r"[a-z]+-\d{3}")  # the paper's distractor values (amber-101)


def rev(record):
    return getattr(record, "rev", 0) or 0


def tie(record):  # label-free and order-free: survives rename and permute
    return (getattr(record, "value", "") or "", getattr(record, "now", 0) or 0)


class _Greedy(Compressor):
    def rank(self, record, query):
        raise NotImplementedError

    def update(self, memory, chunk, query_keys, budget):
        stream = Stream.of(memory, chunk)
        if stream.fits(budget):
            return stream.dump()
        records = stream.records
        order = sorted(
            range(len(stream)), key=lambda p: (self.rank(records[p], query_keys), tie(records[p]))
        )
        return stream.dump(pack_positions(order, stream.sizes, budget))


class QueryLowRev(_Greedy):
    """The query key's records, then the smallest revisions (E_q prefers the largest)."""

    name = "g_query_lowrev"

    def rank(self, record, query):
        return (getattr(record, "key", None) not in query, rev(record))


class QueryOddLowRev(_Greedy):
    """As above, but first anything that is not a set of a word-123 value."""

    name = "g_query_odd_lowrev"

    def rank(self, record, query):
        value = getattr(record, "value", None)
        plain = record.op == "set" and value is not None and SHAPE.fullmatch(value) is not None
        return (getattr(record, "key", None) not in query, plain, rev(record))


class RaiseWhenHard(QueryLowRev):
    """Raises on any chunk with a copy or a choice: the hard pairs leave its n?"""

    name = "g_raise_hard"

    def update(self, memory, chunk, query_keys, budget):
        if any(r.op in ("copy", "choose") for r in chunk.records):
            raise RuntimeError("no")
        return super().update(memory, chunk, query_keys, budget)


# an adversary's (held out when written): keys ranked by how often other records named
# them, counted across updates in tick lines of its own (now=0: E_q-harmless)
import zlib
from collections import Counter

from compressors import dump, load, pack
from histories import TickRecord, referenced_keys

_STATE = "zq."


def _h(key):
    return format(zlib.crc32(key.encode()) & 0xFFFF, "04x")


def _split(memory):
    recs, counts = [], Counter()
    for r in load(memory) if memory else ():
        if r.op == "tick" and r.now == 0 and r.id.startswith(_STATE):
            body = r.id[len(_STATE):]
            for i in range(0, len(body), 5):
                counts[body[i : i + 4]] = int(body[i + 4], 16)
        else:
            recs.append(r)
    return recs, counts


def _state_lines(counts, limit):
    items = [(k, min(c, 15)) for k, c in counts.most_common(limit) if c > 0]
    lines, cur = [], ""
    for k, c in items:
        cur += k + format(c, "x")
        if len(cur) >= 115:
            lines.append(cur)
            cur = ""
    if cur:
        lines.append(cur)
    return [TickRecord(id=_STATE + s, now=0) for s in lines]


def _reads(r):
    own = getattr(r, "key", None)
    return [k for k in referenced_keys(r) if k != own]


class ReaderTell(Compressor):
    """Keeps records by how many other records name their key (no resolution)."""

    name = "g_reader_tell"

    def update(self, memory, chunk, query_keys, budget):
        kept, counts = _split(memory)
        q = set(query_keys)
        for r in chunk.records:
            for k in _reads(r):
                counts[_h(k)] += 1
        stream = [*kept, *chunk.records]
        qids = {r.id for r in stream if getattr(r, "key", None) in q}

        def tier(i_r):
            i, r = i_r
            if getattr(r, "key", None) in q or (r.op == "revoke" and r.target in qids):
                t = 0
            elif r.op == "tick":
                t = 1
            elif (getattr(r, "expires", None) or 0) >= 14 or any(k in q for k in _reads(r)):
                t = 6
            else:
                key = getattr(r, "key", None)
                c = counts[_h(key)] if key else 0
                t = 2 if c >= 3 else 3 if c == 2 else 4 if c == 1 else 5
            return (t, -i)

        order = [r for _, r in sorted(enumerate(stream), key=tier)]
        state = _state_lines(counts, 24)
        room = len(dump(state).encode()) + 1 if state else 0
        chosen = pack(order, max(0, budget - room))
        out = dump([*chosen, *state])
        return out if len(out.encode()) <= budget else dump(chosen)
'''


@pytest.fixture
def gaming(plugin) -> str:
    return plugin("gaming_plugin", GAMING)


def _revision_heuristics(gaming: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """(spec, label) of QueryLowRev and QueryOddLowRev: a plugin's rows carry its name."""
    return (
        (f"{gaming}:QueryLowRev", "g_query_lowrev"),
        (f"{gaming}:QueryOddLowRev", "g_query_odd_lowrev"),
    )


def test_a_table_of_how_often_keys_are_named_falls_to_the_floor(gaming: str, tmp_path: Path):
    # before: above every probe under every default transform (joint J 68/84 at
    # identity against probe_one_hop's 56, 60 against 45 under disguise), named the
    # best condition and not flagged, on the default data and on seed 7: task keys were
    # named by other records far more often than distractor keys (89 % against 21 %).
    # Decoy drafts give distractor keys the task's in-degree: the tell is gone
    tell = f"{gaming}:ReaderTell"
    out = tmp_path / "named"
    result = run("run", "--preset", "cca-pilot", "--conditions",
                 f"{tell},probe_one_hop,probe_named", "--transforms", "identity,disguise:1",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    rates = {e["condition"]: e["source pairs"]["joint_J"]["k"] for e in summary["scores"]
             if e["transform"] == "identity" and e["family"] == "all"}  # fmt: skip
    label = "g_reader_tell"  # a plugin's rows carry its name
    assert rates[label] <= max(rates["probe_one_hop"], rates["probe_named"])
    (finding,) = [f for f in summary["probe_matches"] if f["condition"] == label]
    failed = {t["transform"]: t["probe"] for t in finding["tests"] if not t["beats"]}
    assert set(failed) == {"identity", "disguise"}
    assert {p["heuristic"] for p in finding["probes"]} == {"label-graph"}


def test_revision_heuristics_are_matched_by_a_probe_on_the_default_pilot(
    gaming: str, tmp_path: Path
):
    # before: on plain distractors they beat every packer (joint J 21/24 and 23/24
    # against frontier_alpha's 20/24) with no gap under any transform and no probe
    # matching; the default pilot's distractors are task-like, and probe_lowrev runs
    (low_spec, low), (odd_spec, odd) = _revision_heuristics(gaming)
    out = tmp_path / "pilot"
    result = run("run", "--preset", "cca-pilot", "--conditions",
                 f"frontier_alpha,{low_spec},{odd_spec},probe_lowrev,probe_rare_op_or_value",
                 "--transforms", "identity,rerev:3,revalue:3", "--workers", "1", "--quiet",
                 "--out", str(out), "--verbose")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    found = matched(summary)
    for condition in (low, odd):
        match = found[(condition, "probe_lowrev")]
        assert match["heuristic"] == "revision"
        assert match["broken_by"] == ["rerev"]
        assert match["missing_transforms"] == []
        assert "no evidence that it does better than this heuristic" in match["advice"]
    # one warning for the budget, one line per matched condition naming its probes
    said = " ".join(result.output.split())
    assert said.count("cannot tell") == 1, said
    assert re.search(r"cannot tell \d of \d strict conditions from an? [a-z, -]*revision"
                     r"[a-z -]* heuristic at 1200 B", said), said  # fmt: skip
    # at least as good as the probe at identity, not significantly better (p near 1)
    assert re.search(rf"{re.escape(low)} identity: probe_lowrev (\d+)/84 vs (\d+)/84 blocks, "
                     r"p 1\b", said), said  # fmt: skip
    assert f"{odd} identity: probe_lowrev" in said
    assert "probe_lowrev exploits the query key, then the smallest revisions" in said


def test_revision_and_value_heuristics_collapse_under_rerev_and_revalue(
    gaming: str, tmp_path: Path
):
    # the paper's plain distractors, where the heuristics work: the new transforms
    # break them (a shortcut gap) or a probe matches them
    (low_spec, low), (odd_spec, odd) = _revision_heuristics(gaming)
    out = tmp_path / "paper"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"frontier_alpha,{low_spec},{odd_spec},probe_lowrev,probe_rare_op_or_value",
                 "--transforms", "identity,rerev:10,revalue:10", "--workers", "1", "--quiet",
                 "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    assert cell(summary, odd)["source pairs"]["joint_J"]["k"] >= 22  # it looks sufficient
    rerev = gap_of(summary, odd, "rerev")
    assert rerev["reveal_gap_blocks"] > 0.2
    assert rerev["reveal_gap_low"] > 0
    assert rerev["reveal_gap_p"] < 0.05
    revalue = gap_of(summary, odd, "revalue")
    assert revalue["reveal_gap_blocks"] > 0.1
    assert revalue["reveal_gap_low"] > 0
    assert (low, "probe_lowrev") in matched(summary)  # the same heuristic, named
    for transform in ("rerev", "revalue"):  # the real condition loses nothing
        assert gap_of(summary, "frontier_alpha", transform)["reveal_gap_blocks"] == 0


def test_without_the_breaking_transforms_the_advice_names_them(gaming: str, tmp_path: Path):
    (low_spec, low), (odd_spec, odd) = _revision_heuristics(gaming)
    out = tmp_path / "no-rerev"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"{low_spec},{odd_spec},probe_lowrev,probe_rare_op_or_value", "--transforms",
                 "identity,rename:2", "--workers", "1", "--quiet", "--out", str(out),
                 "--verbose")  # fmt: skip
    assert result.exit_code == 0, result.output
    found = matched(summary_of(out))
    # the best probe under each transform is the one each condition must beat: here
    # probe_rare_op_or_value (22/24), above probe_lowrev (18/24), for both
    assert set(found) == {(low, "probe_rare_op_or_value"), (odd, "probe_rare_op_or_value")}
    surface = found[(low, "probe_rare_op_or_value")]
    assert surface["heuristic"] == "record-surface"
    assert surface["missing_transforms"] == ["revalue", "rerev"]
    said = " ".join(result.output.split())
    assert "cannot tell 2 of 2 strict conditions from a record-surface heuristic" in said
    # 4 discordant pairs one way: p = 2 * 0.5**4
    assert f"{low} identity: probe_rare_op_or_value 22/24 vs 18/24 blocks, p 0.12" in said
    assert (
        "add revalue and rerev to the run's transforms (they break the probe) before "
        "trusting each condition's score" in said.lower()
    )


def test_the_default_audit_breaks_every_tell_a_probe_exploits():
    # every transform a built-in probe declares as breaking its heuristic is a default
    from audit.cli._run import DEFAULT_TRANSFORMS
    from audit.plan import parse_transforms
    from compressors import builtins

    defaults = {spec.kind: spec.count for spec in parse_transforms(DEFAULT_TRANSFORMS)}
    assert defaults["rerev"] >= 10
    assert defaults["revalue"] >= 10
    probes = [cls for cls in builtins().values() if cls.kind == "probe"]
    assert {"probe_lowrev", "probe_rare_op_or_value"} <= {cls.name for cls in probes}
    for cls in probes:
        assert all(kind in defaults for kind in cls.broken_by if kind != "decoy"), cls.name


def test_the_default_audit_is_powered_and_the_paper_pilot_keeps_its_instances(
    tmp_path: Path, pilot
):
    # before: 24 source pairs saw a 20-point difference in joint J with 15 % power (3
    # comparisons, discordance 0.3); power comes from pairs, not from instances of a pair
    from audit.cli._run import DEFAULT_TRANSFORMS, PRESET_TRANSFORMS
    from audit.plan import parse_transforms
    from audit.scoring import power

    assert len(pilot) == 84
    assert power(len(pilot), 0.2, 0.3, comparisons=3) >= 0.8
    # every check still has each transform on every pair
    counts = {spec.kind: spec.count for spec in parse_transforms(DEFAULT_TRANSFORMS)}
    assert set(counts) == {
        "identity", "rename", "permute", "relabel", "rerev", "revalue", "disguise"
    }  # fmt: skip
    assert min(counts[kind] for kind in counts if kind != "identity") >= 5
    # the paper's pilot is run as published unless told otherwise
    for preset, expected in (("cca-pilot", DEFAULT_TRANSFORMS),
                             ("cca-pilot-paper", PRESET_TRANSFORMS["cca-pilot-paper"])):  # fmt: skip
        out = tmp_path / preset
        result = run("run", "--preset", preset, "--plan-only", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert ",".join(config_of(out)["transforms"]) == expected, preset


def test_a_compressor_that_raises_on_the_hard_pairs_gains_nothing(gaming: str, tmp_path: Path):
    # before: its errors left adequacy and collisions, which read 12/12 and 0/12
    raiser_spec, raiser = f"{gaming}:RaiseWhenHard", "g_raise_hard"
    out = tmp_path / "raise"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions", raiser_spec,
                 "--transforms", "identity", "--workers", "1", "--out", str(out))  # fmt: skip
    assert result.exit_code == 5, result.output  # a compressor raised: the run failed
    entry = cell(summary_of(out), raiser)
    pairs = entry["source pairs"]
    assert entry["outcomes (reads)"]["error"] == 72  # 12 of 24 pairs raise
    assert pairs["adequacy"] == {"k": 12, "k_high": 12, "n": 24}
    assert pairs["collision"] == {"k": 12, "k_high": 12, "n": 24}
    assert pairs["joint_J"]["n"] == 24
    assert "collision" not in entry["reads"]  # two memories, not one read: no read count
    assert "each scored 0 and counted against it, never as a smaller n" in " ".join(
        result.output.split()
    )


# --------------------------------------------------------- ceilings, floor, selection


def test_archives_and_probes_are_never_the_best_or_the_reference(tmp_path: Path):
    out = tmp_path / "kinds"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 "frontier_latest,frontier_alpha,full,probe_shortest", "--transforms", "identity",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    assert summary["kinds"]["full"] == "archive"
    assert summary["kinds"]["probe_shortest"] == "probe"
    (selection,) = summary["selection"]
    named = set(selection["best_by_current"]) | set(selection["best_by_reveal"])
    assert named <= {"frontier_latest", "frontier_alpha"}
    assert "frontier_latest (archive)" not in result.output
    assert "ceiling: full" in result.output  # the best archive, a row of the verdicts
    assert run("report", str(out)).exit_code == 0
    comparisons = pd.read_csv(out / "report" / "comparisons.csv")
    assert set(comparisons["a"]) == {"frontier_alpha"}  # the best strict condition
    assert set(comparisons["reference"]) == {"from the data"}  # chosen after the run
    md = (out / "report" / "report.md").read_text()
    assert "| **ceiling: full** | 24/24 " in md  # a row of the verdicts table
    assert "chosen from the data: post hoc" in " ".join(md.split())
    assert "| **floor: probe_shortest** |" in md


def _reads(
    condition: str, current: list, reveal: list, *, kind: str = "strict",
    transform: str = "identity", reader: str = "exact",
) -> list[dict]:  # fmt: skip
    """Rows of one condition under one transform (one instance a source pair): per source
    pair, its current and reveal verdicts on both variants (1 passes, 0 is a wrong
    answer, None an NA read; override always passes)."""
    rows = []
    for index, (now, later) in enumerate(zip(current, reveal, strict=True)):
        for variant in ("A", "B"):
            for branch, value in (("current", now), ("reveal", later), ("override", 1)):
                rows.append({
                    "pair_id": f"p{index}" + ("" if transform == "identity" else f"~{transform}"),
                    "source_pair_id": f"p{index}", "family": "f", "variant": variant,
                    "branch": branch, "repeat": 0, "budget": 1200, "condition": condition,
                    "kind": kind, "transform": transform, "reader": reader,
                    "outcome": "na" if value is None else "pass" if value else "wrong_log",
                    "correct": value,
                })  # fmt: skip
    return rows


def _scored(rows: list[dict]) -> Any:
    return score_results(normalize(pd.DataFrame(rows)))


def _verdicts(scores: Any) -> dict[str, Any]:
    from audit.scoring import floor_findings, verdicts

    return {v.condition: v for v in verdicts(scores, floor_findings(scores))}


def test_selection_claims_only_what_holds_whatever_the_na_reads_were():
    # a: current 2/4, reveal 1/4; b: current 1..2/4 (one NA), reveal 2/4
    (warning,) = selection_warnings(_scored(
        _reads("a", [1, 1, 0, 0], [1, 0, 0, 0], reader="llm")
        + _reads("b", [1, None, 0, 0], [1, 1, 0, 0], reader="llm")
    ))  # fmt: skip
    assert warning.inversions == []  # b may be as good now: no inversion is claimed
    assert set(warning.best_by_current) == {"a", "b"}
    assert warning.best_by_reveal == ["b"]


def test_a_reversal_of_a_pair_or_two_is_within_noise():
    # a: current 24/24, reveal 10/24; b: current 23/24, reveal 11/24
    (warning,) = selection_warnings(_scored(
        _reads("a", [1] * 24, [1] * 10 + [0] * 14)
        + _reads("b", [1] * 23 + [0], [1] * 11 + [0] * 13)
    ))  # fmt: skip
    assert warning.misleading == ["a"]
    (inversion,) = warning.inversions
    assert inversion.current_p == 1.0
    assert inversion.reveal_p == 1.0
    assert inversion.within_noise
    assert warning.within_noise
    said = warning.text()  # the console's and the report's one text
    assert "Within noise" in said
    assert "p 1, uncorrected" in said
    # a: current 24/24, reveal 0/24; b: current 12/24, reveal 12/24: both differences hold
    (warning,) = selection_warnings(_scored(
        _reads("a", [1] * 24, [0] * 24) + _reads("b", [1] * 12 + [0] * 12, [1] * 12 + [0] * 12)
    ))  # fmt: skip
    (inversion,) = warning.inversions
    assert inversion.current_p == pytest.approx(2 * 0.5**12)
    assert inversion.reveal_p == pytest.approx(2 * 0.5**12)
    assert not inversion.within_noise
    assert not warning.within_noise
    assert warning.misleading_reveal_p == {"a": {"b": pytest.approx(2 * 0.5**12)}}
    assert "noise" not in warning.text()  # a significant p stands alone


def test_a_reversal_is_not_significant_only_where_its_p_says_so():
    """Issue 28: the selection warning said "none is significant" beside an uncorrected
    p of 0.0078. Each reversal of the report's box names, as not significant, exactly
    the accuracies whose own p is at least 0.05, and shows both ps."""
    from hypothesis import given
    from hypothesis import strategies as st

    from audit.reportdata._glance import _noise_note
    from audit.scoring import ALPHA, Inversion

    @given(st.floats(0, 1), st.floats(0, 1), st.booleans())
    def check(now: float, later: float, within: bool) -> None:
        text = _noise_note(
            Inversion(
                current_prefers="a", reveal_prefers="b", current=(1, 0), reveal=(0, 1),
                current_p=now, reveal_p=later, within_noise=within,
            )
        )  # fmt: skip
        assert f"exact McNemar p {now:.2g} now, {later:.2g} after the reveal, uncorrected" in text
        named = text.split("not significant ", 1)[1].split(" (", 1)[0] if within else ""
        assert ("now" in named.split(" or ")) == (within and now >= ALPHA), text
        assert ("after the reveal" in named.split(" or ")) == (within and later >= ALPHA), text

    check()


def test_a_verdict_answers_each_question_from_the_scores():
    """keeps is joint J; flattered needs 20+ points of current over joint J and a
    significant McNemar; beats floor? is the floor check (no probe: it says so)."""
    rows = (
        _reads("flattered", [1] * 24, [1] * 2 + [0] * 22)  # 24/24 now, 2/24 later
        + _reads("honest", [1] * 12 + [0] * 12, [1] * 12 + [0] * 12)
        + _reads("close", [1] * 5 + [0] * 19, [1] * 2 + [0] * 22)  # 13 points: not flattered
        + _reads("perfect", [1] * 24, [1] * 24)
    )
    found = _verdicts(_scored(rows))
    assert found["flattered"].keeps() == "2/24 [0.02, 0.26]"
    assert found["flattered"].flattered
    assert found["flattered"].flatter_p < 0.05
    assert found["flattered"].cells()["flattered"] == "yes: 24/24"
    assert not found["honest"].flattered
    assert found["honest"].flatter_p is None
    assert not found["close"].flattered
    assert found["close"].flatter_p is None
    assert {v.floor for v in found.values()} == {"no probe"}
    # every built-in probe at 12/24: perfect beats them (12 pairs only it passes), honest
    # ties them; the floor is all of them: beating one is "1/10 probes", not "yes"
    from audit.scoring._verdicts import builtin_probes

    def probe(name: str) -> list[dict]:
        return _reads(name, [1] * 12 + [0] * 12, [0] * 12 + [1] * 12, kind="probe")

    probed = _scored(rows + [r for name in sorted(builtin_probes()) for r in probe(name)])
    found = _verdicts(probed)
    assert found["perfect"].floor == "yes"
    assert found["honest"].floor == "no"
    assert found["probe_lowrev"].cells()["floor"] == "-"  # the floor itself
    found = _verdicts(_scored(rows + probe("probe_lowrev")))
    assert found["perfect"].floor == f"1/{len(builtin_probes())} probes"
    # the selection text says "within noise" only where no p beside it is significant
    (warning,) = selection_warnings(probed)
    text = warning.text()
    assert "uncorrected" in text
    if warning.within_noise:
        assert all(float(p) >= 0.05 for p in re.findall(r"p (\d\.\d+(?:e-\d+)?)", text))


# ---------------------------------------------------------------- tests of the gap


def test_sign_flip_p_is_exact_for_few_pairs():
    assert sign_flip_p([1, 1, 1, 1]) == pytest.approx(2 / 16)
    assert sign_flip_p([0, 0, 0]) == 1.0
    assert sign_flip_p([1, -1]) == 1.0
    assert sign_flip_p([0.5, 0.25, 1.0]) == pytest.approx(2 / 8)
    big = np.full(30, 0.5)
    assert sign_flip_p(big, seed=1) == sign_flip_p(big, seed=1) < 0.001


# ------------------------------------------------------------- preregistered reference


def test_a_preregistered_reference_is_stored_and_used(tmp_path: Path):
    out = tmp_path / "prereg"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 "frontier,frontier_latest,tail", "--transforms", "identity",
                 "--reference", "frontier_latest", "--workers", "1", "--quiet",
                 "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert config_of(out)["reference"] == "frontier_latest"
    assert run("report", str(out)).exit_code == 0
    comparisons = pd.read_csv(out / "report" / "comparisons.csv")
    assert set(comparisons["a"]) == {"frontier_latest"}
    assert set(comparisons["reference"]) == {"preregistered"}
    md = " ".join((out / "report" / "report.md").read_text().split())
    assert "Comparisons: each condition against frontier_latest, preregistered" in md
    # a reference named after the run is post hoc, and says what was preregistered
    later = run("report", str(out), "--reference", "frontier", "--out", str(tmp_path / "later"))
    assert later.exit_code == 0, later.output
    assert set(pd.read_csv(tmp_path / "later" / "comparisons.csv")["reference"]) == {"post hoc"}
    md = " ".join((tmp_path / "later" / "report.md").read_text().split())
    assert "Post hoc reference." in md
    assert "The run preregistered frontier_latest; these are not the preregistered" in md
    bad = run("run", "--preset", "cca-pilot", "--conditions", "frontier", "--reference",
              "nope", "--out", str(tmp_path / "bad"))  # fmt: skip
    assert bad.exit_code == 2
    assert "--reference: 'nope' is not one of the run's conditions" in bad.output


def test_a_model_written_condition_needs_the_llm_stage(tmp_path: Path):
    result = run("run", "--conditions", "prose_high", "--transforms", "identity",
                 "--out", str(tmp_path / "x"))  # fmt: skip
    assert result.exit_code == 2
    assert "prose_high writes with a model: give it in --llm-conditions" in result.output
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------- replication


def test_replication_across_generation_seeds(tmp_path: Path):
    out = tmp_path / "rep"
    result = run("run", "--seeds", "1,2", "--conditions", "frontier,full", "--transforms",
                 "identity", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    replication = json.loads((out / "replication.json").read_text())
    assert replication["seeds"] == [1, 2]
    frontier = next(s for s in replication["systems"] if s["condition"] == "frontier")
    per_seed = frontier["joint_J"]["per_seed"]
    for seed in ("1", "2"):
        seed_summary = summary_of(out / f"seed-{seed}")
        assert per_seed[seed] == {
            "k": cell(seed_summary, "frontier")["source pairs"]["joint_J"]["k"],
            "n": 84,
        }
    pooled = frontier["joint_J"]["pooled"]
    assert (pooled["k"], pooled["n"]) == (per_seed["1"]["k"] + per_seed["2"]["k"], 168)
    assert 0 <= frontier["joint_J"]["heterogeneity_p"] <= 1
    # the two seeds' datasets differ: other histories under the same ids
    assert config_of(out / "seed-1")["pairs_sha256"] != config_of(out / "seed-2")["pairs_sha256"]
    assert "pooled" in result.output
    assert run("report", str(out)).exit_code == 0
    assert "per seed and pooled" in (out / "report" / "replication.md").read_text()
    once = run("run", "--seeds", "3", "--out", str(tmp_path / "one"))
    assert once.exit_code == 2
    assert "at least two seeds" in once.output


# --------------------------------------------------------------------- compare


def test_compare_pairs_histories_by_content_not_by_id(tmp_path: Path):
    common = ["--conditions", "frontier", "--transforms", "identity", "--workers", "1", "--quiet"]
    assert run("run", "--preset", "cca-pilot", *common, "--out", str(tmp_path / "a")).exit_code == 0
    assert run("run", "--preset", "cca-pilot", *common, "--seeds", "5,6",
               "--out", str(tmp_path / "other")).exit_code == 0  # fmt: skip
    # the same command again: another run of the same pairs (a copy is refused: one run id)
    assert (
        run("run", "--preset", "cca-pilot", *common, "--out", str(tmp_path / "a-again")).exit_code
        == 0
    )
    same = run("compare", str(tmp_path / "a"), str(tmp_path / "a-again"), "--out",
               str(tmp_path / "cmp-same"))  # fmt: skip
    assert same.exit_code == 0, same.output
    assert pd.read_csv(tmp_path / "cmp-same" / "compare.csv")["n_pairs"].tolist() == [84]
    # each system's verdict in its own run, the text of its run's summary.json
    own = pd.read_csv(tmp_path / "cmp-same" / "systems.csv")
    (verdict,) = json.loads((tmp_path / "a" / "summary.json").read_text())["verdicts"]
    expected = f"{verdict['keeps_k']}/{verdict['n']} [{verdict['keeps_low']:.2f}"
    assert own["own_keeps"].str.startswith(expected).all(), own["own_keeps"]
    assert set(own["own_floor"]) == {"no probe"}  # frontier alone: nothing to beat
    other = run("compare", str(tmp_path / "a"), str(tmp_path / "other" / "seed-5"), "--out",
                str(tmp_path / "cmp-other"))  # fmt: skip
    # rollback-0000 of seed 0 and of seed 5 are different histories: nothing is shared,
    # and the command says so and fails (it exited 0 with only a line in compare.md)
    assert other.exit_code == 2, other.output
    assert "the runs share no source pair" in " ".join(other.output.split())
    systems = pd.read_csv(tmp_path / "cmp-other" / "systems.csv")
    assert systems["joint_J_n"].tolist() == [0, 0]
    compared = (tmp_path / "cmp-other" / "compare.md").read_text()
    assert "matched by content, not by id" in compared
    assert "No source pair is shared by every run: nothing to compare" in " ".join(compared.split())
    assert not (tmp_path / "cmp-other" / "compare.csv").exists()  # no test on nothing
    twice = run("compare", str(tmp_path / "a"), str(tmp_path / "a"))
    assert twice.exit_code == 2
    unknown = run("compare", str(tmp_path / "a"), str(tmp_path / "a-again"), "--reference",
                  "nope")  # fmt: skip
    assert unknown.exit_code == 2
    assert "no condition 'nope'" in unknown.output


def test_a_family_may_not_be_called_all(tmp_path: Path):
    assert run("generate", "--preset", "cca-pilot", "--out", str(tmp_path / "p")).exit_code == 0
    lines = (tmp_path / "p" / "pairs.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["family"] = "all"
    (tmp_path / "bad.jsonl").write_text(json.dumps(first) + "\n")
    result = run("run", "--pairs", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "r"))
    assert result.exit_code == 2
    assert "family 'all' is reserved" in result.output


def test_csv_of_results_never_loses_the_kind_of_a_condition(tmp_path: Path):
    out = tmp_path / "k"
    assert run("run", "--preset", "cca-pilot", "--conditions", "full,probe_newest",
               "--transforms", "identity", "--quiet", "--out", str(out)).exit_code == 0  # fmt: skip
    with result_csv(out).open(newline="") as handle:
        kinds = {(r["condition"], r["kind"]) for r in csv.DictReader(handle)}
    assert kinds == {("full", "archive"), ("probe_newest", "probe")}


# ------------------------------------------------ the floor check is a test


def _joint(condition: str, kind: str, passes: dict[str, list[int]]) -> list[dict]:
    """Rows of one condition whose joint J passes (1) or fails (0) per source pair and
    transform (one instance each; current and override always right)."""
    return [row for transform, values in passes.items()
            for row in _reads(condition, [1] * len(values), values, kind=kind,
                              transform=transform)]  # fmt: skip


def _floor(*conditions: list[dict]) -> dict[str, dict]:
    from audit.scoring._summary import summary_of as summarize_scores

    rows = [row for rows in conditions for row in rows]
    summary = summarize_scores(_scored(rows), {}, len(rows), 24)
    return {m["condition"]: m for m in summary["probe_matches"]}


def test_beating_a_probe_under_one_transform_is_not_escaping_the_floor():
    # the methods review's case: the probe beats the condition at identity (13 vs 11 of
    # 24), the condition beats it under rename; before, one transform sufficed to escape
    below = _joint("c", "strict", {"identity": [1] * 11 + [0] * 13, "rename": [1] * 24})
    probe = _joint("probe_lowrev", "probe", {"identity": [1] * 13 + [0] * 11, "rename": [0] * 24})
    found = _floor(below, probe)["c"]
    identity, rename = found["tests"]
    assert (identity["transform"], identity["probe"], identity["beats"]) == (
        "identity", "probe_lowrev", False)  # fmt: skip
    assert identity["delta"] == pytest.approx(-2 / 24, abs=1e-4)
    assert rename["beats"]  # 24 discordant pairs one way: p = 2 * 0.5**24
    assert rename["p"] == pytest.approx(2 * 0.5**24)
    assert [p["probe"] for p in found["probes"]] == ["probe_lowrev"]
    assert found["missing_transforms"] == ["rerev"]


def test_a_condition_above_the_probe_but_not_significantly_is_flagged():
    # 14 vs 12 of 24 under both transforms: above, within noise
    above = _joint("c", "strict", {t: [1] * 14 + [0] * 10 for t in ("identity", "rename")})
    probe = _joint("probe_x", "probe", {t: [0] * 2 + [1] * 12 + [0] * 10
                                         for t in ("identity", "rename")})  # fmt: skip
    found = _floor(above, probe)["c"]
    assert all(t["delta"] > 0 and not t["beats"] for t in found["tests"])
    assert found["probes"] == [{"probe": "probe_x", "heuristic": "shortcut", "exploits": "",
                                "broken_by": []}]  # fmt: skip


def test_the_floor_check_is_an_intersection_union_test_at_0_05():
    # 6 discordant pairs one way under each of two transforms: p = 1/32 each. The claim
    # "beats it under every transform" holds only if each test rejects: at 0.05 each,
    # with no correction (Berger 1982). Holm over its own tests (1/16 here) made the
    # verdict depend on its other tests: a condition whose other p-values were tiny
    # passed a weak identity test that a condition with larger ones failed
    six = [1] * 6 + [0] * 18
    nothing = {"identity": [0] * 24, "rename": [0] * 24}
    assert _floor(_joint("c", "strict", {"identity": six, "rename": six}),
                  _joint("probe_x", "probe", nothing)) == {}  # fmt: skip
    five = [1] * 5 + [0] * 19  # p = 1/16 at identity: not beaten, however strong rename is
    found = _floor(_joint("c", "strict", {"identity": five, "rename": [1] * 24}),
                   _joint("probe_x", "probe", nothing))["c"]  # fmt: skip
    assert [t["beats"] for t in found["tests"]] == [False, True]
    assert found["tests"][0]["p"] == pytest.approx(1 / 16)


def test_every_probe_is_the_floor_not_the_best_one_by_rate():
    # an adversary's plugin probe, better by rate than the real probes but beaten by its
    # author's compressor, made it "beat the floor": it was tested against the best
    # probe by rate only. 18 of 24 against probe_a's 12 (6 pairs one way: p 1/32) and
    # probe_b's 11 (13 against 6: p 0.17)
    cond = _joint("c", "strict", {"identity": [1] * 18 + [0] * 6})
    best = _joint("probe_a", "probe", {"identity": [1] * 12 + [0] * 12})
    other = _joint("probe_b", "probe", {"identity": [1] * 5 + [0] * 13 + [1] * 6})
    assert _floor(cond, best) == {}
    found = _floor(cond, best, other)["c"]
    (test,) = found["tests"]
    assert (test["probe"], test["beats"]) == ("probe_b", False)
    assert test["p"] == pytest.approx(0.167, abs=1e-3)


def test_sign_flip_p_counts_every_assignment_and_draws_the_seeded_signs():
    """The exact p is the share of all 2^n sign assignments (built now from half of
    them, cached per n) and the Monte Carlo p draws what ``rng.choice`` drew: every
    p of a summary stays the number it was."""
    import itertools

    from hypothesis import given, settings
    from hypothesis import strategies as st

    def by_definition(d: list[float], seed: int) -> float:
        moved = np.array([x for x in d if x != 0], dtype=np.float64)
        if moved.size == 0:
            return 1.0
        observed = abs(moved.sum()) - 1e-12
        if moved.size <= 16:
            signs = np.array(list(itertools.product((1.0, -1.0), repeat=moved.size)))
            return float(np.mean(np.abs(signs @ moved) >= observed))
        drawn = np.random.default_rng(seed).choice((1.0, -1.0), size=(10_000, moved.size))
        return float((np.sum(np.abs(drawn @ moved) >= observed) + 1) / 10_001)

    rates = st.integers(-10, 10).map(lambda k: k / 10) | st.integers(-6, 6).map(lambda k: k / 7)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(rates, max_size=24), st.integers(0, 3))
    def check(d: list[float], seed: int) -> None:
        assert sign_flip_p(d, seed=seed) == by_definition(d, seed)

    check()


def test_the_kept_signs_are_each_sizes_own_draw_within_their_bound(monkeypatch):
    """The drawn signs are kept, one stream a seed, within ``SIGNS_BYTES``: a size
    asked for in any order gets the matrix ``default_rng(seed)`` draws for it, and a p
    after an eviction is the same."""
    from audit.scoring import _gaps

    monkeypatch.setattr(_gaps, "_SIGNS", {})
    monkeypatch.setattr(_gaps, "SIGNS_BYTES", 8 * 1_000 * 45)  # one seed's stream, not two
    for n, seed in [(20, 0), (17, 0), (40, 0), (23, 1), (40, 0), (31, 1), (18, 0)]:
        drawn = np.random.default_rng(seed).choice((1, -1), size=(1_000, n))
        assert np.array_equal(_gaps._random_signs(1_000, n, seed), drawn)
        assert sum(kept.nbytes for kept in _gaps._SIGNS.values()) <= _gaps.SIGNS_BYTES
        assert list(_gaps._SIGNS) == [seed]  # the other seed's went first
    differences = np.linspace(-0.3, 0.9, 40)
    first = [sign_flip_p(differences[:n], resamples=1_000, seed=n % 2) for n in range(17, 41)]
    again = [sign_flip_p(differences[:n], resamples=1_000, seed=n % 2) for n in range(17, 41)]
    assert again == first
    drawn = np.random.default_rng(1).choice((1.0, -1.0), size=(1_000, 17))
    moved = differences[:17]
    expected = (np.sum(np.abs(drawn @ moved) >= abs(moved.sum()) - 1e-12) + 1) / 1_001
    assert first[0] == expected


def test_a_monte_carlo_sign_flip_p_is_never_zero():
    # every one of 40 differences the same way: no sampled assignment reaches it, and a
    # p of 0 (printed "< 1e-15") claimed what 10,000 draws cannot show
    p = sign_flip_p([0.5] * 40, resamples=10_000)
    assert p == pytest.approx(1 / 10_001)


# two probes: the best under each transform is the one compared; 20 vs 4 of 24
_FIRST = _joint("probe_a", "probe", {"identity": [0] * 20 + [1] * 4, "permute": [0] * 24})
_SECOND = _joint("probe_b", "probe", {"identity": [0] * 24, "permute": [0] * 20 + [1] * 4})
_SEVEN = {t: [1] * 7 + [0] * 17 for t in ("identity", "rename")}  # 7 pairs one way: p 1/64
_NOTHING = _joint("probe_x", "probe", {"identity": [0] * 24, "rename": [0] * 24})


@pytest.mark.parametrize(
    "conditions",
    [
        pytest.param(
            [_joint("c", "strict", {t: [1] * 20 + [0] * 4 for t in ("identity", "permute")}),
             _FIRST, _SECOND],
            id="beats-the-best-probe-everywhere",
        ),
        # a condition that passes nothing needs no probe to be doubted
        pytest.param([_joint("c", "strict", {"identity": [0] * 24}), _FIRST], id="passes-nothing"),
        # Holm across the whole run made a condition's flag depend on what else was in the
        # run (a held-out compressor was flagged beside two others, not when run alone)
        pytest.param([_joint("c", "strict", _SEVEN), _NOTHING], id="alone"),
        pytest.param([*(_joint(c, "strict", _SEVEN) for c in "cde"), _NOTHING], id="beside-two"),
    ],
)  # fmt: skip
def test_a_condition_that_beats_the_floor_is_not_flagged_whatever_else_ran(conditions):
    assert _floor(*conditions) == {}


# ------------------------------------------------ an adversary's second review

ADVERSARY = r'''
import hashlib
from compressors import ChatUnavailableError, Compressor, Stream, pack_positions
from histories import PRESETS, generate, transform

PAIRS = PRESETS["cca-pilot"].model_copy(update={"pairs_per_family": 1})


def _task_lines():
    """The task records of the public data and of its transformed instances, as
    published: the generator's seed and the audit's default transform seed, 0."""
    lines = set()
    for pair in generate(PAIRS):
        for instance in [pair, *transform(pair, "disguise", 2, seed=0)]:
            keys = set(instance.task_keys) | set(instance.query)
            for record in instance.all_records():
                if getattr(record, "key", None) in keys:
                    lines.add(record.canonical_line)
    return lines


class Remember(Compressor):
    """Resolves nothing: keeps the records it remembers from the public data."""

    name = "remember"
    TABLE = _task_lines()

    def update(self, memory, chunk, query_keys, budget):
        stream = Stream.of(memory, chunk)
        order = sorted(range(len(stream)), key=lambda p: (stream.lines[p] not in self.TABLE, -p))
        return stream.dump(pack_positions(order, stream.sizes, budget))


class NoCollide(Compressor):
    """tail, plus one junk record that differs between the variants."""

    name = "no_collide"

    def update(self, memory, chunk, query_keys, budget):
        stream = Stream.of(memory, chunk)
        seen = hashlib.sha256("".join(stream.lines).encode()).hexdigest()[:8]
        newest = [p for p in range(len(stream) - 1, -1, -1)
                  if getattr(stream.records[p], "key", None) != "zz_junk"]
        kept = stream.dump(pack_positions(newest, stream.sizes, budget - 80, contiguous=True))
        junk = '{"id":"zz' + seen + '","op":"set","key":"zz_junk","value":"' + seen + '","rev":1}'
        return (kept + "\n" + junk) if kept else junk


class PleadOutage(Compressor):
    """Says it is "unavailable" wherever it would answer wrong: NA instead of 0."""

    name = "plead_outage"

    def update(self, memory, chunk, query_keys, budget):
        if len(chunk.records) < 3:  # a future's chunk
            raise ChatUnavailableError("the memory service is down")
        stream = Stream.of(memory, chunk)
        return stream.dump(pack_positions(range(len(stream) - 1, -1, -1), stream.sizes, budget))
'''


@pytest.fixture
def adversary(plugin) -> str:
    return plugin("adversary_plugin", ADVERSARY)


def _one_pair_a_family(tmp_path: Path) -> str:
    result = run("generate", "--preset", "cca-pilot", "--pairs-per-family", "1", "--out",
                 str(tmp_path / "pairs"))  # fmt: skip
    assert result.exit_code == 0, result.output
    return str(tmp_path / "pairs" / "pairs.jsonl")


def test_a_memory_of_the_public_transforms_is_blind_under_a_drawn_seed(
    adversary: str, tmp_path: Path
):
    # the transform seed was 0 by default, so every transformed instance was as public
    # as the data: a table of the task records of the default instances scored 84/84
    # under every transform and "beat the floor". The seed is now drawn for each run
    pairs = _one_pair_a_family(tmp_path)
    scores = {}
    for name, seed in (("public", ["--seed", "0"]), ("drawn", [])):
        out = tmp_path / name
        result = run("run", "--pairs", pairs, "--conditions", f"{adversary}:Remember",
                     "--transforms", "identity,disguise:2", "--workers", "1", "--quiet",
                     "--out", str(out), *seed)  # fmt: skip
        assert result.exit_code == 0, result.output
        scores[name] = (config_of(out)["seed"], cell(summary_of(out), "remember", "disguise"))
    assert scores["public"][0] == 0
    assert scores["drawn"][0] != 0
    public, drawn = (s[1]["blocks"]["joint_J"] for s in scores.values())
    assert public["n"] == drawn["n"] == 12
    assert public["k"] >= 10, public  # remembered
    # blind: chance, not the table (k 0 to 4 over the drawn seeds 1-40, 4 at two of them,
    # which the bound of 3 this test had made a flake of about one run in twenty)
    assert drawn["k"] <= 6, drawn
    # the same --out again resumes with the seed it drew, not a new one
    result = run("run", "--pairs", pairs, "--conditions", f"{adversary}:Remember",
                 "--transforms", "identity,disguise:2", "--workers", "1", "--quiet",
                 "--out", str(tmp_path / "drawn"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert config_of(tmp_path / "drawn")["seed"] == scores["drawn"][0]


def test_junk_that_tells_the_variants_apart_is_still_a_collision(adversary: str, tmp_path: Path):
    # collisions were byte identity: one junk record holding a hash of what was seen
    # made every memory pair differ, and collisions fell from 12/84 to 0/84
    pairs = _one_pair_a_family(tmp_path)
    out = tmp_path / "run"
    result = run("run", "--pairs", pairs, "--conditions", f"tail,{adversary}:NoCollide",
                 "--transforms", "identity", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    tail, junk = (cell(summary, c)["source pairs"]["collision"] for c in ("tail", "no_collide"))
    assert tail["k"] > 0
    assert junk["k"] >= tail["k"] - 1, (tail, junk)


def test_an_in_process_compressor_cannot_plead_an_outage(adversary: str, tmp_path: Path):
    # an external system's outage is NA (bounds); a plugin that raised the same error
    # wherever it would answer wrong took those reads out of its score (70..78/84)
    pairs = _one_pair_a_family(tmp_path)
    out = tmp_path / "run"
    result = run("run", "--pairs", pairs, "--conditions", f"{adversary}:PleadOutage",
                 "--transforms", "identity", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 5, result.output  # a compressor that raised
    frame = pd.read_parquet(out / "results.parquet")
    assert (frame["outcome"] == "error").all()
    assert frame["correct"].eq(0).all()
    assert "the memory service is down" in result.output


def test_a_condition_may_not_take_a_built_in_name(adversary: str, tmp_path: Path):
    # compare pairs conditions by label: `name=frontier_alpha` on a plugin was reported
    # as frontier_alpha +0.60 against the default run, with no warning
    for spec in (f"{adversary}:Remember:name=frontier_alpha", "cmd:name=tail,run=cat"):
        result = run("run", "--conditions", spec, "--transforms", "identity", "--quiet",
                     "--out", str(tmp_path / "x"))  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "a built-in condition's name" in result.output


def test_flattered_is_each_conditions_own_answer():
    # flattered? was Holm-corrected across the run's verdicts: p 0.043 alone gave yes,
    # beside a second borderline condition no
    borderline = _reads("b", [1] * 10 + [0] * 14, [1] * 4 + [0] * 20)  # 6 one way: p 1/32
    other = _reads("c", [1] * 10 + [0] * 14, [1] * 4 + [0] * 20)
    for rows in (borderline, borderline + other):
        found = _verdicts(_scored(rows))
        assert found["b"].flattered
        assert found["b"].flatter_p == pytest.approx(1 / 32)


def _floor_finding(condition: str, tests: list[tuple[float, float]]) -> Any:
    """A finding of ``condition`` with one test a transform: (delta, p)."""
    from audit.scoring._probes import FloorFinding, FloorTest, ProbeFacts

    return FloorFinding(
        reader="exact", budget=1200, condition=condition,
        transforms=[f"t{i}" for i in range(len(tests))],
        tests=[
            FloorTest(transform=f"t{i}", probe="probe_component", condition_rate=0.4,
                      probe_rate=0.4 - delta, n_pairs=84, delta=delta, p=p)
            for i, (delta, p) in enumerate(tests)
        ],
        probes=[ProbeFacts(probe="probe_component", heuristic="label-graph")],
        missing_transforms=[], advice="no transform breaks this probe",
    )  # fmt: skip


def test_a_floor_line_counts_the_other_transforms_that_did_not_beat_it():
    """ "not beaten under 6 more of 7 transforms" read awkwardly to a new user (6 more
    than what, of 7?): the line names the first failed test, then how many others
    failed, of all tested."""
    three = _floor_finding("tail", [(-0.05, 0.4), (-0.3, 1e-6), (-0.1, 0.2)])
    assert three.line().endswith("; not beaten under 2 other transforms either (3 of the 3 tested)")
    two = _floor_finding("tail", [(-0.05, 0.4), (0.3, 1e-6), (-0.1, 0.2)])
    assert two.line().endswith("; not beaten under 1 other transform either (2 of the 3 tested)")
    assert "either" not in _floor_finding("tail", [(-0.05, 0.4), (0.3, 1e-6)]).line()


def test_the_floor_says_when_a_probe_scores_significantly_higher():
    """A new user read "this audit cannot tell 6 of 6 strict conditions from a
    label-graph heuristic" as "about the same", where the probe scored 62/84 against 34/84
    at best (p < 1e-6): the floor's one text now says which conditions a probe scores
    significantly higher than (the console and the report print it alike)."""
    from audit.scoring import floor_message

    beaten = _floor_finding("frontier", [(-0.3, 1e-6), (0.1, 0.2)])
    level = _floor_finding("tail", [(-0.05, 0.4)])
    above = _floor_finding("bm25", [(0.2, 0.001), (0.0, 1.0)])
    assert floor_message([beaten], 6).beaten == "a probe scores significantly higher than it"
    both = floor_message([beaten, _floor_finding("type_pin", [(-0.4, 1e-9)])], 6)
    assert both.beaten == "a probe scores significantly higher than each of them"
    some = floor_message([beaten, level, above], 6)
    assert some.beaten == "a probe scores significantly higher than 1 of them (frontier)"
    assert floor_message([level, above], 6).beaten == ""
    assert some.headline.startswith("This audit cannot tell 3 of 6 strict conditions")
