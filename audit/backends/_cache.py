"""The response cache: SQLite (WAL), keyed by a hash of the canonical request.

The key is the SHA-256 of the exact JSON body sent (sorted keys) plus the repeat index,
the asker's tag, the key-format version and, for a local GGUF, the model's content hash
(``CanonicalRequest``); never the API key, a header.  Only answers are stored, each as
one JSON object (``_entry``; ``get`` and ``put`` speak ``ChatResponse``).  The file is
owner-only (0600); writes are batched (``batch`` entries or ``flush_s`` seconds) and
pending entries are seen at once; several processes may share it (WAL, busy timeout).
Each miss is logged (the newest ``MISS_LOG_LIMIT``) for ``audit cache explain``, which
compares a miss with its nearest entry (docs/backends.md).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sqlite3
import stat
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from audit.backends._errors import CacheError
from compressors import ChatResponse

KEY_VERSION = 1
"""Bumped when the canonical request changes shape: old entries then simply miss."""

SCHEMA_VERSION = 1
MISS_LOG_LIMIT = 10_000
WAL_CHECKPOINT_BYTES = 64 << 20

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    tag TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    messages_hash TEXT NOT NULL,
    prefix_hash TEXT NOT NULL,
    request BLOB NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL,
    last_used REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS batch_pending (
    -- requests written to a batch file (audit batch export), awaiting their answers
    key TEXT PRIMARY KEY,
    request BLOB NOT NULL,
    exported REAL NOT NULL,
    refused TEXT
);
CREATE TABLE IF NOT EXISTS misses (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    created REAL NOT NULL,
    -- the rest only for a miss that got no answer; else it is in its responses row
    model TEXT,
    tag TEXT,
    messages_hash TEXT,
    prefix_hash TEXT,
    request BLOB
);
"""


@dataclass(frozen=True, slots=True)
class CanonicalRequest:
    """A request in canonical form: the bytes sent, and the bytes hashed into the key."""

    body: bytes
    """The JSON body sent to ``/chat/completions`` (sorted keys, compact)."""
    model: str
    repeat: int
    tag: str
    messages: Sequence[Mapping[str, Any]]
    key: str
    identity: str = ""
    """What the model is beyond its name (``sha256:...`` of a local GGUF), or empty."""

    def material(self) -> bytes:
        """Everything the key is a hash of (no secret is in it)."""
        return self.body + b"\n" + _extras(self.repeat, self.tag, self.identity)

    def message_hashes(self) -> tuple[str, str]:
        """Short checksums of all the messages and of all but the last (for ``explain``'s
        search for the nearest entry; a collision only widens that search)."""
        crc = 0
        prefix = 0
        for message in self.messages:
            prefix = crc
            crc = zlib.crc32(str(message.get("role")).encode(), crc)
            crc = zlib.crc32(str(message.get("content")).encode(), crc)
        return f"{crc:08x}{len(self.messages):x}", f"{prefix:08x}{len(self.messages) - 1:x}"


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=4096)
def _extras(repeat: int, tag: str, identity: str = "") -> bytes:
    # without an identity, the material of key format 1 as it always was: old entries hit
    parts: list[Any] = [KEY_VERSION, repeat, tag] + ([identity] if identity else [])
    return _COMPACT.encode(parts).encode()


def canonical_request(
    body: Mapping[str, Any], *, repeat: int, tag: str, identity: str = ""
) -> CanonicalRequest:
    """Serialise ``body`` canonically and compute its cache key (``identity``: what the
    model is beyond its name, e.g. the SHA-256 of a local GGUF file)."""
    raw = _CANONICAL.encode(body).encode()
    digest = hashlib.sha256(raw)
    digest.update(b"\n")
    digest.update(_extras(repeat, tag, identity))
    return CanonicalRequest(
        body=raw,
        model=str(body.get("model", "")),
        repeat=repeat,
        tag=tag,
        messages=body.get("messages") or (),
        key=digest.hexdigest(),
        identity=identity,
    )


def _prefix(key: str) -> int:
    return int(key[:15], 16)


def _entry(answer: ChatResponse) -> str:
    """What the cache keeps of an answer: a JSON object (the layout of every entry)."""
    kept = {
        "content": answer.content,
        "reasoning": answer.reasoning,
        "finish_reason": answer.finish_reason,
        "model": answer.model,
        "usage": dict(answer.usage),
    }
    return _COMPACT.encode(kept)


