"""timely.visualize: dataflows described as data and drawn as Mermaid and DOT, offline.

Protects: ``describe`` lists every operator of a real dataflow exactly once, with its
name, ports and enclosing scope (nested scopes of ``iterative`` / ``region`` included),
and every channel between the right ports with the kind of the pact it was connected
with (an ``Exchange`` stays ``exchange`` on one worker, where it routes nothing); the
drawings connect the operators that exchange records, through scope boundaries and
around loops, and are well-formed: every node an edge names is declared, blocks are
balanced, labels survive quotes, brackets and entity-like text; ``visualize`` builds
without running; ``python -m timely.visualize`` draws a module's dataflow function and
refuses a bad spec with exit status 2.
"""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

import pytest

import timely
from timely import Exchange
from timely.visualize import RENDERERS, describe, describe_dataflow, dot, mermaid, standalone, visualize
from timely.visualize.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from wcc import components_per_epoch, propagate  # noqa: E402
from wordcount import count_words  # noqa: E402


# ---- dataflows ------------------------------------------------------------------------
def wordcount(scope):
    """input -> map -> (exchange) count -> probe, as examples/wordcount.py --exchange."""
    _, lines = scope.new_input()
    count_words(lines.flat_map(str.split)).probe()


def wordcount_exchange_operator(scope):
    _, lines = scope.new_input()
    pairs = lines.map(lambda w: (w, 1)).exchange(lambda p: p[0])
    pairs.unary_notify(None, "Count", [], lambda input, output, notificator: None).probe()


def wcc(scope):
    """examples/wcc.py's dataflow: label propagation in an iterative scope."""
    _, edges = scope.new_input()
    _, ticks = scope.new_input()
    undirected = edges.flat_map(lambda e: (e, (e[1], e[0])))
    reports = scope.iterative(lambda inner: propagate(undirected.enter(inner), ticks.enter(inner),
                                                      inner).leave())
    components_per_epoch(reports).probe()


def join(scope):
    """Two inputs into one binary operator, one input exchanged; a name with brackets."""
    _, left = scope.new_input()
    _, right = scope.new_input()
    left.binary(right.map(str), Exchange(lambda r: r), None, "Join@(0, 5)",
                lambda caps, info: (lambda i1, i2, out: None)).probe()


def nested(scope):
    """A region inside an iterative scope, a stream passing straight through the loop,
    and a broadcast (a Direct pact) after it."""
    numbers = scope.to_stream(range(3))

    def loop(inner):
        entered = numbers.enter(inner)
        strings = inner.region(lambda r: entered.enter(r).map(str).leave(), name="Strings")
        return strings.leave(), entered.leave()
    strings, same = scope.iterative(loop, name="Loop")
    strings.concat(same).broadcast().probe()


# ---- helpers --------------------------------------------------------------------------
def only(graph):
    assert len(graph) == 1
    return graph[0]


def ids_by_name(dataflow):
    """name -> id, for dataflows whose operator names are unique."""
    names = [op["name"] for op in dataflow["operators"]]
    assert len(set(names)) == len(names), names
    return {op["name"]: op["id"] for op in dataflow["operators"]}


def channels(dataflow):
    return sorted((c["from"], c["from_port"], c["to"], c["to_port"], c["kind"])
                  for c in dataflow["channels"])


MERMAID_LINE = re.compile(r'(?P<subgraph>subgraph (?P<sid>n[\d_]+)\["(?P<slabel>[^"]*)"\])'
                          r"|(?P<end>end)"
                          r'|(?P<node>(?P<nid>n[\d_]+)\["(?P<nlabel>[^"]*)"\])'
                          r"|(?P<edge>(?P<a>n[\d_]+) (?:-->|-\. (?P<kind>\w+) \.->) (?P<b>n[\d_]+))$")


def mermaid_unescape(text):
    return re.sub(r"#(\w+);", lambda m: html.unescape(f"&#{m[1]};" if m[1].isdigit() else f"&{m[1]};"),
                  text)


