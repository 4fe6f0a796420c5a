"""sandlock.confine(policy): a process confines itself, for good, without a supervisor.

Every case runs a fresh interpreter that calls ``sandlock.confine`` and then tries
things, printing one JSON object {case: "ok" | errno name}; nothing here confines the
test process itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest
from conftest import ATTEMPT, I386_GETPID

PRELUDE = '''
import errno, json, os, signal, socket, sys, threading
import sandlock
from sandlock import Policy, PolicyError, SetupError
from sandlock.kernel import nr, prctl, syscall

ARGS = json.loads(sys.argv[1])
# Imported on first use by socket.getaddrinfo: once confined, only granted files can be
# read, the interpreter's own modules included.
"".encode("idna")


''' + ATTEMPT + '''

def read(path):
    with open(path, "rb") as file:
        file.read(1)


def write(path):
    with open(path, "w") as file:
        file.write("x")


def connect(port, host="127.0.0.3"):
    with socket.create_connection((host, port), timeout=5):
        pass


def report(results):
    print(json.dumps(results))
'''


def run(snippet: str, args: object = None, *, prefix: tuple[str, ...] = (),
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-c", PRELUDE + textwrap.dedent(snippet),
                           json.dumps(args)], capture_output=True, text=True, timeout=60,
                          cwd=tempfile.gettempdir(), env=env)


def results(snippet: str, args: object = None, **kwargs: object) -> dict[str, object]:
    proc = run(snippet, args, **kwargs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture
def tree(tmp_path):
    """readable/file, writable/, outside/file: as strings."""
    for name in ("readable", "writable", "outside"):
        (tmp_path / name).mkdir()
    (tmp_path / "readable" / "file").write_text("r")
    (tmp_path / "outside" / "file").write_text("o")
    return {name: str(tmp_path / name) for name in ("readable", "writable", "outside")}


# ------------------------------------------------------------------- the filesystem

FILESYSTEM = """
sandlock.confine(Policy(fs_readable=[ARGS["readable"]], fs_writable=[ARGS["writable"]]))
report({
    "read": attempt(read, ARGS["readable"] + "/file"),
    "read_outside": attempt(read, ARGS["outside"] + "/file"),
    "list_outside": attempt(os.listdir, ARGS["outside"]),
    "write": attempt(write, ARGS["writable"] + "/new"),
    "write_readable": attempt(write, ARGS["readable"] + "/new"),
    "write_outside": attempt(write, ARGS["outside"] + "/new"),
    "dev_null": attempt(write, "/dev/null"),
    "etc": attempt(read, "/etc/hostname"),
})
"""
FILESYSTEM_EXPECTED = {
    "read": "ok", "read_outside": "EACCES", "list_outside": "EACCES", "write": "ok",
    "write_readable": "EACCES", "write_outside": "EACCES", "dev_null": "ok", "etc": "EACCES",
}


def test_reads_and_writes_only_what_the_policy_grants(tree):
    assert results(FILESYSTEM, tree) == FILESYSTEM_EXPECTED
    assert os.listdir(tree["writable"]) == ["new"]
    assert sorted(os.listdir(tree["readable"])) == ["file"]


def test_denies_and_credential_stores_win_inside_a_grant(tmp_path):
    home = tmp_path / "home"
    for path in ("project/file", "secret/file", ".ssh/id_ed25519"):
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text("x")
    got = results("""
        sandlock.confine(Policy(fs_readable=[ARGS], fs_denied=[ARGS + "/secret"]))
        report({name: attempt(read, f"{ARGS}/{name}") for name in
                ("project/file", "secret/file", ".ssh/id_ed25519")})
        """, str(home), env={**os.environ, "HOME": str(home)})
    assert got == {"project/file": "ok", "secret/file": "EACCES", ".ssh/id_ed25519": "EACCES"}


# ------------------------------------------------------------------------ the network


@pytest.fixture
def servers():
    """Two TCP servers on 127.0.0.3 (their ports): connects complete in the backlog."""
    listening = []
    for _ in range(2):
        server = socket.socket()
        server.bind(("127.0.0.3", 0))
        server.listen(16)
        listening.append(server)
    yield [server.getsockname()[1] for server in listening]
    for server in listening:
        server.close()


NETWORK = """
allowed, other = ARGS["ports"]
sandlock.confine(Policy(fs_readable=[ARGS["readable"]], **ARGS["policy"]))

