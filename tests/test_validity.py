"""An audit that cannot be gamed: shortcuts exposed, probes as the floor, archives as
ceilings, preregistered references, replication across seeds, content-matched
comparisons.  Real runs through the command line, scored by audit.scoring."""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.rundir import normalize
from audit.scoring import score_results, selection_warnings
from audit.scoring._gaps import sign_flip_p

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
def shortcut_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "shortcut_plugin.py").write_text(textwrap.dedent(SHORTCUT))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shortcut_plugin", raising=False)
    return "shortcut_plugin"


def run(*args: str):
    return runner.invoke(app, list(args))


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def cell(summary: dict, condition: str, transform: str = "identity") -> dict:
    return next(
        e
        for e in summary["scores"]
        if e["condition"] == condition and e["transform"] == transform and e["family"] == "all"
    )


def rate(kn: dict) -> float:
    return kn["k"] / kn["n"]


# ------------------------------------------------------------------ shortcuts exposed


def test_a_label_length_shortcut_is_exposed_by_relabel_and_flagged_by_a_probe(
    shortcut_plugin: str, tmp_path: Path
):
    # the paper's label shape: task ids are shorter, so "shortest ids first" looks perfect
    out = tmp_path / "paper"
    shortest = f"{shortcut_plugin}:ShortestIds"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"{shortest},probe_shortest,frontier", "--transforms",
                 "identity,rename:3,permute:3,relabel:3", "--workers", "1", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    identity = cell(summary, shortest)
    assert identity["source pairs"]["reveal"]["k"] == 24  # 24/24: it looks sufficient
    assert rate(cell(summary, shortest, "rename")["blocks"]["reveal"]) == 1.0  # same lengths
    relabelled = rate(cell(summary, shortest, "relabel")["blocks"]["reveal"])
    assert relabelled < 0.5  # relabel redraws lengths: the shortcut collapses
    gap = next(
        g for g in summary["shortcut_gaps"]
        if g["condition"] == shortest and g["transform"] == "relabel"
    )  # fmt: skip
    assert gap["reveal_gap_blocks"] > 0.5
    assert gap["reveal_gap_low"] > 0.3  # the interval excludes no gap
    assert gap["reveal_gap_p"] < 0.01
    matches = {(m["condition"], m["probe"]) for m in summary["probe_matches"]}
    assert (shortest, "probe_shortest") in matches  # a naming heuristic does as well
    assert "cannot tell shortcut_plugin:ShortestIds from a naming heuristic" in " ".join(
        result.output.split()
    )
    assert ("frontier", "probe_shortest") not in matches  # relabel tells frontier apart


def test_without_relabel_the_audit_says_it_cannot_tell(shortcut_plugin: str, tmp_path: Path):
    out = tmp_path / "no-relabel"
    shortest = f"{shortcut_plugin}:ShortestIds"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"frontier,{shortest},probe_shortest", "--transforms", "identity,rename:3",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    matches = {(m["condition"], m["probe"]) for m in summary_of(out)["probe_matches"]}
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
    reveal = cell(summary_of(out), f"{shortcut_plugin}:ShortestIds")["source pairs"]["reveal"]
    assert reveal["k"] <= 12  # no tell in the labels: no better than chance-ish