def parse_mermaid(text):
    """(blocks: id -> (label, parent block), nodes: id -> (label, block), edges: [(a, b,
    kind)]), asserting the text is well-formed."""
    lines = text.split("\n")
    assert lines[0] == "flowchart TD"
    blocks, nodes, edges, open_blocks = {}, {}, [], []
    for line in lines[1:]:
        m = MERMAID_LINE.fullmatch(line.strip())
        assert m is not None, f"not a Mermaid line we write: {line!r}"
        if m["subgraph"]:
            assert m["sid"] not in blocks and m["sid"] not in nodes
            blocks[m["sid"]] = (mermaid_unescape(m["slabel"]), open_blocks[-1] if open_blocks else None)
            open_blocks.append(m["sid"])
        elif m["end"]:
            assert open_blocks, "an 'end' closes no subgraph"
            open_blocks.pop()
        elif m["node"]:
            assert open_blocks, f"node outside every dataflow block: {line!r}"
            assert m["nid"] not in nodes and m["nid"] not in blocks
            nodes[m["nid"]] = (mermaid_unescape(m["nlabel"]), open_blocks[-1])
        else:
            assert not open_blocks, "edges come after the blocks"
            edges.append((m["a"], m["b"], m["kind"] or "pipeline"))
    assert not open_blocks, f"unclosed subgraphs {open_blocks}"
    for a, b, _ in edges:
        assert a in nodes and b in nodes, f"edge {a} -> {b} names an undeclared node"
    return blocks, nodes, edges


DOT_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[{}\[\];=,]|[A-Za-z_]\w*|\S')


def parse_dot(text):
    """(clusters: name -> (label, parent), nodes: id -> (label, cluster), edges: [(a, b,
    attributes)]), asserting the text is well-formed: balanced braces, statements ended,
    every edge endpoint declared."""
    tokens = DOT_TOKEN.findall(text)
    assert tokens[:3] == ["digraph", "timely", "{"] and tokens[-1] == "}"

    def unquote(token):
        assert token.startswith('"'), token
        return re.sub(r'\\(.)', lambda m: "\n" if m[1] == "n" else m[1], token[1:-1])

    def attributes(i):
        attrs = {}
        assert tokens[i] == "["
        i += 1
        while tokens[i] != "]":
            key, eq, value = tokens[i:i + 3]
            assert eq == "="
            attrs[key] = unquote(value) if value.startswith('"') else value
            i += 3
            if tokens[i] == ",":
                i += 1
        return attrs, i + 1

    clusters, nodes, edges, open_clusters = {}, {}, [], []
    i = 3
    while i < len(tokens) - 1:
        t = tokens[i]
        if t == "subgraph":
            name = unquote(tokens[i + 1])
            assert tokens[i + 2] == "{" and tokens[i + 3:i + 5] == ["label", "="]
            assert tokens[i + 6] == ";" and name.startswith("cluster_")
            clusters[name] = (unquote(tokens[i + 5]), open_clusters[-1] if open_clusters else None)
            open_clusters.append(name)
            i += 7
        elif t == "}":
            assert open_clusters, "a '}' closes nothing"
            open_clusters.pop()
            i += 1
        elif t == "node":
            _, i = attributes(i + 1)
            assert tokens[i] == ";"
            i += 1
        elif tokens[i + 1] == "->":
            a, b = unquote(t), unquote(tokens[i + 2])
            attrs, i = attributes(i + 3) if tokens[i + 3] == "[" else ({}, i + 3)
            assert tokens[i] == ";" and not open_clusters
            edges.append((a, b, attrs))
            i += 1
        else:
            attrs, i = attributes(i + 1)
            assert tokens[i] == ";" and open_clusters
            assert unquote(t) not in nodes
            nodes[unquote(t)] = (attrs["label"], open_clusters[-1])
            i += 1
    assert not open_clusters, f"unclosed clusters {open_clusters}"
    for a, b, _ in edges:
        assert a in nodes and b in nodes, f"edge {a} -> {b} names an undeclared node"
    return clusters, nodes, edges


def drawn_edges(text):
    """The Mermaid edges as (sender name, receiver name, kind)."""
    _, nodes, edges = parse_mermaid(text)
    return sorted((nodes[a][0], nodes[b][0], kind) for a, b, kind in edges)


# ---- describe -------------------------------------------------------------------------
def test_wordcount_operators_appear_once_with_their_names_and_scope():
    dataflow = only(describe(standalone(wordcount)))
    assert (dataflow["index"], dataflow["name"]) == (0, "Dataflow0")
    assert dataflow["operators"] == [
        {"id": "0.1", "name": "Input", "inputs": 0, "outputs": 1, "scope": "0", "nested": False},
        {"id": "0.2", "name": "FlatMap", "inputs": 1, "outputs": 1, "scope": "0", "nested": False},
        {"id": "0.3", "name": "Count", "inputs": 1, "outputs": 1, "scope": "0", "nested": False},
        {"id": "0.4", "name": "Probe", "inputs": 1, "outputs": 1, "scope": "0", "nested": False}]
    # the Exchange pact is kept though one worker routes nothing (it connects a pipeline)
    assert channels(dataflow) == [("0.1", 0, "0.2", 0, "pipeline"), ("0.2", 0, "0.3", 0, "exchange"),
                                  ("0.3", 0, "0.4", 0, "pipeline")]


