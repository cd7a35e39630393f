"""Reproducible LLM reads: determinism measured, recorded, shown; the embedded default
reproducible.

The determinism probe (``audit.backends._determinism``) is checked against real HTTP
servers on 127.0.0.1: one whose answer is a function of the request (16/16 identical)
and one whose answer depends on how many requests it is serving at once, as a batching
server's arithmetic does (some differ).  The embedded llama.cpp backend is then checked
for what the default promises: one slot, the prompt cache off (in its parameters and in
every request body), and 16/16 identical answers when the same requests come one at a
time and all at once shuffled.  The reader-agreement figures are checked against a plain
oracle on generated result tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from audit.backends import (
    BackendClient,
    BackendConfig,
    ResponseCache,
    load_config,
    measure_determinism,
    open_backend,
)
from audit.backends._determinism import (
    PROBE_REQUESTS,
    SERIAL_PROBE_REQUESTS,
    probe_requests,
    probe_size,
)
from audit.cli import app
from audit.scoring import reader_agreement
from compressors import ChatRequest
from tests._rows import result_csv

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.upper().startswith("MEMORY_AUDIT_"):
            monkeypatch.delenv(name)


class ToyServer:
    """An OpenAI-compatible server in a thread: ``order_dependent`` answers with the
    number of requests in flight (as batched arithmetic depends on the batch);
    ``remembers`` with what the previous request asked too (as a reused prompt cache
    makes an answer depend on what came before)."""

    def __init__(self, *, order_dependent: bool, remembers: bool = False) -> None:
        self.order_dependent = order_dependent
        self.remembers = remembers
        self.previous = ""
        self.calls = 0
        self.in_flight = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.in_flight += 1
        self.calls += 1
        try:
            await asyncio.sleep(0.02)
            asked = json.dumps(body["messages"])
            if "response_format" in body:  # backends check's schema probe
                content = json.dumps({"probe": "schema-ok"})
            elif self.order_dependent:
                content = f"batch of {self.in_flight}"
            else:
                seen = self.previous + asked if self.remembers else asked
                digest = hashlib.sha256(seen.encode()).hexdigest()
                content = f"answer {digest[:12]}"
            self.previous = asked
        finally:
            self.in_flight -= 1
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "toy",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )  # fmt: skip

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "toy", "object": "model"}]})

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        application = web.Application()
        application.router.add_post("/v1/chat/completions", self._chat)
        application.router.add_get("/v1/models", self._models)
        application.router.add_get("/health", self._health)
        app_runner = web.AppRunner(application)
        self._loop.run_until_complete(app_runner.setup())
        site = web.TCPSite(app_runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> ToyServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def toy_client(
    server: ToyServer, max_concurrency: int = 32, cache: ResponseCache | None = None
) -> BackendClient:
    backend = BackendConfig(base_url=(server.base_url,), model="toy",
                            max_concurrency=max_concurrency)  # fmt: skip
    return BackendClient("toy", backend, base_urls=[server.base_url], model="toy", cache=cache)


async def _probe(
    server: ToyServer, max_concurrency: int = 32, cache: ResponseCache | None = None
) -> Any:
    async with toy_client(server, max_concurrency, cache) as client:
        return await measure_determinism(client)


def test_a_server_whose_answer_is_a_function_of_the_request_measures_16_of_16():
    with ToyServer(order_dependent=False) as server:
        result = asyncio.run(_probe(server))
    assert (result.identical, result.compared, result.requests) == (16, 16, 16)
    assert result.share == 1.0
    assert result.summary().startswith("16/16 answers identical")


def test_a_server_whose_answer_depends_on_concurrency_is_caught():
    with ToyServer(order_dependent=True) as server:
        result = asyncio.run(_probe(server))
    assert result.compared == 16
    assert result.identical < 16, result
    assert result.differing  # which requests changed is kept


def test_a_one_slot_server_gets_the_small_probe_which_catches_a_remembering_server():
    """One request at a time cannot batch: 4 requests, 8 sent, are enough to show an
    answer that depends on what was asked before (a reused prompt cache); a client that
    may send several at once gets the full 16."""
    with ToyServer(order_dependent=False, remembers=True) as server:
        result = asyncio.run(_probe(server, max_concurrency=1))
        assert server.calls == 2 * SERIAL_PROBE_REQUESTS == 8
    assert result.requests == result.compared == SERIAL_PROBE_REQUESTS
    assert result.identical < result.compared, result
    with ToyServer(order_dependent=False) as server:
        result = asyncio.run(_probe(server, max_concurrency=1))
        assert (result.identical, result.compared) == (4, 4)
        assert probe_size(toy_client(server, 2)) == PROBE_REQUESTS
        asyncio.run(_probe(server, max_concurrency=2))
        assert server.calls == 8 + 2 * PROBE_REQUESTS


def test_the_probe_asks_the_server_never_the_cache(tmp_path: Path):
    """An answer from the response cache measures nothing of the server: a second run's
    probe, with the first run's cache, sends every request again and caches none."""
    with ToyServer(order_dependent=False) as server, ResponseCache(tmp_path / "c.sqlite") as cache:
        for run in (1, 2):
            asyncio.run(_probe(server, max_concurrency=1, cache=cache))
            assert server.calls == run * 2 * SERIAL_PROBE_REQUESTS
        assert cache.stats().entries == 0


