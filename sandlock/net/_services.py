"""What the network supervisor needs from the run around it: the interface the engine
(``_engine.Network``) implements, so that the supervisor never reaches into it."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netcall import ConfinedWorker, InetAddress, Outcome, PathBind, Request, SockAddress, Socket, UnixAddress
    from ..netrules import NetPolicy
    from ._judge import Decision


class Services:
    """What the supervisor needs from the run around it (_engine.Network provides it)."""

    def wait_for_pins(self) -> None:
        """Return once start-up pinning is over (IP destinations can be judged)."""
        raise NotImplementedError

    def dns_responder(self, protocol: str, family: int) -> InetAddress | None:
        """The responder's address for ``protocol`` on a socket of ``family``, started
        on first use; None if it could not start."""
        raise NotImplementedError

    def confined_worker(self) -> ConfinedWorker:
        """The thread running filesystem-bound operations under the command's rules."""
        raise NotImplementedError

    def bind_path(self, sock: int, bind: PathBind, rulesets: tuple[int, ...]) -> int:
        """Bind ``sock`` (sandlock's duplicate) as ``bind`` says, as the command would,
        under the nested ``rulesets`` too (``_binder``); the errno (0: bound)."""
        raise NotImplementedError

    def proxy_target(self, sock: Socket, destination: InetAddress, pid: int,
                     nested: tuple[NetPolicy, ...] = ()) -> InetAddress | int:
        """Route ``sock`` (meant for ``destination``) through the HTTP proxy: the
        proxy's address to connect to instead, or an errno."""
        raise NotImplementedError

    def nesting_target(self) -> UnixAddress | int:
        """Where a run inside the sandbox registers its network rules (``_nesting``),
        started on first use; or an errno."""
        raise NotImplementedError

    def park(self, request: Request, decision: Decision,
             record: Callable[[Request, SockAddress, Decision], None]) -> Outcome:
        """Connect ``request``'s UDP socket to sandlock's sink instead of the destination
        its ``decision`` (``_judge.park``) denies; ``record`` is told the denial when the
        socket's first datagram arrives there (or now, if the sink cannot take it)."""
        raise NotImplementedError
