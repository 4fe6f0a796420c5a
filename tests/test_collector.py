"""Python's cyclic garbage collector in confined Python code is the caller's: on in init,
in calls and in clones when it is on in the embedding program (sandlock's own forked
copies run without it), off when the program turned it off. Before, every init, call
and clone ran without it: a function that made reference cycles grew until its memory
limit killed it. The caller's objects, and what init built, are frozen out of later
collections, so that a call or clone that collects copies none of their pages. Real
confined processes throughout."""

from __future__ import annotations

import gc
import resource
import subprocess
import sys

import pytest

from conftest import users
from sandlock import Policy, Sandbox


def collector_state() -> tuple[bool, bool]:
    """(collecting, whatever init saw) in the process that runs it."""
    import builtins

    return gc.isenabled(), getattr(builtins, "INIT_COLLECTING", None)


def note_init_state() -> None:
    import builtins

    builtins.INIT_COLLECTING = gc.isenabled()


def clone_state() -> bool:
    return gc.isenabled()


@pytest.fixture
def collector_off():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_init_calls_and_clones_collect_as_the_caller_does():
    assert gc.isenabled()
    assert Sandbox(Policy()).call(collector_state).value == (True, None)
    with Sandbox(Policy(), note_init_state) as sandbox:
        assert sandbox.call(collector_state).value == (True, True)
    clones = Sandbox(Policy(), note_init_state, clone_state).fork(2)
    assert [clone.value for clone in clones] == [True, True]


def test_a_caller_without_collection_gets_none(collector_off):
    """The control: the state is the caller's, not always on."""
    assert Sandbox(Policy()).call(collector_state).value == (False, None)
    with Sandbox(Policy(), note_init_state) as sandbox:
        assert sandbox.call(collector_state).value == (False, False)


# In an interpreter of its own: the sandbox's memory counts its resident's share of the
# caller's pages, and a pytest worker that ran other modules first may hold many more.
CYCLES = r"""
import gc, sys
from sandlock import Policy, Sandbox

def cycles(disable):
    # ~400 MB of garbage in reference cycles, 2 MB at a time (each with the small
    # objects whose count starts a collection).
    if disable:
        gc.disable()
    for _ in range(200):
        node = {"block": bytearray(2 << 20), "parts": [[] for _ in range(50)]}
        node["self"] = node
    return "done"

with Sandbox(Policy(max_memory="128M")) as sandbox:
    result = sandbox.call(cycles, (sys.argv[1] == "uncollected",))
print(result.value, result.exit_code, flush=True)
"""


@users
@pytest.mark.parametrize("collected", [True, False])
def test_a_call_that_makes_reference_cycles_stays_under_its_memory_limit(
        world_tmp, collected, as_nobody_or_self):
    """The control (uncollected): the same call without collection is killed at the
    limit. As the test's user and as uid 65534."""
    wrap = as_nobody_or_self or (lambda argv: argv)
    argv = [sys.executable, "-c", CYCLES, "collected" if collected else "uncollected"]
    run = subprocess.run(wrap(argv), capture_output=True, text=True, timeout=120,
                         cwd=world_tmp)
    if collected:
        assert run.stdout.split() == ["done", "0"], run.stderr
        assert "memory limit" not in run.stderr
    else:
        assert run.stdout.split() == ["None", "137"], run.stderr
        assert "memory limit 128M exceeded" in run.stderr


LOADED: list = []


def load() -> None:
    """init: ~200,000 objects a collection would visit (~20 MB of them)."""
    LOADED.extend([index, str(index)] for index in range(200_000))


def faults_of_a_full_collection(unfreeze: bool) -> int:
    if unfreeze:
        gc.unfreeze()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    gc.collect()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_clone_that_collects_copies_none_of_inits_pages():
    with Sandbox(Policy(), load) as sandbox:
        frozen = sandbox.call(faults_of_a_full_collection, (False,)).value
        # The control: the same objects back in the collector's reach are each visited,
        # and every page that holds one is copied.
        unfrozen = sandbox.call(faults_of_a_full_collection, (True,)).value
    assert frozen < 500 < 2000 < unfrozen, (frozen, unfrozen)


def test_a_call_that_collects_copies_none_of_its_callers_pages():
    load()
    try:
        sandbox = Sandbox(Policy())
        frozen = sandbox.call(faults_of_a_full_collection, (False,)).value
        unfrozen = sandbox.call(faults_of_a_full_collection, (True,)).value  # the control
    finally:
        LOADED.clear()
    assert frozen < 500 < 2000 < unfrozen, (frozen, unfrozen)