def test_a_claim_of_order_invariance_is_checked(shortcut_plugin: str, tmp_path: Path):
    out = tmp_path / "order"
    liar = f"{shortcut_plugin}:TailClaimingOrder"
    result = run("run", "--preset", "cca-pilot", "--conditions",
                 f"full,dependency_closure,probe_shortest,{liar}", "--transforms",
                 "identity,permute:3", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(out)
    for condition in ("full", "dependency_closure"):
        violations = cell(summary, condition, "permute")["equivariance_violations"]["reads"]
        assert violations["n"] == 24 * 3 * 6  # every read of a claimant is checked
        assert violations["k"] == 0, condition
    # a greedy packer claims nothing (its memory depends on the path): nothing is checked
    unclaimed = cell(summary, "probe_shortest", "permute")["equivariance_violations"]["reads"]
    assert unclaimed["n"] == 0
    liar_violations = cell(summary, liar, "permute")["equivariance_violations"]["reads"]
    assert liar_violations["k"] > 0
    (alert,) = summary["equivariance_alerts"]  # the false claim, and only it
    assert (alert["condition"], alert["check"], alert["transform"]) == (liar, "order", "permute")
    assert alert["k"] > 0
    assert alert["n"] == 24
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
'''


@pytest.fixture
def gaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "gaming_plugin.py").write_text(GAMING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gaming_plugin", raising=False)
    return "gaming_plugin"


def matched(summary: dict) -> dict[tuple[str, str], dict]:
    return {(m["condition"], m["probe"]): m for m in summary["probe_matches"]}


def gap_of(summary: dict, condition: str, transform: str) -> dict:
    return next(
        g for g in summary["shortcut_gaps"]
        if g["condition"] == condition and g["transform"] == transform
    )  # fmt: skip


def test_revision_heuristics_are_matched_by_a_probe_on_the_default_pilot(
    gaming: str, tmp_path: Path
):
    # before: on plain distractors they beat every packer (joint J 21/24 and 23/24
    # against frontier_alpha's 20/24) with no gap under any transform and no probe
    # matching; the default pilot's distractors are task-like, and probe_lowrev runs
    low, odd = f"{gaming}:QueryLowRev", f"{gaming}:QueryOddLowRev"
    out = tmp_path / "pilot"
    result = run("run", "--preset", "cca-pilot", "--conditions",
                 f"frontier_alpha,{low},{odd},probe_lowrev,probe_rare_op_or_value",
                 "--transforms", "identity,rerev:3,revalue:3", "--workers", "1", "--quiet",
                 "--out", str(out))  # fmt: skip
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
    assert re.search(r"cannot tell \d conditions from an? [a-z, -]*revision[a-z -]* "
                     r"heuristic at 1200 B", said), said  # fmt: skip
    assert f"{low} probe_lowrev" in said
    assert f"{odd} probe_lowrev" in said
    assert "probe_lowrev exploits the query key, then the smallest revisions" in said


def test_revision_and_value_heuristics_collapse_under_rerev_and_revalue(
    gaming: str, tmp_path: Path
):
    # the paper's plain distractors, where the heuristics work: the new transforms
    # break them (a shortcut gap) or a probe matches them
    low, odd = f"{gaming}:QueryLowRev", f"{gaming}:QueryOddLowRev"
    out = tmp_path / "paper"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"frontier_alpha,{low},{odd},probe_lowrev,probe_rare_op_or_value",
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
    low, odd = f"{gaming}:QueryLowRev", f"{gaming}:QueryOddLowRev"
    out = tmp_path / "no-rerev"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 f"{low},{odd},probe_lowrev,probe_rare_op_or_value", "--transforms",
                 "identity,rename:2", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    found = matched(summary_of(out))
    assert found[(low, "probe_lowrev")]["missing_transforms"] == ["rerev"]
    surface = found[(odd, "probe_rare_op_or_value")]
    assert surface["heuristic"] == "record-surface"
    assert surface["missing_transforms"] == ["revalue", "rerev"]
    said = " ".join(result.output.split())
    assert "cannot tell 2 conditions from a revision or record-surface heuristic" in said
    assert f"{low} probe_lowrev, probe_rare_op_or_value {odd} probe_rare_op_or_value" in said
    assert (
        "add rerev and revalue to the run's transforms (they break these probes) before "
        "trusting each condition's score" in said
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


def test_a_compressor_that_raises_on_the_hard_pairs_gains_nothing(gaming: str, tmp_path: Path):
    # before: its errors left adequacy and collisions, which read 12/12 and 0/12
    raiser = f"{gaming}:RaiseWhenHard"
    out = tmp_path / "raise"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions", raiser,
                 "--transforms", "identity", "--workers", "1", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    entry = cell(summary_of(out), raiser)
    pairs = entry["source pairs"]
    assert entry["outcomes (reads)"]["error"] == 72  # 12 of 24 pairs raise
    assert pairs["adequacy"] == {"k": 12, "k_high": 12, "n": 24}
    assert pairs["collision"] == {"k": 12, "k_high": 12, "n": 24}
    assert pairs["joint_J"]["n"] == 24
    assert "collision" not in entry["reads"]  # two memories, not one read: no read count
    assert "each counts against it (scored 0, no adequate memory, a collision)" in " ".join(
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
    assert "full (archive)" in result.output
    assert run("report", str(out)).exit_code == 0
    comparisons = pd.read_csv(out / "report" / "comparisons.csv")
    assert set(comparisons["a"]) == {"frontier_alpha"}  # the best strict condition
    assert set(comparisons["reference"]) == {"from the data"}  # chosen after the run
    md = (out / "report" / "report.md").read_text()
    assert "Ceiling at 1200 B: **full**" in md
    assert "chosen from the data: post hoc" in " ".join(md.split())
    assert "Floor (best probe) at 1200 B: **probe_shortest**" in md


def test_selection_claims_only_what_holds_whatever_the_na_reads_were():
    def reads(condition: str, current: list, reveal: list) -> list[dict]:
        rows = []
        for index, (now, later) in enumerate(zip(current, reveal, strict=True)):
            for variant in ("A", "B"):
                for branch, value in (("current", now), ("reveal", later), ("override", 1)):
                    rows.append({
                        "pair_id": f"p{index}", "source_pair_id": f"p{index}", "family": "f",
                        "variant": variant, "branch": branch, "repeat": 0, "budget": 1200,
                        "condition": condition, "kind": "strict", "transform": "identity",
                        "reader": "llm", "outcome": "na" if value is None else "pass",
                        "correct": value,
                    })  # fmt: skip
        return rows

    # a: current 2/4, reveal 1/4; b: current 1..2/4 (one NA), reveal 2/4
    frame = normalize(
        pd.DataFrame(reads("a", [1, 1, 0, 0], [1, 0, 0, 0]) + reads("b", [1, None, 0, 0],
                                                                       [1, 1, 0, 0]))
    )  # fmt: skip
    (warning,) = selection_warnings(score_results(frame))
    assert warning["inversions"] == []  # b may be as good now: no inversion is claimed
    assert set(warning["best_by_current"]) == {"a", "b"}
    assert warning["best_by_reveal"] == ["b"]


def _reads(condition: str, current: list, reveal: list) -> list[dict]:
    """Exact-reader rows of one condition: per source pair, its current and reveal
    verdicts on both variants (override always passes)."""
    rows = []
    for index, (now, later) in enumerate(zip(current, reveal, strict=True)):
        for variant in ("A", "B"):
            for branch, value in (("current", now), ("reveal", later), ("override", 1)):
                rows.append({
                    "pair_id": f"p{index}", "source_pair_id": f"p{index}", "family": "f",
                    "variant": variant, "branch": branch, "repeat": 0, "budget": 1200,
                    "condition": condition, "kind": "strict", "transform": "identity",
                    "reader": "exact", "outcome": "pass" if value else "wrong_log",
                    "correct": value,
                })  # fmt: skip
    return rows


def test_a_reversal_of_a_pair_or_two_is_within_noise():
    # a: current 24/24, reveal 10/24; b: current 23/24, reveal 11/24
    close = normalize(pd.DataFrame(
        _reads("a", [1] * 24, [1] * 10 + [0] * 14)
        + _reads("b", [1] * 23 + [0], [1] * 11 + [0] * 13)
    ))  # fmt: skip
    (warning,) = selection_warnings(score_results(close))
    assert warning["misleading"] == ["a"]
    (inversion,) = warning["inversions"]
    assert inversion["current_p"] == 1.0
    assert inversion["reveal_p"] == 1.0
    assert inversion["within_noise"]
    assert warning["within_noise"]
    # a: current 24/24, reveal 0/24; b: current 12/24, reveal 12/24: both differences hold
    far = normalize(pd.DataFrame(
        _reads("a", [1] * 24, [0] * 24) + _reads("b", [1] * 12 + [0] * 12, [1] * 12 + [0] * 12)
    ))  # fmt: skip
    (warning,) = selection_warnings(score_results(far))
    (inversion,) = warning["inversions"]
    assert inversion["current_p"] == pytest.approx(2 * 0.5**12)
    assert inversion["reveal_p"] == pytest.approx(2 * 0.5**12)
    assert not inversion["within_noise"]
    assert not warning["within_noise"]
    assert warning["misleading_reveal_p"] == {"a": {"b": pytest.approx(2 * 0.5**12)}}


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
    assert json.loads((out / "config.json").read_text())["config"]["reference"] == (
        "frontier_latest"
    )
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
            "n": 24,
        }
    pooled = frontier["joint_J"]["pooled"]
    assert (pooled["k"], pooled["n"]) == (per_seed["1"]["k"] + per_seed["2"]["k"], 48)
    assert 0 <= frontier["joint_J"]["heterogeneity_p"] <= 1
    # the two seeds' datasets differ: other histories under the same ids
    one = (out / "seed-1" / "config.json").read_text()
    two = (out / "seed-2" / "config.json").read_text()
    assert json.loads(one)["config"]["pairs_sha256"] != json.loads(two)["config"]["pairs_sha256"]
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
    shutil.copytree(tmp_path / "a", tmp_path / "a-again")
    same = run("compare", str(tmp_path / "a"), str(tmp_path / "a-again"), "--out",
               str(tmp_path / "cmp-same"))  # fmt: skip
    assert same.exit_code == 0, same.output
    assert pd.read_csv(tmp_path / "cmp-same" / "compare.csv")["n_pairs"].tolist() == [24]
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
    with (out / "results.csv").open(newline="") as handle:
        kinds = {(r["condition"], r["kind"]) for r in csv.DictReader(handle)}
    assert kinds == {("full", "archive"), ("probe_newest", "probe")}
