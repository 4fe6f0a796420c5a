"""`sandlock profile list|show|validate` and `sandlock policy test`: policies read,
shown, checked and tested, without running anything."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .._errors import EXIT_USAGE, SandlockError, error_line, visible
from ..policy import Policy
from ..policyfiles import (
    PolicyFile,
    load_policy_file,
    merge,
    profile_names,
    profile_path,
    profiles_directory,
)


def profile_list() -> int:
    """One line per profile: its name and description (or why it cannot be used)."""
    names = profile_names()  # the built-in ones too
    if not profile_names(profiles_directory()):
        print(f"sandlock: no profiles in {profiles_directory()} (the built-in ones only)",
              file=sys.stderr)
    width = max(map(len, names), default=0)
    for name in names:
        try:
            about = _load_whole(profile_path(name)).description or ""
        except SandlockError as exc:
            about = f"(invalid: {exc})"
        print(visible(f"{name:<{width}}  {about}".rstrip()))  # (a description is a file's text)
    return 0


def profile_show(name: str) -> int:
    """The profile's file as written, after a line saying where it is; it must load."""
    try:
        path = profile_path(name)
        loaded = _load_whole(path)
    except SandlockError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return exc.exit_code
    sys.stdout.write(f"# {path}\n{loaded.text}")
    return 0


def profile_validate(paths: Sequence[str]) -> int:
    """Each file checked as a whole policy of its own; every error is reported."""
    status = 0
    for path in paths:
        try:
            _load_whole(path)
        except SandlockError as exc:
            print(error_line(str(exc)), file=sys.stderr)
            status = EXIT_USAGE
        else:
            print(f"{path}: ok")
    return status


def _load_whole(path: str) -> PolicyFile:
    """A file that must make a valid Policy on its own."""
    loaded = load_policy_file(path)
    merge([loaded.settings])
    return loaded


def policy_test(policy: Policy, requests: Sequence[str], endpoints: Sequence[str]) -> int:
    """One line per request, then per endpoint: exit 0 if all are allowed, else 1."""
    from ..policyfiles import PolicyTester, parse_endpoint, parse_request

    probes = []
    for texts, parse in ((requests, parse_request), (endpoints, parse_endpoint)):
        for text in texts:
            try:
                probes.append(parse(text))
            except ValueError as exc:
                print(error_line(f"{text!r}: {exc}"), file=sys.stderr)
                return EXIT_USAGE
    if not probes:
        print(error_line("policy test: nothing to test: give requests ('GET https://...') "
                         "or --net ENDPOINT"), file=sys.stderr)
        return EXIT_USAGE
    tester = PolicyTester(policy)
    outcomes = [tester.test(probe) for probe in probes]
    for probe, outcome in zip(probes, outcomes):
        print(outcome.line(probe))
    return 0 if all(outcome.allowed for outcome in outcomes) else 1