def test_an_exchange_operator_is_fed_by_an_exchange_channel_and_feeds_a_pipeline():
    dataflow = only(describe(standalone(wordcount_exchange_operator)))
    n = ids_by_name(dataflow)
    assert set(n) == {"Input", "Map", "Exchange", "Count", "Probe"}
    assert channels(dataflow) == sorted([(n["Input"], 0, n["Map"], 0, "pipeline"),
                                         (n["Map"], 0, n["Exchange"], 0, "exchange"),
                                         (n["Exchange"], 0, n["Count"], 0, "pipeline"),
                                         (n["Count"], 0, n["Probe"], 0, "pipeline")])


def test_a_loop_is_a_nested_scope_with_its_feedback_edge_and_channels_across_its_boundary():
    dataflow = only(describe(standalone(wcc)))
    ops = dataflow["operators"]
    edges_in, ticks_in = [op["id"] for op in ops if op["name"] == "Input"]
    n = {op["name"]: op["id"] for op in ops if op["name"] != "Input"}
    loop = n["Iterative"]
    assert len(ops) == 8
    assert [(op["name"], op["scope"], op["nested"], op["inputs"], op["outputs"]) for op in ops
            if op["scope"] != "0"] == [("Feedback", loop, False, 1, 1),
                                       ("LabelPropagation", loop, False, 3, 2)]
    assert [(op["name"], op["nested"], op["inputs"], op["outputs"]) for op in ops
            if op["id"] == loop] == [("Iterative", True, 2, 1)]
    assert channels(dataflow) == sorted([
        (edges_in, 0, n["FlatMap"], 0, "pipeline"),
        (n["FlatMap"], 0, loop, 0, "pipeline"),                       # enter
        (ticks_in, 0, loop, 1, "pipeline"),                           # enter
        (loop, 0, n["LabelPropagation"], 1, "exchange"),              # inside, from scope input 0
        (loop, 1, n["LabelPropagation"], 0, "pipeline"),              # inside, from scope input 1
        (n["Feedback"], 0, n["LabelPropagation"], 2, "exchange"),
        (n["LabelPropagation"], 0, n["Feedback"], 0, "pipeline"),     # the feedback edge
        (n["LabelPropagation"], 1, loop, 0, "pipeline"),              # leave, to scope output 0
        (loop, 0, n["Components"], 0, "exchange"),
        (n["Components"], 0, n["Probe"], 0, "pipeline")])


def test_a_binary_operator_gets_both_inputs_at_their_ports_with_their_pacts():
    dataflow = only(describe(standalone(join)))
    left, right = [op["id"] for op in dataflow["operators"] if op["name"] == "Input"]
    n = {op["name"]: op["id"] for op in dataflow["operators"] if op["name"] != "Input"}
    assert set(n) == {"Map", "Join@(0, 5)", "Probe"}
    assert [op["inputs"] for op in dataflow["operators"] if op["id"] == n["Join@(0, 5)"]] == [2]
    assert channels(dataflow) == sorted([(left, 0, n["Join@(0, 5)"], 0, "exchange"),
                                         (right, 0, n["Map"], 0, "pipeline"),
                                         (n["Map"], 0, n["Join@(0, 5)"], 1, "pipeline"),
                                         (n["Join@(0, 5)"], 0, n["Probe"], 0, "pipeline")])


def test_scopes_nest_and_a_broadcast_is_a_direct_channel():
    dataflow = only(describe(standalone(nested)))
    n = ids_by_name(dataflow)
    assert {op["name"]: op["scope"] for op in dataflow["operators"]} == {
        "ToStream": "0", "Loop": "0", "Strings": n["Loop"], "Map": n["Strings"], "Concat": "0",
        "BroadcastReplicate": "0", "Broadcast": "0", "Probe": "0"}
    assert [op["name"] for op in dataflow["operators"] if op["nested"]] == ["Loop", "Strings"]
    assert (n["Loop"], 0, n["Loop"], 1, "pipeline") in channels(dataflow)   # straight through
    assert (n["BroadcastReplicate"], 0, n["Broadcast"], 0, "direct") in channels(dataflow)


