"""summary.json as a typed value: a run's file read back is written back byte for
byte, and a file that does not fit names the field and the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.errors import RunDataError
from audit.scoring import load_summary
from tests._cli import audit
from tests._pilot import pilot_of_24


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("summary-file")
    out = folder / "run"
    done = audit(
        "run", "--pairs", pilot_of_24(folder), "--transforms", "identity,rename:1,relabel:1",
        "--seed", "7", "--out", str(out), "--quiet", "--workers", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def test_a_runs_summary_reads_back_to_the_same_bytes(run_dir: Path):
    written = (run_dir / "summary.json").read_text(encoding="utf-8")
    summary = load_summary(run_dir / "summary.json")
    assert summary.scores[0].source_pairs["joint_J"].n > 0  # typed all the way down
    assert summary.compressor_errors == []
    assert json.dumps(summary.dump(), indent=2) + "\n" == written


def _drop_budget(data: dict[str, Any]) -> None:
    del data["scores"][3]["budget"]


def _text_count(data: dict[str, Any]) -> None:
    data["scores"][0]["source pairs"]["reveal"]["k"] = "most"


def _no_verdicts(data: dict[str, Any]) -> None:
    del data["verdicts"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_drop_budget, "scores.3.budget: Field required"),
        (_text_count, "scores.0.source pairs.reveal.k: Input should be a valid integer"),
        (_no_verdicts, "verdicts: Field required"),
    ],
)
def test_a_summary_that_does_not_fit_names_the_field_and_the_file(
    run_dir: Path, tmp_path: Path, edit: Any, field: str
):
    data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    with pytest.raises(RunDataError) as raised:
        load_summary(path)
    assert str(raised.value).startswith(f"{path}: {field}")


def test_a_summary_that_is_not_json_names_the_file(tmp_path: Path):
    path = tmp_path / "summary.json"
    path.write_text('{"run": {', encoding="utf-8")
    with pytest.raises(RunDataError, match=f"^{path}: the whole file: Invalid JSON"):
        load_summary(path)
