"""Convex hulls (`Body(shape="hull", points=...)`): a hull of a box's corners behaves as that box;
a hull of a sphere's surface points bounces as the sphere; a box hull rests on a plane and on a
box; size gradients move the points; bad hulls give clear errors."""

import math

import pytest
import torch

import physics
from physics import ModelError
from tests.finite_differences import check_directional
from tests.physics.reference import bouncing_ball_apexes

F64 = torch.float64
G = 9.81


# A box's corners in units of its size.
CORNERS = [[sx, sy, sz] for sx in (-0.5, 0.5) for sy in (-0.5, 0.5) for sz in (-0.5, 0.5)]


def _sphere_points(radius: float, rings: int = 12, sectors: int = 24) -> list[list[float]]:
    """Points on a sphere in units of `_sphere_hull_size`: both poles (one straight below the
    centre) and latitude rings."""
    radius = radius / _sphere_hull_size(radius)[0]
    points = [[0.0, 0.0, radius], [0.0, 0.0, -radius]]
    for i in range(1, rings):
        polar = math.pi * i / rings
        for j in range(sectors):
            azimuth = 2 * math.pi * j / sectors
            points.append([radius * math.sin(polar) * math.cos(azimuth),
                           radius * math.sin(polar) * math.sin(azimuth),
                           radius * math.cos(polar)])  # fmt: skip
    return points


def _sphere_hull_size(radius: float) -> list[float]:
    """The box with a solid sphere's moments per kilogram: e^2 / 12 = r^2 / 5 along each axis
    (both moments are then 2 r^2 / 5)."""
    return [math.sqrt(2.4) * radius] * 3


def _world(bodies, dtype=F64, timestep=0.01):
    return physics.build_world(physics.WorldSpec(bodies=bodies, timestep=timestep), dtype=dtype)


def _floor():
    return physics.Body("floor", "plane", [10, 10], static=True)


@pytest.mark.slow
def test_box_hull_slides_and_tumbles_as_the_box(dtype):
    """A hull of a box's 8 corners at the box's size is the box: same inertia, same plane points,
    same bounding box against another box. Thrown spinning onto a floor and a block: the box's
    trajectory, to a millimetre (the hull's plane rows are the corners its step can bring
    within 1 mm, the box's those within the 5 mm contact slop: rows that carry no impulse
    in the exact solve, though the sweeps see them)."""
    size = [0.3, 0.2, 0.1]
    throw = {"position": [0, 0, 0.6], "velocity": [1.5, 0.3, 0.0], "angular_velocity": [2, 3, 1]}
    block = physics.Body("block", "box", [0.4, 0.4, 0.2], static=True, position=[0.6, 0, 0.1])
    worlds = []
    for shape, points in (("box", None), ("hull", CORNERS)):
        body = physics.Body("thing", shape, size, mass=0.7, friction=0.6, points=points, **throw)
        worlds.append(_world([_floor(), block, body], dtype))
    box, hull = (physics.rollout(w, physics.initial_state(w), 150) for w in worlds)
    tolerance = 1e-3
    for a, b in zip(box.tensors()[:2], hull.tensors()[:2], strict=True):
        torch.testing.assert_close(b, a, atol=tolerance, rtol=0)
    assert float(box.position[:, 0, 2, 2].min()) > 0.0  # it landed and stayed above the floor


@pytest.mark.slow
def test_box_hull_rests_on_a_plane_and_on_a_box_within_a_millimetre_for_10_seconds():
    size = [0.2, 0.2, 0.2]
    support = physics.Body("support", "box", [0.5, 0.5, 0.3], static=True, position=[2, 0, 0.15])
    on_floor = physics.Body("a", "hull", size, mass=1.0, points=CORNERS, position=[0, 0, 0.1])
    on_box = physics.Body("b", "hull", size, mass=1.0, points=CORNERS, position=[2, 0, 0.4])
    world = _world([_floor(), support, on_floor, on_box])
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    z = trajectory.position[:, 0, :, 2]
    assert float((z[:, 2] - 0.1).abs().max()) < 1e-3
    assert float((z[:, 3] - 0.4).abs().max()) < 1e-3
    assert (
        float(trajectory.position[:, 0, 2:, :2].sub(torch.tensor([[0, 0], [2, 0]])).abs().max())
        < 1e-3
    )


