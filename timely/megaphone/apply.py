"""S's hot path: F's messages at one time, applied to the bins (``state_machine``'s fold),
split by whether their bins are here, cut by withdrawals, combined per bin.

F (``timely.megaphone.routing``) sends S messages ``(input, runs, records)``: the
records bin after bin, with the runs ``(bin, count)`` that name their bins
(``timely.megaphone.bins.pack_runs``). The S operator (``timely.megaphone.state``)
hands them here:

- ``apply_fold`` / ``fold_bins``: ``state_machine``'s fold over a bin's records, or
  over every run of a time's messages, against the bins' state;
- ``split_held``: the records of bins this worker holds, and those of bins still in
  flight to it;
- ``subtract_entries``: the records left once a withdrawal
  (``timely.dataflow.withdrawal``) took some back;
- ``_combine_message`` / ``_combine_into``: ``stateful_unary(combine=)``'s per-bin fold.

Costs: one call of the user's function per record (the loop around it, over runs of
bins and records, in C with the compiled twins, ``timely.megaphone._cbins``, which
replace ``apply_fold``, ``fold_bins`` and ``split_held`` when built; ``py_*`` are
always the pure ones); ``split_held`` O(bins in the messages), in C, and a split only
while bins are in flight; ``subtract_entries`` O(records of the time in the bins it
touches); checking a message's runs O(runs).
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Iterable

from .._twin import compiled
from ..communication.codec import FrameError
from ..dataflow.withdrawal import Outstanding
from .bin_states import BinStates, StatefulError
from .bins import pack_runs, runs_of

_key_of = itemgetter(0)


def _missing_bin(states: BinStates, b: int) -> StatefulError:
    return StatefulError(f"{states.name}: worker {states.worker_index} received records of bin {b}, "
                         f"which it does not hold (routing and state disagree)")


def _fold_failed(name: str, key: Any, time: Any, e: Exception) -> StatefulError:
    """The error of a fold that raised ``e`` (both twins of ``apply_fold`` raise it)."""
    return StatefulError(f"{name}: fold failed for key {key!r} at time {time!r}: {type(e).__name__}: {e}")


def apply_fold(fold: Callable[[Any, Any, Any], tuple], state: dict, records: Iterable,
               emit: Callable[[Iterable], Any], name: str, time: Any) -> None:
    """Apply ``fold`` to each ``(key, value)`` of ``records`` against ``state`` (key ->
    state; a None result deletes the key), passing each record's outputs to ``emit``.
    A failing fold raises StatefulError naming ``name``, the key and ``time``; that
    record's state is left as it was."""
    get = state.get
    for key, value in records:
        try:
            new, outputs = fold(key, value, get(key))
        except Exception as e:
            raise _fold_failed(name, key, time, e) from e
        if new is None:
            state.pop(key, None)
        else:
            state[key] = new
        if outputs:
            emit(outputs)


def fold_bins(fold: Callable[[Any, Any, Any], tuple], states: BinStates, entries: Iterable,
              emit: Callable[[Iterable], Any], name: str, time: Any) -> None:
    """``state_machine``'s S at one time: for each ``(input, runs, records)`` of
    ``entries`` (F's messages, see ``timely.megaphone.bins.group_by_target``) and each
    ``(bin, count)`` of its runs, ``apply_fold`` to the bin's next ``count`` records
    against the bin's state (a bin not held here raises StatefulError), telling the
    bin's checkpoint log (if any) which keys it touches. The compiled twin
    (``timely.megaphone._cbins``) replaces this name when built; ``py_fold_bins`` is
    always this one."""
    bins = states.bins
    log = states.log
    for _, runs, records in entries:
        for b, these in bin_slices(runs, records):
            bin = bins.get(b)
            if bin is None:
                raise _missing_bin(states, b)
            if log is not None:
                log.touch(b, map(_key_of, these))
            py_apply_fold(fold, bin.state, these, emit, name, time)


