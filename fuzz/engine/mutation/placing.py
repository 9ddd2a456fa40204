"""A mutant put in place: the mutated file compiled under the original's name, and each function
whose code it changed gets the new code object in place (`function.__code__`), in the live
module, in a process forked for that mutant alone. Every caller reaches the mutated code
however it found the function (a registry, a module-level name, a bound method), and every
other name resolves as released: the module's own globals are the function's.

Two compilations are compared without their line tables: a mutant whose functions compile to
the same instructions, names and constants as the original is equivalent, and never runs."""

from __future__ import annotations

import types

_OPTIMIZED = 0x1  # CO_OPTIMIZED: a function's code, not a class body's or a module's


def shape(code: types.CodeType) -> tuple:
    """What a code object does, without where: line numbers and the file left out."""
    consts = tuple(shape(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars,
            code.co_cellvars, code.co_exceptiontable, consts)


def functions(code: types.CodeType) -> dict[tuple[str, int], types.CodeType]:
    """Every function's code object in a compiled module, by (qualified name, ordinal among
    those of that name in source order: a property's getter and setter share one)."""
    found: dict[tuple[str, int], types.CodeType] = {}
    seen: dict[str, int] = {}

    def walk(parent: types.CodeType) -> None:
        for const in parent.co_consts:
            if isinstance(const, types.CodeType) and const.co_flags & _OPTIMIZED:
                ordinal = seen.get(const.co_qualname, 0)
                seen[const.co_qualname] = ordinal + 1
                found[(const.co_qualname, ordinal)] = const
            if isinstance(const, types.CodeType):  # a class body holds its methods
                walk(const)

    walk(code)
    return found


def live_functions(module: types.ModuleType) -> dict[tuple[str, int], types.FunctionType]:
    """The module's functions and its classes' methods as objects (unwrapped from staticmethod,
    classmethod, property and `functools.wraps` decorators), keyed as `functions` keys them."""
    found: dict[tuple[str, int], types.FunctionType] = {}
    by_name: dict[str, list] = {}

    def add(obj, depth: int = 0) -> None:
        for _ in range(8):  # decorators that keep the function they wrap
            obj = getattr(obj, "__wrapped__", None) or getattr(obj, "__func__", None) or obj
            if isinstance(obj, types.FunctionType):
                break
        if isinstance(obj, property):
            for part in (obj.fget, obj.fset, obj.fdel):
                if part is not None:
                    add(part, depth)
        elif isinstance(obj, types.FunctionType) and obj.__code__.co_filename == path:
            by_name.setdefault(obj.__code__.co_qualname, []).append(obj)
        elif isinstance(obj, type) and obj.__module__ == module.__name__ and depth < 4:
            for member in vars(obj).values():
                add(member, depth + 1)

    path = module.__file__
    for value in list(vars(module).values()):
        add(value)
    for name, objs in by_name.items():
        unique = sorted({id(f): f for f in objs}.values(), key=lambda f: f.__code__.co_firstlineno)
        for ordinal, function in enumerate(unique):
            found[(name, ordinal)] = function
    return found


class NotPlaced(Exception):
    """The mutant cannot be put in place (its function has no live object, a changed closure)."""


def place(module: types.ModuleType, original: dict, mutated_source: str) -> list[str]:
    """Put `mutated_source` (the module's file, mutated) in place in `module`; the qualified
    names whose code changed ([] for an equivalent mutant). `original` is
    `functions(compile(original source))`."""
    return [key[0] for key in place_code(module, original, mutated_source)]


def place_code(module: types.ModuleType, original: dict, mutated_source: str,
               compiled: types.CodeType | None = None) -> dict:
    """`place`, answering with the code objects put in place, by (qualified name, ordinal).
    With `compiled` (the mutated file compiled otherwise: `marking.marked`), what changed is
    still judged on `mutated_source`, and the functions put in place come from `compiled`."""
    mutated = functions(compile(mutated_source, module.__file__, "exec"))
    changed = [key for key, code in mutated.items()
               if key not in original or shape(code) != shape(original[key])]
    if not changed:
        return {}
    if compiled is not None:
        mutated = functions(compiled)
    live = live_functions(module)
    outermost = [key for key in changed if "<locals>" not in key[0]]
    if not outermost:
        raise NotPlaced(f"{changed[0][0]} is nested in no function kvfuzz can reach")
    for key in outermost:
        function = live.get(key)
        if function is None:
            raise NotPlaced(f"{key[0]} has no function object in {module.__name__} (a decorator "
                            f"that hides it, or it is built at run time)")
        try:
            function.__code__ = mutated[key]
        except ValueError as error:  # the mutation changed what the function closes over
            raise NotPlaced(f"{key[0]}: {error}") from None
    return {key: mutated[key] for key in outermost}
