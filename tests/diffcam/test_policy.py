"""The pixel policy and the differentiable pixel rollout (issue 5's reusable pieces)."""

import pytest
import torch

import diffcam
import physics
from tests.finite_differences import check_directional

TINY_CART_POLE = """
[world]
timestep = 0.02

[camera]
resolution = [32, 16]
position = [0.0, -3.0, 1.0]
look_at = [0.0, 0.0, 1.0]
fov_y_deg = 40.0
background = [0.9, 0.9, 0.9]

[[bodies]]
name = "cart"
shape = "box"
size = [0.4, 0.16, 0.2]
mass = 1.0
position = [0.0, 0.0, 1.2]
color = [0.6, 0.3, 0.1]
collide = false

[[bodies]]
name = "pole"
shape = "box"
size = [0.08, 0.08, 0.9]
mass = 0.2
position = [0.2, -0.13, 0.85]
quat = [0.9659258, 0.0, -0.2588190, 0.0]
color = [0.1, 0.1, 0.8]
collide = false

[[joints]]
name = "rail"
type = "slider"
parent = "world"
child = "cart"
anchor = [0.0, 0.0, 1.2]
axis = [1.0, 0.0, 0.0]
motor = { type = "force", max = 20.0 }

[[joints]]
name = "hinge"
type = "hinge"
parent = "cart"
child = "pole"
anchor = [0.0, -0.13, 1.2]
axis = [0.0, 1.0, 0.0]
"""


@pytest.fixture
def scene_path(tmp_path):
    path = tmp_path / "tiny_cart_pole.toml"
    path.write_text(TINY_CART_POLE)
    return path


