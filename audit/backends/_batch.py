"""Requests as offline batches (OpenAI Batch API format, which ``vllm run-batch`` reads
and writes): the exact bodies and keys without a server, the input lines, and an output
file's answers turned into cache entries.

A batch request is byte for byte the body ``BackendClient`` would POST and its
``custom_id`` is that request's cache key, so an imported answer is found by the live
client as if it had been sent.  An output file comes from outside, so it is read as pair
files are (a regular file, streamed, each line bounded, every failure one
``OutputFileError`` naming file and line) and every text is scrubbed of the API keys.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from audit.backends._cache import CanonicalRequest, ResponseCache, canonical_request
from audit.backends._config import BackendConfig, BackendsConfig
from audit.backends._errors import BackendConfigError, BackendError
from audit.backends._open import resolve_api_key
from audit.backends._secrets import Scrubber, scrub_answer
from audit.backends._wire import chat_body, completion_response, error_text
from audit.regular_files import file_kind, open_regular
from compressors import ChatRequest, ChatResponse

DEFERRED = "deferred to a batch (audit batch export): no answer yet"
"""The error of a request an ``OfflineClient`` could not answer from the cache."""
CHAT_URL = "/v1/chat/completions"
OUTPUT_LINE_BYTES = 16 * 1024 * 1024
"""A batch output line longer than this (its line break aside) is refused after reading
that many bytes, never held whole: the pair files' cap (an answer is a few KB)."""

Scrub = Callable[[str], str]
"""A text with every secret it must not show replaced (``key_scrubber``)."""


@dataclass
class OfflineClient:
    """A ``compressors.ChatClient`` that never sends: a request is answered from the cache,
    or recorded for the batch and answered with ``error`` set (``DEFERRED``).

    ``on_request(request, cached)`` is called for every request (the batch planner keeps
    its per-stream counts with it).  Identical requests are recorded once.
    """

    backend: BackendConfig
    model: str
    """The served model id its requests name (as configured)."""
    cache: ResponseCache
    refused: dict[str, str] = field(default_factory=dict)
    """Keys a batch refused earlier: answered as refused (not exported again)."""
    deferred: dict[str, CanonicalRequest] = field(default_factory=dict)
    refused_asked: set[str] = field(default_factory=set)
    """Keys of ``refused`` that this replay asked for (a live run would send them)."""
    cached: int = 0
    requests: int = 0
    on_request: Callable[[ChatRequest, bool], None] | None = None

    @classmethod
    def of(
        cls, name: str, config: BackendsConfig, cache: ResponseCache, refused: dict[str, str]
    ) -> OfflineClient:
        """The client of backend ``name``, whose model must be configured."""
        backend = config.get(name)
        if backend.declared_model is None:
            raise BackendConfigError(
                "a batch names the served model in every request (it is part of the cache "
                "key), and no server is asked for it: set model = ... for this backend",
                source=config.source,
                field=f"backends.{name}.model",
            )
        return cls(backend, backend.declared_model, cache, refused)

    def canonical(self, request: ChatRequest) -> CanonicalRequest:
        """The request as the live client would send it (the same body and key)."""
        body = chat_body(self.backend, self.model, request)
        return canonical_request(body, repeat=request.repeat, tag=request.tag)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests += 1
        canon = self.canonical(request)
        hit = self.cache.get(canon.key)
        if self.on_request is not None:
            self.on_request(request, hit is not None)
        if hit is not None:
            self.cached += 1
            return hit
        why = self.refused.get(canon.key)
        if why is not None:
            self.refused_asked.add(canon.key)
            return ChatResponse(content=None, model=self.model, status=400, rejected=why)
        self.deferred.setdefault(canon.key, canon)
        return ChatResponse(content=None, model=self.model, error=DEFERRED)


def batch_line(request: CanonicalRequest) -> str:
    """One line of a batch input file: the body exactly as it would be sent."""
    body = json.loads(request.body)
    line = {"custom_id": request.key, "method": "POST", "url": CHAT_URL, "body": body}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class BatchAnswer:
    """One line of a batch output file."""

    key: str
    response: ChatResponse | None
    """The answer (status 200 with a chat completion), else None."""
    refused: str | None
    """Why the batch did not answer (its status and message), else None."""


def parse_output_line(text: str, scrub: Scrub) -> BatchAnswer:
    """One output line (OpenAI Batch API / ``vllm run-batch``), its texts passed through
    ``scrub`` (an answer may echo the API key); ``ValueError`` saying what is wrong with
    it (a ``RecursionError``: the parsers recurse once per level of nesting)."""
    try:
        data: Any = json.loads(text)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    key = data.get("custom_id")
    if not isinstance(key, str) or not re.fullmatch("[0-9a-f]{64}", key):
        shown = scrub(repr(key))  # before it is cut short: no piece of a key survives
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise ValueError(f"custom_id {shown} is not a cache key (64 hex digits)")
    response, failure = data.get("response"), data.get("error")
    if response is not None and not isinstance(response, dict):
        raise ValueError("response is not an object")
    status = response.get("status_code") if response else None
    if response is not None and not isinstance(status, int):
        raise ValueError("response.status_code is not an integer")
    body = response.get("body") if response else None
    if status == 200 and failure is None:
        answer = completion_response(body)
        if isinstance(answer, str):
            raise ValueError(f"a 200 response whose body is not a chat completion ({answer})")
        return BatchAnswer(key, scrub_answer(answer, scrub), None)
    why = failure if failure is not None else body
    message = error_text(why) or (str(why) if why is not None else "no answer")
    message = scrub(message)[:300]  # (cut short once scrubbed: no piece of a key survives)
    return BatchAnswer(key, None, f"HTTP {status}: {message}" if status else message)


