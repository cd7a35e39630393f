"""`audit runs list` and `audit runs prune` on real run directories made by `audit run`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests._cli import audit

RUN = ["run", "--preset", "cca-pilot", "--conditions", "tail",
       "--transforms", "identity", "--quiet", "--workers", "1"]  # fmt: skip


def age(run_dir: Path, stamp: str, state: str | None = None) -> None:
    """Make a run look last updated at ``stamp`` (and in ``state``), as time would."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["updated"] = stamp
    if state is not None:
        manifest["state"] = state
    path.write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real runs under runs/: old, old-but-running, new; plus a user's folder."""
    root = tmp_path_factory.mktemp("runs-home")
    for name in ("old", "killed", "new"):
        result = audit(*RUN, "--name", name, cwd=root)
        assert result.returncode == 0, result.stderr
    age(root / "runs" / "old", "2020-01-01T00:00:00Z")
    age(root / "runs" / "killed", "2020-01-02T00:00:00Z", state="running")
    (root / "runs" / "notes").mkdir()
    (root / "runs" / "notes" / "keep.txt").write_text("mine")
    (root / "runs" / "link").symlink_to(root / "runs" / "old")
    return root


def test_list_shows_each_run_oldest_first_and_nothing_else(runs: Path) -> None:
    result = audit("runs", "list", cwd=runs)
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()[1:-1]]
    assert names == ["old", "killed", "new"]
    assert "3 runs" in result.stdout.splitlines()[-1]


def test_prune_removes_only_old_finished_runs(runs: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run(["cp", "-a", str(runs), str(home)], check=True)
    dry = audit("runs", "prune", "--older-than", "30d", "--dry-run", cwd=home)
    assert dry.returncode == 0, dry.stderr
    assert "would remove old" in dry.stdout
    assert (home / "runs" / "old").is_dir()

    result = audit("runs", "prune", "--older-than", "30d", cwd=home)
    assert result.returncode == 0, result.stderr
    assert not (home / "runs" / "old").exists()
    assert (home / "runs" / "killed").is_dir(), "a run that says running is kept"
    assert (home / "runs" / "new").is_dir()
    assert (home / "runs" / "notes" / "keep.txt").read_text() == "mine"
    assert "kept 1 run whose manifest says running" in result.stdout

    again = audit("runs", "prune", "--older-than", "30d", "--include-running", cwd=home)
    assert again.returncode == 0, again.stderr
    assert not (home / "runs" / "killed").exists()
    assert (home / "runs" / "new").is_dir()


@pytest.mark.parametrize("bad", ["3x", "", "-1d", "1.5h"])
def test_prune_refuses_an_age_it_cannot_read(runs: Path, bad: str) -> None:
    result = audit("runs", "prune", "--older-than", bad, cwd=runs)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --older-than")
    assert (runs / "runs" / "old").is_dir()
