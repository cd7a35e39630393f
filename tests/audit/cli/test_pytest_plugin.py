"""Issue 31: the ``memory_audit`` pytest fixture (audit/pytest_plugin.py), in real pytest
runs of their own; and what ``audit new-compressor`` writes with it: a test that uses
the fixture and passes, and the GitHub Actions workflow of docs/examples."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from audit.plugins import plugin_names, scaffold_plugin

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]

MEMORIES = '''
from compressors import Compressor, dump, load, pack


class NewestFirst(Compressor):
    """Newest whole records that fit (the README's example)."""

    name = "newest_first"
    version = "1"
    summary = "newest whole records that fit"

    def update(self, memory, chunk, query_keys, budget):
        return dump(pack([*load(memory), *chunk.records][::-1], budget)[::-1])


class Forgets(Compressor):
    """Keeps nothing."""

    name = "forgets"
    version = "1"
    summary = "keeps nothing"

    def update(self, memory, chunk, query_keys, budget):
        return ""


class Raises(Compressor):
    name = "raises"
    version = "1"
    summary = "raises"

    def update(self, memory, chunk, query_keys, budget):
        raise KeyError("boom")
'''


def test_the_fixture_is_registered_as_a_pytest_plugin():
    found = [e for e in metadata.entry_points(group="pytest11") if e.name == "memory_audit"]
    assert [e.value for e in found] == ["audit.pytest_plugin"]


def test_the_plugin_imports_nothing_of_the_audit_until_a_test_asks():
    """pytest imports every installed plugin at start-up: importing this one must not
    import the audit (a broken installation would break every test session)."""
    probe = (
        "import sys, audit.pytest_plugin; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('compressors', 'histories', 'pandas', 'numpy', 'pyarrow') or "
        "(m.startswith('audit.') and m != 'audit.pytest_plugin')); print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_a_compressor_that_keeps_less_than_the_baseline_fails_its_test(pytester: pytest.Pytester):
    """The entry point loads the fixture in a pytest run of its own (no ``-p``)."""
    pytester.makepyfile(memories=MEMORIES)
    pytester.makepyfile(
        test_memories="""
        from memories import Forgets, NewestFirst


        def test_newest_first_keeps_what_tail_keeps(memory_audit):
            result = memory_audit(NewestFirst)
            assert (result.compressor.condition, result.baseline.condition) == (
                "newest_first", "tail")
            assert result.compressor.n == result.baseline.n == 24
            result.assert_keeps_at_least()


        def test_forgets_keeps_what_tail_keeps(memory_audit):
            memory_audit(Forgets).assert_keeps_at_least()


        def test_newest_first_keeps_what_frontier_keeps(memory_audit):
            memory_audit("memories:NewestFirst", baseline="frontier").assert_keeps_at_least()


        def test_within_a_margin(memory_audit):
            memory_audit(NewestFirst, baseline="frontier").assert_keeps_at_least(margin=0.2)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    text = " ".join(result.stdout.str().split())
    assert re.search(
        r"AssertionError: forgets keeps less than tail on joint J: forgets 0/24 source pairs "
        r"against tail (\d+)/24; tail alone passes \1, forgets alone 0; the run: ",
        text,
    ), text
    assert re.search(
        r"newest_first keeps less than frontier on joint J: newest_first (\d+)/24 source "
        r"pairs against frontier (\d+)/24; frontier alone passes \d+, newest_first alone \d+",
        text,
    ), text


def test_a_compressor_that_raises_fails_naming_its_error(pytester: pytest.Pytester):
    pytester.makepyfile(memories=MEMORIES)
    pytester.makepyfile(
        test_raises="""
        from memories import Raises


        def test_raises(memory_audit):
            memory_audit(Raises, score="adequacy").assert_keeps_at_least()


        def test_a_class_defined_in_a_test_cannot_be_found_again(memory_audit):
            from compressors import Compressor

            class Local(Compressor):
                name = "local"
                version = "1"

                def update(self, memory, chunk, query_keys, budget):
                    return memory

            memory_audit(Local)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    text = " ".join(result.stdout.str().split())
    assert "AssertionError: raises raised (its reads score 0): KeyError: 'boom' at" in text
    assert "memory_audit: " in text
    assert "define it at the top level of an importable module" in text


# --------------------------------------------------------------- what the scaffold writes


def test_the_scaffolded_test_uses_the_fixture_and_passes(tmp_path: Path):
    """Without installing the package: its module on PYTHONPATH (the entry-point test,
    which needs the installation, is left to test_plugins.py's end-to-end test)."""
    out = tmp_path / "plugin"
    scaffold_plugin("keep_newest", out)
    test = (out / "tests" / "test_keep_newest.py").read_text()
    assert "memory_audit(KeepNewestCompressor" in test
    env = {**os.environ, "PYTHONPATH": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "keeps_at_least"],
        cwd=out, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout


def _run_steps(workflow: dict) -> str:
    return "\n".join(step.get("run", "") for step in workflow["jobs"]["gate"]["steps"])


def test_the_scaffolded_workflow_is_the_docs_and_runs_the_gate(tmp_path: Path):
    out = tmp_path / "plugin"
    scaffold_plugin("my_memory", out)
    written = (out / ".github" / "workflows" / "memory-audit.yml").read_text()
    assert written == (ROOT / "docs" / "examples" / "memory-audit-gate.yml").read_text()
    workflow = yaml.safe_load(written)
    assert workflow[True] == {"pull_request": None}  # `on:` (YAML 1.1 reads it as true)
    assert workflow["permissions"]["pull-requests"] == "write"
    assert workflow["env"]["CONDITIONS"] == "my_memory,baselines"
    steps = _run_steps(workflow)
    # memory-audit comes from where the user says (no release on an index is assumed)
    assert workflow["env"]["MEMORY_AUDIT"] == "memory-audit"
    assert 'pip install -q "$MEMORY_AUDIT" ./base' in steps
    assert 'pip install -q "$MEMORY_AUDIT" ./new' in steps
    assert re.search(
        r"audit compare runs/base runs/new --fail-on-regression .*; *$|"
        r"audit compare runs/base runs/new --fail-on-regression",
        steps,
    )
    assert "--out runs/base" in steps
    assert "--out runs/new" in steps
    assert "gh pr comment" in steps
    body = re.search(r"gh pr comment .* --body-file (\S+)", steps)
    assert body is not None
    assert f"> {body.group(1)}" in steps  # the comment is written, then posted
    assert re.search(r"cat runs/compare/compare\.md runs/new/report/report\.md", steps)
    assert "exit ${{ steps.gate.outputs.status || 1 }}" in steps
    other = tmp_path / "other"
    scaffold_plugin("keep_newest", other)
    text = (other / ".github" / "workflows" / "memory-audit.yml").read_text()
    assert "CONDITIONS: keep_newest,baselines" in text
    assert "${{ github.run_id }}" in text  # GitHub's expressions survive the templating


def test_the_workflow_runs_here(tmp_path: Path):
    """The workflow's own steps, run by bash as GitHub would, but with the compressor on
    PYTHONPATH instead of installed, fewer transforms, and the comment written to a file
    instead of posted: its commands are real, the gate passes one version against
    itself, and the comment holds the gate's lines, compare.md and report.md."""
    workflow = yaml.safe_load((ROOT / "docs" / "examples" / "memory-audit-gate.yml").read_text())
    out = tmp_path / "plugin"
    scaffold_plugin("my_memory", out)
    names = plugin_names("my_memory")
    output = tmp_path / "github-output"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(out),
        "GITHUB_OUTPUT": str(output),
        "AUDIT": workflow["env"]["AUDIT"].replace("rename:5,permute:5,relabel:5", "rename:1")
        + " --workers 1",
        "CONDITIONS": workflow["env"]["CONDITIONS"].replace(
            "my_memory", f"{names['module']}:{names['class_name']}"
        ),
    }
    found = re.search(r"--body-file (\S+)", _run_steps(workflow))
    assert found is not None
    body = found.group(1)
    status = ""
    for step in workflow["jobs"]["gate"]["steps"]:
        script = step.get("run", "")
        if not script or step["name"].startswith("Fail on"):
            continue
        script = "\n".join(line for line in script.splitlines() if "pip install" not in line)
        script = (
            script.replace("${{ github.run_id }}", "7")
            .replace("${{ steps.gate.outputs.status }}", status)
            .replace("gh pr comment", f"cp {body} posted; : ")
        )
        script = re.sub(r"\$\{\{[^}]*\}\}", "x", script)  # the pull request's number
        done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, (step["name"], done.stdout + done.stderr)
        if output.exists():
            status = dict(re.findall(r"(\w+)=(\S*)", output.read_text())).get("status", "")
    assert status == "0"
    posted = (tmp_path / "posted").read_text()
    assert posted.startswith("### memory-audit gate: exit 0")
    assert "gate: passed" in posted
    assert "## memory audit: comparison of A (base), B (new)" in posted
    assert "Gate: passed" in posted
    assert (tmp_path / "runs" / "new" / "report" / "report.md").read_text() in posted


def test_bad_arguments_are_refused_by_name(tmp_path: Path):
    """An adversary's instance gave an AttributeError on ``__qualname__``, and a
    negative margin made a keeper "keep less than tail"."""
    from audit.errors import PlanError
    from audit.pytest_plugin import MemoryAudit
    from compressors import build

    fixture = MemoryAudit(tmp_path)
    with pytest.raises(PlanError, match="not an instance"):
        fixture(build("frontier"))  # type: ignore[arg-type]
    result = fixture("frontier", pairs_per_family=1)
    for margin in (-1.0, 1.5):
        with pytest.raises(PlanError, match="margin: a share between 0 and 1"):
            result.assert_keeps_at_least(margin=margin)
    result.assert_keeps_at_least()  # frontier keeps what tail keeps
