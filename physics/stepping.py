"""One time step: forces, constraint impulses, integration, joint drift correction.

Scheme (semi-implicit Euler on velocities, then positions):

1. Explicit forces (gravity, motor forces, joint damping): half their kick
   before the constraints, half after (kick-drift-kick), so positions are second-order accurate
   (leapfrog) while the state keeps the velocity at its own time.
2. Constraint impulses at velocity level. Joints are equality rows solved *exactly* (a dense
   Cholesky solve of J M^-1 J^T, a few dozen rows at most) rather than iterated. Contacts, joint
   limits and servos are bounded rows solved by projected Jacobi iterations, clamping the
   *accumulated* impulse, in the space the joints leave free (the bounded rows' Delassus matrix
   after the joint projection, so every sweep is followed by an exact joint projection, as in
   block Gauss-Seidel); each row's step is 1 / sum_j |D_ij| over the active rows (Gershgorin:
   convergent, and exact for a row alone). With no bounded rows, one exact solve is the step.
3. Positions integrate with that velocity; rotations by the exponential of w dt, then one
   Premerlani renormalisation (R <- (3R - R R^T R)/2) to remove round-off. A body whose
   principal moments differ turns at its midpoint spin (its angular momentum carried to the
   half-step rotation), and its spin after the drift is the one with the angular momentum it
   started with: no gyroscopic torque term, and angular momentum conserved in free flight.
4. Joints are then enforced at position level as in SHAKE: quasi-Newton corrections to the
   velocity so that the end-of-step positions satisfy every joint; the correction stays in the
   velocity (it is the centripetal part of the joint force). No Baumgarte term, no drift.
5. The second half kick; bounded rows are relaxed without their penetration bias and
   restitution is applied
   (Box2D v3's solve / relax / restitution split), giving the velocity that is stored.

Contacts are speculative: a candidate at gap d > 0 allows an approach of d/dt in the step, so a
fast body lands on the surface instead of tunnelling into it.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from . import broadphase
from . import joints as joint_geometry
from .actuators import checked_action, clipped_motor_forces, servo_speeds
from .articulated import reduced_step
from .contacts import Contacts, find_contacts, hull_support
from .inertia import body_moments
from .math3d import (
    axis_angle_to_matrix,
    compiling,
    renormalize_rotation,
    spd_inverse,
    tangent_basis,
)
from .rows import (
    Mobility,
    Rows,
    apply_impulse,
    coupling_matrix,
    diagonal,
    effective_matrix,
    point_rows,
    row_velocity,
)
from .state import State
from .world import World

Tensor = torch.Tensor


def mobility(world: World, rotation: Tensor) -> tuple[Mobility, Tensor]:
    """Inverse masses and world-frame inertia of every body slot (world slot last).

    Returns:
        mobility: inv_mass (B, N + 1), inv_inertia (B, N + 1, 3, 3).
        moments: (B, N, 3) principal moments of inertia (kg m^2), body frame.
    """
    batch, count = world.mass.shape
    moments = body_moments(world.mass, world.size, world.structure.shape_groups)
    dynamic = world.structure.dynamic
    inv_mass = torch.where(dynamic, 1.0 / world.mass, 0.0)
    inv_moments = torch.where(dynamic[:, None], 1.0 / torch.where(moments > 0, moments, 1.0), 0.0)
    rotation_t = rotation.transpose(-1, -2)
    inv_inertia = rotation @ (inv_moments[..., None] * rotation_t)
    zero = inv_mass.new_zeros(batch, 1)
    return (
        Mobility(
            torch.cat([inv_mass, zero], 1),
            torch.cat([inv_inertia, inv_inertia.new_zeros(batch, 1, 3, 3)], 1),
        ),
        moments,
    )


@dataclasses.dataclass
class BoundedRows:
    """Rows with bounds on their accumulated impulse, solved iteratively.

    rows: the r rows; weighted: M^-1 J^T for each; active: (B, r) bool.
    lower, upper: (B, r) fixed impulse bounds (N s), or None for friction rows whose bound is
        ``friction * normal impulse`` of row ``normal_of`` in the preceding group; an upper
        bound None with a lower one is +inf (one-sided rows: the sweeps skip that clamp).
    target, relax_target: (B, r) row velocity asked for in the solve and in the relax pass.
    """

    rows: Rows
    weighted: tuple[Tensor, Tensor]
    active: Tensor
    target: Tensor
    relax_target: Tensor
    lower: Tensor | None = None
    upper: Tensor | None = None
    friction: Tensor | None = None
    normal_of: Tensor | None = None
    exact_start: bool = False  # start the sweeps with an exact solve of this group alone
    # Rows of this group that the broadphase left out (never active in the step), with their
    # M^-1 J^T: they still count in the exact start's regulariser scale.
    left_out: tuple[Rows, tuple[Tensor, Tensor]] | None = None


@dataclasses.dataclass
class EqualitySystem:
    """Joint rows with the inverse of their effective matrix, for exact projections."""

    rows: Rows
    weighted: tuple[Tensor, Tensor]
    inverse: Tensor  # (B, m, m)
    target: Tensor | None = None  # (B, m) row velocities to keep; None means zero

    def project(self, velocity: Tensor) -> Tensor:
        """The velocity closest (in the mass metric) to ``velocity`` with J u = target."""
        residual = row_velocity(self.rows, velocity)
        if self.target is not None:
            residual = residual - self.target
        return self.apply(velocity, -residual)

    def apply(self, velocity: Tensor, row_change: Tensor) -> Tensor:
        """Add the impulse that changes the rows' velocities by ``row_change`` (B, m)."""
        impulse = (self.inverse @ row_change[..., None])[..., 0]
        return apply_impulse(velocity, self.rows, self.weighted, impulse)


