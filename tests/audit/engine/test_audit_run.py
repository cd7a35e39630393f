"""`audit run` with the exact reader: run directory, resume, refusal, bad input, plugin errors."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.rundir import EXIT_COMPRESSOR_RAISED, RESULT_COLUMNS
from compressors import deterministic_builtins, parse_spec
from histories import WRONG_ANSWERS
from tests._cli import lean_copy, store_sql, vouched_rewrite
from tests._rows import result_csv

runner = CliRunner()
SMALL = [
    "--preset",
    "cca-pilot-paper",
    "--transforms",
    "identity,rename:2",
    "--workers",
    "1",
    "--quiet",
]


def run(*args: str):
    return runner.invoke(app, list(args))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "small"
    result = run(
        "run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(out), "--csv"
    )
    assert result.exit_code == 0, result.output
    return out


def test_results_parquet_is_the_one_copy_of_the_rows(small_run: Path, tmp_path: Path):
    """Without --csv a run writes its rows once: results.parquet (zstd, row groups of
    whole jobs, each memory an integer into the store's memory table); the store keeps no rows
    once the file holds them, and `audit export --csv` writes what `audit run --csv` did."""
    import pyarrow.parquet as pq

    from audit.rundir._results import job_runs

    out = tmp_path / "lean"
    result = run("run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert not (out / "results.csv").exists()
    handle = pq.ParquetFile(out / "results.parquet")
    jobs = [
        span
        for group in range(handle.num_row_groups)
        for span in job_runs(handle.read_row_group(group, columns=["job_key"])["job_key"])
    ]
    assert len({key for key, _, _ in jobs}) == len(jobs) == 24  # whole jobs (source pairs)
    assert handle.num_row_groups == 1  # gathered into groups of ROW_GROUP_ROWS rows
    assert handle.schema_arrow.field("memory_id").type == "int32"
    assert "memory_sha256" not in handle.schema_arrow.names
    assert handle.metadata.row_group(0).column(0).compression == "ZSTD"
    db = sqlite3.connect(out / "store.sqlite")
    try:
        assert db.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)
        columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        assert "results" not in columns
    finally:
        db.close()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == 6
    assert set(manifest["files"]) == {"results.parquet", "summary.json"}
    # the same rows as the run that wrote a CSV, byte for byte
    assert (out / "results.parquet").read_bytes() == (small_run / "results.parquet").read_bytes()
    exported = run("export", str(out), "--csv", "--out", str(tmp_path / "rows.csv"))
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "rows.csv").read_bytes() == (small_run / "results.csv").read_bytes()
    # it says how big the CSV came out (142 MB for the default audit, undocumented)
    megabytes = (tmp_path / "rows.csv").stat().st_size / 1e6
    assert f"rows, {megabytes:.1f} MB)" in " ".join(exported.output.split())
    assert run("export", str(out)).exit_code == 2  # a format must be named


def test_run_directory_contents(small_run: Path):
    for name in ("config.json", "results.csv", "results.parquet", "summary.json", "store.sqlite"):
        assert (small_run / name).exists(), name
    rows = csv_rows(result_csv(small_run))
    # 24 pairs x (identity + 2 renamings) x 3 conditions x 2 variants x 3 branches
    assert len(rows) == 24 * 3 * 3 * 6
    assert list(rows[0]) == list(RESULT_COLUMNS)
    parquet = pd.read_parquet(small_run / "results.parquet")
    assert len(parquet) == len(rows)
    config = json.loads((small_run / "config.json").read_text())
    assert config["config"]["conditions"] == ["frontier", "frontier_latest", "full"]
    assert config["config"]["compressor_versions"]["frontier"] == "frontier@1"
    assert config["environment"]["packages"]["memory-audit"]
    assert {r["reader"] for r in rows} == {"exact"}
    assert {r["branch"] for r in rows} == {"current", "reveal", "override"}
    assert {r["transform"] for r in rows} == {"identity", "rename"}


def test_results_agree_with_the_exact_reader_and_memories_are_stored(small_run: Path):
    import hashlib

    from audit.rundir import RunStore
    from compressors import load
    from histories import LogIndex

    rows = csv_rows(result_csv(small_run))
    store = RunStore(small_run)
    try:
        checked = 0
        for row in rows[::37]:
            memory = store.memory(row["memory_sha256"])
            assert memory is not None
            assert hashlib.sha256(memory.encode()).hexdigest() == row["memory_sha256"]
            assert len(memory.encode()) == int(row["memory_bytes"])
            answer = LogIndex(load(memory)).resolve(list(json.loads(row["gold"])))
            assert (answer == json.loads(row["gold"])) == (row["correct"] == "1")
            checked += 1
        assert checked > 10
    finally:
        store.close()
    store = RunStore(small_run)
    try:
        assert store.memory_shas() == {r["memory_sha256"] for r in rows}  # each, by its hash
    finally:
        store.close()


def test_a_store_of_another_format_is_not_resumed(small_run: Path, tmp_path: Path):
    import shutil

    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(small_run / "config.json", old / "config.json")
    db = sqlite3.connect(old / "store.sqlite")  # the first layout: one JSON row per read
    db.executescript(
        "CREATE TABLE jobs (job_key TEXT PRIMARY KEY, finished REAL NOT NULL);"
        "CREATE TABLE results (seq INTEGER PRIMARY KEY, job_key TEXT, row TEXT);"
    )
    db.close()
    result = run("run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(old))
    assert result.exit_code == 2, result.output
    assert "another version of memory-audit" in result.output
    assert "another --out" in " ".join(result.output.split())  # the way out
    assert not (old / "results.csv").exists()


def as_format_5(run_dir: Path) -> None:
    """Rewrite a run directory as format 5 wrote it: results.parquet a row group per job
    with 5 in its metadata, and 5 in the store and the manifest, which vouch for the
    file (format 6 changed only the row groups)."""
    import pyarrow.parquet as pq

    from audit.rundir._results import job_runs

    table = pq.read_table(run_dir / "results.parquet")
    vouched_rewrite(
        run_dir, [table.slice(start, rows) for _, start, rows in job_runs(table["job_key"])], 5
    )
    store_sql(run_dir, "UPDATE store_format SET version = 5")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["format"] = 5
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("how", ["interleaved", "twice", "no key", "a row short", "a row again"])
def test_a_job_in_two_places_of_results_parquet_is_refused_and_resume_mends_it(
    small_run: Path, tmp_path: Path, how: str
):
    """A vouched results.parquet this code never writes (a job's rows split or repeated,
    a row without a job key) was read in part by export and resume, and double by the
    report; so was a job short of its last row or with a row repeated in place, which
    nothing compared with the rows the store recorded for it.  Now every reader refuses
    such a file, or names the job whose rows are not as many as the store recorded
    (the report, exit 4; export refuses), and a resume runs the jobs again."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit.errors import RunDataError
    from audit.rundir._integrity import read_checked
    from audit.rundir._results import job_runs

    copy = lean_copy(small_run, tmp_path / "edited")
    table = pq.read_table(copy / "results.parquet")
    (_, a, a_rows), (_, b, b_rows) = job_runs(table["job_key"])[:2]
    rest = table.slice(b + b_rows)
    if how == "interleaved":  # job 1's first half, job 2, job 1's second half
        half = a_rows // 2
        parts = [table.slice(a, half), table.slice(b, b_rows), table.slice(a + half, a_rows - half)]
        groups = [pa.concat_tables([*parts, rest])]
    elif how == "twice":
        groups = [table, table.slice(a, a_rows)]
    elif how == "no key":
        keys = table["job_key"].to_pylist()
        keys[a] = None
        index = table.schema.get_field_index("job_key")
        groups = [table.set_column(index, "job_key", pa.array(keys, pa.string()))]
    elif how == "a row short":
        groups = [pa.concat_tables([table.slice(0, a + a_rows - 1), table.slice(a + a_rows)])]
    else:
        groups = [pa.concat_tables([table.slice(0, a + 1), table.slice(a)])]
    vouched_rewrite(copy, groups)
    refused = r"in two places|without a job_key|its row count is \d+, results.parquet holds \d+"
    if how in ("a row short", "a row again"):  # the job named, its rows read as the file has them
        frame, integrity = read_checked(copy, None)
        assert integrity.exit_code == 4
        assert re.search(refused, " ".join(integrity.damage)), integrity.damage
        assert len(frame) == table.num_rows + (1 if how == "a row again" else -1)
    else:
        with pytest.raises(RunDataError, match=refused):
            read_checked(copy, None)
    exported = run("export", str(copy), "--csv", "--out", str(tmp_path / "rows.csv"))
    assert exported.exit_code != 0
    assert re.search(refused, " ".join(exported.output.split())), exported.output
    result = run("run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(copy))
    assert result.exit_code == 0, result.output
    assert (copy / "results.parquet").read_bytes() == (small_run / "results.parquet").read_bytes()


@pytest.mark.parametrize("where", ["manifest", "store", "parquet"])
def test_a_run_of_a_newer_format_is_refused_in_one_text_by_every_command(
    small_run: Path, tmp_path: Path, where: str
):
    """A run directory a newer memory-audit wrote (format 7) was read as this format by
    the report whatever manifest.json or results.parquet said, and the store and export
    each said it in words of their own.  Every command now refuses it with the one text
    ``newer_format`` writes, naming the format and the way out."""

    import pyarrow.parquet as pq

    newer = lean_copy(small_run, tmp_path / "newer")
    manifest = json.loads((newer / "manifest.json").read_text())
    if where == "manifest":
        manifest["format"] = 7
    (newer / "manifest.json").write_text(json.dumps(manifest))
    if where == "store":
        store_sql(newer, "UPDATE store_format SET version = 7")
    if where == "parquet":
        vouched_rewrite(newer, [pq.read_table(newer / "results.parquet")], 7)
    said = "was written by a newer memory-audit (run directory format 7; this one knows"
    commands = {
        "report": ["report", str(newer), "--out", str(tmp_path / "report")],
        "export": ["export", str(newer), "--csv", "--out", str(tmp_path / "rows.csv")],
        "resume": ["resume", str(newer), "--quiet"],
    }
    refused = {"manifest": {"report"}, "store": {"export", "resume"}, "parquet": {"report"}}
    for name in refused[where]:
        result = run(*commands[name])
        assert result.exit_code != 0, (name, result.output)
        assert said in " ".join(result.output.split()), (name, result.output)


def test_another_runs_format_5_store_is_refused_before_it_is_migrated(
    small_run: Path, tmp_path: Path
):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(small_run, old)
    as_format_5(old)
    store_sql(old, "UPDATE run_meta SET value = 'another' WHERE key = 'run_id'")
    result = run("run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(old))
    assert result.exit_code == 2, result.output
    assert "belongs to another run" in " ".join(result.output.split())
    assert store_sql(old, "SELECT version FROM store_format") == [(5,)]


def test_a_run_of_format_5_is_read_and_resumed_into_this_format(small_run: Path, tmp_path: Path):
    """Issue 29: a row group per job (format 5) held 336,000 column chunks in memory at
    100x the reads; format 6 gathers whole jobs.  A format-5 run reads the same, exports
    the same CSV, and a resume migrates it into the bytes a format-6 run writes."""
    import shutil

    import pyarrow.parquet as pq

    from audit.rundir._integrity import read_checked

    old = tmp_path / "old"
    shutil.copytree(small_run, old)
    as_format_5(old)
    assert pq.ParquetFile(old / "results.parquet").num_row_groups == 24
    frame, integrity = read_checked(old, None)
    assert integrity.damage == []
    assert integrity.state == "complete"
    pd.testing.assert_frame_equal(frame, read_checked(small_run, None)[0])
    exported = run("export", str(old), "--csv", "--out", str(tmp_path / "rows.csv"))
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "rows.csv").read_bytes() == (small_run / "results.csv").read_bytes()
    store_sql(old, "DELETE FROM jobs WHERE job_key IN (SELECT job_key FROM jobs LIMIT 7)")
    result = run("run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(old))
    assert result.exit_code == 0, result.output
    assert (old / "results.parquet").read_bytes() == (small_run / "results.parquet").read_bytes()
    assert json.loads((old / "manifest.json").read_text())["format"] == 6
    assert store_sql(old, "SELECT version FROM store_format") == [(6,)]


def test_row_groups_gather_whole_jobs_and_every_reader_finds_them(
    small_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """With row groups of at most 100 rows (two or three jobs), a job's rows are found inside its group by the report, the export and a resume."""
    import shutil

    import pyarrow.parquet as pq

    from audit.rundir import _results
    from audit.rundir._integrity import read_checked

    monkeypatch.setattr(_results, "ROW_GROUP_ROWS", 100)
    out = tmp_path / "small-groups"
    args = ["run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--csv"]
    assert run(*args, "--out", str(out)).exit_code == 0
    handle = pq.ParquetFile(out / "results.parquet")
    jobs = [
        [rows for _key, _start, rows in _results.job_runs(handle.read_row_group(g)["job_key"])]
        for g in range(handle.num_row_groups)
    ]
    assert sum(len(group) for group in jobs) == 24  # each job whole, in one group
    assert len(jobs) > 1
    assert all(sum(group) <= 100 < sum(group) + after[0] for group, after in pairwise(jobs))
    frame, integrity = read_checked(out, None)
    assert integrity.damage == []
    pd.testing.assert_frame_equal(frame, read_checked(small_run, None)[0])
    assert (out / "results.csv").read_bytes() == (small_run / "results.csv").read_bytes()
    copy = tmp_path / "resumed"
    shutil.copytree(out, copy)
    store_sql(copy, "DELETE FROM jobs WHERE job_key IN (SELECT job_key FROM jobs LIMIT 3 OFFSET 5)")
    (copy / "results.csv").unlink()
    assert run(*args, "--out", str(copy)).exit_code == 0
    assert (copy / "results.parquet").read_bytes() == (out / "results.parquet").read_bytes()
    assert (copy / "results.csv").read_bytes() == (small_run / "results.csv").read_bytes()


def test_summary_scores_and_selection_flag(small_run: Path):
    summary = json.loads((small_run / "summary.json").read_text())
    scores = {
        (e["condition"], e["transform"], e["family"]): e
        for e in summary["scores"]
        if e["budget"] == 1200
    }
    full = scores[("full", "identity", "all")]
    # every count is named by its unit: source pairs, blocks or reads
    assert full["source pairs"]["reveal"] == {"k": 24, "k_high": 24, "n": 24}
    assert full["reads"]["reveal"] == {"k": 48, "k_high": 48, "n": 48}
    assert full["source pairs"]["joint_J"] == {"k": 24, "k_high": 24, "n": 24}
    latest = scores[("frontier_latest", "identity", "all")]
    assert latest["reads"]["current"] == {"k": 48, "k_high": 48, "n": 48}
    assert latest["source pairs"]["collision"]["k"] >= 8
    assert latest["source pairs"]["reveal"]["k"] < 24
    late = scores[("frontier", "identity", "late_reference")]
    assert late["reads"]["late_reference_adequacy"]["k"] >= 7
    flag = summary["selection"][0]
    assert flag["warn"]
    assert "frontier_latest" in flag["misleading"]
    assert any(
        g["condition"] == "frontier" and g["transform"] == "rename"
        for g in summary["shortcut_gaps"]
    )
    # equivariance is only judged on renamed instances
    violations = scores[("full", "rename", "all")]["equivariance_violations"]
    assert violations["reads"]["n"] > 0
    assert violations["reads"]["k"] == 0
    assert violations["source pairs"] == {"k": 0, "k_high": 0, "n": 24}


def test_resume_after_lost_jobs_reproduces_the_uninterrupted_run(small_run: Path, tmp_path: Path):
    import shutil

    copy = tmp_path / "resumed"
    shutil.copytree(small_run, copy)
    db = sqlite3.connect(copy / "store.sqlite")
    lost = [k for (k,) in db.execute("SELECT job_key FROM jobs LIMIT 7")]
    db.executemany("DELETE FROM jobs WHERE job_key = ?", [(k,) for k in lost])
    db.commit()
    db.close()
    (copy / "results.csv").unlink()
    result = run("run", *SMALL, "--conditions", "frontier,frontier_latest,full", "--out", str(copy))
    assert result.exit_code == 0, result.output
    assert (copy / "results.parquet").read_bytes() == (small_run / "results.parquet").read_bytes()

    def key(r):
        return (r["pair_id"], r["condition"], r["variant"], r["branch"], r["budget"])

    before = sorted(csv_rows(result_csv(small_run)), key=key)
    after = sorted(csv_rows(result_csv(copy)), key=key)
    assert after == before
    # jobs are written in plan order, whichever finished first: the files are identical
    assert (copy / "results.csv").read_bytes() == (small_run / "results.csv").read_bytes()


def test_existing_run_with_other_config_is_refused(small_run: Path):
    stamp = (small_run / "results.csv").stat().st_mtime_ns
    result = run("run", *SMALL, "--conditions", "tail", "--out", str(small_run))
    assert result.exit_code == 2
    assert "differs in: compressor_versions, conditions" in result.output
    assert "never overwritten" in result.output
    assert (small_run / "results.csv").stat().st_mtime_ns == stamp


def test_non_run_directory_is_refused(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("mine")
    result = run("run", *SMALL, "--conditions", "tail", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "not a run directory" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--conditions", "frontier,nope"], "unknown condition 'nope'; known: tail, type_pin"),
        (
            ["--transforms", "identity,shuffle:3"],
            "unknown transform 'shuffle'; known: identity, rename",
        ),
        (["--transforms", "rename:0"], "K must be positive"),
        # a run of renamings alone printed no verdict and a report that called its
        # renamed instances "only the identity instances" (a new-user walkthrough)
        (["--transforms", "rename:2"], "'rename:2' has no identity"),
        (["--budget", "0"], "--budget: 0 must be positive"),
        (["--budget", "12x"], "'12x' is not an integer"),
        (["--conditions", "frontier:budget=-5"], "budget must be positive"),
        (["--conditions", "tail:depth=3"], "tail: parameter depth: Extra inputs are not permitted"),
        (
            ["--pairs", "/nonexistent/pairs.jsonl"],
            "/nonexistent/pairs.jsonl: cannot read pair file",
        ),
        (["--conditions", "frontier,frontier"], "listed twice"),
        (["--conditions", "full:budget=600,full: budget=600"], "listed twice"),
        (["--conditions", "full:budget=600,full:budget=0600"], "listed twice"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(tmp_path: Path, args, message):
    out = tmp_path / "never"
    base = ["--transforms", "identity", "--quiet", "--workers", "1"]
    if "--pairs" not in args:
        base += ["--preset", "cca-pilot"]
    result = run("run", *base, *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


def test_pairs_file_and_per_condition_budget(tmp_path: Path):
    pairs_dir = tmp_path / "pairs"
    generated = run("generate", "--families", "late_reference,expiry", "--pairs-per-family", "2",
                    "--seed", "3", "--out", str(pairs_dir))  # fmt: skip
    assert generated.exit_code == 0
    out = tmp_path / "run"
    result = run("run", "--pairs", str(pairs_dir / "pairs.jsonl"), "--conditions",
                 "frontier:budget=2400,tail", "--budget", "600,1200", "--transforms", "identity",
                 "--workers", "2", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = csv_rows(result_csv(out))
    cells = {(r["condition"], r["budget"]) for r in rows}
    assert cells == {("frontier:budget=2400", "2400"), ("tail", "600"), ("tail", "1200")}
    assert all(int(r["memory_bytes"]) <= int(r["budget"]) for r in rows)
    assert {r["family"] for r in rows} == {"late_reference", "expiry"}
    report = run("report", str(out))
    assert report.exit_code == 0, report.output
    md = (out / "report" / "report.md").read_text()
    assert "- budgets: 600, 1200, 2400 B" in md  # the budgets scored, the condition's own too


def test_a_memory_over_its_budget_is_a_warning_in_the_console_and_the_report(
    tmp_path: Path, plugin
):
    """A plugin that ignores the budget had each memory emptied and scored (2/84 pairs
    kept) with no word anywhere: the user read a bad compressor where there was a broken
    one.  Now the console and the report say which condition went over the budget and
    on how many reads, one text, kept in summary.json."""
    plugin(
        "keep_all_plugin",
        """
        from compressors import Compressor, dump, load

        class KeepAll(Compressor):
            name = "keep_all"
            summary = "every record, whatever the budget"

            def update(self, memory, chunk, query_keys, budget):
                return dump([*load(memory), *chunk.records])
        """,
    )
    import pyarrow.parquet as pq

    out = tmp_path / "run"
    result = runner.invoke(
        app,
        ["run", "--preset", "cca-pilot", "--conditions", "keep_all_plugin:KeepAll,tail",
         "--transforms", "identity", "--workers", "1", "--quiet", "--out", str(out)],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out / "results.parquet").to_pandas()
    mine = rows[rows["condition"].astype(str) == "keep_all"]
    over = int((mine["overflow"] > 0).sum())
    assert 0 < over <= len(mine)
    assert not (rows.loc[rows["condition"].astype(str) == "tail", "overflow"] > 0).any()
    said = f"keep_all's memory went over the 1200 B budget on {over}/{len(mine)} reads"
    console = " ".join(result.output.split())
    assert f"warning: {said}" in console, console
    assert "tail's memory" not in console
    alerts = json.loads((out / "summary.json").read_text())["budget_alerts"]
    assert alerts == [{"condition": "keep_all", "budget": 1200, "k": over, "n": len(mine)}]
    report = run("report", str(out), "--out", str(out / "report"))
    assert report.exit_code == 0, report.output
    md = " ".join((out / "report" / "report.md").read_text().split())
    assert said[0].upper() + said[1:] in md, md[:2000]


def test_a_plugin_that_raises_is_recorded_and_fails_the_run(tmp_path: Path, plugin):
    plugin(
        "exploding_plugin",
        """
        from compressors import Compressor

        class Exploding(Compressor):
            name = "exploding"
            summary = "raises on the third chunk"

            def update(self, memory, chunk, query_keys, budget):
                if memory.count("\\n") > 6:
                    raise RuntimeError("boom from the plugin")
                return "\\n".join(filter(None, [memory, *(r.canonical_json() for r in chunk.records[:2])]))
        """,
    )
    out = tmp_path / "run"
    result = run("run", "--preset", "cca-pilot", "--conditions", "exploding_plugin:Exploding,full",
                 "--transforms", "identity", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == EXIT_COMPRESSOR_RAISED, result.output  # finished, but failed
    rows = csv_rows(result_csv(out))
    plugin_rows = [r for r in rows if r["condition"] == "exploding"]  # its class's name
    assert {r["outcome"] for r in plugin_rows} <= {"error", "pass", "wrong_log"}
    assert any(r["outcome"] == "error" for r in plugin_rows)
    assert all(r["correct"] == "0" for r in plugin_rows if r["outcome"] == "error")
    assert {r["outcome"] for r in rows if r["condition"] == "full"} == {"pass"}
    log = (out / "run.log").read_text()
    assert "RuntimeError: boom from the plugin" in log
    assert "Traceback" in log


def test_default_conditions_are_every_deterministic_builtin(tmp_path: Path):
    out = tmp_path / "all"
    result = run("run", "--preset", "cca-pilot", "--transforms", "identity", "--workers", "2",
                 "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    conditions = {r["condition"] for r in csv_rows(result_csv(out))}
    assert conditions == set(deterministic_builtins())
    assert {"prose_high", "direct_prose"}.isdisjoint(conditions)
    assert "current accuracy would pick" in result.output


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "..", "x" * 101, "", "a\\b"])
def test_run_names_cannot_traverse_paths(tmp_path: Path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    result = run("run", "--preset", "cca-pilot", "--conditions", "tail", "--transforms", "identity",
                 "--quiet", "--name", name)  # fmt: skip
    assert result.exit_code == 2
    assert "--name" in result.output
    assert list(tmp_path.iterdir()) == []
    assert not (tmp_path.parent / "escape").exists()


def test_a_named_run_lands_under_runs(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("run", "--preset", "cca-pilot", "--conditions", "tail", "--transforms", "identity",
                 "--quiet", "--workers", "1", "--name", "pilot-1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "pilot-1" / "summary.json").exists()


def test_builtin_conditions_leave_no_reference_cycles():
    # a job of built-ins ends by freezing what it left instead of collecting it
    # (audit.engine._executor._cycle_collection_after): sound only while they create no cycles
    import gc

    from audit.engine import run_job
    from audit.plan import parse_transforms
    from histories import PRESETS, generate

    pairs = generate(PRESETS["cca-pilot"])[:: PRESETS["cca-pilot"].pairs_per_family]  # each family
    cells = [(parse_spec(condition), 600) for condition in deterministic_builtins()]
    transforms = [parse_transforms(t)[0] for t in ("identity", "rename:2", "permute:2")]
    gc.collect()
    gc.disable()
    try:
        for pair in pairs:
            run_job("k", pair, cells, transforms, 0)
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0, f"the built-in conditions left {found} objects in reference cycles"


def test_only_jobs_of_builtins_skip_the_cycle_collection():
    from audit.engine._executor import builtins_only

    def cells(*labels: str) -> list:
        return [(parse_spec(label), 1200) for label in labels]

    assert builtins_only(cells(*deterministic_builtins()))
    assert builtins_only(cells("frontier:budget=2400"))
    assert not builtins_only(cells("tail", "exploding_plugin:Exploding"))
    assert not builtins_only(cells("prose_high"))  # an LLM writer


def test_column_builder_table_equals_the_row_by_row_table():
    # a job's table is assembled column by column; it must equal the one built from rows
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from audit.engine._rows import READ as READ_COLUMNS
    from audit.engine._rows import SHARED as SHARED_COLUMNS
    from audit.rundir import ColumnBuilder
    from audit.rundir._columns import results_table

    def value(column):
        if column in ("budget", "repeat", "transform_index", "collision", "correct", "adequate",
                      "memory_bytes", "overflow", "equivariant"):  # fmt: skip
            return st.none() | st.integers(-5, 10**12)
        if column == "wrong_answer":  # a closed vocabulary, stored as codes
            return st.none() | st.sampled_from(list(WRONG_ANSWERS))
        return st.none() | st.text(max_size=8)

    group = st.tuples(
        st.tuples(*(value(c) for c in SHARED_COLUMNS)),
        st.lists(st.tuples(*(value(c) for c in READ_COLUMNS)), max_size=6),
    )

    @settings(max_examples=60, deadline=None)
    @given(groups=st.lists(group, max_size=8))
    def check(groups):
        builder = ColumnBuilder(SHARED_COLUMNS, READ_COLUMNS)
        for shared, rows in groups:
            builder.add_group(shared, rows)
        assert len(builder) == sum(len(rows) for _, rows in groups)
        table = builder.table()
        assert table.equals(results_table(builder.rows()))
        assert table.to_pylist() == results_table(builder.rows()).to_pylist()

    check()
    with pytest.raises(ValueError, match="bad column split"):
        ColumnBuilder(["pair_id"], ["pair_id"])
    builder = ColumnBuilder((), ["wrong_answer"])
    builder.add_group((), [["stale"], ["mistaken"]])
    with pytest.raises(TypeError, match=r"wrong_answer: not a wrong_answer: \['mistaken'\]"):
        builder.table()


@pytest.mark.parametrize("workers", ["257", "100000", "99999999999999999999"])
def test_workers_beyond_the_cap_are_refused_before_anything_is_made(tmp_path: Path, workers: str):
    """Each worker is a process of about 100 MB: 100,000 of them took a host down."""
    out = tmp_path / "r"
    result = run("run", "--conditions", "frontier", "--workers", workers, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "less than or equal to 256" in result.output
    assert not out.exists()


def test_more_workers_than_jobs_finish_the_run(tmp_path: Path):
    """At most one process per job is started (256 asked, 84 jobs)."""
    out = tmp_path / "r"
    result = run("run", "--conditions", "frontier", "--transforms", "identity", "--workers", "256",
                 "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    costs = json.loads((out / "costs.json").read_text())
    assert costs["invocations"][0]["deterministic"]["jobs"] == 84


def test_two_runs_racing_into_one_new_directory_never_mix(tmp_path: Path):
    """Two first runs of different plans into one new directory: one wins, the other is
    refused before it writes anything, and the directory holds the winner alone."""
    import subprocess

    def start(conditions: str, out: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "audit", "run", "--preset", "cca-pilot-paper",
             "--conditions", conditions, "--transforms", "identity", "--workers", "1",
             "--quiet", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    for attempt in range(4):
        out = tmp_path / f"race-{attempt}"
        first, second = start("frontier,tail", out), start("frontier", out)
        outcomes = {}
        for conditions, process in (("frontier,tail", first), ("frontier", second)):
            _, stderr = process.communicate(timeout=300)
            outcomes[conditions] = (process.returncode, stderr)
        codes = sorted(code for code, _ in outcomes.values())
        assert codes == [0, 2], outcomes
        winner = next(c for c, (code, _) in outcomes.items() if code == 0)
        loser_error = next(err for code, err in outcomes.values() if code == 2)
        assert "holds a different run" in loser_error
        stored = json.loads((out / "config.json").read_text())["config"]["conditions"]
        assert [c["name"] if isinstance(c, dict) else c for c in stored] == winner.split(",")
        rows = pd.read_csv(result_csv(out))
        assert set(rows["condition"]) == set(winner.split(","))


def test_a_run_ends_with_what_to_do_next_and_a_whole_run_resumes_to_its_answer(tmp_path: Path):
    out = tmp_path / "r"
    first = run("run", "--conditions", "frontier", "--transforms", "identity", "--workers", "1",
                "--quiet", "--out", str(out))  # fmt: skip
    assert first.exit_code == 0, first.output
    lines = first.output.strip().splitlines()
    start = lines.index(f"next: audit report {out}")
    assert lines[start + 1] == "      (report.html and report.md in its report/)"
    hint = " ".join(lines[start + 2 :])  # the LLM path's one command, last
    assert "--reader local" in hint
    assert "--llm-conditions full" in hint
    # a resume of a whole run recorded an invocation of nothing (which the report then
    # counted as "a resumed run") and wrote every file again: it now writes nothing
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    again = run("resume", str(out), "--quiet")
    assert again.exit_code == 0, again.output
    assert again.output.splitlines()[0] == (
        f"complete: nothing to do; {out} is whole and was left as it is"
    )
    assert " in 0." not in again.output  # no timing of nothing
    assert "next: audit report" in again.output
    assert "--reader local" not in again.output  # the LLM hint: once, when the run was made
    # ... and it says its answer again (it said only "nothing to do": no command showed a
    # finished run's verdict again)
    verdict = next(line for line in lines if line.lstrip().startswith("frontier "))
    assert verdict in again.output.splitlines()
    assert re.search(r"reads on \d+ source pairs \(transform seed \d+\); results in",
                     " ".join(again.output.split()))  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name in files} == files
    # whatever is not whole is written again, and the line says so
    (out / "summary.json").write_text("{}")
    mended = run("resume", str(out), "--quiet")
    assert mended.exit_code == 0, mended.output
    assert mended.output.splitlines()[0] == (
        f"complete: every job of {out} was already finished; its result files were written again"
    )
    assert (out / "summary.json").read_bytes() == files["summary.json"]


def _swap_planned(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    jobs = manifest["planned_jobs"]
    jobs[0], jobs[1] = jobs[1], jobs[0]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def _fewer_finished(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["finished_jobs"] = 3
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage",
    [
        _swap_planned,  # the report: "manifest.json was changed after the run wrote it"
        _fewer_finished,  # the report: INCOMPLETE, 3 of 24 source pairs finished
        lambda run_dir: (run_dir / "costs.json").unlink(),  # its work unrecorded
        lambda run_dir: (run_dir / "costs.json").write_text("{}"),
    ],
)
def test_a_run_the_report_finds_not_whole_is_never_left_as_it_is(
    small_run: Path, tmp_path: Path, damage: Callable[[Path], None]
):
    """An adversary's finding: resume's first check of wholeness (files against the
    manifest, the store's jobs) left a run as it was that the report itself called
    changed or incomplete, or whose costs.json was gone.  Whole now means what the
    report finds, and more."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(small_run, copy)
    damage(copy)
    again = run("resume", str(copy), "--quiet")
    assert again.exit_code == 0, again.output
    assert "nothing to do" not in again.output
    report = run("report", str(copy), "--out", str(tmp_path / "report"))
    assert report.exit_code == 0, report.output


@pytest.mark.parametrize("columns", [80, 120, 250])
def test_the_console_fits_the_terminal_and_never_cuts_a_name(tmp_path: Path, columns: int):
    conditions = "frontier,tail,dependency_closure,probe_rare_op_or_value"
    result = runner.invoke(
        app,
        ["run", "--conditions", conditions, "--transforms", "identity,rename:2,permute:2",
         "--workers", "1", "--quiet", "--out", str(tmp_path / "r"), "--verbose"],
        env={"COLUMNS": str(columns)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    out = str(tmp_path / "r")
    assert max(len(line) for line in lines if out not in line) <= columns
    assert "…" not in result.output
    assert "Wrong reads at identity, by what the answer is" in result.output
    start = next(i for i, text in enumerate(lines) if "Exact reader at 1200 B" in text)
    table = "\n".join(
        lines[start : next(i for i, text in enumerate(lines) if text.startswith("warning"))]
    )
    for name in conditions.split(","):
        assert f" {name} " in table + " ", name
    assert all(f"/{n}" in table for n in ("84",))  # denominators whole
    if columns >= 250:
        assert "@rename" in table  # the full table when it fits
    else:
        assert "in summary.json and the report" in " ".join(result.output.split())


def test_a_long_condition_name_gets_an_alias_rather_than_cut_columns(tmp_path: Path):
    """An external system's condition name is a whole command line: at 80 columns the
    table names it c1 and prints the name under it, and no header or number is cut."""
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "keep_newest.py"
    condition = f"cmd:{sys.executable} {example}"
    result = runner.invoke(
        app,
        ["run", "--conditions", f"frontier,{condition}", "--transforms", "identity",
         "--workers", "1", "--quiet", "--out", str(tmp_path / "r"), "--verbose"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    lines = result.output.splitlines()
    assert f"c1 = {condition}" in lines
    start = next(i for i, text in enumerate(lines) if "Exact reader at 1200 B" in text)
    table = lines[start : lines.index(f"c1 = {condition}")]
    assert max(len(line) for line in table) <= 80
    assert any(line.split()[:1] == ["c1"] for line in table), table
    for header in ("current", "reveal", "joint J", "late-ref", "collided"):
        assert header in "\n".join(table)


def test_one_long_name_is_the_only_one_aliased(tmp_path: Path):
    """Issue 28: one long cmd: name renamed four other conditions to c1..c4; the longest
    names are aliased first, only as many as the table needs."""
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "keep_newest.py"
    # a long path, as in CI's venv: the verdict lines fold a name wider than the terminal
    condition = f"cmd:{sys.executable} {example} --{'x' * 40}"
    others = ["frontier_no_tombstone", "dependency_closure", "probe_lexicographic", "tail"]
    # the table is --verbose's; the verdict lines give a long name a line of its own
    result = runner.invoke(
        app,
        ["run", "--conditions", ",".join([*others, condition]), "--transforms", "identity",
         "--workers", "1", "--quiet", "--out", str(tmp_path / "r"), "--verbose"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"c1 = {condition}" in lines
    assert not any(line.startswith("c2 = ") for line in lines), result.output
    table = lines[: lines.index(f"c1 = {condition}")]
    assert max(len(line) for line in table) <= 80
    for name in others:
        assert any(line.split()[:1] == [name] for line in table), (name, table)


def test_a_named_cmd_condition_is_labelled_by_its_name_and_pairs_across_runs(tmp_path: Path):
    """``cmd:name=NAME,run=COMMAND``: results, the table and compare say NAME; the
    same command resumes the run, and compare pairs the condition by its name."""
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "keep_newest.py"
    condition = f"cmd:name=keep_newest,run={sys.executable} {example}"
    args = ["run", "--conditions", f"tail,{condition}", "--transforms", "identity",
            "--workers", "1", "--quiet", "--reference", condition]  # fmt: skip
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        result = runner.invoke(app, [*args, "--out", str(out)], env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
    assert "c1 = " not in result.output
    assert any(line.split()[:1] == ["keep_newest"] for line in result.output.splitlines())
    rows = pd.read_parquet(second / "results.parquet", columns=["condition"])
    assert set(rows["condition"]) == {"tail", "keep_newest"}
    config = json.loads((second / "config.json").read_text())
    assert config["config"]["conditions"] == ["tail", condition]  # the spec as written
    assert config["config"]["reference"] == "keep_newest"  # --reference takes either
    again = runner.invoke(app, [*args, "--out", str(second)])
    assert again.exit_code == 0, again.output
    assert "complete: nothing to do" in again.output
    compared = runner.invoke(
        app, ["compare", str(first), str(second), "--out", str(tmp_path / "c")]
    )
    assert compared.exit_code == 0, compared.output
    assert "not compared" not in compared.output
    assert "keep_newest" in compared.output


def test_a_name_must_be_a_word_and_labels_must_differ(tmp_path: Path):
    out = str(tmp_path / "r")
    bad = runner.invoke(app, ["run", "--conditions", "cmd:name=a:b,run=true", "--out", out])
    assert bad.exit_code == 2, bad.output
    assert "name='a:b' must be a word" in bad.output
    twice = runner.invoke(
        app, ["run", "--conditions", "tail:name=mine,frontier:name=mine", "--out", out]
    )
    assert twice.exit_code == 2, twice.output
    assert "'tail:name=mine' and 'frontier:name=mine' are both labelled 'mine'" in twice.output


def test_the_console_names_the_best_the_ceiling_and_the_floor_and_what_it_left_out(
    tmp_path: Path,
):
    """The headline in one line per budget (ties named), and the note under a compact
    table lists only what it left out: with two budgets the budget column is shown, and
    the note used to say it was not."""
    result = runner.invoke(
        app,
        ["run", "--conditions", "frontier,frontier_alpha,tail,full,probe_lowrev",
         "--budget", "600,1200", "--transforms", "identity,rename:1", "--workers", "1",
         "--quiet", "--out", str(tmp_path / "r"), "--verbose"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    again = runner.invoke(app, ["resume", str(tmp_path / "r")], env={"COLUMNS": "80"})
    assert again.exit_code == 0, again.output  # the same run: its answer, not verbose
    plain = " ".join(again.output.split())
    left = said.split("(at 80 columns: ", 1)[1].split(")", 1)[0]
    assert "budget" not in left, left
    assert "override" in left
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    for budget in (600, 1200):
        joint = {
            e["condition"]: e["source pairs"]["joint_J"]
            for e in summary["scores"]
            if e["family"] == "all" and e["transform"] == "identity" and e["budget"] == budget
        }
        top = max(joint[c]["k"] for c in ("frontier", "frontier_alpha", "tail"))
        best = [c for c in ("frontier", "frontier_alpha", "tail") if joint[c]["k"] == top]
        line = said.split(f"joint J at {budget} B: ", 1)[1].split(" joint J at ", 1)[0]
        assert f"best {', '.join(best) if top else 'none passes'} {top}/84" in line
        assert f"ceiling full {joint['full']['k']}/84" in line
        assert f"floor probe_lowrev {joint['probe_lowrev']['k']}/84" in line
        # a floor above the best is explained, not left to read as "nothing beats it",
        # without --verbose too (a new user found the reason only with it)
        above = joint["probe_lowrev"]["k"] > top
        assert (f"note: at {budget} B the floor is above the best at identity" in said) == above
        assert (f"note: at {budget} B the floor is above the best at identity" in plain) == above
    # a floor and a ceiling are there: no note asks for them
    assert "add `baselines`" not in said
    # an archive is marked as one (only the best archive is the ceiling), and the legend
    # says why its collisions are no failure
    assert "full (archive)" in said
    assert "(ceiling)" not in said
    assert "a failure for a strict memory; an archive re-reads the raw history" in said


def test_baselines_adds_every_archive_and_probe_and_a_run_without_them_says_so(
    tmp_path: Path, plugin
):
    """``--conditions my_memory`` alone gave a score with nothing to read it against and
    no word about it; ``baselines`` brings the ceiling and the floor in, each once.  The
    command the note suggests is the one given, a plugin as it was written (it named the
    plugin's class name, which --conditions refuses)."""
    from audit.plan import parse_conditions
    from compressors import baseline_conditions, builtins

    # a baseline listed with its own parameters keeps them and is not run twice, and
    # parameters given to baselines go to each of them
    once = [s.label for s in parse_conditions("tail,probe_newest:budget=600,baselines")]
    assert once.count("probe_newest:budget=600") == 1
    assert "probe_newest" not in once
    each = [s.label for s in parse_conditions("tail,baselines:budget=600")]
    assert each[1:] == [f"{name}:budget=600" for name in baseline_conditions()]
    expanded = [s.label for s in parse_conditions("frontier,full,baselines")]
    kinds = {name: cls.kind for name, cls in builtins().items()}
    assert expanded[:2] == ["frontier", "full"]
    assert sorted(expanded[1:]) == sorted(baseline_conditions())
    assert {kinds[n] for n in baseline_conditions()} == {"archive", "probe"}
    assert all(n in baseline_conditions() for n, k in kinds.items()
               if k == "probe" and n in deterministic_builtins())  # fmt: skip

    def said(conditions: str, out: str) -> str:
        """The console of a run of ``conditions`` at identity, on one line."""
        result = runner.invoke(
            app,
            ["run", "--conditions", conditions, "--transforms", "identity", "--workers", "1",
             "--quiet", "--out", str(tmp_path / out)],
            env={"COLUMNS": "80"},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    alone = said("frontier,tail", "alone")
    assert "no shortcut probe (the floor) and no archive (the ceiling)" in alone
    assert "(--conditions frontier,tail,baselines)" in alone
    assert "beat a shortcut or how far they are from the whole history" in alone

    # with the ceiling in the run, only the floor is missing, and only it is said to be
    # (the note said "how far they are from the whole history" beside `full`)
    ceiling = said("frontier,full", "ceiling")
    assert "no shortcut probe (the floor) in this run, so nothing says whether" in ceiling
    assert "how far they are from the whole history" not in ceiling

    plugin(
        "newest_plugin",
        """
        from compressors import Compressor, Stream, pack_positions

        class NewestFirst(Compressor):
            name = "newest_first"
            summary = "the newest records that fit"

            def update(self, memory, chunk, query_keys, budget):
                stream = Stream.of(memory, chunk)
                order = range(len(stream) - 1, -1, -1)
                return stream.dump(pack_positions(order, stream.sizes, budget))
        """,
    )
    mine = said("newest_plugin:NewestFirst,tail", "plugin")
    assert "(--conditions newest_plugin:NewestFirst,tail,baselines)" in mine
    assert said("newest_plugin:NewestFirst,tail,baselines", "suggested")

    both = said("frontier,baselines", "with")
    assert "add `baselines`" not in both
    assert "ceiling: full" in both or "ceiling: dependency_closure" in both
    assert "floor: probe_" in both


def test_a_budget_no_record_fits_in_is_said_to_empty_every_memory(tmp_path: Path):
    """``--budget 1`` (bytes, where a user may think kilobytes) printed "best none passes
    0/24 ... floor none passes 0/24" and nothing on why (a new user's finding): the
    console now says that every memory is empty at that budget, and not at one where
    records fit."""
    result = runner.invoke(
        app,
        ["run", "--preset", "cca-pilot-paper", "--conditions", "frontier,tail,full",
         "--transforms", "identity", "--budget", "1,1200", "--workers", "1", "--quiet",
         "--out", str(tmp_path / "r")],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "note: at 1 B every memory is empty: no record fits in it" in said
    assert "note: at 1200 B every memory is empty" not in said


def test_the_default_console_answers_first_one_verdict_line_per_condition(tmp_path: Path):
    """A new user's question, answered from the console alone: the words are defined
    before the verdicts use them, each strict condition has one verdict line of at most
    80 columns whose joint J k/n is summary.json's, the ceiling and the floor follow,
    and the whole answer is short (the tables by transform are --verbose)."""
    out = tmp_path / "r"
    result = runner.invoke(
        app,
        ["run", "--transforms", "identity,rename:1", "--workers", "2", "--quiet",
         "--out", str(out)],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # 32 before the best condition was named in words and the floor's warning said that
    # a probe scores significantly higher (a new user's two questions): 34; and why the
    # floor is above every condition (the third, answered only with --verbose): 36
    assert len(lines) <= 36, result.output
    assert max(len(line) for line in lines if str(out) not in line) <= 80
    summary = json.loads((out / "summary.json").read_text())
    joint = {
        e["condition"]: e["source pairs"]["joint_J"]
        for e in summary["scores"]
        if (e["family"], e["transform"], e["reader"]) == ("all", "identity", "exact")
    }
    header = next(i for i, line in enumerate(lines) if "keeps (joint J)" in line)
    said_before = " ".join(" ".join(lines[:header]).split())
    for term in ("A source pair:", "keeps:", "beats floor?:", "collides:", "flattered?:"):
        assert term in said_before, term  # defined before the verdicts use it
    assert "Verdicts at 1200 B, exact reader, 84 source pairs:" in lines[header - 1]
    unbeaten = {m["condition"] for m in summary["probe_matches"]}
    strict = [c for c, kind in summary["kinds"].items() if kind == "strict"]
    assert len(strict) >= 5
    for condition in strict:
        found = [line for line in lines[header:] if line.split()[:1] == [condition]]
        assert len(found) == 1, (condition, found)
        words = found[0].split()
        assert words[1] == f"{joint[condition]['k']}/{joint[condition]['n']}"
        floor = words[4]  # condition, k/n, [low, high], beats floor?
        assert floor == ("no" if condition in unbeaten or not joint[condition]["k"] else "yes")
    verdicts = {v["condition"]: v for v in summary["verdicts"]}
    assert set(verdicts) == set(joint)  # every condition has its verdict in summary.json
    for name, verdict in verdicts.items():
        assert (verdict["keeps_k"], verdict["n"]) == (joint[name]["k"], joint[name]["n"])
        if verdict["flattered"]:
            assert (
                verdict["current_k"] / verdict["current_n"] - verdict["keeps_k"] / verdict["n"]
                >= 0.2
            )
    archives = [c for c, kind in summary["kinds"].items() if kind == "archive"]
    top = max(joint[c]["k"] for c in archives)
    ceiling = next(line for line in lines if line.startswith("  ceiling: "))
    assert f"{top}/84" in ceiling
    assert any(line.startswith("  floor: probe_") for line in lines)
    # the best strict condition named in words, after the table (it was --verbose only)
    best = max(joint[c]["k"] for c in strict)
    named = [c for c in strict if joint[c]["k"] == best]
    said = " ".join(result.output.split())
    assert f"joint J at 1200 B: best {', '.join(named)} {best}/84" in said
    assert "Exact reader" not in result.output  # the tables by metric: --verbose
    assert "--verbose" in result.output
