"""`sandlock ps`, `sandlock inspect NAME [--toml]`, `sandlock kill NAME [--signal SIG]`:
the user's running named sandboxes (``sandlock.registry``; docs/usage.md, "Named
sandboxes"). What a sandbox's name or command holds is printed escaped (``visible``):
one line per sandbox whatever they contain.

Exit status: 0; 1 when no running sandbox has the NAME given (inspect, kill); 2 for
invalid input (a NAME no sandbox could have, an unknown signal); 125 when the registry
cannot be read (a directory that is not the user's alone)."""

from __future__ import annotations

import sys

from .._errors import EXIT_SETUP, EXIT_USAGE, PolicyError, fail, visible
from .. import registry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace

EXIT_NO_SUCH_SANDBOX = 1
KILL_WAIT = 10.0  # seconds `kill` waits for a killed sandbox's last process


def main(args: Namespace) -> int:
    try:
        return _command(args)
    except BrokenPipeError:  # `sandlock ps | head -1`: the reader has all it wants
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 0
    except OSError as exc:
        fail(f"{args.subcommand}: the registry of named sandboxes, {registry.registry_path()}: "
             f"{exc.strerror}", EXIT_SETUP)
        return EXIT_SETUP


def _command(args: Namespace) -> int:
    if args.subcommand == "ps":
        return _ps(args.json)
    entry = _running(args.name)
    if args.subcommand == "inspect":
        return _inspect(entry, args.toml)
    return _kill(entry, _signal_number(args.signal))


def _ps(as_json: bool) -> int:
    entries = list(registry.each(registry.running()))
    if as_json:
        import json

        print(json.dumps([{"name": entry["name"], "pid": entry.pid, "command": entry["argv"],
                           "uptime": round(uptime, 3), "started": entry["started"],
                           "policy": entry["summary"]} for entry, uptime in entries]))
        return 0
    rows = [(entry["name"], str(entry.pid), _duration(uptime), _shown(entry["argv"]),
             entry["summary"]) for entry, uptime in entries]
    header = ("NAME", "PID", "UPTIME", "COMMAND", "POLICY")
    widths = [max(len(visible(row[i])) for row in (header, *rows)) for i in range(4)]
    for row in (header, *rows):
        cells = [visible(cell).ljust(width) for cell, width in zip(row, widths)]
        print("  ".join([*cells, visible(row[4])]).rstrip())
    return 0


def _inspect(entry: registry.Entry, as_toml: bool) -> int:
    if as_toml:  # a policy file: `sandlock run --policy FILE` runs under the same policy
        sys.stdout.write(f"# the policy of sandbox {_comment(entry['name'])} (pid {entry.pid})\n")
        sys.stdout.write(entry["policy"])
        return 0
    import json

    uptime = next(registry.each([entry]))[1]
    print(json.dumps({"name": entry["name"], "pid": entry.pid,
                      "sandlock_pid": entry["sandlock"][0], "command": entry["argv"],
                      "started": entry["started"], "uptime": round(uptime, 3),
                      "summary": entry["summary"], "policy": entry["policy"]}, indent=2))
    return 0


def _kill(entry: registry.Entry, signum: int) -> int:
    import signal

    if not registry.signal_sandbox(entry, signum, KILL_WAIT):
        fail(f"kill: the sandbox {entry['name']!r} has already ended", EXIT_NO_SUCH_SANDBOX)
    if signum == signal.SIGKILL:
        print(f"sandlock: killed sandbox {visible(entry['name'])} (pid {entry.pid}) and "
              "everything it started", file=sys.stderr)
    return 0


def _running(name: str) -> registry.Entry:
    try:
        registry.check_name(name)
    except PolicyError as exc:
        fail(f"NAME: {exc.message}", EXIT_USAGE)
    entry = registry.find(name)
    if entry is None:
        fail(f"no running sandbox is named {name!r} (`sandlock ps` lists them)",
             EXIT_NO_SUCH_SANDBOX)
    return entry  # type: ignore[return-value]


def _signal_number(text: str) -> int:
    """A signal by name (TERM, SIGTERM, term) or number."""
    import signal

    if text.isdigit() and text.isascii():
        number = int(text)
        if number in {int(sig) for sig in signal.valid_signals()}:
            return number
    else:
        name = text.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        found = getattr(signal.Signals, name, None) if name.isidentifier() else None
        if isinstance(found, signal.Signals):
            return int(found)
    fail(f"--signal: unknown signal {text!r} (a name like TERM, or a number)")
    return 0


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole // 60 % 60:02d}m"
    return f"{whole // 86400}d{whole // 3600 % 24:02d}h"


def _shown(argv: list[str]) -> str:
    import shlex

    text = shlex.join(argv)
    return text if len(text) <= 60 else text[:57] + "..."


def _comment(text: str) -> str:
    return visible(text).replace("\n", " ")
