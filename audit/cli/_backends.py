"""``audit backends ...`` and ``audit cache ...``: preflight checks and the response cache."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from audit.cli._common import fail, new_app, terminal_text

if TYPE_CHECKING:  # imported where used: aiohttp and friends cost half a second at start-up
    from audit.backends import BackendsConfig, ResponseCache

backends_app = new_app("backends", "Configured LLM backends: list and check them.")
cache_app = new_app("cache", "The LLM response cache: stats, explain, prune, clear.")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Backend configuration (TOML). Default: audit.toml in the working directory, if any.",
    ),
]
EnvFileOption = Annotated[
    Path, typer.Option("--env-file", help="A dotenv file with MEMORY_AUDIT_* settings and keys.")
]
CacheOption = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="The cache database. Default: cache_path from the configuration, else "
        "~/.cache/memory-audit/responses.sqlite.",
    ),
]


def _config(path: Path | None, env_file: Path = Path(".env")) -> BackendsConfig:
    from audit.backends import load_config

    return load_config(path, env_file=env_file)  # BackendConfigError: one line


@backends_app.command("list")
def list_backends(config: ConfigOption = None, env_file: EnvFileOption = Path(".env")) -> None:
    """One line per configured backend: kind, roles, model, URLs (never a key)."""
    settings = _config(config, env_file)
    width = max(len(name) for name in settings.backends)
    for name, backend in sorted(settings.backends.items()):
        model = backend.declared_model or "(the one served)"
        roles = "+".join(backend.roles)
        line = f"{name:<{width}}  {backend.kind:<6}  {roles:<13}  {model}  @ {backend.where}"
        typer.echo(terminal_text(line))  # audit.toml's text, never acted on by the terminal


@backends_app.command("check")
def check(
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="A backend name (default: every one).")
    ] = None,
    config: ConfigOption = None,
    env_file: EnvFileOption = Path(".env"),
    determinism: Annotated[
        bool,
        typer.Option(
            "--determinism/--no-determinism",
            help="Also send 16 fixed requests twice (one at a time, then all at once "
            "shuffled) and count identical answers: below 16/16 fails.",
        ),
    ] = True,
) -> None:
    """Preflight: /health, /v1/models (model served, context length), a tiny JSON-schema
    request (is structured output honoured?), whether a reasoning field comes back, and
    whether the same requests get the same answers in another order (determinism).
    One line per check; exit code 1 if any failed."""
    from audit.backends import check_backend

    settings = _config(config, env_file)
    names = [name] if name is not None else sorted(settings.backends)
    for chosen in names:
        settings.get(chosen)  # an unknown name: one line, before any check runs

    async def run() -> bool:
        ok = True
        for chosen in names:
            local = settings.get(chosen).embedded
            if sys.stderr.isatty():  # someone is watching: say what the wait is for
                probe = "; the determinism probe sends 32 requests (minutes on a CPU model)"
                starts = " (the embedded model starts first)" + (probe if determinism else "")
                typer.echo(f"checking {chosen}{starts if local else ''} ...", err=True)
            for result in await check_backend(chosen, settings, determinism=determinism):
                typer.echo(terminal_text(result.line()))
                ok = ok and result.ok
        return ok

    if not asyncio.run(run()):
        raise typer.Exit(1)


def _cache_path(cache: Path | None, config: Path | None) -> Path:
    return cache if cache is not None else _config(config).resolved_cache_path()


def _open_cache(path: Path) -> ResponseCache:
    from audit.backends import ResponseCache

    if not path.exists():
        fail(f"no cache at {path}")
    return ResponseCache(path, log_misses=False)  # CacheError: one line


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "-"


@cache_app.command("stats")
def cache_stats(cache: CacheOption = None, config: ConfigOption = None) -> None:
    """Entries, size, hits (requests not sent), per model and per tag."""
    path = _cache_path(cache, config)
    with _open_cache(path) as store:
        stats = store.stats()
    typer.echo(
        f"{stats.path}: {stats.entries} entries, {stats.bytes / 1e6:.1f} MB, "
        f"{stats.hits} hits (requests answered without sending), "
        f"{stats.misses_logged} misses logged; oldest {_when(stats.oldest)}, "
        f"newest {_when(stats.newest)}"
    )
    for model, (entries, hits) in stats.by_model.items():
        typer.echo(terminal_text(f"  model {model}: {entries} entries, {hits} hits"))
    for tag, entries in stats.by_tag.items():
        typer.echo(terminal_text(f"  tag {tag or '(none)'}: {entries} entries"))


@cache_app.command("explain")
def cache_explain(
    key: Annotated[
        str | None,
        typer.Argument(metavar="KEY", help="A missed request's key (or a prefix of it)."),
    ] = None,
    last: Annotated[int, typer.Option(min=1, help="Explain the last N misses.")] = 5,
    cache: CacheOption = None,
    config: ConfigOption = None,
) -> None:
    """Why requests missed: which key component (model, a sampling parameter, seed, a
    message, schema, chat-template kwargs, repeat, tag) differs from the nearest entry."""
    path = _cache_path(cache, config)
    if key is not None and not re.fullmatch(r"[0-9a-f]{4,64}", key):
        fail("KEY: give at least 4 hex digits of a cache key")
    with _open_cache(path) as store:
        explanations = store.explain(key, last=last)
    if not explanations:
        typer.echo(f"no logged miss matches {key}" if key else "no misses logged")
        return
    for explanation in explanations:
        for line in explanation.lines():
            typer.echo(terminal_text(line))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "": 86400}


def _seconds(text: str) -> float:
    match = _DURATION.match(text)
    if match is None:
        fail(f"--older-than: {text!r} is not a duration like 30d, 12h, 90m, 45s")
    return float(match.group(1)) * _UNIT[match.group(2)]


@cache_app.command("prune")
def cache_prune(
    older_than: Annotated[
        str | None, typer.Option(help="Entries not used for this long (30d, 12h, 90m, 45s).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Entries of this served model.")] = None,
    tag: Annotated[str | None, typer.Option(help="Entries whose tag starts with this.")] = None,
    cache: CacheOption = None,
    config: ConfigOption = None,
) -> None:
    """Delete the entries matching every given filter (at least one), then compact."""
    if older_than is None and model is None and tag is None:
        fail("give at least one of --older-than, --model, --tag (or use `audit cache clear`)")
    unused = _seconds(older_than) if older_than is not None else None
    path = _cache_path(cache, config)
    with _open_cache(path) as store:
        deleted = store.prune(unused_for_s=unused, model=model, tag_prefix=tag)
        left = store.stats().entries
    typer.echo(f"{path}: pruned {deleted} entries, {left} left")


@cache_app.command("clear")
def cache_clear(
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    cache: CacheOption = None,
    config: ConfigOption = None,
) -> None:
    """Delete every cached response (the next run sends every request again)."""
    path = _cache_path(cache, config)
    if not yes and not typer.confirm(f"Delete every entry of {path}?"):
        raise typer.Exit(1)
    with _open_cache(path) as store:
        deleted = store.clear()
    typer.echo(f"{path}: cleared {deleted} entries")
