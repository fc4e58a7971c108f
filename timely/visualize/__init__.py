"""The dataflow drawn offline: its operators, scopes and channels as data, Mermaid or
Graphviz DOT (``python -m timely.visualize MODULE:FUNCTION``, see ``__main__``).

``describe(worker)`` reads the graph of every dataflow a worker has built
(``describe_dataflow(subgraph)`` one, from its root scope, as the status page of
``timely.metrics`` does while the worker runs): each operator with its path as id
(``"0.3"``: child 3 of dataflow 0), its ports and its enclosing scope (a nested scope,
from ``iterative`` or ``region``, is an operator with ``nested`` true, and its own
operators follow with it as their scope), and each channel with the kind of the pact
its input was connected with: ``pipeline``, ``exchange``, ``direct`` (what ``broadcast``
and Megaphone route through) or a custom pact's class name in lower case. Inside a
scope, timely's child 0 stands for the scope's own ports; here it is the scope's id, so
a stream entering a scope is a channel to the scope (at one of its inputs), then one
from the scope to the operators inside. Crossing a scope boundary needs no pact
(records stay on their worker): those channels are ``pipeline``. A nested scope that
has completed is shut down: it is still listed, without its operators.

``mermaid(graph)`` and ``dot(graph)`` draw a description: each scope is a block (a
Mermaid ``subgraph``, a DOT ``cluster_``), and a channel through a scope boundary is
drawn from the operator that sends to the operator that receives, with the kind of its
last hop; channels other than ``pipeline`` are dashed and labelled with their kind.
``visualize(build)`` builds ``build(scope)`` on a worker of its own (``standalone``),
without running it, and draws it (a source that connects while it is built, as
``kafka_source`` does, connects).

Costs: ``describe`` O(operators + channels), stepping nothing; the drawings linear in
their input; ``visualize`` what building the dataflow costs, plus those.

>>> def squares(scope):
...     scope.to_stream(range(4)).map(lambda x: x * x).exchange(lambda x: x).probe()
>>> print(visualize(squares))
flowchart TD
    subgraph n0["Dataflow0"]
        n0_1["ToStream"]
        n0_2["Map"]
        n0_3["Exchange"]
        n0_4["Probe"]
    end
    n0_1 --> n0_2
    n0_2 -. exchange .-> n0_3
    n0_3 --> n0_4
>>> graph = describe(standalone(squares))
>>> graph[0]["operators"][2]
{'id': '0.3', 'name': 'Exchange', 'inputs': 1, 'outputs': 1, 'scope': '0', 'nested': False}
>>> graph[0]["channels"][1]
{'from': '0.2', 'from_port': 0, 'to': '0.3', 'to_port': 0, 'kind': 'exchange'}
>>> print(dot(graph))
digraph timely {
    node [shape=box];
    subgraph "cluster_0" {
        label="Dataflow0";
        "0.1" [label="ToStream"];
        "0.2" [label="Map"];
        "0.3" [label="Exchange"];
        "0.4" [label="Probe"];
    }
    "0.1" -> "0.2";
    "0.2" -> "0.3" [style=dashed, label="exchange"];
    "0.3" -> "0.4";
}
>>> visualize(squares, format="svg")
Traceback (most recent call last):
...
ValueError: unknown format 'svg': choose 'dot' or 'mermaid'
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterator, Union

from ..checkpoint.registry import Registry
from ..communication.thread import ProcessHub
from ..config import Config
from ..dataflow.scope import Scope
from ..progress.subgraph import Subgraph
from ..worker import Worker


def describe(worker: Worker) -> list[dict]:
    """The graph of every dataflow ``worker`` holds, as plain data (see the module)."""
    return [describe_dataflow(worker.dataflow_subgraph(index)) for index in worker.dataflows()]


def describe_dataflow(subgraph: Subgraph) -> dict:
    """One dataflow, from its root scope (``worker.dataflow_subgraph(index)``):
    ``{"index", "name", "operators", "channels"}`` (see the module)."""
    operators: list[dict] = []
    channels: list[dict] = []
    _describe_scope(subgraph, subgraph.path, operators, channels)
    return {"index": subgraph.path[0], "name": subgraph.name, "operators": operators,
            "channels": channels}


def _describe_scope(subgraph: Subgraph, path: tuple, operators: list, channels: list) -> None:
    for child in subgraph.children:
        for port, targets in enumerate(child.edges):
            for target in targets:
                pact = subgraph.pacts.get(target)
                channels.append({"from": _endpoint(path, child.index), "from_port": port,
                                 "to": _endpoint(path, target.node), "to_port": target.port,
                                 "kind": "pipeline" if pact is None else type(pact).__name__.lower()})
    for child in subgraph.children[1:]:
        # a nested scope is the one child that is not local (timely.progress.subgraph)
        operators.append({"id": _id(path + (child.index,)), "name": child.name,
                          "inputs": child.inputs, "outputs": child.outputs,
                          "scope": _id(path), "nested": not child.local})
        nested = child.operator         # once: a scope that completes is shut down (None)
        if not child.local and nested is not None:
            _describe_scope(nested, path + (child.index,), operators, channels)


def _id(path: tuple) -> str:
    return ".".join(map(str, path))


def _endpoint(path: tuple, node: int) -> str:
    """Child ``node`` of the scope at ``path``; child 0 is the scope itself."""
    return _id(path + (node,)) if node else _id(path)


def _drawing(graph: list[dict], begin: Callable[[str, str], list[str]],
             node: Callable[[str, str], str], end: str,
             edge: Callable[[str, str, str], str]) -> list[str]:
    """A drawing's lines: each scope a block (``begin(id, name)``, its members one level
    deeper, ``end``), each operator that is not a scope ``node(id, name)``, then each
    edge ``edge(sender, receiver, kind)`` (``_edges``)."""
    lines: list[str] = []

    def block(id: str, name: str, members: dict, pad: str) -> None:
        lines.extend(pad + line for line in begin(id, name))
        for op in members[id]:
            if op["nested"]:
                block(op["id"], op["name"], members, pad + "    ")
            else:
                lines.append(pad + "    " + node(op["id"], op["name"]))
        lines.append(pad + end)

    for dataflow in graph:
        members = defaultdict(list)
        for op in dataflow["operators"]:
            members[op["scope"]].append(op)
        block(str(dataflow["index"]), dataflow["name"], members, "    ")
    lines.extend("    " + edge(*drawn) for dataflow in graph for drawn in _edges(dataflow))
    return lines


def _edges(dataflow: dict) -> Iterator[tuple[str, str, str]]:
    """``(sender, receiver, kind)`` between operators that are not scopes: a channel to
    a scope is followed to where its records go from the scope's port."""
    scope_of = {op["id"]: op["scope"] for op in dataflow["operators"]}
    nested = {op["id"] for op in dataflow["operators"] if op["nested"]}

    def inside(channel: dict) -> str:
        """The scope a channel is in: a channel from a scope to its own operators (or
        straight to its own output) is inside it."""
        sender, receiver = channel["from"], channel["to"]
        if sender in nested and (receiver == sender or scope_of.get(receiver) == sender):
            return sender
        return scope_of[sender]

    # (sender, port, the scope the channel is in) -> channels
    fanout = defaultdict(list)
    for channel in dataflow["channels"]:
        fanout[channel["from"], channel["from_port"], inside(channel)].append(channel)

    def receivers(channel: dict, scope: str) -> Iterator[tuple[str, str]]:
        receiver, port = channel["to"], channel["to_port"]
        if receiver == scope:            # out of the scope, at its output ``port``
            onward = fanout[scope, port, scope_of[scope]]
        elif receiver in nested:         # into a nested scope, at its input ``port``
            onward = fanout[receiver, port, receiver]
        else:
            yield receiver, channel["kind"]
            return
        for after in onward:
            yield from receivers(after, inside(after))

    for channel in dataflow["channels"]:
        if channel["from"] not in nested:
            for receiver, kind in receivers(channel, inside(channel)):
                yield channel["from"], receiver, kind


