"""What the commands print besides help: lines that fit an 80-column terminal (a piped
command wraps at 80), whole words and paths, singular and plural right, a quiet end when
the reader of the output goes away, and a folder that is not a run named for what it is
(``audit compare runs/*`` picked up the comparison written under runs/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app

runner = CliRunner()
NARROW = {"COLUMNS": "80"}


def run(*args: str):
    return runner.invoke(app, list(args), env=NARROW)


def _fits(text: str) -> None:
    """No line past 80 columns, except one that holds a single path longer than that."""
    long = [line for line in text.splitlines() if len(line) > 80 and len(line.split()) > 1]
    assert not long, long


@pytest.mark.parametrize(
    "args",
    [
        ["families"],
        ["compressors"],
        ["power", "--effect", "0.2", "--comparisons", "3", "--pairs", "24"],
        ["power", "--effect", "0.2", "--discordance", "0.3", "--comparisons", "3"],
    ],
    ids=["families", "compressors", "power-pairs", "power-needed"],
)
def test_plain_output_fits_80_columns(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 0, result.output
    _fits(result.output)


def test_families_wrap_under_their_summary() -> None:
    """A wrapped summary continues under its own first word, not under the name."""
    lines = run("families").output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("* expiry"))
    start = lines[first].index("an override")
    assert lines[first + 1].startswith(" " * start)
    assert lines[first + 1][start] != " "


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "a-run-with-a-long-directory-name-to-wrap"
    result = run("run", "--conditions", "frontier,tail", "--transforms", "identity",
                 "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def test_generate_and_report_lines_fit_and_count_right(small_run: Path, tmp_path: Path) -> None:
    result = run("generate", "--preset", "cca-pilot", "--out", str(tmp_path / "pairs"))
    assert result.exit_code == 0, result.output
    _fits(result.output)
    result = run("report", str(small_run), "--out", str(tmp_path / "report"))
    assert result.exit_code == 0, result.output
    _fits(result.output)
    flat = " ".join(result.output.split())
    pages = len(list((tmp_path / "report").glob("pairs-*.html")))
    if pages == 1:
        assert "(+1 drill-down page)" in flat
    assert "drill-down pages)" not in flat or pages > 1
    tables = len(list((tmp_path / "report").glob("*.csv")))
    assert f"report.md and {tables} CSV tables in" in flat
    assert str(tmp_path / "report" / "report.html") in result.output  # the path is whole


def test_report_counts_one_drill_down_page_in_the_singular(small_run: Path, tmp_path: Path):
    result = run("report", str(small_run), "--out", str(tmp_path / "r"), "--max-pairs", "0")
    assert result.exit_code == 0, result.output
    pages = len(list((tmp_path / "r").glob("pairs-*.html")))
    assert pages >= 1
    flat = " ".join(result.output.split())
    assert f"(+{pages} drill-down page{'s' if pages > 1 else ''})" in flat


def test_a_closed_pipe_ends_quietly() -> None:
    """``audit families | head -1``: no "error: Broken pipe", and the status a shell
    gives a process ended by SIGPIPE.  The reader is gone before the command writes (a
    pipe whose read end is closed), so the test does not race ``head``."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "audit", "families"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert "error" not in result.stderr, result.stderr
    assert result.returncode == 141


def test_folders_that_are_not_runs_are_named_for_what_they_are(
    small_run: Path, tmp_path: Path
) -> None:
    compared = tmp_path / "runs" / "compare-1"
    other = tmp_path / "runs" / "b"
    result = run("run", "--conditions", "frontier", "--transforms", "identity",
                 "--workers", "1", "--quiet", "--out", str(other))  # fmt: skip
    assert result.exit_code == 0, result.output
    result = run("compare", str(small_run), str(other), "--out", str(compared))
    assert result.exit_code == 0, result.output
    result = run("compare", str(small_run), str(other), str(compared))
    assert result.exit_code == 2
    assert f"{compared} is not a run directory" in result.output
    assert "output of `audit compare`" in result.output
    result = run("report", str(compared))
    assert "output of `audit compare`" in result.output
    report = tmp_path / "rep"
    assert run("report", str(small_run), "--out", str(report)).exit_code == 0
    result = run("report", str(report))
    assert result.exit_code == 2
    assert "it is a report" in result.output
    # written elsewhere: its parent is not the run, so none is named
    assert f"({tmp_path})" not in result.output
    assert run("report", str(small_run)).exit_code == 0
    result = run("report", str(small_run / "report"))
    assert f"it was written for ({small_run})" in " ".join(result.output.split())
    pairs = tmp_path / "pairs"
    assert run("generate", "--preset", "cca-pilot", "--out", str(pairs)).exit_code == 0
    result = run("report", str(pairs))
    assert result.exit_code == 2
    assert f"--pairs {pairs / 'pairs.jsonl'}" in " ".join(result.output.split())


