"""`cimsplit profile` (not implemented yet)."""

from __future__ import annotations

import argparse

from cimsplit.compiler.errors import CimsplitError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("profile", help="(not implemented yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise CimsplitError("`cimsplit profile` is not implemented yet")
