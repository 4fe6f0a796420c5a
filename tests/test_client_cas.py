"""Clients whose own configuration names a CA trust the sandbox CA in an inspecting run,
and keep trusting the CA they were configured with (docs/ca.md, "Clients with a CA
setting of their own"): npm's `cafile`, pip's `cert`, git's `http.sslCAInfo`, curl's
.curlrc `cacert`, cargo's `http.cainfo`.

Two loopback servers share one port. registry.test is inspected: the client is shown a
leaf of the sandbox CA (the proxy trusts the server's own CA through --upstream-ca).
corp.test is passed through untouched (`* corp.test`): the client sees the real
certificate, signed by the user's "corporate" CA, which only the client's own
configuration names. Each user lives in a realistic home (outside /tmp, denied to the
sandbox but for its tools); the command gets nothing but what sandlock sets.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import trustme

from conftest import SANDLOCK, UNPRIVILEGED_UID, users
from httpservers import Upstream, free_port_on, served_repository

API, CORP = "127.0.0.2", "127.0.0.3"
SECRET = "SECRETKEYMATERIAL0123456789"
TOKEN = "npm_TOKEN0123456789abcdef"


@pytest.fixture(scope="module")
def port():
    return free_port_on(API, CORP)


@pytest.fixture(scope="module")
def corp_ca():
    return trustme.CA()


def _registry(directory, host: str, port: int) -> str:
    """What each client asks for: npm's packument, pip's project page, a git repository
    (dumb HTTP), a cargo sparse index whose search API is the same host."""
    root = served_repository(directory)  # <directory>/srv, holding repo.git
    files = {
        "tinypkg": json.dumps({"name": "tinypkg", "dist-tags": {"latest": "1.0.0"},
                               "versions": {"1.0.0": {"name": "tinypkg", "version": "1.0.0"}}}),
        "simple/tinypkg/index.html": "<html><body></body></html>\n",
        "index/config.json": json.dumps({"dl": f"https://{host}:{port}/dl", "api": f"https://{host}:{port}"}),
        "api/v1/crates": json.dumps({"crates": [{"name": "tinypkg", "max_version": "1.0.0",
                                                 "description": host}], "meta": {"total": 1}}),
    }
    for name, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "w") as file:
            file.write(text)
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory, port, upstream_ca, corp_ca):
    root = tmp_path_factory.mktemp("served")
    with contextlib.ExitStack() as stack:
        yield {host: stack.enter_context(Upstream(address, port, name=host, files=_registry(
                   root / host, host, port), files_at="/", tls=ca, tls_names=(host,)))
               for host, address, ca in (("registry.test", API, upstream_ca[0]),
                                         ("corp.test", CORP, corp_ca))}


@pytest.fixture
def servers(served):
    for server in served.values():
        server.log.clear()
    return served


class Home:
    """A user's home outside /tmp (``unscratched``), with the corporate CA in
    ~/certs, a project to run in, and the tools' variables; ``run`` runs sandlock as
    that user (root, or nobody, who then owns the home)."""

    def __init__(self, path, as_user, port: int, upstream_ca: str, corp_ca) -> None:
        self.path, self.as_user, self.port = path, as_user, port
        self.project = path / "proj"
        self.project.mkdir()
        (self.project / "package.json").write_text('{"name": "p", "version": "1.0.0"}')
        (path / "certs").mkdir()
        self.corp_ca = path / "certs" / "corp-ca.pem"
        corp_ca.cert_pem.write_to_path(str(self.corp_ca))
        self.upstream_ca = path / "upstream-ca.pem"  # (readable by nobody too)
        shutil.copy(upstream_ca, self.upstream_ca)

    def write(self, relative: str, text: str) -> None:
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def url(self, host: str, path: str = "") -> str:
        return f"https://{host}:{self.port}/{path}"

    def run(self, *cmd: str, options: tuple[str, ...] = (), env: dict | None = None,
            sandlock: list[str] | None = None) -> subprocess.CompletedProcess:
        environment = {**os.environ, "HOME": str(self.path), "XDG_DATA_HOME": str(self.path / ".local/share"),
                       "npm_config_update_notifier": "false", **(env or {})}
        if self.as_user is not None:  # (the session's runtime directory is root's)
            (self.path / ".run").mkdir(mode=0o700, exist_ok=True)
            # no proxy fork server that would outlive the home it was started for
            environment.update(XDG_RUNTIME_DIR=str(self.path / ".run"), SANDLOCK_PROXY_FORKSERVER="0")
            subprocess.run(["chown", "-R", f"{UNPRIVILEGED_UID}:{UNPRIVILEGED_UID}", str(self.path)],
                           check=True)
        argv = [*(sandlock or SANDLOCK), "run", "--resolve", f"registry.test={API}", "--resolve", f"corp.test={CORP}",
                "--http-port", str(self.port), "--upstream-ca", str(self.upstream_ca),
                "--http-allow", "GET registry.test/*", "--http-allow", "* corp.test", *options, "--", *cmd]
        if self.as_user is not None:
            argv = self.as_user(argv)
        return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=self.project,
                              env=environment)


@pytest.fixture
def home(unscratched, port, upstream_ca, corp_ca):
    return Home(unscratched, None, port, upstream_ca[1], corp_ca)


@pytest.fixture
def some_home(unscratched, port, upstream_ca, corp_ca, as_nobody_or_self):
    """``home`` as the test user, or (``@users``'s "nobody") as uid 65534."""
    return Home(unscratched, as_nobody_or_self, port, upstream_ca[1], corp_ca)


def reached(server, path: str) -> bool:
    return any(logged.split("?")[0] == path for logged in server.paths())


def npm_view(home: Home, host: str) -> str:
    return f"npm view tinypkg version --fetch-retries=0 --registry {home.url(host)}"


# --- npm -------------------------------------------------------------------------------


@users
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_with_a_project_npmrc_cafile_trusts_both_cas(some_home, servers):
    """A project's .npmrc names the corporate CA (as corporate machines do): npm then
    ignored NODE_EXTRA_CA_CERTS and refused the proxy (UNABLE_TO_VERIFY_LEAF_SIGNATURE,
    after 70 s of retries by default). Now it gets a bundle of the system's CAs, the
    corporate CA and the sandbox CA, through npm_config_cafile."""
    home = some_home
    home.write("proj/certs/corp-ca.pem", home.corp_ca.read_text())  # (npm reads it: docs/ca.md)
    (home.project / ".npmrc").write_text("cafile=certs/corp-ca.pem\n")  # (relative to the project)
    result = home.run("sh", "-c", f"{npm_view(home, 'registry.test')} && {npm_view(home, 'corp.test')}")
    assert result.stdout.splitlines() == ["1.0.0", "1.0.0"], (result.returncode, result.stdout, result.stderr)
    assert reached(servers["registry.test"], "/tinypkg") and reached(servers["corp.test"], "/tinypkg")
    assert "refused sandlock's CA" not in result.stderr


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_cafile_with_a_ca_the_proxy_makes(home, servers):
    """With the persistent CA the proxy writes the trust files: it is given the
    corporate CA's certificate along with the rest of its configuration."""
    made = subprocess.run([*SANDLOCK, "ca", "init"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "XDG_DATA_HOME": str(home.path / ".local/share")})
    assert made.returncode == 0, made.stderr
    home.write("proj/certs/corp-ca.pem", home.corp_ca.read_text())  # (npm reads it: docs/ca.md)
    (home.project / ".npmrc").write_text("cafile=certs/corp-ca.pem\n")  # (relative to the project)
    result = home.run("sh", "-c", f"{npm_view(home, 'registry.test')} && {npm_view(home, 'corp.test')}")
    assert result.stdout.splitlines() == ["1.0.0", "1.0.0"], (result.returncode, result.stdout, result.stderr)


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_the_users_npmrc_gives_npm_its_ca_and_never_its_token(home, servers):
    """~/.npmrc is a credential store every sandbox is denied: npm inside cannot read
    it, so its cafile did not apply and the corporate registry failed. sandlock reads it
    as the user and carries the CA it names into npm's bundle, nothing else of it."""
    home.write(".npmrc", f"cafile={home.corp_ca}\n//corp.test/:_authToken={TOKEN}\n")
    check = ('cat ~/.npmrc 2>/dev/null && echo READ-NPMRC; '
             f'grep -rl {TOKEN} "$(dirname "$npm_config_cafile")" /proc/self/environ; '
             f'{npm_view(home, "corp.test")}')
    result = home.run("sh", "-c", check)
    assert result.stdout.splitlines() == ["1.0.0"], result.stdout + result.stderr
    assert reached(servers["corp.test"], "/tinypkg")


# --- pip, git, curl, cargo -------------------------------------------------------------


def test_pip_conf_cert_is_kept_beside_the_sandbox_ca(home, servers):
    """PIP_CERT (sandlock's bundle) beats pip.conf's cert, which names the corporate
    CA: the corporate index failed its handshake. Now PIP_CERT's bundle holds it."""
    home.write(".config/pip/pip.conf", f"[global]\ncert = {home.corp_ca}\n")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0", "--no-cache-dir",
           "-d", "/tmp/dl"]
    for host in ("registry.test", "corp.test"):
        result = home.run(*pip, "--index-url", home.url(host, "simple/"), "tinypkg")
        assert reached(servers[host], "/simple/tinypkg/"), result.stderr
        assert "CERTIFICATE_VERIFY_FAILED" not in result.stderr


