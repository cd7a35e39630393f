"""The product's Python face (issue 30): a notebook user runs, scores and reports an
audit without the command line, and gets the command's run directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import audit
from audit.cli import app

OPTIONS = {"conditions": "frontier,tail", "transforms": "identity,rename:1", "seed": 0}


@pytest.fixture(scope="module")
def faced(tmp_path_factory: pytest.TempPathFactory) -> audit.RunData:
    return audit.run(tmp_path_factory.mktemp("face") / "run", **OPTIONS)  # type: ignore[arg-type]


def test_a_run_from_python_is_the_commands_run(faced: audit.RunData, tmp_path: Path):
    out = tmp_path / "cli"
    args = ["run", "--conditions", "frontier,tail", "--transforms", "identity,rename:1",
            "--seed", "0", "--out", str(out), "--quiet"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (faced.path / "results.parquet").read_bytes() == (out / "results.parquet").read_bytes()
    ours, theirs = (json.loads((p / "summary.json").read_text()) for p in (faced.path, out))
    assert ours["scores"] == theirs["scores"]
    assert len(faced.results) == ours["n_reads"] > 0


def test_scores_are_the_summarys(faced: audit.RunData):
    cells = audit.scores(faced).cells.set_index(["condition", "transform", "family"])
    summary = json.loads((faced.path / "summary.json").read_text())
    checked = 0
    for entry in summary["scores"]:
        cell = cells.loc[(entry["condition"], entry["transform"], entry["family"])]
        joint = entry["source pairs"]["joint_J"]
        assert (cell["joint_J_pairs_k"], cell["joint_J_pairs_n"]) == (joint["k"], joint["n"])
        checked += 1
    assert checked == len(cells) > 0


def test_a_report_from_python(faced: audit.RunData, tmp_path: Path):
    page = audit.report(faced, tmp_path / "r")
    assert page == tmp_path / "r" / "report.html"
    assert "frontier" in page.read_text()
    assert (tmp_path / "r" / "report.md").exists()
    again = audit.load_run(faced.path)
    assert again.results.equals(faced.results)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"preset": "no-such-preset"}, "preset: unknown 'no-such-preset'"),
        ({"conditions": "frontier,no_such_memory"}, "no_such_memory"),
        ({"transforms": "identity,spin:2"}, "spin"),
        ({"conditions": "frontier", "reference": "tail"}, "--reference: 'tail'"),
        ({"budgets": "abc"}, "budgets: 'abc' is not an integer"),
        ({"budgets": [600, 0]}, "budgets: 0 must be positive"),
        ({"seed": "soon"}, "seed: "),
        ({"conditions": 5}, "conditions: give a comma list or a list of strings"),
        ({"transforms": [1, 2]}, "transforms: give a comma list or a list of strings"),
    ],
)
def test_bad_input_raises_the_error_root_naming_it(tmp_path: Path, options: dict, named: str):
    with pytest.raises(audit.MemoryAuditError, match=named.replace("(", r"\(")):
        audit.run(tmp_path / "run", **options)
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.parametrize("budgets", ["600,1200", [600, 1200], (1200, 600, 1200)])
def test_budgets_are_taken_as_the_command_takes_them(tmp_path: Path, budgets: object):
    """A new user's "600" ran budgets 0 and 6 (a string iterated character by character)."""
    done = audit.run(tmp_path / "run", conditions="tail", transforms="identity",
                     budgets=budgets, seed=0)  # type: ignore[arg-type]  # fmt: skip
    expected = [600, 1200] if budgets != (1200, 600, 1200) else [1200, 600]
    assert done.plan is not None
    assert done.plan.budgets == expected
    assert sorted(set(done.results["budget"])) == [600, 1200]


def test_one_budget_as_a_number_or_a_string(tmp_path: Path):
    for budgets in (600, "600"):
        done = audit.run(tmp_path / str(budgets), conditions="tail", transforms="identity",
                         budgets=budgets, seed=0)  # fmt: skip
        assert done.plan is not None
        assert done.plan.budgets == [600]


def test_the_command_line_does_not_load_the_face():
    code = "import audit, audit.cli, sys; print('audit.api' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = audit.nope  # type: ignore[attr-defined]


def test_a_path_is_a_run_too_and_a_list_of_transforms_is_taken(
    faced: audit.RunData, tmp_path: Path
):
    """An adversary's ``audit.scores("runs/x")`` was an AttributeError and
    ``transforms=[...]`` split a list's first item into letters."""
    by_path = audit.scores(str(faced.path)).cells
    assert by_path.equals(audit.scores(faced).cells)
    assert audit.report(faced.path, tmp_path / "r").exists()
    done = audit.run(tmp_path / "run", conditions=["tail"], transforms=["identity", "rename:1"],
                     seed=0)  # fmt: skip
    assert sorted(set(done.results["transform"].astype(str))) == ["identity", "rename"]


def test_a_report_against_no_condition_is_refused(faced: audit.RunData, tmp_path: Path):
    """``audit.report(run, reference="nope")`` wrote a report comparing against "nope"."""
    with pytest.raises(audit.MemoryAuditError, match="reference: no condition 'nope'"):
        audit.report(faced, tmp_path / "r", reference="nope")
    assert not (tmp_path / "r").exists()
