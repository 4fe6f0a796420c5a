"""A running sandbox's limits changed (``sb.update(max_memory="128M")``): which ones
may change, and to what. Pure: the values are checked here, applied by the run's
watches and process cap.

A limit may be tightened, or loosened back up to the value the sandbox started with,
never past it: the policy a sandbox was started under is the most it may ever have.
A limit it started without has no mechanism running (no memory watch, no process
gate, no throttle) and cannot be added live.
"""

from __future__ import annotations

UPDATABLE = ("max_memory", "max_processes", "max_cpu")


def checked_updates(started: object, changes: dict[str, object]) -> dict[str, object]:
    """``changes`` as values the Policy ``started`` would hold (its own checks), each
    within what it started with; TypeError for another name, ValueError past it."""
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise TypeError(f"update() takes {', '.join(UPDATABLE)}, not {', '.join(unknown)}")
    checked = started.replace(**changes)  # type: ignore[attr-defined]  # PolicyError if invalid
    updates = {}
    for name in changes:
        initial, wanted = getattr(started, name), getattr(checked, name)
        if not initial:
            raise ValueError(f"{name}: the sandbox was started without it, so nothing holds "
                             f"it now; give it in the Policy to adjust it while it runs")
        if wanted > initial:
            raise ValueError(f"{name}: {wanted} is more than the {initial} the sandbox was "
                             f"started with (a running sandbox may be loosened up to that, "
                             f"never past it)")
        updates[name] = wanted
    return updates
