"""Sandbox certificate authority (generation, trust injection, install helper).

Installed as ``sandlock.ca``. Built by the sandbox CA issue.
"""
