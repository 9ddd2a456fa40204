"""The judge apart from the judged: in a worker, every implementation runs in a process of its
own (`impl_process.py`), one per implementation, and the judge (the oracle, the lock step, the
comparison) sees it only through proxies. What crosses is plain data, checked on arrival
(`plain`): an implementation cannot patch the comparison, lie through a tensor subclass, or
leave a global patched (`torch.cumsum`) for the next implementation, because none of those live
in its process.

A target's judge reaches its implementation through three doors, the same in a worker and in a
test that calls `Target.check` in its own process (there they are plain calls):
- `impl.load()`: the implementation (in a worker: a `RemoteObject`, whose attributes, methods
  and construction are requests on a channel);
- `make(ctor, impl, *args)`: `ctor(impl, *args)` built beside the implementation (a driver that
  turns plain ints into the implementation's tensors), kept there, used by proxy;
- `apply(fn, impl, *args)`: `fn(impl, *args)` run beside it, its plain result sent back.
A channel has one method, `request(kind, oid, *body) -> (kind, value)`: in the implementation's
process a `Recorder` answers it by calling the implementation and records the answer; in the
worker a `Replay` answers the same requests from that record (`impl_process.py`).

What the implementation raises comes back as `RemoteRaised` under the same type name (a
subclass of the builtin of that name where there is one: `getattr(obj, name, default)` and a
judge's `isinstance(raised, ValueError)` work as in one process), with its message and the tail
of its traceback. An end of its check (a crash, a timeout, the memory limit, a corrupt answer)
is `Ended`, a BaseException no guard of a judge catches: the input's outcome is then that
crash (`isolation.guarded_check`).
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import types
import typing

# What a 64-bit word holds, signed or not: slots are int64; block hashes (vLLM) are unsigned.
INT_RANGE = (-(1 << 63), 1 << 64)
MAX_DEPTH = 32


class Ended(BaseException):
    """The implementation's process ended the check: `what` in words, `kind` as a crash kind
    ("SIGSEGV", "exit", "timeout", "memory", "protocol", "KeyboardInterrupt"); `site`, where it
    was (`crash_site.CrashSite`), when that is known."""

    def __init__(self, what: str, kind: str, site=None):
        super().__init__(what)
        self.what, self.kind, self.site = what, kind, site


class RemoteRaised(Exception):
    """An exception the implementation raised in its own process. `remote_frames`: the last
    chunks of its traceback there; `remote_at`: "file:line" of the innermost frame."""

    remote_frames: list[str] = []
    remote_at: str = "?"


class NotPlain(TypeError):
    """A value that is not plain data."""


@functools.lru_cache(maxsize=256)
def raised_class(name: str) -> type:
    """The stand-in class for an exception type named `name`."""
    if not name.isidentifier() or len(name) > 80:
        name = "Exception"
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin is not Exception:
        try:
            return type(name, (RemoteRaised, builtin), {"__module__": "builtins"})
        except TypeError:  # an instance layout that cannot be mixed (OSError's kin)
            pass
    return type(name, (RemoteRaised,), {"__module__": "builtins"})


def remote_error(name: str, message: str, frames: list[str], at: str) -> RemoteRaised:
    error = raised_class(name)(message) if message else raised_class(name)()
    error.remote_frames, error.remote_at = frames, at
    return error


# -- plain data ---------------------------------------------------------------------------------
def plain(value, depth: int = 0) -> int:
    """Raise `NotPlain` unless `value` is plain data: None, bool, int (64 bits), float, str,
    bytes, lists, tuples, sets and dicts of them, and kvfuzz's own data classes whose fields are
    plain and of their declared types. Returns how many values it holds, roughly (a container
    counts its items and itself): what a transcript weighs it by, in the same walk."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    kind = type(value)
    if value is None or kind in (bool, float, str, bytes):
        return 1
    if kind is int:
        if not INT_RANGE[0] <= value < INT_RANGE[1]:
            raise NotPlain(f"an int past 64 bits: {value}")
        return 1
    if kind in (list, tuple, set, frozenset):
        if _all_int(value):  # the common case, slots and pages: checked at C speed
            return len(value) + 1
        count = 1
        for item in value:
            count += plain(item, depth + 1)
        return count
    if isinstance(value, dict) and kind.__module__ in ("builtins", "collections"):
        count = 1
        for key, item in value.items():
            count += plain(key, depth + 1) + plain(item, depth + 1)
        return count
    if dataclasses.is_dataclass(value) and kind.__module__.startswith("kvfuzz."):
        hints, count = _hints(kind), 1
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            count += plain(item, depth + 1)
            if not _fits(item, hints.get(field.name, typing.Any)):
                raise NotPlain(f"{kind.__name__}.{field.name} is a {type(item).__name__}")
        return count
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__}")


def _all_int(values) -> bool:
    """Whether `values` are all ints of 64 bits (False: look at each)."""
    kinds = set(map(type, values))
    if not kinds <= {int}:
        return False
    return not values or (min(values) >= INT_RANGE[0] and max(values) < INT_RANGE[1])


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a hint that does not resolve is not checked
        return {}


def _fits(value, hint) -> bool:
    """Whether `value` has the declared type `hint` (what is not understood here fits)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or isinstance(hint, (str, typing.TypeVar)):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float))
    if origin is None:
        return not isinstance(hint, type) or isinstance(value, hint)
    if origin in (list, set, frozenset) and isinstance(value, origin):
        return not args or (args[0] is int and _all_int(value)) or \
            all(_fits(item, args[0]) for item in value)
    if origin is tuple and isinstance(value, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return (args[0] is int and _all_int(value)) or \
                all(_fits(item, args[0]) for item in value)
        return not args or (len(args) == len(value) and all(map(_fits, value, args)))
    if origin is dict and isinstance(value, dict):
        return not args or all(_fits(k, args[0]) and _fits(v, args[1])
                               for k, v in value.items())
    return isinstance(origin, type) and isinstance(value, origin)


# -- what a judge calls -------------------------------------------------------------------------
class RemoteObject:
    """An object that lives in an implementation's process, reached through `channel` (a
    `Recorder` or a `Replay`), `oid` its id there."""

    def __init__(self, channel, oid: int):
        self.__dict__.update(_channel=channel, _oid=oid)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        kind, value = self._channel.request("getattr", self._oid, name)
        if kind == "callable":  # a method: kept, as a bound method would be looked up again
            method = self.__dict__[name] = RemoteMethod(self._channel, self._oid, name)
            return method
        return value

    def __call__(self, *args, **kwargs):
        """Construction (a class, a factory): the object it builds stays there."""
        return RemoteObject(self._channel, self._channel.request("new", self._oid, args,
                                                                 kwargs)[1])

    def __repr__(self) -> str:
        return f"<object {self._oid} in the implementation's process>"


class RemoteMethod:
    def __init__(self, channel, oid: int, name: str):
        self.channel, self.oid, self.name = channel, oid, name

    def __call__(self, *args, **kwargs):
        return self.channel.request("call", self.oid, self.name, args, kwargs)[1]


def make(ctor, impl, *args):
    """`ctor(impl, *args)`, built where `impl` lives (`ctor`: a module-level kvfuzz callable)."""
    if isinstance(impl, RemoteObject):
        return RemoteObject(impl._channel, impl._channel.request("build", impl._oid, ctor,
                                                                 args)[1])
    return ctor(impl, *args)


def apply(fn, impl, *args):
    """`fn(impl, *args)`, run where `impl` lives; its result must be plain data."""
    if isinstance(impl, RemoteObject):
        return impl._channel.request("apply", impl._oid, fn, args)[1]
    return fn(impl, *args)
