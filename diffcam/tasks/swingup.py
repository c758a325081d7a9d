"""The pendulum-cart swing-up task (Degrave et al. 2019, section 3.4), from pixels or from state.

Pieces, each usable on its own:

- `CartPole`: where the cart and the pole are in a scene's state, and the pole's geometry, read
  from the scene file (``scenes/pendulum_cart.toml`` or any scene with the same structure).
- `initial_states`, `random_starts`: batched starts from (x, theta, x_dot, theta_dot).
  theta is the pole's angle about the hinge axis (+y): 0 hanging down, pi upright.
- `state_features`, `upright_error`, `step_cost`, `swingup_loss`: what the state-based baseline
  sees, how far the pole is from upright, and the paper's loss.
- `upright_stretches`: evaluation metrics from per-step upright errors.
- `SwingUpConfig`, `make_policy`, `SwingUpEpisodes`: one batch of episodes as an ``nn.Module``
  (starts -> loss), so that ``DistributedDataParallel`` can wrap it.
- `evaluate`: long no-grad rollouts from the hanging start and random starts, plus a video.
- `save_policy`, `load_policy`: the weights file the example ships.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

import physics

from .._safe import safe_norm
from ..errors import SceneError
from ..policy import PixelPolicy, PolicyRollout, StatePolicy, pixel_observer, policy_rollout

__all__ = [
    "STATE_FEATURES",
    "CartPole",
    "StartRanges",
    "SwingUpConfig",
    "SwingUpEpisodes",
    "evaluate",
    "curriculum_ranges",
    "initial_states",
    "load_policy",
    "make_policy",
    "motor_limit",
    "random_starts",
    "save_policy",
    "states_from_starts",
    "state_features",
    "step_cost",
    "swingup_loss",
    "time_iteration",
    "upright_error",
    "upright_stretches",
]

STATE_FEATURES = ("x", "x_dot", "sin_theta", "cos_theta", "theta_dot")
# Brings the features (m, m/s, 1, 1, rad/s) to order one for the baseline's MLP.
_FEATURE_SCALE = [1.0, 0.5, 1.0, 1.0, 0.1]


def _floats(value) -> list[float]:
    return torch.as_tensor(value, dtype=torch.float64).flatten().tolist()


@dataclasses.dataclass(frozen=True)
class CartPole:
    """The pendulum-cart's layout in a scene, read from its file.

    Attributes:
        cart, pole: body indices in the state.
        hinge_in_cart: (3,) the hinge anchor in the cart's frame (m).
        hanging_in_pole: (3,) unit vector from the hinge to the pole's centre, pole frame.
        centre_distance: hinge to pole centre (m).
        tip_distance: hinge to the far end of the pole (m).
        timestep: physics timestep (s).
        upright_tip: (3,) world position (m) of the tip of an upright pole on the cart at its
            file position (normally the rail's centre): the fixed target of the loss.
    """

    cart: int
    pole: int
    hinge_in_cart: tuple[float, float, float]
    hanging_in_pole: tuple[float, float, float]
    centre_distance: float
    tip_distance: float
    timestep: float
    upright_tip: tuple[float, float, float]

    @classmethod
    def from_scene(cls, scene) -> CartPole:
        """Read the layout from ``scene`` (a `diffcam.Scene`).

        Raises `SceneError` naming the file and key if the scene is not a pendulum-cart: bodies
        "cart" and "pole", a slider "rail" (world -> cart) along +x with a motor, a hinge
        "hinge" (cart -> pole) about +y, and the pole hanging straight down in the file.
        """
        file = scene.path

        def fail(key: str, reason: str, accepted: str) -> SceneError:
            return SceneError(reason, file=file, key=key, accepted=accepted)

        for name in ("cart", "pole"):
            if name not in scene.body_names:
                raise fail(
                    "bodies",
                    f"no body named {name!r}",
                    "a cart-pole scene such as "
                    "scenes/pendulum_cart.toml, with bodies 'cart' and 'pole'",
                )
        joints = {j["name"]: j for j in scene.config.joints}
        expected = {
            "rail": ("slider", "world", "cart", [1.0, 0.0, 0.0]),
            "hinge": ("hinge", "cart", "pole", [0.0, 1.0, 0.0]),
        }
        for name, (kind, parent, child, axis) in expected.items():
            joint = joints.get(name)
            if joint is None:
                raise fail(
                    "joints",
                    f"no joint named {name!r}",
                    f"a {kind} joint {name!r} from {parent!r} to {child!r}",
                )
            if (joint["type"], joint["parent"], joint["child"]) != (kind, parent, child):
                raise fail(
                    f"joints.{name}",
                    "unexpected joint type or bodies",
                    f"type = {kind!r}, parent = {parent!r}, child = {child!r}",
                )
            if max(abs(a - b) for a, b in zip(_floats(joint["axis"]), axis, strict=True)) > 1e-9:
                raise fail(
                    f"joints.{name}.axis", f"axis {_floats(joint['axis'])}", f"axis = {axis}"
                )
        if "motor" not in joints["rail"]:
            raise fail("joints.rail.motor", "the rail has no motor", "a force motor")

        cart, pole = scene.body_names.index("cart"), scene.body_names.index("pole")
        anchor = torch.tensor(_floats(joints["hinge"]["anchor"]), dtype=torch.float64)
        # The file's poses, in float64 (the scene's state may be float32).
        bodies = {b["name"]: b for b in scene.config.bodies}
        cart_p, cart_r, pole_p, pole_r = (
            torch.tensor(_floats(bodies[name].get(key, default)), dtype=torch.float64)
            for name in ("cart", "pole")
            for key, default in (("position", [0.0] * 3), ("quat", [1.0, 0.0, 0.0, 0.0]))
        )
        cart_r, pole_r = physics.quat_to_matrix(cart_r), physics.quat_to_matrix(pole_r)
        arm = pole_p - anchor
        centre_distance = float(arm.norm())
        if centre_distance < 1e-6 or float((arm / centre_distance)[2]) > -1 + 1e-6:
            raise fail(
                "bodies.pole.position",
                "the pole does not hang straight down from the "
                f"hinge anchor {anchor.tolist()} (its centre is at {pole_p.tolist()})",
                "a pole centre directly below the hinge: theta = 0 is hanging",
            )
        hanging = pole_r.T @ (arm / centre_distance)
        body = bodies["pole"]
        size = _floats(body["size"])
        if body["shape"] in ("capsule", "cylinder") and abs(abs(float(hanging[2])) - 1) < 1e-6:
            half = size[1] / 2 + (size[0] if body["shape"] == "capsule" else 0.0)
        elif body["shape"] == "box" and abs(abs(float(hanging[2])) - 1) < 1e-6:
            half = size[2] / 2
        else:
            raise fail(
                "bodies.pole",
                f"a {body['shape']} pole whose hanging direction in its "
                f"frame is {hanging.tolist()}",
                "a capsule, cylinder or box pole along its body z axis",
            )
        return cls(
            cart=cart,
            pole=pole,
            hinge_in_cart=tuple((cart_r.T @ (anchor - cart_p)).tolist()),
            hanging_in_pole=tuple(hanging.tolist()),
            centre_distance=centre_distance,
            tip_distance=centre_distance + half,
            timestep=float(scene.timestep),
            upright_tip=tuple(
                (anchor + anchor.new_tensor([0.0, 0.0, centre_distance + half])).tolist()
            ),
        )


# --------------------------------------------------------------------------- starts
def _rotation_y(theta: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) rotations by ``theta`` (...) radians about +y."""
    c, s = torch.cos(theta), torch.sin(theta)
    zero, one = torch.zeros_like(theta), torch.ones_like(theta)
    rows = [c, zero, s, zero, one, zero, -s, zero, c]
    return torch.stack(rows, -1).reshape(*theta.shape, 3, 3)


def initial_states(
    scene,
    x: torch.Tensor,
    theta: torch.Tensor,
    x_dot: torch.Tensor,
    theta_dot: torch.Tensor,
    cartpole: CartPole | None = None,
) -> physics.State:
    """Joint-consistent states of the pendulum-cart, one per batch element.

    The cart sits at world x = ``x`` (its file's y, z and rotation), the pole is the file's
    hanging pole turned by ``theta`` about the hinge axis (+y) around the hinge anchor:
    centre = hinge + R_y(theta) (centre_file - hinge_file), rotation R_y(theta) R_file. The cart
    moves at ``x_dot`` along x; the pole turns at ``theta_dot`` about +y, and its centre moves
    at x_dot e_x + omega x (centre - hinge). Every other body keeps its file state.

    Args:
        scene: a pendulum-cart `diffcam.Scene` of batch size B.
        x: (B,) cart position (m).
        theta: (B,) pole angle (rad): 0 hanging down, pi upright.
        x_dot: (B,) cart velocity (m/s).
        theta_dot: (B,) pole angular velocity about +y (rad/s).
        cartpole: the layout (default: read from ``scene``).

    Returns:
        physics.State (B, N, ...), differentiable with respect to the four inputs.
    """
    g = CartPole.from_scene(scene) if cartpole is None else cartpole
    base = scene.initial_state()
    batch = base.position.shape[0]
    for name, value in (("x", x), ("theta", theta), ("x_dot", x_dot), ("theta_dot", theta_dot)):
        if value.shape != (batch,):
            raise ValueError(
                f"initial_states: {name} has shape {tuple(value.shape)}, expected "
                f"({batch},) (the scene's batch size)"
            )
    like = base.position
    x, theta, x_dot, theta_dot = (v.to(like) for v in (x, theta, x_dot, theta_dot))
    zero = torch.zeros_like(x)
    cart_position = torch.stack([x, base.position[:, g.cart, 1], base.position[:, g.cart, 2]], -1)
    hinge = cart_position + base.rotation[:, g.cart] @ like.new_tensor(g.hinge_in_cart)
    turn = _rotation_y(theta)
    pole_rotation = turn @ base.rotation[:, g.pole]
    arm = g.centre_distance * (pole_rotation @ like.new_tensor(g.hanging_in_pole))
    cart_velocity = torch.stack([x_dot, zero, zero], -1)
    spin = torch.stack([zero, theta_dot, zero], -1)

    def with_bodies(tensor: torch.Tensor, cart: torch.Tensor, pole: torch.Tensor) -> torch.Tensor:
        parts = list(tensor.unbind(1))
        parts[g.cart], parts[g.pole] = cart, pole
        return torch.stack(parts, 1)

    return physics.State(
        with_bodies(base.position, cart_position, hinge + arm),
        with_bodies(base.rotation, base.rotation[:, g.cart], pole_rotation),
        with_bodies(
            base.linear_velocity, cart_velocity, cart_velocity + torch.linalg.cross(spin, arm)
        ),
        with_bodies(base.angular_velocity, torch.zeros_like(spin), spin),
    )


@dataclasses.dataclass(frozen=True)
class StartRanges:
    """Half-widths of the uniform start distribution: each of (x, theta, x_dot, theta_dot) is
    drawn from [-r, r], theta from [theta_centre - r, theta_centre + r]. Units: m, rad, m/s,
    rad/s. theta spans every angle by default; theta_centre = pi centres it on upright.

    ``upright_share`` of each batch (its last rows, rounded) instead draws theta within
    ``upright_theta`` of upright, the other three as above: balancing is then practised from
    the first iteration instead of waiting for the swing-up to bring the pole there. The loss
    stays as it is; only the starts the gradient averages over change. The measured swing-up
    recipe uses 0.5 (README).

    Keep some spread: from the exact hanging start at rest the zero policy is a saddle point of
    the loss (pushing left or right lowers it alike, so its gradient is exactly zero) and
    training would never leave it."""

    x: float = 0.5
    theta: float = math.pi
    x_dot: float = 0.5
    theta_dot: float = 1.0
    theta_centre: float = 0.0
    upright_share: float = 0.0
    upright_theta: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.upright_share <= 1.0:
            raise ValueError(f"StartRanges.upright_share is {self.upright_share}; use 0 to 1")


def curriculum_ranges(
    ranges: StartRanges, iteration: int, iterations: int, first_theta: float = 0.3
) -> StartRanges:
    """The start distribution of training iteration ``iteration`` (0-based) of a curriculum
    that begins near upright and widens to every angle (a reverse curriculum: the controller
    first learns to balance, then to catch from further down, and last to swing up).

    Over the first ``iterations`` iterations theta is centred on upright (pi) with a half-width
    growing linearly from ``first_theta`` to pi (at pi every angle, the hanging start
    included); from then on ``ranges`` as given. x, x_dot and theta_dot keep ``ranges``'.
    ``iterations`` 0: no curriculum.
    """
    if iteration >= iterations:
        return ranges
    half = first_theta + (math.pi - first_theta) * iteration / iterations
    return dataclasses.replace(ranges, theta=half, theta_centre=math.pi)


def random_starts(
    count: int,
    generator: torch.Generator,
    ranges: StartRanges = StartRanges(),  # noqa: B008 (frozen, so a shared default is safe)
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(count, 4) random starts (x, theta, x_dot, theta_dot), uniform within ``ranges``; the
    last round(upright_share * count) rows have theta uniform within ``upright_theta`` of pi.

    Draws on the CPU from ``generator`` (one call, a fixed number of draws), so the same
    generator state gives the same starts on any machine.
    """
    half = torch.tensor([ranges.x, ranges.theta, ranges.x_dot, ranges.theta_dot], dtype=dtype)
    centre = torch.tensor([0.0, ranges.theta_centre, 0.0, 0.0], dtype=dtype)
    unit = 2 * torch.rand(count, 4, generator=generator, dtype=dtype) - 1
    starts = centre + unit * half
    near = round(ranges.upright_share * count)
    if near:
        starts[count - near :, 1] = math.pi + unit[count - near :, 1] * ranges.upright_theta
    return starts


def states_from_starts(scene, starts: torch.Tensor, cartpole: CartPole | None = None):
    """`initial_states` from a (B, 4) tensor of (x, theta, x_dot, theta_dot)."""
    return initial_states(scene, *starts.unbind(-1), cartpole=cartpole)


# --------------------------------------------------------------------------- state, loss
def _pole_direction(state: physics.State, g: CartPole) -> torch.Tensor:
    """(..., 3) unit vector from the hinge to the pole's centre, world frame."""
    return state.rotation[..., g.pole, :, :] @ state.rotation.new_tensor(g.hanging_in_pole)


def upright_error(state: physics.State, cartpole: CartPole) -> torch.Tensor:
    """(...,) angle (rad, in [0, pi]) between the pole and the upright direction.

    For a state (B, N, ...) it is (B,), for a trajectory (T, B, N, ...) (T, B). In the plane
    of the hinge it is |theta - pi| wrapped to [0, pi]. Not meant for gradients (use the loss).
    """
    u = _pole_direction(state, cartpole)
    return torch.atan2(torch.hypot(u[..., 0], u[..., 1]), u[..., 2])


def state_features(state: physics.State, cartpole: CartPole) -> torch.Tensor:
    """(..., 5) features (x, x_dot, sin theta, cos theta, theta_dot) of a state (m, m/s, 1, 1,
    rad/s): what the state-based baseline sees. sin and cos come from the pole's direction, so
    they are smooth at every angle."""
    g = cartpole
    u = _pole_direction(state, g)
    return torch.stack(
        [
            state.position[..., g.cart, 0],
            state.linear_velocity[..., g.cart, 0],
            -u[..., 0],
            -u[..., 2],
            state.angular_velocity[..., g.pole, 1],
        ],
        -1,
    )


def step_cost(
    state: physics.State, cartpole: CartPole, speed_weight: float, target: str = "fixed"
) -> torch.Tensor:
    """(...,) the per-step cost of the paper's loss (section 3.4).

    cost = |tip - target| + speed_weight |v_tip|^2, where tip is the pole's far end and v_tip
    its velocity: m plus (s^2/m)(m/s)^2. The distance uses a norm whose gradient is finite at
    zero (exactly upright).

    target: ``"fixed"`` (default; the paper's "desired point"): ``cartpole.upright_tip``, the
        tip of an upright pole on the cart at the rail's centre, so a pole balanced away from
        the centre still costs its offset. ``"cart"``: the tip of an upright pole on the cart
        wherever it is (hinge + tip_distance e_z): no cost for the cart's position, and a
        controller trained on it drifts into the rail's stops in long runs, which knocks the
        pole over.
    """
    g = cartpole
    u = _pole_direction(state, g)
    centre = state.position[..., g.pole, :]
    tip = centre + (g.tip_distance - g.centre_distance) * u
    if target == "fixed":
        goal = u.new_tensor(g.upright_tip)
    elif target == "cart":
        cart_rotation = state.rotation[..., g.cart, :, :]
        hinge = state.position[..., g.cart, :] + cart_rotation @ u.new_tensor(g.hinge_in_cart)
        goal = hinge + u.new_tensor([0.0, 0.0, g.tip_distance])
    else:
        raise ValueError(f"step_cost: target must be 'fixed' or 'cart', got {target!r}")
    tip_velocity = state.linear_velocity[..., g.pole, :] + torch.linalg.cross(
        state.angular_velocity[..., g.pole, :], tip - centre
    )
    return safe_norm(tip - goal) + speed_weight * tip_velocity.square().sum(-1)


def swingup_loss(
    trajectory: physics.State,
    cartpole: CartPole,
    speed_weight: float = 0.01,
    target: str = "fixed",
):
    """Scalar loss of a trajectory (T + 1, B, N, ...): `step_cost` averaged over every physics
    step after the start (index 1..T) and over the batch (paper, sections 3.2 and 3.4)."""
    return step_cost(trajectory[1:], cartpole, speed_weight, target).mean()


def upright_stretches(
    error: torch.Tensor, timestep: float, threshold: float = 0.2
) -> dict[str, torch.Tensor]:
    """Evaluation metrics from per-state upright errors.

    A state is *upright* when its error is below ``threshold`` (rad). Each state counts for one
    timestep of time.

    Args:
        error: (T, B) `upright_error` of every state of B rollouts.
        timestep: seconds per state.
        threshold: rad.

    Returns:
        dict of (B,) tensors:
        ``success``: bool, upright at the last state.
        ``upright_fraction``: fraction of the T states that are upright.
        ``upright_seconds``: the longest stretch of consecutive upright states, in seconds: how
            long the pole stays within ``threshold`` of upright once it gets there, counted from
            entering the band to leaving it (or to the end of the rollout). 0 if never upright.
        ``swing_up_seconds``: time of the first state of that longest stretch (NaN if never).
    """
    upright = error < threshold
    steps = error.shape[0]
    index = torch.arange(steps, device=error.device)[:, None].expand_as(error)
    # Index of the last non-upright state at or before each t: the run of upright states
    # ending at t is t minus that index.
    last_out = torch.cummax(torch.where(upright, -1, index), 0).values
    run = index - last_out
    longest, end = run.max(0)
    first = (end - longest + 1).to(error.dtype) * timestep
    return {
        "success": upright[-1],
        "upright_fraction": upright.to(error.dtype).mean(0),
        "upright_seconds": longest.to(error.dtype) * timestep,
        "swing_up_seconds": torch.where(longest > 0, first, torch.nan),
    }


# --------------------------------------------------------------------------- episodes
@dataclasses.dataclass(frozen=True)
class SwingUpConfig:
    """Task, controller and BPTT settings of a swing-up run (stored with checkpoints/weights).

    observation: "pixels" (a `PixelPolicy` on rendered frames) or "state" (a `StatePolicy` on
        `state_features`).
    seconds: simulated time per training episode (the paper: 3 s).
    control_every: physics steps per control step (the action is held in between).
    frames: frames in the stack a pixel policy sees (the paper: the current one and two past).
    gradient_decay: alpha per physics step (paper, section 3.2).
    bptt_segment: control steps per checkpointed segment of the rollout (None: store the
        whole graph; a pixel episode at 288 x 96 needs checkpointing to fit in memory).
    edge_softness: renderer silhouette softness (pixels); > 0 adds gradients at the edges but
        makes a render several times slower. At 0 the frames still depend smoothly on the poses
        through bilinear texture sampling (the paper's renderer, section 3.4): the pole is
        striped and the cart wood-grained for that. Measured: enough to learn the swing-up at
        a short horizon (gradient decay 0.9), not to settle the balance at a long one (0.98),
        where the hard-edged closed loop's gradient exploded; 1 px did that.
    speed_weight: weight of the tip-speed penalty (s^2/m).
    target: the loss's target for the tip, "fixed" or "cart" (see `step_cost`).
    upright_threshold: rad; within it of upright counts as upright in the metrics.
    width, hidden: `PixelPolicy` channels and hidden units (hidden: also the `StatePolicy`).
    downsample: the camera renders at its full resolution; each frame is then averaged over
        downsample x downsample pixel blocks before the policy sees it (`pixel_observer`).
    compile_physics: step the physics through `physics.compiled_step` (torch.compile). The
        same step; compiled, it does not pay per-op overhead (at B = 16 the eager step is
        dominated by it, above all when the rail's limit rows are active and the 20 solver
        sweeps run). The first call compiles (minutes; seconds from a warm Inductor cache).
    observation_gradient: False stops the gradient from the observation (the renderer) back
        into the state (`policy_rollout`). Tried for settling the pixel policy at a long
        horizon: it did not help (soft silhouettes did).
    """

    observation: str = "pixels"
    seconds: float = 3.0
    control_every: int = 2
    frames: int = 3
    gradient_decay: float = 0.99
    bptt_segment: int | None = 25
    edge_softness: float = 0.0
    speed_weight: float = 0.01
    target: str = "fixed"
    upright_threshold: float = 0.2
    width: int = 16
    hidden: int = 64
    downsample: int = 1
    compile_physics: bool = False
    observation_gradient: bool = True

    def __post_init__(self) -> None:
        if self.observation not in ("pixels", "state"):
            raise ValueError(
                f"SwingUpConfig.observation is {self.observation!r}; use 'pixels' or 'state'"
            )
        if self.control_every < 1 or self.frames < 1:
            raise ValueError("SwingUpConfig.control_every and .frames must be at least 1")
        if self.target not in ("fixed", "cart"):
            raise ValueError(f"SwingUpConfig.target is {self.target!r}; use 'fixed' or 'cart'")

    def steps(self, timestep: float, seconds: float | None = None) -> int:
        """Physics steps for ``seconds`` (default: an episode), rounded to whole control steps."""
        seconds = self.seconds if seconds is None else seconds
        control_steps = max(1, round(seconds / (timestep * self.control_every)))
        return control_steps * self.control_every


def make_policy(config: SwingUpConfig, max_action: float) -> nn.Module:
    """A fresh zero-output policy for ``config``: `PixelPolicy` or `StatePolicy`."""
    if config.observation == "pixels":
        return PixelPolicy(
            1,
            frames=config.frames,
            max_action=max_action,
            width=config.width,
            hidden=config.hidden,
            downsample=config.downsample,
        )
    return StatePolicy(
        len(STATE_FEATURES),
        1,
        max_action=max_action,
        hidden=config.hidden,
        input_scale=_FEATURE_SCALE,
    )


def motor_limit(scene) -> float:
    """The rail motor's maximal force (N): the policies' action range."""
    joint = next(j for j in scene.config.joints if j["name"] == "rail")
    return float(_floats(joint["motor"]["max"])[0])


class SwingUpEpisodes(nn.Module):
    """One batch of swing-up episodes as a module: starts (B, 4) -> (loss, metrics).

    Everything the policy does in an episode happens inside one ``forward`` (it is called at
    every control step), so one forward and one backward per iteration: what
    ``DistributedDataParallel`` expects. The scene is not a module (it holds no parameters).

    Args:
        scene: the pendulum-cart `diffcam.Scene`, batch size B.
        policy: observation -> actions (B, 1); see `make_policy`.
        config: `SwingUpConfig`.
    """

    def __init__(self, scene, policy: nn.Module, config: SwingUpConfig) -> None:
        super().__init__()
        self.scene = scene
        self.policy = policy
        self.config = config
        self.cartpole = CartPole.from_scene(scene)

    def observer(self, scene=None):
        """The `Observer` of ``config.observation`` (on ``scene``, default this one)."""
        scene = self.scene if scene is None else scene
        if self.config.observation == "pixels":
            c = self.config
            return pixel_observer(scene, c.frames, c.edge_softness, c.downsample)
        return lambda state, memory: (state_features(state, self.cartpole), None, None)

    def rollout(
        self,
        state: physics.State,
        steps: int,
        memory: torch.Tensor | None = None,
        scene=None,
    ) -> PolicyRollout:
        """`policy_rollout` from ``state`` for ``steps`` physics steps with this config (no
        records kept); ``scene`` replaces this one (e.g. a timed proxy)."""
        scene = self.scene if scene is None else scene
        c = self.config
        return policy_rollout(
            scene,
            self.policy,
            self.observer(scene),
            steps,
            state,
            control_every=c.control_every,
            gradient_decay=c.gradient_decay,
            checkpoint_every=c.bptt_segment,
            keep_records=False,
            memory=memory,
            compile_physics=c.compile_physics,
            observation_gradient=c.observation_gradient,
        )

    def forward(self, starts: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run one episode per start and return the loss.

        Args:
            starts: (B, 4) (x, theta, x_dot, theta_dot) in m, rad, m/s, rad/s.

        Returns:
            loss: scalar, `swingup_loss` of the batch.
            metrics: detached scalars ``success_rate`` (fraction upright at the end) and
                ``upright_fraction`` (fraction of states upright), from the true state.
        """
        state = states_from_starts(self.scene, starts, self.cartpole)
        result = self.rollout(state, self.config.steps(self.cartpole.timestep))
        c = self.config
        loss = swingup_loss(result.trajectory, self.cartpole, c.speed_weight, c.target)
        with torch.no_grad():
            error = upright_error(result.trajectory, self.cartpole)
            stats = upright_stretches(error, self.cartpole.timestep, self.config.upright_threshold)
        metrics = {
            "success_rate": stats["success"].to(loss.dtype).mean(),
            "upright_fraction": stats["upright_fraction"].mean(),
        }
        return loss, metrics


# --------------------------------------------------------------------------- weights files
def save_policy(path: str | Path, policy: nn.Module, config: SwingUpConfig, **info) -> Path:
    """Write the policy's weights, its `SwingUpConfig` and ``info`` (e.g. training_episodes)
    to ``path``, atomically."""
    from .training import atomic_save

    payload = {"policy": policy.state_dict(), "config": dataclasses.asdict(config), **info}
    return atomic_save(payload, path)


def load_policy(path: str | Path, max_action: float, train_command: str = "") -> tuple:
    """Read a file of `save_policy`: returns (policy, config, info dict).

    Raises FileNotFoundError naming the path (and ``train_command``, how to make it) if there
    is no such file, and ValueError naming the key if the file is not a policy file.
    """
    path = Path(path)
    if not path.is_file():
        hint = f"; train one with: {train_command}" if train_command else ""
        raise FileNotFoundError(f"no policy weights at {path}{hint}")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("policy", "config"):
        if not isinstance(payload, dict) or key not in payload:
            raise ValueError(
                f"{path}: not a swing-up policy file (no {key!r} entry); expected "
                "a file written by diffcam.tasks.swingup.save_policy"
            )
    try:
        config = SwingUpConfig(**payload["config"])
    except TypeError as e:
        raise ValueError(f"{path}: config: {e}") from None
    policy = make_policy(config, max_action)
    policy.load_state_dict(payload["policy"])
    info = {k: v for k, v in payload.items() if k not in ("policy", "config")}
    return policy, config, info


# --------------------------------------------------------------------------- evaluation
def evaluate(
    scene_path: str | Path,
    policy: nn.Module,
    config: SwingUpConfig,
    starts: int = 20,
    seconds: float = 90.0,
    seed: int = 2019,
    ranges: StartRanges = StartRanges(),  # noqa: B008 (frozen)
    video: str | Path | None = None,
    fps: float = 25.0,
    progress: bool = True,
) -> dict:
    """Roll the policy out from the hanging start and ``starts`` random ones, all at once.

    No gradients; the rollout runs in chunks of about one second (the controller's memory, e.g.
    the frame stack, is carried over) so a progress bar can follow it and only the per-step
    upright errors and the first start's poses are kept.

    Args:
        scene_path: the pendulum-cart scene file.
        policy: the trained policy (its dtype and device are used).
        config: its `SwingUpConfig` (observation, control rate, frames...); the physics runs
            eager whatever its ``compile_physics``.
        starts: random starts, drawn by `random_starts` from a generator seeded with ``seed``.
        seconds: simulated time per rollout (default 90: up to 30 s to swing up, then the
            60 s the pole must stay upright; `upright_seconds` says how long it did).
        ranges: the random starts' distribution.
        video: if set, write a video of the first (hanging) start there (.mp4 or .gif).
        fps: video frame rate (frames are rendered every round(1 / (fps dt)) steps).

    Returns:
        dict with ``success_rate`` (fraction of the starts + 1 rollouts upright at the end),
        ``starts`` (starts + 1), ``upright_seconds_min`` / ``_mean`` (`upright_stretches`,
        min / mean over starts), ``hanging_upright_seconds`` (the hanging start's),
        ``swing_up_seconds_max``, ``upright_fraction_mean``, ``seconds``, ``threshold_rad``.
    """
    from .. import load_scene, write_video

    # Eager physics: a compiled step would first compile for this batch size (minutes); the
    # eager step costs about as much without gradients.
    config = dataclasses.replace(config, compile_physics=False)
    parameter = next(policy.parameters())
    scene = load_scene(
        scene_path, batch_size=starts + 1, device=parameter.device, dtype=parameter.dtype
    )
    episodes = SwingUpEpisodes(scene, policy, config).eval()
    g = episodes.cartpole
    generator = torch.Generator().manual_seed(seed)
    all_starts = torch.cat(
        [
            torch.zeros(1, 4, dtype=parameter.dtype),
            random_starts(starts, generator, ranges, parameter.dtype),
        ]
    ).to(parameter.device)
    total = config.steps(g.timestep, seconds)
    chunk = config.steps(g.timestep, min(1.0, seconds))
    every = max(1, round(1.0 / (fps * g.timestep)))
    state, memory = states_from_starts(scene, all_starts, g), None
    errors, shown = [upright_error(state, g)[None]], [state[None, 0:1]]
    done = 0
    with (
        torch.no_grad(),
        tqdm(total=total, desc="evaluate", unit="step", disable=not progress) as bar,
    ):
        while done < total:
            count = min(chunk, total - done)
            result = episodes.rollout(state, count, memory)
            trajectory, memory = result.trajectory, result.memory
            errors.append(upright_error(trajectory[1:], g))
            for t in range(1, count + 1):
                if (done + t) % every == 0:
                    shown.append(trajectory[t : t + 1, 0:1])
            state = trajectory[-1]
            done += count
            bar.update(count)
    stats = upright_stretches(torch.cat(errors), g.timestep, config.upright_threshold)
    if video is not None:
        with torch.no_grad():
            frames = scene.render_trajectory(physics.State.stack([s[0] for s in shown]))
        write_video(video, frames[:, 0], fps=1.0 / (every * g.timestep))
    upright, reached = stats["upright_seconds"], stats["swing_up_seconds"]
    return {
        "success_rate": float(stats["success"].float().mean()),
        "starts": starts + 1,
        "upright_seconds_min": float(upright.min()),
        "upright_seconds_mean": float(upright.mean()),
        "hanging_upright_seconds": float(upright[0]),
        # None when some start never got upright (JSON has no NaN).
        "swing_up_seconds_max": None if reached.isnan().any() else float(reached.max()),
        "upright_fraction_mean": float(stats["upright_fraction"].mean()),
        "seconds": total * g.timestep,
        "threshold_rad": config.upright_threshold,
    }


# --------------------------------------------------------------------------- timing
def time_iteration(episodes: SwingUpEpisodes, starts: torch.Tensor, repeats: int = 3) -> dict:
    """Milliseconds of one training iteration (forward + backward), split by part.

    The method is `diffcam.profiling`'s: the forward split (render, policy, physics, other) is
    measured on the iteration itself; the backward total is measured, and its split is
    estimated from the backward of one render / policy call / physics step on separately built
    graphs, times how often each ran; when ``bptt_segment`` checkpoints the rollout, the
    forward runs again inside the backward, counted as "recompute" (= the measured forward
    total); "other" is the rest (autograd overhead, the loss, gradient decay nodes). Gradients
    left on the policy are cleared.

    Args:
        episodes: the `SwingUpEpisodes` to time (its scene's batch size B).
        starts: (B, 4) starts.
        repeats: backward repetitions per part (the median is used).

    Returns:
        dict of ms: forward_{render,policy,physics,other,total},
        backward_{render,policy,physics,recompute,other,total}, plus counts (control_steps,
        steps).
    """
    from ..profiling import Stopwatch, TimedModule, TimedScene, backward_seconds

    watch = Stopwatch()
    policy = TimedModule(episodes.policy, watch, "policy")
    timed = SwingUpEpisodes(TimedScene(episodes.scene, watch), policy, episodes.config)
    begin = time.perf_counter()
    loss, _ = timed(starts)
    forward = time.perf_counter() - begin
    # Parts of a checkpointed rollout run again in the backward pass: keep the forward counts.
    counts = dict(watch.calls)
    parts = {k: watch.seconds[k] for k in ("render", "policy", "physics")}
    begin = time.perf_counter()
    loss.backward()
    backward = time.perf_counter() - begin

    state = states_from_starts(episodes.scene, starts, episodes.cartpole)
    observe = episodes.observer()

    def leaf_state() -> physics.State:
        return physics.State(*(t.detach().requires_grad_(True) for t in state.tensors()))

    observation = observe(state, None)[0].detach()
    action = episodes.policy(observation).detach()

    def policy_graph():
        return episodes.policy(observation.clone().requires_grad_(True))

    def physics_graph():
        return episodes.scene.step(
            leaf_state(),
            action.clone().requires_grad_(True),
            compile=episodes.config.compile_physics,
        ).tensors()

    def render_graph():
        return observe(leaf_state(), None)[2]

    estimates = {
        "policy": backward_seconds(policy_graph, repeats),
        "physics": backward_seconds(physics_graph, repeats),
        "render": backward_seconds(render_graph, repeats) if "render" in counts else 0.0,
    }
    for p in episodes.policy.parameters():
        p.grad = None
    ms = {f"forward_{k}": 1e3 * v for k, v in parts.items()}
    ms["forward_other"] = 1e3 * forward - sum(ms.values())
    ms["forward_total"] = 1e3 * forward
    backward_parts = {
        "render": estimates["render"] * counts.get("render", 0),
        "policy": estimates["policy"] * counts.get("policy", 0),
        "physics": estimates["physics"] * counts.get("physics", 0),
    }
    # A checkpointed rollout runs its forward again inside the backward pass.
    backward_parts["recompute"] = forward if episodes.config.bptt_segment else 0.0
    ms.update({f"backward_{k}": 1e3 * v for k, v in backward_parts.items()})
    ms["backward_other"] = 1e3 * (backward - sum(backward_parts.values()))
    ms["backward_total"] = 1e3 * backward
    ms = {k: round(v, 1) for k, v in ms.items()}
    return {**ms, "control_steps": counts.get("policy", 0), "steps": counts.get("physics", 0)}
