"""policy_fn's file events (``events={"file"}``): each open, once per path and
process, with its path and flags; a denial holds for that process's later opens.

The attack: a second thread rewrites the path an open names while the open waits for
the callback; the callback must have been told the path the kernel then opens (the
sandbox is held from the read to the kernel's own copy). Control: the same racer,
with the file not refused, reaches the file, so the count it reports can be trusted.
"""

from __future__ import annotations

import errno
import json
import sys
import textwrap
import threading

import pytest

from sandlock import Event, Sandbox
from sandlock._errors import PolicyError

PY = sys.executable


class Files:
    """A policy_fn recording the file events, refusing paths that end with ``refused``."""

    def __init__(self, refused: str | None = None, answer: object = 0) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._refused, self._answer = refused, answer

    def __call__(self, event: Event, ctx) -> object:
        if event.category != "file":
            return 0
        with self._lock:
            self.events.append(event)
        if self._refused and event.path.endswith(self._refused):
            return errno.EACCES
        return self._answer

    def paths(self, suffix: str) -> list[Event]:
        return [e for e in self.events if e.path.endswith(suffix)]


def test_the_papers_figure_audits_file_events(tmp_path):
    """`if event.category == "file": return "audit"`: each open is told once per path
    and process, with its flags, and recorded."""
    audit = tmp_path / "audit.jsonl"
    policy_fn = Files(answer="audit")
    script = textwrap.dedent("""
        import os
        for _ in range(3):
            os.close(os.open("/etc/hostname", os.O_RDONLY))
        os.close(os.open("/tmp/made", os.O_WRONLY | os.O_CREAT, 0o600))
    """)
    result = Sandbox(policy_fn=policy_fn, events={"file"}, audit=str(audit)).run([PY, "-c", script])
    assert result.exit_code == 0, result.stderr
    [hostname] = policy_fn.paths("/etc/hostname")
    assert (hostname.syscall, hostname.flags & 3) == ("openat", 0)
    [made] = policy_fn.paths("/tmp/made")
    assert made.flags & (0o100 | 1) == 0o100 | 1  # O_CREAT | O_WRONLY
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r.get("category") == "file" and r.get("path") == "/tmp/made" and r["verdict"] == "audit"
               for r in records)


def test_a_refused_open_fails_with_the_callbacks_errno_every_time(tmp_path):
    policy_fn = Files(refused="secret.txt")
    script = textwrap.dedent("""
        import os
        open("/tmp/secret.txt", "w").close() if False else None
        for _ in range(2):
            try:
                os.open("/etc/hostname-secret.txt", os.O_RDONLY)
            except OSError as e:
                print(e.errno)
        print(len(open("/etc/hostname").read()) > 0)
    """)
    result = Sandbox(policy_fn=policy_fn, events={"file"}).run([PY, "-c", script])
    assert result.stdout.decode().split() == [str(errno.EACCES)] * 2 + ["True"], result.stderr
    assert len(policy_fn.paths("secret.txt")) == 1  # once per path and process


def test_two_processes_are_told_apart():
    policy_fn = Files()
    result = Sandbox(policy_fn=policy_fn, events={"file"}).run(
        ["sh", "-c", "cat /etc/hostname >/dev/null; cat /etc/hostname >/dev/null"])
    assert result.exit_code == 0
    events = policy_fn.paths("/etc/hostname")
    assert len(events) == 2 and events[0].pid != events[1].pid


RACER = textwrap.dedent("""
    import ctypes, os, sys, threading
    libc = ctypes.CDLL(None, use_errno=True)
    fine = os.path.join(sys.argv[1], "fine.txt").encode() + b"\\0"
    secret = os.path.join(sys.argv[1], "secret.txt").encode()  # (the last byte stays NUL)
    path = ctypes.create_string_buffer(len(secret) + 1)
    ctypes.memmove(path, fine, len(fine))
    stop = False
    def flip():
        while not stop:  # (ctypes lets go of the GIL: a real race with the open)
            ctypes.memmove(path, secret, len(secret))
            ctypes.memmove(path, fine, len(fine))
    racer = threading.Thread(target=flip)
    racer.start()
    got = {"FINE": 0, "SECRET": 0, "refused": 0}
    for _ in range(300):
        fd = libc.open(path, os.O_RDONLY)
        if fd < 0:
            got["refused"] += 1
            continue
        got[os.read(fd, 10).decode()] += 1
        os.close(fd)
    stop = True
    racer.join()
    print(got["SECRET"], got["FINE"] > 0, got["refused"] > 0)
""")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "fine.txt").write_text("FINE")  # (made by the test: opening the secret
    (tmp_path / "secret.txt").write_text("SECRET")  # one is what the callback refuses)
    return str(tmp_path)


def test_a_path_rewritten_during_the_check_never_opens_the_refused_file(files):
    policy_fn = Files(refused="secret.txt")
    result = Sandbox(policy_fn=policy_fn, events={"file"}).run([PY, "-c", RACER, files], timeout=120)
    secrets, fine, refused = result.stdout.decode().split()
    assert (secrets, fine, refused) == ("0", "True", "True"), result.stderr
    # Control: nothing refused, the racer reaches the secret file, so a 0 above is real.
    result = Sandbox(policy_fn=Files(), events={"file"}).run([PY, "-c", RACER, files], timeout=120)
    assert int(result.stdout.decode().split()[0]) > 0, result.stderr


def test_without_asking_there_are_no_file_events():
    policy_fn = Files()
    assert Sandbox(policy_fn=policy_fn).run(["cat", "/etc/hostname"]).exit_code == 0
    assert policy_fn.events == []


@pytest.mark.parametrize("events, policy_fn", [({"files"}, Files()), ("file", Files()),
                                                ({"file"}, None)])
def test_what_events_refuses(events, policy_fn):
    with pytest.raises(PolicyError):
        Sandbox(policy_fn=policy_fn, events=events)
