"""The LLM stage faces the naming check too: by default each sampled pair is read as it
is and relabelled once, and the LLM reader's shortcut gap is scored beside the exact
reader's (a real local HTTP server answers; the stage and the scoring are under test)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from audit.cli import app
from tests._fake_openai import serving_in_thread
from tests._rows import result_csv

runner = CliRunner()


def test_the_default_llm_sample_includes_a_relabelled_instance(tmp_path: Path):
    with serving_in_thread("reader-model") as server:
        config = tmp_path / "audit.toml"
        config.write_text(
            f'cache_path = "{tmp_path / "cache.sqlite"}"\n'
            f'[backends.served]\nbase_url = "{server.base_url}"\nmodel = "reader-model"\n'
        )
        out = tmp_path / "run"
        result = runner.invoke(
            app,
            ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms",
             "identity,relabel:2", "--reader", "served", "--llm-conditions", "frontier",
             "--llm-sample", "1", "--repeats", "1", "--workers", "1", "--quiet",
             "--config", str(config), "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    with result_csv(out).open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["reader"] == "served"]
    assert {r["condition"] for r in rows} == {"frontier", "full"}  # full: the reader's check
    rows = [r for r in rows if r["condition"] == "frontier"]
    # one pair x 2 variants x 3 branches, as it is and relabelled once
    assert sorted({r["transform"] for r in rows}) == ["identity", "relabel"]
    assert len(rows) == 12
    relabelled = [r for r in rows if r["transform"] == "relabel"]
    assert all("~relabel00" in r["pair_id"] for r in relabelled)
    plan = json.loads((out / "config.json").read_text())["config"]["llm"]
    assert plan["transforms"] == ["identity", "relabel:1"]
    summary = json.loads((out / "summary.json").read_text())
    gaps = {(g["reader"].split(":")[0], g["transform"]) for g in summary["shortcut_gaps"]}
    assert ("served", "relabel") in gaps  # the LLM reader's gap, beside the exact reader's
    assert ("exact", "relabel") in gaps
