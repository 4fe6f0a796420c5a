"""`sandlock learn -o FILE | --merge FILE -- COMMAND`: the command run once under an
observing policy (its network and HTTP calls allowed and recorded in an audit file of
its own), then the rules those records call for written as a policy file."""

from __future__ import annotations

import os
import sys

from .._errors import EXIT_SETUP, PolicyError, fail
from ._main import _command_of, _execute, _option_error, _policy_files, _policy_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace


def learn(args: Namespace) -> int:
    """The command run under the observing policy; the rules its audit records call
    for, added to the base policy and written to -o or the --merge file."""
    import tempfile

    from .._hostfile import Output
    from ..policyfiles import apply_learned, dumps, observing_policy, read_audit
    from ..policyfiles import learn as learned_rules

    if args.collapse < 0:
        fail("--collapse: expected 0 or more")
    if args.merge is not None:  # the file is the base policy, and where the result goes
        args.sources = [("file", args.merge), *args.sources]
        args.output = args.output or args.merge
    elif args.output is None:
        fail("learn: give -o FILE (a new policy) or --merge FILE (add to that policy file)")
    base = _policy_of(args)
    command = _command_of(args)
    try:  # before running, not after; held, so that nothing the command does moves it
        output = Output(args.output)
    except OSError as exc:
        fail(f"--output: cannot write {args.output}: {exc.strerror}")
    with output, tempfile.TemporaryDirectory(prefix="sandlock-learn-") as directory:
        audit = os.path.join(directory, "audit.jsonl")
        # Read back through this descriptor: the records the run appended to this file.
        records = os.open(audit, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(records, encoding="utf-8", errors="surrogateescape") as lines:
            try:
                observing = observing_policy(base)
            except PolicyError as exc:
                fail(_option_error(exc))
            code = _execute(observing, command, audit=audit, quiet=args.quiet,
                            policy_files=_policy_files(args))
            learned = learned_rules(read_audit(lines), args.collapse)
        policy = apply_learned(learned, base)
        # The program's name only: its arguments may carry tokens.
        text = dumps(policy, description=f"learned by sandlock learn from {os.path.basename(command[0])}")
        try:
            output.replace(text.encode("utf-8"))
        except UnicodeEncodeError:
            fail("--output: the policy holds text that is not UTF-8 (from the options given)")
        except OSError as exc:
            fail(f"--output: cannot write {args.output}: {exc.strerror}", EXIT_SETUP)
    if not args.quiet:
        print(f"sandlock: learned {len(learned.net_allow)} network and {len(learned.http_allow)} "
              f"HTTP rules; wrote {args.output}", file=sys.stderr)
    return code
