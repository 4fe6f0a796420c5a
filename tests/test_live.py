"""Long-lived sandboxes (``with Sandbox(policy) as sb:``): commands started with exec,
calls and clones share one sandbox (its supervisor, network policy and limits);
pause stops everything, resume restarts it; leaving the block, kill() and a timeout
end every process. Real confined processes throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from httpservers import Upstream

from sandlock import Policy, Sandbox, SetupError
from sandlock.kernel import landlock

BUSY = [sys.executable, "-c", "while True: pass"]


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_exec_returns_a_handle_with_the_commands_exit_status():
    with Sandbox(Policy()) as sb:
        first = sb.exec(["sh", "-c", "exit 3"])
        missing = sb.exec(["no-such-command-here"])
        assert first.pid > 0 and first.wait(10) == 3
        assert missing.wait(10) == 127 and "No such file" in missing.start_error
        assert sb.wait(10) == 3  # the first exec'd command's


def test_processes_of_one_sandbox_share_it(tmp_path):
    """Same PID namespace (they see each other), same filesystem policy."""
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_text("not for the sandbox")
    policy = Policy(fs_readable=["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc"],
                    fs_writable=[str(tmp_path)])
    with Sandbox(policy) as sb:
        sleeper = sb.exec(["sleep", "30"])
        out = tmp_path / "out"
        with open(out, "wb") as file:
            lister = sb.exec(["sh", "-c", f"ls /proc | grep -c '^[0-9]'; touch {tmp_path}/ok; "
                              f"cat {secret}"], stdout=file.fileno(), stderr=file.fileno())
            assert lister.wait(10) == 1
        # init, the resident, sleep, sh, ls, grep: one namespace for all
        count, denied = out.read_text().split("\n", 1)
        assert int(count) >= 5 and "Permission denied" in denied
        assert (tmp_path / "ok").exists()
        sleeper.kill()
        assert sleeper.wait(10) == 137


def test_every_process_is_held_to_the_sandboxs_network_policy(upstreams):
    allowed, denied = upstreams
    fetch = ["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"]
    with Sandbox(Policy(net_allow=[f"127.0.0.2:{allowed.port}"]), quiet=True) as sb:
        ok = sb.exec([*fetch, f"http://127.0.0.2:{allowed.port}/a"])
        refused = sb.exec([*fetch, f"http://127.0.0.3:{denied.port}/b"])
        assert (ok.wait(20), refused.wait(20)) == (0, 7)
    assert allowed.paths() == ["/a"] and denied.paths() == []


def test_pause_stops_every_process_and_resume_restarts_them():
    with Sandbox(Policy()) as sb:
        busy = [sb.exec(BUSY) for _ in range(2)]
        time.sleep(0.3)
        sb.pause()
        before = [cpu_ticks(p.pid) for p in busy]
        time.sleep(0.5)
        assert [cpu_ticks(p.pid) for p in busy] == before
        with pytest.raises(RuntimeError, match="paused"):
            sb.exec(["true"])
        sb.resume()
        time.sleep(0.5)
        assert all(cpu_ticks(p.pid) > ticks for p, ticks in zip(busy, before))


def test_a_process_forked_during_pause_is_stopped_too():
    forker = [sys.executable, "-c", "import os\nwhile True:\n    if os.fork() == 0: os._exit(0)\n"
              "    os.wait()"]
    with Sandbox(Policy()) as sb:
        sb.exec(forker)
        time.sleep(0.2)
        sb.pause()
        proc = sb._live._process.pauser._pause_fd
        states = set()
        for pid in (name for name in os.listdir(proc) if name.isdigit() and name != "1"):
            try:
                with open(f"{pid}/stat", opener=lambda path, flags: os.open(path, flags, dir_fd=proc)) as f:
                    states.add(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass
        assert states <= {"T", "t", "Z"}, states
        sb.resume()


def test_leaving_the_block_kills_and_reaps_everything():
    with Sandbox(Policy()) as sb:
        started = [sb.exec(["sleep", "1000"]), sb.exec(["sh", "-c", "setsid sleep 1000 & wait"])]
        pids = [p.pid for p in started]
    assert not any(map(alive, pids))
    assert [p.returncode for p in started] == [137, 137]


def test_kill_ends_the_sandbox():
    with Sandbox(Policy()) as sb:
        sleeper = sb.exec(["sleep", "1000"])
        sb.kill()
        assert sleeper.returncode == 137 and not alive(sleeper.pid)
        with pytest.raises(RuntimeError, match="over"):
            sb.exec(["true"])


def test_wait_past_its_timeout_kills_the_sandbox():
    with Sandbox(Policy()) as sb:
        sleeper = sb.exec(["sleep", "1000"])
        started = time.monotonic()
        assert sb.wait(0.5) == 124
        assert time.monotonic() - started < 5 and sleeper.returncode == 137


def test_a_call_in_a_running_sandbox():
    with Sandbox(Policy()) as sb:
        result = sb.call(os.getpid)
        assert result.success and 2 <= result.value < 100  # a pid in the sandbox's namespace
        with pytest.raises(TypeError, match="^fn: .*module level"):
            sb.call(lambda: 1)
        assert sb.wait(5) is None  # nothing left behind by the refused call


def test_the_process_cap_holds_across_exec():
    with Sandbox(Policy(max_processes=3), quiet=True) as sb:  # the resident is one of them
        sleepers = [sb.exec(["sleep", "30"]) for _ in range(2)]
        refused = sb.exec(["true"])
        assert refused.returncode == 125 and "Resource temporarily unavailable" in refused.start_error
        for sleeper in sleepers:
            sleeper.kill()


def test_init_failing_is_a_setup_error():
    def init():
        raise ValueError("no model")

    with pytest.raises(SetupError, match="init\\(\\) raised ValueError: no model"):
        with Sandbox(Policy(), init, lambda: 1):
            pass


# (fork outside a block runs the sandbox for its clones alone: test_upstream_spellings.py)
@pytest.mark.parametrize("method,args", [("exec", (["true"],)), ("pause", ()), ("resume", ()),
                                         ("wait", ()), ("kill", ()), ("sandbox", (Policy(),))])
def test_methods_need_a_running_sandbox(method, args):
    with pytest.raises(RuntimeError, match=f"{method}\\(\\) needs a running sandbox"):
        getattr(Sandbox(Policy()), method)(*args)


def sockets():
    found = []
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                found.append(fd)
        except FileNotFoundError:
            pass
    return found


def test_the_residents_control_socket_is_out_of_reach():
    """Neither an exec'd command nor a call holds a socket: nothing can speak to
    sandlock for the resident."""
    with Sandbox(Policy()) as sb, tempfile.TemporaryFile() as out:
        assert sb.call(sockets).value == []
        sb.exec(["sh", "-c", "ls -l /proc/$$/fd | grep -c socket"], stdout=out.fileno()).wait(10)
        out.seek(0)
        assert out.read() == b"0\n"


# Run by sb.exec and sb.call: every other process of the sandbox it can see (the resident,
# which is a fork of the embedding program, and a sibling) tried the ways one process reads
# another's memory or takes its descriptors; then the same against a child of its own.
REACH = textwrap.dedent("""
    import ctypes, errno, json, os, time
    libc = ctypes.CDLL(None, use_errno=True)
    long = ctypes.c_long

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    def code(call):
        try:
            call()
            return "ok"
        except OSError as exc:
            return errno.errorcode[exc.errno]

    def syscall(*args):
        if libc.syscall(*map(long, args)) < 0:
            raise OSError(ctypes.get_errno(), "")

    def mem(pid):  # (the open is what is checked)
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))

    def environ(pid):
        with open(f"/proc/{pid}/environ", "rb") as f:
            f.read(1)

    def vm_read(pid):
        buf = ctypes.create_string_buffer(8)
        local, remote = IoVec(ctypes.addressof(buf), 8), IoVec(ctypes.addressof(buf), 8)
        if libc.syscall(long(310), long(pid), ctypes.byref(local), long(1), ctypes.byref(remote),
                        long(1), long(0)) < 0:
            raise OSError(ctypes.get_errno(), "")

    def getfd(pid):
        pidfd = os.pidfd_open(pid)
        try:
            syscall(438, pidfd, 0, 0)
        finally:
            os.close(pidfd)

    def probe(pid):
        return {way.__name__: code(lambda: way(pid)) for way in (mem, environ, vm_read, getfd)}

    me = os.getpid()
    others = {pid: probe(pid) for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
              if pid not in (me, 1)}
    child = os.fork()
    if child == 0:
        time.sleep(5)
        os._exit(0)
    own = probe(child)
    os.kill(child, 9)
    print(json.dumps({"others": list(others.values()), "own": own}))