def test_the_probe_requests_are_fixed_and_share_a_prefix():
    first, second = probe_requests(), probe_requests()
    assert first == second
    assert len(first) == 16
    assert len({r.messages[0].content for r in first}) == 1  # the shared prefix
    assert len({r.messages[1].content for r in first}) == 16


def _toml(path: Path, server: ToyServer) -> Path:
    path.write_text(
        f'[backends.toy]\nbase_url = "{server.base_url}"\nmodel = "toy"\n'
        'structured_output = "json_schema"\n'
    )
    return path


@pytest.mark.parametrize("order_dependent", [False, True])
def test_backends_check_prints_the_determinism_line(tmp_path: Path, order_dependent: bool):
    with ToyServer(order_dependent=order_dependent) as server:
        config = _toml(tmp_path / "audit.toml", server)
        result = runner.invoke(app, ["backends", "check", "toy", "--config", str(config)])
        lines = [line for line in result.output.splitlines() if " determinism: " in line]
        assert len(lines) == 1, result.output
        if order_dependent:
            assert result.exit_code == 1, result.output
            assert lines[0].startswith("FAIL toy determinism")
            assert "not replications" in lines[0]
        else:
            assert result.exit_code == 0, result.output
            assert lines[0].startswith("ok   toy determinism")
            assert "16/16 answers identical" in lines[0]
        skipped = runner.invoke(
            app, ["backends", "check", "toy", "--config", str(config), "--no-determinism"]
        )
        assert " determinism: " not in skipped.output


# -- the embedded backend ------------------------------------------------------------------


def test_the_embedded_backend_is_reproducible_by_default(tmp_path: Path):
    """One slot, the prompt cache off, and the probe's answers identical (4: one slot)."""
    config = load_config(None, env_file=None, environ=False)
    backend = config.get("local")
    assert backend.mode == "reproducible"

    async def check() -> tuple[Any, dict[str, Any], dict[str, Any]]:
        async with open_backend("local", config) as client:
            body = client.request_body(ChatRequest(messages=probe_requests(1)[0].messages))
            status, props, _ = await client.get_json(client.base_urls[0][: -len("/v1")], "/props")
            assert status == 200, props
            assert probe_size(client) == SERIAL_PROBE_REQUESTS
            stats = client.stats.model_copy(deep=True)
            result = await measure_determinism(client)
            assert client.stats == stats  # the probe is none of the audit's
            return result, body, props

    result, body, props = asyncio.run(check())
    assert body["cache_prompt"] is False  # every request says so, and keys the cache apart
    assert props["total_slots"] == 1
    assert (result.identical, result.compared) == (4, 4), result


def test_throughput_mode_serves_its_slots_with_the_prompt_cache(tmp_path: Path):
    toml = tmp_path / "audit.toml"
    toml.write_text('[backends.fast]\nkind = "local"\nmode = "throughput"\nn_parallel = 3\n')
    config = load_config(toml, env_file=None, environ=False)

    async def check() -> tuple[dict[str, Any], dict[str, Any]]:
        async with open_backend("fast", config) as client:
            body = client.request_body(ChatRequest(messages=probe_requests(1)[0].messages))
            _, props, _ = await client.get_json(client.base_urls[0][: -len("/v1")], "/props")
            return body, props

    body, props = asyncio.run(check())
    assert "cache_prompt" not in body
    assert props["total_slots"] == 3


