"""The transfer test: a synthetic run's verdict against a natural run's, on real runs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import fisher_exact, kendalltau

from audit.scoring import holm, rank_agreement
from histories._io import load_pairs
from tests._cli import audit

CONDITIONS = "tail,frontier,frontier_alpha,full,probe_newest,probe_lexicographic"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("transfer")
    for name, preset in (("synthetic", "cca-pilot"), ("natural", "natural")):
        done = audit(
            "run", "--preset", preset, "--conditions", CONDITIONS, "--transforms", "identity",
            "--out", str(root / name), "--quiet",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = audit(
        "compare", str(root / "synthetic"), str(root / "natural"), "--transfer",
        "--out", str(root / "t"), "--resamples", "500",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Kendall's tau" in done.stdout
    return root / "synthetic", root / "natural", root / "t"


def joint_j(run: Path) -> pd.DataFrame:
    """Each condition's joint J at identity, recomputed from the rows: a source pair
    passes when every reveal and override read of both variants is correct."""
    rows = pd.read_parquet(run / "results.parquet")
    rows = rows[(rows["transform"] == "identity") & rows["branch"].isin(["reveal", "override"])]
    passed = rows.groupby(["condition", "source_pair_id"])["correct"].min()
    return passed.groupby("condition").agg(["sum", "count"])


def test_joint_j_side_by_side_matches_the_rows(runs: tuple[Path, Path, Path]):
    synthetic, natural, out = runs
    table = pd.read_csv(out / "transfer.csv").set_index("condition")
    assert set(table.index) == set(CONDITIONS.split(","))
    for run, column in ((synthetic, "synthetic"), (natural, "natural")):
        counts = joint_j(run)
        for condition, row in counts.iterrows():
            assert table.loc[condition, f"{column}_k"] == row["sum"]
            assert table.loc[condition, f"{column}_n"] == row["count"]
    assert (table["natural_n"] == 300).all()
    assert (table["synthetic_n"] == 84).all()
    # per pack: the natural run's families, 75 pairs each
    assert (table[["pack0_n", "pack1_n", "pack2_n", "pack3_n"]] == 75).all().all()
    # Fisher's exact test on the two independent proportions, Holm over the conditions
    ps = [
        fisher_exact([[r.synthetic_k, r.synthetic_n - r.synthetic_k],
                      [r.natural_k, r.natural_n - r.natural_k]]).pvalue
        for r in table.itertuples()
    ]  # fmt: skip
    assert table["p_holm"].tolist() == pytest.approx(holm(ps), rel=1e-5)  # CSV: 6 digits
    assert (table["holds"] == (table["p_holm"] >= 0.05)).all()


def test_kendall_tau_is_scipys_on_the_two_rankings(runs: tuple[Path, Path, Path]):
    _, _, out = runs
    table = pd.read_csv(out / "transfer.csv")
    ranks = pd.read_csv(out / "transfer-ranks.csv").set_index("scope")
    # the rates from the integer counts (the CSV keeps 6 digits of each float)
    table["s"] = table["synthetic_k"] / table["synthetic_n"]
    table["n"] = table["natural_k"] / table["natural_n"]
    every = ranks.loc["every condition"]
    assert every["tau"] == pytest.approx(kendalltau(table["s"], table["n"]).statistic, rel=1e-5)
    assert every["conditions"] == len(table)
    assert every["tau_low"] <= every["tau"] <= every["tau_high"]
    strict = table[table["kind"] == "strict"]
    assert ranks.loc["strict conditions", "tau"] == pytest.approx(
        kendalltau(strict["s"], strict["n"]).statistic, rel=1e-5
    )


def test_each_condition_that_does_not_hold_has_a_natural_pair_that_shows_it(
    runs: tuple[Path, Path, Path], tmp_path: Path
):
    _, natural, out = runs
    table = pd.read_csv(out / "transfer.csv").set_index("label")
    examples = pd.read_csv(out / "transfer-examples.csv").fillna("")
    assert set(examples["label"]) == set(table.index[~table["holds"]])
    done = audit("generate", "--preset", "natural", "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    pairs = {p.pair_id: p for p in load_pairs(tmp_path / "p" / "pairs.jsonl")}
    counts = pd.read_parquet(natural / "results.parquet")
    counts = counts[
        (counts["transform"] == "identity") & counts["branch"].isin(["reveal", "override"])
    ]
    for row in examples.itertuples():
        pair = pairs[row.pair_id]
        assert pair.provenance is not None
        assert row.pack == pair.family
        assert row.edit == pair.provenance.edit
        condition = table.loc[row.label, "condition"]
        passed = counts[
            (counts["condition"] == condition) & (counts["source_pair_id"] == row.pair_id)
        ]
        lower = table.loc[row.label, "delta"] < 0
        assert bool(passed["correct"].min()) is (not lower)
    md = (out / "transfer.md").read_text()
    html = (out / "transfer.html").read_text()
    assert "Does the synthetic verdict transfer?" in md
    assert "Does the synthetic verdict transfer?" in html


def test_a_reversed_ranking_gives_tau_minus_one():
    conditions = ["a", "b", "c", "d"]
    first = {
        c: {f"p{i}": float(i < 10 * (k + 1)) for i in range(50)} for k, c in enumerate(conditions)
    }
    second = {c: first[conditions[-1 - k]] for k, c in enumerate(conditions)}
    reversed_ = rank_agreement(first, second, conditions, resamples=200)
    assert reversed_.tau == pytest.approx(-1.0)
    assert reversed_.high <= -0.3  # the resampled rankings stay reversed or tie
    same = rank_agreement(first, first, conditions, resamples=200)
    assert same.tau == pytest.approx(1.0)
    tied = rank_agreement(first, {c: first["a"] for c in conditions}, conditions, resamples=50)
    assert math.isnan(tied.tau)  # every condition equal: no ranking to correlate


def test_bad_invocations_are_one_line(runs: tuple[Path, Path, Path], tmp_path: Path):
    synthetic, natural, _ = runs
    done = audit("compare", str(synthetic), str(natural), str(synthetic), "--transfer")
    assert done.returncode == 2
    assert "--transfer compares two runs" in done.stderr
    done = audit("compare", str(synthetic), str(natural), "--transfer", "--reference", "tail")
    assert done.returncode == 2
    assert "give no --reference" in done.stderr
    other = tmp_path / "other"
    done = audit(
        "run", "--preset", "cca-pilot", "--conditions", "bm25", "--transforms", "identity",
        "--out", str(other), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = audit("compare", str(synthetic), str(other), "--transfer", "--out", str(tmp_path / "t"))
    assert done.returncode == 2
    assert "share no condition" in done.stderr
    assert "Traceback" not in done.stderr
