"""Broken variants of the released vLLM `KVCacheManager` (vllm 0.33.0) and the objects it is made
of (its coordinator, its single-type managers, its block pool): ONE edit inside one method each
(`impl/source_mutation.py`), built on first use. They need vllm installed.

The manager builds its parts through registries and module-level names, so a mutant cannot swap
in an edited module. Instead the edited method is compiled from the edited source and bound to
the manager's own part objects after construction, with the ORIGINAL module's globals (so every
other name it uses is the released one): exactly one edit, everything else as released. A
classmethod called through its class (`find_longest_cache_hit`) cannot be reached this way;
its callers on the coordinator can."""

from __future__ import annotations

import ast
import functools
import importlib
import types
from pathlib import Path

from kvfuzz.impl.source_mutation import Mutation, mutant_module
from kvfuzz.impl.upstream_env import prepare_import

from kvfuzz.impl.kvmanager.mutant_catalogue import (  # noqa: F401 (read from here too)
    COORDINATOR, CORE, HISPARSE, MANAGER, POOL, SINGLE, UTILS)
from kvfuzz.impl.kvmanager.mutant_catalogue_groups import GROUPS
from kvfuzz.impl.kvmanager.mutant_catalogue_keys import ALONE_MUTATIONS, HASHING

# name -> (module, mutation), in the catalogue's order (its tests and `kvfuzz mutate` read it so)
MUTATIONS = {**CORE, **GROUPS, **HASHING}



def _rebind(function, original_module, original_class):
    """`function` (from the edited copy) with the original module's globals, and `super()`
    resolving against the original class."""
    cells = []
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        cells.append(types.CellType(original_class) if name == "__class__" else cell)
    return types.FunctionType(function.__code__, vars(original_module), function.__name__,
                              function.__defaults__, tuple(cells) or None)


# The hasher's call chain, rebound to see the edited function: the factory, its extra keys'
# gatherer and the gatherer's parts (every other name stays the released module's)
HASHER_CHAIN = ("get_request_block_hasher", "generate_block_hash_extra_keys",
                "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys",
                "_gen_prompt_embeds_extra_hash_keys")


def _hasher_mutant(name: str, mutation: Mutation):
    """The released manager with an edited request block hasher factory
    (`request_block_hasher`, which the driver builds its requests' hasher with, as the engine
    builds its own with `get_request_block_hasher`): the edited function from the edited copy,
    the chain that calls it rebound to a namespace where it is found, every other name (the
    hash of a block, NONE_HASH) the released module's own."""
    with prepare_import(UTILS):
        original = importlib.import_module(UTILS)
        manager_module = importlib.import_module(MANAGER)
    scope = dict(vars(original))
    for part in HASHER_CHAIN:
        source = vars(original)[part]
        scope[part] = types.FunctionType(source.__code__, scope, part, source.__defaults__,
                                         source.__closure__)
    # the edited function alone compiled into that namespace (the module's own top level,
    # its dataclasses, never run twice)
    path = Path(original.__file__)
    tree = ast.parse(mutation.apply(path.read_text(), str(path)))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and
                n.name == mutation.scope)
    exec(compile(ast.Module([node], []), f"<{name} of {path}>", "exec"), scope)

    class Mutant(manager_module.KVCacheManager):
        request_block_hasher = staticmethod(scope["get_request_block_hasher"])

    Mutant.__name__ = Mutant.__qualname__ = f"KVCacheManager_{name}"
    return Mutant


# Mutants of a base class's method that a subclass overrides: bound only to the parts whose own
# class does not override it (one edit: the subclass's method stays as released)
# (`new_block_not_zeroed` since 2026-12-08: bound over `MambaManager.allocate_new_blocks` it
# dropped the speculative blocks that override adds outside "align", so the "mamba" profile's
# MTP share caught it as a Mamba table a block short, not as a zeroing record; a Mamba group's
# blocks are never recorded for zeroing, so there the edit is a no-op)
# (`evictable_hits_not_counted` since 2026-12-08 too: bound over `MambaManager.
# get_num_blocks_to_allocate` it dropped the speculative blocks' tokens that override adds
# outside "align", so the allocation then took more blocks than counted and the MTP traces
# crashed inside the release, not at the count the edit is about)
KEEPS_OVERRIDES = {"mtp_reprefillable_cached", "new_block_not_zeroed",
                   "evictable_hits_not_counted"}


def _defines(part, method: str, owner) -> bool:
    """Whether `part`'s `method` is `owner`'s (not a subclass's override)."""
    return next(cls for cls in type(part).__mro__ if method in vars(cls)) is owner


@functools.cache
def _mutant_class(name: str):
    module_name, mutation = MUTATIONS[name] if name in MUTATIONS else ALONE_MUTATIONS[name]
    return mutant_manager(name, module_name, mutation)


def mutant_manager(name: str, module_name: str, mutation: Mutation):
    """The released `KVCacheManager` with `mutation` made to `module_name` (one of the modules
    above), as a catalogue entry's is: public so that a test can build an edit of its own (one
    it holds equivalent, say) exactly as the catalogue builds its mutants. Not cached: a
    catalogue entry's class is, by `_mutant_class`."""
    if module_name == UTILS:
        return _hasher_mutant(name, mutation)
    class_name, method = mutation.scope.split(".")
    with prepare_import(module_name):
        original = importlib.import_module(module_name)
        manager_module = importlib.import_module(MANAGER)
    edited = mutant_module(module_name, mutation, f"vllm_kvmanager_{name}")
    owner = getattr(original, class_name)
    edited_method = vars(getattr(edited, class_name))[method]
    if isinstance(edited_method, classmethod):  # called on the instance, bound to its class
        function = _rebind(edited_method.__func__, original, owner)
        bind = lambda part: types.MethodType(function, type(part))  # noqa: E731
    else:
        function = _rebind(edited_method, original, owner)
        bind = lambda part: types.MethodType(function, part)  # noqa: E731
    base = manager_module.KVCacheManager

    class Mutant(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            coordinator = self.coordinator
            parts = [self, coordinator, self.block_pool, *coordinator.single_type_managers]
            if module_name == HISPARSE and \
                    getattr(self.kv_cache_config, "hisparse_host_num_blocks", None):
                parts.append(original.get_hisparse_coordinator(self))  # (memoised: the driver's)
            for part in parts:
                if isinstance(part, owner) and (name not in KEEPS_OVERRIDES or
                                                _defines(part, method, owner)):
                    setattr(part, method, bind(part))

    Mutant.__name__ = Mutant.__qualname__ = f"KVCacheManager_{name}"
    return Mutant


def __getattr__(name: str):
    """The mutant class `name` (a key of MUTATIONS or ALONE_MUTATIONS)."""
    if name not in MUTATIONS and name not in ALONE_MUTATIONS:
        raise AttributeError(name)
    return _mutant_class(name)