""")


def reach():
    """REACH, as a call's function."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(REACH, {})
    return out.getvalue()


def test_no_process_of_a_running_sandbox_reaches_the_resident_or_another():
    # The resident holds a copy of this program's memory (this secret too) and its socket
    # to sandlock, over which a forged "pid" would make sandlock signal any process.
    secret = "sk-" + "not-for-the-sandbox" * 2  # noqa: F841 - here to be looked for
    with Sandbox(Policy()) as sb, tempfile.TemporaryFile() as out:
        sibling = sb.exec(["sleep", "30"])
        prober = sb.exec([sys.executable, "-c", REACH], stdout=out.fileno())
        assert prober.wait(20) == 0
        out.seek(0)
        seen = json.loads(out.read())
        called = json.loads(sb.call(reach).value)
        sibling.kill()
    for got in (seen, called):
        assert len(got["others"]) >= 2, got  # the resident and the sibling (and the prober)
        for probes in got["others"]:
            assert set(probes.values()) <= {"EPERM", "EACCES"}, got
        assert got["own"] == {"mem": "ok", "environ": "ok", "vm_read": "ok", "getfd": "ok"}, got


def signal_everyone() -> dict:
    """SIGKILL to the resident (this call's parent) and to every process this one may
    signal (kill(-1)); and, the control, to a child of its own."""
    said = {}
    try:
        os.kill(os.getppid(), 9)
        said["resident"] = "sent"
    except PermissionError:
        said["resident"] = "EPERM"
    os.kill(-1, 9)  # (0 even when every process it met said EPERM)
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    os.kill(child, 9)
    said["child"] = os.waitpid(child, 0)[1]
    return said


