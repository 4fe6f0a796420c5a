"""Pipelines: ``a.cmd(argv) | b.cmd(argv)``, each stage confined by its own Sandbox,
joined by kernel pipes. Real processes, real files and real loopback servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import PYTHON, unique_sleep, wait_no_process
from test_network import web  # noqa: F401 - the fixture: HTTP servers on 127.0.0.2 and .3

from sandlock import Pipeline, PipelineResult, Policy, PolicyError, Sandbox, Stage

# The interpreter itself, not the venv's link to it: a policy that reads /usr only
# must still be able to start it.
PY = os.path.realpath(sys.executable)
SYSTEM = ["/usr", "/lib", "/lib64", "/bin", *PYTHON]


@pytest.fixture
def private(tmp_path):
    """A directory holding secret.csv, which only policies naming it may read."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret.csv").write_text("id,name\n1,alice\n")
    return data


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


# --- the paper's Figure 3 ------------------------------------------------------------


def test_figure_3_trusted_reads_restricted_transforms(private):
    trusted = Sandbox(Policy(fs_readable=["/usr", "/lib", str(private)]))
    restricted = Sandbox(Policy(fs_readable=["/usr", "/lib"]))  # no data directory
    result = (trusted.cmd(["cat", str(private / "secret.csv")])
              | restricted.cmd(["tr", "a-z", "A-Z"])).run()
    assert result == PipelineResult(exit_codes=(0, 0), stdout=b"ID,NAME\n1,ALICE\n",
                                    stderr=(b"", b""), start_errors=(None, None))
    assert result.exit_code == 0 and result.success and not result.timed_out


def test_the_restricted_stage_cannot_read_what_flows_to_it(private):
    trusted = Sandbox(Policy(fs_readable=["/usr", "/lib", str(private)]))
    restricted = Sandbox(Policy(fs_readable=["/usr", "/lib"]))
    secret = str(private / "secret.csv")
    result = (trusted.cmd(["cat", secret])
              | restricted.cmd(["sh", "-c", f'cat; cat "{secret}"'])).run()
    assert result.stdout == b"id,name\n1,alice\n"  # through the pipe: yes
    assert b"Permission denied" in result.stderr[1]  # from the disk: no
    assert result.exit_codes == (0, 1) and not result.success


def test_stages_share_a_kernel_pipe_sandlock_does_not_hold():
    sandbox = Sandbox()
    # (`cmd >&2` would show the shell's fds mid-redirection: a substitution does not)
    result = (sandbox.cmd(["sh", "-c", 'x=$(readlink /proc/$$/fd/1); echo "$x" >&2; echo data'])
              | sandbox.cmd(["sh", "-c", 'x=$(readlink /proc/$$/fd/0); echo "$x" >&2; cat'])).run()
    written, read = (err.decode().strip() for err in result.stderr)
    assert written == read and written.startswith("pipe:[")
    assert result.stdout == b"data\n"
    mine = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}
    assert written not in mine


# --- three stages, three policies, real servers -----------------------------------------

PROBE = r"""
import sys, urllib.request

def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError as exc:
        return f"refused: {getattr(exc, 'reason', exc)}"

def read(path):
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError as exc:
        return f"refused: {exc.strerror}"

def report(**tries):
    print(json.dumps(tries), file=sys.stderr)

import json
a, b, secret = sys.argv[1:4]
"""

STAGES = {
    # stage 1: may fetch from A, nothing else
    "fetch": PROBE + "print(fetch(a)); report(b=fetch(b), secret=read(secret))",
    # stage 2: may read the private file, no network
    "join": PROBE + ("data = sys.stdin.read(); print(data + read(secret))\n"
                     "report(a=fetch(a), b=fetch(b))"),
    # stage 3: may send to B, nothing else
    "send": PROBE + ("data = sys.stdin.read(); print(data + fetch(b))\n"
                     "report(a=fetch(a), secret=read(secret))"),
}


