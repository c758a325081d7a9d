"""The pendulum-cart as a control problem (`diffcam.cartpole`): its layout read from the scene,
starts, the state features, the upright error and the paper's per-step cost."""

import math

import pytest
import torch

import diffcam
import physics
from diffcam import cartpole
from diffcam.scene import SCENES_DIR
from physics.joints import equality_rows, joint_frames

SCENE = SCENES_DIR / "pendulum_cart.toml"


pytestmark = pytest.mark.usefixtures("single_thread")


def random_start_columns(batch, dtype, seed=0):
    starts = cartpole.random_starts(batch, torch.Generator().manual_seed(seed), dtype=dtype)
    return starts.unbind(-1)


def test_hanging_start_at_rest_is_the_scene_files_state():
    scene = diffcam.load_scene(SCENE, batch_size=2, dtype=torch.float64)
    zero = torch.zeros(2, dtype=torch.float64)
    state = cartpole.initial_states(scene, zero, zero, zero, zero)
    for ours, theirs in zip(state.tensors(), scene.initial_state().tensors(), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


def test_random_starts_are_joint_consistent_before_and_after_a_step():
    scene = diffcam.load_scene(SCENE, batch_size=6, dtype=torch.float64)
    x, theta, x_dot, theta_dot = random_start_columns(6, torch.float64)
    state = cartpole.initial_states(scene, x, theta, x_dot, theta_dot)
    q, q_dot = physics.joint_positions(scene.world, state)  # (rail, hinge) coordinates
    torch.testing.assert_close(q[:, 0], x)
    wrapped = torch.remainder(q[:, 1] - theta + math.pi, 2 * math.pi) - math.pi
    torch.testing.assert_close(wrapped, torch.zeros_like(theta), atol=1e-12, rtol=0)
    torch.testing.assert_close(q_dot, torch.stack([x_dot, theta_dot], -1))

    def joint_error(s):
        return equality_rows(scene.world, joint_frames(scene.world, s.position, s.rotation))[1]

    assert joint_error(state).abs().max() < 1e-12
    after = scene.step(state, torch.zeros(6, 1, dtype=torch.float64))
    assert joint_error(after).abs().max() < 1e-6


def test_initial_states_reject_a_wrong_batch():
    scene = diffcam.load_scene(SCENE, batch_size=2)
    with pytest.raises(ValueError, match=r"theta has shape \(3,\), expected \(2,\)"):
        cartpole.initial_states(
            scene, torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.zeros(2)
        )


def test_a_scene_that_is_not_a_hanging_pendulum_cart_is_named(tmp_path):
    text = SCENE.read_text().replace("position = [0.0, -0.13, 0.7]", "position = [0.2, -0.13, 0.7]")
    path = tmp_path / "tilted.toml"
    path.write_text(text)
    with pytest.raises(diffcam.SceneError, match=r"tilted.toml: bodies.pole.position"):
        cartpole.CartPole.from_scene(diffcam.load_scene(path))


def test_convention_theta_pi_is_upright():
    scene = diffcam.load_scene(SCENE, batch_size=3, dtype=torch.float64)
    g = cartpole.CartPole.from_scene(scene)
    theta = torch.tensor([0.0, math.pi, math.pi - 0.1], dtype=torch.float64)
    zero = torch.zeros(3, dtype=torch.float64)
    state = cartpole.initial_states(scene, zero, theta, zero, zero, g)
    torch.testing.assert_close(
        cartpole.upright_error(state, g), torch.tensor([math.pi, 0.0, 0.1], dtype=torch.float64)
    )
    features = cartpole.state_features(state, g)
    torch.testing.assert_close(features[:, 2], torch.sin(theta))
    torch.testing.assert_close(features[:, 3], torch.cos(theta))
    # Upright, the pole's centre is above the hinge and its tip a pole length above it.
    hinge_z = scene.initial_state().position[0, g.cart, 2] + g.hinge_in_cart[2]
    assert state.position[1, g.pole, 2] > hinge_z + 0.49


def test_step_cost_by_hand():
    scene = diffcam.load_scene(SCENE, batch_size=4, dtype=torch.float64)
    g = cartpole.CartPole.from_scene(scene)
    theta = torch.tensor([math.pi, 0.0, math.pi, math.pi], dtype=torch.float64)
    x = torch.tensor([0.0, 0.45, 0.0, 0.3], dtype=torch.float64)
    x_dot = torch.tensor([0.0, 1.5, 0.0, 0.0], dtype=torch.float64)
    theta_dot = torch.tensor([0.0, 0.0, 2.0, 0.0], dtype=torch.float64)
    state = cartpole.initial_states(scene, x, theta, x_dot, theta_dot, g)
    length, w = g.tip_distance, 0.1
    # Target above the cart: upright at rest costs 0 wherever the cart is; hanging moving at
    # 1.5 m/s: 2 L + w 1.5^2; upright spinning: w (2 L)^2.
    cost = cartpole.step_cost(state, g, speed_weight=w, target="cart")
    expected = [0.0, 2 * length + w * 1.5**2, w * (2.0 * length) ** 2, 0.0]
    torch.testing.assert_close(cost, torch.tensor(expected, dtype=torch.float64))
    # Fixed target above the rail's centre: the cart's offset counts too.
    cost = cartpole.step_cost(state, g, speed_weight=w, target="fixed")
    expected[1] = math.hypot(0.45, 2 * length) + w * 1.5**2
    expected[3] = 0.3
    torch.testing.assert_close(cost, torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError, match="target"):
        cartpole.step_cost(state, g, 0.1, target="centre")


def test_loss_has_finite_gradient_exactly_upright():
    scene = diffcam.load_scene(SCENE, batch_size=1, dtype=torch.float64)
    g = cartpole.CartPole.from_scene(scene)
    theta = torch.full((1,), math.pi, dtype=torch.float64, requires_grad=True)
    zero = torch.zeros(1, dtype=torch.float64)
    state = cartpole.initial_states(scene, zero, theta, zero, zero, g)
    (grad,) = torch.autograd.grad(cartpole.step_cost(state, g, 0.01).sum(), theta)
    assert torch.isfinite(grad).all()


def test_upright_share_draws_the_last_rows_near_upright_and_keeps_the_rest():
    mixed = cartpole.StartRanges(upright_share=0.25, upright_theta=0.4)
    plain = cartpole.random_starts(400, torch.Generator().manual_seed(3))
    starts = cartpole.random_starts(400, torch.Generator().manual_seed(3), mixed)
    near = (starts[:, 1] - math.pi).abs()
    assert near[300:].max() <= 0.4 + 1e-6 and near[300:].max() > 0.39
    # The same draws: the first rows and the other columns are those of the plain starts.
    assert torch.equal(starts[:300], plain[:300])
    assert torch.equal(starts[:, [0, 2, 3]], plain[:, [0, 2, 3]])
    assert (plain[300:, 1] - math.pi).abs().max() > 1.0  # so the test could fail
    with pytest.raises(ValueError, match="upright_share"):
        cartpole.StartRanges(upright_share=1.5)


# --------------------------------------------------------------------------- controllers
@pytest.mark.parametrize("name", sorted(cartpole.SHIPPED))
def test_every_shipped_controller_loads_and_acts(name):
    # a short rollout from two starts: finite actions within the motor's limit, the frame
    # stack carried on as memory (pixels), the network in eval mode
    scene = diffcam.load_scene(SCENE, batch_size=2)
    controller = cartpole.load_controller(name, scene)
    assert not controller.policy.training
    assert controller.settings["observation"] == name.split("_")[0]
    state = cartpole.states_from_starts(scene, torch.tensor([[0.0, 0.0, 0, 0], [0.2, 3.0, 0, 0]]))
    every = controller.settings["control_every"]
    result = controller.rollout(scene, 3 * every, state)
    assert result.actions.shape == (3, 2, 1)
    assert torch.isfinite(result.actions).all() and result.actions.abs().max() <= 30.0
    assert result.trajectory.position.shape[0] == 3 * every + 1
    if name.startswith("pixels"):
        assert result.memory.shape == (2, 3 * controller.settings["frames"], 48, 144)
        more = controller.rollout(scene, every, result.trajectory[-1], result.memory)
        assert more.actions.shape == (1, 2, 1)


def test_load_controller_names_what_is_wrong(tmp_path):
    scene = diffcam.load_scene(SCENE)
    with pytest.raises(FileNotFoundError, match="no controller file at .*nothing.pt"):
        cartpole.load_controller(tmp_path / "nothing.pt", scene)
    torch.save({"weights": {}}, tmp_path / "odd.pt")
    with pytest.raises(ValueError, match="odd.pt: not a controller file \\(no 'policy' entry"):
        cartpole.load_controller(tmp_path / "odd.pt", scene)


def test_observed_scene_is_the_scene_through_its_downscaled_camera():
    scene = diffcam.load_scene(SCENE)
    assert cartpole.observed_scene(scene, 1) is scene
    view = cartpole.observed_scene(scene, 2)
    assert (view.camera.width, view.camera.height) == (144, 48)
    with pytest.raises(ValueError, match="need a diffcam.Scene or a RandomizedScene"):
        cartpole.observed_scene(object(), 2)
