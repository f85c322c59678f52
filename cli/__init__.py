"""The ``cimsplit`` console script: one parser, one module per subcommand.

Each subcommand module exposes ``register(subparsers)`` which adds its parser
and sets ``func`` to a callable ``(args) -> int``.  User errors
(:class:`CimsplitError`) become one line on stderr and exit status 2; any other
exception is a bug in cimsplit and becomes one line that says so and asks for
``--debug`` (which shows the traceback), with exit status 3.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from cimsplit import __version__
from cimsplit.errors import CimsplitError

__all__ = ["main", "build_parser"]

INTERNAL_ERROR_STATUS = 3

SUBCOMMANDS = ("zoo", "inspect", "profile", "calibrate", "costs", "partition", "compile", "explain", "run", "sweep")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"error: {self.prog}: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cimsplit", description="Partition ONNX models between a host CPU and a CIM accelerator.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("--version", action="version", version=f"cimsplit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(f"cimsplit.cli.{name}_cmd").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CimsplitError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: {exc.one_line()}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback only with --debug
        if debug:
            raise
        detail = " ".join(str(exc).split())[:200]
        sys.stderr.write(f"error: internal error in cimsplit ({type(exc).__name__}{': ' + detail if detail else ''}); "
                         "rerun with --debug for the traceback and report it\n")
        return INTERNAL_ERROR_STATUS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