def test_every_dataflow_of_a_worker_is_described_as_plain_json_data():
    worker = standalone(wordcount)
    worker.dataflow(wcc, name='Loops "and" more')
    graph = describe(worker)
    assert [(d["index"], d["name"]) for d in graph] == [(0, "Dataflow0"), (1, 'Loops "and" more')]
    assert json.loads(json.dumps(graph)) == graph
    for d in graph:
        assert set(d) == {"index", "name", "operators", "channels"}
        assert all(set(op) == {"id", "name", "inputs", "outputs", "scope", "nested"}
                   for op in d["operators"])
        assert all(set(c) == {"from", "from_port", "to", "to_port", "kind"} for c in d["channels"])
        assert all(op["id"].split(".")[0] == str(d["index"]) for op in d["operators"])
        assert describe_dataflow(worker.dataflow_subgraph(d["index"])) == d


def test_a_nested_scope_that_has_shut_down_is_listed_without_its_operators():
    worker = standalone(wcc)
    loop = next(child for child in worker.dataflow_subgraph(0).children if child.name == "Iterative")
    loop.shut_down()
    dataflow = only(describe(worker))
    assert [(op["name"], op["nested"]) for op in dataflow["operators"]] == [
        ("Input", False), ("Input", False), ("FlatMap", False), ("Iterative", True),
        ("Components", False), ("Probe", False)]
    assert all(c["from"].count(".") == c["to"].count(".") == 1 for c in dataflow["channels"])
    _, nodes, edges = parse_mermaid(mermaid([dataflow]))
    assert sorted((nodes[a][0], nodes[b][0]) for a, b, _ in edges) == [
        ("Components", "Probe"), ("Input", "FlatMap")]


# ---- the drawings ---------------------------------------------------------------------
def test_mermaid_draws_the_loop_inside_its_subgraph_and_edges_through_its_boundary():
    dataflow = only(describe(standalone(wcc)))
    text = mermaid([dataflow])
    blocks, nodes, _ = parse_mermaid(text)
    assert [label for label, _ in blocks.values()] == ["Dataflow0", "Iterative"]
    loop_block = next(b for b, (label, _) in blocks.items() if label == "Iterative")
    assert sorted(label for label, block in nodes.values() if block == loop_block) == [
        "Feedback", "LabelPropagation"]
    assert len(nodes) == 7            # every operator but the scope, once
    assert drawn_edges(text) == sorted([
        ("Input", "FlatMap", "pipeline"), ("Input", "LabelPropagation", "pipeline"),
        ("FlatMap", "LabelPropagation", "exchange"),
        ("Feedback", "LabelPropagation", "exchange"), ("LabelPropagation", "Feedback", "pipeline"),
        ("LabelPropagation", "Components", "exchange"), ("Components", "Probe", "pipeline")])


def test_an_edge_crosses_several_scope_boundaries_to_the_operator_that_receives():
    text = visualize(nested)
    blocks, nodes, _ = parse_mermaid(text)
    parents = {label: blocks[parent][0] if parent else None for label, parent in blocks.values()}
    assert parents == {"Dataflow0": None, "Loop": "Dataflow0", "Strings": "Loop"}
    assert drawn_edges(text) == sorted([
        ("ToStream", "Map", "pipeline"), ("Map", "Concat", "pipeline"),
        ("ToStream", "Concat", "pipeline"),             # entered and left the loop unchanged
        ("Concat", "BroadcastReplicate", "pipeline"), ("BroadcastReplicate", "Broadcast", "direct"),
        ("Broadcast", "Probe", "pipeline")])


NASTY = 'Count@(0, 5) "quoted" [x] {y} <b>&amp; #35; `tick` back\\slash end -->|x| ;'


def nasty(scope):
    scope.to_stream(range(2)).unary(None, NASTY, lambda caps, info: (lambda i, o: None)).probe()


def test_mermaid_labels_keep_quotes_brackets_and_entity_like_text():
    _, nodes, edges = parse_mermaid(visualize(nasty))
    assert sorted(label for label, _ in nodes.values()) == sorted(["ToStream", NASTY, "Probe"])
    assert len(edges) == 2
    _, nodes, _ = parse_mermaid(visualize(lambda s: s.to_stream([]).unary(
        None, "two\nlines", lambda caps, info: (lambda i, o: None))))
    assert "two lines" in [label for label, _ in nodes.values()]


