"""``sandlock ca``: create, show, export, install and uninstall the persistent CA.

Imported only for ``sandlock ca ...`` (cli._main hands the arguments over
before building its own parser). Errors: one line ``sandlock: error: ...``; exit 2
for bad arguments, 1 when the CA cannot be created, read, exported or installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from .._errors import EXIT_USAGE, fail
from ..ca import (
    CERT_FILE,
    KEY_FILE,
    CAError,
    CertificateAuthority,
    ca_directory,
    init_persistent,
    install,
    installed,
    load_persistent,
    uninstall,
    when,
)
from ._parser import Parser

EXIT_FAILURE = 1


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sandlock ca",
        description="Manage sandlock's persistent CA: one CA for every run, trusted once. "
        "Without it, each run with HTTP rules makes its own name-constrained CA in memory.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    init = actions.add_parser("init", help="create the persistent CA (10 years, EC P-256)")
    init.add_argument("--force", action="store_true", help="replace an existing CA")
    actions.add_parser("show", help="subject, fingerprint, validity, files and where it is installed")
    export = actions.add_parser("export", help="write the CA certificate (never the key)")
    export.add_argument("--der", action="store_true", help="DER instead of PEM")
    export.add_argument("path", nargs="?", metavar="PATH", help="file to write (default: stdout)")
    install = actions.add_parser("install", help="add the CA to trust stores (default: --system)")
    for target, what in (("system", "the distribution's store (needs root)"),
                         ("nss", "Chromium's and Firefox's NSS databases (needs certutil)"),
                         ("java", "the JRE's cacerts (needs keytool; root for a system JRE)")):
        install.add_argument(f"--{target}", dest="targets", action="append_const", const=target,
                             help=what)
    actions.add_parser("uninstall", help="remove the CA from every store install put it in")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _HANDLERS.get(args.action)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return handler(args)
    except CAError as exc:
        fail(f"ca {args.action}: {exc}", EXIT_FAILURE)
    except BrokenPipeError:  # `sandlock ca show | head -1`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return EXIT_FAILURE
    return EXIT_FAILURE  # not reached: fail exits


def _init(args: argparse.Namespace) -> int:
    ca = init_persistent(force=args.force)
    directory = ca_directory()
    print(f"created a CA in {directory}")
    print(f"  fingerprint  SHA-256 {ca.fingerprint}")
    print(f"  valid until  {when(ca.not_after)}")
    print("`sandlock ca install` adds it to the system trust store.")
    return 0


def _show(args: argparse.Namespace) -> int:
    ca = _require()
    directory = ca_directory()
    days = (ca.not_after - datetime.now(UTC)).days
    rows = [
        ("subject", ca.subject),
        ("fingerprint", f"SHA-256 {ca.fingerprint}"),
        ("valid", f"{when(ca.not_before)} to {when(ca.not_after)} ({days} days left)"),
        ("certificate", str(directory / CERT_FILE)),
        ("key", f"{directory / KEY_FILE} (mode 0600, denied to every sandbox)"),
    ]
    places = [entry.describe() for entry in installed()]
    rows += [("installed", place) for place in places] or [("installed", "nowhere")]
    print(f"sandlock CA in {directory}")
    for index, (label, value) in enumerate(rows):
        shown = "" if index and rows[index - 1][0] == label else label
        print(f"  {shown:<12} {value}")
    return 0


def _export(args: argparse.Namespace) -> int:
    ca = _require()
    data = ca.cert_der() if args.der else ca.cert_pem
    if args.path is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return 0
    from .._hostfile import UnsafeOutput, write_file

    try:  # replaced, never written through a link (a command may have left one there)
        write_file(args.path, data)
    except UnsafeOutput as exc:
        fail(f"ca export: cannot write {args.path}: {exc.strerror}")
    except OSError as exc:
        raise CAError(f"cannot write {args.path}: {exc.strerror}") from None
    print(f"wrote the CA certificate ({'DER' if args.der else 'PEM'}) to {args.path}", file=sys.stderr)
    return 0


def _install_action(args: argparse.Namespace) -> int:
    _require()
    done = install(ca_directory() / CERT_FILE, args.targets or ["system"])
    for entry in done:
        print(f"installed in {entry.describe()}")
    return 0


def _uninstall(args: argparse.Namespace) -> int:
    removed = uninstall()
    for entry in removed:
        print(f"removed from {entry.describe()}")
    if not removed:
        print("the CA is not installed anywhere sandlock knows of")
    return 0


def _require() -> CertificateAuthority:
    ca = load_persistent()
    if ca is None:
        raise CAError(f"no CA in {ca_directory()} (create one with `sandlock ca init`)")
    return ca


_HANDLERS: dict[str | None, Callable[[argparse.Namespace], int]] = {
    "init": _init,
    "show": _show,
    "export": _export,
    "install": _install_action,
    "uninstall": _uninstall,
}