def test_git_sslcainfo_is_kept_beside_the_sandbox_ca(home, servers):
    """GIT_SSL_CAINFO beats http.sslCAInfo (here for one URL, in ~/.gitconfig, which
    the sandbox may read): the corporate server failed verification."""
    home.write(".gitconfig", f'[http "{home.url("corp.test")}"]\n\tsslCAInfo = {home.corp_ca}\n')
    result = home.run("sh", "-c", f"git ls-remote {home.url('registry.test', 'repo.git')} && "
                                  f"git ls-remote {home.url('corp.test', 'repo.git')}")
    assert [line.split("\t")[1] for line in result.stdout.splitlines()].count("HEAD") == 2, result.stderr


@users
def test_curlrc_cacert_is_replaced_by_the_runs_curlrc(some_home, servers):
    """A .curlrc's cacert beats CURL_CA_BUNDLE and SSL_CERT_FILE: curl refused the
    proxy. The run's own .curlrc (CURL_HOME) names a bundle holding both CAs."""
    home = some_home
    home.write("proj/certs/corp-ca.pem", home.corp_ca.read_text())
    home.write("proj/.curl/.curlrc", f'--cacert "{home.project}/certs/corp-ca.pem"\n')
    result = home.run("sh", "-c", f"curl -sS {home.url('registry.test', 'tinypkg')} && "
                                  f"curl -sS {home.url('corp.test', 'tinypkg')}",
                      env={"CURL_HOME": str(home.project / ".curl")})
    assert result.returncode == 0, result.stderr
    assert reached(servers["registry.test"], "/tinypkg") and reached(servers["corp.test"], "/tinypkg")


