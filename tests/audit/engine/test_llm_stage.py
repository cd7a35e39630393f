"""The LLM stage of `audit run` against the real embedded model (no mocks).

The local backend serves SmolLM2-135M-Instruct through llama.cpp: far too small to
answer well, which is fine; these tests check the whole path (writer, reader,
parsing, outcomes, cache, resume), not the model's accuracy.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.engine._llm_reader import READER_OUTCOMES as OUTCOMES
from tests._rows import result_csv

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def rows_of(run_dir: Path) -> list[dict[str, str]]:
    with result_csv(run_dir).open(newline="") as handle:
        return list(csv.DictReader(handle))


def write_config(tmp_path: Path, body: str = "") -> Path:
    path = tmp_path / "audit.toml"
    path.write_text(f'cache_path = "{tmp_path / "responses.sqlite"}"\n{body}')
    return path


WRITTEN = "structured_high:max_tokens=200"
"""A 135M model does not reason and rambles under a schema: its requests are capped at the
answer's default allowance at 600 B (200 tokens), not given a reasoning allowance."""
LLM_ARGS = ["--preset", "cca-pilot", "--conditions", "frontier", "--transforms", "identity",
            "--workers", "1", "--quiet", "--budget", "600", "--llm-sample", "1", "--repeats", "1",
            "--llm-transforms", "identity"]  # fmt: skip
