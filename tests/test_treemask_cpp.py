"""treemask C++ reference (hls_ref/cpp/treemask.cpp) == golden model (hls_ref.treemask), word for word: the
examples, small NODES_MAX builds and every error (NODES_MAX 64 random trees: tests/test_agreement.py)."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import cpp
from hls_ref import treemask as tm
from hls_ref.vectors import CHAIN3_PATHS, MEDUSA_PATHS, random_parents
from hwcontract.regmap import core
from specdec.decoding.tree import parents_from_paths

pytestmark = pytest.mark.skipif(cpp.shutil.which(cpp.CXX) is None, reason="no C++ compiler")


def check(parents, nodes_max):
    want = tm.tree_mask(parents, nodes_max)
    words, res = cpp.treemask_words(parents, nodes_max)
    assert words == tm.stream_words(want), parents
    assert res["err"] == want.err and res["rows"] == len(want.rows) and res["max_depth"] == want.max_depth
    assert res["cycles"] == (tm.cycles(len(parents)) if not want.err else 0)
    rows, depth, max_depth, err = cpp.treemask_run(parents, nodes_max)
    assert (tuple(rows), tuple(depth), max_depth, err) == (want.rows, want.depth, want.max_depth, want.err)


def test_id_hash():
    assert cpp.treemask_id_hash() == core("treemask").map_hash()


def test_examples():
    check(parents_from_paths(CHAIN3_PATHS), 64)
    tree = parents_from_paths(MEDUSA_PATHS)
    rows, depth, max_depth, err = cpp.treemask_run(tree)
    assert rows == [0b1, 0b11, 0b101, 0b1011, 0b10011, 0b100101, 0b1000101] and depth == [0, 1, 1, 2, 2, 2, 2]


@pytest.mark.parametrize("nodes_max", [8, 1])
def test_random_trees(nodes_max):
    rnd = np.random.default_rng(100 + nodes_max)
    for n in range(1, nodes_max + 1):
        check(random_parents(rnd, n), nodes_max)
    check([-1] + list(range(nodes_max - 1)), nodes_max)       # chain: row 63 all ones at N = 64
    check([7] + [0] * (nodes_max - 1), nodes_max)


@pytest.mark.parametrize("nodes_max", [64, 8])
def test_errors(nodes_max):
    for parents in ([], [-1] + [0] * nodes_max, [-1] + [200] * nodes_max, [-1, 1], [-1, 0, 0, 3],
                    [-1] + list(range(nodes_max - 2)) + [nodes_max - 1], [-1] + list(range(nodes_max - 2)) + [255]):
        check(parents, nodes_max)


def test_bad_nodes_max():
    with pytest.raises(ValueError, match=r"NODES_MAX=0 of core 'treemask' not in 1\.\.64"):
        cpp.treemask_words([-1], 0)