def key_scrubber(config: BackendsConfig) -> Scrub:
    """Every configured backend's API key, and each 8+ character piece of it, replaced by
    ``***`` (the live client's ``Scrubber``): a batch answer may echo any backend's key,
    and the import cannot tell which backend answered.  A key that is not set cannot leak;
    one ``resolve_api_key`` refuses (a control character) is scrubbed all the same."""
    scrubbers: list[Scrubber] = []
    for name, backend in sorted(config.backends.items()):
        if backend.api_key_env is None:
            continue
        try:
            key = resolve_api_key(name, backend, config)
        except BackendConfigError:
            key = os.environ.get(backend.api_key_env)
        if key:
            scrubbers.append(Scrubber(key))

    def scrub(text: str) -> str:
        for scrubber in scrubbers:
            text = scrubber(text)
        return text

    return scrub


class OutputFileError(BackendError, ValueError):
    """A batch output file that cannot be imported; the message names the file and, for a
    bad line, its number (the command line prints it as one line)."""


def import_output(path: Path, cache: ResponseCache, scrub: Scrub) -> tuple[int, int, int]:
    """Store a batch output file's answers in the cache under their keys: (answers
    stored, requests the batch refused, answers the cache already held).

    Every line is checked before anything is stored: a line that is not an output
    line, or whose ``custom_id`` names no request exported from this cache, raises
    ``OutputFileError`` naming the file and line, and nothing is stored.  What is held
    until then is bounded by the exported requests (each answers one, once), not by the
    file; every text stored or shown has passed through ``scrub``.
    """
    answers: list[tuple[CanonicalRequest, ChatResponse]] = []
    refused: dict[str, str] = {}
    answered: set[str] = set()
    already = 0
    for number, line in read_output(path, scrub):
        where = f"{path}:{number}"
        if line.key in answered or line.key in refused:
            raise OutputFileError(f"{where}: custom_id {line.key[:16]}... is answered twice")
        exported = cache.pending(line.key)
        if exported is None:
            if cache.contains(line.key):
                already += 1
                continue
            raise OutputFileError(
                f"{where}: custom_id {line.key[:16]}... names no request exported from "
                f"{cache.path} (`audit batch export` writes the requests; an answer to a "
                "request nobody exported is refused)"
            )
        request, _ = exported
        if request.key != line.key:  # the stored request no longer hashes to its key
            raise OutputFileError(f"{where}: the exported request of this key is corrupt")
        if line.response is None:
            refused[line.key] = line.refused or "no answer"
            continue
        if not same_model(request.model, line.response.model):
            shown = repr(line.response.model)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise OutputFileError(
                f"{where}: answered by model {shown}, not {request.model!r}, the model the "
                "request was exported for: its answers would be cached as that model's "
                "(export again with the backend's model set to the one that answers)"
            )
        answered.add(line.key)
        answers.append((request, line.response))
    for request, response in answers:
        cache.put(request, response)
    cache.settle_pending(sorted(answered), refused)
    return len(answers), len(refused), already


def same_model(requested: str, answered: str | None) -> bool:
    """Whether an answer's model is the requested one: the same id, or a dated snapshot
    of it as providers name them (``gpt-4o`` answered by ``gpt-4o-2024-08-06``).  An
    answer naming no model cannot be told apart and is taken as the requested one's."""
    if not answered or answered == requested:
        return True
    suffix = answered.removeprefix(requested + "-")
    return suffix != answered and bool(re.fullmatch(r"\d{4}-?\d{2}-?\d{2}", suffix))


def read_output(path: Path, scrub: Scrub) -> Iterator[tuple[int, BatchAnswer]]:
    """(line number, answer) of each non-blank line of a batch output file, in order.

    ``OutputFileError`` naming the file (and line) when it is not a regular file (a FIFO
    would block forever, ``/dev/zero`` never ends), cannot be read, has a line over
    ``OUTPUT_LINE_BYTES`` (refused once that many bytes are read) or one that is not
    UTF-8 or not an output line.  Error texts pass through ``scrub`` as answers do.
    """
    try:
        with open_regular(path, _not_an_output_file) as handle:
            yield from _answers(path, handle, scrub)
    except FileNotFoundError:
        raise OutputFileError(f"{path}: no such file") from None
    except OSError as error:
        raise OutputFileError(f"{path}: unreadable ({error.strerror or error})") from None


def _answers(path: Path, handle: BinaryIO, scrub: Scrub) -> Iterator[tuple[int, BatchAnswer]]:
    for number in itertools.count(1):
        raw = handle.readline(OUTPUT_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > OUTPUT_LINE_BYTES and not raw.endswith(b"\n"):
            raise OutputFileError(
                f"{path}:{number}: a line longer than {OUTPUT_LINE_BYTES} bytes (16 MiB), "
                "refused without reading the rest: not a batch output line"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise OutputFileError(
                f"{path}:{number}: not UTF-8 text (byte {error.start + 1}: {error.reason})"
            ) from None
        if not text.strip():
            continue
        try:
            answer = parse_output_line(text, scrub)
        except RecursionError:
            raise OutputFileError(
                f"{path}:{number}: JSON nested too deeply to be an output line"
            ) from None
        except ValueError as error:
            raise OutputFileError(f"{path}:{number}: {scrub(str(error))}") from None
        yield number, answer


def _not_an_output_file(path: Path, mode: int) -> OutputFileError:
    return OutputFileError(
        f"{path}: not a regular file ({file_kind(mode)}), so it is not read: give the "
        "batch output file itself"
    )
