"""What a call tells the model: its exit status and output (cut at the cap, saying so),
what sandlock denied it (from the call's own audit records; paths from the command's
own error messages, since Landlock refuses an open without telling anyone), and the
limit that ended it. Plain data (``structuredContent``) and the same as text."""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._command import Outcome

MAX_DENIALS = 50  # entries listed; the rest are counted
# "cat: /x/.ssh/id: Permission denied", "ls: cannot open directory '/x': Permission
# denied", "PermissionError: [Errno 13] Permission denied: '/x'", "sh: 1: cannot
# create /x: Permission denied", "touch: cannot touch 'x': Read-only file system"
_REFUSALS = ("Permission denied", "Operation not permitted", "Read-only file system")
_QUOTED = re.compile(r"['\u2018\u201c\"]([^'\u2019\u201d\"]+)['\u2019\u201d\"]")
_BARE = re.compile(r"(?:^|[\s:])((?:/|~/|\./|\.\./)[^\s:'\"]*)")
_ASIDE = "The policy denied these: ask the user to widen it rather than retrying."


def denials(records: list[dict], stderr: str, cwd: str) -> list[dict]:
    """One entry per distinct thing denied, audit records first."""
    found: list[dict] = []
    for record in records:
        entry = _denial(record)
        if entry is not None and entry not in found:
            found.append(entry)
    for path in _refused_paths(stderr, cwd):
        entry = {"kind": "path", "path": path, "source": "the command's error message"}
        if entry not in found and not any(e.get("path") == path for e in found):
            found.append(entry)
    return found


def limits(records: list[dict]) -> list[dict]:
    """The limits the call hit, as the audit log names them."""
    return [{"limit": r.get("limit"), "value": r.get("value"), "verdict": r.get("verdict"),
             "reason": r.get("reason")}
            for r in records if r.get("event") == "limit" and not r.get("summary")]


def _denial(record: dict) -> dict | None:
    reason = str(record.get("reason", ""))
    verdict = record.get("verdict")
    # a redirect is DNS sent to sandlock's resolver (no denial), or a parked UDP connect
    # (its reason says denied); "refused": a host's loopback service, out of sight of
    # the private network (docs/usage.md "A private loopback"), which the agent must know
    if record.get("event") or not (verdict in ("deny", "refused")
                                   or verdict == "redirect" and "denied" in reason):
        return None
    if record.get("method") is not None:
        return {"kind": "http", "method": record.get("method"), "host": record.get("hostname"),
                "path": record.get("path"), "reason": reason}
    syscall = str(record.get("syscall", ""))
    if syscall == "dns":
        return {"kind": "lookup", "name": record.get("destination"), "reason": reason}
    if "path" in record:
        return {"kind": "file", "operation": syscall, "path": record.get("path"), "reason": reason}
    entry = {"kind": "bind" if syscall == "bind" else "connect", "protocol": record.get("protocol"),
             "destination": record.get("destination"), "reason": reason}
    if record.get("hostname"):
        entry["host"] = record["hostname"]
    return entry


def _refused_paths(stderr: str, cwd: str) -> list[str]:
    paths: list[str] = []
    for line in stderr.splitlines():
        if not any(refusal in line for refusal in _REFUSALS):
            continue
        candidates = _QUOTED.findall(line) or _BARE.findall(line)
        for candidate in candidates:
            path = os.path.normpath(os.path.join(cwd, os.path.expanduser(candidate)))
            if path not in paths:
                paths.append(path)
    return paths


def result(outcome: Outcome, cwd: str, cap: int) -> dict:
    """The call's structured result."""
    stderr = outcome.stderr.decode("utf-8", "replace")
    found = denials(outcome.records, stderr, cwd)
    data: dict = {"exit_code": outcome.exit_code,
                  "stdout": outcome.stdout.decode("utf-8", "replace"), "stderr": stderr,
                  "denied": found[:MAX_DENIALS]}
    if outcome.value is not None:
        data["value"] = outcome.value
    if outcome.error is not None:
        data["error"] = outcome.error
    if len(found) > MAX_DENIALS:
        data["denied_not_listed"] = len(found) - MAX_DENIALS
    cut = {name: dropped for name, dropped in zip(("stdout", "stderr"), outcome.dropped) if dropped}
    if cut:
        data["truncated"] = {name: f"cut at {cap} bytes: {dropped} more bytes dropped"
                             for name, dropped in cut.items()}
    hit = limits(outcome.records)
    if outcome.timed_out and not any(entry["limit"] == "timeout" for entry in hit):
        hit.append({"limit": "timeout", "verdict": "kill", "reason": "timeout"})
    if hit:
        data["limits"] = hit
    notes = [note for note in outcome.notices if note]
    if outcome.start_error:
        notes.insert(0, outcome.start_error)
    if notes:
        data["notes"] = notes
    return data


def text(data: dict) -> str:
    """The structured result as the text a model reads."""
    lines = [f"exit status {data['exit_code']}"]
    if data.get("error"):
        lines.append(f"error: {data['error']}")
    for limit in data.get("limits", ()):
        lines.append(f"limit reached: {limit.get('reason') or limit['limit']}")
    if data.get("value") is not None:
        lines += ["--- value ---", data["value"]]
    for name in ("stdout", "stderr"):
        if data[name]:
            lines += [f"--- {name} ---", data[name].rstrip("\n")]
        if name in data.get("truncated", {}):
            lines.append(f"[{name} {data['truncated'][name]}]")
    if data["denied"]:
        lines.append("--- denied by sandlock ---")
        lines += [f"- {_line(entry)}" for entry in data["denied"]]
        if data.get("denied_not_listed"):
            lines.append(f"- and {data['denied_not_listed']} more")
        lines.append(_ASIDE)
    for note in data.get("notes", ()):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _line(entry: dict) -> str:
    kind = entry["kind"]
    if kind == "lookup":
        return f"DNS lookup of {entry['name']} ({entry['reason']})"
    if kind == "http":
        return f"HTTP {entry['method']} {entry['host']}{entry['path']} ({entry['reason']})"
    if kind == "file":
        return f"{entry['operation']} of {entry['path']} ({entry['reason']})"
    if kind == "path":
        return (f"access to {entry['path']} (refused, as the command reported it: a path the "
                "policy does not grant, or the file's own permissions)")
    host = f" ({entry['host']})" if entry.get("host") else ""
    return f"{kind} to {entry['destination']}{host} over {entry['protocol']} ({entry['reason']})"
