"""Certificates in PEM text, without cryptography (~40 ms to import) or re: what the
trust files are made of.

``certificates`` keeps only well-formed ``CERTIFICATE`` blocks of a text: sandlock
copies certificates out of files a configuration names (``_clientcas``), and a name
could point at anything the user can read (a key, a token file); a certificate is
public by nature, nothing else is copied.
"""

from __future__ import annotations

BEGIN = b"-----BEGIN CERTIFICATE-----"
END = b"-----END CERTIFICATE-----"
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_LINE = 64


def certificates(text: bytes) -> list[bytes]:
    """The base64 body of each ``CERTIFICATE`` block of ``text``, whitespace removed;
    a block with anything else between its lines is skipped."""
    found = []
    at = 0
    while (start := text.find(BEGIN, at)) >= 0:
        end = text.find(END, start)
        if end < 0:
            break
        body = b"".join(text[start + len(BEGIN):end].split())
        if body and not body.translate(None, _BASE64):  # (in C: a bundle has 150 blocks)
            found.append(body)
        at = end + len(END)
    return found


def pem(bodies: list[bytes]) -> bytes:
    """Bodies as PEM blocks, lines of 64 characters."""
    blocks = []
    for body in bodies:
        lines = [body[at:at + _LINE] for at in range(0, len(body), _LINE)]
        blocks.append(b"\n".join([BEGIN, *lines, END, b""]))
    return b"".join(blocks)


def new_certificates(bodies: list[bytes], known: set[bytes]) -> list[bytes]:
    """``bodies`` without the ``known`` ones (a bundle's), nor repeats."""
    seen = set(known)
    fresh = []
    for body in bodies:
        if body not in seen:
            seen.add(body)
            fresh.append(body)
    return fresh
