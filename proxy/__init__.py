"""HTTP(S) filtering proxy (embedded mitmproxy addon).

Installed as ``sandlock.proxy``. Built by the HTTP proxy issue; nothing here is
imported by a run without HTTP rules.
"""
