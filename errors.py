"""The one exception type for user errors (bad input, bad flags, bad files)."""

from __future__ import annotations


class CimsplitError(Exception):
    """A user error: one clear sentence, optionally followed by a hint.

    The CLI prints ``error: <message>`` on one line and exits with status 2;
    library callers catch it like any exception.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message} — {self.hint}"
        return " ".join(text.split())
