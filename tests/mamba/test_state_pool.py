"""SGLang's Mamba slots before 0.5.13, without a wheel: what the target reads from a class of
`MambaPool`'s shape (impl/mamba/state_pool.py): no group calls -> no alloc groups in its traces
(its own stream, outside its contract otherwise), the state pool's keyword constructor accepted,
one more required argument refused in one line. `Groupless` is kvfuzz's own allocator without
the group calls (0.5.12's slot contract); its mutants are ways such a pool can go wrong, each
caught. The same on a release: tests/mamba/test_state_pool_release.py (slow)."""

from __future__ import annotations

import pytest
import torch

from kvfuzz.fuzz.engine.target import OUTSIDE_CONTRACT
from kvfuzz.fuzz.mamba.target import MAMBA, _generator_for
from kvfuzz.impl.mamba.slot_allocator import MambaSlots
from kvfuzz.impl.mamba.state_pool import declare, takes_state_shapes, unbuilt
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.strategies.mamba.profile import NO_GROUPS
from kvfuzz.strategies.mamba.trace import Admit, Finish, GroupBegin, GroupEnd, Trace
from tests.helpers import assert_seeded_traces_agree, divergence

HERE = __name__


class Groupless(MambaSlots):
    """0.5.12's MambaPool as a slot allocator: no alloc groups, no planner's count."""

    alloc_group_begin = alloc_group_end = schedulable_available_size = None


class FreePrepends(Groupless):
    """Freed slots go to the head of the free list."""

    def free(self, free_index):
        if free_index.numel():
            self.free_slots = torch.cat((free_index, self.free_slots))


class ClearKeepsHeld(Groupless):
    """`clear()` frees only what was never handed out (the held slots stay lost)."""

    def clear(self):
        if hasattr(self, "free_slots"):
            self._pending = None
            return
        super().clear()


class StateShaped:
    """MambaPool's constructor shape (keywords describing the states), nothing else used."""

    def __init__(self, *, size, spec_state_size, cache_params, mamba_layer_ids, device,
                 enable_memory_saver=False, speculative_num_draft_tokens=None):
        self.size = size

    def alloc(self, need_size): ...

    def free(self, free_index): ...

    def clear(self): ...

    def available_size(self): ...


class NeedsMore(StateShaped):
    def __init__(self, *, size, cache_params, mamba_layer_ids, device, tp_rank):
        self.size = size


def test_a_class_without_group_calls_gets_no_groups_and_agrees():
    impl = MAMBA.catalogue.resolve(f"{HERE}:Groupless")
    assert NO_GROUPS in impl.preconditions
    stream = _generator_for([impl])
    assert stream.name == "mamba/1[no alloc groups]"
    for index in range(20):
        ops = stream.generate(0, index).ops
        assert not any(isinstance(op, (GroupBegin, GroupEnd)) for op in ops), index
    assert_seeded_traces_agree("mamba", impl, range(20))
    grouped = MAMBA.catalogue.resolve("mamba.torch")
    assert NO_GROUPS not in grouped.preconditions and _generator_for([grouped]).name == "mamba/1"


def test_a_group_op_is_outside_a_groupless_class_s_contract():
    trace = Trace(4, (GroupBegin(2), Admit(1), GroupEnd(), Finish((1,))))
    assert MAMBA.check(trace, MAMBA.catalogue.resolve(f"{HERE}:Groupless")).status == \
        OUTSIDE_CONTRACT
    assert MAMBA.check(trace, MAMBA.catalogue.resolve("mamba.torch")).status == "agree"


@pytest.mark.parametrize("name, shows", [
    ("FreePrepends", "free list"),
    ("ClearKeepsHeld", "available_size"),
])
def test_a_broken_groupless_pool_is_caught(name, shows):
    impl = MAMBA.catalogue.resolve(f"{HERE}:{name}")
    stream = _generator_for([impl])
    for index in range(40):
        found = divergence("mamba", stream.generate(0, index), impl)
        if found is not None:
            assert found.what.startswith(shows), found.report()
            return
    pytest.fail(f"{name} agreed on 40 seeded traces")


def test_the_state_pool_constructor_is_read_and_what_it_lacks_said_in_one_line():
    assert takes_state_shapes(StateShaped) and not takes_state_shapes(MambaSlots)
    assert unbuilt(StateShaped) == [] and unbuilt(NeedsMore) == ["tp_rank"]
    impl = MAMBA.catalogue.resolve(f"{HERE}:StateShaped")  # the shape accepted, groups declared
    assert NO_GROUPS in impl.preconditions
    for refuse in (lambda: MAMBA.catalogue.resolve(f"{HERE}:NeedsMore"),  # an outside class
                   lambda: declare(impl, NeedsMore)):  # the entry, read at another release
        with pytest.raises(ImplementationError) as error:
            refuse()
        message = str(error.value)
        assert "tp_rank" in message and "\n" not in message, message
    assert str(error.value).startswith("not supported: ")