@pytest.mark.skipif(landlock.abi_version() < 6, reason="Landlock's signal scope is Linux 6.12's")
def test_no_process_of_a_running_sandbox_can_end_it_or_another_by_a_signal():
    with Sandbox(Policy()) as sb:
        sibling = sb.exec(["sleep", "30"])
        assert sb.call(signal_everyone).value == {"resident": "EPERM", "child": 9}
        assert sb.call(os.getpid).success  # the resident serves on
        assert sibling.is_running  # (its end would have been heard before that call's)
        sibling.kill()


def test_no_process_of_a_running_sandbox_reaches_the_resident_as_an_unprivileged_user(as_nobody):
    embedder = textwrap.dedent("""
        import sys, tempfile
        from sandlock import Policy, Sandbox
        with Sandbox(Policy()) as sb, tempfile.TemporaryFile() as out:
            sb.exec([sys.executable, "-c", sys.argv[1]], stdout=out.fileno()).wait(20)
            out.seek(0)
            print(out.read().decode())
    """)
    result = subprocess.run(as_nobody([sys.executable, "-c", embedder, REACH]), capture_output=True,
                            text=True, cwd=tempfile.gettempdir(), timeout=60)
    got = json.loads(result.stdout)
    assert got["others"] and all(set(probes.values()) <= {"EPERM", "EACCES"}
                                 for probes in got["others"]), got
    assert set(got["own"].values()) == {"ok"}, got


SIGNALLER = textwrap.dedent("""
    import os
    try:
        os.kill(os.getppid(), 9)
        print("sent")
    except PermissionError:
        print("EPERM")
    os.kill(-1, 9)
""")


