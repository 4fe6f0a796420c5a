"""sandlock.ray: a pool of Ray actors, each a long-lived sandbox, evaluating items that
attack it, on a local Ray cluster started here once (2 CPUs, no dashboard).

Each attack runs in a real confined clone and is checked against a control that shows
the test could see it succeed (unconfined, or with the grant that allows it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

if os.environ.get("SANDLOCK_REQUIRE_RAY") == "1":  # CI: the extra is installed, these run
    import ray
else:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install '.[ray]'")

import ray_items  # noqa: E402 - the items' functions, by reference in the actors
from conftest import CHECKOUT, PYTHON  # noqa: E402

from sandlock import Policy, SetupError  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
SYSTEM = ("/usr", "/lib", "/lib64", "/bin", "/etc")
CAP = 24  # the pool's process cap (the fork bomb's)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             resources={"sandboxes": 4},  # (for the placement tests: the CPUs are the pool's)
             runtime_env={"env_vars": {"PYTHONPATH": TESTS}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def files():
    with tempfile.TemporaryDirectory(dir="/var/tmp") as granted, \
            tempfile.TemporaryDirectory(dir="/var/tmp") as outside:
        for directory in (granted, outside):
            with open(os.path.join(directory, "secret"), "w") as secret:
                secret.write("key")
        yield granted, outside


@pytest.fixture(scope="module")
def server():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def readable(*extra: str) -> tuple[str, ...]:
    return (*SYSTEM, *PYTHON, CHECKOUT, *extra)


@pytest.fixture(scope="module")
def pool(cluster, files, server):
    from sandlock.ray import SandboxPool

    policy = Policy(fs_readable=readable(files[0]), net_allow=[f"127.0.0.1:{server}"],
                    max_processes=CAP)
    with SandboxPool(policy, ray_items.load, size=2, timeout=20) as pool:
        yield pool


def test_importing_sandlock_ray_imports_no_ray():
    code = "import sys, sandlock.ray; sandlock.ray.SandboxPool; print('ray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_thousand_items_through_two_actors(pool):
    results = list(pool.map(ray_items.square, range(1000)))
    assert [r.value for r in results] == [n * n for n in range(1000)]
    assert {r.reason for r in results} == {"returned"} and all(r.success for r in results)
    unordered = list(pool.map(ray_items.square, range(200), ordered=False))
    assert sorted(r.index for r in unordered) == list(range(200))
    assert all(r.value == r.index ** 2 for r in unordered)


def test_the_clones_hold_no_module_only_the_host_needs(pool):
    """Each item's fork copies the pages of its resident's that it touches, and runs
    the at-fork hooks of the modules there (random's reseeds): 0.1-0.3 ms of CPU an
    item here for the host's tempfile (random, shutil, the compression modules) and
    json. The host loads what only it needs once its sandbox has started, so they are
    not in the resident."""
    for result in pool.on_each(ray_items.modules, None):
        modules = set(result.value)
        assert not modules & {"json", "tempfile", "random", "shutil", "bz2", "lzma"}
        assert {"sandlock.ray._item", "ray.cloudpickle", "pickle"} <= modules  # (the items' own)


def test_items_in_chunks_each_run_in_a_clone_of_their_own(pool):
    """A Ray call carries a chunk of a map's items; each still runs in a clone of its
    own (a count kept in the clone's memory is 1 for every item), in the items' order
    or as they complete, and says how long it took."""
    results = list(pool.map(ray_items.bump, range(60), chunksize=7))
    assert [r.index for r in results] == list(range(60))
    assert {r.value for r in results} == {1} and all(r.seconds > 0 for r in results)
    unordered = list(pool.map(ray_items.square, range(60), chunksize=8, ordered=False))
    assert sorted((r.index, r.value) for r in unordered) == [(n, n * n) for n in range(60)]
    assert ray_items.bump(None) == 1 and ray_items.bump(None) == 2  # (control: one process counts on)
    for wrong in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunksize must be a positive integer"):
            pool.map(ray_items.square, range(3), chunksize=wrong)


def test_submit_gives_an_object_ref_and_work_may_be_a_closure(pool):
    from sandlock.ray import state

    offset = 41
    assert ray.get(pool.submit(lambda n: n + offset, 1)).value == 42
    # A closure travels by value, without init's module globals: state() is what init returned.
    assert ray.get(pool.submit(lambda n: state()["size"] + n, 1)).value == 10_001
    with pytest.raises(RuntimeError, match="not in a SandboxPool's sandbox"):
        state()


def test_attacks_are_each_reported_and_the_other_items_unaffected(pool, files, server):
    granted, outside = files
    attacks = {
        1: ("read", os.path.join(outside, "secret")),
        3: ("fork_bomb", None),
        5: ("allocate", 256),
        7: ("hang", None),
    }
    items = [attacks.get(n, ("square", n)) for n in range(10)]
    results = list(pool.map(ray_items.attempt, items, timeout=3, max_memory="64M"))
    plain = [r for n, r in enumerate(results) if n not in attacks]
    assert [r.value for r in plain] == [n * n for n in range(10) if n not in attacks]
    assert all(r.reason == "returned" and r.limit is None for r in plain)

    secret, bomb, memory, hang = (results[n] for n in attacks)
    assert (secret.reason, secret.error.type) == ("denied", "PermissionError")
    assert bomb.limit == "max_processes" and bomb.value <= CAP  # forks refused past the cap
    assert (memory.reason, memory.limit, memory.error.type) == ("limit", "max_memory", "MemoryError")
    assert (hang.reason, hang.limit, hang.exit_code) == ("timeout", "timeout", 124)

    # Controls: unconfined the secret is readable; within the limits the same items run.
    assert ray_items.read(os.path.join(outside, "secret")) == "key"
    controls = list(pool.map(ray_items.attempt, [("fork_some", 3), ("allocate", 16), ("sleep", 0.1)],
                             timeout=3, max_memory="64M"))
    assert [(c.reason, c.value) for c in controls] == [("returned", 3), ("returned", 16),
                                                       ("returned", 0.1)]


def test_a_narrowed_policy_holds_for_its_item_alone(pool, files, server):
    granted, _ = files
    # neither the granted directory nor the server's port
    narrowed = Policy(fs_readable=readable(), net_allow=[f"127.0.0.1:{server + 1}"])
    secret = os.path.join(granted, "secret")
    read, = pool.map(ray_items.read, [secret], policy=narrowed)
    allowed, = pool.map(ray_items.read, [secret])
    assert (read.reason, read.error.type, allowed.value) == ("denied", "PermissionError", "key")

    refused, = pool.map(ray_items.connect, [server], policy=narrowed)
    reached, = pool.map(ray_items.connect, [server])
    assert reached.value == 0 and reached.denied == ()
    assert (refused.value, refused.reason) == (13, "returned")  # the item took EACCES...
    assert [r["syscall"] for r in refused.denied] == ["connect"]  # ...the audit did not miss it
    chosen = list(pool.map(ray_items.connect, [server, server],
                           policy=lambda port: narrowed if port else None))
    assert [c.value for c in chosen] == [13, 13]


def test_an_item_sandlock_cannot_start_fails_alone(pool):
    """Too large to send to the resident, or a narrowed policy a nested sandbox cannot
    hold (limits are the parent's): that item's error, the next one runs."""
    large, narrowed_limit, after = pool.map(
        ray_items.attempt, [("square", b"x" * (300 << 10)), ("square", 2), ("square", 3)],
        policy=lambda item: Policy(fs_readable=readable(), max_processes=2) if item[1] == 2 else None)
    assert (large.success, large.error.type, after.value) == (False, "ValueError", 9)
    assert "too large" in large.error.message
    assert (narrowed_limit.error.type, narrowed_limit.exit_code) == ("PolicyError", 125)
    assert "max_processes" in narrowed_limit.error.message
    assert (large.seconds, narrowed_limit.seconds) == (0, 0) and after.seconds > 0  # (never started)


def test_an_item_cannot_kill_its_resident_nor_the_other_items(pool):
    """An item that signals its resident (its parent: the actor's, or a nested one's
    under a narrowed policy) or every process it may (kill(-1)) fails alone with
    EPERM (Landlock's signal scope, Linux 6.12): the next items of the chunk run in
    the same sandbox, and the actor does not restart (which would run init again)."""
    [namespace, _] = [r.value for r in pool.on_each(ray_items.namespace, None)]
    sandbox = sandbox_of(namespace)
    narrowed = Policy(fs_readable=readable())
    attacks = [("kill_parent", None), ("kill_all", None), ("kill_child", None), ("square", 3)]
    for policy in (None, narrowed):
        parent, everyone, child, after = pool.map(ray_items.attempt, attacks, policy=policy,
                                                  chunksize=4)
        assert (parent.reason, parent.error.type) == ("denied", "PermissionError"), parent
        assert everyone.reason != "lost", everyone  # (kill(-1) says 0 when all it met said EPERM)
        assert child.value == 9  # (the control: a kill it may send is sent, and works)
        assert (after.reason, after.value) == ("returned", 9)
    assert len(left_of(sandbox)) == len(sandbox)  # every process of the sandbox lives on


def test_a_nested_sandbox_that_ended_is_made_anew_at_its_next_item(pool):
    """A narrowed policy's nested sandbox lives for the actor's next items of that
    policy. Killed (here from outside: its items cannot), the next such item runs in a
    new one, without stalling or restarting the actor."""
    [namespace, _] = [r.value for r in pool.on_each(ray_items.namespace, None)]
    narrowed = Policy(fs_readable=readable())
    [first] = pool.map(ray_items.square, [2], policy=narrowed)  # (a single chunk: actor 0's)
    assert first.value == 4
    processes = set(in_namespace(namespace))
    parent = {pid: int(stat_fields(pid)[1]) for pid in processes}
    # init -> the actor's resident -> nested residents (idle: nothing else runs)
    nested = [pid for pid in processes if parent[pid] in processes and
              parent[parent[pid]] in processes]
    assert nested
    sandbox = sandbox_of(namespace)
    for pid in nested:
        os.kill(pid, signal.SIGKILL)
    assert settled(lambda: all(gone(pid) for pid in nested))
    [after] = pool.map(ray_items.square, [3], policy=narrowed)
    assert (after.reason, after.value) == ("returned", 9)
    assert in_namespace(namespace) and left_of(sandbox)  # (the actor's sandbox lives on)


def test_a_policy_fn_decides_for_every_item(cluster):
    """The pool's policy_fn (a module function, shipped to each node) refuses exec of
    `true`: the item sees EPERM and its denied records say so; `false` (the control)
    runs."""
    from sandlock.ray import SandboxPool

    with SandboxPool(Policy(fs_readable=readable()), size=1, num_cpus=0,
                     policy_fn=ray_items.no_true) as pool:
        refused, control = pool.map(ray_items.run_program, ["true", "false"])
    assert (refused.value, refused.reason) == ("PermissionError", "returned")
    assert [(r["event"], r["verdict"]) for r in refused.denied] == [("policy_fn", "deny")]
    assert (control.value, control.denied) == (1, ())


def test_output_past_the_items_limit_is_cut(pool):
    shouted, = pool.map(ray_items.shout, [5000], max_output=100)
    assert (shouted.value, len(shouted.stdout), shouted.limit) == (5000, 100, "max_output")


def test_placement_per_node_by_resources_and_in_a_placement_group(cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    from sandlock.ray import SandboxPool

    policy = Policy(fs_readable=readable())
    alive = [node for node in ray.nodes() if node["Alive"]]
    with SandboxPool(policy, per_node=2, num_cpus=0) as pool:
        assert len(pool.actors) == 2 * len(alive)
        assert [r.value for r in pool.on_each(ray_items.square, 4)] == [16] * len(pool.actors)
    with SandboxPool(policy, size=2, num_cpus=0, resources={"sandboxes": 2}) as pool:
        assert ray.available_resources().get("sandboxes", 0) == 0  # both actors hold theirs
        assert [r.value for r in pool.map(ray_items.square, [2, 3])] == [4, 9]
    group = placement_group([{"sandboxes": 1}, {"sandboxes": 1}])
    ray.get(group.ready())
    try:
        with SandboxPool(policy, size=2, num_cpus=0, resources={"sandboxes": 1},
                         placement_group=group) as pool:
            assert [r.value for r in pool.on_each(ray_items.square, 5)] == [25, 25]
    finally:
        remove_placement_group(group)


def test_an_item_past_the_sandboxs_memory_limit_fails_alone(cluster):
    """The policy's max_memory kills the whole sandbox (resident included): the item
    is reported, and the actor starts a new sandbox (init again) for the next ones."""
    from sandlock.ray import SandboxPool

    policy = Policy(fs_readable=readable(), max_memory="96M")
    with SandboxPool(policy, ray_items.load, size=1, num_cpus=0) as pool:
        big, small, after = pool.map(ray_items.allocate, [400, 8, 8])
        again = pool.on_each(ray_items.square, 3)[0]
    assert (big.reason, big.limit, big.exit_code) == ("limit", "max_memory", 137)
    assert (small.value, after.value, again.value) == (8, 8, 9)  # (9: init ran again)


def in_namespace(namespace: str) -> list[int]:
    """Host pids of the live processes in PID namespace ``namespace`` now. Not zombies:
    a dead process whose parent died is reparented, and this machine's pid 1 (not an
    init) may leave it unreaped for long; it runs nothing."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace and not gone(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def sandbox_of(namespace: str) -> set[tuple[int, str]]:
    """The processes of the sandbox living in ``namespace`` now, each as (pid, start
    time): an identity the kernel does not hand out again. A namespace's own name does
    not do: the inode number of one freed is given to the next (a restarted actor's
    sandbox was taken for the dead one's)."""
    return {(pid, started(pid)) for pid in in_namespace(namespace)}


def left_of(sandbox: set[tuple[int, str]]) -> list[str]:
    """What is still running of ``sandbox``: each process's pid, state and parent. Its
    init among them or not: when init goes, the kernel ends the rest."""
    left = []
    for pid, start in sandbox:
        fields = stat_fields(pid)
        if start and fields and fields[0] != "Z" and fields[19] == start:
            left.append(f"{pid} {fields[0]} {fields[1]}")
    return left


def started(pid: int) -> str:
    """Its start time, in clock ticks since boot (stat's 22nd field)."""
    fields = stat_fields(pid)
    return fields[19] if fields else ""


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the name (a name may hold spaces): state, parent,
    ...; empty if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return []


def settled(condition, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie its parent has yet to reap."""
    fields = stat_fields(pid)
    return not fields or fields[0] == "Z"


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listed:
            found += [int(child) for child in listed.read().split()]
    return found


def test_an_actor_killed_mid_map_is_restarted_and_its_items_retried(pool):
    """One actor's process is killed (as a dead worker's would be), and the other's
    sandbox host (the process holding its sandbox: as if the sandbox died of no
    limit). Both actors are restarted by Ray, their items retried: the map completes,
    and nothing of the first actor's sandbox is left."""
    namespaces = [r.value for r in pool.on_each(ray_items.namespace, None)]
    sandboxes = [sandbox_of(ns) for ns in namespaces]
    assert all(left_of(sandbox) for sandbox in sandboxes)  # (the check sees a live sandbox)
    victim = pool.nodes[0][1]
    [host] = children(victim)
    [other_host] = children(pool.nodes[1][1])
    results = []
    for result in pool.map(ray_items.sleep, [0.01] * 300, ordered=False):
        results.append(result)
        if len(results) == 40:
            os.kill(victim, signal.SIGKILL)
        if len(results) == 150:
            os.kill(other_host, signal.SIGKILL)
    assert sorted(r.index for r in results) == list(range(300))
    assert all(r.success for r in results), [r for r in results if not r.success][:3]
    assert settled(lambda: not left_of(sandboxes[0]) and gone(host)), left_of(sandboxes[0])
    assert settled(lambda: not left_of(sandboxes[1])), left_of(sandboxes[1])
    assert all(in_namespace(r.value) for r in pool.on_each(ray_items.namespace, None))  # new ones

    # A host that dies while its actor waits for the next item: the item is retried.
    pool.nodes = ray.get([actor.ready.remote() for actor in pool.actors])  # (the new pids)
    [idle_host] = children(pool.nodes[0][1])
    os.kill(idle_host, signal.SIGKILL)
    assert settled(lambda: gone(idle_host))
    assert [r.value for r in pool.on_each(ray_items.square, 7)] == [49, 49]
    pool.nodes = ray.get([actor.ready.remote() for actor in pool.actors])


def test_shutdown_leaves_no_process_behind(cluster):
    from sandlock.ray import SandboxPool

    pool = SandboxPool(Policy(fs_readable=readable()), size=1, num_cpus=0)  # (the module's pool holds the CPUs)
    [namespace] = [r.value for r in pool.on_each(ray_items.namespace, None)]
    _node, actor = pool.nodes[0]
    pool.submit(ray_items.hang, None)  # still running at the shutdown
    time.sleep(0.5)
    sandbox = sandbox_of(namespace)
    assert left_of(sandbox)
    pool.shutdown()
    assert settled(lambda: not left_of(sandbox) and not os.path.exists(f"/proc/{actor}"))


def test_a_shutdown_in_the_middle_of_a_chunk_answers_each_of_its_items(cluster):
    """A chunk of three items goes to the host in one frame, and its results come
    back in one. The pool shuts down while the second item hangs: the first keeps
    its value, the second is reported killed, and the third, never started, too."""
    from sandlock.ray import SandboxPool
    from sandlock.ray._pool import _payload

    pool = SandboxPool(Policy(fs_readable=readable()), size=1, num_cpus=0)
    try:
        [actor] = pool.actors
        works = [(ray_items.square, 3), (ray_items.hang, None), (ray_items.square, 4)]
        entries = [pool._entry(n, _payload(work, item), None, pool._limits({}))
                   for n, (work, item) in enumerate(works)]
        ref = actor.run_many.remote(entries)
        time.sleep(1)  # (the hang is running by then, or about to)
        ray.get(actor.close.options(concurrency_group="control").remote(), timeout=60)
        first, hung, never = ray.get(ref, timeout=60)
    finally:
        pool.shutdown()
    assert (first.index, first.value, first.reason) == (0, 9, "returned")
    assert (hung.index, hung.success, hung.reason) == (1, False, "killed")
    assert (never.index, never.success, never.reason) == (2, False, "killed")
    assert never.seconds == 0


def test_a_policy_the_node_cannot_enforce_fails_the_start(cluster, tmp_path):
    """A profile is loaded on each node (its own file there): this node's asks for a
    CPU the node does not have. The pool's start fails with the node's reason."""
    from sandlock.ray import SandboxPool

    profiles = tmp_path / "sandlock" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "eval.toml").write_text("cpu_cores = [64]\n")
    (profiles / "fine.toml").write_text("cpu_cores = [0]\n")
    node = {"runtime_env": {"env_vars": {"XDG_CONFIG_HOME": str(tmp_path), "PYTHONPATH": TESTS}}}
    with pytest.raises(SetupError, match="cpu_cores: CPU 64 is not one sandlock may run on"):
        SandboxPool("eval", size=1, num_cpus=0, ray_options=node)
    with SandboxPool("fine", size=1, num_cpus=0, ray_options=node) as pool:  # the control
        assert pool.on_each(ray_items.square, 3)[0].value == 9
