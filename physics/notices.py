"""What the compiled paths tell the user: a first build announced once, and fallbacks warned
once and kept (`fallbacks`).

Both are log records of the ``physics`` logger family at WARNING (this module's logger,
``physics.notices``), not `warnings.warn`: Python's last-resort handler prints a WARNING record
to stderr when the application configured no logging, so the notice is seen at the default
settings; an application that configures logging routes or silences them like any other
library's (``logging.getLogger("physics").setLevel(logging.ERROR)``); and a test suite that
turns warnings into errors (``-W error``, pytest's ``filterwarnings = error``) does not fail
because a build started or a path fell back. Neither asks the user to change their code, which
is what a warning category would say.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging

from .world import TENSOR_FIELDS, World

log = logging.getLogger(__name__)

#: What a first build costs, as the notice says it.
BUILD_COST = "about 1–3 minutes on a 2-core CPU, once per world structure"


@dataclasses.dataclass(frozen=True)
class Fallback:
    """A route that fell back to another, once per world structure and reason.

    Attributes:
        structure: the world structure's label (formulation, bodies, dtype, device).
        key: the structure's key (a digest: two worlds of one structure share it).
        reason: what failed, a short name ("aot_build", "aot_vjp", "rollout_library",
            "recompile_limit", "world_grad").
        from_path: the route it left: "ahead_of_time" or "compiled".
        to_path: the route it took: "compiled" or "eager" (a rollout's "single steps").
        detail: the message that was logged.
    """

    structure: str
    key: str
    reason: str
    from_path: str
    to_path: str
    detail: str


@dataclasses.dataclass(frozen=True)
class StructureId:
    """A world structure as the notices name it: ``key`` a digest of the world's static
    fields, formulation, dtype and device (worlds that compile to the same code share it),
    ``label`` a short description."""

    key: str
    label: str


def structure_of(world: World) -> StructureId:
    """``world``'s `StructureId`, made once per world object (kept in its ``__dict__``)."""
    found = world.__dict__.get("_structure_id")
    if found is None:
        static = tuple(
            (f.name, repr(getattr(world, f.name)))
            for f in dataclasses.fields(World)
            if f.name not in TENSOR_FIELDS and f.name != "structure"
        )
        formulation = "reduced" if world.structure.tree is not None else "maximal"
        signature = repr((static, formulation, str(world.dtype), str(world.device)))
        names = ", ".join(world.body_names[:5]) + (", ..." if len(world.body_names) > 5 else "")
        dtype = str(world.dtype).removeprefix("torch.")
        found = StructureId(
            hashlib.sha256(signature.encode()).hexdigest()[:16],
            f"a {formulation}-coordinate world of {world.n_bodies} bodies ({names}), {dtype} "
            f"on {world.device}",
        )
        world.__dict__["_structure_id"] = found
    return found


_FALLBACKS: dict[tuple[str, str], Fallback] = {}
_ANNOUNCED: set[str] = set()


def fall_back(
    structure: str, key: str, reason: str, from_path: str, to_path: str, detail: str
) -> bool:
    """Record a fallback and log ``detail`` at WARNING, once per (``key``, ``reason``): True
    the first time, False after (then nothing is logged or recorded)."""
    if (key, reason) in _FALLBACKS:
        return False
    _FALLBACKS[key, reason] = Fallback(structure, key, reason, from_path, to_path, detail)
    log.warning("%s", detail)
    return True


def fallbacks() -> list[Fallback]:
    """The fallbacks this process took, in order, one per world structure and reason (a
    copy)."""
    return list(_FALLBACKS.values())


def fell_back(key: str, reason: str) -> bool:
    """Whether the fallback ``reason`` was taken for the structure ``key``."""
    return (key, reason) in _FALLBACKS


def announce_build(key: str, message: str) -> bool:
    """Log ``message`` (what is being built, its cost and where it is kept) at WARNING before
    the first build of the structure ``key`` in this process: True when it was logged, False
    when that structure was announced before."""
    if key in _ANNOUNCED:
        return False
    _ANNOUNCED.add(key)
    log.warning("%s", message)
    return True


def announced(key: str) -> bool:
    """Whether a build of the structure ``key`` was announced in this process."""
    return key in _ANNOUNCED