def tiny_policy(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    policy = diffcam.PixelPolicy(n_actions=1, frames=2, max_action=10.0, width=2, hidden=4)
    return policy.to(dtype)


def test_push_frame_keeps_the_newest_last():
    first, second = torch.zeros(2, 3, 4, 5), torch.ones(2, 3, 4, 5)
    stack = diffcam.push_frame(None, first, 3)
    assert stack.shape == (2, 9, 4, 5) and stack.abs().sum() == 0
    stack = diffcam.push_frame(stack, second, 3)
    assert stack[:, 6:].min() == 1 and stack[:, :6].max() == 0


def test_initial_policy_is_the_zero_policy_at_full_resolution():
    policy = diffcam.PixelPolicy(n_actions=1, frames=3, max_action=30.0)
    actions = policy(torch.rand(4, 9, 96, 288))
    assert actions.shape == (4, 1) and torch.equal(actions, torch.zeros(4, 1))


def test_rollout_shapes_and_control_rate(scene_path):
    scene = diffcam.load_scene(scene_path, batch_size=2)
    result = diffcam.pixel_rollout(scene, tiny_policy(), steps=6, control_every=3, frames=2)
    assert result.trajectory.position.shape == (7, 2, 2, 3)
    assert result.actions.shape == (2, 2, 1)
    assert result.frames.shape == (2, 2, 3, 16, 32)
    with pytest.raises(ValueError, match="multiple of control_every"):
        diffcam.pixel_rollout(scene, tiny_policy(), steps=5, control_every=3)


def loss_of(result):
    # Keep the cart near the centre and the pole moving: depends on every step.
    return (
        result.trajectory.position[..., 0, 0].square().mean()
        + result.actions.square().mean() * 1e-3
    )


def test_gradient_reaches_every_layer_and_is_finite(scene_path):
    scene = diffcam.load_scene(scene_path)
    policy = tiny_policy()
    torch.nn.init.normal_(policy.output.weight, std=0.5)  # leave the zero policy
    loss = loss_of(diffcam.pixel_rollout(scene, policy, steps=6, frames=2, edge_softness=0.5))
    loss.backward()
    for name, parameter in policy.named_parameters():
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


def test_gradient_matches_finite_differences_float64(scene_path):
    scene = diffcam.load_scene(scene_path, dtype=torch.float64)
    policy = tiny_policy(torch.float64)
    torch.nn.init.normal_(policy.output.weight, std=0.5)
    parameters = list(policy.parameters())
    loss = loss_of(diffcam.pixel_rollout(scene, policy, steps=4, frames=2, edge_softness=1.0))
    grads = torch.autograd.grad(loss, parameters)
    direction = [
        torch.randn_like(p, generator=torch.Generator().manual_seed(i))
        for i, p in enumerate(parameters)
    ]
    analytic = sum((g * d).sum() for g, d in zip(grads, direction, strict=True))
    eps = 1e-6

    def shifted(sign):
        with torch.no_grad():
            for p, d in zip(parameters, direction, strict=True):
                p.add_(sign * eps * d)
            value = loss_of(
                diffcam.pixel_rollout(scene, policy, steps=4, frames=2, edge_softness=1.0)
            )
            for p, d in zip(parameters, direction, strict=True):
                p.sub_(sign * eps * d)
        return value

    numeric = (shifted(1.0) - shifted(-1.0)) / (2 * eps)
    assert abs(analytic.item()) > 1e-8
    assert abs(analytic.item() - numeric.item()) / abs(numeric.item()) < 1e-4


def test_the_observation_path_carries_gradient(scene_path):
    """A loss on the actions alone depends on the state only through the rendered frames:
    its gradient to the start velocities equals the central difference (float64)."""
    scene = diffcam.load_scene(scene_path, dtype=torch.float64)
    policy = tiny_policy(torch.float64)
    torch.nn.init.normal_(policy.output.weight, std=0.5)
    state = scene.initial_state()

    def loss(velocity):
        result = diffcam.pixel_rollout(scene, policy, steps=4, frames=2, edge_softness=0.5,
                                       state=state.replace(linear_velocity=velocity))  # fmt: skip
        return result.actions.sum()

    check_directional(loss, [state.linear_velocity + 0.1], rtol=1e-5, names=["velocity"])


def test_checkpointed_pixel_rollout_gives_the_same_gradient(scene_path):
    scene = diffcam.load_scene(scene_path, dtype=torch.float64)

    def grads(checkpoint_every):
        policy = tiny_policy(torch.float64, seed=1)
        torch.nn.init.normal_(
            policy.output.weight, std=0.5, generator=torch.Generator().manual_seed(3)
        )
        loss = loss_of(diffcam.pixel_rollout(scene, policy, steps=6, frames=2, edge_softness=0.5,
                                             checkpoint_every=checkpoint_every, gradient_decay=0.9))  # fmt: skip
        return torch.autograd.grad(loss, list(policy.parameters()))

    for plain, checkpointed in zip(grads(None), grads(2), strict=True):
        torch.testing.assert_close(plain, checkpointed, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("downsample", [1, 2, 4])
def test_downsampled_policy_sees_the_same_feature_map_size_and_starts_at_zero(downsample):
    policy = diffcam.PixelPolicy(n_actions=1, frames=3, max_action=30.0, downsample=downsample)
    frames = torch.rand(2, 9, 96 // downsample, 288 // downsample)
    assert policy.features(frames).shape == (2, 32, 6, 18)
    assert torch.equal(policy(frames), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="downsample"):
        diffcam.PixelPolicy(n_actions=1, downsample=3)


def test_pixel_observer_downsample_averages_blocks_and_passes_gradients(scene_path):
    scene = diffcam.load_scene(scene_path, batch_size=2, dtype=torch.float64)
    state = scene.initial_state()
    position = state.position.detach().requires_grad_(True)
    state = type(state)(position, state.rotation, state.linear_velocity, state.angular_velocity)
    full = scene.render(state, edge_softness=1.0)  # flat colours: gradients at the edges
    observe = diffcam.pixel_observer(scene, frames=2, edge_softness=1.0, downsample=2)
    stack, memory, frame = observe(state, None)
    assert frame.shape == (2, 3, 8, 16) and stack.shape == (2, 6, 8, 16)
    block = full[:, :, 2:4, 6:8].mean((-1, -2))
    torch.testing.assert_close(frame[:, :, 1, 3], block)
    (grad,) = torch.autograd.grad(frame.sum(), position)
    assert grad.abs().sum() > 0  # the renderer's gradient survives the pooling


def test_state_policy_starts_at_zero_and_holds_a_linear_feedback_through_its_skip():
    torch.manual_seed(0)
    scale = [1.0, 0.5, 2.0]
    policy = diffcam.StatePolicy(3, 1, max_action=30.0, hidden=8, input_scale=scale)
    features = torch.randn(5, 3)
    assert torch.equal(policy(features), torch.zeros(5, 1))
    gain = torch.tensor([0.3, -0.2, 0.1])
    with torch.no_grad():
        policy.output.weight[0, 8:] = gain  # the skip part: hidden units stay at weight 0
    expected = 30.0 * torch.tanh((features * torch.tensor(scale)) @ gain)
    torch.testing.assert_close(policy(features)[:, 0], expected)


class _Line:
    """A toy 'scene': each body's position moves by the action every step (x' = x + a)."""

    def step(self, state, action):
        return state.replace(position=state.position + action[:, :, None])


def test_gradient_decay_scales_every_path_by_alpha_per_step():
    # A loss on the state T steps later reaches the start through the physics, through the
    # observation -> policy -> held action, and through the observer's memory (past
    # observations): with the decay on every path, each arrives scaled by alpha^T, so the
    # whole gradient is alpha^T times the undecayed one. (Damping the physics path only
    # fails this: the closed loop kept its full gradient.)
    def observe(state, memory):
        now = state.position[:, :, 0]
        memory = now if memory is None else torch.cat([memory[:, 1:], now], 1)
        return torch.cat([now, memory], 1), memory, None

    weight = torch.tensor([[0.7], [-0.4], [0.3]], dtype=torch.float64)

    def policy(observation):  # (B, 3): now and the two past observations
        return torch.sin(observation @ weight)

    def grad(alpha, every, steps):
        start = torch.tensor([[[0.3, 0.0, 0.0]]], dtype=torch.float64, requires_grad=True)
        eye = torch.eye(3, dtype=torch.float64)[None, None]
        zero = torch.zeros(1, 1, 3, dtype=torch.float64)
        state = physics.State(start, eye, zero, zero)
        memory = torch.zeros(1, 2, dtype=torch.float64)
        result = diffcam.policy_rollout(_Line(), policy, observe, steps, state,
                                        control_every=every, gradient_decay=alpha,
                                        memory=memory)  # fmt: skip
        return torch.autograd.grad(result.trajectory.position[-1, 0, 0, 0], start)[0]

    for every, steps in ((1, 5), (2, 6), (3, 9)):
        plain, decayed = grad(1.0, every, steps), grad(0.8, every, steps)
        assert plain.abs().sum() > 0.1
        torch.testing.assert_close(decayed, 0.8**steps * plain, rtol=1e-12, atol=0)


def test_without_the_observation_gradient_the_policy_still_learns_but_the_loop_is_cut(
    scene_path,
):
    scene = diffcam.load_scene(scene_path, dtype=torch.float64)
    state = scene.initial_state()
    velocity = state.linear_velocity.clone().requires_grad_(True)

    def grads(observation_gradient):
        policy = tiny_policy(torch.float64, seed=1)
        torch.nn.init.normal_(policy.output.weight, std=0.5)
        result = diffcam.policy_rollout(
            scene, policy, diffcam.pixel_observer(scene, 2, 0.5), 4,
            state.replace(linear_velocity=velocity), control_every=2,
            observation_gradient=observation_gradient,
        )  # fmt: skip
        return torch.autograd.grad(
            result.actions.sum(), [velocity, policy.output.weight], allow_unused=True
        )

    to_state, to_weights = grads(True)
    assert to_state.abs().sum() > 0 and to_weights.abs().sum() > 0
    cut_state, cut_weights = grads(False)
    # The actions depend on the state only through the frames: cut, no gradient reaches it.
    assert cut_state is None or cut_state.abs().sum() == 0
    assert cut_weights.abs().sum() > 0
