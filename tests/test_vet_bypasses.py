"""Each way an attack review got a forbidden line approved by `sandlock vet` (and those
found while closing them): vet now refuses it, and the control runs the same line,
unvetted, with bash in a sandbox (tests/shellcases.py), where it does what the rule
forbids: a shell changes directory, a file appears outside the workspace, the
workspace changes. The lines write to ../outside/ where the report wrote ~/.bashrc."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import sandlock
from sandlock import shellpolicy
from shellcases import build_shim, build_template, run_cases

B, V = "baseline", "verify"
# (line, mode, the codes a refusal may carry, what the line does when it runs: "cd",
# "outside", "changes", or None where the tool is not on this machine or needs a
# terminal or the network)
ISSUE = [
    # cd, through code bash runs without a cd in sight
    ("coproc cd /\nwait", B, {"cd"}, "cd"),
    ("coproc X { cd /; }\nwait", B, {"syntax", "cd"}, "cd"),
    ("shopt -s expand_aliases; alias c=cd\nc /", B, {"opaque"}, "cd"),
    # redirects, through code handed to another shell as a literal
    ('bash <<< "echo hi > ../outside/bashrc"', B, {"redirect"}, "outside"),
    ("bash <<EOF\necho hi > ../outside/bashrc\nEOF", B, {"redirect"}, "outside"),
    ('trap "echo hi > ../outside/bashrc" EXIT', B, {"redirect"}, "outside"),
    ('fish -c "echo hi > ../outside/bashrc"', B, {"redirect"}, None),
    # verify mode: writers by what they do
    ("npx prettier --write .", V, {"mutation"}, None),
    ("cargo clippy --fix", V, {"mutation"}, None),
    ("ruby -i -pe 'sub(/a/, \"b\")' a.txt", V, {"mutation"}, None),
    ('sed "w copy" a.txt', V, {"mutation"}, "changes"),
    ("git hash-object -w --stdin <<< fresh", V, {"mutation"}, "changes"),
    ("printf 'blob\\ndata 2\\nhi\\n' | git fast-import --quiet", V, {"mutation"}, "changes"),
    ("git commit-tree HEAD^{tree} -m x", V, {"mutation"}, "changes"),
    ("bsdtar -xf arch.tar", V, {"mutation"}, None),
    ("7z x arch.7z", V, {"mutation"}, None),
    ("cpio -i < arch.cpio", V, {"mutation"}, None),
    ("vim -c '%s/a/b/' -c wq a.txt", V, {"mutation"}, "changes"),
]
FOUND = [
    # the grammar reads these otherwise than bash
    ("c\\\nd ..", B, {"cd"}, "cd"),
    ("'c'\\d ..", B, {"cd"}, "cd"),
    ("echo a\n\\cd ..", B, {"cd"}, "cd"),
    ("$'\\x63d' ..", B, {"cd"}, "cd"),
    ('$"cd" ..', B, {"cd"}, "cd"),
    ("c{d,d}", B, {"cd"}, "cd"),
    ("bash <<< 'r''m'\\ a.txt", V, {"mutation"}, "changes"),
    ("echo `echo \\$(echo hi > ../outside/f)`", B, {"redirect"}, "outside"),
    ("cat <<EOF\n`echo hi > ../outside/f`\nEOF", B, {"redirect"}, "outside"),
    ("echo hi 1<> ../outside/f", B, {"redirect"}, "outside"),
    # text bash runs as code
    ("set -o history -H\necho cd ..\n!:1-2", B, {"opaque"}, "cd"),
    ("x='a[$(echo hi > ../outside/f)]'; : $((x))", B, {"redirect"}, "outside"),
    ("PS4='$(echo hi > ../outside/f)'; set -x; :", B, {"redirect"}, "outside"),
    ("mapfile -C 'echo hi > ../outside/f' -c 1 m <<< y", B, {"redirect"}, "outside"),
    ("sed -n '1e echo hi > ../outside/f' a.txt", B, {"redirect"}, "outside"),
    ("env 'BASH_FUNC_ls%%=() { echo hi > ../outside/f; }' bash -c ls", B, {"opaque"}, "outside"),
    ("GIT_PAGER='echo hi > ../outside/f' git -p log", B, {"redirect"}, None),
    ("git -c alias.x='!echo hi > ../outside/f' x", B, {"opaque"}, "outside"),
    ("env -S 'cd ..'", B, {"cd"}, None),
    # code that exists only when the line runs (strict mode)
    ("c=cd; $c ..", B, {"runtime"}, "cd"),
    ("echo 'echo hi > ../outside/f' | bash", B, {"runtime"}, "outside"),
    ("source <(echo cd ..)", B, {"runtime"}, "cd"),
    (". /dev/stdin <<< 'cd ..'", B, {"opaque"}, "cd"),
    ("printf 'cd ..' | tee s.sh > /dev/null; source s.sh", B, {"runtime"}, "cd"),
    ("echo 'echo hi > ../outside/f' | xargs -I{} bash -c {}", B, {"runtime"}, "outside"),
    ("o=-i; sed $o s/a/b/ a.txt", V, {"runtime", "mutation"}, "changes"),
    ("o=-i; perl $o -pe s/a/b/ a.txt", V, {"runtime"}, "changes"),
    ("echo -i | xargs sed s/a/b/ a.txt", V, {"runtime"}, "changes"),
    ("python3 - <<'EOF'\nopen('../outside/f', 'w')\nEOF", B, {"opaque"}, "outside"),
    # verify mode: wrappers and runners
    ("timeout 5 watch -n 1 'rm a.txt'", V, {"mutation"}, None),
    ("python3 -m zipfile -e arch.zip .", V, {"mutation"}, None),
    ("uvx ruff@0.5 format", V, {"mutation"}, None),
    ("find . -name a.txt -exec sh -c 'rm {}' \\;", V, {"runtime"}, "changes"),
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the oracle's chdir probe")
    directory = tmp_path_factory.mktemp("vetlab")
    return build_template(directory), build_shim(directory)


@pytest.mark.parametrize(("line", "mode", "codes", "effect"), ISSUE + FOUND)
def test_vet_refuses_it(line, mode, codes, effect):
    decision = (shellpolicy.decide_verify if mode == V else shellpolicy.decide)(line)
    assert not decision.allowed and decision.code in codes, decision
    assert "\n" not in decision.reason


def test_unvetted_each_does_what_its_rule_forbids(lab):
    """The control: run as they are, every line above that can run here breaks its rule."""
    template, shim = lab
    runnable = [(line, effect) for line, _, _, effect in ISSUE + FOUND if effect is not None]
    outcomes = run_cases([line for line, _ in runnable], template, shim)
    seen = {"cd": lambda outcome: outcome.chdirs, "outside": lambda outcome: outcome.outside,
            "changes": lambda outcome: outcome.changed}
    assert [line for (line, effect), outcome in zip(runnable, outcomes)
            if not seen[effect](outcome)] == []


def test_permissive_reads_runtime_code_as_written_and_only_that():
    """--permissive is the documented limit: what is built at run time is read as
    written; every other refusal stands."""
    assert shellpolicy.decide("c=cd; $c ..", permissive=True).allowed
    assert shellpolicy.decide("echo 'ls' | bash", permissive=True).allowed
    for line, mode, codes, _ in ISSUE + FOUND:
        if codes != {"runtime"}:
            decide = shellpolicy.decide_verify if mode == V else shellpolicy.decide
            assert not decide(line, permissive=True).allowed, line
    result = sandlock("vet", "--permissive", "--json", "--", "$CMD x")
    assert (result.returncode, json.loads(result.stdout)["allowed"]) == (0, True)


def test_a_deep_nest_is_one_line_of_refusal_not_a_traceback():
    """$( nested 400 deep (1.2 KB) was a RecursionError traceback, exit 1, no output."""
    line = "echo " + "$(" * 400 + "x" + ")" * 400
    decision = shellpolicy.decide(line)
    assert (decision.allowed, decision.code) == (False, "syntax")
    result = sandlock("vet", "--json", "--", line)
    assert result.returncode == 1 and result.stderr == ""
    assert json.loads(result.stdout)["code"] == "syntax"
    plain = sandlock("vet", "--", line)
    assert plain.stdout.count("\n") == 1 and plain.stdout.startswith("refused (syntax): ")
    # The control: a reasonable nest is read through, down to what it runs.
    assert shellpolicy.decide("echo " + "$(" * 20 + "cd /" + ")" * 20).code == "cd"


def test_the_cli_refuses_as_nobody_too(as_nobody):
    import subprocess
    import sys

    result = subprocess.run(as_nobody([sys.executable, "-m", "sandlock", "vet", "--json", "--",
                                       "shopt -s expand_aliases; alias c=cd\nc /"]),
                            capture_output=True, text=True, cwd="/")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["code"] == "opaque"
