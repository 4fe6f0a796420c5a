"""Every shell example of README.md and docs/*.md runs here and does what the doc says.

Each command line of a ```sh block, and each `$ ` line of a ```console block, is in
exactly one of three lists (an example in none fails the test: nobody would check it):

- AS_WRITTEN: runs as the doc writes it, in a project directory holding the files it
  names (a Makefile for `make test`; for the user's own program, `train.py`,
  `./agent.sh`, a script doing what the example's rule decides), no network but loopback;
- WITH_STAND_INS: runs with local stand-ins of what is not here: the hosts it names
  (HTTPS servers on loopback addresses, reached through `--resolve HOST=ADDRESS` and
  trusted through `--upstream-ca`, both added to each `sandlock run`/`learn` of it, and
  a client doing the requests the example's rules decide), a venv in the project, a
  placeholder replaced (`OWNER/REPO`, a workspace `ID`, a path outside the temporary
  home); a program not installed here would be a script of its name in ~/.local/bin;
- CANNOT_RUN: needs the internet or root changes to the system by nature, with why.

Each runs with bash in a temporary home (tests/conftest.py's `unscratched`, outside
the /tmp a sandbox makes its own; XDG directories in it), its checks say what must hold
afterwards (what the stand-ins received, the files it made), and a console block's
output is compared with what the run printed, after `normalise` (docexamples.py:
the temporary home, ids, dates). Examples that differ only by a trailing comment are
one case. A few README examples ("without root") also run as uid 65534.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from docexamples import (INTERPRETER_GRANT, Case, Host, LANGUAGES, Outcome, StandInInternet,
                         examples, fences, normalise, run_example)
from test_policy_docs import wheel

# --- the programs and files of the examples ---------------------------------------------

CONNECT = """\
import errno, socket
for target in TARGETS:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        print(target, "ok")
    except OSError as exc:
        print(target, errno.errorcode.get(exc.errno, exc))
"""


def connecting(*targets: str) -> str:
    """agent.py connecting to each HOST:PORT, printing `HOST:PORT ok` or the errno's name."""
    return f"TARGETS = {list(targets)!r}\n{CONNECT}"


REQUESTS = """\
import os, urllib.error, urllib.request
key = os.environ.get("OPENAI_API_KEY")
headers = {"Authorization": f"Bearer {key}"} if key else {}
for request in REQUESTS:
    method, url = request.split(" ", 1)
    data = b"{}" if method == "POST" else None
    try:
        status = urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method),
                                        timeout=10).status
    except urllib.error.HTTPError as exc:
        status = exc.code
    print(status, request)
if key:
    print("the agent's key:", key)
"""


def requesting(*requests: str) -> str:
    """agent.py sending each `METHOD URL` (with the OPENAI_API_KEY it holds, if any),
    printing `STATUS METHOD URL`."""
    return f"REQUESTS = {list(requests)!r}\n{REQUESTS}"


def script(text: str) -> str:
    return f"#!/bin/sh\n{text}\n"


def samples(doc: str, first: str) -> list[list[str]]:
    """The lines of each text block of ``doc`` whose first line starts with ``first``."""
    return [body.splitlines() for name, _, lang, body in fences()
            if name == doc and lang == "text" and body.startswith(first)]


def sample(doc: str, first: str) -> list[str]:
    found, = samples(doc, first)
    return found


def toml_block(first: str) -> str:
    """The toml block of the docs that starts with ``first`` (empty if none does)."""
    return next((body for _, _, lang, body in fences() if lang == "toml" and body.startswith(first)), "")


def outcome_lines() -> list[str]:
    """workspace.md's lines after a run: committed, discarded, kept."""
    return sample("workspace.md", "sandlock: workspace: committed ")


def lines(text: str, home: Path) -> list[str]:
    return normalise(text, home).splitlines()


# --- checks --------------------------------------------------------------------------------


def printed(expected: str):
    def check(outcome: Outcome) -> None:
        assert outcome.named(outcome.stdout) == expected
    return check