def _equality_system(world: World, frames, mob: Mobility) -> EqualitySystem | None:
    if not world.joint_names:
        return None
    rows, _ = joint_geometry.equality_rows(world, frames)
    weighted = mob.weighted(rows)
    matrix = effective_matrix(rows, weighted)
    # A tiny relative regulariser keeps redundant rows (closed loops) solvable, like ODE's CFM.
    scale = matrix.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(1e-12)
    eps = 1e-6 if matrix.dtype == torch.float32 else 1e-12
    eye = torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)
    regularised = matrix + (eps * scale)[:, None, None] * eye
    return EqualitySystem(rows, weighted, spd_inverse(regularised))


def _joint_drive(world: World, frames, action: Tensor | None, mob: Mobility, velocity: Tensor):
    """Force motors and damping as a velocity increment, and the servo and limit rows.

    Args:
        velocity: (B, N + 1, 6) at the start of the step (damping uses it).

    Returns:
        kick: (B, N + 1, 6) velocity change over a whole step from motor forces and damping.
        servos: list of BoundedRows (at most one group).
        limits: None, or (rows, weighted, gap) of the one-sided limit rows.
    """
    if not world.joint_names:
        return torch.zeros_like(velocity), [], None
    dt = world.timestep
    rows, q = joint_geometry.axis_rows(world, frames)
    weighted = mob.weighted(rows)
    q_dot = row_velocity(rows, velocity)
    generalised = -world.joint_damping * q_dot  # (B, J) N or N m
    groups = []
    structure = world.structure
    if world.actuator_names:
        action = checked_action(world, action, q)
        if structure.force_actuators.numel():
            generalised = generalised.index_add(
                1, structure.force_joints, clipped_motor_forces(world, action)
            )
        if structure.servo_actuators.numel():
            joint = structure.servo_joints
            wanted, bound = servo_speeds(world, action, q.index_select(1, joint))
            groups.append(
                BoundedRows(
                    _select_rows(rows, joint),
                    (weighted[0].index_select(1, joint), weighted[1].index_select(1, joint)),
                    active=torch.ones_like(wanted, dtype=torch.bool),
                    target=wanted,
                    relax_target=wanted,
                    lower=-bound,
                    upper=bound,
                )
            )
    kick = apply_impulse(torch.zeros_like(velocity), rows, weighted, generalised * dt)

    limits = None
    if structure.limited_joints.numel():
        limited, joint, sign = structure.limited_joints, structure.limit_rows, structure.limit_sign
        q_limited = q.index_select(1, limited)
        # Gap to each limit (>= 0 inside), as a one-sided row along +axis (lower) or -axis.
        gap = torch.cat(
            [
                q_limited - world.joint_lower.index_select(1, limited),
                world.joint_upper.index_select(1, limited) - q_limited,
            ],
            1,
        )
        selected = _select_rows(rows, joint)
        limit_rows = Rows(
            selected.body_a,
            selected.body_b,
            selected.jac_a * sign[:, None],
            selected.jac_b * sign[:, None],
        )
        limit_weighted = (
            weighted[0].index_select(1, joint) * sign[:, None],
            weighted[1].index_select(1, joint) * sign[:, None],
        )
        limits = (limit_rows, limit_weighted, gap)
    return kick, groups, limits


