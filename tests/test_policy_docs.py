"""The policies in docs/: every example file and every TOML block is run (the sh and
console blocks: test_doc_examples.py).

Each example in docs/examples/ is validated, printed back (identically), checked with
`sandlock policy test` against requests it must allow and deny, and run against local
stand-ins of its hosts (loopback aliases, `--resolve`, plain HTTP on a test port: the
requests a real client makes get the answers the policy test predicts). Real clients
(git, pip, npm) run with the git, pip and npm examples.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import SANDLOCK, sandlock
from httpservers import Upstream, free_port_on
from sandlock.policyfiles._schema import BY_SECTION, KEYS, TABLE_SECTIONS
from sandlock.policyfiles._toml import _scalar

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"


# --- docs/policy.md lists every key as the code defines it ---------------------------


def documented_keys() -> dict[tuple[str, str], list[str]]:
    """(section, key) -> the cells of its row in docs/policy.md."""
    rows: dict[tuple[str, str], list[str]] = {}
    section = None
    for line in (DOCS / "policy.md").read_text().splitlines():
        if line.startswith("#"):
            heading = re.fullmatch(r"### \[(\w+)\]", line)
            section = heading.group(1) if heading else None
        elif section and line.startswith("| `"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            whole = section in TABLE_SECTIONS and cells[0] == "`NAME`"  # the section is the table
            rows[(section, "" if whole else cells[0].strip("`"))] = cells
    return rows


def doc_type(key) -> str:
    return key.kind.description.replace("string", "path") if key.path else key.kind.description


def doc_default(default: object) -> str:
    if default is None:
        return "none"
    if isinstance(default, Mapping):
        return "`{}`"
    if isinstance(default, tuple):
        return f"`[{', '.join(map(_scalar, default))}]`"
    return f"`{_scalar(default)}`"


def test_every_key_is_documented_with_its_type_default_and_option():
    rows = documented_keys()
    assert set(rows) == {(key.section, key.name) for key in KEYS}
    for key in KEYS:
        _, field, kind, default, flag, _ = rows[(key.section, key.name)]
        assert (field, kind, default, flag) == (f"`{key.field}`", doc_type(key),
                                                doc_default(key.default), f"`{key.flag}`")
    headings = re.findall(r"^### \[(\w+)\]", (DOCS / "policy.md").read_text(), re.M)
    assert headings == list(BY_SECTION)


# --- every TOML and console block of the docs -------------------------------------------


def blocks(kind: str) -> list[tuple[str, str]]:
    found = []
    for doc in sorted([*DOCS.glob("*.md"), ROOT / "README.md"]):
        for block in re.findall(rf"^```{kind}\n(.*?)^```$", doc.read_text(), re.M | re.S):
            found.append((doc.name, block))
    return found


@pytest.mark.parametrize("doc, text", blocks("python"))
def test_python_blocks_run_as_written(tmp_path, doc, text):
    """Every Python example of the docs and the README is a program that runs, and prints
    what its comments say (``print(...)  # 0 b'hello\\n'``)."""
    if doc == "ray.md" and os.environ.get("SANDLOCK_REQUIRE_RAY") != "1":
        pytest.importorskip("ray", reason="the ray extra is not installed: pip install '.[ray]'")
    script = tmp_path / "example.py"
    script.write_text(text)
    # The system's python3 and tools, as on the machine the docs describe.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    expected = re.findall(r"^\s*print\(.*\)\s+# (.+)$", text, re.M)
    assert result.stdout.splitlines()[:len(expected)] == expected, result.stderr


@pytest.mark.parametrize("doc, text", blocks("toml"))
def test_toml_blocks_are_valid_policies_that_print_back(tmp_path, doc, text):
    path = tmp_path / "block.toml"
    path.write_text(text)
    checked = sandlock("profile", "validate", str(path))
    assert checked.returncode == 0, checked.stderr
    assert_prints_back(path, tmp_path)


def documented_commands() -> list[str]:
    """The sandlock commands in the examples' own comments (continuation lines joined;
    those of the docs' sh and console blocks run in test_doc_examples.py)."""
    texts = [re.sub(r"^#   ?", "", line) for path in sorted(EXAMPLES.glob("*.toml"))
             for line in path.read_text().splitlines() if line.startswith("#   ")]
    lines = "\n".join(texts).replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines
            if line.startswith(("sandlock run", "sandlock policy")) and "docs/examples/" in line]


