"""Preflight (``audit backends check``): is the server up, is the model served, is
structured output honoured, is it deterministic?  One line a check and base URL, scrubbed
of the API key; a malformed answer is a ``FAIL`` line, never a traceback.  The schema
probe admits exactly ``{"probe": "schema-ok"}`` while the prompt asks for something
else, so a server that ignores the schema is caught (docs/backends.md).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from audit.backends._client import BackendClient, _Endpoint
from audit.backends._config import BackendsConfig
from audit.backends._determinism import measure_determinism
from audit.backends._errors import BackendError
from audit.backends._open import open_backend, resolve_api_key
from audit.backends._secrets import Scrubber
from audit.backends._wire import (
    Completion,
    context_length,
    error_message,
    model_entries,
    parse_completion,
)
from compressors import ChatMessage, ChatRequest

PROBE_SCHEMA: dict[str, Any] = {
    "title": "probe",
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": ["schema-ok"]}},
    "required": ["probe"],
    "additionalProperties": False,
}
PROBE_EXPECTED = {"probe": "schema-ok"}
PROBE_PROMPT = "Reply with the single word hello, and nothing else."


@dataclass(frozen=True)
class CheckResult:
    """One preflight check of one backend at one URL."""

    backend: str
    check: str
    ok: bool
    url: str
    message: str

    def line(self) -> str:
        """``ok  `` or ``FAIL``, the backend, the check, the URL and what came."""
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark} {self.backend} {self.check}: {self.url}: {self.message}"


def _root(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


async def _check_endpoint(
    client: BackendClient, endpoint: _Endpoint
) -> tuple[list[CheckResult], bool]:
    """The checks of one base URL, and whether it answered at all."""
    name, base = client.name, endpoint.base_url
    results: list[CheckResult] = []

    def add(check: str, ok: bool, url: str, message: str) -> None:
        # a server may echo the Authorization header back in its error text
        results.append(CheckResult(name, check, ok, client.scrub(url), client.scrub(message)))

    url = _root(base) + "/health"
    status, _, text = await client.get_json(_root(base), "/health")
    if status == 200:
        add("health", True, url, "HTTP 200")
    elif status == 404:
        add("health", True, url, "no /health endpoint (skipped)")
    elif status is None:
        add("health", False, url, f"unreachable: {text}")
        return results, False  # nothing more will answer
    else:
        add("health", False, url, f"expected HTTP 200, got HTTP {status}: {text[:120]!r}")

    url = base + "/models"
    status, data, text = await client.get_json(base, "/models")
    entries = model_entries(data)
    if status != 200 or not entries:
        got = f"HTTP {status}: {text[:120]!r}" if status is not None else text
        what = "malformed: " if status == 200 else ""
        add("models", False, url, f"{what}expected a model list (HTTP 200), got {got}")
    else:
        entry = entries.get(client.model or "")
        context = context_length(entry) if entry is not None else None
        if context is not None:
            client.max_model_len = context
        sized = f" (context {context} tokens)" if context is not None else ""
        served = f"serves {client.model!r}{sized}"
        missing = f"expected model {client.model!r} to be served, got {sorted(entries)}"
        add("models", entry is not None, url, served if entry is not None else missing)

    request = ChatRequest(
        messages=[ChatMessage("user", PROBE_PROMPT)],
        json_schema=PROBE_SCHEMA,
        thinking=False,
        max_tokens=64,
        tag="check",
    )
    body = client.request_body(request)
    raw = json.dumps(body, separators=(",", ":")).encode()
    url = base + "/chat/completions"
    attempt = await client._post(endpoint, raw)
    mode = client.backend.structured_output
    if attempt.status != 200 or attempt.failure is not None:
        got = attempt.failure or f"HTTP {attempt.status}: {error_message(attempt.payload)}"
        add("json_schema", False, url, f"expected HTTP 200 to a tiny request, got {got}")
        return results, True
    reply: Completion | str = parse_completion(attempt.payload)
    if isinstance(reply, str):
        add("json_schema", False, url, f"malformed: expected a chat completion, but {reply}")
        return results, True
    choice = reply.choices[0]
    message = choice.message
    content = message.content
    reasoning = message.reasoning or message.reasoning_content
    finish = choice.finish_reason
    parsed: object = None
    if isinstance(content, str):
        with contextlib.suppress(ValueError):
            parsed = json.loads(content)
    expected = json.dumps(PROBE_EXPECTED)
    if mode == "none":
        ok, said = True, "structured_output = 'none': not sent (skipped)"
    elif mode == "json_object":
        ok = isinstance(parsed, Mapping)
        got = f"expected a JSON object in content, got {_show(content)} (finish {finish})"
        said = "json_object honoured" if ok else got
    elif parsed == PROBE_EXPECTED:
        ok, said = True, f"{mode} honoured"
    elif content is None and reasoning:
        ok = False
        said = (
            f"expected {expected} in content, got no content and {len(reasoning)} chars "
            f"of reasoning (finish {finish}): thinking is not off"
        )
    else:
        ok = False
        said = (
            f"expected {expected} (the only value the schema allows), got "
            f"{_show(content)} (finish {finish}): the server ignores the schema"
        )
    add("json_schema", ok, url, said)
    field = "reasoning" if message.reasoning else "reasoning_content"
    none = "no reasoning field came back (thinking off or not a reasoning model)"
    came = f"'{field}' field came back ({len(reasoning)} chars)" if reasoning else none
    add("reasoning", True, url, came)
    return results, True


def _show(content: object) -> str:
    text = json.dumps(content, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


async def check_backend(
    name: str, config: BackendsConfig, *, determinism: bool = True
) -> list[CheckResult]:
    """Open backend ``name`` (starting the local server if it is one) and check it.

    A backend that cannot be opened (unreachable with no model configured, missing API
    key, model file unavailable) gives one failing ``start`` line instead of raising; one
    that opens but none of whose URLs answers fails ``start`` as unreachable.
    """
    started = time.monotonic()
    backend = config.get(name)
    where = backend.where
    try:
        scrub = Scrubber(resolve_api_key(name, backend, config))
    except BackendError:
        scrub = Scrubber(None)  # (open_backend says what is wrong with the key)
    try:
        async with open_backend(name, config) as client:
            opened = time.monotonic() - started
            results: list[CheckResult] = []
            reached = False
            for endpoint in client._endpoints:
                found, answered = await _check_endpoint(client, endpoint)
                results += found
                reached = reached or answered
            urls = ", ".join(client.base_urls)
            ready = f"model {client.model!r} ready in {opened:.1f} s"
            unreachable = f"unreachable: no base URL answered (model {client.model!r})"
            head = CheckResult(name, "start", reached, urls, ready if reached else unreachable)
            results = [head, *results]
            if determinism and all(r.ok for r in results):
                probe = await measure_determinism(client)
                ok = probe.compared > 0 and probe.identical == probe.compared
                message = probe.summary()
                if not ok and probe.compared:
                    message += ": reruns of this server are not replications (docs/backends.md)"
                results.append(CheckResult(name, "determinism", ok, urls, message))
    except BackendError as error:
        results = [CheckResult(name, "start", False, where, str(error))]
    # everything shown goes through the scrubber, whatever produced it
    return [replace(r, url=scrub(r.url), message=scrub(r.message)) for r in results]
