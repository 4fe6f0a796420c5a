"""The proxy's decision on a TLS ClientHello (pure): pass through, inspect or refuse."""

from __future__ import annotations

import pytest

from sandlock.proxy import HttpRules
from sandlock.proxy._rules import INSPECT, PASS, REFUSE

RULES = HttpRules.parse(("* api.openai.com", "GET api.github.com/repos/*"), ("* */admin/*",))
OPEN = HttpRules.parse(("* api.openai.com",), ())


@pytest.mark.parametrize("rules, sni, inspect, can_inspect, action, reason", [
    (RULES, None, "auto", True, REFUSE, "TLS without SNI"),
    (RULES, "evil.example", "auto", True, REFUSE, "no --http-allow rule for evil.example"),
    (RULES, "API.GitHub.com.", "auto", True, INSPECT, "inspected"),
    (RULES, "api.github.com", "off", False, REFUSE, "needs HTTPS inspection"),
    (RULES, "api.openai.com", "auto", True, INSPECT, "inspected"),  # a deny rule may apply
    (OPEN, "api.openai.com", "auto", False, PASS, "pass-through"),
    (OPEN, "api.openai.com", "off", False, PASS, "pass-through"),
    (OPEN, "api.openai.com", "on", True, INSPECT, "inspected"),
])
def test_tls_decision(rules, sni, inspect, can_inspect, action, reason):
    decision = rules.tls_decision(sni, inspect, can_inspect)
    assert decision.action == action
    assert reason in decision.reason
