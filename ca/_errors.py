"""The one exception the CA package raises on purpose."""

from __future__ import annotations

from .._errors import EXIT_USAGE, SandlockError


class CAError(SandlockError, ValueError):
    """A CA cannot be created, loaded, used or installed. The message is one line that
    says what is wrong and with which file; it is meant to be shown as it is.

    As a SandlockError it carries exit status 2: for ``sandlock run`` a bad CA given on
    the command line is bad input (``sandlock ca`` itself exits 1).
    """

    exit_code = EXIT_USAGE


class NeedsPrivilege(CAError):
    """Installing or removing needs more rights than this process has. ``commands``
    holds the exact shell commands that would do it (to run with sudo)."""

    def __init__(self, message: str, commands: list[str]) -> None:
        super().__init__(message)
        self.commands = commands
