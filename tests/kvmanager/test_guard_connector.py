"""KV-connector calls under the kvmanager live guard (`fuzz/kvmanager/guard_connector.py`): vLLM's
v1 scheduler with a deterministic fake connector (`fuzz/kvmanager/fake_connector.py`) and with
the CPU offloading connector runs guarded, its connector admissions, asynchronous loads and
resumptions checked in lock step; a mutant of each connector check raises at its first bad call
with a file that replays. And the judge's rule that a request resumed after its KV load passes
the scheduler's full_sequence_must_fit. Skips without vLLM."""

from kvfuzz.fuzz.engine.target import AGREE, DIVERGE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from tests.helpers import needs_engine

pytestmark = needs_engine("vllm")


def impl_of(name: str | None):
    return KVMANAGER.catalogue.resolve("vllm.kvmanager" if name is None else
                                       f"mutant.vllm.kvmanager.{name}")


def test_a_request_resumed_after_its_load_must_fit_whole():
    """The scheduler passes full_sequence_must_fit to the first allocation after a KV load
    (no lookup then) as to every admission: r1's 20 tokens need 3 blocks more than its loaded
    8 hold, 2 are free, so its 4-token chunk is refused though it would fit alone."""
    ops = (Arrive(1, tuple(range(1, 21))), Connect(1, 0, 8, load=True),
           Arrive(2, tuple(range(100, 112))), Schedule(2, 12), Loaded(1), Schedule(1, 4))
    trace = Trace(8, 4, 0, 100, ops, full_sequence_must_fit=True)
    assert KVMANAGER.check(trace, impl_of(None)).status == AGREE
    found = KVMANAGER.check(trace, impl_of("whole_request_unchecked"))
    assert found.status == DIVERGE and found.divergence.step == 5, found