@pytest.mark.parametrize("restitution", [0.5, 0.8])
@pytest.mark.slow
def test_sphere_hull_bounces_as_the_sphere(restitution):
    """A hull of 266 points on a 10 cm sphere (a pole straight below its centre), dropped from
    1 m: apex ratios within 5 % of e^2, as the analytic sphere's. Landing at 4.4 m/s on its
    pole and the ring around it (up to 9 rows), the sweeps leave it 3 mm deep for a step;
    bouncing low at the end, never more than 1 mm."""
    radius = 0.1
    ball = physics.Body("ball", "hull", _sphere_hull_size(radius), mass=0.2,
                        points=_sphere_points(radius), position=[0, 0, 1.0 + radius],
                        restitution=restitution)  # fmt: skip
    world = _world([_floor(), ball])
    trajectory = physics.rollout(world, physics.initial_state(world), 400)
    z = (trajectory.position[:, 0, 1, 2] - radius).numpy()
    apexes = [z[0]] + [z[i] for i in range(1, z.size - 1) if z[i] > z[i - 1] and z[i] >= z[i + 1]]
    assert len(apexes) >= 3
    for k in range(2):
        assert abs(apexes[k + 1] / apexes[k] - restitution**2) / restitution**2 < 0.05
    expected = bouncing_ball_apexes(1.0, restitution, n=1)
    assert abs(apexes[1] - expected[1]) / expected[1] < 0.05
    # Its lowest point never sinks into the floor (its centre may come closer than the radius:
    # it can rest on a facet).
    points = torch.tensor(_sphere_points(radius), dtype=F64) * world.size[0, 1]
    lowest = trajectory.position[:, 0, 1, 2] + (trajectory.rotation[:, 0, 1, 2] @ points.T).amin(-1)
    assert float(lowest.min()) > -3e-3
    assert float(lowest[-20:].min()) > -1e-3
    # Its inertia is the solid sphere's.
    moments = physics.inertia.body_moments(world.mass, world.size, world.structure.shape_groups)
    torch.testing.assert_close(moments[0, 1], torch.full((3,), 0.4 * 0.2 * radius**2, dtype=F64))


@pytest.mark.slow
def test_gradient_to_a_hull_size_moves_its_points():
    """A hull resting on a plane: where it rests after 0.5 s depends on its size (its points
    scale with it), and autograd agrees with central differences."""
    size0 = torch.tensor([0.2, 0.3, 0.1], dtype=F64)
    points = CORNERS

    def height(size):
        body = physics.Body("h", "hull", size, mass=1.0, points=points, position=[0, 0, 0.08])
        world = _world([_floor(), body])
        return physics.rollout(world, physics.initial_state(world), 50).position[-1, 0, 1, 2]

    (grad,) = check_directional(height, [size0], eps=1e-6, rtol=1e-4, names=["size"])
    assert grad[2] > 0.4  # resting height is half the z extent


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"points": None}, "a hull needs its points"),
        ({"points": [[0, 0, 0], [1, 0, 0], [0, 1, 0]]}, "K >= 4"),
        ({"points": [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]]}, "span no volume"),
        ({"points": [[0, 0, float("nan")]] * 4}, "finite"),
        ({"mass": None, "density": 500.0}, "cannot give a mass"),
        ({"shape": "box"}, "only a hull takes points"),
    ],
)
def test_bad_hulls_name_the_field(changes, message):
    keywords = {"name": "rock", "shape": "hull", "size": [0.1, 0.1, 0.1], "mass": 1.0,
                "points": CORNERS} | changes  # fmt: skip
    with pytest.raises(ModelError, match=message) as caught:
        _world([physics.Body(**keywords)])
    assert "rock" in str(caught.value)
