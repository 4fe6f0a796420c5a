"""Nothing a sandboxed command leaves behind makes sandlock write where the user's own
tools will run it: the files sandlock writes on the host (learn -o, --audit,
--http-ca-out, ca export) are never written through a link the command planted, and
what they hold of the command's values is inert to a shell.

Each attack is performed for real, as an unprivileged user with a home outside /tmp
(reached, as many are, through a link of the system's: HOME=/.../home/u with
home -> home-real): the command plants a link to ~/.bashrc (or a hostile value), then
the user's later, unconfined action -- a shell that sources ~/.bashrc -- must find it
as it was and run nothing. Each is also run against a sandlock from before this
protection (``UNPROTECTED``) where one is installed: there the same steps must succeed,
which shows the test sees the attack.
"""

from __future__ import annotations

import errno
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import SANDLOCK, UNPRIVILEGED_UID
from httpservers import Upstream, free_port_on

from sandlock._hostfile import Output, UnsafeOutput, write_file
from sandlock.policy import Policy
from sandlock.policyfiles import dumps

# An interpreter whose sandlock predates this protection: the control.
UNPROTECTED = os.environ.get("SANDLOCK_UNPROTECTED_PYTHON", "/work/wt/base/.venv/bin/python")
RC = "echo rc-original\n"


class Home:
    """A user's home: ~/.bashrc, a project (the default workspace), markers that the
    planted code would create, a `sandlock` on the shell's PATH that marks being run
    (a backquoted `sandlock learn` in a sourced file runs it)."""

    def __init__(self, base: Path) -> None:
        real = base / "home-real" / "u"
        (real / "proj").mkdir(parents=True)
        (real / ".bashrc").write_text(RC)
        (base / "home").symlink_to("home-real")  # the system's link, as /home -> /usr/home
        self.path = base / "home" / "u"
        self.rc = self.path / ".bashrc"
        self.proj = self.path / "proj"
        self.substituted = self.path / "pwned-by-substitution"
        self.backquoted = self.path / "pwned-by-backquotes"
        tools = base / "bin"
        tools.mkdir()
        (tools / "sandlock").write_text(f"#!/bin/sh\ntouch {self.backquoted}\n")
        (tools / "sandlock").chmod(0o755)
        subprocess.run(["chown", "-R", f"{UNPRIVILEGED_UID}:{UNPRIVILEGED_UID}", str(real)], check=True)
        self.env = {**os.environ, "HOME": str(self.path)}
        self.env.pop("XDG_RUNTIME_DIR", None)  # (the test session's, which is root's)
        self.shell_env = {**self.env, "PATH": f"{tools}:{os.environ['PATH']}"}

    def payload(self) -> str:
        """An HTTP path that, in a shell's double quotes, creates a marker."""
        return f"/x$(touch$IFS{self.substituted})"

    def source(self, path: Path | None = None, as_user=None) -> str:
        """The user's next shell: ``source ~/.bashrc`` (or ``path``); its output."""
        script = f'source "{path}"' if path else 'source "$HOME/.bashrc"'
        done = subprocess.run(as_user(["bash", "-c", script]), env=self.shell_env, cwd=self.path,
                              capture_output=True, text=True, timeout=30)
        return done.stdout

    def untouched(self, as_user) -> bool:
        """~/.bashrc as it was, and sourcing it runs only what it held."""
        return (self.rc.read_text() == RC and self.source(as_user=as_user) == "rc-original\n"
                and not self.substituted.exists() and not self.backquoted.exists())


@pytest.fixture
def home(unscratched):
    return Home(unscratched)


@pytest.fixture(params=["protected", "unprotected"])
def tree(request, as_nobody):
    """The sandlock command line under test, and whether it is the protected one."""
    if request.param == "protected":
        return SANDLOCK, True
    if not os.access(UNPROTECTED, os.X_OK):
        pytest.skip(f"no unprotected sandlock at {UNPROTECTED} (SANDLOCK_UNPROTECTED_PYTHON)")
    return [UNPROTECTED, "-m", "sandlock"], False


