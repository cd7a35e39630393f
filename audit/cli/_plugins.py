"""`audit compressors` and `audit new-compressor`."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Annotated

import typer

from audit.cli._common import fail


def list_compressors() -> None:
    """List memory conditions: built-ins, then installed plugins (broken ones with their error)."""
    from audit.plugins import render_compressor_list

    typer.echo(render_compressor_list(width=shutil.get_terminal_size((80, 24)).columns))


def new_compressor(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Condition name in snake_case, e.g. keep_newest.")
    ],
    out: Annotated[
        Path, typer.Option("--out", help="New or empty directory for the plugin package.")
    ],
) -> None:
    """Scaffold an installable compressor plugin: package, entry point, test, README."""
    from audit.plugins import scaffold_plugin

    try:
        written = scaffold_plugin(name, out)  # PluginScaffoldError: one line
    except OSError as error:
        fail(f"cannot write {out}: {error}", code=1)
    for path in written:
        typer.echo(f"wrote {path}")
    # its test needs pytest, which the package's ``test`` extra brings
    package, where = shlex.quote(f"{out}[test]"), shlex.quote(str(out))
    typer.echo(
        f"next: pip install -e {package}, then python -m pytest {where} and `audit compressors`"
    )