def fast_open(port):
    with socket.socket() as sock:
        sock.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.3", port))

def listen():
    with socket.socket() as sock:
        sock.listen()

def bind(port):
    with socket.socket() as sock:
        sock.bind(("127.0.0.3", port))

def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"x", ("127.0.0.3", allowed))

report({
    "connect": attempt(connect, allowed),
    "connect_other": attempt(connect, other),
    "connect_ipv6": attempt(socket.create_connection, ("::1", allowed)),
    "fast_open": attempt(fast_open, allowed),
    "mptcp": attempt(socket.socket, socket.AF_INET, socket.SOCK_STREAM, 262),
    "bind": attempt(bind, other),
    "bind_any_port": attempt(bind, 0),
    "listen": attempt(listen),
    "udp": attempt(udp),
    "unix": attempt(socket.socket, socket.AF_UNIX),
    "socketpair": attempt(socket.socketpair),
})
"""
NO_TCP = {"connect": "EACCES", "connect_other": "EACCES", "connect_ipv6": "EACCES",
          "fast_open": "EACCES", "mptcp": "EACCES", "bind": "EACCES", "bind_any_port": "EACCES",
          "listen": "EACCES", "udp": "EACCES", "unix": "EACCES", "socketpair": "ok"}


def network(tree, servers, **policy):
    return results(NETWORK, {"ports": servers, "readable": tree["readable"], "policy": policy})


def test_no_network_rules_no_network(tree, servers):
    assert network(tree, servers) == NO_TCP


@pytest.mark.parametrize("rule", [{"net_connect": ["{port}"]}, {"net_allow": ["tcp://*:{port}"]},
                                  {"net_allow": ["tcp://:1,{port}"]}], ids=["connect", "allow", "list"])
def test_a_port_rule_lets_tcp_reach_that_port_only(tree, servers, rule):
    field, (spec,) = next(iter(rule.items()))
    got = network(tree, servers, **{field: [spec.format(port=servers[0])]})
    assert got == {**NO_TCP, "connect": "ok", "bind_any_port": "ok",
                   "connect_ipv6": "ECONNREFUSED"}  # nothing listens on [::1]: Landlock let it go


def test_every_port(tree, servers):
    got = network(tree, servers, net_connect=["*"], net_bind=["*"])
    assert got == {**NO_TCP, "connect": "ok", "connect_other": "ok", "connect_ipv6": "ECONNREFUSED",
                   "fast_open": "ok", "bind_any_port": "ok", "listen": "ok",
                   "bind": "EADDRINUSE"}  # the kernel's answer: Landlock let it through


# ---------------------------------------------------------------------------- IPC


@pytest.fixture
def outsider():
    """A process outside any Landlock domain."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


SIGNALS = """
sandlock.confine(Policy(fs_readable=[ARGS["readable"]], allow_ipc=ARGS["allow_ipc"]))
child = os.fork()
if child == 0:
    signal.pause()
    os._exit(0)
report({
    "outsider": attempt(os.kill, ARGS["outsider"], 0),
    "outsider_term": attempt(os.kill, ARGS["outsider"], signal.SIGTERM),
    "parent": attempt(os.kill, os.getppid(), 0),
    "own_child": attempt(os.kill, child, signal.SIGKILL),
})
"""


def test_signals_reach_only_the_domain(tree, outsider):
    got = results(SIGNALS, {"readable": tree["readable"], "outsider": outsider.pid, "allow_ipc": False})
    assert got == {"outsider": "EPERM", "outsider_term": "EPERM", "parent": "EPERM", "own_child": "ok"}
    assert outsider.poll() is None


def test_allow_ipc_lifts_the_signal_scope(tree, outsider):
    got = results(SIGNALS, {"readable": tree["readable"], "outsider": outsider.pid, "allow_ipc": True})
    assert got == {"outsider": "ok", "outsider_term": "ok", "parent": "ok", "own_child": "ok"}
    assert outsider.wait(5) == -signal.SIGTERM


# ----------------------------------------------------------------------- syscalls

