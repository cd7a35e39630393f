"""Pair files: ``pairs.jsonl`` plus ``manifest.json``, written atomically, loaded strictly.

Loading validates everything a hand-written file can get wrong and names the
file, the line and the field (and, for the pair property, which property failed).
Writing never leaves a half-written dataset behind.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, ValidationError

from histories._errors import MemoryAuditError
from histories._generate import GENERATOR_VERSION, GenerationConfig
from histories._pair import Pair, PairPropertyError, check_pair

PAIRS_FILE = "pairs.jsonl"
MANIFEST_FILE = "manifest.json"
MAX_LINE_BYTES = 16 * 1024 * 1024
"""A pair line larger than this is refused before parsing (bounded memory)."""


class PairFileError(MemoryAuditError, ValueError):
    """A pair file is unreadable or invalid; the message names file, line and field."""

    def __init__(self, path: Path | str, line: int | None, field: str | None, message: str) -> None:
        where = str(path) + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")
        self.path, self.line, self.field = str(path), line, field


def _field_path(loc: Sequence[int | str]) -> str:
    # pydantic puts the union tag into the location ("set", "copy", ...); keep it,
    # it tells the user which record kind was being validated.
    return ".".join(str(part) for part in loc)


class _DuplicateKeyError(MemoryAuditError, ValueError):
    """A JSON object names a key twice (``json`` would keep the last silently)."""


def _unique_keys(items: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(items)
    if len(found) != len(items):
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return found


def parse_pair_line(text: str, path: Path | str = "<string>", line: int = 1) -> Pair:
    """One JSON line -> a verified Pair, or PairFileError naming line and field.

    An object that names a key twice is refused: JSON parsers disagree on which one
    wins, so the file means different things to different readers.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
        raise PairFileError(path, line, None, f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        data: Any = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKeyError as error:
        raise PairFileError(
            path, line, None, f"duplicate key {str(error)!r} in a JSON object: give each key once"
        ) from None
    except json.JSONDecodeError as error:  # its own "line 2" counted the line's newline
        where = f"at character {error.pos + 1} of the line"
        if error.pos >= len(text.rstrip()):
            where = "at the end of the line: cut short?"
        raise PairFileError(path, line, None, f"not valid JSON ({error.msg} {where})") from None
    except RecursionError:
        raise PairFileError(path, line, None, "not valid JSON (nested too deeply)") from None
    except ValueError as error:  # a number past Python's digit limit, among others
        text = str(error).split(";")[0][:200]
        raise PairFileError(
            path, line, None, f"not a JSON value this reader accepts ({text})"
        ) from None
    if not isinstance(data, dict):
        raise PairFileError(path, line, None, "a pair line must be a JSON object")
    try:
        pair = Pair.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise PairFileError(path, line, _field_path(first["loc"]), first["msg"] + more) from None
    try:
        gold = check_pair(pair)
    except PairPropertyError as error:
        raise PairFileError(path, line, error.field, error.reason) from None
    return pair if pair.gold is not None else pair.model_copy(update={"gold": gold})


def _lines(path: Path, handle: BinaryIO) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file read in binary, each line bounded while it is
    read: a line past ``MAX_LINE_BYTES`` (or a file with no line breaks at all, like
    ``/dev/zero``) is refused after that many bytes, never held whole."""
    for number in itertools.count(1):
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            raise PairFileError(path, number, None, f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PairFileError(
                path, number, None, f"not UTF-8 text (byte {error.start + 1}: {error.reason})"
            ) from None
        yield number, text


def iter_pair_file(path: Path | str) -> Iterator[Pair]:
    """Verified pairs of a JSON-lines file, one per non-blank line; duplicate ids refused."""
    path = Path(path)
    seen: dict[str, int] = {}
    try:
        handle = path.open("rb")
    except OSError as error:
        raise PairFileError(path, None, None, f"cannot read pair file ({error.strerror})") from None
    with handle:
        for number, text in _lines(path, handle):
            if not text.strip():
                continue
            pair = parse_pair_line(text, path, number)
            if pair.pair_id in seen:
                raise PairFileError(
                    path,
                    number,
                    "pair_id",
                    f"duplicate pair id {pair.pair_id!r} (first on line {seen[pair.pair_id]})",
                )
            seen[pair.pair_id] = number
            yield pair
    if not seen:
        raise PairFileError(path, None, None, "no pairs in file")


def load_pairs(path: Path | str) -> list[Pair]:
    """All pairs of a file (see ``iter_pair_file``)."""
    return list(iter_pair_file(path))


class Manifest(BaseModel):
    """What produced a dataset, so it can be reproduced and checked."""

    model_config = ConfigDict(extra="forbid")

    generator_version: str
    package_version: str
    config: GenerationConfig
    n_pairs: int
    pairs_per_family: dict[str, int]
    pairs_sha256: str


def _package_version() -> str:
    try:
        return metadata.version("memory-audit")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def dataset_bytes(
    lines: Iterable[str], config: GenerationConfig, families: Iterable[str]
) -> tuple[bytes, bytes]:
    """The exact bytes of pairs.jsonl and manifest.json (no timestamps: reproducible)."""
    body = "".join(line + "\n" for line in lines).encode("utf-8")
    manifest = Manifest(
        generator_version=GENERATOR_VERSION,
        package_version=_package_version(),
        config=config,
        n_pairs=body.count(b"\n"),
        pairs_per_family=dict(Counter(families)),
        pairs_sha256=hashlib.sha256(body).hexdigest(),
    )
    return body, (manifest.model_dump_json(indent=2) + "\n").encode("utf-8")


def _umask_mode() -> int:
    """The mode a plain ``open()`` would give a new file: 0666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_files_atomically(directory: Path, files: dict[str, bytes]) -> None:
    """Write every file or none: temp files first, then renames; a directory this
    call created is removed again if anything fails."""
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    temps: dict[str, str] = {}
    try:
        for name, content in files.items():
            fd, temp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
            temps[name] = temp
            os.fchmod(fd, _umask_mode())  # mkstemp makes 0600; a pair file is a shared input
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
        for name, temp in temps.items():
            os.replace(temp, directory / name)
    except BaseException:
        for temp in temps.values():
            Path(temp).unlink(missing_ok=True)
        if created:
            shutil.rmtree(directory, ignore_errors=True)
        raise