def _answer(entry: str) -> ChatResponse:
    """A stored entry as the answer it was, ``cached`` set (a field it lacks is empty)."""
    kept = json.loads(entry)
    return ChatResponse(
        content=kept.get("content"),
        reasoning=kept.get("reasoning"),
        finish_reason=kept.get("finish_reason"),
        model=kept.get("model"),
        usage=kept.get("usage") or {},
        cached=True,
    )


@dataclass(frozen=True)
class CacheStats:
    """What the cache file holds."""

    path: str
    entries: int
    bytes: int
    hits: int
    """Requests answered from the cache over the file's life."""
    misses_logged: int
    oldest: float | None
    newest: float | None
    by_model: dict[str, tuple[int, int]] = field(default_factory=dict)
    """model -> (entries, hits)."""
    by_tag: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """Why one request missed."""

    key: str
    status: str
    """``cached`` (it is in the cache now), ``nearest`` (a nearest entry was found) or
    ``new`` (nothing shares its model, messages or tag)."""
    nearest_key: str | None = None
    differences: tuple[str, ...] = ()
    """One line per differing key component."""

    def lines(self) -> list[str]:
        head = f"{self.key[:16]}  "
        if self.status == "cached":
            return [head + "now cached (answered after it missed)"]
        if self.status == "new":
            return [head + "no cached entry shares its model, messages or tag: a new request"]
        assert self.nearest_key is not None
        first = f"{head}nearest entry {self.nearest_key[:16]} differs in:"
        return [first, *(f"    {d}" for d in self.differences)]


