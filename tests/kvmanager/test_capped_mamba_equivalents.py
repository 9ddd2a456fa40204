"""Line 970 of vLLM 0.33.0's `HybridKVCacheCoordinator.find_longest_cache_hit_per_group`, the
top of full attention's EAGLE lookup beside a Mamba group (`min(max_cache_hit_length +
eagle_margin, len(block_hashes) * self.hash_block_size)`): `kvfuzz mutate`'s two survivors
there, `*` as `**` and as `<<`, held equivalent under any caller's cap (docs/upstream-vllm.md,
"The survivors of lines 969 and 970, with the cap"). The finders bound themselves by the hashed
tokens, which that term counts; either edit only raises it (`**` lowers it for one hash alone,
which EAGLE's drop empties anyway).

Checked on `test_capped_mamba.py`'s worked example (a prompt met again through the connector,
its lookup capped) over a grid of caps, hash units and EAGLE: each edit, built by the function
that builds the catalogue's mutants (`upstream_mutants.mutant_manager`: the edited method bound
to the released manager's coordinator), agrees to the last op wherever the release does, judged
with the same features. The check's proof that it can fail, on the same grid through the same
function: line 969's `<<` (catalogue mutant `mamba_connector_eagle_margin_shifted`) diverges
exactly where the docs say, and a probe edit of line 970 that raises shows the line runs at
every EAGLE point (and at none without EAGLE, where it is not reached: the grid's other half
only checks that nothing else moved). Needs vLLM (slow)."""

from __future__ import annotations

import functools

from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.registry import MUTANT, Implementation, register_object
from kvfuzz.impl.source_mutation import Mutation
from kvfuzz.strategies.kvmanager import codec
from tests.helpers import with_engine
from tests.kvmanager.test_capped_mamba import met_again

with_vllm = with_engine("vllm")

SCOPE = "HybridKVCacheCoordinator.find_longest_cache_hit_per_group"
LINE_970 = "len(block_hashes) * self.hash_block_size,"
CAPS = (-1, 19, 16, 13, 12, 8, 5, 4, 3, 0)  # -1: none (the lookup's own num_tokens - 1)
# (EAGLE, tokens per hash, the caller's cap); blocks of 4, the prompt's 16 cached tokens
GRID = [(eagle, per, cap) for eagle in (True, False) for per in (4, 2) for cap in CAPS]
# Where 969's cap << margin looks deeper than the release's cap + margin while that stops short
# of the cached 16 tokens (the margin a hash unit: 4, or 2 hashed per 2); 0 << margin is 0, and
# 0 + margin finds a unit the drop takes again
SHIFTED_CAUGHT = ({(True, 4, cap) for cap in (8, 5, 4, 3)}
                  | {(True, 2, cap) for cap in (13, 12, 8, 5, 4, 3)})


def trace(eagle: bool, per: int, cap: int):
    return codec.from_json(met_again(cap) | {"eagle": eagle, "hash_block_size": per})


@functools.cache
def mutant(tag: str, mutation: Mutation) -> Implementation:
    """The released manager with `mutation` made to the coordinator's module, as the catalogue
    makes its coordinator mutants, judged as one of them."""
    from kvfuzz.impl.kvmanager import upstream_mutants

    cls = upstream_mutants.mutant_manager(f"test_{tag}", upstream_mutants.COORDINATOR, mutation)
    return Implementation(f"test.{tag}", "kvmanager", register_object(cls), mutation.why,
                          MUTANT, requires="vllm")


def line_970(new: str, tag: str) -> Implementation:
    return mutant(tag, Mutation(SCOPE, LINE_970, LINE_970.replace("*", new),
                                f"line 970's hashed tokens with * as {new}"))


@functools.cache
def released() -> tuple:
    """The release's features at each point of the grid (the judge's counts of what it met:
    a lookup capped, its answer cut by the cap, ...), each point agreeing to the last op."""
    outcomes = [KVMANAGER.check(trace(*point), KVMANAGER.catalogue.resolve("vllm.kvmanager"))
                for point in GRID]
    for point, outcome in zip(GRID, outcomes):
        assert outcome.status == "agree", (point, outcome.divergence.report())
    return tuple(outcome.features for outcome in outcomes)


def caught(impl: Implementation) -> set:
    return {point for point in GRID if KVMANAGER.check(trace(*point), impl).status != "agree"}


@with_vllm
def test_line_970s_survivors_answer_as_the_release_at_every_cap():
    for new, tag in (("**", "line970_power"), ("<<", "line970_shift")):
        impl = line_970(new, tag)
        for point, expected in zip(GRID, released()):
            actual = KVMANAGER.check(trace(*point), impl)
            assert actual.status == "agree", (new, point, actual.divergence.report())
            assert actual.features == expected, (
                new, point, sorted(set(actual.features.items()) ^ set(expected.items())))


@with_vllm
def test_the_grid_catches_969s_shift_and_runs_line_970_with_eagle():
    from kvfuzz.impl.kvmanager.upstream_mutants import MUTATIONS

    _, shifted = MUTATIONS["mamba_connector_eagle_margin_shifted"]
    assert caught(mutant("line969_shift", shifted)) == SHIFTED_CAUGHT
    probe = line_970("* 1 // 0 *", "line970_raises")  # ZeroDivisionError where the line runs
    assert caught(probe) == {point for point in GRID if point[0]}
    # the features compared are not one constant: a capped lookup the cap cut is told apart
    # from an uncapped one (a run judged as the other fails the comparison)
    features = dict(zip(GRID, released()))
    assert features[True, 4, 8] != features[True, 4, -1]
