"""A full disk and a read-only medium, for real: tmpfs mounts in a private namespace.

Each case runs a shell in a new user and mount namespace (``unshare -rm``), mounts a
small tmpfs there, and runs real `audit` processes on it; what it left is copied out
before the namespace (and the mount) goes.  Then: the command failed with one line
naming the file and the way out (never a traceback, never SQLite's misleading
"cannot rollback"), `audit report` says the run is incomplete and never shows a torn
row, and `audit resume` on the copy gives exactly the results of an uninterrupted run.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._cli import audit

RUN = ["run", "--preset", "cca-pilot", "--conditions", "frontier,tail",
       "--transforms", "identity,rename:2", "--seed", "0", "--quiet", "--workers", "1"]  # fmt: skip


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt 2>/dev/null || exit 1"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _namespaces_work(),
    reason="needs unshare -rm and tmpfs mounts (user namespaces); CI's machine has them",
)


def audit_command(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "audit", *args])


def in_namespace(script: str) -> None:
    subprocess.run(["unshare", "-rm", "sh", "-c", script], check=True, timeout=600)


def one_line_error(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no error message"
    assert lines[-1].startswith("error: "), stderr
    return lines[-1]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "run"
    result = audit(*RUN, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.parametrize("size", ["200k", "500k", "880k"])
def test_a_full_disk_stops_the_run_cleanly_and_resume_completes_it(
    whole: Path, tmp_path: Path, size: str
):
    mount, saved = tmp_path / "mnt", tmp_path / "saved"
    mount.mkdir()
    saved.mkdir()
    run = audit_command(*RUN, "--out", str(mount / "r"))
    in_namespace(
        f"mount -t tmpfs -o size={size} tmpfs {mount} || exit 1\n"
        f"{run} > /dev/null 2> {saved}/run.err; echo $? > {saved}/run.rc\n"
        f"cp -a {mount}/r {saved}/r"
    )
    code = int((saved / "run.rc").read_text())
    stderr = (saved / "run.err").read_text()
    assert code == 1, stderr  # the run does not fit in any of these sizes
    line = one_line_error(stderr)
    assert "cannot rollback" not in stderr
    assert "disk is full" in line or "no space left" in line.lower(), line
    assert "audit resume" in line

    copy = saved / "r"
    report = audit("report", str(copy), "--out", str(tmp_path / "report"))
    assert report.returncode == 3, report.stderr  # incomplete, and says so
    assert "INCOMPLETE" in (tmp_path / "report" / "report.md").read_text()
    assert "nan" not in (tmp_path / "report" / "headline.csv").read_text()

    resumed = audit("resume", str(copy), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert (copy / "results.parquet").read_bytes() == (whole / "results.parquet").read_bytes()
    assert audit("report", str(copy), "--out", str(tmp_path / "after")).returncode == 0


def test_a_read_only_medium_gets_one_line_with_the_way_out(whole: Path, tmp_path: Path):
    mount, saved = tmp_path / "mnt", tmp_path / "saved"
    mount.mkdir()
    saved.mkdir()
    steps = {
        "resume": audit_command("resume", str(mount / "torn"), "--quiet"),
        "resume-whole": audit_command("resume", str(mount / "r"), "--quiet"),
        "report": audit_command("report", str(mount / "r")),
        "report-elsewhere": audit_command(
            "report", str(mount / "r"), "--out", str(saved / "report")
        ),
        "new-run": audit_command(*RUN, "--out", str(mount / "new")),
    }
    script = [
        f"mount -t tmpfs tmpfs {mount} || exit 1",
        f"cp -a {whole} {mount}/r",
        f"cp -a {whole} {mount}/torn && rm {mount}/torn/summary.json",  # not whole
        f"mount -o remount,ro {mount} || exit 1",
    ]
    for name, command in steps.items():
        script.append(f"{command} > /dev/null 2> {saved}/{name}.err; echo $? > {saved}/{name}.rc")
    in_namespace("\n".join(script))

    def outcome(name: str) -> tuple[int, str]:
        return int((saved / f"{name}.rc").read_text()), (saved / f"{name}.err").read_text()

    code, stderr = outcome("resume")
    assert code == 1
    line = one_line_error(stderr)
    assert "Read-only file system" in line
    assert "copy the directory" in line
    code, stderr = outcome("resume-whole")  # a whole run: nothing to write, so no error
    assert code == 0, stderr
    code, stderr = outcome("report")
    assert code == 1
    assert "--out" in one_line_error(stderr)
    code, stderr = outcome("report-elsewhere")
    assert code == 0, stderr
    assert (saved / "report" / "report.html").exists()
    code, stderr = outcome("new-run")
    assert code == 1
    assert "Read-only file system" in one_line_error(stderr)