class ResponseCache:
    """A SQLite response cache; one instance per process, used from one thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        batch: int = 512,
        flush_s: float = 0.5,
        log_misses: bool = True,
    ) -> None:
        self.path = Path(path)
        self._wal = Path(f"{self.path}-wal")
        self.batch = batch
        self.flush_s = flush_s
        self.log_misses = log_misses
        try:
            _owner_only(self.path)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            # checkpoints fsync: not on every commit, only every WAL_CHECKPOINT_BYTES
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
            if row is None:
                self._db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
            elif row[0] != str(SCHEMA_VERSION):
                raise CacheError(
                    f"{self.path}: cache layout {row[0]}, this version reads {SCHEMA_VERSION}; "
                    "use another --cache file or `audit cache clear`"
                )
        except (sqlite3.Error, OSError) as error:
            raise CacheError(f"{self.path}: cannot open the cache ({error})") from None
        self._pending: dict[str, tuple[CanonicalRequest, str, float]] = {}
        self._pending_misses: list[tuple[CanonicalRequest, bool, float]] = []
        self._pending_hits: Counter[str] = Counter()
        self._known: set[int] = set()
        self._max_rowid = 0
        self._data_version = -1
        self._load_known()
        self._last_flush = time.monotonic()
        self._closed = False

    def _load_known(self) -> None:
        """Remember the key prefixes of entries written since the last look (by anyone)."""
        self._data_version = self._db.execute("PRAGMA data_version").fetchone()[0]
        rows = self._db.execute(
            "SELECT rowid, key FROM responses WHERE rowid > ?", (self._max_rowid,)
        ).fetchall()
        for rowid, key in rows:
            self._known.add(_prefix(key))
            self._max_rowid = max(self._max_rowid, rowid)

    # -- the request path -------------------------------------------------------------------

    def get(self, key: str) -> ChatResponse | None:
        """The cached answer for ``key`` (``cached`` set), or ``None``.

        A key never seen is answered from memory (no SQLite read): the prefixes of every
        stored key are loaded at open and refreshed when another process commits.
        """
        pending = self._pending.get(key)
        if pending is not None:
            self._pending_hits[key] += 1
            return _answer(pending[1])
        prefix = _prefix(key)
        if prefix not in self._known:
            self._maybe_flush()  # (notices what other processes wrote, every flush_s)
            if prefix not in self._known:
                return None
        row = self._db.execute("SELECT response FROM responses WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        self._pending_hits[key] += 1
        self._maybe_flush()
        return _answer(row[0])

    def put(self, request: CanonicalRequest, answer: ChatResponse) -> None:
        """Store an answer (never an error) for a request that missed; logs the miss."""
        now = time.time()
        self._pending[request.key] = (request, _entry(answer), now)
        self._known.add(_prefix(request.key))
        if self.log_misses:
            self._pending_misses.append((request, False, now))
        self._maybe_flush()

    def record_miss(self, request: CanonicalRequest) -> None:
        """Log a request that missed and got no answer to store (for ``explain``)."""
        if self.log_misses:
            self._pending_misses.append((request, True, time.time()))
            self._maybe_flush()

    def _maybe_flush(self) -> None:
        if len(self._pending) >= self.batch or time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Write pending entries, hit counts and misses in one transaction; notice entries
        other processes wrote."""
        self._last_flush = time.monotonic()
        if self._pending or self._pending_misses or self._pending_hits:
            self._write()
        if self._db.execute("PRAGMA data_version").fetchone()[0] != self._data_version:
            self._load_known()
        if self._wal.exists() and self._wal.stat().st_size > WAL_CHECKPOINT_BYTES:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _write(self) -> None:
        entries = [
            (r.key, r.model, r.tag, r.repeat, *r.message_hashes(), r.material(), response, t, t)
            for r, response, t in self._pending.values()
        ]
        misses = [  # a miss that was answered is in its responses row: only its key and time
            (r.key, t, r.model, r.tag, *r.message_hashes(), r.material())
            if unanswered
            else (r.key, t, None, None, None, None, None)
            for r, unanswered, t in self._pending_misses
        ]
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO responses (key, model, tag, repeat, messages_hash, "
                "prefix_hash, request, response, created, last_used) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                entries,
            )
            db.executemany(
                "INSERT INTO misses (key, created, model, tag, messages_hash, prefix_hash, "
                "request) VALUES (?, ?, ?, ?, ?, ?, ?)",
                misses,
            )
            db.executemany(
                "UPDATE responses SET hits = hits + ?, last_used = ? WHERE key = ?",
                [(count, now, key) for key, count in self._pending_hits.items()],
            )
        self._pending = {}
        self._pending_misses = []
        self._pending_hits = Counter()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed whole, or rolled back and a ``CacheError``."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            yield self._db
            self._db.execute("COMMIT")
        except sqlite3.Error as error:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise CacheError(f"{self.path}: cannot write the cache ({error})") from None

    def close(self) -> None:
        """Flush, trim the miss log and close the file."""
        if self._closed:
            return
        self.flush()
        self._db.execute(
            "DELETE FROM misses WHERE id <= (SELECT MAX(id) FROM misses) - ?", (MISS_LOG_LIMIT,)
        )
        self._db.close()  # the last connection to close checkpoints the WAL
        self._closed = True

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- offline batches (audit batch export / import) --------------------------------------

    def add_pending(self, requests: Sequence[CanonicalRequest]) -> None:
        """Remember requests written to a batch file, so their answers can be imported
        by key (a batch output names a request only by its ``custom_id``, the key)."""
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO batch_pending (key, request, exported) VALUES (?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET exported = excluded.exported, refused = NULL",
                [(r.key, r.material(), now) for r in requests],
            )

    def pending(self, key: str) -> tuple[CanonicalRequest, str | None] | None:
        """An exported request awaiting its answer, and why a batch refused it (None if
        it did not); None for a key never exported from this cache."""
        row = self._db.execute(
            "SELECT request, refused FROM batch_pending WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return request_from_material(bytes(row[0])), row[1]

    def settle_pending(self, answered: Sequence[str], refused: Mapping[str, str]) -> None:
        """Forget answered requests; note why a batch refused others (they are not
        exported again; a live run sends them, as it sends any refused request)."""
        self.flush()
        with self._transaction() as db:
            db.executemany("DELETE FROM batch_pending WHERE key = ?", [(k,) for k in answered])
            db.executemany(
                "UPDATE batch_pending SET refused = ? WHERE key = ?",
                [(why, key) for key, why in refused.items()],
            )

    def refused(self) -> dict[str, str]:
        """Exported requests a batch refused, with the reason."""
        return dict(
            self._db.execute(
                "SELECT key, refused FROM batch_pending WHERE refused IS NOT NULL"
            ).fetchall()
        )

    def contains(self, key: str) -> bool:
        """Whether an answer for ``key`` is stored (no hit is counted)."""
        if key in self._pending:
            return True
        row = self._db.execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone()
        return row is not None

    # -- maintenance (the `audit cache` commands) -------------------------------------------

    def stats(self) -> CacheStats:
        """Entries, size, hits, per model and per tag."""
        self.flush()
        db = self._db
        entries, hits, oldest, newest = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(hits), 0), MIN(created), MAX(created) FROM responses"
        ).fetchone()
        misses = db.execute("SELECT COUNT(*) FROM misses").fetchone()[0]
        by_model = {
            model: (count, model_hits)
            for model, count, model_hits in db.execute(
                "SELECT model, COUNT(*), COALESCE(SUM(hits), 0) FROM responses "
                "GROUP BY model ORDER BY COUNT(*) DESC"
            )
        }
        by_tag = dict(
            db.execute(
                "SELECT tag, COUNT(*) FROM responses GROUP BY tag ORDER BY COUNT(*) DESC"
            ).fetchall()
        )
        size = sum(
            p.stat().st_size
            for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
            if p.exists()
        )
        return CacheStats(
            path=str(self.path),
            entries=int(entries),
            bytes=size,
            hits=int(hits),
            misses_logged=int(misses),
            oldest=oldest,
            newest=newest,
            by_model=by_model,
            by_tag=by_tag,
        )

    def prune(
        self,
        *,
        unused_for_s: float | None = None,
        model: str | None = None,
        tag_prefix: str | None = None,
    ) -> int:
        """Delete entries matching every given filter (last used longer ago than
        ``unused_for_s``, served by ``model``, tag starting with ``tag_prefix``); also drops
        the miss log.  At least one filter is required.  Returns the number deleted."""
        clauses: list[str] = []
        args: list[Any] = []
        if unused_for_s is not None:
            clauses.append("last_used < ?")
            args.append(time.time() - unused_for_s)
        if model is not None:
            clauses.append("model = ?")
            args.append(model)
        if tag_prefix is not None:
            clauses.append("substr(tag, 1, ?) = ?")
            args += [len(tag_prefix), tag_prefix]
        if not clauses:
            raise ValueError("prune needs at least one filter")
        self.flush()
        return self._delete(" AND ".join(clauses), args)

    def clear(self) -> int:
        """Delete every entry and the miss log; returns the number of entries deleted."""
        self._pending.clear()
        self._pending_misses.clear()
        self._pending_hits.clear()
        return self._delete("1", [])

    def _delete(self, where: str, args: list[Any]) -> int:
        """Delete the entries ``where`` holds and the miss log; reclaim the space."""
        deleted = self._db.execute("DELETE FROM responses WHERE " + where, args).rowcount
        self._db.execute("DELETE FROM misses")
        self._db.execute("VACUUM")
        self._known.clear()
        self._max_rowid = 0
        self._load_known()
        return int(deleted)

    def explain(self, key_prefix: str | None = None, *, last: int = 5) -> list[Explanation]:
        """Why requests missed: the miss with this key (prefix), or the ``last`` misses.

        For each, the nearest cached entry (sharing the messages, the messages before the
        last one, or the model and tag; then the most key components) and the components
        that differ: model, each sampling parameter, seed, each message, response format
        (schema), chat-template kwargs, repeat index, tag.
        """
        self.flush()
        select = (
            "SELECT m.key, COALESCE(m.model, r.model), COALESCE(m.tag, r.tag), "
            "COALESCE(m.messages_hash, r.messages_hash), COALESCE(m.prefix_hash, r.prefix_hash), "
            "COALESCE(m.request, r.request), m.created "
            "FROM misses m LEFT JOIN responses r ON r.key = m.key "
        )
        if key_prefix:
            rows = self._db.execute(
                select + "WHERE m.key >= ? AND m.key < ? ORDER BY m.id DESC LIMIT 1",
                (key_prefix, key_prefix + "g"),
            ).fetchall()
            if not rows:
                hit = self._db.execute(
                    "SELECT key FROM responses WHERE key >= ? AND key < ?",
                    (key_prefix, key_prefix + "g"),
                ).fetchone()
                return [Explanation(key=hit[0], status="cached")] if hit is not None else []
        else:
            rows = self._db.execute(select + "ORDER BY m.id DESC LIMIT ?", (last,)).fetchall()
        return [self._explain_one(*row) for row in rows]

    def _explain_one(
        self,
        key: str,
        model: str | None,
        tag: str | None,
        messages_hash: str | None,
        prefix_hash: str | None,
        request: bytes | None,
        created: float,
    ) -> Explanation:
        if request is None:  # its answer was pruned since
            return Explanation(key=key, status="new")
        mine = _decode(request)
        # tier by tier, so a full cache cannot push the nearest entry out of the search: the
        # same messages (the miss is then a key component), the same messages but the last,
        # then the same model and tag
        for clause, value in (
            ("messages_hash = ?", (messages_hash,)),
            ("prefix_hash = ?", (prefix_hash,)),
            ("model = ? AND tag = ?", (model, tag)),
        ):
            candidates = self._db.execute(
                f"SELECT key, request FROM responses WHERE key != ? AND created < ? AND {clause} "
                "ORDER BY last_used DESC LIMIT 200",
                (key, created, *value),
            ).fetchall()
            compared = [(_compare(mine, _decode(other)), k) for k, other in candidates]
            if compared:  # the first of the closest
                (differences, _), nearest = max(compared, key=lambda c: c[0][1])
                return Explanation(
                    key=key, status="nearest", nearest_key=nearest, differences=tuple(differences)
                )
        return Explanation(key=key, status="new")