def make_test(outcome: Outcome) -> None:
    assert outcome.stdout == "tests passed\n"


def train(outcome: Outcome) -> None:
    assert outcome.stdout == "rows: 2\n"


def build(outcome: Outcome) -> None:
    assert (outcome.project / "out.txt").read_text() == "built\n"
    assert outcome.stdout == "home: PermissionError\n"


def make_build(outcome: Outcome) -> None:
    """Committed, with the line workspace.md shows."""
    assert sorted(p.name for p in outcome.project.glob("*.o")) == ["a.o", "b.o", "c.o"]
    assert lines(outcome.stderr, outcome.home) == outcome_lines()[:1]


def dry_run(outcome: Outcome) -> None:
    assert (outcome.project / "main.py").read_text() == "old = 1\n"
    assert lines(outcome.stderr, outcome.home) == [
        "sandlock: dry run: 1 change to /home/me/proj, discarded:", "M        8 main.py"]


def clean_env(outcome: Outcome) -> None:
    """CI set, sandlock's environment (MARKER) not passed, started in the directory."""
    assert outcome.stdout == f"CI=1 MARKER=unset {outcome.home}/srv/repo\n"


def audited(outcome: Outcome) -> None:
    assert outcome.stdout == ("api.openai.com:443 ok\ngithub.com:22 ok\ngithub.com:443 ok\n"
                              "api.openai.com:80 EACCES\n")
    records = [json.loads(line) for line in (outcome.project / "net.jsonl").read_text().splitlines()]
    verdicts = [(r["hostname"], r["destination"].rsplit(":", 1)[1], r["verdict"]) for r in records
                if r.get("protocol") == "tcp"]  # (DNS too; and the run's exec record)
    assert verdicts == [("api.openai.com", "443", "allow"), ("github.com", "22", "allow"),
                        ("github.com", "443", "allow"), ("api.openai.com", "80", "deny")]


def dev_server(outcome: Outcome) -> None:
    """Port 8000 bound (or taken by someone else on this machine: the bind was allowed),
    8001 refused; any host but the internal networks reached."""
    bound = "8000 listening" if "8000 listening" in outcome.stdout else "8000 EADDRINUSE"
    assert outcome.named(outcome.stdout).endswith(
        f"\n\n{bound}\n8001 EACCES\n{{address:api.github.com}}:443 ok\n")


def github_repo(outcome: Outcome) -> None:
    assert outcome.stdout == "api.github.com GET /repos/x/y\n"
    assert outcome.reached("api.github.com") == [("GET", "/repos/x/y")]


def denied_as_http_md_shows(outcome: Outcome) -> None:
    """The 403's body, and the line on stderr, are the ones http.md shows."""
    body, notice = samples("http.md", "sandlock: denied ")
    assert outcome.stdout.splitlines() == body
    assert outcome.stderr.splitlines()[:1] == notice
    assert outcome.reached("api.github.com") == []


def organization_denied(outcome: Outcome) -> None:
    assert outcome.stdout == ("200 GET https://api.openai.com/v1/models\n"
                              "403 POST https://api.openai.com/v1/organization/users\n")
    assert outcome.reached("api.openai.com") == [("GET", "/v1/models")]


def key_added_by_the_proxy(outcome: Outcome) -> None:
    """The stand-in got the key; the agent held a placeholder."""
    assert outcome.stdout.startswith("200 POST https://api.openai.com/v1/chat/completions\n")
    assert "the agent's key: sandlock-placeholder-openai-" in outcome.stdout
    assert outcome.headers("api.openai.com", "Authorization") == ["Bearer sk-..."]


def basic_auth(outcome: Outcome) -> None:
    assert outcome.stdout == "registry.example.com GET /deps/left-pad.tgz\n"
    login = base64.b64encode(b"me:pa55").decode()
    assert outcome.headers("registry.example.com", "Authorization") == [f"Basic {login}"]