def _select_rows(rows: Rows, index: Tensor) -> Rows:
    return Rows(
        rows.body_a[index],
        rows.body_b[index],
        rows.jac_a.index_select(1, index),
        rows.jac_b.index_select(1, index),
    )


def _active(world: World, gap: Tensor, approach: Tensor) -> Tensor:
    """(B, r) bool: the one-sided rows that may get an impulse in the step: those whose gap the
    approach can close to within the slop (speculative contacts). The others get none."""
    return gap + torch.clamp(approach, max=0.0) * world.timestep < world.contact_slop


def _select_contacts(contacts: Contacts, index: Tensor) -> Contacts:
    """The candidates ``index`` (c',) of ``contacts``."""
    return Contacts(
        contacts.body_a[index],
        contacts.body_b[index],
        *(
            None if t is None else t.index_select(1, index)
            for t in (
                contacts.normal, contacts.point, contacts.distance, contacts.friction,
                contacts.restitution, contacts.valid,
            )
        ),
    )  # fmt: skip


def _one_sided(world: World, rows, weighted, gap, approach, restitution) -> BoundedRows:
    """A non-penetration group: impulse >= 0, speculative for gap > 0.

    Args:
        gap: (B, r) signed distance (m); approach: (B, r) row velocity before constraints.
        restitution: (B, r) or None.
    """
    dt = world.timestep
    active = _active(world, gap, approach)
    # Solve: close an open gap exactly in this step; push out a fraction of a penetration.
    speculative = -torch.clamp(gap, min=0.0) / dt
    recover = -world.penetration_recovery * torch.clamp(gap, max=0.0) / dt
    target = speculative + recover
    relax = speculative
    if restitution is not None:
        impact = (approach < -world.restitution_threshold) & (gap + approach * dt < 0)
        relax = torch.where(impact, torch.maximum(relax, -restitution * approach), relax)
    # No upper bound (None: +inf, a clamp the sweeps skip).
    return BoundedRows(rows, weighted, active, target, relax, lower=torch.zeros_like(gap))


def _contact_groups(
    world: World, contacts, mob: Mobility, position: Tensor, velocity: Tensor, cut: bool = False
):
    """Normal and friction groups of the contact candidates. With ``cut``, only the rows
    active in some world of the batch (`physics.broadphase`): an inactive row never gets an
    impulse, so the solve is the same without it ([] when no row is active anywhere)."""
    if contacts.body_a.numel() == 0:
        return []
    positions = torch.cat([position, position.new_zeros(position.shape[0], 1, 3)], 1)
    lever_a = contacts.point - positions.index_select(1, contacts.body_a)
    lever_b = contacts.point - positions.index_select(1, contacts.body_b)
    normal_rows = point_rows(contacts.body_a, contacts.body_b, contacts.normal, lever_a, lever_b)
    normal_weighted = mob.weighted(normal_rows)
    approach = row_velocity(normal_rows, velocity)
    hull_rows = world.structure.hull_plane_rows
    if hull_rows is not None:
        # A hull's few points that support it in this step (`physics.contacts.hull_support`).
        reach = contacts.distance + torch.clamp(approach, max=0.0) * world.timestep
        support = hull_support(reach, lever_b, contacts.normal, hull_rows)
        valid = support if contacts.valid is None else contacts.valid & support
        contacts = dataclasses.replace(contacts, valid=valid)
    left_out = None
    if cut:
        with torch.no_grad():
            active = _active(world, contacts.distance, approach)
            if contacts.valid is not None:
                active = active & contacts.valid
            rows = broadphase.acting_rows(active)
        if rows is not None:
            keep, drop = rows
            if keep.numel() == 0:
                return []
            # The rows left out still count in the exact start's regulariser (its scale).
            left_out = (
                _select_rows(normal_rows, drop),
                tuple(w.index_select(1, drop) for w in normal_weighted),
            )
            contacts = _select_contacts(contacts, keep)
            normal_rows = _select_rows(normal_rows, keep)
            normal_weighted = tuple(w.index_select(1, keep) for w in normal_weighted)
            lever_a, lever_b = lever_a.index_select(1, keep), lever_b.index_select(1, keep)
            approach = approach.index_select(1, keep)
    normal = _one_sided(
        world, normal_rows, normal_weighted, contacts.distance, approach, contacts.restitution
    )
    normal.exact_start = True
    normal.left_out = left_out
    if contacts.valid is not None:
        normal.active = normal.active & contacts.valid  # padded manifold slots never act

    first, second = tangent_basis(contacts.normal)
    tangents = torch.stack([first, second], 2).flatten(1, 2)  # (B, 2c, 3)
    body_a = contacts.body_a.repeat_interleave(2)
    body_b = contacts.body_b.repeat_interleave(2)
    friction_rows = point_rows(
        body_a, body_b, tangents, lever_a.repeat_interleave(2, 1), lever_b.repeat_interleave(2, 1)
    )
    active = normal.active.repeat_interleave(2, 1)
    zero = torch.zeros_like(active, dtype=velocity.dtype)
    friction = BoundedRows(
        friction_rows,
        mob.weighted(friction_rows),
        active,
        target=zero,
        relax_target=zero,
        friction=contacts.friction.repeat_interleave(2, 1),
        normal_of=torch.arange(contacts.body_a.numel(), device=velocity.device).repeat_interleave(
            2
        ),
    )
    return [normal, friction]


