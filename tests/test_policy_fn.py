"""policy_fn: the embedding program hears of the command's network calls, execs and
processes, answers each, and tightens the running sandbox. Real confined programs
(sh, python, curl, a C racer) against real loopback servers."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
from dnsserver import FakeDns

from sandlock import Event, Policy, Sandbox

PY = sys.executable
SYSTEM = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
SYSTEM_PY = "/usr/bin/python3"  # (the test venv's interpreter reads files outside SYSTEM)


def fetch(host: str, port: int) -> str:
    """A python3 snippet printing what a connect to host:port came to."""
    return (f"import socket\ntry:\n    socket.create_connection(({host!r}, {port}), timeout=5).close()\n"
            f"    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)")


class Recorder:
    """A policy_fn that records every event (thread-safe: it is called from several
    threads) and answers with ``decide(event, ctx)``."""

    def __init__(self, decide=lambda event, ctx: 0) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._decide = decide

    def __call__(self, event: Event, ctx) -> object:
        with self._lock:
            self.events.append(event)
        return self._decide(event, ctx)

    def of(self, syscall: str) -> list[Event]:
        return [event for event in self.events if event.syscall == syscall]


# --- Figure 2 ----------------------------------------------------------------------


def test_figure_2_audit_curl_then_cut_the_network(upstreams, tmp_path):
    allowed, _ = upstreams
    audit = tmp_path / "audit.jsonl"

    def on_event(event, ctx):
        if event.syscall == "execve" and event.argv_contains("curl"):
            ctx.restrict_network([])  # from here on, nothing
            return "audit"
        return 0

    url = f"http://{allowed.host}:{allowed.port}/after"
    snippet = fetch(allowed.host, allowed.port)
    # The driver names curl only when it runs it: its own argv must not contain it.
    driver = ("import subprocess, sys\n"
              f"subprocess.run([sys.executable, '-c', {snippet!r}])\n"
              "subprocess.run(['cu' + 'rl', '-s', '-m', '5', '-o', '/dev/null', '-w', "
              f"'%{{http_code}}\\n', {url!r}])\n"
              f"subprocess.run([sys.executable, '-c', {snippet!r}])\n")
    result = Sandbox(Policy(net_allow=[f"{allowed.host}:{allowed.port}"]), audit=str(audit),
                     policy_fn=on_event, quiet=True).run([PY, "-c", driver], timeout=60)
    assert result.stdout.decode().split("\n")[:3] == ["connected", "000", f"refused {errno.EACCES}"]
    assert allowed.paths() == []  # curl never got there
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    audited = [r for r in records if r.get("event") == "policy_fn"]
    # One record per exec tried along PATH, the last one the curl that ran.
    assert {(r["verdict"], r["argv"][0]) for r in audited} == {("audit", "curl")}
    assert audited[-1]["path"] == os.path.realpath(shutil.which("curl")) or \
        audited[-1]["path"] == shutil.which("curl")


# --- verdicts -----------------------------------------------------------------------


@pytest.mark.parametrize(("verdict", "message"), [
    (True, "Operation not permitted"),
    (-1, "Operation not permitted"),
    (errno.EACCES, "Permission denied"),
    (errno.E2BIG, "Argument list too long"),
])
def test_an_exec_is_refused_with_the_errno_the_verdict_names(verdict, message):
    def decide(event, ctx):
        return verdict if event.argv == ("/bin/echo", "refused-marker") else None

    result = Sandbox(Policy(), policy_fn=Recorder(decide)).run(
        ["sh", "-c", "echo before; /bin/echo refused-marker; echo after"])
    assert result.stdout == b"before\nafter\n"
    assert message in result.stderr.decode()


@pytest.mark.parametrize("verdict", [0, False, None, "audit"])
def test_allowing_verdicts_let_the_exec_run(verdict):
    result = Sandbox(Policy(), policy_fn=Recorder(lambda e, c: verdict)).run(["/bin/echo", "ran"])
    assert (result.exit_code, result.stdout) == (0, b"ran\n")


def test_a_connect_is_refused_with_the_verdicts_errno(upstreams):
    allowed, _ = upstreams

    def decide(event, ctx):
        return errno.ECONNREFUSED if event.syscall == "connect" else 0

    recorder = Recorder(decide)
    result = Sandbox(Policy(net_allow=[f"{allowed.host}:{allowed.port}"]), policy_fn=recorder,
                     quiet=True).run([PY, "-c", fetch(allowed.host, allowed.port)])
    assert result.stdout == f"refused {errno.ECONNREFUSED}\n".encode()
    [connect] = recorder.of("connect")
    assert (connect.category, connect.ip, connect.port, connect.denied) == \
        ("network", allowed.host, allowed.port, False)


def test_network_events_carry_the_pinned_name_and_the_static_verdict(upstreams):
    allowed, denied = upstreams
    recorder = Recorder()
    with FakeDns({"web.test": [allowed.host]}) as dns:
        host, port = dns.address
        policy = Policy(net_allow=[f"web.test:{allowed.port}"], dns_servers=[f"{host}:{port}"],
                        dns_allow_private=True)
        code = f"{fetch('web.test', allowed.port)}\n{fetch(denied.host, denied.port)}"
        result = Sandbox(policy, policy_fn=recorder, quiet=True).run([PY, "-c", code])
    assert result.stdout.decode().split() == ["connected", "refused", str(errno.EACCES)]
    connects = {(e.ip, e.port): e for e in recorder.of("connect")}
    assert connects[(allowed.host, allowed.port)].host == "web.test"
    assert connects[(allowed.host, allowed.port)].denied is False
    assert connects[(denied.host, denied.port)].denied is True  # seen, refused statically
    lookups = [e for e in recorder.events if e.category == "network" and e.port == 53]
    assert lookups  # the name was looked up through sandlock's responder, seen too


def test_lookups_pass_while_anything_is_allowed_and_stop_with_the_network(upstreams):
    allowed, _ = upstreams

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("narrow",):
            ctx.restrict_network([f"web.test:{allowed.port}"])
        if event.syscall == "execve" and event.argv[-1:] == ("cut",):
            ctx.restrict_network([])
        return 0

    snippet = fetch("web.test", allowed.port)
    with FakeDns({"web.test": [allowed.host]}) as dns:
        host, port = dns.address
        policy = Policy(net_allow=[f"web.test:{allowed.port}"], dns_servers=[f"{host}:{port}"],
                        dns_allow_private=True)
        script = f"{PY} -c \"{snippet}\" narrow; {PY} -c \"{snippet}\" cut"
        result = Sandbox(policy, policy_fn=decide, quiet=True).run(["sh", "-c", script])
    narrowed, cut = result.stdout.decode().split("\n")[:2]
    assert narrowed == "connected"
    assert cut.startswith("refused")  # the lookup itself failed


def test_a_callback_cannot_widen_the_static_policy(upstreams):
    allowed, denied = upstreams

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("phase-two",):
            ctx.restrict_network([])
            ctx.grant_network([f"{denied.host}:*", f"{allowed.host}:{allowed.port}"])
        return 0

    code = f"{fetch(allowed.host, allowed.port)}\n{fetch(denied.host, denied.port)}"
    result = Sandbox(Policy(net_allow=[f"{allowed.host}:{allowed.port}"]), quiet=True,
                     policy_fn=decide).run(["sh", "-c", f"exec {PY} -c \"{code}\" phase-two"])
    assert result.stdout.decode().split() == ["connected", "refused", str(errno.EACCES)]
    assert denied.paths() == []


def test_a_restriction_can_be_per_process(upstreams):
    allowed, _ = upstreams

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("untrusted",):
            ctx.restrict_pid_network(event.pid, [])
        return 0

    snippet = fetch(allowed.host, allowed.port)
    script = f"{PY} -c \"{snippet}\" trusted; {PY} -c \"{snippet}\" untrusted; {PY} -c \"{snippet}\""
    result = Sandbox(Policy(net_allow=[f"{allowed.host}:{allowed.port}"]), quiet=True,
                     policy_fn=decide).run(["sh", "-c", script])
    assert result.stdout.decode().split("\n")[:3] == ["connected", f"refused {errno.EACCES}", "connected"]


def test_a_process_restriction_passes_to_the_processes_it_makes(upstreams):
    allowed, _ = upstreams

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv_contains("agent.sh"):
            ctx.restrict_pid_network(event.pid, [])
        return 0

    snippet = fetch(allowed.host, allowed.port)
    result = Sandbox(Policy(net_allow=[f"{allowed.host}:{allowed.port}"]), quiet=True,
                     policy_fn=decide).run(["sh", "-c", f"{PY} -c \"{snippet}\"", "agent.sh"])
    assert result.stdout == f"refused {errno.EACCES}\n".encode()


# --- processes ---------------------------------------------------------------------------


def test_a_child_forked_and_execd_at_once_is_announced_before_it_runs():
    recorder = Recorder()
    result = Sandbox(Policy(), policy_fn=recorder).run(["sh", "-c", "/bin/true & wait; echo $?"])
    assert result.stdout == b"0\n"
    made = [e for e in recorder.events if e.syscall in ("fork", "vfork", "clone")]
    [true] = [e for e in recorder.of("execve") if e.path == "/bin/true"]
    creation = [e for e in made if e.pid == true.pid]
    assert creation and creation[0].parent_pid == true.parent_pid
    assert recorder.events.index(creation[0]) < recorder.events.index(true)
    exits = [e for e in recorder.of("exit") if e.pid == true.pid]
    assert len(exits) == 1


def test_a_slow_exec_callback_holds_back_that_exec_only():
    # The callback is slow on one exec; another process's fork and execs (sleep, echo)
    # are asked about and run meanwhile.
    order = []

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("slow-marker",):
            time.sleep(1.5)
            order.append("slow answered")
        elif event.syscall == "execve" and event.argv == ("/bin/echo", "fast"):
            order.append("fast asked")
        return 0

    result = Sandbox(Policy(), policy_fn=decide).run(
        ["sh", "-c", "sh -c 'exit 3' slow-marker & sleep 0.3; /bin/echo fast; wait $!; echo $?"])
    assert result.stdout == b"fast\n3\n", result.stderr
    assert order == ["fast asked", "slow answered"]


def test_a_slow_callback_on_a_threaded_process_exec_holds_back_that_process_only():
    # The caller has another thread, held while the callback ponders its exec; another
    # process's exec is asked about and runs meanwhile. Then the held thread is let go
    # with the exec refused, and the process goes on.
    order = []

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("slow-marker",):
            time.sleep(1.5)
            order.append("slow answered")
            return True
        if event.syscall == "execve" and event.argv == ("/bin/echo", "fast"):
            order.append("fast asked")
        return 0

    threaded = ("import os, threading, time\n"
                "ticks = []\n"
                "threading.Thread(target=lambda: [ticks.append(time.sleep(0.01)) "
                "for _ in iter(int, 1)], daemon=True).start()\n"
                "try:\n"
                "    os.execv('/bin/echo', ['/bin/echo', 'slow-marker'])\n"
                "except PermissionError:\n"
                "    before = len(ticks); time.sleep(0.2)\n"
                "    print('refused, thread running:', len(ticks) > before)")
    result = Sandbox(Policy(), policy_fn=decide).run(
        ["sh", "-c", f"{SYSTEM_PY} -c \"{threaded}\" & sleep 0.3; /bin/echo fast; wait"],
        timeout=60)
    assert result.stdout == b"fast\nrefused, thread running: True\n", result.stderr
    assert order == ["fast asked", "slow answered"]


def test_every_end_that_came_during_the_run_is_told_before_it_returns():
    # A slow callback on the first end: the others come meanwhile, and the run ends
    # before the callback is back; they are still told, before run() returns.
    slow = threading.Event()

    def decide(event, ctx):
        if event.syscall == "exit" and not slow.is_set():
            slow.set()
            time.sleep(0.5)
        return 0

    recorder = Recorder(decide)
    result = Sandbox(Policy(), policy_fn=recorder).run(
        ["sh", "-c", "/bin/true & /bin/true & wait; echo done"])
    assert result.stdout == b"done\n"
    execs = [e.pid for e in recorder.of("execve") if e.path == "/bin/true"]
    ended = {e.pid for e in recorder.of("exit")}
    assert len(execs) == 2 and set(execs) <= ended, recorder.events
    assert len(ended) == 3, recorder.events  # the two and the shell


def test_an_unreaped_child_does_not_make_a_held_exec_fail(tmp_path):
    # Once deny_path is used, an exec holds every task of the sandbox; a zombie (a child
    # its parent has not reaped) cannot be traced, and made the exec fail with EPERM
    # (seen under load in the argv races, where short-lived processes abound).
    secret = tmp_path / "secret"
    secret.write_text("x")
    code = ("import os, time\n"
            "if os.fork() == 0:\n    os._exit(0)\n"
            "time.sleep(0.3)\n"  # the child is a zombie now, and stays one
            "os.execv('/bin/echo', ['/bin/echo', 'ran'])")

    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[:1] == (SYSTEM_PY,):
            ctx.deny_path(str(secret))
        return 0

    result = Sandbox(Policy(), policy_fn=decide).run([SYSTEM_PY, "-c", code], timeout=30)
    assert result.stdout == b"ran\n", result


def test_an_exec_by_a_thread_outliving_the_first_one(tmp_path):
    # The caller's own leader is the zombie; the exec gives the caller the leader's id,
    # under which its end of exec is reported: it was never let go (stuck stopped).
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the program")
    binary = tmp_path / "exec_after_leader_exit"
    source = os.path.join(os.path.dirname(__file__), "exec_after_leader_exit.c")
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), source], check=True)
    os.chmod(tmp_path, 0o755)
    recorder = Recorder()
    result = Sandbox(Policy(fs_readable=[*SYSTEM, str(tmp_path)]), policy_fn=recorder).run(
        [str(binary)], timeout=30)
    assert result.stdout == b"ran\n", result
    assert [e.argv for e in recorder.of("execve") if e.path == "/bin/echo"] == [("/bin/echo", "ran")]


# Forks the kernel refuses, tried again at once, then a fork that works: a clone with
# CLONE_SIGHAND but not CLONE_VM (EINVAL), or a fork past RLIMIT_NPROC (EAGAIN, for a
# user it binds: root is exempt).
FAILING_FORKS = r"""
import ctypes, os, resource, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
for _ in range(3):
    if sys.argv[1] == "einval":
        libc.syscall(ctypes.c_long(56), ctypes.c_long(0x800), None, None, None, None)
        print("failed", ctypes.get_errno(), flush=True)
        continue
    resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))
    try:
        if os.fork() == 0:
            os._exit(0)
        print("forked", flush=True)
    except OSError as exc:
        print("failed", exc.errno, flush=True)
    resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