def mermaid(graph: list[dict]) -> str:
    """A Mermaid ``flowchart TD`` of ``describe``'s graph: scopes as ``subgraph`` blocks."""
    def node(id: str, name: str) -> str:
        return f'{_mermaid_id(id)}["{_mermaid_text(name)}"]'

    def edge(sender: str, receiver: str, kind: str) -> str:
        arrow = "-->" if kind == "pipeline" else f"-. {kind} .->"
        return f"{_mermaid_id(sender)} {arrow} {_mermaid_id(receiver)}"
    lines = _drawing(graph, lambda id, name: ["subgraph " + node(id, name)], node, "end", edge)
    return "\n".join(["flowchart TD", *lines])


def _mermaid_id(id: str) -> str:
    return "n" + id.replace(".", "_")


# Mermaid's entity codes: a quoted label may hold anything else, brackets included
_MERMAID_ESCAPES = str.maketrans({"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;",
                                  "&": "#amp;", "`": "#96;", "\n": " ", "\r": " "})


def _mermaid_text(text: str) -> str:
    return text.translate(_MERMAID_ESCAPES)


def dot(graph: list[dict]) -> str:
    """A Graphviz ``digraph`` of ``describe``'s graph: scopes as ``cluster_`` subgraphs."""
    def begin(id: str, name: str) -> list[str]:
        return [f"subgraph {_dot_text('cluster_' + id)} {{", f"    label={_dot_text(name)};"]

    def node(id: str, name: str) -> str:
        return f"{_dot_text(id)} [label={_dot_text(name)}];"

    def edge(sender: str, receiver: str, kind: str) -> str:
        style = "" if kind == "pipeline" else f" [style=dashed, label={_dot_text(kind)}]"
        return f"{_dot_text(sender)} -> {_dot_text(receiver)}{style};"
    lines = _drawing(graph, begin, node, "}", edge)
    return "\n".join(["digraph timely {", "    node [shape=box];", *lines, "}"])


def _dot_text(text: str) -> str:
    """A DOT quoted string (a backslash is kept as one, not read as a label escape)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "")
    return f'"{escaped}"'


RENDERERS: dict[str, Callable[[list[dict]], str]] = {"dot": dot, "mermaid": mermaid}


def visualize(build: Union[Callable[[Scope], Any], Worker], format: str = "mermaid") -> str:
    """``build`` (a dataflow function, as ``worker.dataflow`` takes; or a Worker, whose
    dataflows are drawn) drawn in ``format``: ``"mermaid"`` or ``"dot"``."""
    render = RENDERERS.get(format)
    if render is None:
        raise ValueError(f"unknown format {format!r}: choose "
                         f"{' or '.join(repr(name) for name in RENDERERS)}")
    worker = build if isinstance(build, Worker) else standalone(build)
    return render(describe(worker))


def standalone(build: Callable[[Scope], Any]) -> Worker:
    """A worker of its own (no peers, no checkpoints) that has built the dataflow
    ``build(scope)`` and never steps: what ``visualize`` draws, for ``describe``."""
    hub = ProcessHub(1)
    hub.checkpoints = Registry(hub.agree)
    worker = Worker(Config(checkpoint="off"), hub.allocator(0))
    worker.dataflow(build)
    return worker


__all__ = ["RENDERERS", "describe", "describe_dataflow", "dot", "mermaid", "standalone", "visualize"]