def test_three_stages_each_with_its_own_files_and_network(web, private):  # noqa: F811 - the fixture
    a, b = web
    url_a, url_b = f"http://{a.host}:{a.port}/", f"http://{b.host}:{b.port}/"
    secret = str(private / "secret.csv")
    fetcher = Sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"{a.host}:{a.port}"]), quiet=True)
    joiner = Sandbox(Policy(fs_readable=[*SYSTEM, str(private)]), quiet=True)
    sender = Sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"{b.host}:{b.port}"]), quiet=True)
    args = [url_a, url_b, secret]
    result = (fetcher.cmd([PY, "-I", "-c", STAGES["fetch"], *args])
              | joiner.cmd([PY, "-I", "-c", STAGES["join"], *args])
              | sender.cmd([PY, "-I", "-c", STAGES["send"], *args])).run(timeout=60)
    assert result.exit_codes == (0, 0, 0), result.stderr
    assert result.stdout.decode().splitlines() == [
        "hello from 127.0.0.2", "id,name", "1,alice", "hello from 127.0.0.3"]
    fetched, joined, sent = (json.loads(err) for err in result.stderr)
    denied = "refused: [Errno 13] Permission denied"
    assert fetched == {"b": denied, "secret": "refused: Permission denied"}
    assert joined == {"a": denied, "b": denied}
    assert sent == {"a": denied, "secret": "refused: Permission denied"}
    assert (a.requests, b.requests) == (1, 1)  # only the allowed stage reached each


# --- feeding, statuses, time --------------------------------------------------------------


def test_input_feeds_the_first_stage():
    sandbox = Sandbox()
    data = os.urandom(1 << 20)  # more than a pipe holds: the feed runs beside the stages
    result = (sandbox.cmd(["cat"]) | sandbox.cmd(["sha256sum"])).run(input=data)
    expected = subprocess.run(["sha256sum"], input=data, capture_output=True).stdout
    assert result.stdout == expected and result.success


def test_every_stage_exit_status():
    sandbox = Sandbox()
    result = (sandbox.cmd(["sh", "-c", "echo a; echo one >&2; exit 3"])
              | sandbox.cmd(["sh", "-c", "cat; echo two >&2; exit 5"])
              | sandbox.cmd(["sh", "-c", "cat; kill -TERM $$"])).run()
    assert result.exit_codes == (3, 5, 128 + signal.SIGTERM)
    assert result.exit_code == 128 + signal.SIGTERM and not result.success
    assert result.stdout == b"a\n" and result.stderr == (b"one\n", b"two\n", b"")


def test_an_early_exit_downstream_is_sigpipe_upstream_as_in_a_shell():
    sandbox = Sandbox()
    result = (sandbox.cmd(["yes"]) | sandbox.cmd(["head", "-n", "2"])).run(timeout=30)
    shell = subprocess.run(["bash", "-c", "yes | head -n 2; echo ${PIPESTATUS[@]}"],
                           capture_output=True, text=True)
    assert result.stdout == b"y\ny\n"
    assert " ".join(map(str, result.exit_codes)) == shell.stdout.splitlines()[-1] == "141 0"
    assert result.exit_code == 0 and not result.success and not result.timed_out


def test_a_stage_not_found_is_127_and_the_rest_go_on():
    sandbox = Sandbox()
    result = (sandbox.cmd(["echo", "hi"]) | sandbox.cmd(["no-such-command-sandlock"])
              | sandbox.cmd(["wc", "-c"])).run()
    assert result.exit_codes[1:] == (127, 0)
    assert result.stdout.strip() == b"0"  # the last stage read EOF
    assert "no-such-command-sandlock" in result.start_errors[1]
    assert result.start_errors[0] is None and result.start_errors[2] is None


def test_timeout_kills_every_stage():
    sandbox = Sandbox()
    marker = unique_sleep()  # the `sleep 30` in the middle, findable
    start = time.monotonic()
    result = (sandbox.cmd(["yes"]) | sandbox.cmd(["sleep", marker])
              | sandbox.cmd(["cat"])).run(timeout=1)
    assert time.monotonic() - start < 10
    assert result.timed_out and result.exit_codes == (124, 124, 124)
    assert wait_no_process("sleep", marker)


def test_each_policy_timeout_applies_to_its_own_stage():
    marker = unique_sleep()
    result = (Sandbox().cmd(["echo", "hi"]) | Sandbox(Policy(timeout=0.5)).cmd(["sleep", marker])
              | Sandbox().cmd(["cat"])).run()
    assert result.exit_codes == (0, 124, 0) and result.timed_out
    assert result.stdout == b""
    assert wait_no_process("sleep", marker)


