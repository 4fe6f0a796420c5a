"""``sandlock image pull REF`` and ``sandlock image ls``: the images pulled from
registries into the per-user store (docs/usage.md, "A registry's image").

A run pulls a reference once and then uses the store's copy; ``image pull`` resolves
the tag anew and replaces that copy. Imported only for ``sandlock image ...``
(cli._main hands the arguments over before building its own parser). Errors: one
line, exit 2.
"""

from __future__ import annotations

import os
import sys

from .._errors import EXIT_USAGE, PolicyError, fail
from ._parser import Parser

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def build_parser() -> Parser:
    parser = Parser(prog="sandlock image",
                    description="Images pulled from registries for --image, in your store.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    pull = actions.add_parser("pull", help="pull REF now, its tag resolved anew (a run pulls "
                              "a reference only when the store has none)")
    pull.add_argument("reference", metavar="REF", help="alpine, HOST[:PORT]/REPO:TAG, ...@sha256:HEX")
    pull.add_argument("--dns-server", dest="dns_servers", action="append", default=[],
                      metavar="ADDR[:PORT]", help="resolve the registry's names here (as run's)")
    pull.add_argument("--resolve", action="append", default=[], metavar="HOST=ADDR",
                      help="the registry's address, without DNS (as run's)")
    actions.add_parser("ls", help="the images pulled, with their manifests' digests")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.action is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from ..confinement import image_store
    from ..image import ImageError

    store = image_store(os.environ, os.path.expanduser("~"))
    try:
        if args.action == "pull":
            return _pull(args.reference, store, args.dns_servers, args.resolve)
        from ..image import pulled_images

        for reference, digest in pulled_images(store):
            print(f"{reference}  {digest}")
    except ImageError as exc:
        fail(f"image {args.action}: {exc}")
    except OSError as exc:
        fail(f"image {args.action}: {exc.filename or store}: {exc.strerror or exc}")
    return 0


def _pull(reference: str, store: str, dns_servers: list[str], resolve: list[str]) -> int:
    from ..dns import own_resolver
    from ..image import pull_again
    from ..policy import Policy, flag_of

    try:
        policy = Policy(image=reference, dns_servers=tuple(dns_servers), resolve=tuple(resolve))
    except PolicyError as exc:  # (REF is this command's, the others as run's options)
        fail(f"{'image pull' if exc.field == 'image' else flag_of(exc.field)}: {exc.message}")
    digest = pull_again(reference, store, own_resolver(policy))
    print(f"{policy.image}  {digest}")
    return 0
