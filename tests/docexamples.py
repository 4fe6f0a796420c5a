"""The shell examples of README.md and docs/*.md, and what runs them here.

``examples()`` reads every fenced block: ```sh blocks are commands (a comment line
describes, a trailing `# ...` annotates; a line ending in a backslash continues), and
```console blocks are commands (`$ ` lines) followed by the output they print. Every
other block says what it is (python, toml, text): an untyped fence is an error, so that
no example can hide in one.

``StandInInternet`` is the internet the examples name, on loopback: one HTTPS server per
host (a trustme certificate for the name, port 443) on a loopback address of its own,
which a run reaches through ``--resolve HOST=ADDRESS`` and trusts through
``--upstream-ca``. ``run_example`` runs one command line with bash, as a user would
type it, in a project directory of a temporary home.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conftest import CHECKOUT, PYTHON, UNPRIVILEGED_UID
from httpservers import Upstream

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("sh", "console", "python", "toml", "text", "json")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\S*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)


# --- the examples ------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    doc: str  # README.md, usage.md, ...
    line: int  # of the command's first line
    command: str  # continuation lines joined, a trailing comment dropped
    output: str | None  # what a console block shows it print; None for sh


def doc_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fences() -> list[tuple[str, int, str, str]]:
    """(doc, line of the block's first line, language, body) of every fenced block."""
    found = []
    for path in doc_paths():
        text = path.read_text()
        for match in FENCE.finditer(text):
            first = text.count("\n", 0, match.start("body")) + 1
            body = re.sub(rf"^{match['indent']}", "", match["body"], flags=re.M)
            found.append((path.name, first, match["lang"], body))
    return found


def examples() -> list[Example]:
    found = []
    for doc, first, lang, body in fences():
        if lang == "sh":
            found += [Example(doc, line, command, None) for line, command in _commands(first, body)]
        elif lang == "console":
            found += _sessions(doc, first, body)
    return found


def _commands(first: int, body: str) -> list[tuple[int, str]]:
    """(line, command) of a sh block's command lines."""
    found = []
    lines = body.splitlines()
    index = 0
    while index < len(lines):
        start = index
        text, index = _joined(lines, index)
        if command := strip_comment(text).strip():
            found.append((first + start, command))
    return found


def _sessions(doc: str, first: int, body: str) -> list[Example]:
    """A console block's `$ COMMAND` lines, each with the lines up to the next one."""
    found = []
    lines = body.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            raise ValueError(f"{doc}:{first + index}: a console block's commands start with '$ '")
        start = index
        text, index = _joined(lines, index)
        end = next((i for i in range(index, len(lines)) if lines[i].startswith("$ ")), len(lines))
        output = "".join(line + "\n" for line in lines[index:end])
        found.append(Example(doc, first + start, strip_comment(text[2:]).strip(), output))
        index = end
    return found


def _joined(lines: list[str], index: int) -> tuple[str, int]:
    """The line at ``index`` with its continuation lines joined, and the index after them."""
    text = lines[index]
    while text.endswith("\\") and index + 1 < len(lines):
        index += 1
        text = text[:-1].rstrip() + " " + lines[index].strip()
    return text, index + 1


def strip_comment(line: str) -> str:
    """``line`` without a `#` comment: one that starts a word, outside quotes (as bash reads it)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line


def with_options(command: str, options: list[str]) -> str:
    """``command`` with ``options`` added to each `sandlock run` and `sandlock learn`."""
    if not options:
        return command
    quoted = " ".join(map(shlex.quote, options))
    return re.sub(r"\bsandlock (run|learn)\b", lambda match: f"{match[0]} {quoted}", command)


# --- what may vary between the doc and a run -------------------------------------------


def normalise(text: str, home: Path) -> str:
    """``text`` as the docs write what varies from run to run: the temporary home is
    /home/me, a workspace's id (DIRNAME-6 hex digits) ends in 3fa91c, a quarantined
    file's in 1a2b3c4d, and a date and time (`workspace list`) is 2025-01-01 12:00.
    Nothing else is changed: the rest must be as shown."""
    text = text.replace(str(home), "/home/me")
    text = re.sub(r"\b([\w.]+)-[0-9a-f]{6}\b", r"\1-3fa91c", text)
    text = re.sub(r"sandlock-quarantined-[0-9a-f]{8}\b", "sandlock-quarantined-1a2b3c4d", text)
    return re.sub(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}\b", "2025-01-01 12:00", text)


# --- the internet the examples name, on loopback ------------------------------------------


@dataclass(frozen=True)
class Host:
    """A stand-in's content: files served under a prefix, git repositories, or (neither)
    the echo of each request; ``ports`` also listened on (plain TCP, never answered)."""

    files: str | None = None
    files_at: str = "/files/"
    git: str | None = None
    ports: tuple[int, ...] = ()


class StandInInternet:
    def __init__(self, hosts: Mapping[str, Host], ca) -> None:
        self.addresses: dict[str, str] = {}
        self.servers: dict[str, Upstream] = {}
        self._listeners: list[socket.socket] = []
        for name, host in hosts.items():
            address, server = _bind_somewhere(name, host, ca)
            self.addresses[name], self.servers[name] = address, server
            for port in host.ports:
                listener = socket.create_server((address, port))
                self._listeners.append(listener)

    def options(self, hosts: tuple[str, ...], ca_file: str) -> list[str]:
        pins = [f"--resolve={name}={self.addresses[name]}" for name in hosts]
        return [*pins, f"--upstream-ca={ca_file}"] if pins else []

    def forget(self) -> None:
        """Clear what reached the servers (before each example)."""
        for server in self.servers.values():
            server.log.clear()
            server.headers_log.clear()

    def __enter__(self) -> StandInInternet:
        for server in self.servers.values():
            server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        stopping = [threading.Thread(target=server.__exit__) for server in self.servers.values()]
        for thread in stopping:  # (each takes up to its poll interval, 0.5 s)
            thread.start()
        for thread in stopping:
            thread.join()
        for listener in self._listeners:
            listener.close()


def _bind_somewhere(name: str, host: Host, ca) -> tuple[str, Upstream]:
    """An HTTPS server for ``name`` on port 443 of a loopback address nobody else uses
    (tests elsewhere use 127.0.0.x; other runs of the suite may be listening too)."""
    for _ in range(20):
        address = f"127.{random.randint(100, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        try:
            return address, Upstream(address, 443, name=name, files=host.files,
                                     files_at=host.files_at, git=host.git, tls=ca, tls_names=(name,))
        except OSError:
            continue
    raise RuntimeError(f"no loopback address free on port 443 for {name}")


# --- running one -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """How an example runs here. ``hosts``: the names it reaches (pinned to the stand-in
    internet); ``files``: what its project (or, for ``~/`` paths, its home) holds, with
    ``+x`` after a name for an executable (a program not installed here would be a
    stand-in in ``~/.local/bin``: on PATH, and read by the default workspace);
    ``before``: doc lines it follows (a file they made, a variable they exported), run
    first in the same shell; ``words``: what replaces a placeholder of the command;
    ``env``: sandlock's environment; ``status``: the exit status the doc implies;
    ``check``: what must hold afterwards."""

    hosts: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)
    before: tuple[str, ...] = ()
    words: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = "proj"
    prepare: Callable[[Path], None] | None = None
    status: int = 0
    check: Callable[[Outcome], None] | None = None


@dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str
    home: Path
    internet: StandInInternet | None

    @property
    def project(self) -> Path:
        return self.home / "proj"

    def named(self, text: str) -> str:
        """``text`` with each stand-in's address written ``{address:HOST}``."""
        for name, address in (self.internet.addresses.items() if self.internet else ()):
            text = text.replace(address, f"{{address:{name}}}")
        return text

    def reached(self, host: str) -> list[tuple[str, str]]:
        """(method, path) of each request that reached ``host``'s stand-in."""
        return [(method, path) for method, path, _, _ in self.internet.servers[host].log]

    def headers(self, host: str, name: str) -> list[str | None]:
        """The value of header ``name`` in each request that reached ``host``'s stand-in."""
        return [dict((k.lower(), v) for k, v in headers).get(name.lower())
                for headers in self.internet.servers[host].headers_log]


# The sandlock under test lives in a venv the default workspace does not cover: a
# sandlock run inside a sandbox needs it granted, as usage.md says for any venv.
INTERPRETER_GRANT = {"SANDLOCK_FS_READ": ":".join((*PYTHON, CHECKOUT))}


def environment(home: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """A user's environment in ``home``: nothing of the test process's (its widened
    SANDLOCK_FS_* grants, its XDG directories) reaches the example."""
    return {"HOME": str(home), "PATH": f"{home}/.local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "XDG_CONFIG_HOME": f"{home}/.config", "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_STATE_HOME": f"{home}/.local/state", "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_RUNTIME_DIR": f"{home}/.run", **extra}


def make_home(home: Path, case: Case, addresses: Mapping[str, str]) -> None:
    """The project, its files and the stand-in programs, in ``home``; ``{address:HOST}``
    in a file is the stand-in address of HOST (for programs that connect by address)."""
    bin_dir = home / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (home / ".run").mkdir(mode=0o700)
    (home / "proj").mkdir()
    shutil.copytree(ROOT / "docs" / "examples", home / "proj" / "docs" / "examples")
    _write(bin_dir / "sandlock", f'#!/bin/sh\nexec {sys.executable} -m sandlock "$@"\n', True, {})
    for name, text in case.files.items():
        executable = name.endswith("+x")
        name = name.removesuffix("+x")
        path = home / name[2:] if name.startswith("~/") else home / "proj" / name
        _write(path, text, executable, addresses)
    if case.prepare:
        case.prepare(home)


def _write(path: Path, text: str, executable: bool, addresses: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(re.sub(r"\{address:([\w.-]+)\}", lambda match: addresses[match[1]], text))
    path.chmod(0o755 if executable else 0o644)


def give_to_nobody(home: Path) -> None:
    if os.getuid() != 0:
        return  # (the tests already run unprivileged: as_nobody runs them as they are)
    for path in [home, *home.rglob("*")]:
        os.lchown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)


def script(command: str, case: Case, options: list[str]) -> str:
    """The bash script of an example: the doc lines it follows (which must succeed),
    then it, placeholders replaced and the stand-ins' options added."""
    for word, replacement in case.words.items():
        command = command.replace(word, replacement)
    lines = [with_options(line, options) for line in (*case.before, command)]
    return "\n".join(["set -e", f"cd {case.cwd}", *lines[:-1], "set +e", lines[-1]])


def run_example(command: str, case: Case, home: Path, internet: StandInInternet | None,
                ca_file: str, as_user: Callable[[list[str]], list[str]] | None = None) -> Outcome:
    make_home(home, case, internet.addresses if internet else {})
    options = []
    if case.hosts:  # (the CA's file, where the user running the example can read it)
        options = internet.options(case.hosts, shutil.copy(ca_file, home / ".upstream-ca.pem"))
    if as_user:
        give_to_nobody(home)
    if internet:
        internet.forget()
    argv = ["bash", "-c", script(command, case, options)]
    result = subprocess.run(as_user(argv) if as_user else argv, capture_output=True, text=True,
                            cwd=home, env=environment(home, case.env), timeout=30)
    return Outcome(result.returncode, result.stdout, result.stderr, home, internet)
