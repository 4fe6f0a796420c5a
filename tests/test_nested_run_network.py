"""`sandlock run --net-allow ...` inside `sandlock run`: the inner run registers its
rules with the enclosing sandbox's supervisor, which judges the threads the inner
keeper vouches for by both. Anything in the sandbox may register, so a registration
can only ever narrow: a hostile one is tried here too. Real curl against real
loopback servers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from conftest import PYTHON, SANDLOCK, sandlock

ROOT = str(Path(__file__).resolve().parent.parent)
SYSTEM = ["/usr", "/lib", "/lib64", "/bin", "/etc", *PYTHON]
READS = [f"--fs-read={path}" for path in SYSTEM]
INNER = [sys.executable, "-m", "sandlock", "run", *READS]


def curl(url: str) -> str:
    return f"curl -s -m 5 -o /dev/null -w '%{{http_code}} ' {url}"


def env() -> dict[str, str]:
    values = {**os.environ, "SANDLOCK_FS_READ": ROOT}
    values.pop("SANDLOCK_FS_WRITE", None)  # (the suite's: all of pytest's temporary tree)
    return values


def outer(upstreams, *options: str, inner: list[str], script: str, **kwargs: object):
    """`sandlock run` allowing both upstreams, then sh -c SCRIPT in it, where $INNER is
    `sandlock run INNER-OPTIONS`."""
    a, b = upstreams
    rules = ["--net-allow", f"127.0.0.2:{a.port}", "--net-allow", f"127.0.0.3:{b.port}"]
    inner_run = " ".join([*INNER, *inner])
    return sandlock("run", *READS, "-r", ROOT, *rules, *options, "--", "sh", "-c",
                    script.replace("$INNER", inner_run), env=env(), cwd=tempfile.gettempdir(),
                    **kwargs)


def urls(upstreams) -> tuple[str, str]:
    a, b = upstreams
    return f"http://127.0.0.2:{a.port}/a", f"http://127.0.0.3:{b.port}/b"


def test_an_inner_run_narrows_the_outer_network(upstreams):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    result = outer(upstreams, "-q", inner=["--net-allow", f"127.0.0.2:{a.port}"],
                   script=f"$INNER -- sh -c \"{curl(url_a)}; {curl(url_b)}\"; {curl(url_b)}")
    assert result.stdout == "200 000 200 ", result.stderr  # the outer's own: both
    assert a.paths() == ["/a"] and b.paths() == ["/b"]


def test_an_inner_run_never_widens_the_outer_network(upstreams):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    result = sandlock("run", *READS, "-r", ROOT, "-q", "--net-allow", f"127.0.0.2:{a.port}", "--",
                      *INNER, "--net-allow", "127.0.0.0/8", "--", "sh", "-c",
                      f"{curl(url_a)}; {curl(url_b)}", env=env(), cwd=tempfile.gettempdir())
    assert result.stdout == "200 000 ", result.stderr
    assert b.paths() == []


def test_the_inner_command_cannot_signal_its_keeper(upstreams):
    (a, _), (url_a, url_b) = upstreams, urls(upstreams)
    result = outer(upstreams, "-q", inner=["--net-allow", f"127.0.0.2:{a.port}"],
                   script=f"$INNER -- sh -c \"kill -9 \\$PPID; {curl(url_a)}; {curl(url_b)}\"")
    assert "Operation not permitted" in result.stderr
    assert result.stdout == "200 000 ", result.stderr


# A process of the outer sandbox that registers rules allowing everything, and answers
# every question with "yes, that thread is mine": it may only narrow.
HOSTILE = textwrap.dedent("""
    import json, socket, sys
    theirs, mine = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    service = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    service.connect(b"\\0sandlock-nesting")
    rules = json.loads(sys.argv[1])
    socket.send_fds(service, [json.dumps(rules).encode()], [theirs.fileno()])
    reply = service.recv(100).decode()
    print(reply, flush=True)
    theirs.close()
    while reply == "ok":
        question, fds, _, _ = socket.recv_fds(mine, 32, 1)
        if not question:
            break
        mine.send(question[1:] + b" " + (sys.argv[2] if len(sys.argv) > 2 else "0").encode())
""")


def test_a_hostile_registration_only_narrows(upstreams, tmp_path):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    hostile = tmp_path / "hostile.py"
    hostile.write_text(HOSTILE)
    everything = '{"allow": ["*"], "deny": [], "bind": []}'
    result = outer(upstreams, "-q", "-r", str(tmp_path),
                   inner=["--net-allow", f"127.0.0.2:{a.port}"],
                   script=(f"{sys.executable} {hostile} '{everything}' & sleep 1; "
                           f"$INNER -- sh -c \"{curl(url_a)}; {curl(url_b)}\"; kill %1"))
    assert result.stdout.split() == ["ok", "200", "000"], result.stderr
    assert b.paths() == []


IMPOSTOR = textwrap.dedent("""
    import socket, sys, time
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(b"\\0sandlock-nesting")
    server.listen()
    print("bound", flush=True)
    while True:
        connection, _ = server.accept()
        connection.recv(1 << 16)
        connection.send(b"ok")  # "registered": the rules would be lost
