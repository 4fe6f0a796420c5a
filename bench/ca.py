#!/usr/bin/env python3
"""What a run with HTTP rules pays for its ephemeral CA.

Usage: python bench/ca.py [--runs N]

Each run is a fresh interpreter (so imports are paid as a run pays them) that times,
in order: importing sandlock, then the CA code (cryptography), generating the name-constrained CA,
writing the trust files (bundle of the system store + CA, wgetrc), finding the CA
settings of the clients' own configurations (npm, pip, git, curl, cargo: as this user's
environment and this directory show them; e.g. `npm_config_userconfig=corp.npmrc` to
time a corporate CA), importing mitmproxy's CertStore, minting the first leaf, and
minting a second one (the steady cost per new host name). Prints a Markdown table of
medians for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PHASES = r"""
import json, sys, tempfile, time
t = [time.perf_counter()]
import sandlock
t.append(time.perf_counter())
from sandlock.ca import _generate, _trust
t.append(time.perf_counter())
authority = _generate.ephemeral_ca(["api.github.com", "*.pypi.org", "10.0.0.1"])
t.append(time.perf_counter())
with tempfile.TemporaryDirectory() as run:
    _trust.prepare_trust(authority, run)
    t.append(time.perf_counter())
import os
import sandlock.autorun._autorun  # (a run has imported it before: not this phase's)
t.append(time.perf_counter())
with tempfile.TemporaryDirectory() as run:  # what an inspecting run wrote before
    _trust.write_trust_files(authority.cert_pem, run)
    t.append(time.perf_counter())
with tempfile.TemporaryDirectory() as run:  # what it does now: find, then write
    from sandlock.ca import _clientcas
    clients = _clientcas.client_certificates(os.environ, os.getcwd(), _trust._system_bundle(os.environ))
    _trust.write_trust_files(authority.cert_pem, run, clients=clients)
    t.append(time.perf_counter())
from cryptography import x509
from mitmproxy.certs import Cert, CertStore
t.append(time.perf_counter())
store = CertStore(authority.private_key, Cert(authority.certificate), None, None)
store.get_cert("api.github.com", [x509.DNSName("api.github.com")])
t.append(time.perf_counter())
store.get_cert("files.pypi.org", [x509.DNSName("files.pypi.org")])
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""

NAMES = [
    "import sandlock (already paid by every run)",
    "import the CA code (cryptography)",
    "generate the ephemeral CA (EC P-256, name-constrained)",
    "write the trust files (bundle, CA, wgetrc)",
    "",  # (an import a run has made before)
    "write the run's trust files (as `sandlock run` did before clients' own CAs)",
    "find the clients' own CA settings, write the trust files with them (as it does now)",
    "import mitmproxy.certs (the proxy imports it anyway)",
    "mint the first leaf (mitmproxy CertStore)",
    "mint another leaf",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    samples: list[list[float]] = []
    for _ in range(args.runs + 1):  # the first one warms the page cache
        out = subprocess.run([sys.executable, "-c", PHASES], capture_output=True, text=True,
                             check=True).stdout
        samples.append(json.loads(out))
    samples = samples[1:]
    print(f"{args.runs} fresh interpreters, {os.cpu_count()} CPUs, Linux {os.uname().release}\n")
    print("| phase | median |")
    print("| --- | --- |")
    for index, name in enumerate(NAMES):
        if name:
            print(f"| {name} | {statistics.median(s[index] for s in samples) * 1e3:.2f} ms |")
    own = [s[2] + s[3] + s[8] for s in samples]
    print(f"| **CA + trust files + first leaf** (imports excluded) | "
          f"**{statistics.median(own) * 1e3:.2f} ms** |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
