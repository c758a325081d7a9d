"""Small models shared by the physics tests and benchmarks (built through the public API)."""

from __future__ import annotations

import math

import torch

import physics

ROD = {"length": 1.0, "width": 0.02, "mass": 1.0}


def rod_inertia_com(length: float = 1.0, width: float = 0.02, mass: float = 1.0) -> float:
    """Moment of inertia of a thin box rod about its centre, across the rod (kg m^2)."""
    return mass * (width**2 + length**2) / 12.0


def hanging_pose(theta: float, pivot: list[float], distance: float):
    """COM position and [w, x, y, z] quaternion of a rod hinged about +y at ``pivot``, at
    angle ``theta`` from hanging down (positive swings the rod toward -x), body z along the rod
    pointing away from the pivot... which is world -z rotated by theta."""
    quat = [math.cos(theta / 2), 0.0, math.sin(theta / 2), 0.0]
    com = [pivot[0] - distance * math.sin(theta), pivot[1], pivot[2] - distance * math.cos(theta)]
    return com, quat


def pendulum(theta0=-math.pi / 2, omega0=0.0, mass=1.0, length=1.0, damping=0.0, dt=0.01,
             batch_size=1, dtype=torch.float64, joint="hinge", coordinates="maximal"):  # fmt: skip
    """A rod of length ``length`` hinged at one end to the world about +y, pivot at z = 2."""
    pivot = [0.0, 0.0, 2.0]
    com, quat = hanging_pose(theta0, pivot, length / 2)
    velocity = [
        -omega0 * length / 2 * math.cos(theta0),
        0.0,
        omega0 * length / 2 * math.sin(theta0),
    ]
    rod = physics.Body("rod", "box", [0.02, 0.02, length], mass=mass, position=com, quat=quat,
                       velocity=velocity, angular_velocity=[0.0, omega0, 0.0])  # fmt: skip
    hinge = physics.Joint(
        "hinge", joint, "world", "rod", anchor=pivot, axis=[0, 1, 0], damping=damping
    )
    spec = physics.WorldSpec(bodies=[rod], joints=[hinge], timestep=dt, coordinates=coordinates)
    return physics.build_world(spec, batch_size=batch_size, dtype=dtype)


def pendulum_angle(trajectory: physics.State, pivot=(0.0, 0.0, 2.0), body: int = 0) -> torch.Tensor:
    """Angle from hanging down about +y of body ``body``'s COM around ``pivot``: (..., B)."""
    offset = trajectory.position[..., body, :] - torch.tensor(
        pivot, dtype=trajectory.position.dtype
    )
    return torch.atan2(-offset[..., 0], -offset[..., 2])


def cart_pole(theta0=0.3, x0=0.0, cart_mass=1.0, pole_mass=0.1, pole_length=1.0, dt=0.01,
              batch_size=1, dtype=torch.float64, motor_max=100.0, slider_damping=0.0,
              hinge_damping=0.0, limits=None, solver_iterations=20,
              coordinates="maximal", tip_mass=None):  # fmt: skip
    """A cart sliding along x (pivot height 1 m) with a rod hinged about +y at its centre;
    ``limits`` (lower, upper) in m stops the cart; ``tip_mass`` (kg) welds a ball of radius
    0.05 m at the rod's tip (a fixed joint, listed first)."""
    pivot = [x0, 0.0, 1.0]
    com, quat = hanging_pose(theta0, pivot, pole_length / 2)
    cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=cart_mass, position=pivot)
    pole = physics.Body(
        "pole", "box", [0.02, 0.02, pole_length], mass=pole_mass, position=com, quat=quat
    )
    rail = physics.Joint("rail", "slider", "world", "cart", anchor=pivot, axis=[1, 0, 0],
                         damping=slider_damping, motor=physics.Motor("force", max=motor_max),
                         limits=limits)  # fmt: skip
    hinge = physics.Joint(
        "hinge", "hinge", "cart", "pole", anchor=pivot, axis=[0, 1, 0], damping=hinge_damping
    )
    bodies, joints = [cart, pole], [rail, hinge]
    if tip_mass is not None:
        tip, _ = hanging_pose(theta0, pivot, pole_length)
        bodies.append(physics.Body("tip", "sphere", 0.05, mass=tip_mass, position=tip,
                                   collide=False))  # fmt: skip
        joints.insert(0, physics.Joint("weld", "fixed", "pole", "tip", anchor=tip))
    spec = physics.WorldSpec(
        bodies=bodies,
        joints=joints,
        timestep=dt,
        solver_iterations=solver_iterations,
        coordinates=coordinates,
    )
    return physics.build_world(spec, batch_size=batch_size, dtype=dtype)


def double_pendulum(theta1=1.0, theta2=2.0, dt=0.01, dtype=torch.float64, coordinates="maximal"):
    pivot1 = [0.0, 0.0, 3.0]
    com1, quat1 = hanging_pose(theta1, pivot1, 0.5)
    pivot2 = [pivot1[0] - math.sin(theta1), 0.0, pivot1[2] - math.cos(theta1)]
    com2, quat2 = hanging_pose(theta2, pivot2, 0.5)
    bodies = [
        physics.Body("upper", "box", [0.02, 0.02, 1.0], mass=1.0, position=com1, quat=quat1),
        physics.Body("lower", "box", [0.02, 0.02, 1.0], mass=1.0, position=com2, quat=quat2),
    ]
    joints = [
        physics.Joint("shoulder", "hinge", "world", "upper", anchor=pivot1, axis=[0, 1, 0]),
        physics.Joint("elbow", "hinge", "upper", "lower", anchor=pivot2, axis=[0, 1, 0]),
    ]
    return physics.build_world(
        physics.WorldSpec(bodies=bodies, joints=joints, timestep=dt, coordinates=coordinates),
        dtype=dtype,
    )


def ball_on_floor(height=1.0, radius=0.1, restitution=0.5, friction=0.5, velocity=(0.0, 0.0, 0.0),
                  dtype=torch.float64, batch_size=1, mass=1.0):  # fmt: skip
    floor = physics.Body(
        "floor", "plane", [10, 10], static=True, friction=friction, restitution=restitution
    )
    ball = physics.Body("ball", "sphere", radius, mass=mass, position=[0, 0, height + radius],
                        velocity=list(velocity), friction=friction, restitution=restitution)  # fmt: skip
    return physics.build_world(
        physics.WorldSpec(bodies=[floor, ball]), batch_size=batch_size, dtype=dtype
    )


def box_on_floor(speed=3.0, friction=0.4, dtype=torch.float64):
    floor = physics.Body("floor", "plane", [10, 10], static=True, friction=friction)
    box = physics.Body("box", "box", [0.2, 0.2, 0.2], mass=1.0, position=[0, 0, 0.1],
                       velocity=[speed, 0, 0], friction=friction)  # fmt: skip
    return physics.build_world(physics.WorldSpec(bodies=[floor, box]), dtype=dtype)
