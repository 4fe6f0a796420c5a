"""Exceptions that carry sandlock's exit-status contract."""

from __future__ import annotations

EXIT_USAGE = 2  # invalid option or policy
EXIT_TIMEOUT = 124
EXIT_SETUP = 125  # the sandbox itself could not be set up
EXIT_NOEXEC = 126  # COMMAND exists but cannot be executed
EXIT_NOTFOUND = 127  # COMMAND not found


def error_line(message: str) -> str:
    """The one line sandlock prints for an error it exits with (``visible``: the input
    it quotes cannot break the line or drive the terminal)."""
    return f"sandlock: error: {visible(message)}"


def visible(text: str) -> str:
    """``text`` with every character that does not show escaped as repr escapes it
    (``\\x1b``, ``\\r``, ``\\x00``, ``\\u2028``...): a line that echoes what
    someone typed, or what a file or a sandboxed program named, stays one line of
    plain text."""
    if text.isprintable():
        return text  # (the usual case)
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def tell(text: str) -> None:
    """A line on sandlock's stderr (a warning, a notice) that never changes a run's
    outcome: where stderr is full or gone (2>/dev/full, 2>&-, a closed pipe), the line
    is lost and the run goes on."""
    import sys

    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print the one-line error and exit (raises SystemExit): the command line's way out."""
    import sys

    print(error_line(message), file=sys.stderr)
    raise SystemExit(code)


class SandlockError(Exception):
    """Base class of every error sandlock raises on purpose."""

    exit_code = EXIT_SETUP


class PolicyError(SandlockError, ValueError):
    """A policy field (or the option it came from) holds an invalid value.

    ``field`` names the Policy field; the CLI turns it back into the option name.
    """

    exit_code = EXIT_USAGE

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PolicySourceError(SandlockError):
    """A policy file or option is invalid; the message already says where
    (``FILE:LINE: key: what is wrong``, or ``OPTION: what is wrong``)."""

    exit_code = EXIT_USAGE


class SetupError(SandlockError):
    """The kernel or the environment cannot provide the confinement asked for."""

    exit_code = EXIT_SETUP
