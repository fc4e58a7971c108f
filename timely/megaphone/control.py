"""Control commands: ``Map``, ``Move`` and ``Bootstrap``, and the configurations they form.

A control stream carries commands at timestamps. Every command at one time belongs to
one configuration change; the F operator compiles them, once no more commands at that
time can arrive, against the configuration in force just before:

- ``Map(table)`` replaces the whole routing table;
- ``Move(bin, worker)`` reassigns one bin;
- ``Bootstrap(server, new_worker)`` asks worker ``server`` to send its routing state
  (the active configuration and every pending one) to ``new_worker``, a worker that
  joined the running cluster; it leaves the table as it is;
- ``Release(worker)`` says that no command after it names ``worker``, which is leaving
  (the rebalancer's promise: once it is compiled, every configuration that could still
  send a bin to the leaver is known); it leaves the table as it is.

Compilation is deterministic (every worker must get the same table whatever order the
commands arrived in): the ``Map`` first, then the moves by bin. Two different maps, or
two moves of one bin to different workers, at one time are refused.

Commands are tuples tagged by their kind (``("move", bin, worker)``), so they cross
process boundaries as msgpack arrays; ``decode`` turns one back into its class.
Compiling costs O(bins) for a ``Map``, O(1) per ``Move``.

>>> table = (0, 1, 0, 1)
>>> compile_configuration(table, [Move(2, 1), Bootstrap(0, 2)], workers=3)
(0, 1, 1, 1)
>>> decode(("move", 3, 0))
Move(bin=3, worker=0)
>>> compile_configuration(table, [Release(1)], workers=2)
(0, 1, 0, 1)
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence


class ControlError(ValueError):
    """A control command that cannot be applied (names the command and why)."""


class UnknownWorker(ControlError):
    """A command names a worker this worker does not know (yet: a joiner's join notice
    may still be on its way)."""


class Map(tuple):
    """Install ``table`` (bin -> worker) as the whole routing table."""

    __slots__ = ()

    def __new__(cls, table: Iterable[int]) -> "Map":
        return tuple.__new__(cls, ("map", tuple(table)))

    @property
    def table(self) -> tuple:
        return self[1]

    def __repr__(self) -> str:
        return f"Map({len(self[1])} bins)"


class Move(tuple):
    """Move ``bin`` (its state, pending records and notifications) to ``worker``."""

    __slots__ = ()

    def __new__(cls, bin: int, worker: int) -> "Move":
        return tuple.__new__(cls, ("move", bin, worker))

    @property
    def bin(self) -> int:
        return self[1]

    @property
    def worker(self) -> int:
        return self[2]

    def __repr__(self) -> str:
        return f"Move(bin={self[1]}, worker={self[2]})"


class Bootstrap(tuple):
    """Worker ``server`` sends its routing state to the joined worker ``new_worker``."""

    __slots__ = ()

    def __new__(cls, server: int, new_worker: int) -> "Bootstrap":
        return tuple.__new__(cls, ("bootstrap", server, new_worker))

    @property
    def server(self) -> int:
        return self[1]

    @property
    def new_worker(self) -> int:
        return self[2]

    def __repr__(self) -> str:
        return f"Bootstrap(server={self[1]}, new_worker={self[2]})"


class Release(tuple):
    """No command after this one names ``worker``: it is leaving."""

    __slots__ = ()

    def __new__(cls, worker: int) -> "Release":
        return tuple.__new__(cls, ("release", worker))

    @property
    def worker(self) -> int:
        return self[1]

    def __repr__(self) -> str:
        return f"Release(worker={self[1]})"


_KINDS = {"map": lambda c: Map(c[1]), "move": lambda c: Move(c[1], c[2]),
          "bootstrap": lambda c: Bootstrap(c[1], c[2]), "release": lambda c: Release(c[1])}


def decode(command: Sequence[Any]) -> tuple:
    """A command from its wire form (a tagged tuple or list); refuses anything else."""
    if isinstance(command, (Map, Move, Bootstrap, Release)):
        return command
    try:
        return _KINDS[command[0]](command)
    except (KeyError, IndexError, TypeError):
        raise ControlError(f"not a control command: {command!r} (expected Map, Move, "
                           f"Bootstrap or Release)") from None


def compile_configuration(table: Sequence[int], commands: Iterable[Any], workers: int) -> tuple:
    """The table after applying every command of one time to ``table``.

    ``workers``: how many workers exist now; a command naming another worker is refused.
    """
    commands = [decode(c) for c in commands]
    maps = {c for c in commands if type(c) is Map}
    if len(maps) > 1:
        raise ControlError(f"{len(maps)} different Map commands at one time")
    result = list(maps.pop().table) if maps else list(table)
    if len(result) != len(table):
        raise ControlError(f"Map of {len(result)} bins, but the operator has {len(table)}")
    moved: dict[int, int] = {}
    for c in sorted((c for c in commands if type(c) is Move), key=lambda c: c[1:]):
        if not 0 <= c.bin < len(result):
            raise ControlError(f"{c!r}: bin {c.bin} is not in 0..{len(result) - 1}")
        if moved.get(c.bin, c.worker) != c.worker:
            raise ControlError(f"bin {c.bin} moved to workers {moved[c.bin]} and {c.worker} at one time")
        moved[c.bin] = c.worker
        result[c.bin] = c.worker
    for c in commands:
        if type(c) is Bootstrap and not (0 <= c.server < workers and 0 <= c.new_worker < workers):
            raise UnknownWorker(f"{c!r}: the cluster has workers 0..{workers - 1}")
    bad = sorted({w for w in result if not 0 <= w < workers})
    if bad:
        raise UnknownWorker(f"the routing table names worker(s) {bad}, but the cluster has "
                           f"workers 0..{workers - 1}")
    return tuple(result)


def bootstraps(commands: Iterable[Any]) -> list:
    """The Bootstrap commands among ``commands``."""
    return [c for c in map(decode, commands) if type(c) is Bootstrap]


def releases(commands: Iterable[Any]) -> list[int]:
    """The workers the Release commands among ``commands`` name.

    >>> releases([Move(1, 0), Release(3), ("release", 4)])
    [3, 4]
    """
    return [c.worker for c in map(decode, commands) if type(c) is Release]