@pytest.mark.skipif(landlock.abi_version() < 6, reason="Landlock's signal scope is Linux 6.12's")
def test_no_process_of_a_running_sandbox_ends_it_by_a_signal_as_an_unprivileged_user(as_nobody):
    embedder = textwrap.dedent("""
        import sys, tempfile
        from sandlock import Policy, Sandbox
        with Sandbox(Policy()) as sb, tempfile.TemporaryFile() as out:
            sibling = sb.exec(["sleep", "30"])
            sb.exec([sys.executable, "-c", sys.argv[1]], stdout=out.fileno()).wait(20)
            after = sb.exec(["true"]).wait(10)  # the resident serves on
            out.seek(0)
            print(out.read().decode().strip(), after, sibling.is_running)
            sibling.kill()
    """)
    result = subprocess.run(as_nobody([sys.executable, "-c", embedder, SIGNALLER]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.split() == ["EPERM", "0", "True"], result.stderr


UNPRIVILEGED = textwrap.dedent("""
    import os, time
    from sandlock import Policy, Sandbox
    def work():
        return int(os.environ["CLONE_ID"])
    with Sandbox(Policy(), None, work) as sb:
        p = sb.exec(["sh", "-c", "exit 4"])
        clones = sb.fork(3)
        sb.pause(); sb.resume()
        print(p.wait(10), sorted(c.wait(10) for c in clones), sorted(c.value for c in clones))
""")


def test_a_running_sandbox_as_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([sys.executable, "-c", UNPRIVILEGED]), capture_output=True,
                            text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.strip() == "4 [0, 0, 0] [0, 1, 2]", result.stderr



EMBEDDER_DIES = textwrap.dedent("""
    import os, signal
    from sandlock import Policy, Sandbox
    sb = Sandbox(Policy()).__enter__()
    print(sb.exec(["sleep", "1000"]).pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_the_sandbox_ends_when_the_embedding_process_is_killed():
    embedder = subprocess.run([sys.executable, "-c", EMBEDDER_DIES], capture_output=True, text=True,
                              timeout=60)
    assert embedder.returncode == -9
    sleeper = int(embedder.stdout)
    deadline = time.monotonic() + 5
    while alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(sleeper)


def test_sandbox_takes_policy_fields():
    sandbox = Sandbox(fs_readable=["/usr"], max_processes=5)
    assert sandbox.policy == Policy(fs_readable=["/usr"], max_processes=5)
    with pytest.raises(Exception, match="fs_readabel"):
        Sandbox(fs_readabel=["/usr"])


def leaves_a_child_behind() -> str:
    if os.fork() == 0:  # holds the call's stdout, in the call's process group
        time.sleep(30)
        os._exit(0)
    print("parent done", flush=True)
    return "done"


def test_a_calls_processes_end_with_it():
    with Sandbox(Policy()) as sb:
        started = time.monotonic()
        result = sb.call(leaves_a_child_behind)
        assert (result.value, result.stdout) == ("done", b"parent done\n")
        assert time.monotonic() - started < 5
        time.sleep(0.2)
        assert sb.call(processes_inside).value == 3  # init, the resident, this call


def processes_inside() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def test_http_rules_hold_for_every_process_of_the_sandbox():
    from httpservers import free_port_on

    port = free_port_on("127.0.0.2")
    with Upstream("127.0.0.2", port, name="api") as api:
        policy = Policy(resolve=["api.test=127.0.0.2"], http_ports=[port], https_inspect="off",
                        http_allow=["GET api.test/ok"])
        with Sandbox(policy, quiet=True) as sb, tempfile.TemporaryFile() as out:
            fetch = ["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code} "]
            first = sb.exec([*fetch, f"http://api.test:{port}/ok"], stdout=out.fileno())
            second = sb.exec([*fetch, f"http://api.test:{port}/secret"], stdout=out.fileno())
            assert (first.wait(20), second.wait(20)) == (0, 0)
            out.seek(0)
            assert sorted(out.read().split()) == [b"200", b"403"]
        assert api.paths() == ["/ok"]