# -- a reader's disagreement with itself ---------------------------------------------------

ROW_KEYS = ("pair_id", "variant", "branch", "condition", "budget", "transform",
            "transform_index")  # fmt: skip


def _row(reader: str, pair: int, branch: str, repeat: int, answer: str, correct: int,
         outcome: str = "pass", memory: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "reader": reader, "pair_id": f"p{pair}-A", "source_pair_id": f"p{pair}",
        "variant": "A", "branch": branch, "condition": "frontier", "budget": 400,
        "transform": "identity", "transform_index": 0, "repeat": repeat,
        "memory_sha256": memory or f"m{pair}", "answer": answer, "correct": correct,
        "outcome": outcome,
    }  # fmt: skip


reads = st.lists(
    st.tuples(
        st.integers(0, 4),  # source pair
        st.sampled_from(["now", "later"]),
        st.integers(0, 2),  # repeat
        st.sampled_from(["a", "b"]),  # answer
        st.sampled_from(["pass", "pass", "na"]),
    ),
    max_size=40,
    unique_by=lambda t: (t[0], t[1], t[2]),
)


@settings(max_examples=150, deadline=None)
@given(reads)
def test_reader_agreement_matches_a_plain_count(generated: list[tuple[Any, ...]]):
    rows = [
        _row("llm", pair, branch, repeat, answer, int(answer == "a"), outcome)
        for pair, branch, repeat, answer, outcome in generated
    ]
    rows += [_row("exact", 0, "now", 0, "a", 1)]  # the exact reader is never counted
    found = {a.reader: a for a in reader_agreement(pd.DataFrame(rows))}
    if not any(r["reader"] == "llm" for r in rows):
        assert found == {}
        return
    groups: dict[tuple[Any, ...], list[str]] = {}
    for pair, branch, _repeat, answer, outcome in generated:
        if outcome != "na":
            groups.setdefault((pair, branch), []).append(answer)
    twice = {k: v for k, v in groups.items() if len(v) >= 2}
    differ = {k for k, v in twice.items() if len(set(v)) > 1}
    agreement = found["llm"]
    assert agreement.groups == len(twice)
    assert agreement.answer_differs == agreement.score_differs == len(differ)
    assert agreement.source_pairs == len({k[0] for k in twice})
    assert agreement.source_pairs_differ == len({k[0] for k in differ})
    assert set(found) == {"llm"}


def test_a_changed_memory_is_not_a_disagreement():
    rows = [
        _row("llm", 0, "later", 0, "a", 1, memory="m-first"),
        _row("llm", 0, "later", 1, "b", 0, memory="m-second"),  # another writer sample
    ]
    (agreement,) = reader_agreement(pd.DataFrame(rows))
    assert agreement.groups == 0
    assert "needs --repeats 2" in agreement.summary()


