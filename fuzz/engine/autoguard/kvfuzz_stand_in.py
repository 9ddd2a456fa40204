"""A class's stand-in at an engine's construction site (standard library only: `sitecustomize`
imports it by this top-level name before anything of kvfuzz's is importable). Calling it
builds through `build`; it stays a class for the engine's own `isinstance` and `issubclass`
checks (SGLang asserts its SWA allocator's class right after building it), which answer as
the original's: the objects it builds are the original's, and a guard's proxy passes as its
object's class (`GuardedObject.__class__`)."""


def stand_in(original: type, build) -> type:
    class Site(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, original)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, original)

        def __call__(cls, *args, **kwargs):
            return build(*args, **kwargs)

    return Site(original.__name__, (), {
        "__wrapped__": original, "__module__": original.__module__,
        "__qualname__": original.__qualname__, "__doc__": original.__doc__})
