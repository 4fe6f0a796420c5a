"""Asking the policy_fn: one call per event, its value read as a verdict; a callback
that fails denies (fail closed) and is reported once, with its traceback."""

from __future__ import annotations

import _thread
import sys

from ._events import DENY, Answer, Event, answer_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .._auditlog import AuditLog
    from ._context import Context


class Callback:
    def __init__(self, fn: Callable[[Event, Context], object], context: Context,
                 audit: AuditLog | None) -> None:
        self._fn = fn
        self._context = context
        self._audit = audit
        self._lock = _thread.allocate_lock()
        self.failures = 0

    def ask(self, event: Event) -> Answer:
        try:
            answer = answer_of(self._fn(event, self._context))
        except BaseException:  # noqa: BLE001 - any failure of the caller's code denies (sys.exit too)
            self._failed(event)
            answer = DENY
        if self._audit is not None and (answer.audit or answer.error):
            self._audit.write({"event": "policy_fn", "verdict": "deny" if answer.error else "audit",
                               "errno": answer.error, **_fields(event)})
        return answer

    def record(self, fields: dict[str, object]) -> None:
        """An audit record of a refusal the live rules made."""
        if self._audit is not None:
            self._audit.write(fields)

    def _failed(self, event: Event) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            import traceback

            print(f"sandlock: policy_fn raised on {event.syscall} (pid {event.pid}): the call is "
                  f"denied, as is every call it fails on\n{traceback.format_exc().rstrip()}",
                  file=sys.stderr, flush=True)


def _fields(event: Event) -> dict[str, object]:
    fields = {"syscall": event.syscall, "category": event.category, "pid": event.pid,
              "parent_pid": event.parent_pid}
    for name in ("host", "ip", "port", "path"):
        value = getattr(event, name)
        if value is not None:
            fields[name] = value
    if event.argv is not None:
        fields["argv"] = list(event.argv)
    if event.flags is not None:
        fields["flags"] = event.flags
    return fields