def test_max_output_limits_what_sandlock_reads_not_the_pipe(capfd):
    limited = Sandbox(Policy(max_output=1000))
    result = (limited.cmd(["head", "-c", "100000", "/dev/zero"])
              | limited.cmd(["sh", "-c", "wc -c; head -c 5000 /dev/zero"])).run()
    assert result.stdout == b"100000\n" + b"\0" * (1000 - 7)
    assert "output limit 1000 reached: dropped 4007 bytes of stdout" in capfd.readouterr().err


def test_each_stage_audits_its_own_limits(tmp_path):
    logs = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    first = Sandbox(Policy(max_output=10), audit=str(logs[0]), quiet=True)
    second = Sandbox(Policy(timeout=0.5), audit=str(logs[1]), quiet=True)
    result = (first.cmd(["sh", "-c", "head -c 50 /dev/zero >&2; echo x"])
              | second.cmd(["sleep", unique_sleep()])).run()
    assert result.exit_codes == (0, 124) and len(result.stderr[0]) == 10
    hits = [[(r["limit"], r["verdict"]) for r in map(json.loads, log.read_text().splitlines())
             if r.get("event") == "limit"] for log in logs]
    assert hits == [[("max_output", "truncate")], [("timeout", "kill")]]


# --- a stage that cannot start --------------------------------------------------------------


def test_a_stage_that_cannot_start_ends_those_started(tmp_path):
    marker = unique_sleep()
    before = open_fds()
    unconsented = Sandbox(Policy(mode="full-access"))  # without dangerously_allow_full_access
    pipeline = Sandbox().cmd(["sleep", marker]) | unconsented.cmd(["cat"])
    with pytest.raises(PolicyError) as info:
        pipeline.run(timeout=30)
    assert info.value.field == "mode"
    assert wait_no_process("sleep", marker)
    assert open_fds() == before  # no pipe end left behind either


def test_no_descriptor_is_left_behind():
    sandbox = Sandbox()
    before = open_fds()
    (sandbox.cmd(["echo", "x"]) | sandbox.cmd(["cat"]) | sandbox.cmd(["cat"])).run(input=b"")
    assert open_fds() == before


# --- building pipelines, and the arguments checked -------------------------------------------


def test_pipes_join_stages_and_pipelines():
    sandbox = Sandbox()
    a, b, c, d = (sandbox.cmd(["echo", name]) for name in "abcd")
    assert (a | b).stages == (a, b)
    assert (a | (b | c)).stages == ((a | b) | c).stages == (a, b, c)
    assert ((a | b) | (c | d)).stages == (a, b, c, d)
    assert isinstance(a | b, Pipeline) and isinstance(a, Stage)
    assert a.argv == ("echo", "a") and a.sandbox is sandbox


@pytest.mark.parametrize("other", ["cat", ["cat"], 3, None, Sandbox()])
def test_pipe_with_anything_else_is_a_type_error(other):
    stage = Sandbox().cmd(["cat"])
    with pytest.raises(TypeError):
        stage | other  # noqa: B018
    with pytest.raises(TypeError):
        other | stage  # noqa: B018
    with pytest.raises(TypeError):
        (stage | stage) | other  # noqa: B018


@pytest.mark.parametrize("argv", ["echo hi", [], ["echo", 1], [b"echo"], None])
def test_cmd_checks_argv_at_once(argv):
    with pytest.raises(PolicyError) as info:
        Sandbox().cmd(argv)
    assert info.value.field == "argv"


def test_bad_arguments_name_themselves():
    pipeline = Sandbox().cmd(["true"]) | Sandbox().cmd(["true"])
    with pytest.raises(TypeError, match="^input: expected bytes, got str"):
        pipeline.run(input="text")
    with pytest.raises(TypeError, match="^timeout: "):
        pipeline.run(timeout="5")
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(PolicyError) as info:
            pipeline.run(timeout=bad)
        assert info.value.field == "timeout"
    with pytest.raises(TypeError, match="^sandbox: expected a Sandbox"):
        Stage(Policy(), ["true"])
    with pytest.raises(TypeError, match="^stages: "):
        Pipeline(())
    with pytest.raises(TypeError, match="^stages: "):
        Pipeline((Sandbox(),))