@dataclasses.dataclass
class SweepSystem:
    """What the sweeps over a set of bounded groups need besides the velocity: the rows, their
    joint-projected Delassus matrix D (B, r, r), each group's span of rows, which rows are
    usable, the Jacobi step sizes, and each exact-start group's masked block and the inverse
    of its regularised normal matrix (`_exact_start`). It depends on the rows, the masses and
    the joints only, so a step without joints builds it once for its solve and relax passes."""

    rows: Rows
    weighted: tuple[Tensor, Tensor]
    delassus: Tensor
    spans: list[slice]
    usable: Tensor
    split: Tensor
    exact: dict[int, tuple[Tensor, Tensor]]


def _sweep_system(groups, equality) -> SweepSystem:
    rows = Rows.cat([g.rows for g in groups])
    weighted = tuple(torch.cat([g.weighted[k] for g in groups], 1) for k in (0, 1))
    delassus = coupling_matrix(rows, rows, weighted)
    free_diagonal = delassus.diagonal(dim1=-2, dim2=-1)
    if equality is not None:
        to_joints = coupling_matrix(equality.rows, rows, weighted)  # (B, m, r)
        from_joints = coupling_matrix(rows, equality.rows, equality.weighted)  # (B, r, m)
        delassus = delassus - from_joints @ (equality.inverse @ to_joints)
    counts = [g.rows.count for g in groups]
    spans = [
        slice(end - c, end) for c, end in zip(counts, itertools.accumulate(counts), strict=True)
    ]
    # Jacobi step sizes 1 / sum_j |D_ij| over the active rows j: the eigenvalues of the
    # scaled D then lie in (0, 1] (Gershgorin), so the sweeps converge, and a row that is
    # alone (a cart at its stop) is solved exactly in one sweep. Rows the joints hold still
    # (D_ii ~ 0) get no impulse.
    active = torch.cat([g.active for g in groups], 1)
    spread = (delassus.abs() * active[:, None, :].to(delassus.dtype)).sum(-1)
    usable = active & (delassus.diagonal(dim1=-2, dim2=-1) > 1e-6 * free_diagonal)
    usable = usable & (spread > 1e-12)
    split = torch.where(usable, 1.0 / torch.where(usable, spread, 1.0), 0.0)
    exact = {
        index: _exact_start_matrix(
            delassus[:, span, span], usable[:, span], _left_out_diagonal(group, equality)
        )
        for index, (group, span) in enumerate(zip(groups, spans, strict=True))
        if group.exact_start
    }
    return SweepSystem(rows, weighted, delassus, spans, usable, split, exact)


def _friction_clamp(impulse: Tensor, bound: Tensor) -> Tensor:
    """A friction row's accumulated impulse (B, r, 1) clamped to [-bound, bound].

    Where the bound is zero (no friction, or no normal impulse) and the row asks for no impulse
    either (no slip: a sphere or box moving straight onto a surface, or resting on it), both
    clamps tie, and torch.maximum and torch.minimum each pass half their gradient to either
    side: a quarter of it would reach the row's velocity and another the normal impulse, though
    the impulse stays zero when either moves alone. It gets no gradient there; the values are
    the clamp's."""
    clamped = torch.minimum(torch.maximum(impulse, -bound), bound)
    return torch.where((bound == 0) & (impulse == 0), 0.0, clamped)


