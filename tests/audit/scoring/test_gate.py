"""Issue 31, "A gate for CI": ``audit compare --fail-on-regression`` exits 6 on a
regression and 7 on runs that cannot be compared; ``--margin`` (non-inferiority on
Tango's interval), ``--test mid-p``, ``--score``; every new run records its scoring
version; the A/A check of docs/reports.md, run as written there."""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.scoring import SCORING_VERSION, PairedTable, paired_comparison, tango_paired
from audit.scoring._stats import mcnemar, mcnemar_exact

mcnemar_mid_p = partial(mcnemar, test="mid-p")

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()
PILOT = ("--preset", "cca-pilot", "--workers", "1", "--quiet")


def run(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "80"})


def audit(
    out: Path, conditions: str, transforms: str = "identity", seed: int = 0, budget: int = 1200
) -> Path:
    result = run("run", *PILOT, "--conditions", conditions, "--transforms", transforms,
                 "--seed", str(seed), "--budget", str(budget), "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small audits of the pilot: two of one system (the A/A), one without frontier,
    one with other transforms, one of a probe alone, one at another budget."""
    root = tmp_path_factory.mktemp("gate")
    return {
        "base": audit(root / "base", "frontier,tail"),
        "again": audit(root / "again", "frontier,tail"),
        "tail": audit(root / "tail", "tail"),
        "renamed": audit(root / "renamed", "frontier,tail", "identity,rename:2"),
        "probe": audit(root / "probe", "probe_newest"),
        "600": audit(root / "600", "frontier", budget=600),
    }


MEMORY = '''
from compressors import Compressor, dump, load, pack


class Memory(Compressor):
    """{doc}"""

    name = "gated_memory"
    version = "1"
    summary = "the gate's test subject"

    def update(self, memory, chunk, query_keys, budget):
        {body}
'''
GOOD = "return dump(pack([*load(memory), *chunk.records][::-1], budget)[::-1])"
BAD = 'return ""  # a change that keeps nothing'


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One condition (``gated_memory:Memory``, one system) audited as the main branch
    has it and as a pull request that broke it has it: two processes, each importing
    its own module of that name."""
    root = tmp_path_factory.mktemp("changed")
    made = []
    for name, body in (("main", GOOD), ("pr", BAD)):
        code = root / name / "code"
        code.mkdir(parents=True)
        (code / "gated_memory.py").write_text(MEMORY.format(doc=name, body=body))
        out = root / name / "run"
        done = subprocess.run(
            [sys.executable, "-m", "audit", "run", *PILOT, "--conditions",
             "gated_memory:Memory", "--transforms", "identity", "--seed", "0", "--out", str(out)],
            cwd=code, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        made.append(out)
    return made[0], made[1]


# ------------------------------------------------------------------ exit 0, 6 and 7


def test_two_runs_of_one_system_pass_the_gate(runs: dict[str, Path], tmp_path: Path):
    result = run("compare", str(runs["base"]), str(runs["again"]), "--fail-on-regression",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (
        "gate: passed: no system of a later run (2 compared) is significantly worse in joint J"
        in flat(result.output)
    )
    assert "Gate: passed" in (tmp_path / "c" / "compare.md").read_text()


def test_a_changed_compressor_that_keeps_less_fails_the_gate_with_6(
    changed: tuple[Path, Path], tmp_path: Path
):
    main, pr = changed
    result = run(
        "compare", str(main), str(pr), "--fail-on-regression", "--out", str(tmp_path / "c")
    )
    assert result.exit_code == 6, result.output
    text = flat(result.output)
    assert (
        "gate: failed: 1 of 1 compared system of a later run is significantly worse in joint J"
        in text
    )
    table = pd.read_csv(tmp_path / "c" / "compare.csv")
    (row,) = table.to_dict("records")
    assert (row["condition_a"], row["condition_b"], row["match"]) == (
        "gated_memory",
        "gated_memory",
        "the same condition",
    )
    assert row["only_b"] == 0
    assert row["only_a"] > 0
    assert bool(row["worse"])
    assert f"B: gated_memory against A: gated_memory: {row['delta']:+.2f}" in text
    assert "Gate: failed (exit 6)" in (tmp_path / "c" / "compare.md").read_text()
    # without the flag compare answers as before: the difference, exit 0
    plain = run("compare", str(main), str(pr), "--out", str(tmp_path / "plain"))
    assert plain.exit_code == 0, plain.output
    assert "gate:" not in plain.output


def test_the_same_difference_the_other_way_passes(changed: tuple[Path, Path], tmp_path: Path):
    """The gate is one-sided: a pull request that keeps more is no regression."""
    main, pr = changed
    result = run(
        "compare", str(pr), str(main), "--fail-on-regression", "--out", str(tmp_path / "c")
    )
    assert result.exit_code == 0, result.output


def test_against_a_reference_and_only_in_one_run(runs: dict[str, Path], tmp_path: Path):
    """A system of NEW against --reference is judged; BASE's own systems that NEW lacks
    are compared against NEW's best but not judged (a dropped condition is no
    regression of a system of NEW)."""
    base, tail = str(runs["base"]), str(runs["tail"])
    dropped = run("compare", base, tail, "--fail-on-regression", "--out", str(tmp_path / "a"))
    assert dropped.exit_code == 0, dropped.output
    assert "A: frontier - B: tail" in dropped.output  # compared, significant, not judged
    judged = run("compare", base, tail, "--fail-on-regression", "--reference", "frontier",
                 "--out", str(tmp_path / "b"))  # fmt: skip
    assert judged.exit_code == 6, judged.output
    assert "B: tail against A: frontier: -0.27" in flat(judged.output)


def test_runs_with_other_transforms_are_refused_with_7(runs: dict[str, Path], tmp_path: Path):
    base, renamed = str(runs["base"]), str(runs["renamed"])
    result = run("compare", base, renamed, "--fail-on-regression", "--out", str(tmp_path / "a"))
    assert result.exit_code == 7, result.output
    text = flat(result.output)
    assert (
        "warning: not comparable: A and B ran other transforms (identity and identity + rename:2)"
        in text
    )
    assert "gate: refused" in text
    assert "Gate: refused (exit 7)" in (tmp_path / "a" / "compare.md").read_text()
    plain = run("compare", base, renamed, "--out", str(tmp_path / "b"))  # as before, but loud
    assert plain.exit_code == 0, plain.output
    assert "warning: not comparable: A and B ran other transforms" in flat(plain.output)
    assert "Not comparable" in (tmp_path / "b" / "compare.md").read_text()


def test_runs_on_other_pairs_are_refused_with_7(runs: dict[str, Path], tmp_path: Path):
    paper = tmp_path / "paper"
    result = run("run", "--preset", "cca-pilot-paper", "--conditions", "tail", "--transforms",
                 "identity", "--workers", "1", "--quiet", "--out", str(paper))  # fmt: skip
    assert result.exit_code == 0, result.output
    gated = run("compare", str(runs["base"]), str(paper), "--fail-on-regression",
                "--out", str(tmp_path / "a"))  # fmt: skip
    assert gated.exit_code == 7, gated.output
    assert "A and B were made on other pair sets (pairs sha256" in flat(gated.output)
    plain = run("compare", str(runs["base"]), str(paper), "--out", str(tmp_path / "b"))
    assert plain.exit_code == 2, plain.output  # nothing shared: an error, as before


def test_nothing_paired_is_refused_with_7(runs: dict[str, Path], tmp_path: Path):
    base, other = str(runs["base"]), str(runs["600"])  # nothing at the same budget
    result = run("compare", base, other, "--fail-on-regression", "--out", str(tmp_path / "a"))
    assert result.exit_code == 7, result.output
    assert "nothing was compared" in result.output
    plain = run("compare", base, other, "--out", str(tmp_path / "b"))
    assert plain.exit_code == 2, plain.output  # as before


def test_the_baselines_ceiling_and_floor_are_not_compared_with_a_run_without_them(
    runs: dict[str, Path], tmp_path: Path
):
    """A baseline run with its ceiling and floor, against a run of one condition without
    them: the archive and the probe were each compared with the later run's best (a new
    user read "A: full - B: nf2 +0.88" among 13 significant of 18), adding to the Holm
    family.  Only the baseline's strict conditions are compared with it now."""
    baseline = audit(tmp_path / "baseline", "frontier,full,probe_newest")
    result = run("compare", str(baseline), str(runs["tail"]), "--out", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    assert "* B: tail - A: frontier" in result.output
    assert "1 comparison of joint J" in flat(result.output)
    table = pd.read_csv(tmp_path / "a" / "compare.csv")
    assert set(table["condition_a"]) == {"frontier"}, table[["condition_a", "condition_b"]]


def test_a_probe_is_no_contestant(runs: dict[str, Path], tmp_path: Path):
    """A shortcut probe in the later run alone is compared with the baseline's best (and
    is far below it) but judged by nobody: nothing strict was compared, refused."""
    result = run("compare", str(runs["base"]), str(runs["probe"]), "--fail-on-regression",
                 "--out", str(tmp_path / "a"))  # fmt: skip
    assert result.exit_code == 7, result.output
    assert "* B: probe_newest - A: frontier" in result.output
    assert "gate: no strict system of a later run was compared" in flat(result.output)


def test_every_new_run_records_its_scoring_version_and_the_gate_refuses_another(
    runs: dict[str, Path], tmp_path: Path
):
    recorded = json.loads((runs["again"] / "config.json").read_text())
    assert recorded["scoring"] == SCORING_VERSION >= 1
    older = audit(tmp_path / "older", "frontier,tail")
    config = json.loads((older / "config.json").read_text())
    del config["scoring"]  # as a run made before the version was recorded
    (older / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    result = run("compare", str(runs["base"]), str(older), "--fail-on-regression",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 7, result.output
    assert (
        f"A and B were scored under other scoring versions ({SCORING_VERSION} and 0; 0: made "
        "before versions were recorded)"
    ) in flat(result.output)


# ------------------------------------------------------------ --margin, --test, --score


def test_margin_passes_within_it_and_fails_what_the_pairs_cannot_show(
    runs: dict[str, Path], changed: tuple[Path, Path], tmp_path: Path
):
    base, again = str(runs["base"]), str(runs["again"])
    wide = run("compare", base, again, "--fail-on-regression", "--margin", "0.05",
               "--out", str(tmp_path / "a"))  # fmt: skip
    assert wide.exit_code == 0, wide.output
    narrow = run("compare", base, again, "--fail-on-regression", "--margin", "0.03",
                 "--out", str(tmp_path / "b"))  # fmt: skip
    assert narrow.exit_code == 6, narrow.output
    bound = 1.959963984540054**2 / (84 + 1.959963984540054**2)  # z^2 / (n + z^2), no discordance
    assert f"the baseline may lead by up to {bound:.3f} (margin 0.03)" in flat(narrow.output)
    table = pd.read_csv(tmp_path / "b" / "compare.csv")
    assert table["baseline_lead_high"].tolist() == pytest.approx([bound, bound])
    main, pr = changed  # a real regression, within a margin wider than it: passes
    within = run("compare", str(main), str(pr), "--fail-on-regression", "--margin", "0.5",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert within.exit_code == 0, within.output
    assert run("compare", base, again, "--margin", "0.05").exit_code == 2  # the gate's option


def test_mid_p_is_the_exact_p_less_the_observed_splits_probability():
    """Hand-checked binomial values: 1 of 8 discordant pairs one way, P(X <= 1) =
    9/256 under Bin(8, 1/2), P(X = 1) = 8/256: exact 18/256, mid-p 10/256 (significant
    at 0.05 where the exact test is not); 0 of 10: exact 2/1024, mid-p 1/1024; a tie
    is 1 either way."""
    assert mcnemar_exact(PairedTable(3, 1, 7, 5)) == 18 / 256
    assert mcnemar_mid_p(PairedTable(3, 1, 7, 5)) == 10 / 256
    assert mcnemar_mid_p(PairedTable(0, 10, 0, 0)) == 1 / 1024
    assert mcnemar_mid_p(PairedTable(0, 4, 4, 0)) == 1.0
    assert mcnemar_mid_p(PairedTable(5, 0, 0, 5)) == 1.0
    ids = [f"p{i}" for i in range(16)]
    a = dict.fromkeys(ids, 0.0) | {"p0": 1.0}
    b = dict.fromkeys(ids, 0.0) | {f"p{i}": 1.0 for i in range(1, 8)}
    family = dict.fromkeys(ids, "f")
    assert paired_comparison(a, b, family).p_value == 18 / 256
    assert paired_comparison(a, b, family, test="mid-p").p_value == 10 / 256


def test_the_type_one_errors_the_docs_give(tmp_path: Path):
    """docs/reports.md and --test's help: at alpha 0.05 on 84 pairs, the exact test's
    type-I error is 0.030 at discordance 0.3 (0.035 at 0.5), mid-p's 0.045 (0.049),
    by exact enumeration under the null."""

    def size(test, n: int, discordance: float) -> float:
        total = 0.0
        for d in range(n + 1):
            weight = math.comb(n, d) * discordance**d * (1 - discordance) ** (n - d)
            for k in range(d + 1):
                if test(PairedTable(0, k, d - k, n - d)) < 0.05:
                    total += weight * math.comb(d, k) / 2**d
        return total

    assert round(size(mcnemar_exact, 84, 0.3), 3) == 0.030
    assert round(size(mcnemar_mid_p, 84, 0.3), 3) == 0.045
    assert round(size(mcnemar_exact, 84, 0.5), 3) == 0.035
    assert round(size(mcnemar_mid_p, 84, 0.5), 3) == 0.049
    docs = flat((ROOT / "docs" / "reports.md").read_text())
    assert "0.030 at alpha 0.05 on 84 pairs at discordance 0.3 (0.035 at discordance 0.5)" in docs
    assert "0.045 there (0.049)" in docs


def test_mid_p_in_the_gate(changed: tuple[Path, Path], tmp_path: Path):
    main, pr = changed
    result = run("compare", str(main), str(pr), "--fail-on-regression", "--test", "mid-p",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 6, result.output
    assert "(mid-p McNemar on the shared source pairs, Holm p < 0.05)" in flat(result.output)
    (row,) = pd.read_csv(tmp_path / "c" / "compare.csv").to_dict("records")
    split = PairedTable(row["both_pass"], row["only_a"], row["only_b"], row["neither"])
    assert (split.only_a, split.only_b) == (10, 0)  # good kept 10 pairs, broken none
    assert row["p_value"] == pytest.approx(mcnemar_mid_p(split), rel=1e-6)
    assert mcnemar_mid_p(split) == 1 / 1024 < mcnemar_exact(split) == 2 / 1024
    assert run("compare", str(main), str(pr), "--test", "midp").exit_code == 2


def test_score_compares_another_strict_score(changed: tuple[Path, Path], tmp_path: Path):
    main, pr = changed
    result = run("compare", str(main), str(pr), "--fail-on-regression", "--score", "current",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 6, result.output
    assert "comparison of current accuracy on the shared source pairs" in flat(result.output)
    systems = pd.read_csv(tmp_path / "c" / "systems.csv")
    assert {"current_k", "current_n"} <= set(systems.columns)
    assert "joint_J_k" not in systems.columns
    refused = run("compare", str(main), str(pr), "--score", "collision")
    assert refused.exit_code == 2
    assert "is not one of current, reveal, override, joint_J, adequacy" in flat(refused.output)


# -------------------------------------------------------------------- Tango's interval


def _tango_numerically(table: PairedTable, d: float) -> float:
    """Tango's score statistic at d with the restricted maximum-likelihood estimate
    found by a bounded search, not by the closed form ``tango_paired`` uses."""
    from scipy.optimize import minimize_scalar

    n, b, c = table.n, table.only_b, table.only_a
    low, high = max(0.0, -d), min(1.0 - d, (1.0 - d) / 2.0)  # p21 and p12 = p21 + d valid

    def minus_log_likelihood(q: float) -> float:
        parts = [(b, q + d), (c, q), (n - b - c, 1.0 - 2.0 * q - d)]
        return -sum(k * math.log(max(p, 1e-300)) for k, p in parts if k)

    q = minimize_scalar(minus_log_likelihood, bounds=(low, high), method="bounded",
                        options={"xatol": 1e-12}).x  # fmt: skip
    return (b - c - n * d) / math.sqrt(n * (2 * q + d * (1 - d)))


@pytest.mark.parametrize(
    "cells",
    [(33, 0, 0, 51), (20, 12, 2, 16), (59, 6, 16, 80), (1, 1, 7, 12), (10, 3, 9, 62), (0, 0, 5, 0)],
)
def test_tango_bounds_are_where_the_score_statistic_reaches_z(cells):
    table = PairedTable(*cells)
    low, high = tango_paired(table)
    estimate = (table.only_b - table.only_a) / table.n
    assert -1 <= low <= estimate <= high <= 1
    for bound, z in ((low, 1.959963984540054), (high, -1.959963984540054)):
        if abs(bound) < 1:
            assert _tango_numerically(table, bound) == pytest.approx(z, abs=1e-4)


def test_tango_at_zero_is_mcnemar_and_without_discordance_has_its_closed_form():
    for only_a, only_b in ((6, 16), (1, 7), (12, 2)):
        table = PairedTable(30, only_a, only_b, 30)
        z = (only_b - only_a) / math.sqrt(only_a + only_b)
        assert _tango_numerically(table, 0.0) == pytest.approx(z, abs=1e-6)
        low, high = tango_paired(table)
        assert (low > 0 or high < 0) == (abs(z) > 1.959963984540054)
    z2 = 1.959963984540054**2
    for cells in ((33, 0, 0, 51), (0, 0, 0, 84), (6, 0, 0, 18)):
        n = sum(cells)
        assert tango_paired(PairedTable(*cells)) == pytest.approx((-z2 / (n + z2), z2 / (n + z2)))
    assert math.isnan(tango_paired(PairedTable(0, 0, 0, 0))[0])


# ---------------------------------------------------------- the A/A check, as written


def test_the_a_a_check_of_the_docs_runs_as_written(tmp_path: Path):
    """docs/reports.md, "The A/A check": every command of its block, with the exit
    status its comment gives (runs/ in a temporary directory)."""
    text = (ROOT / "docs" / "reports.md").read_text()
    block = re.search(r"### The A/A check\n.*?```bash\n(.*?)```", text, re.S)
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) >= 4
    compared = 0
    for number, line in enumerate(lines):
        command, _, comment = line.partition("#")
        args = shlex.split(command.replace("runs/", f"{tmp_path}/"))
        assert args[0] == "audit"
        if args[1] == "run":
            args += ["--workers", "1", "--quiet"]
            expected = 0
        else:
            args += ["--out", str(tmp_path / f"compare-{number}")]
            expected = int(re.fullmatch(r"\s*exit (\d+)\s*", comment).group(1))  # type: ignore[union-attr]
            compared += 1
        result = run(*args[1:])
        assert result.exit_code == expected, (line, textwrap.shorten(result.output, 2000))
    assert compared >= 3


# ------------------------------------------------------- what the gate cannot vouch for

RAISES = (
    "if any(r.op == 'revoke' for r in chunk.records):\n"
    "            raise ValueError('no revokes here')\n"
    "        " + GOOD
)


def test_a_later_run_whose_compressor_raised_fails_the_gate(
    changed: tuple[Path, Path], tmp_path: Path
):
    """An adversary's compressor raised on 270 reads and the gate said "passed": a
    compressor that raises has not been audited (docs/reliability.md)."""
    main, _ = changed
    code = tmp_path / "code"
    code.mkdir()
    (code / "gated_memory.py").write_text(MEMORY.format(doc="raises", body=RAISES))
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "audit", "run", *PILOT, "--conditions", "gated_memory:Memory",
         "--transforms", "identity", "--seed", "0", "--out", str(out)],
        cwd=code, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    result = run("compare", str(main), str(out), "--fail-on-regression",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 6, result.output
    assert re.search(r"B: gated_memory raised: \d+ reads failed", flat(result.output))
    # counted as what it is, not as a compared system ("2 of 1 compared system" before)
    assert re.search(
        r"gate: failed: (\d+ of 1 compared system of a later run is significantly worse .* "
        r"and )?1 compressor of a later run raised \(not audited\):",
        flat(result.output),
    ), result.output


def test_a_later_system_compared_with_nothing_is_refused_with_7(
    runs: dict[str, Path], tmp_path: Path
):
    """An adversary's NEW run held its system under test at another budget than the
    baseline's, and tail beside it: tail paired, the system under test was skipped,
    and the gate passed."""
    both = audit(tmp_path / "both", "frontier:budget=300,tail")
    result = run("compare", str(runs["base"]), str(both), "--fail-on-regression",
                 "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 7, result.output
    assert "frontier:budget=300 compared with nothing" in flat(result.output)


def test_a_probe_as_reference_is_refused_with_the_gate(runs: dict[str, Path], tmp_path: Path):
    """``--reference probe_newest`` let a later system pass for not being worse than a
    shortcut probe, whatever it lost against the baseline's own."""
    with_probe = audit(tmp_path / "base", "frontier,tail,probe_newest")
    result = run("compare", str(with_probe), str(runs["tail"]), "--fail-on-regression",
                 "--reference", "probe_newest", "--out", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 7, result.output
    assert "--reference probe_newest is a probe of the baseline" in flat(result.output)