def _parts(material: bytes) -> tuple[dict[str, Any], int, int, str, str]:
    """A request's ``material()`` taken apart: body, key version, repeat, tag, identity."""
    body, _, extras = bytes(material).partition(b"\n")
    version, repeat, tag, *identity = json.loads(extras)
    return json.loads(body), version, int(repeat), str(tag), identity[0] if identity else ""


def request_from_material(material: bytes) -> CanonicalRequest:
    """The request whose ``material()`` this is (its key recomputed from it)."""
    body, _, repeat, tag, identity = _parts(material)
    return canonical_request(body, repeat=repeat, tag=tag, identity=identity)


def _decode(material: bytes) -> dict[str, Any]:
    """A request's key components by name, for ``explain``."""
    body, version, repeat, tag, identity = _parts(material)
    extras = {"<key version>": version, "<repeat>": repeat, "<tag>": tag}
    return {**body, **extras, "<model identity>": identity or None}


_COMPONENTS: dict[str, tuple[tuple[int, str], str]] = {
    # name: (place in an explanation, label); the rest (sampling, seed, template kwargs)
    # come alphabetically after the model, before the repeat and tag; the messages last
    "model": ((0, "0"), "model"),
    "<model identity>": ((0, "1"), "model file (content sha256)"),
    "response_format": ((1, "response_format"), "response_format (schema)"),
    "structured_outputs": ((1, "structured_outputs"), "structured_outputs (schema)"),
    "<repeat>": ((2, "0"), "repeat index"),
    "<tag>": ((2, "1"), "tag (compressor and version)"),
    "<key version>": ((2, "2"), "key format version"),
    "messages": ((3, ""), "messages"),
}


