"""Sandbox.call: a Python function run in a confined copy of the caller. Real forks,
real confinement: values come back pickled, exceptions as CallError, limits and
timeouts end the call, the network and the filesystem are the policy's, and the
caller's threads and descriptors cannot get in the way."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
from httpservers import Upstream

from sandlock import Policy, PolicyError, Sandbox

STATE = {"loaded": list(range(100_000))}  # what a real caller would have loaded


def total(extra: int) -> int:
    return sum(STATE["loaded"]) + extra


def test_the_function_sees_the_callers_data_as_it_is_at_the_call():
    STATE["late"] = "set after import"
    result = Sandbox(Policy()).call(lambda: (total(1), STATE["late"], os.getpid()))
    assert result.success, result.error
    value_total, late, pid = result.value
    assert (value_total, late) == (sum(range(100_000)) + 1, "set after import")
    assert pid != os.getpid() and result.exit_code == 0 and result.error is None


def test_arguments_output_and_environment():
    def greet(name, *, punctuation):
        print(f"hello {name}{punctuation}")
        print("warning", file=sys.stderr)
        return os.environ.get("GREETING")

    result = Sandbox(Policy(env={"GREETING": "hi"})).call(greet, args=("you",),
                                                          kwargs={"punctuation": "!"})
    assert (result.value, result.stdout, result.stderr) == ("hi", b"hello you!\n", b"warning\n")


def test_an_exception_is_an_error_result_with_its_traceback():
    def fails():
        raise KeyError("missing")

    result = Sandbox(Policy()).call(fails)
    assert not result.success and result.exit_code == 1 and result.value is None
    assert (result.error.type, result.error.message) == ("KeyError", "'missing'")
    assert result.error.traceback.startswith("Traceback (most recent call last):\n  File "
                                             f"\"{__file__}\"")  # fn's frame first: none of sandlock's
    assert "in fails" in result.error.traceback and str(result.error) == "KeyError: 'missing'"


def test_an_unpicklable_value_is_an_error_result_not_a_crash():
    result = Sandbox(Policy()).call(lambda: threading.Lock())
    assert not result.success and result.exit_code == 3
    assert "cannot be pickled" in result.error.message


def test_exit_statuses_are_those_of_the_function_process():
    sandbox = Sandbox(Policy())
    assert sandbox.call(sys.exit, args=(4,)).exit_code == 4
    ended = sandbox.call(os._exit, args=(0,))
    assert not ended.success and ended.error.type == "SystemExit"
    killed = sandbox.call(os.kill, args=(0, 9))
    assert killed.exit_code == 137 and killed.error.type == "Killed"


def test_a_timeout_kills_the_call_and_everything_it_started(tmp_path):
    marker = tmp_path / "child-alive"

    def sleeps():
        if os.fork() == 0:
            time.sleep(1.5)
            marker.write_text("still here")
            os._exit(0)
        time.sleep(30)

    started = time.monotonic()
    result = Sandbox(Policy(fs_writable=[str(tmp_path)])).call(sleeps, timeout=0.5)
    assert time.monotonic() - started < 5
    assert result.timed_out and result.exit_code == 124 and result.error.type == "TimeoutExpired"
    time.sleep(2)
    assert not marker.exists()


def _leaves_its_output_held():
    print("before", flush=True)
    subprocess.Popen(["setsid", "sleep", "60"])  # its own session: out of the call's group
    return "value"


def test_a_call_returns_though_what_it_left_holds_its_output_open():
    """In a running sandbox, a call whose function left a process holding its stdout,
    out of the call's process group (which dies with the call): the call still returns,
    its value and what it printed collected; what is left is given a grace second, not
    waited for."""
    with Sandbox(Policy()) as sb:
        done: list = []
        caller = threading.Thread(target=lambda: done.append(sb.call(_leaves_its_output_held)))
        caller.start()
        caller.join(30)
        assert done, "the call did not return while its leftover held its output"
        assert done[0].value == "value" and done[0].stdout == b"before\n"


def test_a_memory_limit_ends_the_call(capfd):
    def grows():
        blocks = []
        while True:
            blocks.append(bytearray(1 << 20))

    result = Sandbox(Policy(max_memory="64M")).call(grows)
    assert result.exit_code == 137 and not result.success
    assert "memory limit 64M exceeded" in capfd.readouterr().err


def test_the_filesystem_is_the_policys(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("key")
    result = Sandbox(Policy(fs_readable=["/usr"])).call(secret.read_text)
    assert result.error.type == "PermissionError"
    allowed = Sandbox(Policy(fs_readable=["/usr", str(tmp_path)])).call(secret.read_text)
    assert allowed.value == "key"


@pytest.fixture
def upstream():
    with Upstream("127.0.0.2") as server:
        yield server


def fetch(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.2:{port}/x", timeout=5) as response:
        return response.read().decode()


def test_network_denied_inside_unless_the_policy_allows_it(upstream):
    # A default-workspace Policy() allowing no network: the sandbox's own network
    # namespace, where nothing listens (docs/usage.md "A private loopback").
    private = Sandbox(Policy(), quiet=True).call(fetch, args=(upstream.port,))
    assert not private.success and "Connection refused" in private.error.message
    denied = Sandbox(Policy(net_private_loopback=False), quiet=True).call(fetch, args=(upstream.port,))
    assert not denied.success and "Permission denied" in denied.error.message
    assert upstream.paths() == []
    allowed = Sandbox(Policy(net_allow=[f"127.0.0.2:{upstream.port}"])).call(fetch, args=(upstream.port,))
    assert allowed.value == "127.0.0.2 GET /x\n"
    assert upstream.paths() == ["/x"]


def test_the_callers_descriptors_are_dev_null_inside(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("opened by the caller before the call")
    with open(secret, "rb") as held, socket.socket() as sock:
        def peek():
            return os.read(held.fileno(), 100), os.readlink(f"/proc/self/fd/{sock.fileno()}")

        result = Sandbox(Policy()).call(peek)
    assert result.value == (b"", "/dev/null")


def test_the_function_holds_nothing_but_its_stdio_and_result_pipe():
    def descriptors():
        targets = set()
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                targets.add(os.readlink(f"/proc/self/fd/{fd}").split("[")[0])
            except FileNotFoundError:
                pass  # the listing's own descriptor, gone once listed
        return sorted(targets)

    assert Sandbox(Policy()).call(descriptors).value == ["/dev/null", "pipe:"]


def test_a_caller_with_busy_threads_and_held_locks():
    held = threading.Lock()
    held.acquire()  # held by the caller all along: the call never needs it
    stop = threading.Event()

    def chatter():
        while not stop.is_set():
            sys.stdout.write("")  # the caller's stdout lock, taken and released
            time.sleep(0)

    threads = [threading.Thread(target=chatter) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        sandbox = Sandbox(Policy())
        results = [sandbox.call(print, args=(n,), timeout=20) for n in range(10)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        held.release()
    assert [r.stdout for r in results] == [b"%d\n" % n for n in range(10)]


@pytest.mark.parametrize("kwargs,name", [
    ({"fn": 3}, "fn"), ({"fn": print, "args": 3}, "args"), ({"fn": print, "kwargs": [1]}, "kwargs"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(TypeError, match=f"^{name}:"):
        Sandbox(Policy()).call(**kwargs)


def test_a_bad_timeout_names_itself():
    with pytest.raises(PolicyError, match="timeout"):
        Sandbox(Policy()).call(print, timeout=-1)


CALLER = textwrap.dedent("""
    import os
    from sandlock import Policy, Sandbox
    result = Sandbox(Policy()).call(lambda: (os.getuid(), open("/etc/hostname").read() != ""))
    print(result.value, result.success)
""")


def test_call_as_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([sys.executable, "-c", CALLER]), capture_output=True,
                            text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.strip() == "(65534, True) True", result.stderr


def test_a_hostile_function_cannot_run_code_in_the_caller(tmp_path):
    """The function may run untrusted code, which can write any bytes to the result
    pipe: a pickle that would call os.system when loaded must not be loaded."""
    marker = tmp_path / "pwned"
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."

    def hostile():
        for fd in range(3, 64):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    os.write(fd, payload)
            except OSError:
                pass
        os._exit(0)

    result = Sandbox(Policy()).call(hostile)
    assert not marker.exists()
    assert not result.success and "os.system is not a plain type" in result.error.message


class Custom:
    pass


def test_values_of_plain_types_come_back_and_others_are_refused():
    import datetime
    import decimal

    value = {"n": [1, 2.5, 3j], "s": {"a", frozenset("b")}, "b": bytearray(b"x"), "t": (None, True),
             "when": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
             "d": decimal.Decimal("1.1")}
    assert Sandbox(Policy()).call(lambda: value).value == value
    refused = Sandbox(Policy()).call(Custom)
    assert not refused.success and refused.exit_code == 0
    assert "test_call.Custom is not a plain type" in refused.error.message
