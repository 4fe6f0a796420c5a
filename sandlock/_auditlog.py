"""The --audit file: one JSON object per line, each stamped with its time.

Shared by everything that records what a run did: the network engine's decisions, the
limits that were hit, a full-access run. Written from any thread; a record that comes
after the run closed the log (what --max-output dropped is known only once the
command's pipes are drained) is appended by reopening the file.
"""

from __future__ import annotations

import _thread  # threading costs ~1 ms of start-up: its Lock is this
import time

from ._errors import PolicyError


class AuditLog:
    def __init__(self, path: str) -> None:
        """Opened before anything starts, so that a bad path is a clear error."""
        self.path = path
        try:
            self._file = open(path, "a", buffering=1, encoding="utf-8")
        except OSError as exc:
            raise PolicyError("audit", f"cannot open {path}: {exc.strerror}") from None
        self._lock = _thread.allocate_lock()

    def write(self, record: dict) -> None:
        import json  # only runs that keep an audit log pay for it

        line = json.dumps({"time": round(time.time(), 6), **record}) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
                return
        try:
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(line)
        except OSError:
            pass  # removed or unwritable since the run began: the run's outcome stands

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def limit(self, name: str, value: object, verdict: str, reason: str, **details: object) -> None:
        """A limit that was hit: ``name`` is its policy field, ``verdict`` what it did
        ("deny", "kill", "throttle", "truncate"), ``reason`` the notice's words."""
        self.write({"event": "limit", "limit": name, "value": value, "verdict": verdict,
                    "reason": reason, **details})
