"""The compressor registry: built-ins, installed plugins, and ``module:attr`` classes.

A condition is named on the command line as ``TARGET[:key=value,...]``, where
TARGET is a registered name (``frontier``), an installed plugin's entry-point name
(group ``memory_audit.compressors``), or ``package.module:ClassName``.  Plugins are
only imported when named, or when ``audit compressors`` lists what is installed.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import TypeVar

from compressors._protocol import Compressor
from histories import MemoryAuditError

ENTRY_POINT_GROUP = "memory_audit.compressors"
_BUILTINS: dict[str, type[Compressor]] = {}

C = TypeVar("C", bound=type[Compressor])


class UnknownCompressorError(MemoryAuditError, ValueError):
    """A condition that names nothing loadable; the message lists the known ones."""


def register(cls: C) -> C:
    """Class decorator for built-in compressors."""
    if not cls.name:
        raise TypeError(f"{cls.__qualname__} needs a non-empty `name`")
    if cls.name in _BUILTINS and _BUILTINS[cls.name] is not cls:
        raise TypeError(f"compressor name {cls.name!r} is registered twice")
    _BUILTINS[cls.name] = cls
    return cls


def _registered() -> dict[str, type[Compressor]]:
    """Every registered class, built-ins and adapters, in preferred order."""
    from compressors.adapters import ADAPTERS  # registers on import (no extra imported)
    from compressors.builtin import ORDER  # registers on import

    rank = {name: i for i, name in enumerate((*ORDER, *ADAPTERS))}
    names = sorted(_BUILTINS, key=lambda n: (rank.get(n, len(rank)), n))
    return {name: _BUILTINS[name] for name in names}


def builtins() -> dict[str, type[Compressor]]:
    """Registered built-ins: strict conditions first, then archives, in preferred order."""
    return {name: cls for name, cls in _registered().items() if not cls.adapter}


def adapter_classes() -> dict[str, type[Compressor]]:
    """The adapters of third-party memory libraries (``compressors.adapters``), whether
    or not their extras are installed: each imports its library only when it runs.  (Not
    named ``adapters``: that name on ``compressors`` is the subpackage once imported.)"""
    return {name: cls for name, cls in _registered().items() if cls.adapter}


def registered_names() -> set[str]:
    """Every name this package registers, built-ins and adapters."""
    return set(_registered())


def deterministic_builtins() -> list[str]:
    """Built-ins an exact-reader audit runs by default: no model writes or reads them
    (adapters are never in it: an opt-in, ``--conditions inspect_trim``)."""
    return [n for n, c in builtins().items() if not c.uses_llm and not c.needs_llm_reader]


BASELINES = "baselines"
"""In a list of conditions: every deterministic built-in archive (the ceiling) and
shortcut probe (the floor), so that a compressor of one's own is read against both
(``--conditions my_memory,baselines``)."""


def baseline_conditions() -> list[str]:
    """The conditions ``baselines`` stands for, archives first, then probes."""
    found = builtins()
    names = deterministic_builtins()
    return [n for kind in ("archive", "probe") for n in names if found[n].kind == kind]


@dataclass(frozen=True)
class ConditionSpec:
    """A parsed condition: what to load and with which parameters."""

    label: str
    """What results are keyed by and reports show: the ``name=`` parameter when given,
    a ``module:Class`` plugin's class ``name`` (``audit.plan.parse_conditions``), else
    the spec exactly as given."""
    target: str
    params: dict[str, str] = field(default_factory=dict)
    written: str | None = None
    """The spec as written, when the label is not it (``cmd:name=jq,run=jq -c .`` is
    labelled ``jq``)."""

    @property
    def spec(self) -> str:
        """The spec as written: what ``parse_spec`` reads back (with the label, when that
        is a plugin's class name, which only importing the plugin tells)."""
        return self.written or self.label

    @property
    def budget(self) -> int | None:
        """A per-condition budget (``frontier:budget=2400``) overrides the run's list."""
        raw = self.params.get("budget")
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise UnknownCompressorError(f"{self.label}: budget must be an integer") from None
        if value <= 0:
            raise UnknownCompressorError(f"{self.label}: budget must be positive, got {value}")
        return value

    @property
    def compressor_params(self) -> dict[str, str]:
        """What the compressor is built with: every parameter but the audit's own."""
        return {k: v for k, v in self.params.items() if k not in AUDIT_PARAMS}

    @property
    def system(self) -> str:
        """The condition whatever its label's spelling, name or budget: the target and
        its other parameters in order (``bm25:budget=1200`` and ``bm25`` are one system;
        the budget is told apart where it matters, as a budget)."""
        params = sorted(self.compressor_params.items())
        return self.target + (":" + ",".join(f"{k}={v}" for k, v in params) if params else "")


AUDIT_PARAMS = frozenset({"budget", "name"})
"""Parameters every condition takes, read by the audit and never passed to the
compressor: its own budget, and the name its results are labelled with."""
_COMMAND_KEYS = re.compile(r"(run|timeout|env|name)=")
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}")
"""A condition's ``name=``: a word (letters, digits, ``_.@+-``), at most 64 characters,
without the spec grammar's ``:`` and ``,``."""