print(subprocess.run(["/bin/echo", "after"], capture_output=True, text=True).stdout, end="")
"""


def test_forks_that_fail_are_told_apart_at_once_and_the_next_one_works():
    # Each failure was waited for a second, and a fork tried again at once deadlocked
    # the tracer (the run hung until its timeout).
    result = Sandbox(Policy(), policy_fn=Recorder()).run(
        [SYSTEM_PY, "-c", FAILING_FORKS, "einval"], timeout=30)
    assert result.stdout == b"failed 22\nfailed 22\nfailed 22\nafter\n", result


def test_a_fork_past_the_users_process_limit_fails_and_the_run_goes_on(as_nobody):
    embedder = textwrap.dedent("""
        import sys
        from sandlock import Policy, Sandbox
        result = Sandbox(Policy(), policy_fn=lambda e, c: 0).run(
            ["/usr/bin/python3", "-c", sys.argv[1], "eagain"], timeout=30)
        print(result.exit_code, result.stdout.decode().split("\\n"))
    """)
    done = subprocess.run(as_nobody([PY, "-c", embedder, FAILING_FORKS]),
                          capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert done.stdout.strip() == "0 ['failed 11', 'failed 11', 'failed 11', 'after', '']", done


def test_a_refused_process_never_runs(tmp_path):
    marker = tmp_path / "ran"
    result = Sandbox(Policy(fs_writable=[str(tmp_path)], fs_readable=SYSTEM),
                     policy_fn=lambda e, c: e.syscall in ("fork", "vfork", "clone")).run(
        ["sh", "-c", f"(touch {marker}); echo $?"])
    assert result.stdout == b"137\n"  # the subshell was killed before its first instruction
    assert not marker.exists()


def test_restrict_max_processes_from_the_callback(capfd):
    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("spawner",):
            ctx.restrict_max_processes(3)
        return 0

    code = ("import subprocess, sys\nprocs, refused = [], 0\nfor _ in range(6):\n"
            "    try:\n        procs.append(subprocess.Popen(['sleep', '2']))\n"
            "    except BlockingIOError:\n        refused += 1\n"
            "for p in procs:\n    p.kill(); p.wait()\nprint(len(procs), refused)")
    result = Sandbox(Policy(), policy_fn=decide).run([PY, "-c", code, "spawner"], timeout=60)
    started, refused = map(int, result.stdout.split())
    assert started <= 2 and refused >= 4  # the interpreter is one of the three
    said = capfd.readouterr().err
    assert "process limit 3 reached" in said and "policy_fn's restrict_max_processes" in said


def test_restrict_max_memory_from_the_callback(capfd):
    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("hungry",):
            ctx.restrict_max_memory("64M")
        return 0

    code = ("import time\nblocks = []\nfor _ in range(40):\n    blocks.append(bytearray(16 << 20))\n"
            "    time.sleep(0.02)\nprint('survived')")
    result = Sandbox(Policy(), policy_fn=decide).run([PY, "-c", code, "hungry"], timeout=60)
    assert result.exit_code == 137 and b"survived" not in result.stdout
    assert "memory limit 64M exceeded" in capfd.readouterr().err


def test_a_memory_limit_set_later_counts_the_scratch_files_too(capfd, tmp_path):
    """The private /tmp's files are memory, for a limit the callback sets as well."""
    def decide(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("filler",):
            ctx.restrict_max_memory("64M")
        return 0

    code = ("import time\nchunk = b'x' * (1 << 20)\nwith open('/tmp/fill', 'wb') as f:\n"
            "    for _ in range(90):\n        f.write(chunk)\n        time.sleep(0.005)\n"
            "time.sleep(0.5)\nprint('survived')")
    result = Sandbox(Policy(cwd=str(tmp_path)), policy_fn=decide).run([PY, "-c", code, "filler"],
                                                                    timeout=60)
    assert result.exit_code == 137 and b"survived" not in result.stdout
    assert "memory limit 64M exceeded" in capfd.readouterr().err


def test_a_search_along_path_shows_only_the_exec_that_runs(tmp_path):
    """execvp tries each PATH directory: the names that are not there fail at once, as
    the kernel fails them (no hold, no event); the one that runs is seen once."""
    recorder = Recorder()
    path = f"{tmp_path}/none:/nonexistent/bin:/usr/local/bin:/usr/bin:/bin"
    script = "import os; os.execvp('echo', ['echo', 'found'])"
    result = Sandbox(Policy(env={"PATH": path}, cwd=str(tmp_path)), policy_fn=recorder).run(
        [PY, "-c", script])
    assert (result.exit_code, result.stdout) == (0, b"found\n"), result.stderr
    echoes = [event for event in recorder.of("execve") if event.argv[:1] == ("echo",)]
    assert [event.path for event in echoes] == [os.path.normpath(shutil.which("echo", path=path))]
    missing = Sandbox(Policy(cwd=str(tmp_path)), policy_fn=recorder).run(
        [PY, "-c", "import os; os.execv('/nonexistent/tool', ['tool'])"])
    assert missing.exit_code == 1 and b"FileNotFoundError" in missing.stderr


def test_exec_by_descriptor_and_from_a_thread():
    """fexecve (execveat on a descriptor) names the file the descriptor is; an exec by
    a thread that is not the process's first one is checked (and refused) alike."""
    recorder = Recorder(lambda e, c: e.argv == ("/bin/echo", "denied"))
    by_fd = ("import os\nfd = os.open('/bin/echo', os.O_RDONLY)\n"
             "os.execve(fd, ['/bin/echo', 'by-fd'], {})")
    result = Sandbox(Policy(), policy_fn=recorder).run([PY, "-c", by_fd])
    assert result.stdout == b"by-fd\n"
    [event] = recorder.of("execveat")
    assert event.path == os.path.realpath("/bin/echo") and event.argv == ("/bin/echo", "by-fd")

    threaded = ("import os, sys, threading\n"
                "t = threading.Thread(target=os.execv, args=('/bin/echo', ['/bin/echo', sys.argv[1]]))\n"
                "t.start(); t.join(); print('still here')")
    ran = Sandbox(Policy(), policy_fn=recorder).run([PY, "-c", threaded, "from-a-thread"])
    assert ran.stdout == b"from-a-thread\n"
    refused = Sandbox(Policy(), policy_fn=recorder).run([PY, "-c", threaded, "denied"])
    assert refused.stdout == b"still here\n" and b"PermissionError" in refused.stderr


def test_a_long_lived_sandbox_hears_every_process_it_runs():
    recorder = Recorder(lambda e, c: e.argv == ("/bin/echo", "no"))
    with open(os.devnull, "w") as quiet, Sandbox(Policy(), policy_fn=recorder) as sandbox:
        assert sandbox.exec(["/bin/echo", "yes"], stdout=quiet.fileno()).wait() == 0
        assert sandbox.exec(["/bin/echo", "no"], stderr=quiet.fileno()).wait() == 126
        assert sandbox.call(os.getpid).success
    execs = [e.argv for e in recorder.of("execve")]
    assert execs == [("/bin/echo", "yes"), ("/bin/echo", "no")]
    made = [e for e in recorder.events if e.syscall in ("fork", "vfork", "clone")]
    assert len(made) == 3  # each exec's process and the call's, made by the resident


def test_a_slow_callback_on_a_new_process_holds_back_only_that_process():
    """While the callback ponders one process's child, another process forks and
    execs: its events are heard, which is what ends the first wait."""
    fast_seen = threading.Event()
    slow_waited: list[bool] = []

    def decide(event, ctx):
        if event.syscall in ("fork", "vfork", "clone"):
            with open(f"/proc/{event.parent_pid}/cmdline", "rb") as file:
                if file.read().endswith(b"slow\0"):
                    slow_waited.append(fast_seen.wait(15))  # False: nobody else was heard
        if event.argv == ("/bin/echo", "fast"):
            fast_seen.set()
        return 0

    forker = "import os\npid = os.fork()\nos._exit(0) if pid == 0 else os.waitpid(pid, 0)"
    script = f"{PY} -c \"{forker}\" slow & sleep 0.5; /bin/echo fast; wait"
    result = Sandbox(Policy(), policy_fn=decide).run(["sh", "-c", script], timeout=60)
    assert result.stdout == b"fast\n" and result.exit_code == 0
    assert slow_waited == [True]


# --- TOCTOU: the argv race ----------------------------------------------------------------


@pytest.fixture(scope="module")
def racer():
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the racer")
    directory = tempfile.mkdtemp(dir="/var/tmp")
    binary = os.path.join(directory, "racer")
    source = os.path.join(os.path.dirname(__file__), "exec_argv_racer.c")
    subprocess.run(["gcc", "-O1", "-pthread", "-o", binary, source], check=True)
    os.chmod(directory, 0o755)
    yield binary
    shutil.rmtree(directory)


@pytest.mark.parametrize("where", ["heap", "data", "shared", "vm", "procmem"])
def test_argv_rewritten_by_a_racing_thread_never_runs_unchecked(racer, where):
    """A thread (or another process: "shared" through a shared mapping, "vm" sharing
    the whole address space, "procmem" the parent through /proc/PID/mem, where the
    policy lets the sandbox write /proc and Yama lets an ancestor) rewrites the
    argument while the exec is checked: the callback allows "good" only, and what echo
    prints must be exactly the allowed execs, never "EVIL" nor a torn mix."""
    seen: list[str] = []
    through_proc = where == "procmem"

    def decide(event, ctx):
        if event.syscall == "execve" and event.path == "/bin/echo":
            seen.append(event.argv[1])
            if through_proc:
                time.sleep(0.002)  # ample time for the parent's writes
            return event.argv[1] != "good"
        return 0

    policy = Policy(fs_readable=[*SYSTEM, os.path.dirname(racer)],
                    fs_writable=["/proc"] if through_proc else [])
    result = Sandbox(policy, policy_fn=decide, quiet=True).run([racer, "60", where], timeout=120)
    printed = result.stdout.decode().split()
    assert result.exit_code == 0, result.stderr
    assert set(printed) <= {"good"}
    assert len(printed) == seen.count("good")
    assert len(seen) == 60, result.stderr  # (an exec that failed says why there)


def test_an_exec_from_a_process_busy_making_threads():
    """Threads made while the caller's threads are being held are held from birth
    (traced on creation): the exec is checked and runs."""
    code = ("import os, threading, time\n"
            "def spawner():\n"
            "    while True:\n"
            "        threading.Thread(target=time.sleep, args=(0.001,)).start()\n"
            "for _ in range(3):\n"
            "    threading.Thread(target=spawner, daemon=True).start()\n"
            "time.sleep(0.2)\n"
            "os.execv('/bin/echo', ['/bin/echo', 'ran'])")
    recorder = Recorder()
    for _ in range(5):
        result = Sandbox(Policy(), policy_fn=recorder).run([SYSTEM_PY, "-c", code], timeout=30)
        assert result.stdout == b"ran\n", result
    assert len([e for e in recorder.of("execve") if e.path == "/bin/echo"]) == 5


# --- failures and cost ---------------------------------------------------------------------


def test_a_callback_that_raises_denies_and_is_reported_once(capfd):
    def broken(event, ctx):
        if event.syscall == "execve" and event.path == "/bin/echo":
            raise RuntimeError("bug in the embedding program")
        return 0

    result = Sandbox(Policy(), policy_fn=broken).run(
        ["sh", "-c", "/bin/echo one; /bin/echo two; echo done"])
    assert result.stdout == b"done\n"
    assert result.stderr.decode().count("Operation not permitted") == 2
    said = capfd.readouterr().err  # sandlock's own stderr: the embedding program's
    assert said.count("policy_fn raised") == 1
    assert "Traceback" in said and "RuntimeError: bug in the embedding program" in said


def test_a_bad_verdict_denies_and_is_reported(capfd):
    result = Sandbox(Policy(), policy_fn=lambda e, c: "maybe").run(["/bin/echo", "x"])
    assert result.exit_code == 126 and "Operation not permitted" in result.start_error
    assert "policy_fn returned 'maybe'" in capfd.readouterr().err


def test_bad_arguments_to_the_context_deny_and_say_why(capfd):
    def decide(event, ctx):
        if event.syscall == "execve":
            ctx.restrict_network("web.test:443")  # a string, not a list
        return 0

    result = Sandbox(Policy(), policy_fn=decide).run(["/bin/echo", "x"])
    assert result.exit_code == 126
    assert "restrict_network: expected a list of endpoints" in capfd.readouterr().err


def test_policy_fn_must_be_callable():
    with pytest.raises(TypeError, match="policy_fn"):
        Sandbox(Policy(), policy_fn="not a function")


def test_without_policy_fn_nothing_of_it_is_loaded_or_supervised(tmp_path):
    code = ("import sys\nfrom sandlock import Sandbox, Policy\n"
            "from sandlock.confinement import Confinement\n"
            "r = Sandbox(Policy()).run(['sh', '-c', '/bin/true; echo ok'])\n"
            "import os\nc = Confinement.prepare(Policy(), os.getcwd(), {})\n"
            "print(r.stdout.decode().strip(), c.counts_processes,"
            " any(m.startswith('sandlock.runtime') for m in sys.modules),"
            " 'sandlock.kernel._ptrace' in sys.modules)")
    result = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert result.stdout.split() == ["ok", "False", "False", "False"], result.stderr


def test_a_slow_callback_holds_back_only_the_caller(upstreams):
    """While the callback ponders one process's connect, another process's connect is
    heard and goes through: the second one's callback is what ends the first's wait."""
    allowed, _ = upstreams
    fast_seen = threading.Event()
    slow_waited: list[bool] = []

    def decide(event, ctx):
        if event.syscall == "connect":
            with open(f"/proc/{event.pid}/cmdline", "rb") as file:
                slow = file.read().endswith(b"slow\0")
            if slow:
                slow_waited.append(fast_seen.wait(15))  # False: nobody else was heard
            else:
                fast_seen.set()
        return 0

    snippet = fetch(allowed.host, allowed.port)
    script = (f"{PY} -c \"{snippet}\" slow & sleep 0.5; {PY} -c \"{snippet}\" fast; wait")
    result = Sandbox(Policy(net_allow=[f"{allowed.host}:{allowed.port}"]), quiet=True,
                     policy_fn=decide).run(["sh", "-c", script], timeout=60)
    assert result.stdout == b"connected\nconnected\n"
    assert slow_waited == [True]


# --- deny_path ------------------------------------------------------------------------------


@pytest.fixture
def vault():
    """A directory (under /var/tmp: the sandbox has its own /tmp) with a secret, a
    link and a hard link to it, a denied tree and a file that stays readable."""
    directory = tempfile.mkdtemp(dir="/var/tmp")
    secret = os.path.join(directory, "secret")
    with open(secret, "w") as file:
        file.write("the-key")
    os.symlink(secret, os.path.join(directory, "link"))
    os.link(secret, os.path.join(directory, "hard"))
    os.mkdir(os.path.join(directory, "tree"))
    with open(os.path.join(directory, "tree", "inner"), "w") as file:
        file.write("inner")
    with open(os.path.join(directory, "plain"), "w") as file:
        file.write("plain")
    yield directory
    shutil.rmtree(directory)


def test_figure_2_whole_with_deny_path(upstreams, vault, capfd):
    """Audit curl's exec, cut the network and deny a secret file: later connects and
    opens fail, whatever name the file is reached by."""
    allowed, _ = upstreams
    secret = os.path.join(vault, "secret")

    def on_event(event, ctx):
        if event.syscall == "execve" and event.argv_contains("curl"):
            ctx.restrict_network([])
            ctx.deny_path(secret)
            ctx.deny_path(os.path.join(vault, "tree"))
            return "audit"
        return 0

    reads = " ".join(f"{vault}/{name}" for name in ("secret", "link", "hard", "tree/inner", "plain"))
    driver = ("import subprocess, sys\n"
              f"subprocess.run(['cat', {secret!r}])\n"
              "print()\n"
              "subprocess.run(['cu' + 'rl', '-s', '-o', '/dev/null', 'file:///dev/null'])\n"
              f"for path in {reads!r}.split():\n"
              "    try:\n        print(open(path).read())\n"
              "    except OSError as e:\n        print(path.rsplit('/', 1)[1], e.errno)\n"
              f"subprocess.run(['sh', '-c', 'echo x > {vault}/tree/new'])\n"
              f"exec({fetch(allowed.host, allowed.port)!r})\n")
    policy = Policy(fs_readable=[*SYSTEM, vault], fs_writable=[vault],
                    net_allow=[f"{allowed.host}:{allowed.port}"])
    result = Sandbox(policy, policy_fn=on_event).run([SYSTEM_PY, "-c", driver], timeout=60)
    lines = result.stdout.decode().split("\n")
    assert lines[:7] == ["the-key", f"secret {errno.EACCES}", f"link {errno.EACCES}",
                         f"hard {errno.EACCES}", f"inner {errno.EACCES}", "plain",
                         f"refused {errno.EACCES}"]
    assert not os.path.exists(os.path.join(vault, "tree", "new"))
    said = capfd.readouterr().err
    assert f"denied openat of {vault}/hard (policy_fn's deny_path)" in said


def test_deny_path_holds_against_a_racing_rewrite(vault):
    """A thread swaps the name being opened between a readable file and the denied
    one, as fast as it can: no open ever returns the secret."""
    plain, secret = os.path.join(vault, "plain"), os.path.join(vault, "secret")
    os.rename(plain, os.path.join(vault, "plainx"))  # same length as "secret"
    plain = os.path.join(vault, "plainx")
    racer = f"""
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
good, bad = {plain.encode()!r}, {secret.encode()!r}
name = ctypes.create_string_buffer(good, len(good) + 1)
running = True
def race():
    while running:
        ctypes.memmove(name, bad, len(bad))
        ctypes.memmove(name, good, len(good))
threading.Thread(target=race, daemon=True).start()
opened = leaked = 0
buffer = ctypes.create_string_buffer(64)
for _ in range(300):
    fd = libc.open(name, os.O_RDONLY)
    if fd >= 0:
        opened += 1
        leaked += libc.read(fd, buffer, 64) > 0 and buffer.value == b"the-key"
        libc.close(fd)
running = False
print(opened, leaked)
"""

    def on_event(event, ctx):
        if event.syscall == "execve" and event.argv[-1:] == ("race",):
            ctx.deny_path(secret)
        return 0

    result = Sandbox(Policy(fs_readable=[*SYSTEM, vault]), policy_fn=on_event, quiet=True).run(
        [SYSTEM_PY, "-c", racer, "race"], timeout=120)
    opened, leaked = map(int, result.stdout.split())
    assert leaked == 0 and opened > 0


def test_deny_path_of_a_missing_path_denies_the_call_and_says_why(capfd):
    def on_event(event, ctx):
        ctx.deny_path("/nonexistent/secret")
        return 0

    result = Sandbox(Policy(), policy_fn=on_event).run(["/bin/echo", "x"])
    assert result.exit_code == 126
    assert "deny_path: /nonexistent/secret: No such file or directory" in capfd.readouterr().err


def test_policy_fn_as_an_unprivileged_user(as_nobody, world_tmp):
    """Events, an exec refused and deny_path, run by nobody."""
    secret = world_tmp / "secret"
    secret.write_text("the-key")
    secret.chmod(0o644)
    code = ("import sys\nfrom sandlock import Sandbox, Policy\nseen = []\n"
            "def fn(e, c):\n"
            "    seen.append(e.syscall)\n"
            "    if e.syscall == 'execve' and e.argv[-1:] == ('phase2',):\n"
            f"        c.deny_path({str(secret)!r})\n"
            "    return e.argv == ('/bin/echo', 'no')\n"
            f"script = 'cat {secret}; echo; /bin/echo yes; /bin/echo no; "
            f"exec sh -c \"cat {secret}\" phase2'\n"
            "r = Sandbox(Policy(), policy_fn=fn, quiet=True).run(['sh', '-c', script])\n"
            "print(r.stdout.decode().split(), b'Permission denied' in r.stderr,"
            " 'execve' in seen, 'exit' in seen)")
    result = subprocess.run(as_nobody([PY, "-c", code]), capture_output=True, text=True,
                            cwd=world_tmp, timeout=60)
    assert result.stdout.strip() == "['the-key', 'yes'] True True True", result.stderr


def test_a_callback_that_exits_denies_like_one_that_raises(capfd):
    def leaving(event, ctx):
        if event.syscall in ("fork", "vfork", "clone"):
            sys.exit("the embedding program's callback called sys.exit")
        return 0

    result = Sandbox(Policy(), policy_fn=leaving).run(["sh", "-c", "(true); echo $?"])
    assert result.stdout == b"137\n"  # the subshell refused: killed at birth
    assert "SystemExit" in capfd.readouterr().err
