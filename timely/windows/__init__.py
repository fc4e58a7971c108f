"""Event-time windows that move with the cluster and survive crashes exactly.

``stream.window(windower, key=, event_time=, fold=, init=)`` folds each key's records
per event-time window and emits ``(key, Window(start, end), value)`` once per window,
when the dataflow's frontier (the watermark) says no record for it can still come;
records that come later are reported on ``.late``, never dropped. The open windows are
Megaphone state (a bin holds its keys' windows), so they move live when processes join
or leave and are checkpointed like any stateful operator's bins.

- ``windowers``: ``Tumbling(length)``, ``Sliding(length, every)``, ``Session(gap)``
  (bounds aligned to an ``origin``), and ``Window``;
- ``clock``: event time -> epochs (``Epochs(length, origin)``, or a function), and
  when a window closes;
- ``open``: the open windows in a bin, folded, merged and closed;
- ``late``: ``Late`` records and their reasons;
- ``operator``: ``window``, ``reduce_window``, ``collect_window`` (offered on
  ``Stream``).

Costs are those of ``stateful_unary`` plus one fold per record and window; see each
module. docs/windows.md has the rules in full.

>>> import timely
>>> from timely.windows import Sliding
>>> def build(worker):
...     def dataflow(scope):
...         source, clicks = scope.new_input()
...         sums = clicks.reduce_window(Sliding(10, 5), lambda a, b: a + b, key=lambda c: c[0],
...                                     event_time=lambda c: c[1], value=lambda c: 1)
...         return source, sums.capture()
...     source, sums = worker.dataflow(dataflow)
...     source.send_batch([("a", 3), ("a", 7), ("a", 12)])
...     source.close()
...     worker.run()
...     return sorted(r for rs in sums.by_time().values() for r in rs)
>>> timely.execute(1, build)[0]
[('a', Window(start=-5, end=5), 1), ('a', Window(start=0, end=10), 2), ('a', Window(start=5, end=15), 2), ('a', Window(start=10, end=20), 1)]
"""
from ..dataflow.stream import Stream
from .clock import Epochs
from .late import Late
from .operator import WindowStream, collect_window, reduce_window, window
from .windowers import Session, Sliding, Tumbling, Window, Windower

Stream.extend(window=window, reduce_window=reduce_window, collect_window=collect_window)

__all__ = ["Epochs", "Late", "Session", "Sliding", "Tumbling", "Window", "WindowStream", "Windower",
           "collect_window", "reduce_window", "window"]
