"""The --audit file: one JSON object per line, each stamped with its time.

Shared by everything that records what a run did: the network engine's decisions, the
limits that were hit, a full-access run. Written from any thread, always through the
descriptor opened before the command started (``_hostfile``: never through a link, the
name never opened again): a record that comes after the run ended (what --max-output
dropped is known only once the command's pipes are drained) goes there too, whatever
the command left at the file's name.

The last record of a run is its execution's (``follow``): what ran (argv: the log is
created readable by its owner only), its pid, exit status, duration, the limits hit.
"""

from __future__ import annotations

import _thread  # threading costs ~1 ms of start-up: its Lock is this
import os
import time

from ._errors import EXIT_TIMEOUT, PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .process import SandboxedProcess


class AuditLog:
    def __init__(self, path: str) -> None:
        """Opened before anything starts, so that a bad path is a clear error."""
        from ._hostfile import Output

        self.path = path
        try:
            with Output(path) as output:
                self._fd = output.append(0o600)  # (a command's arguments may be tokens)
        except OSError as exc:
            raise PolicyError("audit", f"cannot open {path}: {exc.strerror}") from None
        self._lock = _thread.allocate_lock()
        self.limits_hit: list[str] = []  # policy fields, in the order they were hit
        self._process: SandboxedProcess | None = None  # whose execution closes the log

    def follow(self, process: SandboxedProcess) -> None:
        """``process``'s execution is recorded when the log closes (its end)."""
        self._process = process

    def write(self, record: dict) -> None:
        import json  # only runs that keep an audit log pay for it

        line = (json.dumps({"time": round(time.time(), 6), **record}) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                return  # closed: the run that owned it is gone
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError:
                pass  # a full disk: the run's outcome stands

    def close(self) -> None:
        """Only once nothing of the run can record any more (``__del__`` otherwise)."""
        process, self._process = self._process, None
        if process is not None and self._fd >= 0:
            self._execution(process)
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    def limit(self, name: str, value: object, verdict: str, reason: str, **details: object) -> None:
        """A limit that was hit: ``name`` is its policy field, ``verdict`` what it did
        ("deny", "kill", "throttle", "truncate"), ``reason`` the notice's words."""
        self.limits_hit.append(name)
        self.write({"event": "limit", "limit": name, "value": value, "verdict": verdict,
                    "reason": reason, **details})

    def _execution(self, process: SandboxedProcess) -> None:
        """One record per command run (LocalGPT's audit log): what ran, how it ended."""
        limits = list(dict.fromkeys(self.limits_hit))
        # As returned; a long-lived sandbox's resident, killed as its block ends, stands
        # for the block (0, or 1 after an exception), as for its workspace (process._cow).
        code = process.returncode if process.block_status is None else process.block_status
        code = EXIT_TIMEOUT if process.timed_out else code
        self.write({"event": "exec", "argv": list(process.argv), "pid": process.pid,
                    "exit_status": code, "duration": round(time.monotonic() - process.started, 6),
                    "limits": limits, "sandbox": process.level})
