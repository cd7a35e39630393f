"""Fault injection: an LLM-reader audit through tests/_fault_proxy.py, a real HTTP proxy in
front of the real embedded llama.cpp server.

The same tiny audit (cca-pilot, ``frontier`` at a small budget, identity, one source pair,
one repeat, LLM reader only: six reads) runs fault-free and with 30 % of the attempts
faulted, each with a fresh response cache (``cache_path`` in the backend TOML).  Then:

- the run completes, and every LLM read is in results exactly once (same keys as the
  fault-free run);
- NA only where the proxy exhausted the retries (every attempt a transport fault), with
  ``correct`` empty, never 0;
- a read whose answer the proxy corrupted (truncated content, empty content, answer only in
  the reasoning field) is an outcome of the read (scored 0), never NA;
- every other read equals the fault-free run (outcome, correct, answer, raw answer).

And with no retries against an always-failing server (or no server at all), every LLM
read is NA and joint J is reported as bounds (``joint_J_bounds``), never as 0.

The upstream is reproducible (docs/backends.md, "Reproducible reads"): the embedded server
in its default mode (one slot), and every request says ``cache_prompt: false`` (the
backend's ``extra_body``), so an answer does not depend on what was computed before it.
The proxy forwards every attempt it does not fault (no memo), so a retried read is really
computed again, and "every other read equals the fault-free run" proves that the client
changed no answer.  A fault-free rerun with a cold cache must equal the first run, read
for read, or none of this would prove anything.
"""

from __future__ import annotations

import csv
import json
import os
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from audit.cli import app
from audit.engine import reader_request
from audit.rundir import RunStore
from histories import PRESETS, generate
from tests._backends_support import LocalModel, local_model
from tests._fault_proxy import (
    ALL_FAULTS,
    MODEL_FAULTS,
    TRANSPORT_FAULTS,
    FaultProxy,
    request_digest,
)
from tests._rows import result_csv

__all__ = ["local_model"]

runner = CliRunner()

BACKEND = "proxied"
MODEL = "SmolLM2-135M-Instruct-Q4_1"
BUDGET = "400"
"""A small frontier memory keeps each prompt short on this CPU model."""
MAX_RETRIES = 2
"""In the faulty run: small enough that the chosen seed exhausts them on some request."""
RATE = 0.3
REQUEST_TIMEOUT_S = 90.0
"""Long enough for a real answer of the CPU model on a busy 2-core machine (every answer
is computed: the proxy keeps none); an answer slower than this would be a timeout the
seed did not plan.  Each injected ``hang`` costs this long."""
HANG_S = REQUEST_TIMEOUT_S + 5.0
"""The proxy's ``hang`` fault: past the client's timeout."""
PRESET = "cca-pilot-paper"
"""Fixed data: the fault plans hang on the requests' digests, so on the memories (the
paper's pilot is byte-identical across versions; the default pilot may change)."""
KEY_COLUMNS = ("pair_id", "condition", "variant", "branch", "repeat", "reader")
COMPARED = ("outcome", "correct", "correct_lenient", "answer", "raw_answer", "finish_reason")


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No audit.toml, .env or MEMORY_AUDIT_* variable of the developer's leaks in."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.upper().startswith("MEMORY_AUDIT_"):
            monkeypatch.delenv(name)


