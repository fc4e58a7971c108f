"""examples/wcc.py against networkx: a cyclic, multi-epoch, multi-worker dataflow.

Protects: the per-epoch weakly-connected-component labels that ``examples/wcc.py``
computes (label = least vertex id of the component, over every edge seen up to and
including that epoch) equal networkx's connected components, for random graphs and for
shapes that stress the loop (long paths that need many rounds, merges of components
across epochs, self-loops, duplicate edges, epochs without edges), and are the same on
1 and on 4 workers. Also run once with ``check_progress`` so the runtime verifies its
own progress accounting on an iterative dataflow with exchanges.
"""
from __future__ import annotations

import os
import sys

import networkx as nx
import pytest

from bounded import execute_bounded  # noqa: E402

import timely

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from wcc import merge, random_batches, run  # noqa: E402




def expected_components(batches):
    """Per epoch: {vertex: least vertex id of its component}, over the edges so far."""
    graph = nx.Graph()
    out = {}
    for epoch, batch in enumerate(batches):
        graph.add_edges_from(batch)
        out[epoch] = {v: min(c) for c in nx.connected_components(graph) for v in c}
    return out


def wcc(config, batches):
    per_epoch = merge(execute_bounded(config, lambda worker: run(worker, batches)))
    # an epoch in which no vertex exists yet has no labels at all
    assert set(per_epoch) <= set(range(len(batches)))
    return {epoch: per_epoch.get(epoch, {}) for epoch in range(len(batches))}


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("workers", [1, 4])
def test_wcc_matches_networkx_on_random_graphs(seed, workers):
    vertices = 30 + 17 * seed
    batches = random_batches(vertices, vertices // 2, 4, seed)
    assert wcc(workers, batches) == expected_components(batches)


SHAPES = {
    # labels must travel the whole path: one loop round per hop
    "long path, high ids first": [[(i, i + 1) for i in range(40, 20, -1)],
                                  [(i, i + 1) for i in range(20, 0, -1)]],
    # two components merge in a later epoch, then a third joins with a smaller id
    "merges across epochs": [[(10, 11), (20, 21), (30, 31)], [(11, 20)], [(0, 31)], [(31, 21)]],
    "self loops and duplicates": [[(5, 5), (3, 4), (4, 3), (3, 4)], [(9, 9), (4, 1)], [(5, 9)]],
    "epochs without edges": [[], [(7, 8)], [], [(8, 2)], []],
    "star": [[(0, i) for i in range(1, 30)], [(i, i + 30) for i in range(1, 30)]],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("workers", [1, 4])
def test_wcc_matches_networkx_on_hard_shapes(shape, workers):
    batches = SHAPES[shape]
    assert wcc(workers, batches) == expected_components(batches)


@pytest.mark.parametrize("seed", [11, 12])
def test_wcc_same_result_on_one_and_four_workers(seed):
    batches = random_batches(80, 50, 5, seed)
    one, four = wcc(1, batches), wcc(4, batches)
    assert one == four
    assert one == expected_components(batches)


def test_wcc_with_progress_accounting_checks():
    batches = random_batches(50, 30, 3, 7)
    got = wcc(timely.Config(workers=3, check_progress=True), batches)
    assert got == expected_components(batches)
