"""Credentials the sandbox never holds (docs/credentials.md): where each secret comes
from (``--credential NAME=env:VAR|file:PATH``), the rules that attach one to requests
(``--http-auth``), the variables that give the command a placeholder instead
(``--credential-env VAR=NAME``); checked here, read at launch by ``read_secrets``.

A Policy holds only the sources, never a secret: it prints, compares and travels
(policy files, --print-policy, learn) without one.
"""

from __future__ import annotations

import os

from .._errors import PolicyError
from ._values import Environment, environment, strings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._policy import Policy

# A credential's name is also a policy file key ([credentials] NAME = "env:VAR"): the
# characters of a TOML bare key, so it is never quoted, and never a dotted path.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_VAR_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
ENV, FILE = "env:", "file:"


def sources(name: str, value: object) -> Environment:
    """NAME -> "env:VAR" or "file:PATH" (a mapping, or NAME=SOURCE strings)."""
    normalised = {}
    for credential, source in environment(name, value).items():
        _check_name(name, credential)
        if source is None:
            raise PolicyError(name, f"{credential}: expected NAME=env:VAR or NAME=file:PATH")
        if source.startswith(FILE):  # file:~/.openai-key as the shell would not expand it
            source = FILE + os.path.expanduser(source[len(FILE):])
        _check_source(name, credential, source)
        normalised[credential] = source
    return Environment(normalised.items())


def placeholders(name: str, value: object) -> Environment:
    """VAR -> NAME: the command's variable VAR holds a placeholder for credential NAME."""
    given = environment(name, value)
    for variable, credential in given.items():
        if not set(variable) <= _VAR_CHARS or variable[0].isdigit():
            raise PolicyError(name, f"{variable!r} is not an environment variable name")
        if credential is None:
            raise PolicyError(name, f"{variable}: expected VAR=NAME (NAME: a --credential)")
        _check_name(name, credential)
    return given


def auth_rules(name: str, value: object) -> tuple[str, ...]:
    """``METHODS HOST[/PATH] SCHEME NAME`` rules, kept as written (normalised spaces)."""
    given = strings(name, value)
    if not given:
        return given
    from .._grammar import spaced  # (invisible characters kept, for the parser to refuse)
    from ..proxy import parse_auth_rule  # pure rules only: mitmproxy stays out of here

    rules = tuple(dict.fromkeys(map(spaced, given)))

    for rule in rules:
        try:
            parse_auth_rule(rule)
        except ValueError as exc:
            raise PolicyError(name, f"{rule!r}: {exc}") from None
    return rules


def check_references(credentials: Mapping[str, str | None], auth: tuple[str, ...],
                     env: Mapping[str, str | None]) -> None:
    """Every credential an --http-auth rule or a --credential-env names is defined."""
    from ..proxy import parse_auth_rule

    for rule in auth:
        credential = parse_auth_rule(rule).credential
        if credential not in credentials:
            raise PolicyError("http_auth", f"{rule!r}: no credential {credential!r} "
                              f"(--credential {credential}=env:VAR defines one)")
    for variable, credential in env.items():
        if credential not in credentials:
            raise PolicyError("credential_env", f"{variable}={credential}: no credential "
                              f"{credential!r} (--credential {credential}=env:VAR defines one)")


def check_policy(policy: Policy) -> None:
    """What a policy's credentials refer to, and that its HTTP rules can attach them."""
    check_references(policy.credentials, policy.http_auth, policy.credential_env)
    if policy.http_auth and not (policy.http_allow or policy.http_deny):
        raise PolicyError("http_auth", "attaches a credential to requests the HTTP rules "
                          "let through, and there are none: add --http-allow rules")
    if policy.http_auth and policy.https_inspect == "off":
        raise PolicyError("http_auth", "a credential is added inside HTTPS, which needs "
                          "inspection: --https-inspect off forbids it")


def source_variables(credentials: Mapping[str, str | None]) -> tuple[str, ...]:
    """The variables of sandlock's environment the secrets come from (``env:VAR``)."""
    return _sourced(credentials, ENV)


def source_files(credentials: Mapping[str, str | None]) -> tuple[str, ...]:
    """The files the secrets come from (``file:PATH``)."""
    return _sourced(credentials, FILE)


def _sourced(credentials: Mapping[str, str | None], kind: str) -> tuple[str, ...]:
    return tuple(source[len(kind):] for source in credentials.values()
                 if source is not None and source.startswith(kind))


def read_secrets(credentials: Mapping[str, str | None],
                 environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """NAME -> secret, read once, at launch. A missing or empty source is a PolicyError
    naming the credential and its source (never a value)."""
    secrets = {}
    for credential, source in credentials.items():
        assert source is not None
        secret = _read(credential, source, environ)
        if not secret:
            raise PolicyError("credentials", f"{credential}: {source} is empty")
        if any(c in secret for c in "\r\n\0"):
            raise PolicyError("credentials", f"{credential}: {source} holds a line break or "
                              "NUL, which no header may carry")
        secrets[credential] = secret
    return secrets


def check_sendable(auth: tuple[str, ...], secrets: Mapping[str, str]) -> None:
    """Each rule's header can be made of its secret (basic needs user:password, a
    header value printable text): found at start, not at the first request."""
    from ..proxy import header_value, parse_auth_rule

    for text in auth:
        rule = parse_auth_rule(text)
        try:
            header_value(rule, secrets[rule.credential])
        except ValueError as exc:  # (its message names the credential, never the value)
            raise PolicyError("http_auth", f"{text!r}: {exc}") from None


def placeholder_for(credential: str) -> str:
    """A fresh, meaningless value standing for ``credential`` in the command's
    environment: clients that insist on a key start, and it opens nothing."""
    return f"sandlock-placeholder-{credential}-{os.urandom(16).hex()}"


def _read(credential: str, source: str, environ: Mapping[str, str]) -> str:
    if source.startswith(ENV):
        variable = source[len(ENV):]
        if variable not in environ:
            raise PolicyError("credentials", f"{credential}: {source}: {variable} is not set in "
                              "sandlock's environment")
        return environ[variable]
    path = source[len(FILE):]
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise PolicyError("credentials", f"{credential}: {source}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PolicyError("credentials", f"{credential}: {source}: not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") else text  # (the newline an editor adds)


def _check_name(field: str, credential: str) -> None:
    if not credential or not set(credential) <= _NAME_CHARS:
        raise PolicyError(field, f"{credential!r}: a credential's name is letters, digits, "
                          "'_' and '-'")


def _check_source(field: str, credential: str, source: str) -> None:
    if source.startswith(ENV):
        variable = source[len(ENV):]
        if variable and set(variable) <= _VAR_CHARS and not variable[0].isdigit():
            return
        raise PolicyError(field, f"{credential}: {source!r}: expected env:VARIABLE")
    if source.startswith(FILE):
        path = source[len(FILE):]
        if os.path.isabs(path) and "\0" not in path:
            return
        raise PolicyError(field, f"{credential}: {source!r}: expected file: and an absolute path")
    raise PolicyError(field, f"{credential}: {source!r}: expected env:VAR or file:PATH "
                      "(the secret itself never goes in a policy)")
