"""The floor of `kvfuzz bench harness`: the engine's share of a profile gives every call edge of a
function that is neither the engine's nor kvfuzz's (torch, built-ins) to its caller's side."""

from types import SimpleNamespace

from kvfuzz.bench.harness_floor import engine_share

ENGINE = ("/site/sglang/srt/mem_cache/radix_cache.py", 10, "match_prefix")
KVFUZZ = ("/site/kvfuzz/impl/radix/reader.py", 5, "read")
BUILTIN = ("~", 0, "<built-in method torch.cat>")
TORCH = ("/site/torch/functional.py", 1, "split")
CYCLE = ("/usr/lib/python3.11/copy.py", 1, "deepcopy")


def stats(entries):
    """pstats' layout: func -> (cc, nc, own time, cumulative, {caller: (nc, cc, time, cum)})."""
    return SimpleNamespace(stats={func: (1, 1, own, own, callers)
                                  for func, (own, callers) in entries.items()})


def test_built_ins_and_torch_count_as_their_callers():
    profile = stats({
        ENGINE: (2.0, {}),
        KVFUZZ: (4.0, {}),
        BUILTIN: (2.0, {ENGINE: (1, 1, 1.5, 1.5), TORCH: (1, 1, 0.5, 0.5)}),  # 1.5 + 0.5
        TORCH: (1.0, {ENGINE: (1, 1, 0.5, 0.5), KVFUZZ: (1, 1, 0.5, 0.5)}),  # half the engine's
    })
    # engine: 2 own + 1.5 of the built-in + 0.5 * (its torch caller's half) + 0.5 of torch
    assert abs(engine_share(profile) - (2 + 1.5 + 0.25 + 0.5) / 9) < 1e-9


def test_a_cycle_outside_both_counts_as_kvfuzz():
    profile = stats({ENGINE: (1.0, {}), CYCLE: (1.0, {CYCLE: (1, 1, 1.0, 1.0)})})
    assert engine_share(profile) == 0.5