SYSCALLS = """
sandlock.confine(Policy(fs_readable=[ARGS]))
CLONE_NEWUSER, ADDR_NO_RANDOMIZE = 0x10000000, 0x0040000
report({
    "ptrace": attempt(syscall, nr("ptrace"), 0, 0, 0, 0),  # PTRACE_TRACEME
    "mount": attempt(syscall, nr("mount"), 0, 0, 0, 0, 0),
    "unshare": attempt(syscall, nr("unshare"), CLONE_NEWUSER),
    "io_uring_setup": attempt(syscall, nr("io_uring_setup"), 1, 0),
    "bpf": attempt(syscall, nr("bpf"), 0, 0, 0),
    "personality": attempt(syscall, nr("personality"), ADDR_NO_RANDOMIZE),
    "clone3": attempt(syscall, nr("clone3"), 0, 0),
    "getpid": attempt(os.getpid),
    "no_new_privs": prctl(39),  # PR_GET_NO_NEW_PRIVS
})
"""


def test_the_syscall_filter_holds(tree):
    got = results(SYSCALLS, tree["readable"])
    assert got == {"ptrace": "EPERM", "mount": "EPERM", "unshare": "EPERM", "io_uring_setup": "EPERM",
                   "bpf": "EPERM", "personality": "EPERM", "clone3": "ENOSYS", "getpid": "ok",
                   "no_new_privs": 1}


I386 = I386_GETPID + """
if ARGS["confine"]:
    sandlock.confine(Policy(fs_readable=[ARGS["readable"]]))
report({"same_pid": getpid32() == os.getpid()})
"""


def test_an_i386_syscall_kills_the_process(tree):
    assert results(I386, {"confine": False, "readable": tree["readable"]}) == {"same_pid": True}
    assert run(I386, {"confine": True, "readable": tree["readable"]}).returncode == -signal.SIGSYS


@pytest.mark.parametrize("policy", [{}, {"net_connect": ["443", "8000-8002"]},
                                    {"net_allow": ["tcp://*"], "net_bind": ["*"]}],
                         ids=["none", "ports", "every-port"])
def test_the_filter_never_asks_for_a_listener(tree, policy):
    """Compiled here, never applied: nothing would answer a user notification."""
    from sandlock import Policy
    from sandlock.confinement import SelfConfinement
    from sandlock.kernel import filter_actions, seccomp
    from sandlock.api._confine_self import _check

    policy = Policy(fs_readable=[tree["readable"]], **policy)
    confinement = SelfConfinement.prepare(policy, _check(policy))
    confinement.close()
    assert seccomp.NOTIFY not in filter_actions(confinement.program)
    assert seccomp.SECCOMP_RET_KILL_PROCESS in filter_actions(confinement.program)


def test_a_filter_that_would_notify_is_refused(tree):
    from sandlock import Policy, SetupError
    from sandlock.confinement._filter import seccomp_program as _seccomp_program
    from sandlock.kernel import seccomp

    network = seccomp.unsupervised_network(False, False, False)
    with pytest.raises(SetupError, match="needs a supervisor"):  # the process cap notifies forks
        _seccomp_program(Policy(fs_readable=[tree["readable"]]), True, network)


# ------------------------------------------------------------- confining again

TWICE = """
first, second = ARGS["first"], ARGS["second"]
sandlock.confine(Policy(fs_readable=first["read"], net_connect=first["connect"]))
sandlock.confine(Policy(fs_readable=second["read"], net_connect=second["connect"]))
report({
    **{os.path.basename(path): attempt(read, path + "/file") for path in ARGS["paths"]},
    "connect": attempt(connect, ARGS["port"]),
})
"""


@pytest.mark.parametrize("first, second, expected", [
    ((("a", "b"), True), (("a",), False), {"a": "ok", "b": "EACCES", "connect": "EACCES"}),
    ((("a",), False), (("a", "b"), True), {"a": "ok", "b": "EACCES", "connect": "EACCES"}),
    ((("a", "b"), True), (("a", "b"), True), {"a": "ok", "b": "ok", "connect": "ok"}),
], ids=["narrows", "never-widens", "same"])
def test_confining_again_narrows_and_never_widens(tmp_path, servers, first, second, expected):
    """The second call runs inside the first domain, where /proc is not readable (the
    threads are counted without listing them)."""
    paths = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text(name)
        paths[name] = str(tmp_path / name)

    def layer(names, tcp):
        return {"read": [paths[name] for name in names], "connect": [servers[0]] if tcp else []}

    got = results(TWICE, {"first": layer(*first), "second": layer(*second), "paths": list(paths.values()),
                          "port": servers[0]})
    assert got == expected


