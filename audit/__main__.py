"""``python -m audit`` is the ``audit`` command."""

from audit.cli import main

main()
