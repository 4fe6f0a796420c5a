"""Sandbox certificate authority: generation, trust injection, install helper.

Installed as ``sandlock.ca``. A run without HTTP rules never imports it, and importing
it costs nothing until a name is used: each public name below is loaded from its
private module on first access (cryptography alone takes ~40 ms to import).

    from sandlock import ca

    authority = ca.ephemeral_ca(["api.github.com", "*.pypi.org"])  # per run, in memory
    authority = ca.load_persistent() or authority                   # `sandlock ca init`
    authority = ca.load_user_ca("ca.pem", "key.pem")                 # --http-ca/--http-key
    trust = ca.prepare_trust(authority, run_directory)               # bundle + env vars
    child_env.update(trust.env)
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the CLI's start-up path
if TYPE_CHECKING:
    from ._authority import CertificateAuthority
    from ._cache import cached_ca, private_directory
    from ._clientcas import client_certificates
    from ._errors import CAError, NeedsPrivilege
    from ._generate import EPHEMERAL_LIFETIME, PERSISTENT_LIFETIME, ephemeral_ca, server_certificate
    from ._install import TARGETS, install, installed, uninstall
    from ._load import load_user_ca
    from ._store import ca_directory, init_persistent, load_persistent
    from ._trust import (
        TRUST_VARIABLES,
        TrustInjection,
        TrustVariable,
        prepare_trust,
        system_bundle,
        trust_environment,
        write_trust_files,
    )
    from ._truststores import Installation

# public name -> the private module defining it
_EXPORTS = {
    "CertificateAuthority": "_authority",
    "CAError": "_errors",
    "NeedsPrivilege": "_errors",
    "EPHEMERAL_LIFETIME": "_generate",
    "PERSISTENT_LIFETIME": "_generate",
    "ephemeral_ca": "_generate",
    "server_certificate": "_generate",
    "TARGETS": "_install",
    "Installation": "_truststores",
    "install": "_install",
    "installed": "_install",
    "uninstall": "_install",
    "load_user_ca": "_load",
    "ca_directory": "_store",
    "init_persistent": "_store",
    "load_persistent": "_store",
    "TRUST_VARIABLES": "_trust",
    "TrustInjection": "_trust",
    "TrustVariable": "_trust",
    "prepare_trust": "_trust",
    "system_bundle": "_trust",
    "trust_environment": "_trust",
}
# Used by sandlock's CLI (`sandlock ca`) and runs; not public API.
_EXPORTS.update({
    "cached_ca": "_cache",
    "private_directory": "_cache",
    "write_trust_files": "_trust",
    "bundle_base": "_trust:_system_bundle",
    "client_certificates": "_clientcas",
    "CERT_FILE": "_store",
    "KEY_FILE": "_store",
    "when": "_authority",
})

__all__ = [
    "EPHEMERAL_LIFETIME",
    "PERSISTENT_LIFETIME",
    "TARGETS",
    "TRUST_VARIABLES",
    "CAError",
    "CertificateAuthority",
    "Installation",
    "NeedsPrivilege",
    "TrustInjection",
    "TrustVariable",
    "ca_directory",
    "ephemeral_ca",
    "init_persistent",
    "install",
    "installed",
    "load_persistent",
    "load_user_ca",
    "prepare_trust",
    "server_certificate",
    "system_bundle",
    "trust_environment",
    "uninstall",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
