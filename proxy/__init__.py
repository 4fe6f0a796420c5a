"""HTTP(S) filtering proxy: the rules, and an embedded mitmproxy addon enforcing them.

Installed as ``sandlock.proxy``. This module stays light: the rules are pure Python and
are used before any proxy exists (policy validation, ``sandlock policy test``);
mitmproxy is imported only inside the proxy's own process (``_server``), started by
runs that have HTTP rules.
"""

from ._credentials import AuthRule, header_value, parse_auth_rule
from ._paths import normalise_path
from ._rules import HttpDecision, HttpRule, HttpRules, parse_rule

__all__ = ["AuthRule", "HttpDecision", "HttpRule", "HttpRules", "header_value", "normalise_path",
           "parse_auth_rule", "parse_rule"]
