"""The ``ascend-rmsnorm`` command (also ``python -m ascend_rmsnorm``): the parser and the dispatch.

Each sub-command lives in a module of its own, ``cli/<name>_cmd.py``, which holds its handler and one
``register_*`` function that adds its parser and sets ``func``; ``COMMANDS`` lists them: info, warm, cache,
selftest, bench. Those modules import no torch at the top, so building the parser (``--help``) needs none.

Whatever goes wrong, the command ends with a message on stderr and a non-zero exit, never a
traceback (``main``): 2 for a bad command line, with the command's usage first (argparse, or a
``UsageError``: options that parse but make no job, such as a ``--device`` that is no device), 1 for
everything else, 130 when interrupted. ``ASCEND_RMSNORM_LOG_LEVEL=DEBUG`` adds the traceback of
an unexpected error, which is a bug to report.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .._log import to_stderr
from ..errors import AscendRMSNormError
from .bench_cmd import register_bench
from .cache_cmd import register_cache
from .device import one_line
from .errors import CliError, UsageError
from .info_cmd import register_info
from .output import say, tolerant_output
from .selftest_cmd import register_selftest
from .warm_cmd import register_warm

COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    register_info,
    register_warm,
    register_cache,
    register_selftest,
    register_bench,
]


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(prog="ascend-rmsnorm", description="Batch-invariant RMSNorm for Ascend NPUs.")
    parser.add_argument("--version", action="version", version=f"ascend-rmsnorm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in COMMANDS:
        register(sub)
    return parser


def _leaf_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)command ``args`` chose, so that its usage is what a mistake prints."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


def parse(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The command line, or exit 2 with the usage of the command that was given (``info --bogus``
    prints info's usage, not the top-level one)."""
    parser = parser or build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _leaf_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Never lets a traceback out (see the module doc)."""
    tolerant_output()  # first: --help and argparse's complaints print through it too
    try:
        parser = build_parser()
        args = parse(argv, parser)
    except KeyboardInterrupt:  # a job cancelled as it starts: as below, not a traceback
        say("interrupted")
        return 130
    command = getattr(args, "command", None) or "ascend-rmsnorm"
    try:
        return int(args.func(args) or 0)
    except UsageError as err:  # options that parse but make no job: as argparse says it, usage first
        leaf = _leaf_parser(parser, args)
        if sys.stderr is not None:
            leaf.print_usage(sys.stderr)
        to_stderr(f"{leaf.prog}: {err}")
        return err.code
    except CliError as err:
        say(f"{command}: {err}")
        return err.code
    except AscendRMSNormError as err:
        say(str(err))
        return 1
    except KeyboardInterrupt:
        say(f"{command}: interrupted")
        return 130
    except BrokenPipeError:
        try:  # the reader went away (`| head`): no complaint at exit about flushing stdout
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (ValueError, TypeError, OSError, RuntimeError, NotImplementedError) as err:
        text = str(err).strip().splitlines()
        plain = isinstance(err, (ValueError, TypeError)) and text
        say(f"{command}: {text[0] if plain else one_line(err)}")
        return 1
    except Exception as err:  # noqa: BLE001 - the last resort: a bug, still no traceback unless asked
        from .. import _env

        level = _env.read(_env.LOG_LEVEL)[0]
        if level is not None and level <= 10:
            import traceback

            traceback.print_exc()
        say(
            f"{command}: unexpected {one_line(err)}. This is a bug; please report it with the output of "
            "`ascend-rmsnorm info` (ASCEND_RMSNORM_LOG_LEVEL=DEBUG shows the traceback)"
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