@pytest.fixture
def api():
    port = free_port_on("127.0.0.2")
    with Upstream("127.0.0.2", port, name="api"):
        yield ["--resolve", "api.test=127.0.0.2", "--http-port", str(port)], f"http://api.test:{port}"


def sandlock_as(as_user, command: list[str], home: Home, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(as_user([*command, *args]), env=home.env, cwd=home.proj,
                          capture_output=True, text=True, timeout=90)


def plant(as_user, home: Home, name: str) -> None:
    """An earlier run's command leaves ``name`` in the workspace as a link to ~/.bashrc."""
    done = sandlock_as(as_user, SANDLOCK, home, "run", "--", "ln", "-sfn", str(home.rc), name)
    assert done.returncode == 0, done.stderr
    assert os.readlink(home.proj / name) == str(home.rc)


# --- learn -o ---------------------------------------------------------------------------------


def test_learn_never_writes_its_policy_through_a_link_the_command_made(tree, home, api, as_nobody):
    command, protected = tree
    names, url = api
    output = home.proj / "learned.toml"  # (absolute, through the system's link)
    hostile = f"ln -s {home.rc} learned.toml; curl -sS -o /dev/null '{url}{home.payload()}'"
    done = sandlock_as(as_nobody, command, home, "learn", "-o", str(output), *names,
                       "--", "sh", "-c", hostile)
    assert done.returncode == 0, done.stderr
    if not protected:  # the control: the policy went into ~/.bashrc, and bash ran it
        assert home.rc.read_text() != RC
        home.source(as_user=as_nobody)
        assert home.substituted.exists() and home.backquoted.exists()
        return
    assert home.untouched(as_nobody)
    assert not output.is_symlink()  # the link was replaced, never written through
    learned = tomllib.loads(output.read_text())
    assert learned["http"]["allow"] == [f"GET api.test{home.payload()}"]  # exact
    home.source(output, as_user=as_nobody)  # the policy file itself, sourced by mistake
    assert not home.substituted.exists() and not home.backquoted.exists()


def test_learn_refuses_a_directory_link_the_command_made(tree, home, as_nobody):
    """An earlier run replaced a directory of the workspace with a link to $HOME."""
    command, protected = tree
    done = sandlock_as(as_nobody, SANDLOCK, home, "run", "--", "ln", "-s", str(home.path), "out")
    assert done.returncode == 0, done.stderr
    done = sandlock_as(as_nobody, command, home, "learn", "-o", "out/.bashrc", "--", "true")
    if not protected:  # the control: written where the link led, over ~/.bashrc
        assert home.rc.read_text() != RC
        return
    assert done.returncode == 2
    assert done.stderr.startswith("sandlock: error: --output: cannot write out/.bashrc: ./out is a "
                                  "symbolic link in a directory you can write"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert home.untouched(as_nobody)


def test_learn_checks_its_output_before_the_command_runs(home, as_nobody):
    plant(as_nobody, home, "learned.toml")
    ran = home.proj / "ran"
    done = sandlock_as(as_nobody, SANDLOCK, home, "learn", "-o", "learned.toml", "--", "touch", str(ran))
    assert done.returncode == 2
    assert "--output: cannot write learned.toml: it is a symbolic link" in done.stderr
    assert not ran.exists()
    assert home.untouched(as_nobody)


# --- --audit ----------------------------------------------------------------------------------


def test_audit_never_appends_through_a_link_an_earlier_run_made(tree, home, api, as_nobody):
    command, protected = tree
    names, url = api
    sandlock_as(as_nobody, SANDLOCK, home, "run", "--audit", "audit.jsonl", "--", "sh", "-c",
                f"rm audit.jsonl; ln -s {home.rc} audit.jsonl")
    # The next run's denied request is recorded with the path the command chose.
    done = sandlock_as(as_nobody, command, home, "run", "--audit", "audit.jsonl", *names,
                       "--http-allow", "GET api.test/ok", "--", "curl", "-sS", "-o", "/dev/null",
                       f"{url}{home.payload()}")
    if not protected:
        assert home.payload() in home.rc.read_text()
        home.source(as_user=as_nobody)
        assert home.substituted.exists()
        return
    assert done.returncode == 2
    assert done.stderr == ("sandlock: error: --audit: cannot open audit.jsonl: it is a symbolic link "
                           "(sandlock writes through none: remove it, or name another file)\n")
    assert home.untouched(as_nobody)


def test_the_late_audit_record_goes_to_the_file_opened_at_start(tree, home, as_nobody):
    """What --max-output dropped is recorded after the command ended: by then the
    command has moved the log aside and put a link to ~/.bashrc at its name."""
    command, protected = tree
    swap = f"yes | head -c 100000; mv audit.jsonl audit.old; ln -s {home.rc} audit.jsonl"
    done = sandlock_as(as_nobody, command, home, "run", "--audit", "audit.jsonl", "--max-output", "1K",
                       "--", "sh", "-c", swap)
    assert "dropped" in done.stderr
    if not protected:
        assert "max_output" in home.rc.read_text()
        return
    assert home.untouched(as_nobody)
    assert '"limit": "max_output"' in (home.proj / "audit.old").read_text()


# --- --http-ca-out and ca export ---------------------------------------------------------------


def test_http_ca_out_never_replaces_the_file_a_link_leads_to(tree, home, api, as_nobody):
    command, protected = tree
    names, _ = api
    plant(as_nobody, home, "ca.pem")
    done = sandlock_as(as_nobody, command, home, "run", *names, "--http-allow", "GET api.test/ok",
                       "--http-ca-out", "ca.pem", "--", "true")
    if not protected:
        assert "BEGIN CERTIFICATE" in home.rc.read_text()
        return
    assert done.returncode == 2
    assert done.stderr.startswith("sandlock: error: --http-ca-out: cannot write ca.pem: it is a "
                                  "symbolic link"), done.stderr
    assert home.untouched(as_nobody)


def test_ca_export_never_replaces_the_file_a_link_leads_to(tree, home, as_nobody):
    command, protected = tree
    made = sandlock_as(as_nobody, SANDLOCK, home, "ca", "init")
    assert made.returncode == 0, made.stderr
    plant(as_nobody, home, "cert.pem")
    done = sandlock_as(as_nobody, command, home, "ca", "export", "cert.pem")
    if not protected:
        assert "BEGIN CERTIFICATE" in home.rc.read_text()
        return
    assert done.returncode == 2
    assert done.stderr.startswith("sandlock: error: ca export: cannot write cert.pem: it is a "
                                  "symbolic link"), done.stderr
    assert home.untouched(as_nobody)
    (home.proj / "cert.pem").unlink()  # the user's own, fresh name: written
    done = sandlock_as(as_nobody, command, home, "ca", "export", "cert.pem")
    assert done.returncode == 0, done.stderr
    assert (home.proj / "cert.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_the_proxys_copy_of_the_certificate_is_not_written_through_a_link(tmp_path):
    """The proxy writes --http-ca-out itself with a persistent CA: the same writer."""
    from sandlock import ca

    precious = tmp_path / "precious"
    precious.write_text(RC)
    (tmp_path / "ca.pem").symlink_to(precious)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(ca.CAError, match="symbolic link"):
        ca.write_trust_files(b"-----BEGIN CERTIFICATE-----\n", str(run_dir),
                             certificate_out=str(tmp_path / "ca.pem"))
    assert precious.read_text() == RC


# --- what the written files hold ----------------------------------------------------------------


HOSTILE = ["GET api.test/x$(touch$IFS{m})", "GET api.test/`touch$IFS{m}`",
           'GET api.test/"$(touch$IFS{m})"\\', "GET api.test/a\n[process]\ntimeout = 1"]


def test_policy_text_is_exact_toml_and_inert_to_a_shell(tmp_path):
    marker = tmp_path / "marker"
    values = [value.format(m=marker) for value in HOSTILE]
    policy = Policy(http_allow=tuple(values[:3]), env={"A": values[3], "B": f"$(touch {marker})"})
    text = dumps(policy, description=f"`touch {marker}` $(touch {marker})",
                 comments=[f"x\n[process]\n$(touch {marker}) `touch {marker}`"])
    loaded = tomllib.loads(text)
    assert loaded["http"]["allow"] == values[:3]
    assert loaded["process"]["env"] == [f"A={values[3]}", f"B=$(touch {marker})"]
    assert set(loaded) == {"description", "http", "process"}  # no key the comment made
    assert "`" not in text and "$(" not in text
    path = tmp_path / "policy.toml"
    path.write_text(text)
    subprocess.run(["bash", "-c", f'source "{path}"'], capture_output=True, timeout=30)
    assert not marker.exists()
    # The control: the same values as plain double-quoted text do run in bash.
    path.write_text("".join(f'x="{value}"\n' for value in values))
    subprocess.run(["bash", "-c", f'source "{path}"'], capture_output=True, timeout=30)
    assert marker.exists()


def test_learned_paths_that_are_not_text_become_a_wildcard():
    from sandlock.policyfiles import learn

    records = [{"protocol": "http", "method": "GET", "hostname": "api.test",
                "path": "/files/\udcff\udcfe/raw", "verdict": "allow"}]
    assert learn(records, 0).http_allow == ("GET api.test/files/*",)


# --- the writer itself ----------------------------------------------------------------------------


def test_a_link_at_the_name_is_refused_then_replaced_never_followed(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text(RC)
    link = tmp_path / "out"
    link.symlink_to(precious)
    with pytest.raises(UnsafeOutput) as refused:
        Output(link)
    assert refused.value.errno == errno.ELOOP
    link.unlink()
    with Output(link) as output:
        link.symlink_to(precious)  # planted once the output was checked
        output.replace(b"new\n")
    assert not link.is_symlink() and link.read_bytes() == b"new\n"
    assert precious.read_text() == RC
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftover


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="makes files of root's and of another user's")


@root_only
def test_what_is_not_a_regular_file_of_yours_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeOutput, match="not a regular file"):
        Output(fifo).append()  # refused before any open: no reader to wait for
    theirs = tmp_path / "theirs"
    theirs.write_text("")
    os.chown(theirs, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    with pytest.raises(UnsafeOutput, match=f"belongs to uid {UNPRIVILEGED_UID}"):
        Output(theirs)
    log = tmp_path / "log"
    log.write_text("")
    os.link(log, tmp_path / "other-name")
    with Output(log) as output, pytest.raises(UnsafeOutput, match="other hard links"):
        output.append()


@root_only
def test_links_in_the_directory_path(tmp_path):
    """Followed in a directory only root may change; refused in one anyone may write."""
    target = tmp_path / "target"
    target.mkdir()
    system = tmp_path / "system"
    system.mkdir(mode=0o755)
    os.chown(system, 0, 0)
    (system / "link").symlink_to(target)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "link").symlink_to(target)
    write_file(system / "link" / "f", b"x")
    assert (target / "f").read_bytes() == b"x"
    with pytest.raises(UnsafeOutput, match="shared/link is a symbolic link in a directory you can write"):
        write_file(shared / "link" / "g", b"x")
    assert not (target / "g").exists()
    (system / "loop").symlink_to("loop")
    with pytest.raises(OSError) as looped:
        write_file(system / "loop" / "h", b"x")
    assert looped.value.errno == errno.ELOOP


def test_an_appended_file_is_opened_once(tmp_path):
    from sandlock._auditlog import AuditLog

    log = AuditLog(str(tmp_path / "audit.jsonl"))
    os.rename(tmp_path / "audit.jsonl", tmp_path / "moved")
    log.write({"event": "late"})
    log.close()
    assert '"event": "late"' in (tmp_path / "moved").read_text()
    assert not (tmp_path / "audit.jsonl").exists()
