"""The errors a command reports in one line (``main`` turns them into a message and an exit status)."""

from __future__ import annotations


class CliError(Exception):
    """A problem the command reports in one line and exits with ``code`` (no traceback)."""

    code = 1


class UsageError(CliError):
    """The command line itself is wrong (exit status 2, as argparse uses)."""

    code = 2
