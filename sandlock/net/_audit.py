"""Every network decision: one JSON line in --audit FILE, a notice on stderr for denials."""

from __future__ import annotations

import sys
import threading
from io import TextIOBase

from ..netcall import SockAddress, describe, printable
from ..netrules import Verdict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._auditlog import AuditLog


MAX_LOOKUPS_SAID = 1000  # names whose denied lookup is said (and remembered), per run
MAX_TIMEOUTS_SAID = 100  # upstreams whose silence is said (and remembered), per run
MAX_REFUSALS_SAID = 100  # private loopback destinations nothing answered, said per run


PRIVATE_REFUSAL = ("nothing listens there in the sandbox's private network (the host's "
                   "loopback is out of its sight)")


class Audit:
    def __init__(self, log: AuditLog | None, quiet: bool, stderr: TextIOBase | None = None) -> None:
        self._auditlog = log  # the run's, which closes it
        self._quiet = quiet
        self._stderr = stderr or sys.stderr
        self._lock = threading.Lock()
        self.denied = 0
        self._lookups_said: set[str] = set()  # names whose lookup was denied (said once)
        self._timeouts_said: set[str] = set()  # upstreams that went silent (said once)
        self._refusals_said: set[str] = set()  # private loopback destinations (said once)

    @property
    def logs_allowed(self) -> bool:
        """Whether allowed operations are recorded at all (only in an audit log)."""
        return self._auditlog is not None

    def record(self, *, pid: int, syscall: str, protocol: str, address: SockAddress,
               verdict: Verdict, redirected: bool = False) -> None:
        allowed = verdict.allowed
        if allowed and self._auditlog is None:
            return  # the hot path: nothing to write, nothing to say
        destination = describe(address)
        name = f" ({verdict.hostname})" if verdict.hostname else ""
        where = "on" if syscall in ("bind", "listen") else "to"
        self._log(allowed, {
            "pid": pid,
            "syscall": syscall,
            "protocol": protocol,
            "destination": destination,
            "hostname": verdict.hostname,
            "verdict": "redirect" if redirected else ("allow" if allowed else "deny"),
            "reason": verdict.reason,
        }, f"sandlock: denied {syscall} {where} {destination}{name} ({verdict.reason})")

    def lookup_denied(self, name: str, reason: str) -> None:
        """The command asked sandlock's resolver for a name no rule admits: said once
        per name (a resolver asks several times, for A and AAAA, and retries), for at
        most ``MAX_LOOKUPS_SAID`` names, then once that more are not said."""
        with self._lock:
            if name in self._lookups_said or len(self._lookups_said) > MAX_LOOKUPS_SAID:
                return
            self._lookups_said.add(name)
            past = len(self._lookups_said) > MAX_LOOKUPS_SAID
        if past:
            if not self._quiet:
                self._notice(f"sandlock: more lookups were denied (the first {MAX_LOOKUPS_SAID} "
                             "names were said, the others are not)")
            return
        shown = printable(name.encode("latin-1", "backslashreplace"))
        self._log(False, {
            "pid": 0,  # the resolver does not know which process asked
            "syscall": "dns",
            "protocol": "dns",
            "destination": shown,
            "hostname": shown,
            "verdict": "deny",
            "reason": reason,
        }, f"sandlock: denied lookup of {shown} ({reason})")

    def private_refused(self, pid: int, protocol: str, address: SockAddress) -> None:
        """A connect to the private loopback that nothing inside answered (ECONNREFUSED):
        under the default private network, where a host service the command expected is
        out of sight, this is how the user learns why. Said once per destination (a
        client waiting for its own server retries), in the audit log each time; not a
        denial (not counted), the refusal is the namespace's."""
        destination = describe(address)
        with self._lock:
            first = destination not in self._refusals_said \
                and len(self._refusals_said) < MAX_REFUSALS_SAID
            if first:
                self._refusals_said.add(destination)
            if self._auditlog is not None:
                self._auditlog.write({"pid": pid, "syscall": "connect", "protocol": protocol,
                                      "destination": destination, "hostname": None,
                                      "verdict": "refused", "reason": PRIVATE_REFUSAL})
        if first and not self._quiet:
            self._notice(f"sandlock: connect to {destination} refused: {PRIVATE_REFUSAL} "
                         "(--no-net-private-loopback, or a --net-allow rule, reaches the "
                         "host's; said once per destination)")

    def record_http(self, event: dict) -> None:
        """A decision of the HTTP proxy (an ``audit`` message from its process), or an
        incident of the proxy itself (it died: ``kind`` "incident")."""
        if event.get("kind") == "incident":
            self._incident(str(event.get("message", "")), bool(event.get("restarted")))
            return
        if event.get("event") == "untrusted-ca":
            self._untrusted(event)
            return
        if event.get("event") == "upstream-timeout":
            self._upstream_timeout(event)
            return
        allowed = bool(event.get("allowed"))
        method, host, path = (str(event.get(key, "")) for key in ("method", "host", "path"))
        reason = str(event.get("reason", ""))
        record = {
            "pid": event.get("pid", 0),
            "syscall": "http",
            "protocol": "http",
            "destination": event.get("destination", ""),
            "hostname": host or None,
            "method": method,
            "path": path,
            "verdict": "allow" if allowed else "deny",
            "reason": reason,
        }
        if event.get("credential"):  # the NAME of the credential the proxy added (--http-auth)
            record["credential"] = str(event["credential"])
        # A refusal before any name is known (TLS without SNI, bytes that are not HTTP)
        # names where the connection went.
        shown = printable((host or str(event.get("destination") or "an unknown destination")).encode())
        self._log(allowed, record, f"sandlock: denied {method} {shown}{path} ({reason})")

    def _untrusted(self, event: dict) -> None:
        """The command's client refused the certificate the proxy showed it (once per
        host): it did not take the trust sandlock set up. Not a decision: not counted."""
        host = printable(str(event.get("host") or event.get("destination") or "?").encode())
        if self._auditlog is not None:
            self._auditlog.write({"event": "untrusted-ca", "pid": event.get("pid", 0),
                                  "destination": event.get("destination", ""), "hostname": host,
                                  "reason": "the client refused sandlock's CA"})
        if not self._quiet:
            self._notice(f"sandlock: {host}: the client refused sandlock's CA (a CA setting of "
                         "its own, e.g. curl's --cacert or npm's --cafile, overrides the variables "
                         "sandlock sets; see docs/ca.md, \"When a client refuses the CA\")")

    def _upstream_timeout(self, event: dict) -> None:
        """An allowed request whose upstream sent nothing for --http-upstream-timeout:
        the proxy answered it 504 (or cut its response, once begun). Not a denial:
        recorded each time, said once per upstream."""
        destination = str(event.get("destination", ""))
        method, host, path = (str(event.get(key, "")) for key in ("method", "host", "path"))
        reason = str(event.get("reason", ""))
        if self._auditlog is not None:
            self._auditlog.write({"pid": event.get("pid", 0), "syscall": "http", "protocol": "http",
                                  "destination": destination, "hostname": host or None,
                                  "method": method, "path": path, "verdict": "timeout",
                                  "reason": reason})
        with self._lock:
            first = (destination not in self._timeouts_said
                     and len(self._timeouts_said) < MAX_TIMEOUTS_SAID)
            if first:
                self._timeouts_said.add(destination)
        if first and not self._quiet:
            outcome = "answered 504" if event.get("answered", True) else "its response cut"
            shown = printable(f"{method} {host}{path}".encode())
            self._notice(f"sandlock: {shown}: {printable(reason.encode())}: {outcome} (said "
                         "once per upstream)")

    def _incident(self, message: str, restarted: bool) -> None:
        """Not a decision about the command: sandlock's own proxy failed."""
        if self._auditlog is not None:
            self._auditlog.write({"syscall": "proxy", "protocol": "http",
                              "verdict": "restart" if restarted else "down", "reason": message})
        if not self._quiet:
            self._notice(f"sandlock: {message}")

    def _log(self, allowed: bool, record: dict, notice: str) -> None:
        """Count a denial, write ``record`` (timestamped) to the log, say ``notice``."""
        with self._lock:
            if not allowed:
                self.denied += 1
            if self._auditlog is not None:
                self._auditlog.write(record)
        if not allowed and not self._quiet:
            self._notice(notice)

    def _notice(self, line: str) -> None:
        try:
            print(line, file=self._stderr, flush=True)
        except (OSError, ValueError):
            pass  # stderr closed or full (`| head`, 2>/dev/full): the verdict stands

    def summary(self) -> str | None:
        if not self.denied:
            return None
        plural = "s" if self.denied != 1 else ""
        return f"sandlock: {self.denied} network operation{plural} denied"  # HTTP requests included