# ------------------------------------------------- what reaches the terminal is text

HOSTILE_NAME = "\x1b]0;PWNED\x07\x1b[31mRED\x1b[0m [/bogus] [red]X\nFAKE: joint J best"
"""A condition name that tries to set the terminal's title, colour what follows, and
close a Rich markup tag that was never opened (Rich raised MarkupError on it)."""


def test_untrusted_names_reach_the_terminal_as_text(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "keep_newest.py"
    condition = f"cmd:{sys.executable} {example} {HOSTILE_NAME}"
    outs = []
    for name in ("h1", "h2"):
        result = run("run", "--conditions", condition, "--transforms", "identity",
                     "--budget", "600", "--workers", "1", "--quiet",
                     "--out", str(tmp_path / name))  # fmt: skip
        assert result.exit_code == 0, result.output
        outs.append(result.output)
    compared = run("compare", str(tmp_path / "h1"), str(tmp_path / "h2"),
                   "--out", str(tmp_path / "c"))  # fmt: skip
    assert compared.exit_code == 0, compared.output
    for said in (*outs, compared.output):
        assert "\x1b" not in said
        assert "\x07" not in said
        # a newline in a name is shown, never a line of output of its own
        assert not any(line.startswith("FAKE") for line in said.splitlines()), said
        assert "\\x1b]0;PWNED" in " ".join(said.split()).replace(" ", "")
    assert "[/bogus] [red]X" in " ".join(outs[0].split())  # markup is shown, not applied


def test_a_broken_pipe_of_the_commands_own_is_an_error_not_a_closed_stdout(
    tmp_path: Path,
) -> None:
    """A compressor whose socket peer went away raised BrokenPipeError; the command
    ended silently with 141 as if its own output had been closed."""
    (tmp_path / "bpinit.py").write_text(
        "import socket\n"
        "from compressors import Compressor\n"
        "class BP(Compressor):\n"
        "    name = 'bp'\n"
        "    def __init__(self, params=None):\n"
        "        a, b = socket.socketpair()\n"
        "        b.close()\n"
        "        a.sendall(b'x' * 500_000)\n"
        "    def update(self, memory, chunk, budget):\n"
        "        return memory\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "audit", "run", "--conditions", "bpinit:BP", "--transforms",
         "identity", "--budget", "600", "--workers", "1", "--quiet", "--out", "r"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode != 141, result.stderr
    assert "error:" in result.stderr


def test_a_replication_whose_reader_left_still_runs_every_seed(tmp_path: Path) -> None:
    """``audit run --seeds 1,2 | true``: Rich exited 1 at the first summary and the
    second seed and the replication were never made."""
    shell = subprocess.run(
        ["bash", "-c",
         f'"{sys.executable}" -m audit run --conditions tail --seeds 1,2 --transforms '
         f'identity --budget 600 --workers 1 --quiet --out "{tmp_path / "rep"}" | true; '
         'echo "status=${PIPESTATUS[0]}"'],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert shell.stdout.strip() == "status=0", (shell.stdout, shell.stderr)
    assert (tmp_path / "rep" / "seed-2" / "manifest.json").exists()
    assert (tmp_path / "rep" / "replication.json").exists()


def test_version_to_a_full_disk_is_one_line(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "audit", "--version"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == "error: No space left on device", result.stderr


def test_paths_in_errors_and_next_steps_reach_the_terminal_as_text(tmp_path: Path) -> None:
    """An error naming a path, and the "next:" command, sent a path's escape sequences
    to the terminal raw; the command is quoted so that it can be pasted."""
    odd = tmp_path / "run \x1b]0;PWNED\x07 x"
    result = run("report", str(odd))
    assert result.exit_code == 2
    assert "\x1b" not in result.output
    assert "\\x1b]0;PWNED" in result.output
    result = run("run", "--conditions", "tail", "--transforms", "identity", "--budget", "600",
                 "--workers", "1", "--quiet", "--out", str(odd))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    nexts = [line for line in result.output.splitlines() if line.startswith("next: ")]
    assert nexts == [f"next: audit report '{tmp_path}/run \\x1b]0;PWNED\\x07 x'"], nexts


def test_compare_pairs_a_system_however_its_budget_is_spelled(tmp_path: Path) -> None:
    """``bm25:budget=1200`` at 1200 B is ``bm25`` at 1200 B; a comparison of nothing
    fails instead of exiting 0."""
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, conditions, budget in (
        (first, "full,bm25", "600,1200"),
        (second, "bm25:budget=1200,probe_lowrev", "600"),
        (third, "probe_newest", "600"),
    ):
        result = run("run", "--conditions", conditions, "--budget", budget, "--transforms",
                     "identity", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
        assert result.exit_code == 0, result.output
    result = run("compare", str(first), str(second), "--out", str(tmp_path / "ab"))
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "The same in A and B (no shared source pair differs): bm25:budget=1200;" in flat
    table = pd.read_csv(tmp_path / "ab" / "compare.csv")
    assert table[["condition_a", "condition_b", "budget"]].values.tolist() == [
        ["bm25", "bm25:budget=1200", 1200]
    ]
    # probe_lowrev is in B alone, and A has no strict condition at 600 B to compare it with
    assert "B (exact, 600 B): probe_lowrev" in flat
    result = run("compare", str(first), str(third), "--out", str(tmp_path / "ac"))
    assert result.exit_code == 2
    assert "nothing was compared" in result.output
    result = run("compare", str(first), str(third), "--reference", "full",
                 "--out", str(tmp_path / "ac2"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--reference CONDITION compares" not in result.output  # given: no hint


def test_compare_refuses_a_run_and_its_copy(small_run: Path, tmp_path: Path) -> None:
    """Issue 27, 5: `cp -a ref1 ref1copy` then `audit compare ref1 ref1copy` compared a
    run with itself (exit 0, every delta +0.00).  Two directories holding one run id are
    one run, refused as the same directory given twice is."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(small_run), str(copy)], check=True)
    result = run("compare", str(small_run), str(copy), "--out", str(tmp_path / "c"))
    assert result.exit_code == 2, result.output
    assert "hold the same run (run id" in result.output
    assert "one is a copy of the other" in result.output
    assert not (tmp_path / "c").exists()


def test_report_says_on_stderr_why_the_drill_down_is_left_out(tmp_path: Path) -> None:
    """Issue 27 (also): a run whose pair file was edited since gets no drill-down, and
    said why only inside the HTML; now on stderr too."""
    pairs = tmp_path / "pairs"
    assert run("generate", "--preset", "cca-pilot", "--out", str(pairs)).exit_code == 0
    lines = (pairs / "pairs.jsonl").read_text().splitlines(keepends=True)
    out = tmp_path / "run"
    result = run("run", "--pairs", str(pairs / "pairs.jsonl"), "--conditions", "tail",
                 "--transforms", "identity", "--workers", "1", "--quiet", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    (pairs / "pairs.jsonl").write_text("".join(lines[:-1]))  # edited since the run
    done = subprocess.run(
        [sys.executable, "-m", "audit", "report", str(out)], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"warning: {out}: the pairs rebuilt from config.json differ from the run's" in (
        done.stderr
    ), done.stderr
    assert "no drill-down" in done.stderr


def test_report_on_a_run_still_running_says_so(small_run: Path, tmp_path: Path) -> None:
    """Issue 27 (also): a run whose every unit is in the store while its invocation is
    still going (writing its result files) was reported as one that had stopped; the
    report now says it may still be running, and exits 3."""
    copy = tmp_path / "running"
    subprocess.run(["cp", "-a", str(small_run), str(copy)], check=True)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["state"] = "running"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    done = subprocess.run(
        [sys.executable, "-m", "audit", "report", str(copy), "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    said = " ".join(done.stderr.split())  # the warning wraps at 80 columns
    assert "the run is still running (writing its result files)" in said, done.stderr
    assert "stopped" not in done.stderr


def test_the_command_line_loads_numpy_with_blas_on_one_thread() -> None:
    """OpenBLAS reads OPENBLAS_NUM_THREADS once, when numpy loads: the command line
    sets it (unless the user did) before its imports load numpy."""
    probe = (
        "import os, sys\n"
        "class Seen:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy':\n"
        "            print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
        "        return None\n"
        "sys.meta_path.insert(0, Seen())\n"
        "import audit.cli\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    found = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert found.stdout.split() == ["1"], found.stderr
    mine = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "OPENBLAS_NUM_THREADS": "3"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert mine.stdout.split() == ["3"], mine.stderr


def test_a_report_process_keeps_freed_memory_and_collects_young_objects_less_often() -> None:
    """`audit report` builds and drops frames of hundreds of MB; glibc and pyarrow's pool
    returned the pages and faulted them in again (0.4 to 0.6 CPU s of a 3.8 s report):
    the report keeps freed memory in glibc, and pyarrow allocates there too; nothing
    changes with another C library.  The cyclic collector's 616 passes at Python's
    default threshold cost 0.24 CPU s: the report raises it, and puts it and pyarrow's
    pool back afterwards (a notebook or a test that calls the command keeps its own)."""
    import platform

    probe = (
        "import pyarrow as pa\n"
        "import gc\n"
        "from audit.cli._report import YOUNG_COLLECTION, report_process\n"
        "before = gc.get_threshold(), pa.default_memory_pool().backend_name\n"
        "with report_process() as tuned:\n"
        "    assert gc.get_threshold()[0] == YOUNG_COLLECTION > 700, gc.get_threshold()\n"
        "    print(tuned, pa.default_memory_pool().backend_name)\n"
        "after = gc.get_threshold(), pa.default_memory_pool().backend_name\n"
        "assert after == before, (before, after)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    glibc = platform.libc_ver()[0] == "glibc"
    pool = "system" if glibc else __import__("pyarrow").default_memory_pool().backend_name
    assert found.stdout.split() == [str(glibc), pool], found.stderr
    chosen = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True,
        env={**env, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"},
    )  # fmt: skip
    assert chosen.stdout.split() == [str(glibc), "mimalloc"], chosen.stderr  # the user's


def _flip_rows(budget: int, a: tuple[int, int], b: tuple[int, int]) -> list[dict]:
    """Rows of conditions ``a`` and ``b`` at ``budget`` on 24 source pairs: each given
    as (pairs right now, pairs right after the reveal)."""
    rows = []
    for condition, (now, later) in (("a", a), ("b", b)):
        for index in range(24):
            for variant in ("A", "B"):
                for branch, right in (("current", index < now), ("reveal", index < later),
                                      ("override", True)):  # fmt: skip
                    rows.append({
                        "pair_id": f"p{index}", "source_pair_id": f"p{index}", "family": "f",
                        "variant": variant, "branch": branch, "repeat": 0, "budget": budget,
                        "condition": condition, "kind": "strict", "transform": "identity",
                        "reader": "exact", "outcome": "pass" if right else "wrong_log",
                        "correct": int(right),
                    })  # fmt: skip
    return rows


def test_reversals_within_noise_are_one_note_and_a_significant_one_a_warning(capsys) -> None:
    """A four-budget run printed three six-line warnings, each ending "Within noise:
    no reversal is significant" (p 1): 18 lines that said nothing held.  Reversals all
    within noise are now one note naming their budgets; one that holds stays a
    warning; --verbose prints each."""
    from audit.cli._console import print_summary
    from audit.rundir import normalize
    from audit.scoring import summarize

    rows = (
        _flip_rows(600, (24, 10), (23, 11))  # a pair's difference: p 1
        + _flip_rows(1200, (24, 10), (23, 11))
        + _flip_rows(2400, (24, 0), (12, 12))  # both differences hold
    )
    summary = summarize(normalize(pd.DataFrame(rows)), {"seed": 0})
    print_summary(summary, Path("run"), 1.0)
    said = capsys.readouterr().out
    assert said.count("warning: at ") == 1, said
    assert "warning: at 2400 B" in said
    flat = " ".join(said.split())
    assert (
        "note: at 600, 1200 B, current accuracy and reveal accuracy rank different "
        "conditions best, within noise" in flat
    ), said
    assert "Within noise" not in said
    print_summary(summary, Path("run"), 1.0, verbose=True)
    said = capsys.readouterr().out
    assert said.count("warning: at ") == 3, said
    assert "note: at 600" not in said
