"""The run indicator (LocalGPT's shell sandbox spec): before the command, what runs,
in which workspace, with which network; after it, how long it took and at which
level it was confined. On sandlock's stderr only, never the command's stdout.

Loaded only by runs that say it (stderr a terminal, or --announce / ``-p agent``).
"""

from __future__ import annotations

import sys
import time

from .._errors import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..policy import Policy

# Marks as the spec shows them, where stderr can encode them (else none).
_LOCK, _DONE, _FAILED = "\N{LOCK} ", "\N{CHECK MARK} ", "\N{BALLOT X} "


class Indicator:
    """Says the run's start now, and its end in ``completed``."""

    def __init__(self, policy: Policy, command: list[str], cwd: str) -> None:
        import shlex

        self._marks = _encodable(_LOCK + _DONE + _FAILED)
        shown = visible(shlex.join(command))  # a name with control characters, escaped
        _say(f"{self._mark(_LOCK)}Running sandboxed: {shown}\n"
             f"  Workspace: {visible(cwd)}\n"
             f"  Network: {visible(network(policy))}")
        self._started = time.monotonic()

    def completed(self, code: int, level: str) -> None:
        seconds = time.monotonic() - self._started
        status = "" if code == 0 else f"; exit status {code}"
        mark = self._mark(_DONE if code == 0 else _FAILED)
        _say(f"{mark}Completed in {seconds:.1f}s (sandbox: {level}{status})")

    def _mark(self, mark: str) -> str:
        return mark if self._marks else ""


def network(policy: Policy) -> str:
    """"denied", or the rules that open it, as given."""
    if policy.full_access:
        return "unrestricted (full-access)"
    if policy.net_deny:
        opened = [f"everything but {', '.join(policy.net_deny)}"]
    else:
        opened = list(policy.net_allow_specs)
    opened += [f"HTTP {rule}" for rule in policy.http_allow]
    opened += [f"listen on {', '.join(policy.net_bind)}"] if policy.net_bind else []
    opened += [f"unix {path}" for path in policy.unix_allow]
    return "; ".join(opened) or "denied"


def _encodable(text: str) -> bool:
    try:
        text.encode(sys.stderr.encoding or "ascii")
    except (UnicodeEncodeError, LookupError, AttributeError):
        return False
    return True


def _say(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr gone (2>&-, a closed pipe): the run goes on
