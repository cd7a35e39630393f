"""`audit report` / `audit compare`: content, hostile model output, pagination, Chromium."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.rundir import RunStore, pack_job
from histories import WRONG_ANSWERS, GenerationConfig, distinguishing_ids, generate
from reports import visible
from tests._system import missing

runner = CliRunner()
MAX_PAGE_BYTES = 10_000_000


def run(*args: str):
    return runner.invoke(app, list(args))


# ------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real (small) deterministic run with two budgets and one renaming transform."""
    out = tmp_path_factory.mktemp("runs") / "real"
    result = run(
        "run",
        "--preset",
        "cca-pilot-paper",
        "--conditions",
        "frontier,frontier_latest,tail",
        "--transforms",
        "identity,rename:2",
        "--budget",
        "600,1200",
        "--workers",
        "1",
        "--quiet",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    result = run("report", str(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory) -> Path:
    """A small run with shortcut probes: the floor box, spelling dependence and the
    selection warning all show (seconds)."""
    out = tmp_path_factory.mktemp("runs") / "probes"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 "frontier,frontier_latest,tail,probe_named,probe_lowrev", "--transforms",
                 "identity,rename:1", "--budget", "1200", "--workers", "1", "--quiet",
                 "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    result = run("report", str(out))
    assert result.exit_code == 0, result.output
    return out


HOSTILE = {
    "script": '<script>alert("x")</script>',
    "table": "</table></pre></td></tr><h1>broken out</h1>",
    "link": '<a href="javascript:alert(1)">click me</a> javascript:alert(2)',
    "img": "<img src=x onerror=alert(1)>",
    "control": "ctrl\x1b[31mred\x00nul\x07bel\u202eevil\u200bzw\x7f",
    "template": "{{ 7*7 }} {% raw %}",
    "long": "A" * 120_000,
}


def _hostile_memory(pair, variant: str, invent: bool) -> str:
    """A record line that names the distinguishing record, hostile lines, and (``invent``)
    a well-formed record that never was in the history."""
    distinct = sorted(distinguishing_ids(pair))[0]
    record = next(r for r in pair.prefix(variant) if r.id == distinct)
    made_up = json.dumps(
        {"id": "madeup1", "op": "set", "key": pair.query[0], "value": "invented", "rev": 999},
        separators=(",", ":"),
    )
    return "\n".join([record.canonical_json(), *HOSTILE.values(), *([made_up] if invent else [])])


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    """A synthetic run with an LLM reader whose answers and memories are hostile; NA reads."""
    root = tmp_path_factory.mktemp("runs") / "hostile"
    root.mkdir()
    pairs = generate(
        GenerationConfig(families=["rollback", "late_reference"], pairs_per_family=2, seed=3)
    )
    body = "".join(p.to_json() + "\n" for p in pairs).encode()
    (root / "pairs.jsonl").write_bytes(body)
    config = {
        "config": {
            "pairs": {"file": str(root / "pairs.jsonl")},
            "pairs_sha256": hashlib.sha256(body).hexdigest(),
            "conditions": ["frontier", "prose_high"],
            "budgets": [1200],
            "transforms": ["identity"],
            "seed": 0,
        },
        "environment": {"machine": "test"},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (root / "config.json").write_text(json.dumps(config))
    memories: dict[str, str] = {}
    rows = []
    outcomes = ["pass", "reader_error", "wrapper_only", "na", "wrong_log", "pass"]
    for p_index, pair in enumerate(pairs):
        for condition in ("frontier", "prose_high"):
            for v_index, variant in enumerate(("A", "B")):
                text = _hostile_memory(pair, variant, invent=condition == "prose_high")
                sha = hashlib.sha256(text.encode()).hexdigest()
                memories[sha] = text
                for b_index, branch in enumerate(("current", "reveal", "override")):
                    gold = json.dumps(pair.gold.of(variant).of(branch))
                    base = {
                        "pair_id": pair.pair_id,
                        "source_pair_id": pair.pair_id,
                        "family": pair.family,
                        "variant": variant,
                        "branch": branch,
                        "repeat": 0,
                        "condition": condition,
                        "budget": 1200,
                        "transform": "identity",
                        "memory_bytes": len(text.encode()),
                        "memory_sha256": sha,
                        "collision": int(condition == "prose_high"),
                        "gold": gold,
                    }
                    exact_ok = condition == "frontier"
                    rows.append(
                        base
                        | {
                            "reader": "exact",
                            "outcome": "pass" if exact_ok else "wrong_log",
                            "correct": int(exact_ok),
                            "adequate": int(exact_ok),
                            "answer": gold if exact_ok else HOSTILE["table"],
                        }
                    )
                    outcome = outcomes[(p_index + v_index + b_index) % len(outcomes)]
                    if p_index == 0:  # every read right but one NA: J is a bound 0..1
                        outcome = "na" if (v_index, b_index) == (1, 1) else "pass"
                    rows.append(
                        base
                        | {
                            "reader": "llm",
                            "reader_model": "m<script>x</script>",
                            "outcome": outcome,
                            "correct": None if outcome == "na" else int(outcome == "pass"),
                            "correct_lenient": None
                            if outcome == "na"
                            else int(outcome in ("pass", "wrapper_only")),
                            "adequate": int(exact_ok),
                            "answer": HOSTILE["script"] + HOSTILE["control"],
                            "raw_answer": HOSTILE["link"] + HOSTILE["img"] + HOSTILE["long"],
                            "error": HOSTILE["template"] if outcome == "na" else None,
                            "finish_reason": "length" if outcome == "reader_error" else "stop",
                            "tokens_prompt": 100,
                            "tokens_completion": 7,
                            "latency_s": 0.5,
                            "cache_hit": int(b_index == 0),
                        }
                    )
    pd.DataFrame(rows).to_csv(root / "results.csv", index=False)
    store = RunStore(root)
    assert store.add_job(pack_job("j", rows, memories))
    store.close()
    result = run("report", str(root))
    assert result.exit_code == 0, result.output
    return root


# ----------------------------------------------------------------------- a real run


def test_wrong_answers_are_stored_counted_and_shown_alike(real_run: Path):
    """results.parquet holds each wrong read's class as a one-byte code (its name in a
    frame and in results.csv), empty on a right read; summary.json's cells and the
    report's failures table count the same reads."""
    import pyarrow.parquet as pq

    from tests._rows import result_csv

    field = pq.ParquetFile(real_run / "results.parquet").schema_arrow.field("wrong_answer")
    assert str(field.type) == "dictionary<values=string, indices=int8, ordered=0>"
    rows = pd.read_csv(result_csv(real_run), dtype=str, keep_default_na=False)
    wrong = rows["correct"] == "0"
    assert (rows.loc[wrong, "wrong_answer"] != "").all()
    assert (rows.loc[~wrong, "wrong_answer"] == "").all()
    assert {"no_answer", "other_variant", "bound_elsewhere"} <= set(rows["wrong_answer"])
    counted = rows[wrong].groupby(["condition", "budget", "transform", "wrong_answer"]).size()
    summary = json.loads((real_run / "summary.json").read_text())
    cells = [e for e in summary["scores"] if e["family"] == "all"]
    assert cells
    for cell in cells:
        found = cell["wrong answers (reads)"]
        where = (cell["condition"], str(cell["budget"]), cell["transform"])
        expected = {c: int(n) for (*at, c), n in counted.items() if tuple(at) == where}
        assert found == expected, where
    taxonomy = pd.read_csv(real_run / "report" / "taxonomy.csv")
    for _, row in taxonomy.iterrows():
        where = (row["condition"], str(row["budget"]), "identity")
        for name in WRONG_ANSWERS:
            assert row[f"wrong_{name}"] == counted.get((*where, name), 0), (where, name)
    assert "wrong: other variant (reads)" in (real_run / "report" / "report.md").read_text()


def test_report_files_and_headline_numbers(real_run: Path):
    report = real_run / "report"
    for name in (
        "report.html",
        "report.md",
        "headline.csv",
        "comparisons.csv",
        "families.csv",
        "transforms.csv",
        "taxonomy.csv",
        "budget.csv",
        "costs.csv",
        "ranking.csv",
    ):
        assert (report / name).exists(), name
    headline = pd.read_csv(report / "headline.csv").set_index(["condition", "budget"])
    frontier = headline.loc[("frontier", 1200)]
    assert (frontier["joint_J_k"], frontier["joint_J_n"]) == (24, 24)  # n = source pairs
    latest = headline.loc[("frontier_latest", 1200)]
    assert (latest["current_k"], latest["joint_J_k"]) == (24, 8)
    assert latest["rank_differs"]
    # the flag is the selection warning's, among strict conditions: a column headed
    # "ranks differ?" left blank beside "18 / 17" read as a bug to a new user
    md = " ".join((report / "report.md").read_text().split())
    assert "| in a reversal? |" in md
    assert "The ranks count every condition; in a reversal? marks a strict condition" in md
    assert headline.loc[("tail", 600), "collision_k"] > 0
    assert 0.0 < frontier["joint_J_low"] < 1.0 == frontier["joint_J_high"]


def test_comparisons_are_paired_and_holm_corrected(real_run: Path):
    comparisons = pd.read_csv(real_run / "report" / "comparisons.csv")
    assert set(comparisons["a"]) == {"frontier"}
    row = comparisons[(comparisons["b"] == "frontier_latest") & (comparisons["budget"] == 1200)]
    row = row.iloc[0]
    assert (row["n_pairs"], row["only_a"], row["only_b"]) == (24, 16, 0)
    assert row["p_value"] == pytest.approx(2 * 0.5**16)
    assert row["p_holm"] >= row["p_value"]
    assert row["delta"] == pytest.approx(-16 / 24)
    # "underpowered" read per row: "yes" only where a miss could not tell; a significant
    # row below the detectable size is real, its size likely overstated (it used to read
    # "significant: yes, underpowered: yes" with nothing to say how to take both)
    for _, each in comparisons.iterrows():
        expected = (
            "" if not each["underpowered"]
            else "size likely overstated" if each["significant"] else "underpowered"
        )  # fmt: skip
        assert (each["power_reading"] if isinstance(each["power_reading"], str) else "") == (
            expected
        )


def test_a_significant_underpowered_difference_reads_as_overstated():
    from audit.reportdata._comparisons import with_holm

    table = with_holm(
        pd.DataFrame({"p_value": [0.001, 0.6, 0.001], "underpowered": [True, True, False]})
    )
    assert list(table["power_reading"]) == ["size likely overstated", "underpowered", ""]


def test_html_holds_every_section(real_run: Path):
    html = (real_run / "report" / "report.html").read_text()
    assert 'id="headline-table"' in html
    assert html.count("<svg") >= 5  # headline, forest, heatmap, transforms, budget, causes
    assert "Current accuracy would pick a different condition than reveal accuracy" in html
    assert "no LLM reader in this run" in html.replace("No LLM", "no LLM")
    assert "transformed instances are summarized" in html
    drilled = (real_run / "report" / "pairs-001.html").read_text()  # the drill-down's pages
    assert 'class="line mark"' in drilled  # a distinguishing record highlighted
    assert "A and B memories identical: collision" in drilled  # tail collides
    assert "evidence dropped by the compressor" in drilled
    for fetch in ("src=", "url(http", "@import", "<link", "<iframe", "<object"):
        assert fetch not in html.lower()  # nothing to fetch: one self-contained file
    for page in (real_run / "report").glob("*.html"):
        assert page.stat().st_size < MAX_PAGE_BYTES


def test_the_main_page_does_not_grow_with_the_drill_down(real_run: Path, tmp_path: Path):
    """Issue 28: the default audit's report.html was 6 MB and 160,000 px tall, nearly all
    of it the drill-down's first page (every failing memory and read of 12 pairs). The
    main page holds an index row per drilled pair now, whatever the pair's memories; the
    pairs are on pages of their own."""
    sizes = {}
    for drilled in (2, 0):  # 0: every source pair
        out = tmp_path / str(drilled)
        result = run("report", str(real_run), "--out", str(out), "--max-pairs", str(drilled))
        assert result.exit_code == 0, result.output
        sizes[drilled] = (out / "report.html").stat().st_size
        assert 'class="pair"' not in (out / "report.html").read_text()
    pairs = pd.read_csv(real_run / "report" / "headline.csv")["joint_J_n"].max()
    systems = len(pd.read_csv(real_run / "report" / "headline.csv"))
    per_pair = (sizes[0] - sizes[2]) / (pairs - 2)
    assert per_pair < 200 + 60 * systems, (per_pair, systems)  # # pair family outcome ...


def test_the_summary_counts_in_k_of_n_and_says_each_finding_once(probe_run: Path):
    """Issue 28, the report: the top warning box gave decimals (0.54 vs 0.33) where
    everything else is k/n, and three near-identical "Spelling dependence" bullets
    followed each other. Every number of a warning box is a count, an interval or a p
    now, and the conditions whose memories depend on spelling share one bullet."""
    md = (probe_run / "report" / "report.md").read_text()
    boxes = [line for line in md.splitlines() if line.startswith(">")]
    assert any("This audit cannot tell" in line for line in boxes)  # the floor box
    for line in boxes:
        rest = re.sub(r"\[[^\]]*\]", "", line)  # intervals
        rest = re.sub(r"\bp\s*[<=]?\s*[-+.\deE]+( now, [-+.\deE]+ after the reveal)?", "", rest)
        assert not re.search(r"\d\.\d", rest), line
    summary = json.loads((probe_run / "summary.json").read_text())
    spelled = {
        a["condition"]
        for a in summary["equivariance_alerts"]
        if a["check"] == "labels" and a["kind"] == "strict"
    }
    bullets = [line for line in md.splitlines() if "Spelling dependence" in line]
    assert len(spelled) > 1, "the run must show it twice for the test to tell"
    assert len(bullets) == 1, bullets
    for condition in spelled:
        assert f"**{condition} @ 1200 B**" in bullets[0]


def test_late_reference_adequacy_is_in_the_markdown_and_the_csv(real_run: Path):
    """Issue 28: report.md and headline.csv lacked the late-ref adequacy that the
    console and summary.json have; both carry it, from summary.json's counts."""
    summary = json.loads((real_run / "summary.json").read_text())
    headline = pd.read_csv(real_run / "report" / "headline.csv").set_index(["condition", "budget"])
    cells = [e for e in summary["scores"] if e["transform"] == "identity" and e["family"] == "all"]
    assert cells
    for entry in cells:
        late = entry["source pairs"]["late_reference_adequacy"]
        row = headline.loc[(entry["condition"], entry["budget"])]
        assert (row["late_reference_adequacy_k"], row["late_reference_adequacy_n"]) == (
            late["k"],
            late["n"],
        )
    lines = (real_run / "report" / "report.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| condition | role"))
    assert "late-ref (source pairs)" in lines[start]
    column = [c.strip() for c in lines[start].split("|")].index("late-ref (source pairs)")
    for entry in cells:
        late = entry["source pairs"]["late_reference_adequacy"]
        row = next(
            line
            for line in lines[start:]
            if line.startswith(f"| **{entry['condition']}** |")
            and f"| {entry['budget']:,} |" in line
        )
        assert row.split("|")[column].strip() == f"{late['k']}/{late['n']}", row


def test_markdown_for_a_pull_request(real_run: Path):
    md = (real_run / "report" / "report.md").read_text()
    assert "Current accuracy would pick a different condition than reveal accuracy (600 B)" in md
    assert "| **frontier** | 1,200 | 24/24 [0.86, 1.00]" in md
    assert "Holm" in md or "holm" in md.lower()
    # the short form clips one untrusted text at 1,000 characters; the report's own prose
    # was cut there too (section 5's causes, "docs/method.md, Wrong answe [... 4 more
    # characters not shown]"): no text of an exact-reader run is clipped
    assert "characters not shown" not in md


def test_a_report_into_a_file_is_refused_before_any_work(real_run: Path, tmp_path: Path):
    """`--out README.md` (a file) ended `audit compare` after its work with "error:
    README.md: File exists" and status 1: it is a usage error, said first, status 2, and
    the file is left as it was."""
    kept = tmp_path / "README.md"
    kept.write_text("mine\n")
    result = run("report", str(real_run), "--out", str(kept))
    assert result.exit_code == 2, result.output
    assert "exists and is not a directory" in " ".join(result.output.split())
    assert kept.read_text() == "mine\n"
    inside = run("report", str(real_run), "--out", str(kept / "report"))
    assert inside.exit_code == 1, inside.output
    assert "the report cannot be written there" in " ".join(inside.output.split())


def test_report_rebuilds_from_the_stored_run_alone(real_run: Path, tmp_path: Path):
    store = real_run / "store.sqlite"
    before = (store.stat().st_mtime, hashlib.sha256(store.read_bytes()).hexdigest())
    result = run("report", str(real_run), "--out", str(tmp_path / "again"))
    assert result.exit_code == 0, result.output
    assert (store.stat().st_mtime, hashlib.sha256(store.read_bytes()).hexdigest()) == before
    for name in ("report.html", "report.md", "headline.csv", "comparisons.csv"):
        assert (tmp_path / "again" / name).read_bytes() == (real_run / "report" / name).read_bytes()


def test_compare_runs_on_shared_pairs(real_run: Path, tmp_path: Path):
    """Issue 28: compare pairs a condition by its system (a renamed one too), compares a
    system the baseline lacks with the baseline's best strict condition, puts it first,
    folds the systems whose results did not change into one line, labels runs A, B with
    a key, and fits 80 columns."""
    other = tmp_path / "other"
    result = run(
        "run",
        "--preset",
        "cca-pilot-paper",
        "--conditions",
        "frontier:name=renamed,frontier_alpha",
        "--transforms",
        "identity",
        "--budget",
        "1200",
        "--workers",
        "1",
        "--quiet",
        "--out",
        str(other),
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "cmp"
    result = runner.invoke(
        app, ["compare", str(real_run), str(other), "--out", str(out)], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    long = [line for line in result.output.splitlines() if len(line) > 80 and " " in line.strip()]
    assert long == [], long  # a path alone may be longer: it is never split
    flat = " ".join(result.output.split())
    assert f"A (baseline): {real_run} B: {other}" in flat
    table = pd.read_csv(out / "compare.csv")
    # the renamed frontier is frontier: paired by its system, not by its label
    same = table[(table["condition_a"] == "frontier") & (table["condition_b"] == "renamed")]
    assert list(same["match"]) == ["the same condition"]
    assert (same.iloc[0]["n_pairs"], same.iloc[0]["delta"]) == (24, 0.0)
    # the exact reader has no noise: an identical result is no difference, never one
    # "within reader noise"
    assert same.iloc[0]["noise_floor"] == 0.0
    assert not same.iloc[0]["within_noise"]
    assert "not distinguishable from reader noise" not in (out / "compare.md").read_text()
    # a system the baseline lacks: against the baseline's best strict condition there
    headline = pd.read_csv(real_run / "report" / "headline.csv")
    strict = headline[(headline["budget"] == 1200) & headline["role"].isna()]
    best = strict.loc[strict["joint_J_k"].idxmax(), "condition"]
    assert (table.iloc[0]["run_b"], table.iloc[0]["condition_b"]) == ("B", "frontier_alpha")
    assert (table.iloc[0]["run_a"], table.iloc[0]["condition_a"]) == ("A", best)
    assert table.iloc[0]["match"] == "only in one run"
    # ... and the baseline's own at 1200 B against the later run's best strict condition
    theirs = pd.read_csv(out / "systems.csv")
    theirs = theirs[theirs["run"] == "B"]
    mine = theirs.loc[theirs["joint_J_k"].idxmax(), "condition"]
    own = table[(table["run_b"] == "A") & (table["budget"] == 1200)]
    assert set(own["condition_b"]) == {"frontier_latest", "tail"}
    assert set(own["condition_a"]) == {mine}
    # the terminal: the one system that did not change is named on one line, never
    # compared with itself (+0.00 [-0.14, +0.14] p=1.000)
    assert "The same in A and B (no shared source pair differs): renamed;" in flat
    assert "B: renamed - A: frontier" not in flat
    assert f"B: frontier_alpha - A: {best} " in flat
    assert "not compared" not in flat
    result = run(
        "compare",
        str(real_run),
        str(other),
        "--reference",
        "frontier_latest",
        "--out",
        str(tmp_path / "cmp2"),
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "cmp2" / "compare.csv")
    assert set(table["condition_a"]) == {"frontier_latest"}
    alpha = table[table["condition_b"] == "frontier_alpha"].iloc[0]
    assert alpha["delta"] > 0
    # the terminal gives the answer, not only a path: every paired difference, its
    # interval and its Holm p, as in compare.csv
    flat = " ".join(result.output.split())
    significant = int(table["significant"].sum())
    assert f"{len(table)} comparisons of joint J on the shared source pairs" in flat
    assert f"{significant or 'none'} significant after Holm" in flat
    for _, row in table.iterrows():
        assert (
            f"{row['b']} - {row['a']} {row['delta']:+.2f} "
            f"[{row['delta_low']:+.2f}, {row['delta_high']:+.2f}]".replace("-0.00", "+0.00")
        ) in flat, flat
    html = (out / "compare.html").read_text()
    assert 'id="differences-table"' in html.split('<section id="comparisons">')[0]
    assert 'id="comparisons-table"' in html
    assert "<svg" in html
    assert (out / "compare.md").read_text().startswith("## memory audit: comparison")
    result = run("compare", str(real_run), str(other), "--only", "frontier_alpha,frontier",
                 "--out", str(tmp_path / "cmp3"))  # fmt: skip
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "cmp3" / "compare.csv")
    assert set(table["condition_b"]) == {"frontier_alpha", "renamed"}  # frontier by its system
    result = run("compare", str(real_run), str(other), "--only", "nope")
    assert result.exit_code == 2
    assert "--only: no condition 'nope' in any of the runs" in result.output


def test_cli_errors(tmp_path: Path):
    result = run("report", str(tmp_path))
    assert result.exit_code == 2
    assert "no results" in result.output
    result = run("compare", str(tmp_path))
    assert result.exit_code == 2
    assert "at least two" in result.output


# ------------------------------------------------------------------- hostile output


def test_hostile_output_is_inert_text(hostile_run: Path):
    report = hostile_run / "report"
    pages = [p.read_text(encoding="utf-8") for p in report.glob("*.html")]
    html = "\n".join(pages)
    lowered = html.lower()
    assert "<script" not in lowered
    assert "&lt;script&gt;alert(" in html
    assert "<img" not in lowered
    assert "<h1>broken out" not in lowered
    assert "href=&#34;javascript:" in html  # the hostile link is text
    hrefs = re.findall(r"""<a\s[^>]*href\s*=\s*["']?([^"' >]*)""", html, flags=re.IGNORECASE)
    assert hrefs
    allowed = [
        h.startswith("#") or re.fullmatch(r"(report|pairs-\d+)\.html(#[\w-]+)?", h) for h in hrefs
    ]
    assert all(allowed), hrefs
    for page in pages:
        assert page.count("<table") == page.count("</table>")
        assert page.count("<pre") == page.count("</pre>")
    for char in ("\x1b", "\x00", "\x07", "\u202e", "\u200b", "\x7f"):
        assert char not in html
    for shown in ("\\x1b", "\\x00", "\\x07", "\\u202e", "\\u200b", "\\x7f"):
        assert shown in html
    assert "{{ 7*7 }} {% raw %}" in html  # not evaluated by the template engine
    assert "more characters not shown" in html  # the 120,000-character line is clipped
    assert "overflow-wrap: anywhere" in html
    assert "Content-Security-Policy" in html
    for page in report.glob("*.html"):
        assert page.stat().st_size < MAX_PAGE_BYTES


def test_hostile_markdown_and_csv(hostile_run: Path):
    md = (hostile_run / "report" / "report.md").read_text()
    assert "<script" not in md.lower()
    assert "\x1b" not in md
    headline = (hostile_run / "report" / "headline.csv").read_text()
    assert "m<script>x</script>" in headline  # CSV keeps data as data


def test_llm_reader_columns_are_used(hostile_run: Path):
    html = (hostile_run / "report" / "report.html").read_text()
    assert "no LLM reader in this run" not in html
    assert "(bounds)" in html  # NA reads: J shown as bounds
    assert 'lenient</span> <span class="nw">(source' in html  # the joint J lenient column
    taxonomy = pd.read_csv(hostile_run / "report" / "taxonomy.csv")
    llm = taxonomy[taxonomy["reader"].str.startswith("llm")]
    assert llm["cause_wrapper_only"].sum() > 0
    assert llm["cause_na"].sum() > 0
    assert llm["cause_misread"].sum() > 0
    assert llm["joint_J_lenient_k_high"].sum() >= llm["joint_J_k_high"].sum()
    costs = pd.read_csv(hostile_run / "report" / "costs.csv")
    reads = costs[costs["stage"].str.contains("llm")].iloc[0]
    assert reads["prompt_tokens"] == 100 * 48
    assert reads["cache_hits"] == 16


def test_written_wrong_is_told_from_dropped(hostile_run: Path):
    # prose_high's memories hold lines that are no record of the history (the hostile
    # lines): with the exact reader that is "written wrong", not "evidence dropped"
    taxonomy = pd.read_csv(hostile_run / "report" / "taxonomy.csv")
    exact = taxonomy[(taxonomy["reader"] == "exact") & (taxonomy["condition"] == "prose_high")]
    assert exact["cause_written_wrong"].iloc[0] == 24  # 4 pairs x 2 variants x 3 branches
    assert exact["cause_dropped"].iloc[0] == 0


def test_missing_pairs_still_report(hostile_run: Path, tmp_path: Path):
    moved = tmp_path / "moved"
    shutil.copytree(hostile_run, moved, ignore=shutil.ignore_patterns("report", "pairs.jsonl"))
    config = json.loads((moved / "config.json").read_text())
    config["config"]["pairs"] = {"file": str(tmp_path / "gone.jsonl")}
    (moved / "config.json").write_text(json.dumps(config))
    result = run("report", str(moved))
    assert result.exit_code == 0, result.output
    html = (moved / "report" / "report.html").read_text()
    assert "pairs could not be rebuilt" in html
    assert 'id="headline-table"' in html


def test_visible_escapes_controls_but_keeps_text():
    assert visible("plain text\nnext\tline") == "plain text\nnext\tline"
    assert visible("a\x1bb\u202ec") == "a\\x1bb\\u202ec"
    assert visible("größe ✓") == "größe ✓"


# -------------------------------------------------------------------------- Chromium


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium (installed by scripts/install_test_system.sh, never by a test)."""
    path = Path("/usr/bin/chromium")
    if not path.exists():
        missing("chromium (/usr/bin/chromium)")
    return str(path)


def _chromium(binary: str, page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    return subprocess.run(
        [binary, *flags, *extra, page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@pytest.mark.parametrize("which", ["real_run", "hostile_run"])
def test_report_in_headless_chromium(which: str, chromium: str, tmp_path: Path, request):
    run_dir: Path = request.getfixturevalue(which)
    page = run_dir / "report" / "report.html"
    shot = tmp_path / "report.png"
    done = _chromium(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1400,3000")
    assert shot.exists(), done.stderr[-2000:]
    assert shot.stat().st_size > 20_000, done.stderr[-2000:]
    assert _console_lines(done.stderr) == []
    dom = _chromium(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="headline-table"' in dom.stdout
    assert dom.stdout.count("<svg") >= 3
    assert "<script" not in dom.stdout.lower()
    assert _console_lines(dom.stderr) == []


def test_a_store_before_format_4_is_refused_by_name(tmp_path: Path):
    """The first store layout (format 1: a zlib blob per memory, one JSON row per read)
    was never released: its memories are not read, and a run whose only result file it
    is gets an error naming the file and the format (issue 30: no legacy readers)."""
    import zlib

    from audit.rundir import MemoryStore

    db = sqlite3.connect(tmp_path / "store.sqlite")
    db.executescript(
        "CREATE TABLE store_format (version INTEGER NOT NULL);"
        "INSERT INTO store_format VALUES (1);"
        "CREATE TABLE results (row TEXT NOT NULL);"
        "CREATE TABLE memories (sha256 TEXT PRIMARY KEY, text BLOB NOT NULL);"
    )
    db.execute("INSERT INTO memories VALUES ('abc', ?)", (zlib.compress(b'{"op":"set"}'),))
    db.execute("INSERT INTO results VALUES ('{}')")
    db.commit()
    db.close()
    memories = MemoryStore(tmp_path)
    try:
        assert memories.get("abc") is None
    finally:
        memories.close()
    (tmp_path / "config.json").write_text("{}")
    result = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert "store.sqlite is a run of an older format" in result.output


def test_only_the_best_archive_and_probe_are_ceiling_and_floor(tmp_path: Path):
    """The role column named every archive a ceiling (bm25 at half of full's joint J):
    the ceiling is the best archive by joint J and the floor the best probe, ties
    included; the others are their kind."""
    out = tmp_path / "run"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions",
                 "frontier,full,bm25,probe_shortest,probe_random", "--transforms", "identity",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert run("report", str(out)).exit_code == 0
    headline = pd.read_csv(out / "report" / "headline.csv").set_index("condition")
    assert pd.isna(headline.loc["frontier", "role"])
    for kind, word, members in (("archive", "ceiling", ["full", "bm25"]),
                                ("probe", "floor", ["probe_shortest", "probe_random"])):  # fmt: skip
        scores = headline.loc[members, "joint_J_k"]
        assert scores.nunique() > 1, scores  # one is below the other: the test can tell
        for name in members:
            best = scores[name] == scores.max()
            assert headline.loc[name, "role"] == (word if best else kind)
