"""Reduced (joint) coordinates for trees of hinges, sliders and welds: ``coordinates = "reduced"``.

When every dynamic body hangs from the world through a chain of hinge, slider and fixed joints
(a cart-pole, a pendulum with a welded bob, an arm) and nothing can touch, the hinges' and
sliders' coordinates q describe the whole state (a fixed joint has none: its child moves with
its parent), and the motion follows Lagrange's equations

    M(q) q'' = sum_b J_b^T (external and velocity-product forces on body b) + motor - damping q',

with J_b (6, n) body b's Jacobian. The step integrates (q, q') by velocity Verlet (half kick,
drift, half kick; second order, like the maximal engine's kick-drift-kick) and rebuilds the body
poses by forward kinematics. The joints are exact (nothing to solve, nothing drifts: they hold
to round-off). Joint limits and the paper's servos are the constraints: impulses on single
coordinates, in joint space, keep the drift from crossing a limit (the coordinate stops at it,
inelastically) and the stored velocity from pointing through one, and drive a servo's
coordinate at its wanted speed with a bounded impulse. Per world this is a few hundred flops
instead of the maximal engine's constraint systems. The step is written once
(`physics.articulated.step`) and runs in two forms: `reduced_step` on vectors and matrices held
whole ((B, 3) and (B, 3, 3) tensors), the eager form, and `step.unrolled_step` on per-world
scalars, which a compiler fuses into a few loops over the batch (what `physics.ahead_of_time`
builds). The maximal engine, analytic solutions and an ODE integrator are its references.

The State stays the maximal one (body poses and velocities). Each step reads q from it as
`physics.joint_positions` defines it (zero in the initial configuration) and q' as the joint
velocity closest to the bodies' velocities in kinetic energy (the maximal engine's projection onto
its joints; for a state on the joints, the joints' own velocity), so the two formulations are
interchangeable from one step to the next.
"""

from .step import reduced_step
from .tree import ReducedCoordinatesError, Tree, articulated_tree

__all__ = ["ReducedCoordinatesError", "Tree", "articulated_tree", "reduced_step"]
