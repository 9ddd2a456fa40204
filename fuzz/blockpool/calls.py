"""How the block-pool judge compares a pool call with the model's (`_call`, mixed into
`BlockPoolLockstep`): the result (blocks handed out or ValueError, a double free refused, hits,
reset's verdict), then what the reuse watcher heard, the residency collector's evictions and
(a trace with KV events) the events the call published, which also move the view a consumer of
those events holds (`view`, checked by the state read, `pool_state.py`)."""

from __future__ import annotations

from kvfuzz.fuzz.blockpool.pool_state import events_problems
from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, list_diff, short
from kvfuzz.oracle.blockpool.events import replay
from kvfuzz.oracle.blockpool.model import REFUSED


class PoolCalls:
    """Mixed into `BlockPoolLockstep`: its calls, over its `trace`, `model`, `impl`, `view` and
    `count`."""

    def _call(self, method: str, args: tuple) -> Call:
        """A pool call: results compared as `result_problems` says, then what the watcher
        heard, the residency collector's evictions and (a trace with KV events) what the call
        published, which a consumer's view replays whatever else differs (the state read
        checks it)."""
        def compare(expected, rejected, actual, raised):
            trace, model, impl = self.trace, self.model, self.impl
            published = impl.events if trace.events and raised is None else []
            if method != "emit_cached_block_events":  # a report re-announces: not a change
                self.view = replay(self.view, published)
            problems = result_problems(method, expected, rejected, actual, raised)
            if problems or raised is not None:
                return problems
            problems = heard_problems(model.heard, impl.heard)
            evictions = sorted(model.take_evictions())
            if trace.metrics and sorted(impl.evictions) != evictions:
                problems.append(("residency metrics", f"{method}: expected the collector to "
                                                      f"end tracking blocks with reuse gaps "
                                                      f"{evictions}, actual "
                                                      f"{sorted(impl.evictions)}"))
            expected = model.take_events()
            if trace.events:
                problems += events_problems(method, expected, published, self.count)
            return problems
        return Call("", method, args, compare=compare)


def result_problems(method: str, expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if rejected is not None:  # any exception refuses it; the state read shows it changed nothing
        return [] if raised is not None else [
            ("double free", f"{method} accepted a caller's double free ({rejected}): expected it "
                            f"refused (raised) with nothing changed")]
    if expected == REFUSED:
        if raised is None:
            return [("None vs success", f"expected ValueError (more blocks asked for than are "
                                        f"free), actual {short(actual)}")]
        if not isinstance(raised, ValueError):
            return crash_problems(raised)
        return []
    if method == "get_new_blocks" and isinstance(raised, ValueError):  # refused: not a crash
        return [("None vs success", f"expected blocks {short(expected)}, actual ValueError: "
                                    f"{short(str(raised))}")]
    if raised is not None:
        return crash_problems(raised)
    if expected == actual:
        return []
    if isinstance(expected, list) and isinstance(actual, list):
        return [("result", f"{method}: {list_diff(expected, actual)}")]
    return [("result", f"{method}: expected {short(expected)}, actual {short(actual)}")]


def heard_problems(expected: list[int], actual: list[int]) -> list[tuple[str, str]]:
    if sorted(expected) == sorted(actual):
        return []
    return [("reuse watcher", f"expected to hear of blocks {sorted(expected)}, heard of "
                              f"{sorted(actual)}")]
