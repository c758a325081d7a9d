"""Box-box, box-sphere, box-capsule and cylinder contacts (physics.contact_box,
physics.contact_box_segment): geometry, resting stacks, friction, restitution, gradients and
batches. Every figure is measured in float64 at dt = 0.01 s."""

import math

import pytest
import torch

import physics
from physics.contact_box import box_box
from physics.contact_box_segment import box_segment
from physics.contacts import find_contacts
from tests.physics.test_gradients import finite_difference_check

G = 9.81
F64 = torch.float64


def _rotation_z(angle: float) -> list[float]:
    return [math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)]


def _world(bodies, batch_size=1, iterations=20):
    spec = physics.WorldSpec(bodies=bodies, solver_iterations=iterations)
    return physics.build_world(spec, batch_size=batch_size, dtype=F64)


def _floor(**kw):
    return physics.Body("floor", "plane", [10, 10], static=True, **kw)


def _rx(angle):
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=F64)


def _ry(angle):
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=F64)


def test_geometry_face_edge_and_padding():
    eye = torch.eye(3, dtype=F64)[None]
    half = torch.tensor([[0.5, 0.5, 0.5]], dtype=F64)
    # Face: a small box 1 cm into a big one's top face: 4 points, all 1 cm deep.
    normal, point, distance, valid = box_box(
        torch.zeros(1, 3, dtype=F64), eye, half,
        torch.tensor([[0.1, 0.05, 0.74]], dtype=F64), eye, torch.tensor([[0.2, 0.2, 0.25]], dtype=F64),
    )  # fmt: skip
    assert torch.allclose(normal, torch.tensor([[0.0, 0.0, 1.0]], dtype=F64))
    assert valid.all() and torch.allclose(distance, torch.full((1, 4), -0.01, dtype=F64))
    assert torch.allclose(point[..., 2], torch.full((1, 4), 0.49, dtype=F64))  # on b's face
    # Edge-edge: crossed edges 1.4 m apart, each edge sqrt(0.5) from its centre.
    normal, point, distance, valid = box_box(
        torch.zeros(1, 3, dtype=F64), _ry(math.pi / 4)[None], half,
        torch.tensor([[0.0, 0.0, 1.4]], dtype=F64), _rx(math.pi / 4)[None], half,
    )  # fmt: skip
    assert valid.tolist() == [[True, False, False, False]]
    assert abs(distance[0, 0].item() - (1.4 - 2 * math.sqrt(0.5))) < 1e-12
    assert torch.allclose(normal.abs(), torch.tensor([[0.0, 0.0, 1.0]], dtype=F64))
    # Separated boxes (speculative): a positive gap; b below a: the normal points down.
    normal, _, distance, valid = box_box(
        torch.tensor([[0.0, 0.0, 1.03]], dtype=F64), eye, half, torch.zeros(1, 3, dtype=F64),
        eye, half,
    )  # fmt: skip
    assert torch.allclose(normal, torch.tensor([[0.0, 0.0, -1.0]], dtype=F64))
    assert valid.all() and torch.allclose(distance, torch.full((1, 4), 0.03, dtype=F64))
    # Sphere inside and outside a box; a capsule lying across it (ends and middle).
    normal, _, distance, valid = box_segment(
        torch.zeros(2, 3, dtype=F64), torch.eye(3, dtype=F64).expand(2, 3, 3),
        half.expand(2, 3), torch.tensor([[0.9, 0.0, 0.0], [0.0, 0.0, 0.45]], dtype=F64),
        torch.zeros(2, 3, dtype=F64), torch.tensor([0.3, 0.1], dtype=F64),
    )  # fmt: skip
    assert valid.tolist() == [[True, False, False]] * 2
    assert torch.allclose(distance[:, 0], torch.tensor([0.1, -0.15], dtype=F64))
    assert torch.allclose(normal[:, 0], torch.tensor([[1.0, 0, 0], [0, 0, 1.0]], dtype=F64))
    _, _, distance, valid = box_segment(
        torch.zeros(1, 3, dtype=F64), _ry(0.3)[None], half,
        torch.tensor([[0.0, 0.0, 1.0]], dtype=F64), torch.tensor([[1.0, 0.0, 0.0]], dtype=F64),
        torch.tensor([0.1], dtype=F64),
    )  # fmt: skip
    assert valid.tolist() == [[True, True, True]]
    assert (distance[0, 2] <= distance[0, :2]).all()