CONSOLE = "console.txt"
"""What the module's run said on the way (beside its run directory)."""


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("llm")
    config = write_config(base, "[backends.local]\nn_threads = 2\n")
    out = base / "run"
    told = [a for a in LLM_ARGS if a != "--quiet"]  # the status lines are under test too
    result = run("run", *told, "--reader", "local", "--writer", "local",
                 "--llm-conditions", f"{WRITTEN},frontier", "--config", str(config),
                 "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    (base / CONSOLE).write_text(result.output)
    return out, config


def test_each_step_is_told_and_the_stage_asks_what_it_was_estimated_to(llm_run):
    """Without a terminal the steps are lines of the log, in the order they happen, and
    the requests counted before the stage are the requests it asked, but for the reads
    a failed writer spared."""
    out, _ = llm_run
    lines = (out.parent / CONSOLE).read_text().splitlines()

    def at(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    assert at("server: starting llama.cpp with SmolLM2") < at("server: ready in ")
    assert at("server: ready in ") < at("determinism probe of local: 8 requests, 4 one")
    assert at("determinism probe of local: 8") < at("determinism probe of local: 4/4 answers")
    assert at("determinism probe of local: 4/4") < at("LLM stage: 3 units, about ")
    assert at("LLM stage: 3 units, about ") < at("reader's check: reading full, the whole")
    assert at("reader's check: reading full") < at("reader's check: read in ")
    estimate = lines[at("LLM stage: 3 units, about ")]
    assert "at the probe's pace (" in estimate  # the probe measured the pace
    planned = int(estimate.split("about ")[1].split(" requests")[0])
    costs = json.loads((out / "costs.json").read_text())["invocations"][-1]
    asked = costs["llm"]["writer_and_reader"]["requests"]
    assert costs["llm"]["writer_and_reader"]["answered"] == asked
    spared = [r for r in rows_of(out) if r["reader"] == "local" and r["cache_hit"] == ""]
    assert asked == planned - len(spared), (estimate, asked, len(spared))
    assert costs["probe"]["requests"] == 8  # one slot: the small probe, on its own line


def test_writer_and_reader_rows(llm_run):
    out, _ = llm_run
    rows = rows_of(out)
    llm = [r for r in rows if r["reader"] == "local"]
    written = [r for r in rows if r["condition"] == WRITTEN]
    # one pair x 2 variants x 3 branches, for each of the two LLM-stage conditions and
    # full, which every LLM reader reads first (its check: docs/method.md)
    assert len(llm) == 18
    assert {r["condition"] for r in llm} == {WRITTEN, "frontier", "full"}
    # the LLM-written memory is read by the exact reader too (6) and by the LLM (6)
    assert sorted(r["reader"] for r in written) == ["exact"] * 6 + ["local"] * 6
    assert all(r["outcome"] in OUTCOMES for r in llm)
    assert all(r["reader_model"] for r in llm)
    assert all(r["writer_model"] for r in written)
    for r in llm:
        if r["outcome"] == "na":
            assert r["correct"] == ""
        elif r["outcome"] in ("writer_truncated", "writer_empty"):
            # the writer failed: scored 0, and the reader was not asked about its memory
            assert (r["correct"], r["correct_lenient"]) == ("0", "0")
            assert r["writer_finish_reason"]
            assert r["finish_reason"] == ""
        else:
            assert r["correct"] in ("0", "1")
            assert r["correct_lenient"] in ("0", "1")
            assert r["finish_reason"]
            assert int(r["tokens_prompt"]) > 0
        if r["outcome"] in ("pass", "wrapper_only"):
            assert r["correct_lenient"] == "1"
        if r["outcome"] == "reader_error":
            assert r["adequate"] == "1"  # the memory held the answer; the reader missed it
        if r["outcome"] == "wrong_log":
            assert r["adequate"] == "0"
    assert all(r["memory_sha256"] for r in written if r["outcome"] != "na")
    # every model-written memory carries its writer's figures; deterministic ones none
    assert all(r["writer_finish_reason"] for r in written if r["outcome"] != "na")
    assert all(r["writer_content_tokens"] for r in written if r["outcome"] != "na")
    assert not any(r["writer_finish_reason"] for r in llm if r["condition"] == "frontier")


def test_summary_names_the_model_and_keeps_readers_apart(llm_run):
    out, _ = llm_run
    summary = json.loads((out / "summary.json").read_text())
    readers = {e["reader"] for e in summary["scores"]}
    assert len(readers) == 2
    assert "exact" in readers
    (llm_reader,) = readers - {"exact"}
    assert llm_reader.startswith("local:")  # backend:served model
    assert "SmolLM2" in llm_reader
    stage = summary["run"]["config"]["llm"]
    assert stage["reader"] == "local"
    assert "SmolLM2" in stage["reader_model"]
    assert stage["sample"] == 1
    entry = next(e for e in summary["scores"] if e["reader"] == llm_reader
                 and e["family"] == "all" and e["condition"] == "frontier")  # fmt: skip
    assert "joint_J" in entry["source pairs"]
    assert "reveal_lenient" in entry["source pairs"]


def test_rerunning_resumes_and_the_cache_sends_nothing(llm_run, tmp_path):
    out, config = llm_run
    import shutil

    copy = tmp_path / "again"
    shutil.copytree(out, copy)
    import sqlite3

    db = sqlite3.connect(copy / "store.sqlite")
    db.execute("DELETE FROM jobs WHERE job_key LIKE 'llm-%'")
    db.commit()
    db.close()
    result = run("run", *LLM_ARGS, "--reader", "local", "--writer", "local",
                 "--llm-conditions", f"{WRITTEN},frontier", "--config", str(config),
                 "--out", str(copy))  # fmt: skip
    assert result.exit_code == 0, result.output
    costs = json.loads((copy / "costs.json").read_text())["invocations"][-1]["llm"]
    roles = [r for r in ("writer", "reader", "writer_and_reader") if r in costs]
    assert roles
    sent = sum(costs[role].get("sent", 0) for role in roles)
    hits = sum(costs[role].get("cache_hits", 0) for role in roles)
    assert sent == 0
    assert hits > 0

    def key(r):
        return (r["pair_id"], r["condition"], r["variant"], r["branch"], r["reader"], r["repeat"])

    before = {key(r): (r["outcome"], r["answer"], r["memory_sha256"]) for r in rows_of(out)}
    after = {key(r): (r["outcome"], r["answer"], r["memory_sha256"]) for r in rows_of(copy)}
    assert after == before


def test_a_failing_reader_gives_na_j_bounds_and_exit_3(tmp_path):
    from tests._fake_openai import Reply, Rule, serving_in_thread

    with serving_in_thread("nothing") as fake:
        fake.rules = [Rule(contains=[""], replies=[Reply(status=503)])]
        config = write_config(
            tmp_path,
            f'[backends.down]\nbase_url = "{fake.base_url}"\nmodel = "nothing"\n'
            "max_retries = 1\nretry_budget_s = 2\nconnect_timeout_s = 1\n"
            "backoff_initial_s = 0.05\n",
        )
        out = tmp_path / "run"
        result = run("run", *LLM_ARGS, "--reader", "down", "--llm-conditions", "frontier",
                     "--config", str(config), "--out", str(out))  # fmt: skip
    assert result.exit_code == 3, result.output  # incomplete: the reads are NA
    assert f"audit resume {out}" in result.output
    llm = [r for r in rows_of(out) if r["reader"] == "down"]
    assert len(llm) == 12  # frontier, and full: the reader's check
    assert {r["outcome"] for r in llm} == {"na"}
    assert {r["correct"] for r in llm} == {""}  # NA is never scored 0
    summary = json.loads((out / "summary.json").read_text())
    entry = next(
        e for e in summary["scores"] if e["reader"].startswith("down") and e["family"] == "all"
    )
    assert entry["source pairs"]["joint_J"] == {"k": 0, "k_high": 1, "n": 1}
    assert entry["reads"]["na"]["k"] == 6
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "incomplete"
    assert manifest["na_units"] == 2


def test_an_unreachable_reader_stops_the_run_before_any_work(tmp_path):
    config = write_config(
        tmp_path,
        '[backends.down]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "nothing"\n'
        "max_retries = 1\nretry_budget_s = 2\nconnect_timeout_s = 1\n",
    )
    out = tmp_path / "run"
    result = run("run", *LLM_ARGS, "--reader", "down", "--llm-conditions", "frontier",
                 "--config", str(config), "--out", str(out))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "'down'" in result.output
    assert "does not answer" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--reader", "nope"], "nope"),
        (["--writer", "readonly", "--llm-conditions", "structured_high"], "writer"),
        (["--llm-conditions", "frontier"], "needs --reader"),
        (["--reader", "local", "--llm-conditions", "nope"], "unknown condition 'nope'"),
    ],
)
def test_llm_bad_input_fails_before_any_work(tmp_path, extra, message):
    config = write_config(
        tmp_path, '[backends.readonly]\nbase_url = "http://127.0.0.1:9/v1"\nroles = ["reader"]\n'
    )
    out = tmp_path / "run"
    result = run("run", *LLM_ARGS, "--config", str(config), *extra, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


@pytest.mark.parametrize("problem", ["unset key", "damaged cache"])
def test_a_key_or_cache_problem_stops_the_run_before_any_work(tmp_path, monkeypatch, problem):
    """Found before the deterministic stage runs, not after it (minutes, on a big run)."""
    from tests._fake_openai import serving_in_thread

    monkeypatch.delenv("MA_TEST_KEY", raising=False)
    with serving_in_thread("m") as fake:
        body = f'[backends.up]\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
        if problem == "unset key":
            body += 'api_key_env = "MA_TEST_KEY"\n'
        else:
            (tmp_path / "responses.sqlite").write_bytes(b"not a cache" * 100)
        config = write_config(tmp_path, body)
        out = tmp_path / "run"
        result = run("run", *LLM_ARGS, "--reader", "up", "--llm-conditions", "frontier",
                     "--config", str(config), "--out", str(out))  # fmt: skip
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    assert ("MA_TEST_KEY" if problem == "unset key" else "responses.sqlite") in result.output
    assert not out.exists(), "work began before the problem was found"
    assert not fake.bodies
