"""What the compaction judge and I12 share: the implementation's side with its results checked,
the payload written into each allocated page, and live vids in depth order (what a trace's
picks resolve against)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import ImplementationRaised
from kvfuzz.oracle.compaction.model import TAKES
from kvfuzz.strategies.compaction.trace import PoolSnapshot


# What each method of the implementation must return (else it is its fault, never the harness's).
RETURNS = {"snapshot": PoolSnapshot, "read_live": dict, "read_vids": dict, "flush": int,
           "alloc": (list, type(None))}


class CheckedSide:
    """An implementation built by `factory`, each result checked against `RETURNS`; whatever it
    raises, or a wrong result type, comes out as `ImplementationRaised` (its fault)."""

    def __init__(self, factory, params, device: str):
        self._side = _implementation(factory, params, device)
        self.lazy = bool(_implementation(getattr, self._side, "lazy"))
        # Which freed pages a lazy allocation reuses, if not the spec's (the oracle's TAKES).
        self.take = _implementation(getattr, self._side, "hole_take", "front")
        if self.take not in TAKES:
            raise ImplementationRaised(ValueError(f"hole_take is {self.take!r}, expected one of "
                                                  f"{', '.join(TAKES)}"))
        # Whether a page handed out reads zero before it is written (SGLang's MHA and MLA pools
        # promise it: attention kernels load whole pages, and a NaN past seq_len still counts);
        # a side that declares it has `read_vids(name, vids)`, the rows of those vids.
        self.zeroes = bool(_implementation(getattr, self._side, "zeroes_new_pages", False))

    def __getattr__(self, name: str):  # called once per name: the wrapper is kept
        method = _implementation(getattr, self._side, name)

        def checked(*args, **kwargs):
            value = _implementation(method, *args, **kwargs)
            expected = RETURNS.get(name)
            if expected is not None and not isinstance(value, expected):
                raise ImplementationRaised(TypeError(
                    f"{name} returned {type(value).__name__}, expected "
                    f"{getattr(expected, '__name__', 'a list or None')}"))
            return value
        self.__dict__[name] = checked
        return checked


def _implementation(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the implementation's fault
        raise ImplementationRaised(error) from error


def stamp(serial: int, epp: int) -> bytes:
    """A payload no other allocation shares: the serial, little-endian, tiled over the page."""
    word = serial.to_bytes(4, "little")
    return (word * (epp // 4 + 1))[:epp]


def depth_order(snap: PoolSnapshot, up: bool) -> list[int]:
    """Live vids ordered from the pool's base to its frontier."""
    pairs = sorted((page, vid) for vid, page in enumerate(snap.v2p[:-1]) if page > 0)
    return [vid for _, vid in (pairs if up else reversed(pairs))]