def test_geometry_reference_corners_inside_incident_face():
    """A big box resting 1 cm deep on a small one turned 45 degrees: the clipped polygon is the
    small box's whole top face, so the manifold is its 4 corners, lifted onto b's face."""
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    turned = torch.tensor([[[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]], dtype=F64)
    normal, point, distance, valid = box_box(
        torch.zeros(1, 3, dtype=F64), turned, torch.full((1, 3), 0.2, dtype=F64),
        torch.tensor([[0.0, 0.0, 0.69]], dtype=F64), torch.eye(3, dtype=F64)[None],
        torch.full((1, 3), 0.5, dtype=F64),
    )  # fmt: skip
    assert torch.allclose(normal, torch.tensor([[0.0, 0.0, 1.0]], dtype=F64))
    assert valid.all() and torch.allclose(distance, torch.full((1, 4), -0.01, dtype=F64))
    corners = sorted((round(x, 9), round(y, 9)) for x, y in point[0, :, :2].tolist())
    r = 0.2 * math.sqrt(2)
    assert corners == sorted(
        (round(x, 9), round(y, 9)) for x, y in [(r, 0), (-r, 0), (0, r), (0, -r)]
    )
    assert torch.allclose(point[0, :, 2], torch.full((4,), 0.19, dtype=F64))


def test_candidates_follow_shapes_collide_and_joints():
    bodies = [
        _floor(),
        physics.Body("box", "box", [0.2, 0.2, 0.2], mass=1.0, position=[0, 0, 0.1]),
        physics.Body("can", "cylinder", [0.1, 0.2], mass=1.0, position=[0, 0, 0.5]),
        physics.Body("ball", "sphere", 0.1, mass=1.0, position=[0, 0, 1.0]),
        physics.Body("ghost", "box", [0.2, 0.2, 0.2], mass=1.0, position=[1, 0, 1], collide=False),
    ]
    world = _world(bodies)
    names = world.body_names
    box_pairs = [
        (names[a], names[b]) for a, b in zip(world.box_contact_a, world.box_contact_b, strict=True)
    ]
    segment_pairs = [
        (names[a], names[b])
        for a, b in zip(world.box_segment_box, world.box_segment_other, strict=True)
    ]
    assert box_pairs == [("box", "can")]
    assert segment_pairs == [("box", "ball"), ("can", "ball")]
    contacts = find_contacts(world, world.initial_position, world.initial_rotation)
    padded = ~contacts.valid
    assert padded.any() and (contacts.distance[padded] == 1e3).all()


@pytest.mark.slow
def test_box_resting_on_box_stays_within_1_mm_for_10_s():
    """A box on a bigger box on the floor, offset and turned 30 degrees: both hold still."""
    bodies = [
        _floor(friction=0.6),
        physics.Body("base", "box", [0.6, 0.6, 0.2], mass=2.0, position=[0, 0, 0.1], friction=0.6),
        physics.Body("top", "box", [0.3, 0.3, 0.2], mass=1.0, position=[0.1, 0.05, 0.3],
                     quat=_rotation_z(math.pi / 6), friction=0.6),
    ]  # fmt: skip
    world = _world(bodies)
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    drift = (trajectory.position[:, 0, 1:] - world.initial_position[0, 1:]).norm(dim=-1)
    turn = (trajectory.rotation[:, 0, 1:] - world.initial_rotation[0, 1:]).abs().amax((-1, -2))
    assert drift.max().item() < 1e-3  # measured 2.0e-5 m
    assert turn.max().item() < 1e-3


@pytest.mark.slow
def test_five_box_stack_stands_for_10_s():
    """Five boxes, each offset by 2 cm and turned by 10 degrees from the one below."""
    bodies = [_floor(friction=0.6)]
    for k in range(5):
        bodies.append(
            physics.Body(f"box{k}", "box", [0.4, 0.4, 0.2], mass=1.0,
                         position=[0.02 * k, -0.01 * k, 0.1 + 0.2 * k],
                         quat=_rotation_z(math.radians(10 * k)), friction=0.6)
        )  # fmt: skip
    world = _world(bodies)
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    top = trajectory.position[:, 0, -1] - world.initial_position[0, -1]
    assert top.norm(dim=-1).max().item() < 0.01  # measured 3.8e-3 m
    contacts = find_contacts(world, trajectory.position[-1], trajectory.rotation[-1])
    assert contacts.distance.min().item() > -1e-3


def test_box_sliding_on_box_decelerates_at_mu_g():
    mu = 0.4
    bodies = [
        physics.Body("table", "box", [4.0, 4.0, 0.2], static=True, position=[0, 0, -0.1],
                     friction=mu),
        physics.Body("box", "box", [0.2, 0.2, 0.2], mass=1.0, position=[-1, 0, 0.1],
                     velocity=[3.0, 0, 0], friction=mu),
    ]  # fmt: skip
    world = _world(bodies)
    trajectory = physics.rollout(world, physics.initial_state(world), 100)
    vx = trajectory.linear_velocity[:, 0, 1, 0]
    deceleration = ((vx[1] - vx[60]) / (59 * 0.01)).item()
    assert abs(deceleration - mu * G) / (mu * G) < 0.02
    assert (trajectory.position[:, 0, 1, 2] - 0.1).abs().max().item() < 1e-3


def _assert_bounces_at_restitution(z, e: float, tolerance: float = 0.05):
    """Heights ``z`` (T,) of a dropped body above its contact: its first two apex ratios
    are e^2 within ``tolerance`` (relative), and it never sinks below -1 mm."""
    apexes = [z[0]] + [z[i] for i in range(1, z.size - 1) if z[i] > z[i - 1] and z[i] >= z[i + 1]]
    assert len(apexes) >= 3
    for k in range(2):
        assert abs(apexes[k + 1] / apexes[k] - e**2) / e**2 < tolerance
    assert z.min() > -1e-3


@pytest.mark.slow
def test_sphere_bounces_on_box_with_restitution():
    e = 0.5
    bodies = [
        physics.Body("block", "box", [1.0, 1.0, 0.4], static=True, position=[0, 0, -0.2],
                     restitution=e),
        physics.Body("ball", "sphere", 0.1, mass=1.0, position=[0.2, 0.1, 1.1], restitution=e),
    ]  # fmt: skip
    world = _world(bodies)
    trajectory = physics.rollout(world, physics.initial_state(world), 300)
    _assert_bounces_at_restitution((trajectory.position[:, 0, 1, 2] - 0.1).numpy(), e)


@pytest.mark.slow
def test_box_dropped_on_sphere_bounces_with_restitution():
    """A box falling flat (turned 17 degrees about the vertical) onto a static sphere: the
    contact is the sphere's top against the box's bottom face."""
    e = 0.5
    bodies = [
        physics.Body("ball", "sphere", 0.3, static=True, position=[0, 0, 0.3], restitution=e),
        physics.Body("box", "box", [0.2, 0.2, 0.2], mass=1.0, position=[0.0, 0.0, 1.5],
                     quat=_rotation_z(0.3), restitution=e),
    ]  # fmt: skip
    world = _world(bodies)
    trajectory = physics.rollout(world, physics.initial_state(world), 300)
    bottom = (trajectory.position[:, 0, 1, 2] - 0.7).numpy()  # above the sphere's top
    _assert_bounces_at_restitution(bottom, e)  # measured 1.0055 e^2 and 1.0000 e^2


@pytest.mark.slow
def test_capsule_and_cylinder_rest_on_boxes():
    """A capsule lying on a box and a cylinder standing on one (it collides as its box)."""
    bodies = [
        _floor(),
        physics.Body("left", "box", [0.6, 0.6, 0.2], static=True, position=[-1, 0, 0.1]),
        physics.Body("right", "box", [0.6, 0.6, 0.2], static=True, position=[1, 0, 0.1]),
        physics.Body("log", "capsule", [0.05, 0.4], mass=1.0, position=[-1, 0, 0.25],
                     quat=[math.sqrt(0.5), 0, math.sqrt(0.5), 0]),
        physics.Body("can", "cylinder", [0.1, 0.3], mass=1.0, position=[1, 0, 0.35]),
        physics.Body("lid", "box", [0.3, 0.3, 0.05], mass=0.5, position=[1, 0, 0.525]),
    ]  # fmt: skip
    world = _world(bodies)
    trajectory = physics.rollout(world, physics.initial_state(world), 300)
    drift = (trajectory.position[:, 0, 3:] - world.initial_position[0, 3:]).norm(dim=-1)
    assert drift.max().item() < 1e-3


def _drop_world(velocity, mass=1.0, batch_size=1):
    """A tilted box thrown onto a loose slab (a box on the floor)."""
    bodies = [
        _floor(friction=0.2, position=[0, 0, -0.2]),
        physics.Body("table", "box", [2.0, 2.0, 0.2], mass=3.0, position=[0, 0, -0.1],
                     friction=0.3, restitution=0.2),
        physics.Body("box", "box", [0.2, 0.3, 0.2], mass=mass, position=[0, 0, 0.2],
                     quat=[0.98, 0.1, 0.15, 0.05], velocity=velocity, friction=0.3,
                     restitution=0.2),
    ]  # fmt: skip
    return _world(bodies, batch_size=batch_size)


@pytest.mark.slow
def test_finite_differences_through_a_box_box_contact():
    """A tilted box thrown onto a slab lands on a corner, tips and slides, and pushes the slab:
    d(final pose)/d(initial velocity and mass) by autograd against central differences."""
    weights = torch.tensor([0.3, -0.7, 1.1], dtype=F64)

    def final(velocity, mass=1.0):
        world = _drop_world(velocity, mass)
        end = physics.rollout(world, physics.initial_state(world), 40, check_finite=False)[-1]
        return (
            (end.position[0, 2] * weights).sum() + end.rotation[0, 2, 0, 2] + end.position[0, 1, 0]
        )

    finite_difference_check(final, torch.tensor([0.8, 0.3, -1.0], dtype=F64))
    finite_difference_check(lambda m: final([0.8, 0.3, -1.0], m), torch.tensor(1.3, dtype=F64))


@pytest.mark.slow
def test_batch_equals_single_runs():
    velocities = torch.tensor([[0.8, 0.3, -1.0], [-0.5, 0.0, 0.0], [0.0, 1.0, -2.0]], dtype=F64)
    world = _drop_world(velocities, batch_size=3)
    batch = physics.rollout(world, physics.initial_state(world), 60)
    for k in range(3):
        single = _drop_world(velocities[k])
        alone = physics.rollout(single, physics.initial_state(single), 60)
        assert torch.allclose(batch.position[:, k], alone.position[:, 0], atol=1e-10)
        assert torch.allclose(batch.rotation[:, k], alone.rotation[:, 0], atol=1e-10)
