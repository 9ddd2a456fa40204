"""The unified target's judge, picked by a trace's components: `UnifiedLockstep` (`lockstep.py`, the
radix model) for full attention alone, `SWALockstep` (`swa_lockstep.py`) with the SWA component,
`MambaLockstep` (`mamba_lockstep.py`) with the Mamba component, `HostLockstep`
(`host_lockstep.py`) with HiCache's host tier."""

from __future__ import annotations

from kvfuzz.fuzz.unified.host_lockstep import HostLockstep
from kvfuzz.fuzz.unified.lockstep import UnifiedLockstep
from kvfuzz.fuzz.unified.mamba_lockstep import MambaLockstep
from kvfuzz.fuzz.unified.swa_lockstep import SWALockstep


class ByComponents(UnifiedLockstep):
    """The unified target's judge: `UnifiedLockstep` (the radix model) for a full-attention
    trace, `SWALockstep` for a trace with the SWA component's window, `MambaLockstep` for one
    with the Mamba component, `HostLockstep` for one with the host tier."""

    def __new__(cls, trace, *args, **options):
        if getattr(trace, "host_size", 0):
            judge_class = HostLockstep
        elif getattr(trace, "mamba_slots", 0):
            judge_class = MambaLockstep
        elif getattr(trace, "window", 0):
            judge_class = SWALockstep
        else:
            return super().__new__(cls)
        judge = object.__new__(judge_class)  # not a ByComponents: __init__ is called here
        judge.__init__(trace, *args, **options)
        return judge
