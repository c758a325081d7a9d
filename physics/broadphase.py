"""Broadphase: the contact rows that cannot act in a step, left out of the solve.

Every candidate contact (`physics.collision_pairs`: a box and a plane give 8 corner rows, two
boxes 4 manifold slots, every pair every step, near or far) becomes a normal row and two
friction rows of the solver, whose Delassus matrix and sweeps grow with the square of the row
count. A row acts only when it is *active* (`physics.stepping._active`):

    gap + min(approach, 0) dt < contact_slop,

and an inactive row never gets an impulse: its Jacobi step is zero, its column is left out of
every other row's step size and its row out of the exact start's solve. So the eager step
drops, after the narrowphase and before the solver's matrices are built, the rows inactive in
every world of the batch (a row some world needs is kept for all; the worlds where it is far
keep it inactive, as before), and gives the same step to round-off, values and gradients. The
one place where an inactive row still counted is the exact start's regulariser, whose scale is
the mean diagonal of the Delassus matrix over *every* candidate normal row: the rows dropped
keep counting there (their diagonal alone, a product per row), so that too is unchanged.

The rows kept depend on the data, so the row count varies from step to step: the cut runs in
the eager step on the CPU only (`enabled`). A traced or compiled step (`physics.compiled_step`,
the ahead-of-time builds) and a step on an accelerator (where choosing would be a host sync)
keep every row, as does a world built with ``WorldSpec(broadphase=False)``.
"""

from __future__ import annotations

import torch

from .math3d import compiling

Tensor = torch.Tensor


def enabled(world, device: torch.device) -> bool:
    """Whether this step may leave rows out: the world allows it, eager, on the CPU."""
    return world.broadphase and not compiling() and device.type == "cpu"


def acting_rows(active: Tensor) -> tuple[Tensor, Tensor] | None:
    """The rows (c,) to keep and to leave out, as long indices, given which are active (B, c)
    in each world; None when every row is kept."""
    acting = active.any(0)
    if bool(acting.all()):
        return None
    return acting.nonzero()[:, 0], (~acting).nonzero()[:, 0]
