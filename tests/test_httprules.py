"""HTTP rule matching, pure (proxy/_rules, proxy/_paths): the path glob and the method
and hostname-label checks, each compared with the regular expression it replaced over
many generated inputs; one canonical form for rules' and requests' paths, the paths
refused as unclear, and the methods a request names (its own and its overrides)."""

from __future__ import annotations

import random
import re

import pytest

from sandlock.proxy import HttpRules, parse_rule
from sandlock.proxy._paths import UnclearPath, canonical, readings
from sandlock.proxy._rules import _label, glob_matches, named_methods

ALPHABET = "ab/*\n%."


def _by_regex(pattern: str, text: str) -> bool:
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), text, re.DOTALL) is not None


def test_the_glob_matches_exactly_what_the_regular_expression_did():
    rng = random.Random(7)
    checked = matched = 0
    for _ in range(30000):
        pattern = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 7)))
        text = "".join(rng.choice(ALPHABET.replace("*", "")) for _ in range(rng.randint(0, 9)))
        expected = _by_regex(pattern, text)
        assert glob_matches(tuple(pattern.split("*")), text) == expected, (pattern, text)
        checked += 1
        matched += expected
    assert matched > 1000 and checked - matched > 1000  # both outcomes well covered


@pytest.mark.parametrize("pattern,text,expected", [
    ("/repos/*", "/repos/", True), ("/repos/*", "/repos", False),
    ("/a/*/c", "/a/b/x/c", True), ("/a/*/c", "/a/c", False), ("*", "", True),
    ("/a*a*a", "/aa", False), ("/a*a*a", "/aaa", True), ("/x", "/x/", False),
])
def test_glob_examples(pattern, text, expected):
    assert glob_matches(tuple(pattern.split("*")), text) is expected


def test_label_and_method_checks_match_their_regular_expressions():
    label = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
    method = re.compile(r"[A-Z][A-Z0-9_-]*")
    rng = random.Random(8)
    for _ in range(20000):
        text = "".join(rng.choice("aZ0_-.é ") for _ in range(rng.randint(0, 5)))
        assert _label(text) == (label.fullmatch(text) is not None), text
        upper = text.upper()
        accepted = True
        try:
            parse_rule(f"{upper} example.com")
        except ValueError:
            accepted = False
        if upper and "," not in upper and upper != "*" and " " not in upper:
            assert accepted == (method.fullmatch(upper) is not None), upper
    assert _label("a" * 63) and not _label("a" * 64)


# --- one canonical form for rules and requests (proxy/_paths) ------------------------------

SPELLABLE = "abcXYZ019-._~!$&'()+,=:@é€"  # each may be sent raw or escaped, any hex case


def _respelled(path: str, rng: random.Random) -> str:
    """``path`` with some of its SPELLABLE characters percent-escaped (UTF-8, hex of
    either case): the same path to a server."""
    out = []
    for char in path:
        if char in SPELLABLE and rng.random() < 0.5:
            escape = "".join(f"%{byte:02X}" for byte in char.encode())
            out.append(escape.lower() if rng.random() < 0.5 else escape)
        else:
            out.append(char)
    return "".join(out)


def test_a_rule_matches_every_spelling_and_a_deny_rule_every_case_of_its_path():
    rng = random.Random(9)
    for _ in range(3000):
        path = "/" + "".join(rng.choice(SPELLABLE + "/") for _ in range(rng.randint(1, 12)))
        rule_path, request = _respelled(path, rng), _respelled(path, rng)
        # ASCII letters only: case is folded for ASCII (docs/http.md: É is not é)
        shouted = "".join(c.upper() if c.isascii() and rng.random() < 0.5 else c for c in request)
        rules = HttpRules.parse((f"GET api.test{rule_path}",), ())
        denying = HttpRules.parse(("* api.test",), (f"GET api.test{rule_path}",))
        assert rules.decide("GET", "api.test", request).allowed, (rule_path, request)
        assert not denying.decide("GET", "api.test", shouted).allowed, (rule_path, shouted)
        assert canonical(canonical(request)) == canonical(request)


@pytest.mark.parametrize("request_path", ["/Admin/x", "/admin/x", "/ADMIN/x", "/%61dmin/x",
                                          "/%41DMIN/x", "/x/../aDmIn/y"])
def test_deny_rules_fold_case_on_both_sides(request_path):
    rules = HttpRules.parse(("* api.test",), ("GET */Admin/*",))
    assert rules.decide("GET", "api.test", request_path).reason == "--http-deny GET */Admin/*"


def test_allow_rules_stay_case_sensitive():
    rules = HttpRules.parse(("GET api.test/Repos/*",), ())
    assert rules.decide("GET", "api.test", "/Repos/x").allowed
    assert rules.decide("GET", "api.test", "/%52epos/x").allowed  # %52 is R: the same path
    assert not rules.decide("GET", "api.test", "/repos/x").allowed