# ------------------------------------------------------------ what is refused

REFUSED = """
readable = ARGS["readable"]
outcome = {}
for field, value in ARGS["cases"]:
    try:
        policy = Policy(**{"fs_readable": [readable], **{field: value}})
        sandlock.confine(policy)
    except PolicyError as error:
        outcome[field + "=" + json.dumps(value)] = [error.field, str(error)]
    else:
        outcome[field + "=" + json.dumps(value)] = "confined"
        break
outcome["unconfined_after"] = attempt(read, ARGS["outside"] + "/file")
outcome["threads"] = len(os.listdir("/proc/self/task"))
report(outcome)
"""
REFUSED_CASES = [
    # (field, value, the field named)
    ("env", {"A": "1"}, "env"), ("clean_env", True, "clean_env"), ("cwd", "/", "cwd"),
    ("timeout", 5, "timeout"), ("best_effort", True, "best_effort"),
    ("net_allow_hosts", ["example.com"], "net_allow_hosts"), ("net_deny", ["10.0.0.0/8"], "net_deny"),
    ("dns_servers", ["127.0.0.1"], "dns_servers"), ("resolve", ["a.test=127.0.0.1"], "resolve"),
    ("dns_allow_private", True, "dns_allow_private"),
    ("http_allow", ["GET example.com"], "http_allow"), ("http_deny", ["* example.com"], "http_deny"),
    ("http_ports", [8080], "http_ports"), ("https_inspect", "off", "https_inspect"),
    ("ca_env", False, "ca_env"),
    ("max_memory", "64M", "max_memory"), ("max_processes", 5, "max_processes"),
    ("max_cpu", 50, "max_cpu"), ("max_output", "1M", "max_output"),
    ("net_allow", ["example.com:443"], "net_allow"), ("net_allow", ["10.0.0.0/8:443"], "net_allow"),
    ("net_allow", ["udp://*:53"], "net_allow"), ("net_allow", ["icmp://*"], "net_allow"),
    ("net_allow", ["*"], "net_allow"),  # TCP and UDP
    ("net_bind", ["8080"], "net_bind"),
    ("allow_syscalls", ["socket"], "allow_syscalls"),
    ("mode", "full-access", "mode"),
]


def test_what_needs_a_supervisor_is_refused_by_field(tree):
    cases = [(field, value) for field, value, _ in REFUSED_CASES if field != "mode"]
    got = results(REFUSED, {"readable": tree["readable"], "outside": tree["outside"], "cases": cases})
    assert got.pop("unconfined_after") == "ok"  # nothing was applied
    assert got.pop("threads") == 1
    named = {key: field for key, (field, _) in got.items()}
    assert named == {f"{field}={json.dumps(value)}": named_field
                     for field, value, named_field in REFUSED_CASES if field != "mode"}
    assert "judged by sandlock's network supervisor" in got['net_allow_hosts=["example.com"]'][1]
    assert "listen()" in got['net_bind=["8080"]'][1]


def test_a_policy_with_no_paths_or_full_access_is_refused(tree):
    got = results("""
        outcome = {}
        for policy in (Policy(), Policy(mode="full-access"), Policy(fs_writable=[ARGS["readable"]],
                                                                     mode="workspace-write")):
            try:
                sandlock.confine(policy)
                outcome[policy.mode] = "confined"
            except PolicyError as error:
                outcome[policy.mode + (" default" if not policy.fs_writable else "")] = error.field
        report({**outcome, "outside": attempt(read, ARGS["outside"] + "/file")})
        """, tree)
    assert got == {"workspace-write default": "fs_readable", "full-access default": "mode",
                   "workspace-write": "confined", "outside": "EACCES"}


