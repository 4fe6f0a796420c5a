"""The proxy's CA: which one (ephemeral, persistent or the user's), made or loaded in
this process only, and the command's trust bundle written from it.

Runs first thing in the proxy process, while the command is held before exec: the
command must find its trust bundle complete the moment it starts.
"""

from __future__ import annotations

from .._record import record
from ._protocol import ProxyConfig


@record
class Authority:
    mitmproxy_pem: bytes | None  # key PEM + certificate PEM; None: no inspection
    error: str | None = None


def prepare(config: ProxyConfig) -> Authority:
    if not config.ca:
        return Authority(None)
    if config.ca.get("source") == "inherited":  # a replacement proxy: the run's CA, its
        return Authority(config.ca["pem"].encode())  # trust bundle written already
    try:
        from sandlock import ca

        authority = _load(ca, config.ca)
        ca.write_trust_files(authority.cert_pem, config.run_dir,
                             certificate_out=config.ca.get("out"), clients=config.ca.get("clients"))
        return Authority(authority.mitmproxy_pem())
    except Exception as exc:  # noqa: BLE001 - reported to sandlock, which fails the run
        return Authority(None, f"sandbox CA: {exc}")


def _load(ca, settings: dict):
    source = settings["source"]
    if source == "user":
        return ca.load_user_ca(settings["cert"], settings["key"])
    if source == "persistent":
        found = ca.load_persistent()
        if found is not None:
            return found
    return ca.ephemeral_ca(settings["hosts"])