@pytest.mark.parametrize("path, reason", [
    ("/public/%252e%252e/admin", "decoding twice"), ("/public/%25%32%65%25%32%65/x", "decoding twice"),
    ("/public/%252F..%252Fadmin", "decoding twice"), ("/public/%255c", "decoding twice"),
    ("/public/%253B/x", "decoding twice"), ("/public/%2500", "decoding twice"),
    ("/public/%25252e", "decoding twice"), ("/public/%25%2532%2565", "decoding twice"),
    ("/public/%25c0%25ae", "decoding twice"),
    ("/public/%c0%ae%c0%ae/admin", "overlong"), ("/public/%C0%AF", "overlong"),
    ("/public/%c1%9c", "overlong"), ("/public/%e0%80%ae", "overlong"),
    ("/public/%f0%80%80%ae", "overlong"), ("/public/\udcc0\udcae", "overlong"),
    ("/public/%zz", "bad %-escape"), ("/public/%2", "bad %-escape"), ("/public/%00", "NUL"),
    ("/public/\0", "NUL"), ("/public/#x", "'#'"), ("/../x", "above the root"), ("*", "not an absolute"),
])
def test_unclear_paths_are_refused_with_their_reason(path, reason):
    rules = HttpRules.parse(("GET api.test/public/*",), ())
    decision = rules.decide("GET", "api.test", path)
    assert not decision.allowed and reason in decision.reason, decision
    with pytest.raises(UnclearPath):
        readings(path)


@pytest.mark.parametrize("path, normal", [
    ("/public/a%20b", "/public/a%20b"), ("/public/a b", "/public/a%20b"),
    ("/public/%c3%a9t%C3%A9", "/public/%C3%A9t%C3%A9"), ("/public/été", "/public/%C3%A9t%C3%A9"),
    ("/public/%E0%A4%85", "/public/%E0%A4%85"), ("/public/%F0%9F%98%80", "/public/%F0%9F%98%80"),
    ("/public/100%25", "/public/100%25"), ("/public/50%25off", "/public/50%25off"),
    ("/public/%2525", "/public/%2525"), ("/public/group%2fname", "/public/group%2Fname"),
    ("/public/%7e%21%2A%3f", "/public/~!%2A%3F"), ("/public/%E9", "/public/%E9"),
])
def test_ordinary_escapes_pass_in_canonical_form(path, normal):
    assert canonical(path) == normal
    assert HttpRules.parse(("GET api.test/public/*",), ()).decide("GET", "api.test", path).allowed


def test_the_readmes_deny_pattern_names_the_host_first():
    # '* */admin/*': any method, any host, paths under /admin/ at the top only.
    top = HttpRules.parse(("* api.test/v1/*",), ("* */admin/*",))
    assert not top.decide("GET", "other.test", "/admin/keys").allowed
    assert top.decide("GET", "api.test", "/v1/admin/keys").allowed
    # An 'admin' segment below the top is '*/admin/*' in the PATH.
    anywhere = HttpRules.parse(("* api.test/v1/*",), ("* api.test/*/admin/*",))
    assert not anywhere.decide("GET", "api.test", "/v1/admin/keys").allowed
    assert not anywhere.decide("GET", "api.test", "/v1/x/Admin/y").allowed
    assert anywhere.decide("GET", "api.test", "/v1/administrators").allowed


def test_every_method_a_request_names():
    override = (("X-HTTP-Method-Override", "delete"), ("X-HTTP-Method", "PUT, get"),
                ("X-Method-Override", " patch "))
    assert named_methods("post", "/x?a=1", override) == [
        ("", "POST"), ("X-HTTP-Method-Override: DELETE", "DELETE"), ("X-HTTP-Method: PUT", "PUT"),
        ("X-HTTP-Method: GET", "GET"), ("X-Method-Override: PATCH", "PATCH")]
    for query in ("_method=DELETE", "_METHOD=delete", "%5Fmethod=DELETE", "_m%65thod=del%65te",
                  "a=1;_method=DELETE", ".method=DELETE", "+_method=DELETE", "_method[]=DELETE",
                  "_method=DELETE&_method=GET"):
        assert ("?_method=DELETE", "DELETE") in named_methods("POST", f"/x?{query}"), query
    assert named_methods("POST", "/x?q=method&_methods=DELETE") == [("", "POST")]
    assert named_methods("POST", "/x?_method=&_method=post") == [("", "POST")]


def test_a_method_override_is_judged_like_the_method():
    rules = HttpRules.parse(("GET,POST api.test",), ("DELETE api.test",))
    for overrides, target in [((("X-HTTP-Method-Override", "DELETE"),), "/x"),
                              ((("X-HTTP-Method", "delete"),), "/x"),
                              ((("X-Method-Override", "GET, DELETE"),), "/x"), ((), "/x?_method=DELETE")]:
        decision = rules.decide("POST", "api.test", target, overrides)
        assert not decision.allowed and decision.reason.startswith("--http-deny DELETE api.test "
                                                                   "(method override "), decision
    assert not rules.decide("GET", "api.test", "/x", (("X-HTTP-Method", "PUT"),)).allowed
    assert rules.decide("POST", "api.test", "/x", (("X-HTTP-Method-Override", "GET"),)).allowed


def test_a_credential_goes_only_where_every_named_method_is_covered():
    rules = HttpRules.parse(("* api.test",), (), ("POST api.test/v1/* bearer key",))
    assert rules.auth_for("POST", "api.test", "/v1/x").credential == "key"
    assert rules.auth_for("POST", "api.test", "/v1/x", (("X-HTTP-Method-Override", "DELETE"),)) is None
    assert rules.auth_for("POST", "api.test", "/v1/x?_method=DELETE") is None
    assert rules.auth_for("POST", "api.test", "/v1/x?_method=POST").credential == "key"