def flask_downloaded(outcome: Outcome) -> None:
    assert (outcome.project / "flask-3.0.0-py3-none-any.whl").is_file()
    assert ("GET", "/simple/flask/") in outcome.reached("pypi.org")


def learned_and_held(outcome: Outcome) -> None:
    flask_downloaded(outcome)
    learned = (outcome.project / "pip.toml").read_text()
    assert '"GET pypi.org/simple/flask/"' in learned, learned


def flask_installed(outcome: Outcome) -> None:
    site = outcome.project / ".venv" / "lib" / "python3.11" / "site-packages"
    assert (site / "flask" / "__init__.py").read_text() == "VALUE = 42\n"


def llm_api(outcome: Outcome) -> None:
    assert outcome.stdout == ("200 POST https://api.openai.com/v1/chat/completions\n"
                              "200 POST https://api.anthropic.com/v1/messages\n"
                              "403 POST https://api.openai.com/v1/files\n")


def cloned(outcome: Outcome) -> None:
    log = subprocess.run(["git", "-C", str(outcome.project / "r"), "log", "--format=%s"],
                         capture_output=True, text=True)
    assert log.stdout == "hello\n", log.stderr


def kept(outcome: Outcome) -> None:
    """Kept, with the line workspace.md shows (for a workdir named proj)."""
    assert not (outcome.home / "repo" / "notes.txt").exists()
    shown = lines(outcome.stderr, outcome.home)
    assert [line.replace("repo", "proj") for line in shown] == outcome_lines()[2:]


def listed(outcome: Outcome) -> None:
    header, row = outcome.stdout.splitlines()
    assert header.split() == ["ID", "STATE", "CHANGES", "CREATED", "DIRECTORY"]
    assert normalise(row, outcome.home).split() == ["repo-3fa91c", "kept", "2", "2025-01-01", "12:00",
                                                    "/home/me/repo"]


def diffed(outcome: Outcome) -> None:
    assert outcome.stdout == "A        6 notes.txt\nA        0 todo.txt\n"


def committed(outcome: Outcome) -> None:
    assert (outcome.home / "repo" / "notes.txt").read_text() == "notes\n"


def aborted(outcome: Outcome) -> None:
    assert not (outcome.home / "repo" / "notes.txt").exists()


def vendor_listed(outcome: Outcome) -> None:
    assert not (outcome.project / "vendor").exists()
    shown = lines(outcome.stderr, outcome.home)
    assert "sandlock: dry run: 11 changes to /home/me/proj, discarded:" in shown
    assert {"A        - vendor/", "A       11 vendor/flask/__init__.py"} <= set(shown)


def reproducible(outcome: Outcome) -> None:
    year, seeded, *listed = outcome.stdout.split("\n")
    assert year == "2000" and seeded.split() == ["db", "b1", "dd", "15"], outcome.stdout  # seed 42
    names = [name for name in listed if name]
    assert names == sorted(names) and {"a", "b", "build.sh"} <= set(names), names


# --- the three lists -----------------------------------------------------------------------

REPO_AGENT = {"~/repo/agent.sh+x": script("echo notes > notes.txt; touch todo.txt")}
WORKSPACE_ID = "$(sandlock workspace list | awk 'NR == 2 {print $1}')"
KEEP = "sandlock run --workdir ~/repo --on-exit keep -- ./agent.sh"
PYPI = ("pypi.org", "files.pythonhosted.org")
OPENAI_KEY = "export OPENAI_API_KEY=sk-..."