def test_dot_is_well_formed_with_clusters_for_scopes_and_dashed_exchanges():
    worker = standalone(wcc)
    worker.dataflow(nasty)
    graph = describe(worker)
    clusters, nodes, edges = parse_dot(dot(graph))
    assert {name: parent for name, (_, parent) in clusters.items()} == {
        "cluster_0": None, "cluster_0.4": "cluster_0", "cluster_1": None}
    assert nodes["0.4.1"] == ("Feedback", "cluster_0.4") and nodes["0.4.2"][1] == "cluster_0.4"
    assert sorted(label for label, cluster in nodes.values() if cluster == "cluster_1") == sorted(
        ["ToStream", NASTY, "Probe"])
    drawn = sorted((nodes[a][0], nodes[b][0], attrs.get("label", "pipeline")) for a, b, attrs in edges)
    assert drawn == sorted(drawn_edges(mermaid(graph)))
    assert all((attrs.get("style") == "dashed") == ("label" in attrs) for _, _, attrs in edges)
    assert ("FlatMap", "LabelPropagation", "exchange") in drawn


def test_pydot_reads_the_dot_text():
    import pydot                    # a test dependency: a real DOT parser
    worker = standalone(wcc)
    worker.dataflow(nasty)
    graph = describe(worker)
    parsed, = pydot.graph_from_dot_data(dot(graph))

    def labels(g):
        for node in g.get_nodes():
            if node.get_name() != "node":
                yield node.get_label()
        for sub in g.get_subgraphs():
            yield from labels(sub)
    assert len(list(labels(parsed))) == 7 + 3
    assert len(parsed.get_edges()) == len(parse_dot(dot(graph))[2])


# ---- visualize ------------------------------------------------------------------------
def test_visualize_builds_without_running_and_draws_either_format():
    seen = []

    def flow(scope):
        _, stream = scope.new_input()             # never closed: running would not end
        scope.to_stream(range(5)).concat(stream).inspect(seen.append).probe()
    assert timely.visualize is visualize
    for format, render in RENDERERS.items():
        assert visualize(flow, format=format) == render(describe(standalone(flow)))
    assert seen == []
    worker = standalone(flow)
    assert visualize(worker, "dot") == dot(describe(worker))


def test_visualize_refuses_an_unknown_format_naming_the_choices():
    with pytest.raises(ValueError, match=r"unknown format 'svg': choose 'dot' or 'mermaid'"):
        visualize(wordcount, format="svg")


# ---- python -m timely.visualize --------------------------------------------------------
FLOWS = '''
NOT_A_FUNCTION = 3

def flow(scope):
    scope.to_stream(range(3)).exchange(lambda x: x).probe()
'''


@pytest.fixture
def flows_module(tmp_path):
    (tmp_path / "vizflows.py").write_text(FLOWS)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                                      os.environ.get("PYTHONPATH")]))}


def run_cli(env, *args):
    return subprocess.run([sys.executable, "-m", "timely.visualize", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_command_draws_a_modules_dataflow_function(flows_module, tmp_path):
    out = run_cli(flows_module, "vizflows:flow")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert drawn_edges(out.stdout.rstrip("\n")) == [("Exchange", "Probe", "pipeline"),
                                                          ("ToStream", "Exchange", "exchange")]
    target = tmp_path / "flow.dot"
    out = run_cli(flows_module, "vizflows:flow", "--format", "dot", "-o", str(target))
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stderr
    _, nodes, edges = parse_dot(target.read_text().rstrip("\n"))
    assert sorted(label for label, _ in nodes.values()) == ["Exchange", "Probe", "ToStream"]
    assert len(edges) == 2


def test_the_command_refuses_a_bad_spec_with_status_2(flows_module):
    out = run_cli(flows_module, "vizflows:nothing_here")
    assert out.returncode == 2 and out.stdout == ""
    assert "usage: python -m timely.visualize" in out.stderr
    assert "module 'vizflows' has no 'nothing_here'" in out.stderr


@pytest.mark.parametrize("argv, message", [
    (["vizflows"], "'vizflows' is not MODULE:FUNCTION"),
    ([":flow"], "':flow' is not MODULE:FUNCTION"),
    (["no_such_module_here:flow"], "cannot import module 'no_such_module_here'"),
    (["vizflows:NOT_A_FUNCTION"], "'vizflows:NOT_A_FUNCTION' is not a dataflow function f(scope)"),
    (["vizflows:flow", "--format", "svg"], "invalid choice: 'svg'"),
])
def test_each_bad_spec_is_named(flows_module, monkeypatch, capsys, argv, message):
    monkeypatch.syspath_prepend(flows_module["PYTHONPATH"].split(os.pathsep)[0])
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