def _cargo() -> str | None:
    """cargo itself (rustup's proxy needs its home, outside the user's)."""
    if shutil.which("rustup"):
        found = subprocess.run(["rustup", "which", "cargo"], capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.strip()
    return shutil.which("cargo")


def test_cargo_cainfo_is_kept_beside_the_sandbox_ca(home, servers):
    cargo = _cargo()
    if cargo is None:
        pytest.skip("cargo is not installed")
    home.write(".cargo/config.toml", f'[http]\ncainfo = "{home.corp_ca}"\n')
    widened = ":".join(filter(None, (os.environ.get("SANDLOCK_FS_READ"), os.path.dirname(cargo))))
    for host in ("registry.test", "corp.test"):
        result = home.run(cargo, "search", "--index", f"sparse+{home.url(host, 'index/')}", "tinypkg",
                          env={"SANDLOCK_FS_READ": widened})
        assert f'tinypkg = "1.0.0"    # {host}' in result.stdout, result.stderr


# --- what sandlock reads is the user's, what it copies must be certificates alone ---------


def _body(pem: str) -> str:
    """A certificate's base64 lines, joined (as it appears in any bundle)."""
    return "".join(pem.strip().splitlines()[1:-1])


@users
def test_a_planted_config_copies_no_secret_into_the_trust_files(some_home, servers):
    """A confined command writes configurations the next run's sandlock reads as the
    user: a project .npmrc, a .cargo/config.toml and a venv's pip.conf naming, as CA
    files, an SSH key and a token file that every sandbox is denied. The next run's
    command finds no byte of them in its trust files; a certificate named the same way,
    in the same denied directory, does reach them (the control: what is named is read,
    and the command would see a copy)."""
    home = some_home
    key, token, cert = home.path / ".ssh/id_ed25519", home.path / ".aws/credentials", home.path / ".ssh/ca.pem"
    home.write(".ssh/id_ed25519", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n-----END OPENSSH PRIVATE KEY-----\n")
    home.write(".aws/credentials", f"[default]\naws_secret_access_key = {SECRET}\n")
    home.write(".ssh/ca.pem", home.corp_ca.read_text())
    plant = (f"printf 'cafile={key}\\ncafile={token}\\nca={SECRET}\\n' > .npmrc && "
             f"mkdir -p .cargo .venv && printf '[http]\\ncainfo = \"{key}\"\\n' > .cargo/config.toml && "
             f"printf '[global]\\ncert = {token}\\n' > .venv/pip.conf && echo planted")
    venv = {"VIRTUAL_ENV": str(home.project / ".venv")}
    assert home.run("sh", "-c", plant, env=venv).stdout == "planted\n"
    show = ('for f in "$npm_config_cafile" "$CARGO_HTTP_CAINFO" "$PIP_CERT" "$SSL_CERT_FILE" '
            '"$(dirname "$SSL_CERT_FILE")"/*; do cat "$f"; done; cat ~/.ssh/id_ed25519 ~/.aws/credentials')
    result = home.run("sh", "-c", show, env=venv)
    assert "BEGIN CERTIFICATE" in result.stdout, result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert _body(home.corp_ca.read_text()) not in result.stdout.replace("\n", "")  # (not named yet)
    with open(home.project / ".npmrc", "a") as npmrc:
        npmrc.write(f"cafile={cert}\n")
    control = home.run("sh", "-c", 'cat "$npm_config_cafile"; cat ~/.ssh/ca.pem', env=venv)
    assert _body(home.corp_ca.read_text()) in control.stdout.replace("\n", "")
    assert "Permission denied" in control.stderr  # (the file itself stays denied)


def test_a_planted_fifo_does_not_hold_the_start(home, servers):
    """A FIFO where sandlock reads a configuration, or named as a CA file, would block
    a plain open and read forever (the control); sandlock opens without blocking and
    reads regular files only: the run starts and its command runs."""
    plant = ("mkfifo .npmrc-pipe ca-pipe && mkdir -p .cargo && mkfifo .cargo/config.toml && "
             "ln -s .npmrc-pipe .npmrc && echo planted")
    assert home.run("sh", "-c", plant).stdout == "planted\n"
    with open(home.project / "pip.conf", "w") as conf:  # (a pip.conf naming the FIFO)
        conf.write(f"[global]\ncert = {home.project / 'ca-pipe'}\n")
    blocked = subprocess.run(["timeout", "2", "cat", str(home.project / "ca-pipe")])
    assert blocked.returncode == 124  # the control: a plain read waits for a writer
    result = home.run("echo", "ran", env={"PIP_CONFIG_FILE": str(home.project / "pip.conf")})
    assert (result.returncode, result.stdout) == (0, "ran\n"), result.stderr