def venv(home: Path) -> None:
    """A venv in the project (as `python3 -m venv .venv` makes, without copying pip in:
    its pip runs the system's, which installs into the venv)."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages",
                    str(home / "proj" / ".venv")], check=True)
    pip = home / "proj" / ".venv" / "bin" / "pip"
    pip.write_text(script('exec "$(dirname "$0")/python" -m pip "$@"'))
    pip.chmod(0o755)


AS_WRITTEN = {
    "sandlock run -- make test": Case(
        files={"Makefile": "test:\n\t@echo tests passed\n"}, check=make_test),
    "sandlock run -r /usr -r /etc -r /lib -r /lib64 -w \"$PWD\" -- python3 build.py": Case(
        files={"build.py": "import os, pathlib\npathlib.Path('out.txt').write_text('built\\n')\n"
                           "try:\n    os.listdir(os.environ['HOME'])\n    print('home: read')\n"
                           "except OSError as exc:\n    print('home:', type(exc).__name__)\n"},
        check=build),
    "sandlock run --workdir . -- make build": Case(
        files={"Makefile": "build:\n\t@touch a.o b.o c.o\n"}, check=make_build),
    "sandlock run --dry-run --workdir . -- ./refactor.sh": Case(
        files={"main.py": "old = 1\n", "refactor.sh+x": script("sed -i s/old/new/ main.py")},
        check=dry_run),
    "sandlock policy test --policy docs/examples/github-readonly.toml "
    "'POST https://api.github.com/repos/x/y/issues'": Case(status=1, check=printed(
        "DENY  POST https://api.github.com/repos/x/y/issues (no --http-allow rule matches; "
        "HTTPS inspected)\n")),
    "sandlock run --policy docs/examples/pip-install.toml --net-allow github.com:22 -t 600 "
    "--print-policy": Case(),
    "sandlock policy test --policy docs/examples/github-readonly.toml 'GET "
    "https://api.github.com/repos/x/y' 'POST https://api.github.com/repos/x/y/issues' "
    "https://github.com/x/y --net tcp://api.github.com:22": Case(status=1),
    "SANDLOCK_FS_READ=~/datasets sandlock run -- python3 train.py": Case(
        files={"~/datasets/data.csv": "1,2\n3,4\n",
               "train.py": "import os\nrows = open(os.path.expanduser('~/datasets/data.csv'))"
                           ".readlines()\nprint('rows:', len(rows))\n"},
        check=train),
    "sandlock run --fs-deny ~/work/secrets -- ./agent.sh": Case(
        files={"~/work/secrets/token": "s3cret\n", "~/work/agent.sh+x": script("! cat secrets/token")},
        cwd="work"),
    "sandlock policy test --policy anthropic.toml 'POST https://api.anthropic.com/v1/messages'": Case(
        files={"anthropic.toml": toml_block("# anthropic.toml")}),
    KEEP: Case(files=REPO_AGENT, check=kept),
    "sandlock run --time-start 2000-01-01T00:00:00Z --random-seed 42 --deterministic-dirs "
    "-- ./build.sh": Case(
        files={"build.sh+x": script("date -u +%Y; head -c 4 /dev/urandom | od -An -tx1; ls -f"),
               "b": "", "a": ""},
        check=reproducible),
    "sandlock run -m 512M --num-cpus 1 -- sh -c 'nproc; head -1 /proc/meminfo'": Case(
        check=printed("1\nMemTotal:         524288 kB\n")),
    "sandlock workspace list": Case(files=REPO_AGENT, before=(KEEP,), check=listed),
}

WITH_STAND_INS = {
    "sandlock run --clean-env --env CI=1 --cwd /srv/repo -t 300 -- ./run-tests.sh": Case(
        words={"/srv/repo": "~/srv/repo"}, env={"MARKER": "set"},
        files={"~/srv/repo/run-tests.sh+x": script('echo "CI=$CI MARKER=${MARKER-unset} $PWD"')},
        check=clean_env),
    "sandlock run --net-allow api.openai.com:443 --net-allow github.com:22,443 --audit net.jsonl "
    "-- python3 agent.py": Case(
        hosts=("api.openai.com", "github.com"),
        files={"agent.py": connecting("api.openai.com:443", "github.com:22", "github.com:443",
                                      "api.openai.com:80")},
        check=audited),
    "sandlock run --net-allow-host api.openai.com --net-connect 443 -- python3 agent.py": Case(
        hosts=("api.openai.com",),
        files={"agent.py": connecting("api.openai.com:443", "api.openai.com:22",
                                      "{address:api.github.com}:443", "{address:api.github.com}:22")},
        check=printed("api.openai.com:443 ok\napi.openai.com:22 ECONNREFUSED\n"  # (allowed; closed)
                      "{address:api.github.com}:443 ok\n{address:api.github.com}:22 EACCES\n")),
    "sandlock run --net-deny 10.0.0.0/8 --net-deny 192.168.0.0/16 --net-bind 8000 "
    "-- npm run dev": Case(
        env={"npm_config_update_notifier": "false"},  # (npm would ask the registry)
        files={"package.json": '{"name": "app", "version": "1.0.0", "scripts": {"dev": "python3 dev.py"}}',
               "dev.py": "import errno, socket\nfor port in (8000, 8001):\n    try:\n"
                         "        socket.create_server(('127.0.0.1', port)).close()\n"
                         "        print(port, 'listening')\n    except OSError as exc:\n"
                         "        print(port, errno.errorcode[exc.errno])\n" + connecting(
                             "{address:api.github.com}:443")},
        check=dev_server),
    "sandlock run --http-allow 'GET api.github.com/repos/*' -- curl -s https://api.github.com/repos/x/y":
        Case(hosts=("api.github.com",), check=github_repo),
    "sandlock run --http-allow '* api.openai.com/v1/*' --http-deny '* api.openai.com/v1/organization/*' "
    "-- python3 agent.py": Case(
        hosts=("api.openai.com",),
        files={"agent.py": requesting("GET https://api.openai.com/v1/models",
                                      "POST https://api.openai.com/v1/organization/users")},
        check=organization_denied),
    "sandlock run --http-allow 'POST api.openai.com/v1/*' --credential openai=env:OPENAI_API_KEY "
    "--http-auth 'POST api.openai.com/v1/* bearer openai' --credential-env OPENAI_API_KEY=openai "
    "-- python3 agent.py": Case(
        hosts=("api.openai.com",), before=(OPENAI_KEY,),
        files={"agent.py": requesting("POST https://api.openai.com/v1/chat/completions")},
        check=key_added_by_the_proxy),
    "sandlock run --http-allow 'GET registry.example.com/*' --credential "
    "registry=file:~/.config/registry-login --http-auth 'GET registry.example.com/* basic registry' "
    "-- ./fetch-deps.sh": Case(
        hosts=("registry.example.com",),
        files={"~/.config/registry-login": "me:pa55\n",
               "fetch-deps.sh+x": script("curl -s https://registry.example.com/deps/left-pad.tgz")},
        check=basic_auth),
    "sandlock run --policy pip.toml -- pip download flask": Case(
        hosts=PYPI, before=("sandlock learn -o pip.toml -- pip download flask",), check=learned_and_held),
    "sandlock run --http-allow 'GET,HEAD pypi.org/simple/*' --http-allow 'GET files.pythonhosted.org/*' "
    "-- pip download flask": Case(hosts=PYPI, check=flask_downloaded),
    "sandlock run --policy docs/examples/pip-install.toml -- .venv/bin/pip install flask": Case(
        hosts=PYPI, prepare=venv, check=flask_installed),
    "sandlock run -p pip -- .venv/bin/pip install flask": Case(
        hosts=PYPI, prepare=venv, check=flask_installed, before=(
            "mkdir -p ~/.config/sandlock/profiles",
            "cp docs/examples/pip-install.toml ~/.config/sandlock/profiles/pip.toml")),
    "sandlock run --dry-run --workdir . --policy docs/examples/pip-install.toml -- pip install -r "
    "requirements.txt --target vendor": Case(
        hosts=PYPI, files={"requirements.txt": "flask\n"}, check=vendor_listed),
    "sandlock run --policy docs/examples/llm-api.toml -- python3 agent.py": Case(
        hosts=("api.openai.com", "api.anthropic.com"),
        files={"agent.py": requesting("POST https://api.openai.com/v1/chat/completions",
                                      "POST https://api.anthropic.com/v1/messages",
                                      "POST https://api.openai.com/v1/files")},
        check=llm_api),
    "sandlock run --policy docs/examples/git-clone-https.toml -- git clone https://github.com/OWNER/REPO":
        Case(hosts=("github.com",), words={"OWNER/REPO": "o/r"}, check=cloned),
    "sandlock run --net-allow '127.0.0.0/8:8000-8999' -- sandlock run --net-allow 127.0.0.2:8080 -- "
    "curl -s http://127.0.0.3:8080/": Case(env=INTERPRETER_GRANT, status=7),
    "sandlock workspace diff ID": Case(
        files=REPO_AGENT, before=(KEEP,), words={"ID": WORKSPACE_ID}, check=diffed),
    "sandlock workspace commit ID": Case(
        files=REPO_AGENT, before=(KEEP,), words={"ID": WORKSPACE_ID}, check=committed),
    "sandlock workspace abort ID": Case(
        files=REPO_AGENT, before=(KEEP,), words={"ID": WORKSPACE_ID}, check=aborted),
}

CANNOT_RUN = {
    "sudo apt-get install -y python3-venv && python3 -m venv .venv && .venv/bin/pip install . && "
    ".venv/bin/sandlock selftest": "installs Debian packages as root and sandlock's build "
                                   "dependencies from PyPI: the internet",
    ".venv/bin/pip install '.[test,mcp,ray]' && .venv/bin/python -m pytest -n 3 --dist loadfile "
    "&& .venv/bin/python -m pytest -m alone":
        "installs the test dependencies from PyPI, then runs this whole suite, this test included",
    "pip install 'sandlock[mcp]'": "installs the MCP SDK from PyPI: the internet",
}

# Where the README says "without root": these run as uid 65534 too.
WITHOUT_ROOT = (
    "sandlock run -- make test",
    "sandlock run --workdir . -- make build",
    "SANDLOCK_FS_READ=~/datasets sandlock run -- python3 train.py",
    "sandlock run --fs-deny ~/work/secrets -- ./agent.sh",
    "sandlock run --http-allow 'GET api.github.com/repos/*' -- curl -s https://api.github.com/repos/x/y",
)

# The controls: the same case with another command (the rule left out, or a request it
# does not allow) ends otherwise: the rule is what decides. (command, status, check)
CONTROLS = {
    "SANDLOCK_FS_READ=~/datasets sandlock run -- python3 train.py":
        ("sandlock run -- python3 train.py", 1, None),
    "sandlock run --fs-deny ~/work/secrets -- ./agent.sh": ("sandlock run -- ./agent.sh", 1, None),
    "sandlock run --http-allow 'GET api.github.com/repos/*' -- curl -s https://api.github.com/repos/x/y": (
        "sandlock run --http-allow 'GET api.github.com/repos/*' -- curl -s -X POST "
        "https://api.github.com/repos/x/y/issues", 0, denied_as_http_md_shows),
}

CASES = {**AS_WRITTEN, **WITH_STAND_INS}
# Doc lines that only prepare a case (they run, and must succeed, before it).
PREPARING = {line for case in CASES.values() for line in case.before}


# --- the tests -----------------------------------------------------------------------------


def shown() -> dict[str, list]:
    """Each command the docs show, with where (and what output) they show it."""
    found: dict[str, list] = {}
    for example in examples():
        found.setdefault(example.command, []).append(example)
    return found


def test_every_fenced_block_says_what_it_holds():
    """sh (commands), console (commands and output), python, toml or text (a synopsis, an
    output, a diagram): an untyped block could hold an example nobody runs."""
    untyped = [f"{doc}:{line - 1}: ```{lang}" for doc, line, lang, _ in fences() if lang not in LANGUAGES]
    assert untyped == [], f"a fence says one of {', '.join(LANGUAGES)}"


def test_every_example_is_in_one_list():
    listed = [*AS_WRITTEN, *WITH_STAND_INS, *CANNOT_RUN]
    assert len(listed) == len(set(listed))
    unchecked = [f"{e.doc}:{e.line}: {command}" for command, where in shown().items()
                 if command not in {*listed, *PREPARING} for e in where]
    assert unchecked == [], "examples nobody checks: add each to a list of test_doc_examples.py"
    stale = {*listed, *PREPARING, *WITHOUT_ROOT, *CONTROLS} - set(shown())
    assert stale == set(), "listed here, shown nowhere (changed in the docs?)"


def test_as_written_means_without_stand_ins():
    for command, case in AS_WRITTEN.items():
        assert not (case.hosts or case.words or case.env or case.prepare), command
        assert not any(name.startswith("~/.local/bin/") or "{address:" in text
                       for name, text in case.files.items()), command


def run(command: str, case: Case, home: Path, request, as_user=None) -> Outcome:
    needed = case.hosts or any("{address:" in text for text in case.files.values())
    internet = request.getfixturevalue("stand_in_internet") if needed else None
    ca_file = request.getfixturevalue("upstream_ca")[1] if case.hosts else ""
    return run_example(command, case, home, internet, ca_file, as_user)


@pytest.mark.parametrize("command", sorted(CASES), ids=lambda command: command[:60])
def test_example_runs_as_the_doc_says(command, unscratched, request):
    case = CASES[command]
    outcome = run(command, case, unscratched, request)
    assert outcome.status == case.status, outcome.stdout + outcome.stderr
    if case.check:
        case.check(outcome)
    for example in shown()[command]:
        if example.output is not None:
            printed = normalise(outcome.stdout + outcome.stderr, unscratched)
            assert printed == example.output, f"{example.doc}:{example.line} shows another output"


@pytest.mark.parametrize("command", WITHOUT_ROOT, ids=lambda command: command[:60])
def test_readme_example_runs_without_root(command, unscratched, request, as_nobody):
    assert command in {e.command for e in shown()[command] if e.doc == "README.md"}
    case = CASES[command]
    outcome = run(command, case, unscratched, request, as_nobody)
    assert outcome.status == case.status, outcome.stdout + outcome.stderr
    if case.check:
        case.check(outcome)


@pytest.mark.parametrize("command", sorted(CONTROLS), ids=lambda command: command[:60])
def test_without_its_rule_the_example_ends_otherwise(command, unscratched, request):
    control, status, check = CONTROLS[command]
    outcome = run(control, CASES[command], unscratched, request)
    assert outcome.status == status, outcome.stdout + outcome.stderr
    if check:
        check(outcome)


@pytest.fixture(scope="module")
def stand_in_internet(upstream_ca, tmp_path_factory):
    """The hosts the examples name: PyPI serving a `flask` (no dependencies), github.com
    serving the repository o/r over git's smart HTTP (and port 22 open), and the APIs
    echoing each request."""
    if os.getuid() != 0:
        pytest.skip("the stand-ins listen on port 443, as the hosts the examples name")
    served = tmp_path_factory.mktemp("internet")
    simple, packages, repos = served / "simple", served / "packages", served / "git"
    (simple / "flask").mkdir(parents=True)
    packages.mkdir()
    name = wheel(packages, "flask", "3.0.0")
    link = f"https://files.pythonhosted.org/packages/{name}"
    (simple / "flask" / "index.html").write_text(f'<a href="{link}">{name}</a>\n')
    work = served / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "-c", "user.email=a@b", "-c", "user.name=a", "commit",
                    "-q", "--allow-empty", "-m", "hello"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repos / "o" / "r")], check=True)
    hosts = {"api.openai.com": Host(), "api.anthropic.com": Host(), "api.github.com": Host(),
             "github.com": Host(git=str(repos), ports=(22,)), "registry.example.com": Host(),
             "pypi.org": Host(files=str(simple), files_at="/simple/"),
             "files.pythonhosted.org": Host(files=str(packages), files_at="/packages/")}
    with StandInInternet(hosts, upstream_ca[0]) as internet:
        yield internet