def test_a_write_grant_over_autorun_files_is_refused_unless_allowed(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    got = results("""
        try:
            sandlock.confine(Policy(fs_writable=[ARGS]))
            refused = None
        except PolicyError as error:
            refused = [error.field, str(error)]
        sandlock.confine(Policy(fs_writable=[ARGS], allow_autorun_writes=True))
        report({"refused": refused, "hook": attempt(write, ARGS + "/.git/hooks/post-commit")})
        """, str(repo))
    field, message = got["refused"]
    assert field == "fs_writable" and f"{repo}/.git/hooks" in message and "allow_autorun_writes" in message
    assert got["hook"] == "ok"


def test_a_multithreaded_process_is_refused(tree):
    got = results("""
        stop = threading.Event()
        worker = threading.Thread(target=stop.wait)
        worker.start()
        try:
            sandlock.confine(Policy(fs_readable=[ARGS["readable"]]))
            refused = None
        except SetupError as error:
            refused = str(error)
        unconfined = attempt(read, ARGS["outside"] + "/file")
        stop.set()
        worker.join()
        sandlock.confine(Policy(fs_readable=[ARGS["readable"]]))  # alone again: it may
        report({"refused": refused, "unconfined": unconfined,
                "confined": attempt(read, ARGS["outside"] + "/file")})
        """, tree)
    assert got["refused"].startswith("confine() needs a single-threaded process, and this one has 2 threads")
    assert got["unconfined"] == "ok" and got["confined"] == "EACCES"


# ----------------------------------------------------------- limits, profiles, the name


def test_kernel_limits_apply_to_the_process(tree):
    got = results("""
        import resource
        sandlock.confine(Policy(fs_writable=[ARGS["writable"]], max_open_files=64,
                                max_file_size="1K", cpu_cores=[0]))
        def big():
            with open(ARGS["writable"] + "/big", "wb") as file:
                file.write(b"x" * 4096)
        report({"nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "cpus": sorted(os.sched_getaffinity(0)),
                "big": attempt(big), "widen": attempt(os.sched_setaffinity, 0, {0, 1})})
        """, tree)
    assert got == {"nofile": [64, 64], "cpus": [0], "big": "EFBIG", "widen": "EPERM"}


def test_a_profile_by_name(tree, tmp_path):
    profiles = tmp_path / "config" / "sandlock" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "reader.toml").write_text(f'[filesystem]\nread = ["{tree["readable"]}"]\n')
    got = results("""
        sandlock.confine("reader")
        report({"read": attempt(read, ARGS["readable"] + "/file"),
                "outside": attempt(read, ARGS["outside"] + "/file")})
        """, tree, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert got == {"read": "ok", "outside": "EACCES"}


def test_the_public_name_is_the_function_whatever_was_imported_first():
    """A Sandbox imports the internal sandlock.confinement package: sandlock.confine
    stays the function."""
    code = ("import sandlock, sandlock.confinement\n"
            "from sandlock.confinement import Confinement\n"
            "from sandlock import confine\n"
            "import sys\n"
            "print(callable(sandlock.confine), confine is sandlock.confine, "
            "'sandlock.api._confine_self' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
    code = ("import sys, sandlock\n"
            "from sandlock import Policy, Sandbox\n"
            "print(sorted(m for m in sys.modules if m.endswith(('_confine_self', '_static'))))")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "[]"


# ------------------------------------------------------------------ unprivileged


def test_a_user_without_privileges_confines_itself(as_nobody, world_tmp, servers):
    for name in ("readable", "writable", "outside"):
        (world_tmp / name).mkdir()
        os.chmod(world_tmp / name, 0o777)
    (world_tmp / "readable" / "file").write_text("r")
    (world_tmp / "outside" / "file").write_text("o")
    os.chmod(world_tmp / "outside" / "file", 0o644)
    tree = {name: str(world_tmp / name) for name in ("readable", "writable", "outside")}
    prefix = tuple(as_nobody([]))
    assert results(FILESYSTEM, tree, prefix=prefix) == FILESYSTEM_EXPECTED
    got = results(NETWORK, {"ports": servers, "readable": tree["readable"],
                            "policy": {"net_connect": [servers[0]]}}, prefix=prefix)
    assert got == {**NO_TCP, "connect": "ok", "bind_any_port": "ok", "connect_ipv6": "ECONNREFUSED"}
    got = results(SYSCALLS, tree["readable"], prefix=prefix)
    assert got["ptrace"] == got["mount"] == got["unshare"] == got["io_uring_setup"] == "EPERM"
    assert got["no_new_privs"] == 1
