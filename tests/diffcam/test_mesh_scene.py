"""Mesh bodies in scene files: the bundled torus scene, mass properties from the closed mesh
(an off-centre box mesh against the box body), free flight, contacts through the convex hull
(a box mesh lands as the box body; a torus rests on a floor; box meshes rest on a floor and
on a box for 10 s; a sphere mesh bounces as the sphere body), and the errors (missing or open
meshes, keys that only meshes take)."""

from __future__ import annotations

import math
import tomllib

import pytest
import torch

import diffcam
from diffcam.mesh import Mesh, mass_properties, read_obj
from diffcam.mesh.obj import write_obj
from diffcam.mesh.shapes import box
from diffcam.scene.paths import MESHES_DIR, SCENES_DIR
from physics.inertia import body_moments

SCENE = """
[world]
gravity = [0.0, 0.0, 0.0]
timestep = 0.01

[camera]
resolution = [48, 36]
position = [0.3, -4.0, 1.5]
look_at = [0.0, 0.0, 0.5]
fov_y_deg = 40.0

[light]
ambient = 0.4
direction = [0.3, -0.6, 1.0]
intensity = 0.6
"""


def write_scene(tmp_path, body: str, extra: str = "") -> str:
    path = tmp_path / "scene.toml"
    path.write_text(SCENE + extra + "\n[[bodies]]\n" + body)
    return str(path)


def moments(scene) -> torch.Tensor:
    w = scene.world
    return body_moments(w.mass, w.size, w.structure.shape_groups)


def test_bundled_torus_scene(dtype):
    scene = diffcam.load_scene("mesh_tumble", batch_size=2, dtype=dtype)
    config = tomllib.loads((SCENES_DIR / "mesh_tumble.toml").read_text())
    torus = read_obj(MESHES_DIR / "torus.obj", dtype=torch.float64)
    props = mass_properties(torus, density=500.0)
    i = scene.body_names.index("torus")
    assert config["bodies"][1]["mesh"] == "torus.obj"
    torch.testing.assert_close(scene.world.mass[:, i].double(), props.mass.expand(2))
    # a torus about z: its file axes are principal; the engine gets its moments
    expected = torch.diagonal(props.inertia).to(dtype).expand(2, 3)
    torch.testing.assert_close(moments(scene)[:, i], expected, rtol=1e-5, atol=0)
    state = scene.initial_state()
    images = scene.render(state)
    assert images.shape == (2, 3, 144, 192) and torch.isfinite(images).all()
    ids = scene.render_buffers(state).object_id
    assert (ids == i).sum() > 500


def test_free_flight_keeps_angular_momentum():
    # torque-free: the world-frame angular momentum R I R^T w is constant, to 1e-6 at any step
    # (so the moments and the axes the engine was given are the mesh's)
    def drift(dt):
        scene = diffcam.load_scene(
            "mesh_tumble", dtype=torch.float64, overrides={"world.timestep": dt}
        )
        i = scene.body_names.index("torus")
        inertia = torch.diag_embed(moments(scene)[0, i])

        def momentum(state):
            R, w = state.rotation[0, i], state.angular_velocity[0, i]
            return R @ inertia @ R.T @ w

        state = scene.initial_state()
        L0 = momentum(state)
        for _ in range(round(0.5 / dt)):
            state = scene.step(state)
        turned = float((state.rotation[0, i] - scene.initial_state().rotation[0, i]).abs().max())
        return float((momentum(state) - L0).norm() / L0.norm()), turned

    coarse, turned = drift(0.01)
    fine, _ = drift(0.0025)
    assert turned > 0.5
    # the engine carries a tumbling body's angular momentum exactly (physics.stepping's Spin)
    assert max(fine, coarse) < 1e-6


FLOOR = """
[[bodies]]
name = "floor"
shape = "plane"
size = [4.0, 4.0]
static = true
friction = 0.6
"""