def with_label(spec: ConditionSpec, label: str) -> ConditionSpec:
    """``spec`` labelled ``label`` (its spec as written kept)."""
    return ConditionSpec(label, spec.target, spec.params, None if label == spec.spec else spec.spec)


def parse_spec(text: str) -> ConditionSpec:
    """``name``, ``name:k=v,k2=v2``, ``pkg.mod:Class`` or ``pkg.mod:Class:k=v``; and
    the external forms: ``cmd:COMMAND`` (short for ``cmd:run=COMMAND``) and
    ``http://HOST:PORT/PATH`` (short for ``http:url=URL``).  Any condition takes
    ``name=NAME``, its label (``cmd:name=jqmem,run=jq -c ...``)."""
    text = text.strip()
    if not text:
        raise UnknownCompressorError("empty condition name")
    if text.startswith("cmd:") and not _COMMAND_KEYS.match(text[4:]):
        command = text[4:].strip()
        if not command:
            raise UnknownCompressorError("cmd: give the command to run, cmd:COMMAND")
        return ConditionSpec(label=text, target="cmd", params={"run": command})
    if text.startswith(("http://", "https://")):
        return ConditionSpec(label=text, target="http", params={"url": text})
    parts = text.split(":")
    if len(parts) >= 2 and "=" not in parts[1]:
        target, rest = f"{parts[0]}:{parts[1]}", parts[2:]
    else:
        target, rest = parts[0], parts[1:]
    params: dict[str, str] = {}
    for item in ":".join(rest).split(",") if rest else []:
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UnknownCompressorError(f"{text}: parameter {item!r} is not key=value")
        params[key.strip()] = value.strip()
    name = params.get("name")
    if name is None:
        return ConditionSpec(label=text, target=target, params=params)
    if not NAME.fullmatch(name):
        raise UnknownCompressorError(
            f"{text}: name={name!r} must be a word of at most 64 letters, digits and _.@+- "
            "(no ':' or ',')"
        )
    return ConditionSpec(label=name, target=target, params=params, written=text)


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _check_class(obj: object, where: str) -> type[Compressor]:
    if not (isinstance(obj, type) and issubclass(obj, Compressor)):
        raise UnknownCompressorError(f"{where} is not a Compressor subclass")
    if not obj.name:
        raise UnknownCompressorError(f"{where} has no `name`")
    return obj


def resolve_class(target: str) -> type[Compressor]:
    """The class a target names: built-in or adapter, then entry point, then module:attr."""
    known = _registered()
    if target in known:
        return known[target]
    plugins = _entry_points()
    if target in plugins:
        try:
            loaded = plugins[target].load()
        except Exception as error:  # a broken plugin must name itself
            raise UnknownCompressorError(
                f"plugin {target!r} ({plugins[target].value}) failed to import: {error}"
            ) from error
        return _check_class(loaded, f"plugin {target!r}")
    if ":" in target:
        module_name, _, attr = target.partition(":")
        if os.getcwd() not in sys.path:  # an unpackaged module in the working directory
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            missing = isinstance(error, ModuleNotFoundError) and error.name is not None
            where = (  # the module itself not found (not a module it imports)
                f" (looked for in the working directory, {os.getcwd()}, and on the Python "
                "path: run audit where the module is, add its directory to PYTHONPATH, or "
                "install it as a package, `audit new-compressor`)"
                if missing and module_name.split(".")[0] == error.name
                else ""
            )
            raise UnknownCompressorError(
                f"{target}: cannot import {module_name!r}: {error}{where}"
            ) from None
        except Exception as error:  # the module itself is broken: name it, no traceback
            raise UnknownCompressorError(
                f"{target}: importing {module_name!r} raised {type(error).__name__}: {error}"
            ) from error
        if not hasattr(module, attr):
            raise UnknownCompressorError(f"{target}: module {module_name!r} has no {attr!r}")
        return _check_class(getattr(module, attr), target)
    names = list(known) + sorted(plugins)
    close = difflib.get_close_matches(target, [*names, BASELINES], n=3, cutoff=0.75)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    raise UnknownCompressorError(
        f"unknown condition {target!r}; {hint}known: {', '.join(names)}, or {BASELINES} "
        "(every archive and probe), or package.module:Class"
    )


def build(spec: ConditionSpec | str) -> Compressor:
    """Instantiate a condition with its parameters validated."""
    if isinstance(spec, str):
        spec = parse_spec(spec)
    _ = spec.budget  # validate early
    return resolve_class(spec.target).from_params(spec.compressor_params)


@dataclass(frozen=True)
class Listing:
    """One line of ``audit compressors``."""

    name: str
    origin: str
    cls: type[Compressor] | None
    error: str | None = None


def available() -> list[Listing]:
    """Built-ins, then adapters (installed or not), then installed plugins (loaded to
    describe them; failures listed)."""
    rows = [Listing(name, "built-in", cls) for name, cls in builtins().items()]
    rows += [Listing(name, "adapter", cls) for name, cls in adapter_classes().items()]
    for name, ep in sorted(_entry_points().items()):
        try:
            rows.append(Listing(name, f"plugin {ep.value}", _check_class(ep.load(), name)))
        except Exception as error:
            rows.append(Listing(name, f"plugin {ep.value}", None, str(error)))
    return rows