def _solve(groups, equality, velocity, impulses, iterations: int, relax: bool, system=None):
    """Projected Jacobi sweeps over the bounded groups, each followed by a joint projection.

    The sweeps run in row space: the velocity of the bounded rows after the joint projection
    is an affine function of their impulses, v = v0 + D lambda with D = J_b P M^-1 J_b^T (P:
    the projection onto the joints), so a sweep is one (B, r, r) product instead of a scatter
    onto the bodies and a projection: the iterates of sweeping body velocities and projecting
    after each group, for fewer operations.

    Args:
        groups: list of `BoundedRows`, swept in order (a friction group after its normals).
        equality: `EqualitySystem` of the joints or None.
        velocity: (B, N + 1, 6) before the bounded rows.
        impulses: list of (B, r_g) accumulated impulses, one per group (the warm start; their
            effect is already in ``velocity``).
        iterations: sweeps.
        relax: sweep towards each group's ``relax_target`` instead of its ``target``.
        system: the groups' `SweepSystem` with this ``equality``, or None to build it.

    Returns:
        velocity (B, N + 1, 6) after the impulses and the projection, the new list of
        accumulated impulses, and the `SweepSystem`.
    """
    if equality is not None:
        velocity = equality.project(velocity)
    if system is None:
        system = _sweep_system(groups, equality)
    rows, weighted, spans = system.rows, system.weighted, system.spans
    # Column form (B, r, 1) throughout, so that each row-velocity update is one baddbmm.
    row_vel = row_velocity(rows, velocity)[..., None]
    start = torch.cat(impulses, 1)
    impulses = [impulse[..., None] for impulse in impulses]
    row_vel = _exact_start(groups, system, row_vel, impulses, relax)
    # What each group's update needs, sliced once for all the sweeps.
    parts = [
        (
            system.split[:, span, None],
            system.delassus[:, :, span],
            (group.relax_target if relax else group.target)[..., None],
            *_bounds(group),
        )
        for group, span in zip(groups, spans, strict=True)
    ]
    for _ in range(iterations):
        normal_impulse = None
        for index, (group, span) in enumerate(zip(groups, spans, strict=True)):
            split, columns, target, lower, upper = parts[index]
            updated = torch.addcmul(impulses[index], split, target - row_vel[:, span])
            if group.friction is not None:
                bound = lower * normal_impulse.index_select(1, group.normal_of)
                updated = _friction_clamp(updated, bound)
            else:
                updated = torch.maximum(updated, lower)
                if upper is not None:
                    updated = torch.minimum(updated, upper)
            row_vel = torch.baddbmm(row_vel, columns, updated - impulses[index])
            impulses[index] = updated
            normal_impulse = updated
    impulses = [impulse[..., 0] for impulse in impulses]
    velocity = apply_impulse(velocity, rows, weighted, torch.cat(impulses, 1) - start)
    if equality is not None:
        velocity = equality.project(velocity)
    return velocity, impulses, system


def _bounds(group: BoundedRows) -> tuple[Tensor, Tensor | None]:
    """A group's bounds as columns (B, r, 1): (lower, upper), upper None when it is +inf for
    every row (a one-sided group); a friction group's (coefficient, None)."""
    if group.friction is not None:
        return group.friction[..., None], None
    return group.lower[..., None], None if group.upper is None else group.upper[..., None]


def _left_out_diagonal(group: BoundedRows, equality) -> Tensor | None:
    """The diagonal (B, d) of the joint-projected Delassus matrix over the rows of ``group``
    that the broadphase left out, or None."""
    if group.left_out is None:
        return None
    rows, weighted = group.left_out
    result = diagonal(rows, weighted)
    if equality is not None:
        from_joints = coupling_matrix(rows, equality.rows, equality.weighted)  # (B, d, m)
        to_joints = coupling_matrix(equality.rows, rows, weighted)  # (B, m, d)
        result = result - ((from_joints @ equality.inverse) * to_joints.transpose(1, 2)).sum(-1)
    return result


