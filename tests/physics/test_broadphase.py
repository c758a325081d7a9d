"""The broadphase (`physics.broadphase`): the eager step leaves out the contact rows inactive in
every world of the batch. Results with it equal those without it (``WorldSpec(broadphase=
False)``, every candidate's rows in the solve) to round-off, values and float64 gradients; it
does leave rows out; a pair that starts far and comes into contact fast is not missed."""

from pathlib import Path

import pytest
import torch

import diffcam
import physics
from physics import broadphase
from physics import stepping as step_module
from physics.math3d import tracing_for_compilation

F64 = torch.float64
ROOT = Path(__file__).resolve().parents[2]


def _rollout_pair(make_world, steps: int, parameters: list[torch.Tensor], loss_fn):
    """Trajectories and d loss / d parameters with the broadphase and without it."""
    out = []
    for on in (True, False):
        world = make_world()
        world.broadphase = on
        trajectory = physics.rollout(world, physics.initial_state(world), steps)
        grads = torch.autograd.grad(loss_fn(trajectory), parameters)
        out.append((trajectory, grads))
    return out


def _assert_same(pair, atol=1e-9, grad_rtol=1e-7):
    (with_cut, grads_cut), (without, grads) = pair
    for a, b in zip(with_cut.tensors(), without.tensors(), strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)
    assert any(g.abs().max() > 0 for g in grads)
    for a, b in zip(grads_cut, grads, strict=True):
        torch.testing.assert_close(a, b, atol=grad_rtol * b.abs().max(), rtol=0)


def _loss(trajectory: physics.State) -> torch.Tensor:
    third = trajectory.position.shape[0] // 3
    return (
        (trajectory.position[-third:] ** 2).sum()
        + trajectory.linear_velocity.sum()
        + trajectory.rotation[-1].sum()
    )


def _counted_rows(monkeypatch) -> list[int]:
    """Record the number of rows every solve sweeps."""
    counts, build = [], step_module._sweep_system

    def counted(groups, equality):
        system = build(groups, equality)
        counts.append(system.rows.count)
        return system

    monkeypatch.setattr(step_module, "_sweep_system", counted)
    return counts


# The maximal-coordinate scenes with contacts: (file, steps, tolerance on the states and on
# the gradients relative to their largest, whether some candidate is inactive while others
# act). The box stack is chaotic: its narrowphase decisions flip on round-off (in its third
# world an ulp's change of the initial velocities moves the velocities by 1e-6 at step 20 and
# 9e-5 at step 60; the broadphase, a round-off change at every step, by 1e-6 and 4e-4, and its
# gradients by up to 3e-5 of their largest at step 30): a shorter horizon and wider tolerances.
# The throws have one candidate (ball and floor): nothing to leave out.
SCENES = [
    pytest.param("tests/data/scenes/incline.toml", 300, 1e-9, 1e-7, True, marks=pytest.mark.slow),
    ("tests/data/scenes/bounce.toml", 300, 1e-9, 1e-7, True),
    ("tests/data/scenes/throw.toml", 300, 1e-9, 1e-7, False),
    pytest.param(
        "diffcam/data/scenes/box_stack.toml", 30, 1e-4, 1e-3, True, marks=pytest.mark.slow
    ),
    pytest.param("diffcam/data/scenes/tumble.toml", 100, 1e-9, 1e-7, True, marks=pytest.mark.slow),
    ("diffcam/data/scenes/ball_throw.toml", 200, 1e-9, 1e-7, False),
]