@pytest.mark.slow
def test_box_mesh_lands_and_rests_as_the_box_body(tmp_path):
    """Thrown spinning onto a floor: a box mesh (its hull's points the 8 corners) follows the
    box body's trajectory to a tenth of a millimetre; it rests on the floor within a
    millimetre."""
    write_obj(box((0.3, 0.2, 0.1), torch.float64), tmp_path / "crate.obj")
    motion = """mass = 0.5
friction = 0.6
position = [0.0, 0.0, 0.4]
velocity = [0.8, 0.0, 0.0]
angular_velocity = [1.0, 2.0, 0.5]
"""
    trajectories = []
    for shape in (
        'shape = "mesh"\nmesh = "crate.obj"\n',
        'shape = "box"\nsize = [0.3, 0.2, 0.1]\n',
    ):
        body = 'name = "crate"\n' + shape + motion
        path = write_scene(tmp_path, body, FLOOR)
        text = open(path).read().replace("gravity = [0.0, 0.0, 0.0]", "gravity = [0.0, 0.0, -9.81]")
        open(path, "w").write(text)
        scene = diffcam.load_scene(path, dtype=torch.float64)
        trajectories.append(scene.rollout(200))
    mesh, analytic = trajectories
    torch.testing.assert_close(mesh.position, analytic.position, atol=1e-4, rtol=0)
    torch.testing.assert_close(mesh.rotation, analytic.rotation, atol=1e-3, rtol=0)
    assert abs(float(mesh.position[-1, 0, 1, 2]) - 0.05) < 1e-3  # resting on its 0.1 m side


@pytest.mark.slow
def test_torus_rests_on_a_floor_on_its_hull(tmp_path):
    """Dropped tilted 45 degrees: it lands on its rim, falls flat and rests on its hull within
    a millimetre (landing, a few of its hull's points per step, it sinks up to 6 mm for a
    step)."""
    body = """name = "ring"
shape = "mesh"
mesh = "torus.obj"
density = 500.0
position = [0.0, 0.0, 0.6]
quat = [0.9238795, 0.3826834, 0.0, 0.0]
"""
    path = write_scene(tmp_path, body, FLOOR)
    text = open(path).read().replace("gravity = [0.0, 0.0, 0.0]", "gravity = [0.0, 0.0, -9.81]")
    open(path, "w").write(text)
    scene = diffcam.load_scene(path, dtype=torch.float64)
    trajectory = scene.rollout(300)
    i = scene.body_names.index("ring")
    torus = read_obj(MESHES_DIR / "torus.obj", dtype=torch.float64)
    # The lowest vertex of the drawn mesh, in the world: the body frame is the centre of
    # mass along the principal axes (the torus's own axes, its centre at the origin).
    lowest = trajectory.position[:, 0, i, 2] + (
        trajectory.rotation[:, 0, i, 2] @ torus.vertices.T
    ).amin(-1)
    assert float(lowest.min()) > -6e-3
    assert float(lowest[-20:].abs().max()) < 1e-3  # lying on the floor
    assert float(trajectory.linear_velocity[-1, 0, i].norm()) < 0.05