def _exact_start_matrix(
    block: Tensor, usable: Tensor, left_out: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """A group's Delassus block (B, g, g) masked to its usable rows, and the inverse of the
    regularised normal matrix of `_exact_start`'s least-squares solve. ``left_out`` (B, d):
    the diagonal over the group's rows the broadphase left out, which count in the
    regulariser's scale (the mean diagonal over every candidate row)."""
    active = usable.to(block.dtype)
    eye = torch.eye(block.shape[-1], dtype=block.dtype, device=block.device)
    diagonal = block.diagonal(dim1=-2, dim2=-1).abs()
    if left_out is None:
        scale = diagonal.mean(-1).clamp_min(1e-12)
    else:
        total = diagonal.sum(-1) + left_out.abs().sum(-1)
        scale = (total / (block.shape[-1] + left_out.shape[-1])).clamp_min(1e-12)
    eps = 1e-3 if block.dtype == torch.float32 else 1e-4
    masked = block * active[:, :, None] * active[:, None, :]
    # Least squares (D^2 + eps I) x = D b rather than (D + eps I) x = b: targets that no
    # rigid motion meets (four corners asking for different speeds) have a part in D's
    # null space, which the latter would amplify by 1/eps into opposing impulses.
    matrix = masked @ masked + eye * (1 - active)[:, None]
    matrix = matrix + (eps * scale * scale)[:, None, None] * eye
    return masked, spd_inverse(matrix)


def _exact_start(groups, system: SweepSystem, row_vel, impulses, relax: bool) -> Tensor:
    """Start the contact normals (``exact_start`` groups) from the exact solution of their own
    rows: the impulse change that gives every usable row its target velocity (a Cholesky solve
    of the group's Delassus block over the usable rows, in the least-squares sense for
    redundant rows, e.g. 4 coplanar points of a box face), clamped to the bounds. The sweeps
    then correct the clamping and add friction. Without it, Jacobi sweeps that start from zero
    every step cannot carry a stack's weight down to the floor: a 5-box stack sank 5 cm at 20
    sweeps. A contact alone is solved as by one sweep. Updates ``impulses`` in place; returns
    the row velocities after the change."""
    for index, (group, span) in enumerate(zip(groups, system.spans, strict=True)):
        if not group.exact_start:
            continue
        masked, inverse = system.exact[index]
        active = system.usable[:, span, None].to(masked.dtype)
        target = (group.relax_target if relax else group.target)[..., None]
        wanted = masked @ (active * (target - row_vel[:, span]))
        lower, upper = _bounds(group)
        updated = torch.maximum(impulses[index] + inverse @ wanted, lower)
        if upper is not None:
            updated = torch.minimum(updated, upper)
        row_vel = torch.baddbmm(row_vel, system.delassus[:, :, span], updated - impulses[index])
        impulses[index] = updated
    return row_vel


def _has_contact_candidates(world: World) -> bool:
    structure = world.structure
    return any(
        index.numel()
        for index in (
            structure.plane_contact_plane,
            structure.segment_contact_a,
            structure.box_contact_a,
            structure.box_segment_box,
            structure.hull_contact_a,
            structure.hull_segment_hull,
        )
    )


def _needs_sweep(groups: list[BoundedRows]) -> bool:
    """Whether the bounded groups need the iterative solve: some row active somewhere in the
    batch. Always on an accelerator (a step never waits for the device: the check would be a
    host sync) and under torch.compile (which cannot branch on data); on the CPU the check
    costs nothing but the reduction."""
    if not groups:
        return False
    if compiling() or groups[0].active.device.type != "cpu":
        return True
    return any(bool(g.active.any()) for g in groups)


@dataclasses.dataclass(frozen=True)
class Spin:
    """What a drift needs to carry the bodies' angular momentum across their rotation.

    moments: (B, N, 3) principal moments of inertia (kg m^2), body frame.
    tumbles: (B, N, 1) bool, dynamic bodies with unequal principal moments: their spin
        changes as they turn (an isotropic body's spin is its momentum over one moment).
    """

    moments: Tensor
    tumbles: Tensor

    def momentum(self, rotation: Tensor, spin: Tensor) -> Tensor:
        """World-frame angular momentum (B, N, 3) of spins (B, N, 3) at rotations (B, N, 3, 3)."""
        local = (rotation.transpose(-1, -2) @ spin[..., None])[..., 0]
        return (rotation @ (self.moments * local)[..., None])[..., 0]

    def spin(self, rotation: Tensor, momentum: Tensor) -> Tensor:
        """The spin (B, N, 3) that has world-frame angular momentum ``momentum`` at ``rotation``."""
        local = (rotation.transpose(-1, -2) @ momentum[..., None])[..., 0]
        safe = torch.where(self.tumbles, self.moments, 1.0)
        return (rotation @ (local / safe)[..., None])[..., 0]

    def carried(self, start: Tensor, end: Tensor, spin: Tensor) -> Tensor:
        """Spin at ``end`` of the tumbling bodies that had ``spin`` at ``start`` (torque-free)."""
        return torch.where(self.tumbles, self.spin(end, self.momentum(start, spin)), spin)


def _spin(world: World, moments: Tensor, rotation: Tensor) -> Spin | None:
    """The drift's angular-momentum carrier for principal moments (B, N, 3), or None when no
    body of the batch tumbles (eager on the CPU only: a compiled or GPU step always carries,
    without a branch)."""
    spread = moments.amax(-1, keepdim=True) - moments.amin(-1, keepdim=True)
    dynamic = world.structure.dynamic[None, :, None]
    tumbles = dynamic & (spread > 1e-9 * moments.amax(-1, keepdim=True))
    if not compiling() and rotation.device.type == "cpu" and not bool(tumbles.any()):
        return None
    return Spin(moments, tumbles)


def _integrate(position: Tensor, rotation: Tensor, velocity: Tensor, dt: float, spin: Spin | None):
    """Positions and rotations after dt at generalised velocity (B, N, 6).

    A tumbling body turns at its spin at the middle of the drift (explicit midpoint: its
    angular momentum carried to the half-step rotation), which keeps the rotation
    second-order accurate while the spin changes direction within the step.
    """
    position = position + dt * velocity[..., :3]
    turn = velocity[..., 3:]
    if spin is not None:
        halfway = axis_angle_to_matrix(0.5 * dt * turn) @ rotation
        turn = spin.carried(rotation, halfway, turn)
    rotation = axis_angle_to_matrix(dt * turn) @ rotation
    return position, rotation


def step(world: World, state: State, action: Tensor | None = None) -> State:
    """Advance every world in the batch by one timestep.

    A world built with ``coordinates = "reduced"`` steps in joint coordinates
    (`physics.articulated.reduced_step`); otherwise the maximal engine described above.

    Args:
        world: the model (B worlds).
        state: poses and velocities, (B, N, ...).
        action: (B, A) one column per actuator in ``world.actuator_names`` order: a force
            motor's force (N) or torque (N m), a servo's target position (m, rad) or velocity.
            None means zero for force motors and "hold the initial configuration" for servos.

    Returns:
        The state one timestep later. Pure: nothing is modified in place.
    """
    if world.structure.tree is not None:
        return reduced_step(world, state, action)
    dt = world.timestep
    batch, count = state.position.shape[:2]
    dynamic = world.structure.dynamic[None, :, None]
    mob, moments = mobility(world, state.rotation)

    # 1. Explicit forces, as the velocity change they make over the whole step. Half of it is
    # applied before the constraints and half after (kick-drift-kick, as in velocity Verlet):
    # positions then follow leapfrog, second-order accurate, while the stored velocity is the
    # velocity at the state's own time.
    velocity = torch.cat([state.linear_velocity, state.angular_velocity], -1)
    velocity = torch.cat([velocity, velocity.new_zeros(batch, 1, 6)], 1)  # (B, N + 1, 6)
    # No gyroscopic torque: the drift carries each body's angular momentum across its
    # rotation instead (`Spin`), which conserves it exactly in free flight.
    spin = _spin(world, moments, state.rotation)
    linear_kick = (dt * world.gravity[:, None, :]).expand(batch, count, 3)
    kick = torch.cat(
        [
            torch.where(dynamic, linear_kick, 0.0),
            velocity.new_zeros(batch, count, 3),
        ],
        -1,
    )
    kick = torch.cat([kick, velocity.new_zeros(batch, 1, 6)], 1)

    frames = (
        joint_geometry.joint_frames(world, state.position, state.rotation)
        if world.joint_names
        else None
    )
    joint_kick, groups, limits = _joint_drive(world, frames, action, mob, velocity)
    kick = kick + joint_kick
    velocity = velocity + 0.5 * kick
    if limits is not None:
        rows, weighted, gap = limits
        groups.append(_one_sided(world, rows, weighted, gap, row_velocity(rows, velocity), None))
    # Groups of bounded rows exist (servos, limits, contact candidates), whether or not the
    # broadphase leaves any contact row in this step: step 4 depends on it.
    bounded = bool(groups) or _has_contact_candidates(world)
    contacts = find_contacts(world, state.position, state.rotation)
    # The broadphase (eager, CPU) leaves out the contact rows that cannot act in this step
    # before the solver's matrices are built (`physics.broadphase`).
    cut = broadphase.enabled(world, velocity.device)
    groups += _contact_groups(world, contacts, mob, state.position, velocity, cut)
    equality = _equality_system(world, frames, mob) if frames is not None else None

    # 2. Constraint impulses.
    # Eager on the CPU only: when no bounded row is active anywhere in the batch (a cart
    # far from its rail limits, no contact), every sweep leaves the impulses at zero and the
    # velocity unchanged, and the joint projection after it is idempotent: the iterations are
    # one projection. Skipping them gives the same step (to round-off) at a fraction of the
    # cost; the end-of-step system (step 4) is still built as with bounded rows.
    sweep = _needs_sweep(groups)
    if sweep:
        impulses = [torch.zeros_like(g.target) for g in groups]
        velocity, impulses, system = _solve(
            groups, equality, velocity, impulses, world.solver_iterations, False
        )
    elif equality is not None:
        velocity = equality.project(velocity)

    # 3. Joints at position level (SHAKE): the velocity that carries every joint exactly onto
    # its constraint at the end of the step, by quasi-Newton corrections with the start-of-step
    # Jacobian. The correction is kept in the velocity: it is the centripetal part of the joint
    # force, without which a velocity-level projection bleeds energy at every step.
    position, rotation = _integrate(state.position, state.rotation, velocity[:, :count], dt, spin)
    if equality is not None:
        for _ in range(world.joint_position_iterations):
            frames = joint_geometry.joint_frames(world, position, rotation)
            _, error = joint_geometry.equality_rows(world, frames)
            velocity = equality.apply(velocity, -error / dt)
            position, rotation = _integrate(
                state.position, state.rotation, velocity[:, :count], dt, spin
            )
    rotation = renormalize_rotation(rotation)
    if spin is not None:
        # The spin at the new rotation with the angular momentum the drift started with.
        carried = spin.carried(state.rotation, rotation, velocity[:, :count, 3:])
        bodies = torch.cat([velocity[:, :count, :3], carried], -1)
        velocity = torch.cat([bodies, velocity[:, count:]], 1)

    # 4. The stored velocity must be tangent to the joints at the *new* configuration (RATTLE).
    if equality is not None:
        end_frames = joint_geometry.joint_frames(world, position, rotation)
        if bounded:
            # The relax pass projects after every sweep: that needs an exact projection.
            end_mobility, _ = mobility(world, rotation)
            equality = _equality_system(world, end_frames, end_mobility)
        else:
            # One quasi-Newton projection: the new rows with the start-of-step effective mass
            # (rebuilding and factorising it costs more and changed no measured figure).
            end_rows, _ = joint_geometry.equality_rows(world, end_frames)
            equality = EqualitySystem(end_rows, mob.weighted(end_rows), equality.inverse)

    # 5. The second half of the explicit kick; then relax the bounded rows without their
    # penetration bias, with restitution, projecting onto the joints after every sweep.
    velocity = velocity + 0.5 * kick
    if sweep:
        # Without joints the relax pass sweeps the same system (rows, masses) as the solve.
        reuse = system if equality is None else None
        velocity, _, _ = _solve(
            groups, equality, velocity, impulses, world.relax_iterations, True, reuse
        )
    elif equality is not None:
        velocity = equality.project(velocity)

    velocity = velocity[:, :count]
    # Contiguous velocities, laid out as `initial_state`'s: a compiled step is then not
    # compiled again for the second step's strides (views of the (B, N, 6) buffer would be).
    return State(
        position=torch.where(dynamic, position, state.position),
        rotation=torch.where(dynamic[..., None], rotation, state.rotation),
        linear_velocity=velocity[..., :3].contiguous(),
        angular_velocity=velocity[..., 3:].contiguous(),
    )


__all__ = ["mobility", "spd_inverse", "step"]