def test_importing_sandlock_does_not_load_pipelines():
    code = ("import sys; from sandlock import Policy, Sandbox, Result\n"
            "Sandbox(Policy()).run(['true'])\n"
            "print('sandlock.api._pipeline' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), check=True)
    assert done.stdout == "False\n"


# --- as an ordinary user ---------------------------------------------------------------------

AS_USER = """
import json, sys
from sandlock import Policy, Sandbox
secret = sys.argv[1]
trusted = Sandbox(Policy(fs_readable=["/usr", "/lib", secret]))
restricted = Sandbox(Policy(fs_readable=["/usr", "/lib"]))
result = (trusted.cmd(["cat", secret])
          | restricted.cmd(["sh", "-c", f"tr a-z A-Z; cat {secret}"])).run(timeout=30)
print(json.dumps({"codes": result.exit_codes, "out": result.stdout.decode(),
                  "err": [e.decode() for e in result.stderr], "uid": __import__("os").getuid()}))
"""


def test_a_pipeline_as_an_ordinary_user(as_nobody, world_tmp):
    secret = world_tmp / "secret.csv"
    secret.write_text("id,name\n1,alice\n")
    secret.chmod(0o644)
    done = subprocess.run(as_nobody([sys.executable, "-c", AS_USER, str(secret)]),
                          capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["out"] == "ID,NAME\n1,ALICE\n"
    assert seen["codes"] == [0, 1] and "Permission denied" in seen["err"][1]
    assert seen["uid"] == (65534 if os.getuid() == 0 else os.getuid())


# --- the last stage's output to a descriptor ---------------------------------------------


def test_run_stdout_sends_the_last_stages_output_to_a_descriptor(tmp_path):
    out = tmp_path / "output.txt"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        result = (Sandbox().cmd(["echo", "to fd"]) | Sandbox().cmd(["cat"])).run(stdout=fd)
    finally:
        os.close(fd)
    assert result.success and result.stdout == b""
    assert out.read_text() == "to fd\n"
    with open(out, "wb") as file:  # a file object, likewise
        (Sandbox().cmd(["echo", "again"]) | Sandbox().cmd(["tr", "a-z", "A-Z"])).run(stdout=file)
    assert out.read_text() == "AGAIN\n"
    with pytest.raises(TypeError, match="stdout"):
        (Sandbox().cmd(["true"]) | Sandbox().cmd(["true"])).run(stdout="out.txt")


# --- fan-in: named sources gathered into one stage ------------------------------------------


def test_gather_two_sources_the_last_on_stdin_the_other_on_3():
    result = (Sandbox().cmd(["echo", "hello"]).as_("greeting")
              + Sandbox().cmd(["echo", "world"]).as_("name")
              | Sandbox().cmd(["sh", "-c", 'read name; greeting=$(cat <&3); echo "$greeting $name"'])
              ).run()
    assert result.success, result.stderr
    assert result.stdout == b"hello world\n"
    assert result.exit_codes == (0, 0, 0)  # the sources first, then the consumer


def test_gather_three_sources_then_a_further_stage():
    result = (Sandbox().cmd(["echo", "aaa"]).as_("a") + Sandbox().cmd(["echo", "bbb"]).as_("b")
              + Sandbox().cmd(["echo", "ccc"]).as_("c")
              | Sandbox().cmd(["sh", "-c", 'read c; read a <&3; read b <&4; echo "$a $b $c"'])
              | Sandbox().cmd(["tr", "a-z", "A-Z"])).run()
    assert result.success, result.stderr
    assert result.stdout == b"AAA BBB CCC\n"


def test_a_shell_consumer_finds_its_sources_by_name():
    result = (Sandbox().cmd(["echo", "D"]).as_("data") + Sandbox().cmd(["echo", "C"]).as_("code")
              | Sandbox().cmd(["sh", "-c", 'echo "$SANDLOCK_INPUTS"; cat <&"$SANDLOCK_INPUT_data"; '
                                           'cat <&"$SANDLOCK_INPUT_code"'])).run()
    assert result.stdout == b"data=3 code=0\nD\nC\n", result.stderr


def test_a_python_consumer_reads_sandlock_inputs():
    consumer = ("from sandlock import inputs\n"
                "print(sorted(inputs), 'code=' + inputs['code'].strip())\n"
                "with inputs.file('data') as data: print('data=' + data.read().decode().strip())\n")
    result = (Sandbox().cmd([PY, "-c", "print('DATA_CONTENT')"]).as_("data")
              + Sandbox().cmd([PY, "-c", "print('CODE_CONTENT')"]).as_("code")
              | Sandbox().cmd([PY, "-c", consumer])).run()
    assert result.success, result.stderr
    assert result.stdout == b"['code', 'data'] code=CODE_CONTENT\ndata=DATA_CONTENT\n"


def test_each_source_has_its_own_policy(private):
    """The data source may read the secret; the code source and the consumer may not:
    the consumer gets the secret only through the data source's pipe."""
    secret = str(private / "secret.csv")
    data = Sandbox(Policy(fs_readable=["/usr", "/lib", str(private)]))
    confined = Sandbox(Policy(fs_readable=["/usr", "/lib"]))
    result = (data.cmd(["cat", secret]).as_("data")
              + confined.cmd(["sh", "-c", f'echo "tr a-z A-Z <&3"; cat "{secret}"']).as_("code")
              | confined.cmd(["sh", "-c", f'eval "$(cat)"; cat "{secret}"'])).run()
    assert result.stdout == b"ID,NAME\n1,ALICE\n"  # through the data source's pipe
    assert b"Permission denied" in result.stderr[1]  # the code source: denied
    assert b"Permission denied" in result.stderr[2]  # the consumer: denied
    assert result.exit_codes == (0, 1, 1)


def test_no_stage_holds_another_ones_pipe():
    """Each source holds its stdio alone (no other source's pipe, to read or to write
    into), and the consumer its sources' read ends and nothing more."""
    fds = ["sh", "-c", "ls /proc/self/fd >&2"]  # (ls's own directory descriptor is 3)
    result = (Sandbox().cmd(fds).as_("a") + Sandbox().cmd(fds).as_("b")
              + Sandbox().cmd(fds).as_("c")
              | Sandbox().cmd(["sh", "-c", "cat >/dev/null; ls /proc/self/fd >&2"])).run()
    assert result.stderr[:3] == (b"0\n1\n2\n3\n",) * 3
    assert result.stderr[3] == b"0\n1\n2\n3\n4\n5\n"  # 3, 4: sources a and b; 5: ls's own


def test_gathers_are_written_with_names():
    stage = Sandbox().cmd(["echo"])
    with pytest.raises(TypeError, match="as_"):
        stage + stage
    with pytest.raises(ValueError, match="name"):
        stage.as_("two words")
    with pytest.raises(ValueError, match="each name once"):
        stage.as_("x") + stage.as_("x")
    with pytest.raises(TypeError):
        stage | (stage.as_("a") + stage.as_("b"))  # a gather comes first


GATHER_AS_NOBODY = r"""
import sys
from sandlock import Policy, Sandbox
secret, python = sys.argv[1], sys.argv[2]
data = Sandbox(Policy(fs_readable=["/usr", "/lib", secret]))
other = Sandbox(Policy(fs_readable=["/usr", "/lib"]))
consumer = "from sandlock import inputs; print(inputs['data'].strip(), inputs['code'].strip())"
result = (data.cmd(["cat", secret + "/secret.csv"]).as_("data")
          + other.cmd(["sh", "-c", f"echo code; cat {secret}/secret.csv >&2"]).as_("code")
          | Sandbox().cmd([python, "-c", consumer])).run()
print(result.exit_codes, result.stdout, b"Permission denied" in result.stderr[1])
"""


def test_a_gather_for_an_unprivileged_user(as_nobody, world_tmp):
    (world_tmp / "secret.csv").write_text("id,name\n")
    os.chmod(world_tmp / "secret.csv", 0o644)
    result = subprocess.run(as_nobody([sys.executable, "-c", GATHER_AS_NOBODY, str(world_tmp),
                                       sys.executable]),
                            capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "(0, 1, 0) b'id,name code\\n' True\n"