def write_config(path: Path, base_url: str, cache: Path, **fields: Any) -> Path:
    lines = [
        f'cache_path = "{cache}"',
        f"[backends.{BACKEND}]",
        f'base_url = "{base_url}"',
        f'model = "{MODEL}"',  # no discovery: /v1/models is not what is tested here
        'roles = ["reader"]',
        "extra_body = {cache_prompt = false}",  # reproducible: no prompt-cache reuse
        # one slot upstream: a second request in flight would wait there, its wait counted
        # against request_timeout_s (the embedded backend does the same for itself)
        "max_concurrency = 1",
    ]
    lines += [f"{name} = {json.dumps(value)}" for name, value in fields.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def audit_run(config: Path, out: Path, codes: tuple[int, ...] = (0,)) -> Any:
    result = runner.invoke(
        app,
        [
            "run",
            "--preset",
            PRESET,
            "--conditions",
            "frontier",
            "--transforms",
            "identity",
            "--budget",
            BUDGET,
            "--reader",
            BACKEND,
            "--config",
            str(config),
            "--llm-sample",
            "1",
            "--repeats",
            "1",
            "--llm-conditions",
            "frontier",
            "--llm-transforms",
            "identity",
            "--workers",
            "1",
            "--quiet",
            "--no-determinism",  # every request through the proxy is a read under test
            "--out",
            str(out),
        ],
    )
    assert result.exit_code in codes, (result.output, result.exception)
    return result


def llm_rows(out: Path) -> list[dict[str, Any]]:
    store = RunStore(out)
    try:
        return [row for row in store.rows() if row["reader"] != "exact"]
    finally:
        store.close()


def keyed(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    keys = [tuple(row[c] for c in KEY_COLUMNS) for row in rows]
    duplicates = [k for k, n in Counter(keys).items() if n > 1]
    assert not duplicates, f"reads recorded twice: {duplicates}"
    return dict(zip(keys, rows, strict=True))


_QUERIES: dict[str, list[str]] = {}


def row_digest(out: Path, row: dict[str, Any], seed: int = 0) -> str:
    """The proxy's identity of the request this read sent (rebuilt from the stored memory)."""
    if not _QUERIES:
        _QUERIES.update({p.pair_id: list(p.query) for p in generate(PRESETS[PRESET])})
    store = RunStore(out)
    try:
        memory = store.memory(row["memory_sha256"])
    finally:
        store.close()
    assert memory is not None
    request = reader_request(
        memory, _QUERIES[row["pair_id"]], repeat=row["repeat"], tag=f"reader:{BACKEND}"
    )
    messages = [{"role": m.role, "content": m.content} for m in request.messages]
    return request_digest(messages, seed + row["repeat"])


@pytest.fixture(scope="module")
def proxy(local_model: LocalModel) -> Iterator[FaultProxy]:
    assert local_model.spec.reproducible, "the fault tests need a reproducible upstream"
    with FaultProxy(local_model.server.base_url, hang_s=HANG_S) as running:
        yield running


@pytest.fixture(scope="module")
def fault_free(
    proxy: FaultProxy, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[str]]:
    """The fault-free run (through the proxy, rate 0) and the request digests it sent."""
    root = tmp_path_factory.mktemp("fault-free")
    proxy.reset(rate=0.0)
    config = write_config(root / "audit.toml", proxy.base_url, root / "cache.sqlite", max_retries=0)
    audit_run(config, root / "run")
    digests = sorted(proxy.attempts())
    assert digests, "the fault-free run sent nothing through the proxy"
    return root / "run", digests


def test_a_cold_cache_rerun_equals_the_first_run(
    proxy: FaultProxy, fault_free: tuple[Path, list[str]], tmp_path: Path
):
    """Without this, "every non-NA read equals the fault-free run" could pass or fail for
    the server's reasons: the same run again, with a fresh cache, sends every request
    again and gets every answer back identical."""
    clean_dir, digests = fault_free
    proxy.reset(rate=0.0)
    before = proxy.upstream_chats
    config = write_config(tmp_path / "audit.toml", proxy.base_url, tmp_path / "cold.sqlite")
    audit_run(config, tmp_path / "run")
    assert sorted(proxy.attempts()) == digests
    # every read computed again: nothing came from a cache
    assert proxy.upstream_chats - before == len(digests)
    first, second = keyed(llm_rows(clean_dir)), keyed(llm_rows(tmp_path / "run"))
    assert set(first) == set(second)
    for key, row in second.items():
        for column in COMPARED:
            assert row[column] == first[key][column], (key, column, row, first[key])


def choose_seeds(proxy: FaultProxy, digests: list[str]) -> list[int]:
    """Seeds for the faulty runs, at RATE, on these requests.  The first exercises every
    path: a transport fault then an answer, retries exhausted (NA), a corrupted answer, a
    clean one; the next ones are added until every fault kind has been injected."""
    assert proxy.rate == RATE
    attempts = MAX_RETRIES + 1

    def plans(seed: int) -> list[list[str | None]]:
        proxy.seed = seed
        return [proxy.plan(d, attempts) for d in digests]

    chosen: list[int] = []
    for seed in range(10_000):
        p = plans(seed)
        exhausted = sum(len(x) == attempts and x[-1] in TRANSPORT_FAULTS for x in p)
        corrupted = sum(x[-1] in MODEL_FAULTS for x in p)
        recovered = sum(len(x) > 1 and x[-1] is None for x in p)
        clean = sum(x == [None] for x in p)
        if exhausted and corrupted and recovered and clean and exhausted < len(p) // 2:
            chosen.append(seed)
            break
    assert chosen, "no seed exercises every path"
    covered = {f for x in plans(chosen[0]) for f in x if f}
    for seed in range(10_000):
        if covered >= set(ALL_FAULTS):
            break
        new = {f for x in plans(seed) for f in x if f} - covered
        if len(new) >= 2 or (new and len(set(ALL_FAULTS) - covered) == 1):
            chosen.append(seed)
            covered |= new
    assert covered >= set(ALL_FAULTS)
    return chosen


def test_faulty_runs_account_for_every_read(
    proxy: FaultProxy, fault_free: tuple[Path, list[str]], tmp_path: Path
):
    clean_dir, digests = fault_free
    proxy.reset(rate=RATE)
    seeds = choose_seeds(proxy, digests)
    injected: Counter[str | None] = Counter()
    fates: Counter[str] = Counter()
    for seed in seeds:
        proxy.reset(seed=seed)
        one_faulty_run(proxy, clean_dir, digests, tmp_path / f"seed-{seed}", injected, fates)
    assert set(injected) - {None} == set(ALL_FAULTS), injected
    print(f"seeds {seeds}; attempts by fault {dict(injected)}; requests by fate {dict(fates)}")


def one_faulty_run(
    proxy: FaultProxy,
    clean_dir: Path,
    digests: list[str],
    root: Path,
    injected: Counter[str | None],
    fate_counts: Counter[str],
) -> None:
    upstream_before = proxy.upstream_chats
    root.mkdir()
    config = write_config(
        root / "audit.toml",
        proxy.base_url,
        root / "fresh-cache.sqlite",
        max_retries=MAX_RETRIES,
        request_timeout_s=REQUEST_TIMEOUT_S,  # the proxy's hang runs past it
        # every attempt the plan has may take its whole timeout: a budget short of that
        # gave up on a request whose last planned attempt answered (a hang, then an
        # answer slower than the 30 s left on a loaded machine), a NA no seed planned
        retry_budget_s=(MAX_RETRIES + 1) * HANG_S + 30.0,
        backoff_initial_s=0.05,
        backoff_max_s=0.2,
    )
    out = root / "run"
    ran = audit_run(config, out, codes=(0, 3))

    clean = keyed(llm_rows(clean_dir))
    faulty = keyed(llm_rows(out))
    # 1 pair x 2 conditions (frontier, and full: the reader's check) x 1 repeat x 2
    # variants x 3 branches
    assert len(clean) == 12
    assert set(faulty) == set(clean), "a read is missing, or extra"
    assert all(r["outcome"] != "na" for r in clean.values()), "the fault-free run has NA"

    # what the proxy did, per request
    seen = proxy.attempts()
    injected.update(e.fault for events in seen.values() for e in events)
    forwarded = [  # every attempt the proxy did not answer itself was computed upstream
        e for events in seen.values() for e in events
        if e.fault is None or e.fault in MODEL_FAULTS or e.fault == "truncated_body"
    ]  # fmt: skip
    assert proxy.upstream_chats - upstream_before == len(forwarded)
    fates: dict[str, str] = {}
    for digest, events in seen.items():
        assert [e.attempt for e in events] == list(range(1, len(events) + 1)), events
        last = events[-1].fault
        if last is None:
            fates[digest] = "answered"
        elif last in MODEL_FAULTS:
            fates[digest] = last
        else:
            assert len(events) == MAX_RETRIES + 1, f"gave up early on {digest}: {events}"
            assert all(e.fault in TRANSPORT_FAULTS for e in events)
            fates[digest] = "exhausted"
        # the plan the seed was chosen for is what happened
        assert [e.fault for e in events] == proxy.plan(digest, MAX_RETRIES + 1)
    assert set(fates) == set(digests), "the faulty run sent other requests than the clean one"
    fate_counts.update(fates.values())

    for key, row in faulty.items():
        fate = fates[row_digest(out, row)]
        reference = clean[key]
        if fate == "exhausted":
            assert row["outcome"] == "na", (key, row)
            assert row["correct"] is None, row
            assert row["correct_lenient"] is None, row
            assert "gave up after" in (row["error"] or ""), row["error"]
        elif fate in MODEL_FAULTS:
            # a bad answer is an outcome of the read, scored 0: never NA
            assert row["outcome"] in ("unparsed", "wrong_log", "reader_error"), (fate, row)
            assert row["correct"] == 0, (fate, row)
            assert row["correct_lenient"] == 0, (fate, row)
            assert row["error"] is None, (fate, row)
            if fate == "reasoning_only":
                assert row["raw_answer"] == "", row
                assert row["reasoning_chars"] > 0, row
            if fate == "empty_content":
                assert row["raw_answer"] == "", row
            if fate == "truncated_content":
                assert row["finish_reason"] == "length", row
        else:
            assert row["outcome"] != "na", (key, row)
            for column in COMPARED:
                assert row[column] == reference[column], (key, column, row, reference)
            assert row["memory_sha256"] == reference["memory_sha256"]
    # NA exactly where retries were exhausted, in the rows and in the summary
    na = [r for r in faulty.values() if r["outcome"] == "na"]
    assert len(na) == sum(fates[row_digest(out, r)] == "exhausted" for r in faulty.values())
    assert ran.exit_code == (3 if na else 0), "NA reads must leave the run incomplete (exit 3)"
    summary = json.loads((out / "summary.json").read_text())
    entries = {
        e["condition"]: e
        for e in summary["scores"]
        if e["reader"].split(":")[0] == BACKEND and e["family"] == "all"
    }
    assert set(entries) == {"frontier", "full"}, entries
    for condition, entry in entries.items():  # full is the reader's check
        assert entry["reads"]["na"]["k"] == sum(r["condition"] == condition for r in na)
    # J is a bound exactly where NA leaves a pair block undecided (the other reads pass)
    blocks: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in faulty.values():
        if row["branch"] != "current":
            blocks.setdefault((row["pair_id"], row["repeat"]), []).append(row)
    undecided = [
        b
        for b in blocks.values()
        if any(r["outcome"] == "na" for r in b) and all(r["correct"] in (1, None) for r in b)
    ]
    joint = entry["blocks"]["joint_J"]
    assert joint["n"] == len(blocks), entry
    assert joint["k_high"] - joint["k"] == len(undecided), entry
    with result_csv(out).open(newline="") as handle:
        for fields in csv.DictReader(handle):
            if fields["outcome"] == "na":
                assert fields["correct"] == "", fields
                assert fields["correct_lenient"] == "", fields
    if na:
        resume_after_the_outage(proxy, config, out, clean, faulty, len(na))


def resume_after_the_outage(
    proxy: FaultProxy,
    config: Path,
    out: Path,
    clean: dict[tuple[Any, ...], dict[str, Any]],
    faulty: dict[tuple[Any, ...], dict[str, Any]],
    na: int,
) -> None:
    """The server is back: ``audit resume`` asks again for exactly the NA reads (the
    others come from the cache, a corrupted answer included: it was an answer), the
    run is whole, and costs.json counts the requests of both invocations."""
    proxy.reset(rate=0.0)
    try:
        result = runner.invoke(
            app,
            [
                "resume",
                str(out),
                "--config",
                str(config),
                "--quiet",
                "--workers",
                "1",
                "--no-determinism",
            ],
        )
    finally:
        proxy.reset(rate=RATE)
    assert result.exit_code == 0, (result.output, result.exception)
    resumed = keyed(llm_rows(out))
    assert set(resumed) == set(clean)
    for key, row in resumed.items():
        expected = clean[key] if faulty[key]["outcome"] == "na" else faulty[key]
        for column in COMPARED:
            assert row[column] == expected[column], (key, column, row)
    costs = json.loads((out / "costs.json").read_text())["invocations"]
    assert [c["outcome"] for c in costs] == ["finished", "finished"]
    second = costs[1]["llm"]["reader"]
    assert second["sent"] == na, second  # only the NA reads went to the server
    # resume runs again each unit (a condition's six reads) that holds an NA read
    rerun = 6 * len({r["condition"] for r in faulty.values() if r["outcome"] == "na"})
    assert second["cache_hits"] == rerun - na, second
    sent = sum(c["llm"]["reader"]["sent"] for c in costs)
    assert sent == costs[0]["llm"]["reader"]["sent"] + na
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "complete"
    assert manifest["na_units"] == 0
    report = runner.invoke(app, ["report", str(out), "--out", str(out.parent / "report")])
    assert report.exit_code == 0, report.output


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # closed again: connections are refused


def test_an_unreachable_backend_stops_the_run_before_any_work(tmp_path: Path):
    config = write_config(
        tmp_path / "audit.toml", closed_port_url(), tmp_path / "cache.sqlite", max_retries=0
    )
    result = runner.invoke(
        app,
        ["run", "--conditions", "frontier", "--transforms", "identity", "--reader", BACKEND,
         "--config", str(config), "--llm-conditions", "frontier", "--quiet",
         "--out", str(tmp_path / "run")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "does not answer" in result.output
    assert BACKEND in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists(), "work began before the backend was checked"


def test_no_retries_every_llm_read_is_na_and_J_is_bounds(local_model: LocalModel, tmp_path: Path):
    transport = {"http_500": 1, "http_502": 1, "http_503": 1, "http_429": 1, "reset": 1}
    with FaultProxy(local_model.server.base_url, rate=1.0, faults=transport) as proxy:
        config = write_config(
            tmp_path / "audit.toml",
            proxy.base_url,
            tmp_path / "cache.sqlite",
            max_retries=0,
            connect_timeout_s=2.0,
            request_timeout_s=5.0,
        )
        audit_run(config, tmp_path / "run", codes=(3,))  # incomplete: every read NA
        assert proxy.upstream_calls == 1  # GET /models, the check before any work
        assert len(proxy.events) == 12  # one attempt per read (frontier, full), none retried
    rows = llm_rows(tmp_path / "run")
    assert len(rows) == 12
    for row in rows:
        assert row["outcome"] == "na", row
        assert row["correct"] is None, row
        assert row["correct_lenient"] is None, row
        assert row["error"], row
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    entries = [e for e in summary["scores"] if e["reader"].split(":")[0] == BACKEND]
    assert entries
    for entry in entries:
        bounds = entry["blocks"]["joint_J"]
        assert bounds["k"] == 0
        assert bounds["k_high"] == bounds["n"] > 0
        for branch in ("current", "reveal", "override"):
            reads = entry["reads"][branch]  # NA is a bound, never counted as 0
            assert reads["k"] == 0
            assert reads["k_high"] == reads["n"] > 0
        assert entry["reads"]["na"]["k"] == sum(
            r["condition"] == entry["condition"]
            and (r["family"] == entry["family"] or entry["family"] == "all")
            for r in rows
        )
    # the exact reader's deterministic stage is unaffected
    exact = [e for e in summary["scores"] if e["reader"] == "exact" and e["family"] == "all"]
    assert exact
    assert exact[0]["source pairs"]["joint_J"]["k"] == exact[0]["source pairs"]["joint_J"]["k_high"]