def test_off_centre_box_mesh_is_the_box_body(tmp_path, dtype):
    # a box mesh whose vertices are off its origin: the body's state is at its centre of
    # mass, and it looks and weighs like the box body placed there
    mesh = box((0.6, 0.4, 0.3), torch.float64)
    shifted = Mesh(mesh.vertices + torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64), mesh.faces)
    write_obj(shifted, tmp_path / "crate.obj")
    body = """name = "crate"
shape = "mesh"
mesh = "crate.obj"
scale = 2.0
density = 300.0
position = [0.0, 0.0, 0.2]
quat = [0.9238795, 0.0, 0.0, 0.3826834]
color = [0.8, 0.4, 0.1]
collide = false
"""
    scene = diffcam.load_scene(write_scene(tmp_path, body), dtype=dtype)
    c = math.sqrt(0.5)
    R = torch.tensor([[c, -c, 0.0], [c, c, 0.0], [0.0, 0.0, 1.0]], dtype=dtype)
    centre = torch.tensor([0.0, 0.0, 0.2], dtype=dtype) + R @ torch.tensor(
        [0.4, -0.2, 0.6], dtype=dtype
    )
    state = scene.initial_state()
    torch.testing.assert_close(state.position[0, 0], centre)
    torch.testing.assert_close(state.rotation[0, 0], R)
    size = [1.2, 0.8, 0.6]
    m = 300.0 * 1.2 * 0.8 * 0.6
    torch.testing.assert_close(scene.world.mass[0, 0], torch.tensor(m, dtype=dtype))
    x2, y2, z2 = (s * s for s in size)
    expected = torch.tensor([y2 + z2, x2 + z2, x2 + y2], dtype=dtype) * m / 12
    torch.testing.assert_close(moments(scene)[0, 0], expected)
    ref = diffcam.Primitive("box", size=size, color=(0.8, 0.4, 0.1))
    got = scene.render_buffers(state, edge_softness=0)
    want = diffcam.render_buffers(
        scene.camera, [ref], state.rotation, state.position, lighting=scene.lighting,
        edge_softness=0, background=scene.background if hasattr(scene, "background") else None,
    )  # fmt: skip
    assert torch.equal(got.object_id, want.object_id)
    torch.testing.assert_close(got.depth, want.depth, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "body, extra, key, words",
    [
        (
            'name = "t"\nshape = "mesh"\nmesh = "nothing.obj"\nmass = 1.0\n',
            "",
            "bodies.t.mesh",
            "not found",
        ),
        (
            'name = "t"\nshape = "mesh"\nmesh = "open.obj"\nmass = 1.0\n',
            "",
            "bodies.t.mesh",
            "open",
        ),
        (
            'name = "t"\nshape = "mesh"\nmesh = "torus.obj"\nsize = 1.0\nmass = 1.0\n',
            "",
            "bodies.t.size",
            "no size",
        ),
        (
            'name = "t"\nshape = "sphere"\nsize = 0.2\nmesh = "torus.obj"\nmass = 1.0\n',
            "",
            "bodies.t.mesh",
            'only a body of shape = "mesh"',
        ),
        (
            'name = "t"\nshape = "mesh"\nmesh = "torus.obj"\nscale = -1.0\nmass = 1.0\n',
            "",
            "bodies.t.scale",
            "expected a scale",
        ),
        ('name = "t"\nshape = "mesh"\nmesh = "torus.obj"\n', "", "bodies.t.mass", "needs a mass"),
        (
            'name = "t"\nshape = "mesh"\nmesh = "open.obj"\ninertia = [1.0, 1.0, 3.0]\nmass = 1.0\n',
            "",
            "bodies.t.inertia",
            "triangle inequality",
        ),
    ],
)
def test_mesh_body_errors(tmp_path, body, extra, key, words):
    write_obj(Mesh(torch.eye(3), torch.tensor([[0, 1, 2]])), tmp_path / "open.obj")
    floor = '[[bodies]]\nname = "floor"\nshape = "plane"\nsize = [2.0, 2.0]\nstatic = true\n'
    path = write_scene(tmp_path, body, floor if extra == "floor" else "")
    with pytest.raises(diffcam.SceneError) as err:
        diffcam.load_scene(path)
    assert err.value.key == key and err.value.file == path
    assert words in str(err.value)


def test_open_mesh_with_mass_and_inertia_and_a_non_colliding_floor(tmp_path):
    write_obj(Mesh(torch.eye(3), torch.tensor([[0, 1, 2]])), tmp_path / "open.obj")
    floor = '[[bodies]]\nname = "floor"\nshape = "plane"\nsize = [2.0, 2.0]\nstatic = true\n'
    body = 'name = "t"\nshape = "mesh"\nmesh = "open.obj"\nmass = 2.0\ninertia = [1.0, 1.0, 1.5]\ncollide = false\n'
    scene = diffcam.load_scene(write_scene(tmp_path, body, floor))
    torch.testing.assert_close(moments(scene)[0, 1], torch.tensor([1.0, 1.0, 1.5]))
    assert torch.isfinite(scene.render(scene.initial_state())).all()


