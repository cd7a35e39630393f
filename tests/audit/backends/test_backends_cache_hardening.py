"""The response cache: who may read it, which model an answer belongs to, why a request
missed.

- The cache holds prompts and answers: owner-only files (0600, the directory 0700 when
  created), under the usual umask 022 too, and an old world-readable file is narrowed.
- A local model is its content, not its file name: two GGUF files called the same get
  different cache keys, so one is never served the other's answers (the real embedded
  llama.cpp server, each file started for real).
- ``audit cache explain`` finds the entry a miss differs from by a key component (seed,
  model) even when hundreds of entries share its model and tag.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.backends import (
    BackendConfig,
    ResponseCache,
    default_cache_dir,
    load_config,
    open_backend,
)
from audit.backends._cache import canonical_request
from audit.backends._open import local_spec
from compressors import ChatMessage, ChatRequest, ChatResponse


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_the_cache_is_created_owner_only(tmp_path: Path, umask_022: None):
    path = tmp_path / "new" / "dir" / "responses.sqlite"
    request = canonical_request({"model": "m", "messages": []}, repeat=0, tag="t")
    with ResponseCache(path) as cache:
        cache.put(request, ChatResponse(content="a prompt's answer"))
        cache.flush()
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_an_existing_world_readable_cache_is_narrowed(tmp_path: Path, umask_022: None):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    path = shared / "responses.sqlite"
    sqlite3.connect(path).close()
    path.chmod(0o644)
    with ResponseCache(path):
        pass
    assert mode(path) == 0o600
    assert mode(shared) == 0o755  # an existing directory is not ours to change


# -- explain ----------------------------------------------------------------------------------


BODY: dict[str, Any] = {"model": "m", "temperature": 0.0, "seed": 3, "max_tokens": 64}


def body(memory: str, **changes: Any) -> dict[str, Any]:
    return {
        **BODY,
        "messages": [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": memory},
        ],
        **changes,
    }


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"seed": 4}, "seed: 4 (entry: 3)"),
        ({"model": "m2"}, "model: 'm2' (entry: 'm')"),
        ({"temperature": 0.7}, "temperature: 0.7 (entry: 0.0)"),
    ],
)
def test_explain_blames_the_key_component_in_a_full_cache(
    tmp_path: Path, change: dict[str, Any], expected: str
):
    path = tmp_path / "c.sqlite"
    with ResponseCache(path) as cache:
        target = canonical_request(body("memory 0"), repeat=0, tag="reader@1")
        cache.put(target, ChatResponse(content="the entry"))
        cache.flush()
        # 250 newer entries with the same model and tag but other memories
        for i in range(1, 251):
            cache.put(
                canonical_request(body(f"memory {i}"), repeat=0, tag="reader@1"),
                ChatResponse(content=None),
            )
        cache.flush()
        missed = canonical_request(body("memory 0", **change), repeat=0, tag="reader@1")
        cache.record_miss(missed)
        (explanation,) = cache.explain(missed.key[:12])
    assert explanation.nearest_key == target.key
    assert explanation.differences == (expected,)


def test_explain_lists_key_components_before_message_text(tmp_path: Path):
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        entry = canonical_request(body("memory A"), repeat=0, tag="reader@1")
        cache.put(entry, ChatResponse(content=None))
        cache.flush()
        missed = canonical_request(body("memory B", seed=9), repeat=0, tag="reader@1")
        cache.record_miss(missed)
        (explanation,) = cache.explain(missed.key[:12])
    assert explanation.differences[0] == "seed: 9 (entry: 3)"
    assert explanation.differences[-1].startswith("messages[1] (user) content differs at char 7")


# -- a local model is its content -------------------------------------------------------------


def test_a_model_file_hash_is_remembered_and_follows_its_content(tmp_path: Path):
    from audit.backends._local import HASH_INDEX, model_sha256

    cache_dir = tmp_path / "cache"
    model = tmp_path / "a" / "model.gguf"
    model.parent.mkdir()
    model.write_bytes(b"GGUF one")
    first = model_sha256(model, cache_dir)
    assert (cache_dir / "models" / HASH_INDEX).is_file()
    assert model_sha256(model, cache_dir) == first
    other = tmp_path / "b" / "model.gguf"
    other.parent.mkdir()
    other.write_bytes(b"GGUF two")
    assert model_sha256(other, cache_dir) != first  # the same name, another content
    model.write_bytes(b"GGUF new")  # rewritten in place: same name, same size
    assert model_sha256(model, cache_dir) not in (first, model_sha256(other, cache_dir))


@pytest.fixture(scope="module")
def two_files_one_name(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The embedded SmolLM2 GGUF, copied twice under one name; the second copy has 32
    bytes of zero padding after the tensors (llama.cpp loads it the same): two files, one
    name, different contents."""
    source = local_spec(BackendConfig(kind="local"), default_cache_dir()).model_path
    base = tmp_path_factory.mktemp("gguf")
    a, b = base / "a" / "model.gguf", base / "b" / "model.gguf"
    for path in (a, b):
        path.parent.mkdir()
        shutil.copyfile(source, path)
    with b.open("ab") as handle:
        handle.write(b"\0" * 32)
    return a, b


def test_two_local_models_with_one_file_name_never_share_answers(
    tmp_path: Path, two_files_one_name: tuple[Path, Path]
):
    a, b = two_files_one_name
    (tmp_path / "audit.toml").write_text(
        f'cache_dir = "{tmp_path / "cache"}"\n'
        f'[backends.one]\nkind = "local"\nmodel_path = "{a}"\nn_parallel = 1\nn_threads = 2\n'
        f'[backends.two]\nkind = "local"\nmodel_path = "{b}"\nn_parallel = 1\nn_threads = 2\n'
    )
    config = load_config(tmp_path / "audit.toml", env_file=None, environ=False)
    request = ChatRequest(messages=[ChatMessage("user", "Say hi.")], max_tokens=4)

    async def scenario() -> list[tuple[ChatResponse, str, str | None]]:
        answers = []
        with ResponseCache(tmp_path / "responses.sqlite") as cache:
            async with open_backend("one", config, cache=cache) as one:
                answers.append((await one.chat(request), one.canonical(request).key, one.model))
                async with open_backend("two", config, cache=cache) as two:
                    answer = await two.chat(request)
                    answers.append((answer, two.canonical(request).key, two.model))
                answers.append((await one.chat(request), one.canonical(request).key, one.model))
        return answers

    (first, key_a, model_a), (second, key_b, model_b), (again, key_a2, _) = asyncio.run(scenario())
    assert model_a == model_b == "model"  # one name...
    assert key_a != key_b  # ...two models
    assert key_a2 == key_a
    assert first.error is None
    assert second.error is None
    assert not second.cached  # model two was asked, not served model one's answer
    assert again.cached
