"""Every grammar sandlock reads, fuzzed in process: a few hundred seeded mutants each
(tests/fuzzing.py) through the real entry point (``sandlock.cli.main`` with the
command line a user would type, or the parser function the options and files share).

Each input must end one of the ways the standard allows, within a CPU budget: a
success (a policy printed, a verdict), or exit 2 with exactly one line ``sandlock:
error: ...``, printable, naming no Python internals. Never a traceback, a hang, a
RecursionError, an OverflowError after the command started. And what is accepted is
what was written: a number in ASCII digits, a rule with nothing invisible in it (the
mutants that put U+2028, a no-break space or a Unicode digit into an option were
accepted before, and meant something else). The same grammars through the process
itself, on a smaller sample: tests/test_fuzz_cli.py.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from fuzzing import (
    EVERY_SECTION,
    NUMERIC,
    RULES,
    SIZES,
    TEXT,
    TOML_NESTS,
    VET_NESTS,
    VET_SEEDS,
    CpuBudget,
    context,
    mutants,
    one_error_line,
    policy_seeds,
    write_policy,
)

from sandlock._errors import PolicyError, SandlockError, error_line

BUDGET = 0.2  # CPU seconds per input, in process (a hang or a quadratic step: seconds)
# vet parses the whole line with tree-sitter: ~0.12 s for a pipeline of 2,000 commands
# (24 KB), the largest the mutants make; a quadratic step there takes seconds.
VET_BUDGET = 0.6
PER_OPTION = 100


def cli(*argv: str) -> tuple[int, str, str]:
    """``sandlock ARGV`` in this process: (exit status, stdout, stderr)."""
    from sandlock.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def judged(argv: list[str], budget: float = BUDGET) -> tuple[int, str, str]:
    """``cli(argv)``, failing the test on a traceback, an exit other than 0/1/2, an
    error that is not one line, or more than ``budget`` CPU seconds."""
    with CpuBudget() as spent:
        code, out, err = cli(*argv)  # (any exception but SystemExit fails the test here)
    assert spent.spent < budget, f"{spent.spent:.2f} s of CPU for {argv!r}"
    assert code in (0, 1, 2), (argv, code, err)
    if code == 2:
        assert (problem := one_error_line(err)) is None, (argv, problem)
    return code, out, err


# --- options: `sandlock run --print-policy OPTION VALUE` ------------------------------------

def _ascii_number(value: str) -> bool:
    return re.fullmatch(r"[ \t]*[0-9.,* -]*([KMGTkmgt](i?[Bb])?)?[ \t]*", value) is not None


@pytest.mark.parametrize("option", [*NUMERIC, *RULES, *TEXT])
def test_option_values(option, tmp_path):
    seeds = {**NUMERIC, **RULES, **TEXT}[option]
    argv = ["run", "--print-policy", *context(option, str(tmp_path)), option]
    assert judged(argv + [seeds[0]], budget=10)[0] == 0  # (the first: imports, unmeasured)
    for value in [*seeds, *mutants(seeds, PER_OPTION, salt=option, nests=(("[", "]"),))]:
        code, out, err = judged(argv + [value])
        if code != 0:
            continue
        if option in NUMERIC:
            assert _ascii_number(value), f"{option} {value!r} was accepted"
        if option in RULES:
            assert all(char.isprintable() or char == "\t" for char in value), \
                f"{option} {value!r} was accepted"


def test_the_issue_s_values_are_one_line_and_exit_2():
    """The ones the fuzzing run found: each hung, crashed after starting the command, or
    was read as another number than the one a reader sees."""
    for option, value in [("--cpu-cores", "0-1111111111"), ("-t", "1e10"),
                          ("-t", "99999999999"), ("--max-file-size", "99999999999T"),
                          ("--http-port", "٣٤٣"), ("-m", "２G"), ("-P", "1_0"),
                          ("--max-cpu", "1e400"), ("--pass-fd", "9" * 30),
                          ("--net-allow", "\u2028*"), ("--http-allow", "GET\u2028*"),
                          ("--http-allow", "\u00a0GET *"), ("--net-bind", "80\u2029")]:
        code, _, err = judged(["run", "--print-policy", option, value])
        assert code == 2, (option, value)


def test_error_lines_escape_what_does_not_show():
    code, _, err = judged(["run", "--print-policy", "--cwd", "/nonexistent\x1b[2J\r\u2028"])
    assert code == 2
    assert err == "sandlock: error: --cwd: /nonexistent\\x1b[2J\\r\\u2028: no such directory\n"
    assert error_line("a\nb\x9b") == "sandlock: error: a\\nb\\x9b"


# --- the API: Policy's fields given numbers --------------------------------------------

@pytest.mark.parametrize("field", ["timeout", "max_cpu", "max_processes", "max_open_files",
                                   "max_memory", "max_file_size", "max_output", "http_ports",
                                   "cpu_cores"])
def test_policy_fields_given_any_number(field):
    from sandlock import Policy

    numbers = [1e10, 1e9, float("inf"), float("-inf"), float("nan"), 10 ** 5000, -10 ** 5000,
               2 ** 63, 2 ** 63 - 1, 2 ** 64, -1, 0, 0.0, -0.0, 1e-300, True, 3, 1.5]
    for number in numbers:
        value = [number] if field in ("http_ports", "cpu_cores") else number
        with CpuBudget() as spent:
            try:
                Policy(**{field: value})
            except PolicyError as exc:
                assert one_error_line(error_line(str(exc)) + "\n") is None
        assert spent.spent < BUDGET


def test_a_timeout_past_the_bound_is_refused_before_anything_starts():
    from sandlock import Policy, Sandbox

    with pytest.raises(PolicyError, match="at most 1000000000"):
        Policy(timeout=1e10)
    with pytest.raises(PolicyError, match="at most 1000000000"):
        Sandbox(Policy()).run(["true"], timeout=1e10)
    assert Policy(timeout=1e9).timeout == 1e9


# --- the grammars themselves, as options, files and the API share them -------------------

def _parsers() -> dict[str, tuple[object, list[str]]]:
    from sandlock import limits, netrules, proxy
    from sandlock._grammar import decimal, whole
    from sandlock.policyfiles import parse_endpoint, parse_request

    return {
        "size": (limits.parse_size, SIZES),
        "cpu list": (limits.parse_cpu_list, ["0", "0-1", "0,1"]),
        "whole number": (whole, ["0", "42", "9223372036854775807"]),
        "number": (decimal, ["30", "2.5", ".5"]),
        "ports": (netrules.parse_ports, ["22,443", "8000-8100", "*"]),
        "net rule": (netrules.read_allow, RULES["--net-allow"]),
        "net deny": (netrules.read_deny, RULES["--net-deny"]),
        "resolve": (netrules.read_resolve, RULES["--resolve"]),
        "dns server": (netrules.read_dns_server, RULES["--dns-server"]),
        "http rule": (proxy.parse_rule, RULES["--http-allow"]),
        "auth rule": (proxy.parse_auth_rule, RULES["--http-auth"]),
        "request": (parse_request, ["GET https://api.github.com/repos/x/y",
                                    "POST http://example.com:8080/a?b=c", "https://[::1]/"]),
        "endpoint": (parse_endpoint, ["tcp://github.com:22", "udp://1.1.1.1:53",
                                      "icmp://8.8.8.8", "[::1]:443"]),
    }


@pytest.mark.parametrize("grammar", ["size", "cpu list", "whole number", "number", "ports",
                                     "net rule", "net deny", "resolve", "dns server",
                                     "http rule", "auth rule", "request", "endpoint"])
def test_grammar(grammar):
    parse, seeds = _parsers()[grammar]
    parse(seeds[0])
    for text in [*seeds, *mutants(seeds, 300, salt=grammar, nests=(("[", "]"),))]:
        with CpuBudget() as spent:
            try:
                parse(text)
            except ValueError as exc:  # the grammars' contract (callers name the option)
                assert one_error_line(error_line(str(exc)) + "\n") is None, (text, str(exc))
            else:
                assert all(char.isprintable() or char == "\t" for char in text), \
                    f"{grammar}: {text!r} was accepted"
        assert spent.spent < BUDGET, f"{spent.spent:.2f} s of CPU for {text[:100]!r}"


# --- policy files: `sandlock profile validate FILE` ------------------------------------------

def test_policy_files(tmp_path):
    seeds = policy_seeds()
    path = str(tmp_path / "p.toml")
    for number, text in enumerate([*seeds, *mutants(seeds, 300, salt="toml", nests=TOML_NESTS)]):
        write_policy(path, text)
        code, out, _ = judged(["profile", "validate", path], budget=10 if number == 0 else BUDGET)
        assert code in (0, 2) and (code == 2 or out == f"{path}: ok\n"), (text[:300], out)


@pytest.mark.parametrize("text, error", [
    ("x = " + "[" * 500 + "]" * 500, "1: not a policy: arrays or tables nested more than 16 deep"),
    ("x = " + "{a=" * 500 + "1" + "}" * 500, "1: not a policy: arrays or tables nested more than 16 deep"),
    ("[" + ".".join(["a"] * 50_000) + "]", "1: not a policy: a dotted key of more than 16 parts"),
    ("\n\n" + ".".join(["a"] * 100_000) + " = 1", "3: not a policy: a dotted key of more than 16 parts"),
    ("x = " + "9" * 5000, ": invalid TOML: an integer of more than 4300 digits"),
    ("[limits]\nmax_memory = 0x" + "f" * 5000, ":2: limits.max_memory: an integer of 6021 digits is "
     "more than the largest size, 9223372036854775807 bytes"),
])
def test_the_issue_s_policy_files_are_refused_at_once(tmp_path, text, error):
    """Before: a RecursionError traceback (95 of 1,199 mutants), 30 s for the header,
    more than 60 s for the key."""
    path = str(tmp_path / "p.toml")
    write_policy(path, text)
    code, _, err = judged(["profile", "validate", path])
    assert (code, err) == (2, f"sandlock: error: {path}{'' if error[0] == ':' else ':'}{error}\n")


def test_strings_and_comments_do_not_count_as_nesting(tmp_path):
    path = str(tmp_path / "p.toml")
    write_policy(path, '# [[[[[[[[[[[[[[[[[[[[a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r\n'
                 'description = "[[[[[[[[[[[[[[[[[[[[ {{{{{{{{{{{{{{{{{{{{ a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q \\" [["\n'
                 "[filesystem]\nread = ['''[[[[[[[[[[[[[[[[[[[[.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r''']\n")
    code, _, err = judged(["profile", "validate", path])
    assert "not a policy" not in err and code == 2 and "no such file or directory" in err


# --- profiles: `run -p NAME` -------------------------------------------------------------

def test_profile_names(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "sandlock" / "profiles").mkdir(parents=True)
    write_policy(str(tmp_path / "sandlock" / "profiles" / "build.toml"), EVERY_SECTION)
    seeds = ["build", "pip-install", "a.b_c-d"]
    assert judged(["run", "--print-policy", "-p", "build"], budget=10)[0] == 0
    for name in [*seeds, *mutants(seeds, 200, salt="profile")]:
        judged(["run", "--print-policy", "-p", name])


# --- `sandlock policy test` ------------------------------------------------------------------

def test_policy_test_requests_and_endpoints():
    policy = ["--http-allow", "GET api.github.com/repos/*", "--net-allow", "github.com:22"]
    requests = _parsers()["request"][1]
    endpoints = _parsers()["endpoint"][1]
    judged(["policy", "test", *policy, requests[0]], budget=10)
    for request in [*requests, *mutants(requests, 150, salt="policy test")]:
        code, out, err = judged(["policy", "test", *policy, request])
        assert code == 2 or (err == "" and out.startswith(("ALLOW ", "DENY "))
                             and out.count("\n") == 1 and out[:-1].isprintable()), (request, out)
    for endpoint in [*endpoints, *mutants(endpoints, 150, salt="policy test --net")]:
        code, out, err = judged(["policy", "test", *policy, "--net", endpoint])
        assert code == 2 or (err == "" and out.startswith(("ALLOW ", "DENY "))), (endpoint, out)


# --- `sandlock vet` --------------------------------------------------------------------------

def _verdict(command: str, *flags: str) -> None:
    code, out, err = judged(["vet", *flags, "--", command], budget=VET_BUDGET)
    assert code in (0, 1) and err == "", (command, code, err)
    assert out.count("\n") == 1 and out[:-1].isprintable(), (command, out)
    assert out.startswith("{" if flags else ("allowed" if code == 0 else "refused ("))


def test_vet_commands():
    """Every mutant, strict and --verify --json, gets one line of verdict."""
    judged(["vet", "--", VET_SEEDS[0]], budget=10)
    for flags, command in [*(((), command) for command in
                             [*VET_SEEDS, *mutants(VET_SEEDS, 250, salt="vet", nests=VET_NESTS)]),
                           *((("--verify", "--json"), command) for command in
                             mutants(VET_SEEDS, 50, salt="vet --verify --json", nests=VET_NESTS))]:
        _verdict(command, *flags)


@pytest.mark.parametrize("command", [
    pytest.param("$(" * 400 + "x" + ")" * 400, id="$( x400"),
    pytest.param('"$(' * 300 + "x" + ')"' * 300, id='"$( x300'),
    pytest.param("cat " + "<(" * 600 + "x" + ")" * 600, id="<( x600"),
    pytest.param(" && ".join(["true"] * 1000), id="&& x1000"),
    pytest.param(" || ".join(["true"] * 1000), id="|| x1000"),
    pytest.param("echo \udcff\udca2", id="not UTF-8"),
    pytest.param("(" * 600 + "x" + ")" * 600, id="( x600"),
    pytest.param("{ " * 600 + "x; " + "} " * 600, id="{ x600"),
    pytest.param(" ; ".join(["true"] * 3000), id="; x3000"),
    pytest.param(" | ".join(["cat"] * 3000), id="| x3000"),
])
def test_vet_deep_commands(command):
    _verdict(command)


def test_sandlock_errors_are_what_the_cli_catches():
    """The fuzz tests accept PolicyError and ValueError from grammars because their
    callers turn them into exit 2: PolicyError is both."""
    assert issubclass(PolicyError, ValueError) and issubclass(PolicyError, SandlockError)