""")


def test_a_process_that_binds_the_registration_name_gets_no_registration(upstreams, tmp_path):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    impostor = tmp_path / "impostor.py"
    impostor.write_text(IMPOSTOR)
    result = outer(upstreams, "-q", "-r", str(tmp_path),
                   inner=["--net-allow", f"127.0.0.2:{a.port}"],
                   script=(f"{sys.executable} {impostor} & sleep 1; "
                           f"$INNER -- sh -c \"{curl(url_a)}; {curl(url_b)}\"; kill %1"))
    assert result.stdout.split() == ["bound", "200", "000"], result.stderr
    assert b.paths() == []


def test_a_registration_cannot_make_threads_fail(upstreams, tmp_path):
    """A fake keeper that answers ESRCH (thread gone) for every thread: from an untrusted
    one, that is only "not mine". (The curl runs in an inner run of the outer's network:
    under a filter of its own, so that the supervisor asks about it.)"""
    url_a, _ = urls(upstreams)
    hostile = tmp_path / "hostile.py"
    hostile.write_text(HOSTILE)
    rules = '{"allow": [], "deny": [], "bind": []}'
    result = outer(upstreams, "-q", "-r", str(tmp_path), inner=["--net-allow", "'*'"],
                   script=(f"{sys.executable} {hostile} '{rules}' 3 & sleep 1; "
                           f"$INNER -- {curl(url_a)}; kill %1"))
    assert result.stdout.split() == ["ok", "200"], result.stderr


def test_a_malformed_registration_is_refused(upstreams, tmp_path):
    hostile = tmp_path / "hostile.py"
    hostile.write_text(HOSTILE)
    bad = '{"allow": ["tcp://"], "deny": [], "bind": []}'
    result = outer(upstreams, "-q", "-r", str(tmp_path), inner=[],
                   script=f"{sys.executable} {hostile} '{bad}'")
    assert result.stdout.startswith("error - no target after the scheme"), result.stderr


def test_network_rules_inside_need_isolated_signals(upstreams):
    result = outer(upstreams, inner=["--allow-ipc", "--net-allow", "127.0.0.2:80", "--", "true"],
                   script="$INNER")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("sandlock: error: --allow-ipc"), result.stderr


def test_an_inner_run_with_network_rules_as_an_unprivileged_user(upstreams, as_nobody):
    (a, _), (url_a, url_b) = upstreams, urls(upstreams)
    inner = " ".join([*INNER, "--net-allow", f"127.0.0.2:{a.port}"])
    argv = [*SANDLOCK, "run", *READS, "-r", ROOT, "-q", "--net-allow", "127.0.0.0/8", "--",
            "sh", "-c", f"{inner} -- sh -c \"{curl(url_a)}; {curl(url_b)}\""]
    result = subprocess.run(as_nobody(argv), capture_output=True, text=True, env=env(),
                            cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout == "200 000 ", result.stderr


def test_an_inner_run_narrows_the_outer_http_rules():
    from httpservers import Upstream, free_port_on

    port = free_port_on("127.0.0.2")
    with Upstream("127.0.0.2", port, name="api") as api:
        url = f"http://api.test:{port}"
        result = sandlock("run", *READS, "-r", ROOT, "-q", "--resolve", "api.test=127.0.0.2",
                          "--http-port", str(port), "--http-allow", "GET api.test/*", "--",
                          *INNER, "--http-allow", "GET api.test/public/*", "--", "sh", "-c",
                          f"{curl(url + '/public/x')}; {curl(url + '/private')}",
                          env=env(), cwd=tempfile.gettempdir())
        assert result.stdout == "200 403 ", result.stderr
    assert api.paths() == ["/public/x"]


CALL_INSIDE = textwrap.dedent("""
    import socket, sys
    from sandlock import Policy, Sandbox

    def reach(port):
        with socket.socket() as sock:
            return [sock.connect_ex((host, port)) for host in ("127.0.0.2", "127.0.0.3")]

    a, b = map(int, sys.argv[1:])
    policy = Policy(fs_readable=["/usr", "/lib", "/lib64", "/bin", "/etc", "/tmp"],
                    net_allow=[f"127.0.0.2:{a}"])
    print(Sandbox(policy).call(reach, args=(a,)).value[0],
          Sandbox(policy).call(reach, args=(b,)).value[1])
""")


def test_a_call_inside_a_sandbox_keeps_its_network_rules(upstreams, tmp_path):
    """Sandbox.call in a sandboxed program: the function runs in a fork of its keeper's
    child, where the keeper's question socket is /dev/null by then."""
    a, b = upstreams
    script = tmp_path / "call.py"
    script.write_text(CALL_INSIDE)
    # (-r /proc: a call's process lists its descriptors there before it confines itself)
    result = outer(upstreams, "-q", "-r", str(tmp_path), "-r", "/proc", inner=[],
                   script=f"{sys.executable} {script} {a.port} {b.port}")
    assert result.stdout.split() == ["0", "13"], result.stderr