@pytest.fixture(scope="module")
def two_cold_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cold")
    runs = []
    for name in ("first", "second"):
        (root / name).mkdir()
        toml = root / name / "audit.toml"
        toml.write_text(f'cache_path = "{root / name / "cache.sqlite"}"\n')
        out = root / name / "run"
        result = runner.invoke(
            app,
            ["run", "--conditions", "frontier", "--transforms", "identity", "--budget", "400",
             "--reader", "local", "--config", str(toml), "--llm-sample", "1", "--repeats", "2",
             "--llm-conditions", "frontier", "--llm-transforms", "identity", "--workers", "1",
             "--quiet", "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, (result.output, result.exception)
        runs.append(out)
    return runs[0], runs[1]


COMPARED = ("outcome", "correct", "correct_lenient", "answer", "raw_answer", "finish_reason")


def _llm_rows(out: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    frame = pd.read_csv(result_csv(out), dtype=str, keep_default_na=False)
    frame = frame[frame["reader"] != "exact"]
    keys = [*ROW_KEYS, "repeat", "reader"]
    return {tuple(r[k] for k in keys): tuple(r[c] for c in COMPARED) for _, r in frame.iterrows()}


def test_two_cold_cache_runs_on_the_embedded_model_are_identical(two_cold_runs):
    first, second = (_llm_rows(run) for run in two_cold_runs)
    assert first
    assert first == second


def test_a_run_records_the_mode_and_determinism_and_the_report_shows_them(two_cold_runs):
    run = two_cold_runs[0]
    config = json.loads((run / "config.json").read_text())
    record = config["backends"]["local"]
    assert record["mode"] == "reproducible"
    assert record["roles"] == ["reader"]
    assert record["determinism"]["identical"] == record["determinism"]["compared"] == 4
    costs = json.loads((run / "costs.json").read_text())["invocations"][0]
    assert costs["backends"]["local"]["determinism"]["compared"] == 4
    # the probe's time and requests on a line of their own, not the deterministic stage's
    assert costs["probe"]["requests"] == 2 * 4
    assert costs["probe"]["seconds"] > 0
    assert costs["backends_start"]["seconds"] > 0
    report = runner.invoke(app, ["report", str(run)])
    assert report.exit_code == 0, report.output
    text = (run / "report" / "report.md").read_text()
    assert "mode reproducible; determinism 4/4 identical answers" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| determinism probe |")]
    assert f"| {costs['probe']['requests']} |" in row, row
    assert "the same memory read again: another score in 0/" in text


def test_compare_states_the_noise_floor(two_cold_runs, tmp_path: Path):
    first, second = two_cold_runs
    result = runner.invoke(app, ["compare", str(first), str(second), "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "c" / "compare.csv")
    llm = table[(table["reader_a"] != "exact") & (table["reader_b"] != "exact")]
    assert not llm.empty
    assert (llm["noise_floor"] == 0.0).all()
    assert (llm["delta"] == 0).all()
    # a floor of zero: there is no noise for a difference to be within (the report used
    # to call these identical results "within reader noise")
    assert not llm["within_noise"].any()
    assert "within reader noise" not in (tmp_path / "c" / "compare.md").read_text()


def _toy_run(server: ToyServer, tmp_path: Path, name: str, *extra: str) -> Path:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f'cache_path = "{tmp_path / name}.sqlite"\n[backends.toy]\n'
        f'base_url = "{server.base_url}"\nmodel = "toy"\nroles = ["reader"]\n'
    )
    out = tmp_path / name
    result = runner.invoke(
        app,
        ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms",
         "identity", "--reader", "toy", "--config", str(config), "--llm-sample", "1",
         "--repeats", "2", "--llm-conditions", "frontier", "--llm-transforms", "identity",
         "--workers", "1", "--quiet", "--out", str(out), *extra],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    return out


def _determinism_lines(run: Path) -> list[str]:
    text = (run / "report" / "report.md").read_text()
    return [line for line in text.splitlines() if "determinism" in line and "toy" in line]


def test_the_report_states_one_determinism_per_reader_and_a_resume_keeps_the_lowest(
    tmp_path: Path,
):
    """The reader is ``toy:toy`` in the results and ``toy`` in config.json: one line for
    it, never a second one saying it was not recorded; a later invocation that measures
    less replaces the figure (and says how many invocations measured)."""
    from audit.rundir import BackendRecord, Determinism, record_backends

    with ToyServer(order_dependent=False) as server:
        run = _toy_run(server, tmp_path, "measured")
        unmeasured = _toy_run(server, tmp_path, "unmeasured", "--no-determinism")
    (line,) = _determinism_lines(run)
    assert "toy:toy" in line, line
    assert "determinism 16/16 identical answers" in line, line
    assert "not recorded" not in line
    (line,) = _determinism_lines(unmeasured)
    assert "determinism not measured (--no-determinism)" in line, line

    def recorded() -> dict[str, Any]:
        return dict(json.loads((run / "config.json").read_text())["backends"]["toy"])

    def probe(identical: int) -> BackendRecord:
        found = Determinism(identical=identical, compared=16, requests=16)
        return BackendRecord(roles=["reader"], determinism=found)

    record_backends(run, {"toy": probe(9)})  # a resume met a server that changed
    assert (recorded()["determinism"]["identical"], recorded()["measurements"]) == (9, 2)
    record_backends(run, {"toy": probe(16)})
    assert (recorded()["determinism"]["identical"], recorded()["measurements"]) == (9, 3)
    record_backends(run, {"toy": BackendRecord(roles=["reader"], unmeasured="--no-determinism")})
    assert recorded()["determinism"]["identical"] == 9  # no measurement never erases one
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    (line,) = _determinism_lines(run)
    assert "determinism 9/16 identical answers" in line
    assert "lowest of 3 invocations" in line