def _order(name: str) -> tuple[int, str]:
    return _COMPONENTS.get(name, ((1, name), name))[0]


def _compare(
    mine: Mapping[str, Any], other: Mapping[str, Any]
) -> tuple[list[str], tuple[float, float]]:
    """The differing components (key components first, messages last) and a closeness
    score (higher = nearer) that ranks equal key components before message text."""
    differences: list[str] = []
    components = 0.0
    text = 0.0
    for name in sorted(set(mine) | set(other), key=_order):
        a, b = mine.get(name), other.get(name)
        if name == "messages":
            lines, text = _compare_messages(a or [], b or [])
            differences += lines
            continue
        if a == b:
            components += 1
            continue
        label = _COMPONENTS.get(name, ((1, name), name))[1]
        differences.append(f"{label}: {_short(a)} (entry: {_short(b)})")
    return differences, (components, text)


def _compare_messages(mine: list[Any], other: list[Any]) -> tuple[list[str], float]:
    lines: list[str] = []
    same = 0
    for index, (a, b) in enumerate(zip_longest(mine, other)):
        if a == b:
            same += 1
            continue
        if a is None or b is None:
            lines.append(
                f"messages[{index}]: {'absent' if a is None else 'present'} "
                f"(entry: {'absent' if b is None else 'present'})"
            )
            continue
        role_a, role_b = a.get("role"), b.get("role")
        text_a, text_b = str(a.get("content", "")), str(b.get("content", ""))
        if role_a != role_b:
            lines.append(f"messages[{index}].role: {role_a} (entry: {role_b})")
        if text_a != text_b:
            at = next(
                (i for i, (x, y) in enumerate(zip(text_a, text_b, strict=False)) if x != y),
                min(len(text_a), len(text_b)),
            )
            lines.append(
                f"messages[{index}] ({role_a}) content differs at char {at}: "
                f"{_short(text_a[at : at + 40])} (entry: {_short(text_b[at : at + 40])})"
            )
    total = max(len(mine), len(other), 1)
    return lines, 3.0 * same / total


def _owner_only(path: Path) -> None:
    """Create the cache file (and its directory, if missing) readable by its owner only, or
    narrow an existing one of ours; SQLite gives ``-wal`` and ``-shm`` the file's mode."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    for each in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            info = each.stat()
        except FileNotFoundError:
            continue
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            each.chmod(stat.S_IMODE(info.st_mode) & 0o700)


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = repr(text) if isinstance(value, str) else text
    return text if len(text) <= limit else text[: limit - 3] + "..."
