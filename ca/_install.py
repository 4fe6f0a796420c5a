"""Installing a CA certificate into the trust stores of the machine, and removing it.

Targets: ``system`` (the distribution's store, which most programs read), ``nss``
(Chromium's ~/.pki/nssdb and Firefox profiles, with certutil) and ``java`` (the JRE's
cacerts, with keytool). What install did is recorded in a manifest in the CA
directory, and ``uninstall`` reverses exactly that.

Each target is planned before anything changes: a missing tool, database or right
fails the whole install up front. Without the rights for the system store or the
JRE, NeedsPrivilege carries the exact commands to run with sudo.

``SANDLOCK_CA_TRUST_ROOT=DIR`` moves every system path under DIR (for tests and
image builds); there the Debian update runs with its paths redirected too, and the
other distributions' update commands, which cannot be redirected, are skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .._record import values_of
from ._errors import CAError, NeedsPrivilege
from ._store import MANIFEST_FILE, ca_directory
from ._truststores import (
    Installation,
    Step,
    debian_java_copy,
    known_layout,
    plan_java,
    plan_nss,
    plan_system,
    under,
    undo_step,
)

TARGETS = ("system", "nss", "java")


def install(ca_cert: str | os.PathLike[str], targets: Iterable[str],
            env: Mapping[str, str] = os.environ) -> list[Installation]:
    """Install the PEM certificate ``ca_cert`` into ``targets`` and record it in the
    manifest of ``ca_directory(env)``. Returns what was done."""
    cert = Path(ca_cert).resolve()
    chosen = list(dict.fromkeys(targets))
    for target in chosen:
        if target not in TARGETS:
            raise CAError(f"unknown trust store {target!r} (choose from {', '.join(TARGETS)})")
    planners = {"system": plan_system, "nss": plan_nss, "java": plan_java}
    steps = _plan([lambda target=target: planners[target](cert, env) for target in chosen])
    manifest = _Manifest(ca_directory(env))
    done: list[Installation] = []
    for step in steps:
        step.run()  # each replaces an earlier copy of its own
        for installation in (step.done, *step.also(env)):
            manifest.add(installation)
            done.append(installation)
        manifest.save()
    return done


def uninstall(env: Mapping[str, str] = os.environ) -> list[Installation]:
    """Remove everything ``installed`` lists. Returns what was removed."""
    manifest = _Manifest(ca_directory(env))
    entries = installed(env)
    for stale in [e for e in manifest.entries if e not in entries]:
        manifest.remove(stale)  # removed by hand already
    manifest.save()
    steps = _plan([lambda entry=entry: [undo_step(entry, env)] for entry in reversed(entries)])
    removed = []
    for step in steps:
        step.undo()
        manifest.remove(step.done)
        manifest.save()
        removed.append(step.done)
    return removed


def installed(env: Mapping[str, str] = os.environ) -> list[Installation]:
    """What the manifest records, plus what the commands NeedsPrivilege gave would
    have done by hand: the system file (and Debian's Java copy of it)."""
    # The system file is the truth about the system store: one removed with the
    # commands uninstall printed is no longer installed, whatever the manifest says.
    entries = [e for e in _Manifest(ca_directory(env)).entries
               if e.target != "system" or os.path.exists(e.location)]
    layout = known_layout(env)
    if layout is not None:
        system = Installation("system", str(under(env, layout.anchors) / layout.filename))
        if os.path.exists(system.location) and system not in entries:
            entries.append(system)
            if layout.name == "debian":
                entries += [e for e in debian_java_copy(env) if e not in entries]
    return entries


def _plan(planners: list[Callable[[], list[Step]]]) -> list[Step]:
    """Every step, or one NeedsPrivilege listing the commands of all that need root
    (so that one sudo session does them all)."""
    steps: list[Step] = []
    refused: list[NeedsPrivilege] = []
    for planner in planners:
        try:
            steps += planner()
        except NeedsPrivilege as exc:
            refused.append(exc)
    if len(refused) == 1:
        raise refused[0]
    if refused:
        commands = [command for exc in refused for command in exc.commands]
        raise NeedsPrivilege(f"this needs root: run {' && '.join(commands)}", commands)
    return steps


# --- manifest -------------------------------------------------------------------------


class _Manifest:
    """installed.json in the CA directory: the Installations still in place."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / MANIFEST_FILE
        self.entries: list[Installation] = []
        try:
            raw = json.loads(self.path.read_text())
            self.entries = [Installation(e["target"], e["location"], e.get("alias")) for e in raw["installed"]]
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CAError(f"{self.path}: unreadable install record ({exc})") from None

    def add(self, entry: Installation) -> None:
        if entry not in self.entries:
            self.entries.append(entry)

    def remove(self, entry: Installation) -> None:
        if entry in self.entries:
            self.entries.remove(entry)

    def save(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        from .._hostfile import write_file

        data = {"installed": [values_of(e) for e in self.entries]}
        try:
            write_file(self.path, (json.dumps(data, indent=2) + "\n").encode())
        except OSError as exc:
            raise CAError(f"cannot record the installation in {self.path}: {exc.strerror}") from None