@pytest.mark.parametrize("command", documented_commands())
def test_documented_commands_take_their_policy(command):
    """Each parses as shown (run: with --print-policy added, so nothing runs)."""
    argv = shlex.split(command)[1:]
    if argv[0] == "run":
        argv.insert(1, "--print-policy")
    result = subprocess.run([*SANDLOCK, *argv], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode in ((0,) if argv[0] == "run" else (0, 1)), result.stderr


def assert_prints_back(path: Path, tmp_path: Path) -> None:
    first = sandlock("run", "--policy", str(path), "--print-policy")
    assert first.returncode == 0, first.stderr
    again = tmp_path / "again.toml"
    again.write_text(first.stdout)
    assert sandlock("run", "--policy", str(again), "--print-policy").stdout == first.stdout


# --- the examples ----------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    allowed: tuple[str, ...]  # requests ('METHOD URL') and --net endpoints ('tcp://...')
    denied: tuple[str, ...]


CASES = {
    "github-readonly.toml": Example(
        allowed=("GET https://api.github.com/repos/x/y", "HEAD https://api.github.com/",
                 "GET https://api.github.com/search/code?q=admin+x"),
        denied=("POST https://api.github.com/repos/x/y/issues",
                "DELETE https://api.github.com/repos/x/y", "PATCH https://api.github.com/user",
                "GET https://github.com/x/y", "GET https://uploads.github.com/x",
                "tcp://api.github.com:22", "tcp://github.com:22"),
    ),
    "pip-install.toml": Example(
        allowed=("GET https://pypi.org/simple/flask/", "GET https://pypi.org/pypi/flask/json",
                 "GET https://files.pythonhosted.org/packages/ab/cd/flask-3.0-py3-none-any.whl"),
        denied=("POST https://upload.pypi.org/legacy/", "POST https://pypi.org/simple/flask/",
                "GET https://pypi.org/manage/account/",
                "PUT https://files.pythonhosted.org/packages/x",
                "GET https://evil.example/simple/flask/"),
    ),
    "npm-install.toml": Example(
        allowed=("GET https://registry.npmjs.org/left-pad",
                 "GET https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",
                 "GET https://registry.npmjs.org/@types%2fnode"),
        denied=("POST https://registry.npmjs.org/-/npm/v1/security/advisories/bulk",
                "PUT https://registry.npmjs.org/left-pad",
                "PUT https://registry.npmjs.org/-/user/org.couchdb.user:me",
                "GET https://registry.yarnpkg.com/left-pad"),
    ),
    "llm-api.toml": Example(
        allowed=("POST https://api.openai.com/v1/chat/completions",
                 "POST https://api.openai.com/v1/responses", "GET https://api.openai.com/v1/models",
                 "GET https://api.openai.com/v1/models/gpt-4o",
                 "POST https://api.anthropic.com/v1/messages"),
        denied=("POST https://api.openai.com/v1/files", "GET https://api.openai.com/v1/files/f-1",
                "POST https://api.openai.com/v1/fine_tuning/jobs",
                "POST https://api.openai.com/v1/chat/completions/../../v1/files",
                "GET https://api.anthropic.com/v1/messages",
                "POST https://api.mistral.ai/v1/chat/completions"),
    ),
    "git-clone-https.toml": Example(
        allowed=("GET https://github.com/o/r.git/info/refs?service=git-upload-pack",
                 "POST https://github.com/o/r.git/git-upload-pack",
                 "GET https://github.com/o/r/info/refs?service=git-upload-pack"),
        denied=("POST https://github.com/o/r.git/git-receive-pack", "GET https://github.com/o/r",
                "GET https://api.github.com/repos/o/r", "tcp://github.com:22"),
    ),
}


def test_every_example_has_its_cases():
    assert sorted(CASES) == sorted(path.name for path in EXAMPLES.glob("*.toml"))


def verdicts(*argv: str) -> list[str]:
    """ALLOW or DENY for each request and endpoint of `sandlock policy test ARGV`."""
    result = sandlock("policy", "test", *argv)
    assert result.returncode in (0, 1), result.stderr
    return [line.split()[0] for line in result.stdout.splitlines()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_validates_and_prints_back(tmp_path, name):
    checked = sandlock("profile", "validate", str(EXAMPLES / name))
    assert checked.stdout == f"{EXAMPLES / name}: ok\n", checked.stderr
    assert_prints_back(EXAMPLES / name, tmp_path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_allows_and_denies_what_it_should(name):
    case = CASES[name]
    requests = [p for p in case.allowed + case.denied if not p.startswith("tcp://")]
    endpoints = [p for p in case.allowed + case.denied if p.startswith("tcp://")]
    found = dict(zip([*requests, *endpoints], verdicts(
        "--policy", str(EXAMPLES / name), *requests,
        *(arg for endpoint in endpoints for arg in ("--net", endpoint)))))
    assert {p: found[p] for p in case.allowed} == dict.fromkeys(case.allowed, "ALLOW")
    assert {p: found[p] for p in case.denied} == dict.fromkeys(case.denied, "DENY")


# --- the examples against stand-in servers ---------------------------------------------------


def example_hosts(name: str) -> list[str]:
    """The hosts an example's HTTP rules name, in order of appearance."""
    text = (EXAMPLES / name).read_text()
    return list(dict.fromkeys(re.findall(r'"[A-Z,*]+ ([a-z0-9.-]+)/', text)))


class StandIns:
    """One stand-in server per host, each on its own loopback alias, one HTTP port."""

    def __init__(self, hosts: list[str], **servers: dict) -> None:
        self.addresses = {host: f"127.0.0.{2 + index}" for index, host in enumerate(hosts)}
        self.port = free_port_on(*self.addresses.values())
        self.servers = {host: Upstream(address, self.port, name=host, **servers.get(host, {}))
                        for host, address in self.addresses.items()}

    def options(self) -> list[str]:
        """What a run adds to an example to reach the stand-ins: pins, the port, plain HTTP
        (quick; the pip example over inspected HTTPS is in test_https.py)."""
        pins = [f"--resolve={host}={address}" for host, address in self.addresses.items()]
        return [*pins, "--http-port", str(self.port), "--https-inspect", "off"]

    def url(self, https_url: str) -> str:
        return re.sub(r"^https://([^/]+)", rf"http://\1:{self.port}", https_url)

    def __enter__(self) -> StandIns:
        for server in self.servers.values():
            server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers.values():
            server.__exit__(*exc)


CLIENT = r"""
import http.client, sys, urllib.parse
for request in sys.argv[1:]:
    method, url = request.split(" ", 1)
    split = urllib.parse.urlsplit(url)
    try:
        connection = http.client.HTTPConnection(split.hostname, split.port, timeout=10)
        connection.request(method, url[url.index("/", 8):], body=b"x" if method != "GET" else None)
        print(connection.getresponse().status)
    except OSError as exc:
        print(type(exc).__name__)
"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_against_stand_ins_answers_as_policy_test_says(name):
    case = CASES[name]
    with StandIns(example_hosts(name)) as stand_ins:
        requests = [f"{method} {stand_ins.url(url)}" for method, url in
                    (p.split() for p in case.allowed + case.denied if " " in p)]
        options = ["--policy", str(EXAMPLES / name), *stand_ins.options()]
        predicted = verdicts(*options, *requests)
        allowed = sum(" " in p for p in case.allowed)
        assert predicted == ["ALLOW"] * allowed + ["DENY"] * (len(requests) - allowed)
        result = sandlock("run", *options, "-q", "--", sys.executable, "-c", CLIENT, *requests)
        answers = result.stdout.split()
        assert len(answers) == len(requests), result.stderr
        for request, verdict, answer in zip(requests, predicted, answers):
            assert (answer == "200") == (verdict == "ALLOW"), (request, verdict, answer)
        reached = [path for server in stand_ins.servers.values() for _, path, _, _ in server.log]
        assert len(reached) == allowed


# --- real clients ----------------------------------------------------------------------------


def git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], check=True, cwd=cwd, capture_output=True)


def test_git_clone_example_clones_and_cannot_push(tmp_path):
    work, root = tmp_path / "work", tmp_path / "srv"
    git("init", "-q", str(work))
    git("-C", str(work), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
        "--allow-empty", "-m", "hello")
    git("clone", "-q", "--bare", str(work), str(root / "owner" / "repo.git"))
    # The server would take a push: sandlock must be what stops it.
    git("-C", str(root / "owner" / "repo.git"), "config", "http.receivepack", "true")
    with StandIns(["github.com"], **{"github.com": {"git": str(root)}}) as stand_ins:
        options = ["--policy", str(EXAMPLES / "git-clone-https.toml"), *stand_ins.options()]
        url = f"http://github.com:{stand_ins.port}/owner/repo.git"
        clone = sandlock("run", *options, "--", "git", "clone", "-q", url, str(tmp_path / "c"))
        assert clone.returncode == 0, clone.stderr
        log = subprocess.run(["git", "-C", str(tmp_path / "c"), "log", "--format=%s"],
                             capture_output=True, text=True)
        assert log.stdout == "hello\n"
        push = sandlock("run", *options, "--", "git", "-C", str(tmp_path / "c"), "push", "-q",
                        "origin", "HEAD:refs/heads/x")
        assert push.returncode != 0
        assert ("sandlock: denied POST github.com/owner/repo.git/git-receive-pack (no "
                "--http-allow rule matches)") in push.stderr
        server = stand_ins.servers["github.com"]
        assert not [path for _, path, _, _ in server.log if path.endswith("/git-receive-pack")]
        assert ("POST", "/owner/repo.git/git-upload-pack") in [(m, p) for m, p, _, _ in server.log]


def wheel(directory: Path, package: str = "tinypkg", version: str = "1.0") -> str:
    """A wheel of ``package`` (one module: VALUE = 42, no dependencies) in ``directory``."""
    name = f"{package}-{version}-py3-none-any.whl"
    info = f"{package}-{version}.dist-info"
    files = {
        f"{package}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = f"{info}/RECORD"
    files[record] = "".join(f"{path},,\n" for path in [*files, record])
    with zipfile.ZipFile(directory / name, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return name


def test_pip_example_installs_from_stand_in_pypi(tmp_path):
    simple, packages = tmp_path / "simple", tmp_path / "packages"
    (simple / "tinypkg").mkdir(parents=True)
    packages.mkdir()
    name = wheel(packages)
    hosts = ["pypi.org", "files.pythonhosted.org"]
    with StandIns(hosts, **{"pypi.org": {"files": str(simple), "files_at": "/simple/"},
                            "files.pythonhosted.org": {"files": str(packages),
                                                       "files_at": "/packages/"}}) as stand_ins:
        link = f"http://files.pythonhosted.org:{stand_ins.port}/packages/{name}"
        (simple / "tinypkg" / "index.html").write_text(f'<a href="{link}">{name}</a>\n')
        target = tmp_path / "target"
        result = sandlock(
            "run", "--policy", str(EXAMPLES / "pip-install.toml"), *stand_ins.options(), "--",
            sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-cache-dir",
            "--disable-pip-version-check",  # (Debian's pip never checks; pyenv's asks PyPI)
            "--no-deps", "--target", str(target), "--index-url", f"http://pypi.org:{stand_ins.port}/simple",
            "--trusted-host", f"pypi.org:{stand_ins.port}",
            "--trusted-host", f"files.pythonhosted.org:{stand_ins.port}", "tinypkg",
            timeout=120, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert (target / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
        fetched = [path for server in stand_ins.servers.values() for _, path, _, _ in server.log]
        assert fetched == ["/simple/tinypkg/", f"/packages/{name}"]


def npm_package(directory: Path, url: str) -> None:
    """A registry's packument and tarball for tinypkg 1.0.0 (served as /tinypkg)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in {"package/package.json": '{"name": "tinypkg", "version": "1.0.0"}',
                           "package/index.js": "module.exports = 42;\n"}.items():
            info = tarfile.TarInfo(path)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text.encode()))
    tarball = buffer.getvalue()
    (directory / "tinypkg" / "-").mkdir(parents=True)
    (directory / "tinypkg" / "-" / "tinypkg-1.0.0.tgz").write_bytes(tarball)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    version = {"name": "tinypkg", "version": "1.0.0", "dist": {
        "tarball": f"{url}/tinypkg/-/tinypkg-1.0.0.tgz", "integrity": integrity,
        "shasum": hashlib.sha1(tarball).hexdigest()}}
    packument = {"name": "tinypkg", "dist-tags": {"latest": "1.0.0"},
                 "versions": {"1.0.0": version}}
    (directory / "tinypkg" / "index.html").write_text(json.dumps(packument))


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_example_installs_from_stand_in_registry(tmp_path):
    registry, project = tmp_path / "registry", tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "p", "version": "1.0.0"}')
    with StandIns(["registry.npmjs.org"], **{"registry.npmjs.org": {
            "files": str(registry), "files_at": "/"}}) as stand_ins:
        url = f"http://registry.npmjs.org:{stand_ins.port}"
        npm_package(registry, url)
        result = sandlock(
            "run", "--policy", str(EXAMPLES / "npm-install.toml"), *stand_ins.options(),
            "--env", f"npm_config_cache={tmp_path / 'cache'}", "--",
            "npm", "install", "--registry", f"{url}/", "tinypkg", timeout=120, cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr
        assert (project / "node_modules" / "tinypkg" / "index.js").exists()
        methods = {method for method, *_ in stand_ins.servers["registry.npmjs.org"].log}
        assert methods == {"GET"}  # no audit POST
