"""sandlock vet and sandlock.shellpolicy: zkit's shell-command vetting (seeds/002). The
cases are the document's: cd, redirects, syntax errors; in verify mode mutations,
through wrappers and git's global options, while installs, kill and filters pass."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import shellpolicy

BASELINE = {
    # command: refusal code, or None for allowed
    "ls -la src": None,
    "grep -rn TODO . | sort | head -20": None,
    "make test > /dev/null 2>&1": None,
    "pytest -q 2>&1 | tail -5": None,
    "cd src": "cd",
    "cd src && make": "cd",
    "(cd docs; ls)": "cd",
    "pushd /etc": "cd",
    "echo hi > notes.txt": "redirect",
    "make >> build.log 2>&1": "redirect",
    "cat a &> out": "redirect",
    "ls >| listing": "redirect",
    "ls >& listing": "redirect",  # bash's other spelling of &>
    "ls >&2; ls 2>&-; echo warn > /dev/stderr": None,
    "for f in *.py; do wc -l $f > $f.count; done": "redirect",
    'echo "unterminated': "syntax",
    "if then fi": "syntax",
    "ls |": "syntax",
    # what runs is what is vetted: through wrappers and into scripts run from a string
    "command cd /": "cd",
    "bash -c 'cd / && ls'": "cd",
    "bash -e -o pipefail -c 'make > log'": "redirect",
    "eval 'echo x > f'": "redirect",
    r"find . -type d -execdir cd {} \;": "cd",
    "bash -c 'echo \"'": "syntax",  # the script would not parse when it runs
    "bash script.sh; sh -n x.sh": None,  # a script file is not read: not a boundary
}
VERIFY = {
    "pip install -r requirements.txt": None,
    "npm install": None,
    "go test ./...": None,
    "kill 4242": None,
    "sed -n 1,5p setup.py": None,
    "perl -ne 'print if /x/' f": None,
    "git status && git diff HEAD~1": None,
    "find . -name '*.py' -newer x": None,
    # read-only forms of commands that can also write
    "command -v rm": None,
    "perl -Mstrict -ne 'print' f": None,
    "sort -u a | uniq -c": None,
    "tar -tzf a.tgz; tar -czf - src | wc -c; unzip -l a.zip; gzip -dc a.gz | head": None,
    "curl -sSL https://x | jq .; curl -s -o /dev/null -w '%{http_code}' x; wget -qO- x": None,
    "black --check .; ruff check .; ruff format --diff; cargo fmt --check; gofmt -l .": None,
    "go mod download; go mod graph; go install ./cmd/x; cargo install ripgrep": None,
    "git branch; git branch -vv --contains HEAD; git tag -n5 -l 'v*'; git stash list": None,
    "git remote -v; git config --get user.name; git config user.name; git worktree list": None,
    "git symbolic-ref HEAD; git format-patch --stdout -1; git log | head": None,
    "dd if=/dev/zero of=/dev/null count=1": None,
    "rm -rf build": "mutation",
    "mv a b": "mutation",
    "cp a b": "mutation",
    "tee out.txt": "mutation",
    "chmod +x run.sh": "mutation",
    "sed -i s/a/b/ f": "mutation",
    "perl -pi -e s/a/b/ f": "mutation",
    "git commit -am wip": "mutation",
    "git checkout main": "mutation",
    "git reset --hard": "mutation",
    "go mod tidy": "mutation",
    "go get example.com/x": "mutation",
    "sudo rm -f /etc/x": "mutation",
    "sudo -u nobody timeout -s KILL 5 rm a": "mutation",
    "find . -name '*.o' | xargs -n 1 rm": "mutation",
    "find . -name '*.o' -delete": "mutation",
    "find . -exec rm {} +": "mutation",
    "env A=1 nice -n 5 mv a b": "mutation",
    "\\rm x": "mutation",  # the shell removes quotes and backslashes from a name
    "r'm' x": "mutation",
    'while read f; do rm "$f"; done < list': "mutation",
    "git -C . rm foo_test.go": "mutation",
    "git -c user.name=x -C sub commit -m x": "mutation",
    "echo $(git push)": "mutation",
    "f() { rm a; }; f": "mutation",
    # evasions: options of wrappers, option clusters, scripts, -exec, quoting
    "env -u HOME rm -rf x": "mutation",
    "doas -u root rm x": "mutation",
    "watch -n 1 rm x": "mutation",
    "exec -a name rm x": "mutation",
    "nohup setsid flock /tmp/l rm x": "mutation",
    "sed -ni p f": "mutation",
    "sed --in-place=.bak s/a/b/ f": "mutation",
    "perl -lpi -e s/a/b/ f": "mutation",
    r"find . -exec grep -q x {} \; -exec rm {} \;": "mutation",
    r"find . -execdir sh -c 'mv \"$1\" x' _ {} \;": "mutation",
    "find . -ok rm {} +": "mutation",
    "bash -lc 'rm -rf build'": "mutation",
    "xargs sh -c 'git push'": "mutation",
    "eval 'git commit -m x'": "mutation",
    "sort -o sorted.txt in.txt": "mutation",
    "uniq in.txt out.txt": "mutation",
    "gzip big.log": "mutation",
    "tar xzf a.tgz": "mutation",
    "tar -cf out.tar src": "mutation",
    "unzip a.zip": "mutation",
    "curl -sSLo page.html https://x": "mutation",
    "curl -O https://x/f.tgz": "mutation",
    "wget https://x/f.tgz": "mutation",
    "black .": "mutation",
    "ruff check --fix .": "mutation",
    "gofmt -w .": "mutation",
    "cargo add serde": "mutation",
    "go fmt ./...": "mutation",
    "mkfifo p": "mutation",
    "git branch -D old": "mutation",
    "git branch new": "mutation",
    "git tag v2": "mutation",
    "git stash": "mutation",
    "git config user.name x": "mutation",
    "git --git-dir=.git --work-tree . clone x": "mutation",
    "git format-patch -1": "mutation",
}


@pytest.mark.parametrize(("command", "code"), BASELINE.items())
def test_baseline(command, code):
    decision = shellpolicy.decide(command)
    assert (decision.allowed, decision.code) == (code is None, code), decision.reason
    assert decision.reason


@pytest.mark.parametrize(("command", "code"), {**BASELINE, **VERIFY}.items())
def test_verify_mode(command, code):
    decision = shellpolicy.decide_verify(command)
    assert (decision.allowed, decision.code) == (code is None, code), decision.reason


def test_shells_nested_past_the_limit_are_refused_not_followed():
    line = "ls"
    for depth in range(1, 7):
        line = "bash -c " + shlex.quote(line)
        decision = shellpolicy.decide(line)
        assert decision.allowed == (depth <= 4), (depth, decision)
    assert "nested more than 4 deep" in decision.reason


def test_reasons_point_at_what_to_do_instead():
    assert "read tool" in shellpolicy.decide("cd x").reason
    assert "write or edit tool" in shellpolicy.decide("echo x > f").reason
    assert "notes.txt" in shellpolicy.decide("echo x > notes.txt").reason
    assert "git commit changes the repository" in shellpolicy.decide_verify("git commit").reason
    assert "(b)" in shellpolicy.decide_verify("mv a b").reason  # the write target
    assert "(out.txt)" in shellpolicy.decide_verify("sort -uo out.txt in").reason
    assert "column" in shellpolicy.decide("ls |").reason


def test_cli_exit_status_and_output():
    allowed = sandlock("vet", "--", "ls -la")
    assert (allowed.returncode, allowed.stdout) == (0, "allowed\n")
    refused = sandlock("vet", "--", "cd src && make")
    assert refused.returncode == 1 and refused.stdout.startswith("refused (cd): cd: ")
    verify = sandlock("vet", "--verify", "--json", "--", "git -C . rm foo_test.go")
    assert verify.returncode == 1
    assert json.loads(verify.stdout) == {
        "allowed": False, "code": "mutation",
        "reason": "verify mode: git rm changes the repository; a verification must not "
                  "change files or the repository"}
    assert sandlock("vet", "--", "rm", "-rf", "x").returncode == 0  # words joined; baseline


def test_cli_usage_errors():
    missing = sandlock("vet")
    assert missing.returncode == 2
    assert missing.stderr == ("sandlock: error: vet: missing COMMAND "
                              "(usage: sandlock vet [--verify] -- 'COMMAND')\n")
    assert sandlock("vet", "--bogus", "--", "ls").returncode == 2


def test_a_run_never_imports_the_parser():
    result = subprocess.run([sys.executable, "-X", "importtime", *SANDLOCK[1:], "run", "--",
                             "true"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "shellpolicy" not in result.stderr and "tree_sitter" not in result.stderr