def test_cli_renders_the_mesh_scene(tmp_path, capsys):
    import imageio.v3 as iio

    from diffcam.cli import main

    out = tmp_path / "torus.mp4"
    args = ["render", "mesh_tumble", "--seconds", "0.3", "--fps", "10", "--out", str(out)]
    assert main([*args, "--quiet", "--view", "all"]) == 0
    frames = iio.imread(out, index=None)
    assert frames.shape[0] == 3 and frames.std() > 10
    assert "wrote" in capsys.readouterr().out
    assert main(["check", "mesh_tumble"]) == 0
    assert "torus.obj (2304 triangles)" in capsys.readouterr().out


def test_density_override_reaches_the_mass():
    density = torch.tensor(400.0, dtype=torch.float64, requires_grad=True)
    scene = diffcam.load_scene(
        "mesh_tumble", dtype=torch.float64, overrides={"bodies.torus.density": density}
    )
    i = scene.body_names.index("torus")
    (grad,) = torch.autograd.grad(scene.world.mass[0, i], density)
    volume = mass_properties(read_obj(MESHES_DIR / "torus.obj", dtype=torch.float64)).volume
    torch.testing.assert_close(grad, volume)


def icosphere(radius: float, subdivisions: int = 2) -> Mesh:
    """A closed sphere mesh: an icosahedron's faces split in four ``subdivisions`` times, the
    vertices pushed out to ``radius`` (m); outward faces (20 * 4**subdivisions)."""
    t = (1 + math.sqrt(5)) / 2
    vertices = [[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t],
                [0, -1, -t], [0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]]  # fmt: skip
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
             (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
             (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]  # fmt: skip
    middle: dict[tuple[int, int], int] = {}

    def mid(a: int, b: int) -> int:
        key = (min(a, b), max(a, b))
        if key not in middle:
            middle[key] = len(vertices)
            vertices.append([(p + q) / 2 for p, q in zip(vertices[a], vertices[b], strict=True)])
        return middle[key]

    for _ in range(subdivisions):
        middle.clear()

        faces = [
            f
            for a, b, c in faces
            for f in ((a, mid(a, b), mid(c, a)), (b, mid(b, c), mid(a, b)),
                      (c, mid(c, a), mid(b, c)), (mid(a, b), mid(b, c), mid(c, a)))
        ]  # fmt: skip
    v = torch.tensor(vertices, dtype=torch.float64)
    v = radius * v / v.norm(dim=1, keepdim=True)
    return Mesh(v, torch.tensor(faces, dtype=torch.long))


def falling_scene(tmp_path, bodies: str) -> diffcam.Scene:
    """`SCENE` under gravity, with `FLOOR` and ``bodies`` (TOML), in float64."""
    path = tmp_path / "scene.toml"
    text = SCENE.replace("gravity = [0.0, 0.0, 0.0]", "gravity = [0.0, 0.0, -9.81]")
    path.write_text(text + FLOOR + bodies)
    return diffcam.load_scene(path, dtype=torch.float64)


def _apexes(z: torch.Tensor) -> list[float]:
    """The heights (m) of the start and of every local maximum of a (T,) height curve."""
    z = z.tolist()
    return [z[0]] + [z[i] for i in range(1, len(z) - 1) if z[i] > z[i - 1] and z[i] >= z[i + 1]]


@pytest.mark.slow
@pytest.mark.parametrize("restitution", [0.5, 0.8])
def test_sphere_mesh_bounces_as_the_sphere_body(tmp_path, restitution):
    """A 320-triangle sphere mesh and the analytic sphere body, side by side, dropped from 1 m:
    the mesh's apex ratios within 5 % of the sphere's (the mesh lands on its hull's points,
    the sphere on its surface)."""
    radius = 0.1
    write_obj(icosphere(radius), tmp_path / "ball.obj")
    common = f"density = 500.0\nrestitution = {restitution}\nfriction = 0.5\n"
    bodies = (
        f'[[bodies]]\nname = "mesh_ball"\nshape = "mesh"\nmesh = "ball.obj"\n{common}'
        f"position = [-0.5, 0.0, {1.0 + radius}]\n"
        f'[[bodies]]\nname = "ball"\nshape = "sphere"\nsize = {radius}\n{common}'
        f"position = [0.5, 0.0, {1.0 + radius}]\n"
    )
    scene = falling_scene(tmp_path, bodies)
    trajectory = scene.rollout(300)
    z = {
        name: trajectory.position[:, 0, scene.body_names.index(name), 2]
        for name in ("mesh_ball", "ball")
    }
    mesh_apexes, sphere_apexes = _apexes(z["mesh_ball"] - radius), _apexes(z["ball"] - radius)
    assert len(mesh_apexes) >= 3 and len(sphere_apexes) >= 3
    for k in range(2):
        mesh_ratio = mesh_apexes[k + 1] / mesh_apexes[k]
        sphere_ratio = sphere_apexes[k + 1] / sphere_apexes[k]
        assert abs(mesh_ratio - sphere_ratio) / sphere_ratio < 0.05, (k, mesh_ratio, sphere_ratio)


@pytest.mark.slow
def test_box_meshes_rest_on_a_floor_and_on_a_box_within_a_millimetre_for_10_seconds(tmp_path):
    write_obj(box((0.2, 0.2, 0.2), torch.float64), tmp_path / "cube.obj")
    bodies = """
[[bodies]]
name = "support"
shape = "box"
size = [0.5, 0.5, 0.3]
static = true
position = [2.0, 0.0, 0.15]

[[bodies]]
name = "on_floor"
shape = "mesh"
mesh = "cube.obj"
mass = 1.0
position = [0.0, 0.0, 0.1]

[[bodies]]
name = "on_box"
shape = "mesh"
mesh = "cube.obj"
mass = 1.0
position = [2.0, 0.0, 0.4]
"""
    scene = falling_scene(tmp_path, bodies)
    trajectory = scene.rollout(1000)
    for name, where in (("on_floor", [0.0, 0.0, 0.1]), ("on_box", [2.0, 0.0, 0.4])):
        position = trajectory.position[:, 0, scene.body_names.index(name)]
        error = (position - torch.tensor(where, dtype=torch.float64)).abs().max()
        assert float(error) < 1e-3, (name, float(error))


@pytest.mark.slow
def test_torus_rests_on_a_box_on_its_hull(tmp_path):
    """Dropped tilted 45 degrees onto a box body: the torus's hull meets the box by faces and
    edges (`physics.contact_hull`), not as the box that bounds the hull (which would rest it
    where that box's corner or face is). It lands on its rim, falls flat and rests on the box's
    top within a millimetre. Measured: 2e-11 m from the top at rest; while it rolls down onto
    its face at 4 rad/s, the rim points that come down in a step were not in the previous
    step's manifold (the clipped face and its 4 points), and it sinks 9.9 mm for a step, then
    the recovery lifts it (lying on a plane, where every hull point is a candidate, 6 mm)."""
    table = """
[[bodies]]
name = "table"
shape = "box"
size = [2.0, 2.0, 0.2]
position = [0.0, 0.0, 0.1]
static = true
friction = 0.6
"""
    body = """name = "ring"
shape = "mesh"
mesh = "torus.obj"
density = 500.0
friction = 0.6
position = [0.0, 0.0, 0.8]
quat = [0.9238795, 0.3826834, 0.0, 0.0]
"""
    path = write_scene(tmp_path, body, FLOOR + table)
    text = open(path).read().replace("gravity = [0.0, 0.0, 0.0]", "gravity = [0.0, 0.0, -9.81]")
    open(path, "w").write(text)
    scene = diffcam.load_scene(path, dtype=torch.float64)
    assert len(scene.world.hull_contact_a) == 1
    trajectory = scene.rollout(300)
    i = scene.body_names.index("ring")
    torus = read_obj(MESHES_DIR / "torus.obj", dtype=torch.float64)
    lowest = trajectory.position[:, 0, i, 2] + (
        trajectory.rotation[:, 0, i, 2] @ torus.vertices.T
    ).amin(-1)
    assert float(lowest.min()) > 0.2 - 12e-3
    assert float((lowest[-20:] - 0.2).abs().max()) < 1e-3  # lying on the box
    assert float(trajectory.linear_velocity[-1, 0, i].norm()) < 0.05
