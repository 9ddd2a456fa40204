"""SGLang 0.5.22's `UnifiedRadixCache` checkpoint matches its key again after the insert
(`checkpoint_into_tree` calls `_match_tree`), which stamps the path's access times; 0.5.23 takes
the insert's node and stamps nothing more. The unified target reads which one a release has
(`rematches_at_checkpoint`) and tells the model (`CHECKPOINT_REMATCHES`). Found by the release
table: 8 of 10 traces of 0.5.22's `.python` cell diverged on a node's access-time order, 4 ops
shrunk (docs/release-history.md, "The 0.5.22 cells"). Plain Python: nothing here needs SGLang."""

from kvfuzz.fuzz.unified.target import rematches_at_checkpoint
from kvfuzz.oracle.radix.contract import (CHECKPOINT_REMATCHES, CURRENT, LEGACY_CALLS,
                                          contract_of)
from kvfuzz.oracle.unified.model import UnifiedModel


def _ranks(model) -> dict:
    """Each node's rank among the distinct access times (0: the oldest), by its path."""
    found = {node.path()[1]: node.access for node in model.tree.nodes()
             if node is not model.tree.root}
    order = sorted(set(found.values()))
    return {path: order.index(time) for path, time in found.items()}


def _shrunk_trace(model) -> dict:
    # the saved trace of 0.5.22's cell: insert [2 5 3 3]; r5 admitted on [2 5 3] (a hit of 2,
    # the node split), one token granted, a chunk checkpoint of its 3 tokens
    model.take([1, 2, 3, 4])
    model.insert([2, 5, 3, 3], 0, 2, [1, 2, 3, 4])
    model.admit_match(5, [2, 5, 3], 3, 0, 2)
    model.admit_lock(5)
    model.grant(5, [5])
    assert model.checkpoint(5) == 3
    return _ranks(model)


def test_the_flag_is_read_from_the_contract_texts():
    assert contract_of((CHECKPOINT_REMATCHES,)).checkpoint_rematches
    assert not contract_of(()).checkpoint_rematches and contract_of(()) is CURRENT
    # before 0.5.22 the old calls' contract already matches again (legacy)
    assert contract_of((LEGACY_CALLS,)).legacy


def test_a_rematching_checkpoint_stamps_the_path_newer_than_the_untouched_suffix():
    today = _shrunk_trace(UnifiedModel(1, 5, "mru"))
    rematched = _shrunk_trace(UnifiedModel(1, 5, "mru", contract_of((CHECKPOINT_REMATCHES,))))
    # 0.5.23: [2 5] keeps the admission match's time, older than both halves of [3 3]
    assert today[(2, 5)] == 0
    # 0.5.22: the checkpoint's match stamps [2 5] and [2 5 3] after the split suffix [3]
    assert rematched[(2, 5)] == 1 and rematched[(2, 5, 3)] == 2
    assert rematched[(2, 5, 3, 3)] == 0
    # the lock stays on the insert's node either way (finding U: not the rematch's)
    for contract in (CURRENT, contract_of((CHECKPOINT_REMATCHES,))):
        model = UnifiedModel(1, 5, "mru", contract)
        _shrunk_trace(model)
        assert model.requests[5].node.path()[1] == (2, 5, 3)


class Release0522:
    def _match_tree(self, params):
        return params

    def checkpoint_into_tree(self, req, *, up_to, **kwargs):
        # what 0.5.22's checkpoint does after its insert (the names matter, not the body)
        return self._match_tree(req)


class Release0523:
    def checkpoint_into_tree(self, req, *, up_to, **kwargs):
        return req  # the insert's own node: no second match


class Legacy:  # before 0.5.22: no checkpoint_into_tree at all
    def cache_unfinished_req(self, req, chunked=False):
        return req


def test_the_release_is_read_from_its_checkpoints_code():
    assert rematches_at_checkpoint(Release0522)
    assert not rematches_at_checkpoint(Release0523)
    assert not rematches_at_checkpoint(Legacy)