@pytest.mark.parametrize("path, steps, atol, grad_rtol, fewer", SCENES)
@pytest.mark.slow
def test_bundled_scenes_equal_without_broadphase(path, steps, atol, grad_rtol, fewer, monkeypatch):
    """Three worlds with different initial velocities and frictions (float64): trajectories and
    the gradients of a loss with respect to the velocities and frictions."""
    import tomllib

    data = tomllib.loads((ROOT / path).read_text())
    moving = [b["name"] for b in data["bodies"] if not b.get("static", False)]
    shift = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.2, 0.1], [-0.5, 0.4, -0.3]], dtype=F64)
    overrides = {}
    for k, body in enumerate(data["bodies"]):
        if body["name"] in moving:
            velocity = torch.tensor(body.get("velocity", [0.0, 0.0, 0.0]), dtype=F64)
            overrides[f"bodies.{body['name']}.velocity"] = velocity + shift * (1 + 0.1 * k)
            friction = float(body.get("friction", 0.5))
            overrides[f"bodies.{body['name']}.friction"] = friction + torch.tensor(
                [0.0, 0.05, -0.05], dtype=F64
            )
    parameters = [v.requires_grad_() for v in overrides.values()]

    def make_world():
        scene = diffcam.load_scene(ROOT / path, batch_size=3, dtype=F64, overrides=overrides)
        assert scene.world.coordinates == "maximal"
        return scene.world

    counts = _counted_rows(monkeypatch)
    pair = _rollout_pair(make_world, steps, parameters, _loss)
    _assert_same(pair, atol=atol, grad_rtol=grad_rtol)
    # The cut left rows out: the solves with it swept fewer rows than those without it.
    swept, full = sum(counts[: len(counts) // 2]), sum(counts[len(counts) // 2 :])
    assert swept < full if fewer else swept == full


def test_incline_sweeps_only_the_rows_on_the_plank(monkeypatch):
    """The block on the incline: 28 candidates (8 corners on each of 3 planes, 4 box-box slots
    with the stopper), 84 rows; 4 corners on the plank act: 12 rows."""
    scene = diffcam.load_scene(ROOT / "tests/data/scenes/incline.toml", dtype=F64)
    with torch.no_grad():  # the nudged block lands on the plank after a few steps
        state = physics.rollout(scene.world, scene.initial_state(), 20)[-1]
    counts = _counted_rows(monkeypatch)
    for on in (True, False):
        scene.world.broadphase = on
        physics.step(scene.world, state)
    assert counts == [12, 84]  # one system per step: the relax pass sweeps the same


def _thin_plate_world(batch_size=1):
    """Fast small bodies aimed at thin static shapes from afar (dt = 0.01 s): a 2 cm box at
    30 m/s and a sphere at 25 m/s towards a 2 mm plate (each moves 10 to 15 times the plate's
    thickness per step), a box falling at 20 m/s onto the floor, a box at 40 m/s towards
    another box (along x, across the others)."""
    plate = physics.Body("plate", "box", [0.002, 1.0, 1.0], static=True, position=[1.0, 0, 0.6])
    bodies = [
        physics.Body("floor", "plane", [10, 10], static=True),
        plate,
        physics.Body(
            "dart",
            "box",
            [0.02, 0.02, 0.02],
            mass=0.05,
            position=[-1.0, 0.2, 0.7],
            velocity=[30.0, 0, 0],
        ),  # fmt: skip
        physics.Body(
            "pellet", "sphere", 0.01, mass=0.02, position=[-2.0, -0.2, 0.5], velocity=[25.0, 0, 0.5]
        ),  # fmt: skip
        physics.Body(
            "brick",
            "box",
            [0.1, 0.05, 0.05],
            mass=0.3,
            position=[3.0, 0, 3.0],
            velocity=[0, 0, -20.0],
            angular_velocity=[3.0, 1.0, 0],
        ),  # fmt: skip
        physics.Body("target", "box", [0.2, 0.2, 0.2], mass=1.0, position=[3.0, 2.0, 0.1]),
        physics.Body(
            "bullet",
            "box",
            [0.03, 0.03, 0.03],
            mass=0.1,
            position=[3.0, -3.0, 0.12],
            velocity=[0, 40.0, 0],
        ),  # fmt: skip
    ]
    spec = physics.WorldSpec(bodies=bodies, timestep=0.01)
    return physics.build_world(spec, batch_size=batch_size, dtype=F64)


@pytest.mark.slow
def test_fast_bodies_reach_thin_shapes_from_afar(monkeypatch):
    counts = _counted_rows(monkeypatch)
    world = _thin_plate_world()
    # The moving bodies' initial velocities. A static body's velocity (a moving surface) is
    # left out: at zero, with the dart and the pellet resting on the plate (zero approach, a
    # gap of round-off), the loss has a kink in the plate's normal velocity (its one-sided
    # differences are 79.7 and 117.4; the plate moving away leaves them, moving in pushes
    # them), so its gradient is a branch's that round-off picks, and the two paths, which
    # differ by round-off, may pick different ones. (Off the kink they agree with each other
    # and with central differences; see tests/physics/test_gradients.py
    # ::test_static_box_velocity_through_a_sphere_contact.)
    moving = world.structure.dynamic[None, :, None]
    velocity = world.initial_velocity.clone().requires_grad_()

    def make_world():
        made = _thin_plate_world()
        made.initial_velocity = torch.where(moving, velocity, velocity.detach())
        return made

    steps = 40
    pair = _rollout_pair(make_world, steps, [velocity], _loss)
    _assert_same(pair)
    with_cut = pair[0][0]
    names = world.body_names
    x = with_cut.position[..., 0, :, 0]
    # The dart and the pellet stop at the plate (x = 1 m, 1 mm thick each side) and never
    # pass it; the brick lands on the floor; the bullet hits the target and pushes it.
    for name in ("dart", "pellet"):
        assert x[:, names.index(name)].max() < 1.0
        assert x[-1, names.index(name)] > 0.9
    z = with_cut.position[..., 0, :, 2]
    assert z[:, names.index("brick")].min() > 0.0 and z[-1, names.index("brick")] < 0.2
    target_y = with_cut.position[:, 0, names.index("target"), 1]
    assert target_y[-1] > 2.05
    bullet_y = with_cut.position[:, 0, names.index("bullet"), 1]
    assert (target_y - bullet_y).min() > 0.05  # it pushes the target, never passes into it
    # While everything was far, the cut swept fewer rows than the full solve (the floor's
    # corners under the boxes on it stay).
    half = len(counts) // 2
    assert counts[0] < counts[half]


@pytest.mark.slow
def test_batch_keeps_a_row_any_world_needs(monkeypatch):
    """Worlds of a batch far apart in what they touch: the cut keeps the union, and each world
    equals the same world run alone."""
    velocities = torch.tensor([[30.0, 0, 0], [-5.0, 0, 0], [0.0, 0, 0]], dtype=F64)
    world = _thin_plate_world(batch_size=3)
    dart = world.body_index("dart")
    world.initial_velocity[:, dart] = velocities
    batch = physics.rollout(world, physics.initial_state(world), 30)
    for k in range(3):
        alone = _thin_plate_world()
        alone.initial_velocity[:, dart] = velocities[k]
        single = physics.rollout(alone, physics.initial_state(alone), 30)
        torch.testing.assert_close(batch.position[:, k], single.position[:, 0], atol=1e-9, rtol=0)


def _hinged_paddle(batch_size=1):
    """A box on a hinge swinging down onto the floor, next to a wall it never touches: contact
    rows left out while the joints hold (the exact start's scale over the joint-projected
    diagonal of the rows left out)."""
    bodies = [
        physics.Body("floor", "plane", [10, 10], static=True),
        physics.Body(
            "wall",
            "plane",
            [4, 4],
            static=True,
            position=[0, 3.0, 1.0],
            quat=[0.70710678, 0.70710678, 0.0, 0.0],
        ),  # fmt: skip
        physics.Body("paddle", "box", [0.6, 0.1, 0.2], mass=1.0, position=[0.35, 0, 0.45]),
    ]
    joints = [physics.Joint("pivot", "hinge", "world", "paddle", anchor=[0, 0, 0.45],
                            axis=[0, 1, 0], damping=0.01)]  # fmt: skip
    spec = physics.WorldSpec(bodies=bodies, joints=joints, timestep=0.01)
    return physics.build_world(spec, batch_size=batch_size, dtype=F64)


@pytest.mark.slow
def test_joints_with_contacts_equal_without_broadphase(monkeypatch):
    counts = _counted_rows(monkeypatch)
    spin = torch.tensor([[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, -1.0, 0.0]], dtype=F64)
    spin.requires_grad_()
    mass = torch.tensor([1.0, 1.5, 0.7], dtype=F64, requires_grad=True)

    def make_world():
        world = _hinged_paddle(batch_size=3)
        paddle = torch.tensor([0.0, 0.0, 1.0], dtype=F64)[None, :, None]  # the moving body
        world.initial_angular_velocity = world.initial_angular_velocity + paddle * spin[:, None]
        world.mass = torch.stack([world.mass[:, 0], world.mass[:, 1], mass], 1)
        return world

    pair = _rollout_pair(make_world, 80, [spin, mass], _loss)
    _assert_same(pair)
    # The paddle lands: some rows act and others (the wall's, the upper corners) are left out.
    half = len(counts) // 2
    assert 0 < counts[half - 1] < counts[-1]


def test_compiled_and_accelerator_steps_keep_every_row():
    world = _thin_plate_world()
    assert broadphase.enabled(world, torch.device("cpu"))
    assert not broadphase.enabled(world, torch.device("meta"))
    with tracing_for_compilation():
        assert not broadphase.enabled(world, torch.device("cpu"))
    world.broadphase = False
    assert not broadphase.enabled(world, torch.device("cpu"))
    spec = physics.WorldSpec(bodies=[physics.Body("b", "sphere", 0.1, mass=1.0)], broadphase=False)
    assert physics.build_world(spec).broadphase is False