def split_held(entries: list, states: BinStates) -> tuple[list, list]:
    """``(held, waiting)``: F's messages ``(input, runs, records)`` split by whether
    ``states`` holds each run's bin (a bin in flight to this worker arrives later at the
    same time). Both lists keep the entries' order and each bin's records in order;
    when every bin is held, ``held`` is ``entries`` itself. The compiled twin checks in
    C and splits with this one, as it must only during a migration.

    >>> from timely.megaphone.bins import pack_runs, runs_of
    >>> held, waiting = split_held([(0, pack_runs([1, 2, 5, 1]), ["a", "b", "c"])], BinStates("S", 0, [1]))
    >>> [(i, runs_of(r), rs) for i, r, rs in held], [(i, runs_of(r), rs) for i, r, rs in waiting]
    ([(0, [(1, 2)], ['a', 'b'])], [(0, [(5, 1)], ['c'])])
    """
    bins = states.bins
    held: list = []
    waiting: list = []
    for i, runs, records in entries:
        parts: tuple = (([], []), ([], []))          # (runs, records) held, then waiting
        for b, these in bin_slices(runs, records):
            part = parts[b not in bins]
            part[0].extend((b, len(these)))
            part[1].extend(these)
        for part, out in zip(parts, (held, waiting)):
            if part[0]:
                out.append((i, pack_runs(part[0]), part[1]))
    return (held, waiting) if waiting else (entries, [])


def subtract_entries(entries: list, withdrawals: list) -> list:
    """F's messages ``(input, runs, records)`` at one time, without the records that
    ``withdrawals`` (messages of the same shape) take back: per input and bin, one equal
    record per record withdrawn (``timely.dataflow.withdrawal.subtract``). F routed both
    by the same table, so a withdrawn record is in its bin here.

    >>> from timely.megaphone.bins import pack_runs, runs_of
    >>> left = subtract_entries([(0, pack_runs([1, 2, 5, 1]), ["a", "b", "c"])], [(0, pack_runs([1, 1]), ["b"])])
    >>> [(i, runs_of(r), rs) for i, r, rs in left]
    [(0, [(1, 1), (5, 1)], ['a', 'c'])]
    """
    gone: dict[tuple[int, int], Outstanding] = {}
    for i, runs, records in withdrawals:
        for b, these in bin_slices(runs, records):
            found = gone.get((i, b))
            if found is None:
                gone[(i, b)] = Outstanding(these)
            else:
                found.add(these)
    out = []
    for i, runs, records in entries:
        flat: list = []
        kept: list = []
        for b, these in bin_slices(runs, records):
            taken = gone.get((i, b))
            if taken:
                these = taken.take_from(these)
            if these:
                flat.extend((b, len(these)))
                kept.extend(these)
        if kept:
            out.append((i, pack_runs(flat), kept))
    for (i, b), left in gone.items():
        if left:
            raise StatefulError(f"a withdrawal takes back records of bin {b} (input {i}) that were "
                                f"not handed on at their time, such as {left.first()!r}")
    return out


def _combine_message(per_bin: dict, runs: bytes, records: Any, combine: Callable, name: str,
                     time: Any) -> None:
    """Combine each bin's records of one of F's messages into ``per_bin``."""
    for b, these in bin_slices(runs, records):
        _combine_into(per_bin, b, these, combine, name, time)


def _combine_into(per_bin: dict, b: int, records: Any, combine: Callable, name: str, time: Any) -> None:
    """``per_bin[b] = combine(per_bin.get(b), records)``; a failure is a StatefulError
    naming the operator, the bin and the time (the accumulator keeps what it had)."""
    try:
        per_bin[b] = combine(per_bin.get(b), records)
    except Exception as e:
        raise StatefulError(f"{name}: combine failed on bin {b} at time {time!r}: "
                            f"{type(e).__name__}: {e}") from e


def bin_slices(runs: bytes, records: Any) -> Iterable[tuple[int, Any]]:
    """``(bin, its records)`` for each run of one of F's messages, in order."""
    pos = 0
    for b, count in _checked_runs(runs, len(records)):
        yield b, records[pos:pos + count]
        pos += count


def _checked_runs(runs: bytes, nrecords: int) -> list[tuple[int, int]]:
    """``runs_of(runs)``, refusing runs that do not add up to the message's
    ``nrecords`` records."""
    pairs = runs_of(runs)
    counted = sum(count for _, count in pairs)
    if counted != nrecords:
        raise FrameError(f"a Megaphone message's runs count {counted} records, but it carries {nrecords}")
    return pairs



# The pure-Python twins stay importable as ``py_apply_fold`` / ``py_fold_bins``; the
# compiled twins replace the public names when built (see timely._twin).
py_apply_fold = apply_fold
py_fold_bins = fold_bins
py_split_held = split_held
_compiled = compiled("timely.megaphone._cbins")
if _compiled is not None:
    apply_fold = _compiled.apply_fold
    fold_bins = _compiled.fold_bins
    split_held = _compiled.split_held
