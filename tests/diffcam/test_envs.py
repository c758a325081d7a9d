"""diffcam.envs: the Gymnasium vector env and single env built from scene files."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

import physics  # noqa: E402
from diffcam import cartpole  # noqa: E402
from diffcam.envs import (  # noqa: E402
    SCENE_ID,
    SWINGUP_ID,
    SceneEnv,
    SceneTask,
    SceneVectorEnv,
    SwingUpTask,
)
from diffcam.errors import SceneError  # noqa: E402
from tasks import swingup  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")

# check_env's advice for any unbounded observation or physical-unit action space; expected.
EXPECTED_WARNINGS = ("infinity", "symmetric and normalized")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


# --------------------------------------------------------------------------- import layering
@pytest.mark.slow
def test_import_diffcam_does_not_load_gymnasium_or_envs():
    out = _run(
        "import sys, diffcam\n"
        "print(sorted(m for m in sys.modules if m.startswith(('gymnasium', 'diffcam.envs'))))"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_missing_gymnasium_names_the_extra():
    out = _run("import sys\nsys.modules['gymnasium'] = None\nimport diffcam.envs\n")
    assert out.returncode != 0
    assert "ImportError" in out.stderr and "pip install diffcam[gym]" in out.stderr


# --------------------------------------------------------------------------- single env
@pytest.mark.parametrize("obs", ["state", "pixels"])
def test_check_env_passes_on_the_single_env(obs, tiny_pendulum_cart):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(SWINGUP_ID, obs=obs, scene=str(tiny_pendulum_cart(36, 12)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    unexpected = [
        str(w.message) for w in caught if not any(e in str(w.message) for e in EXPECTED_WARNINGS)
    ]
    assert not unexpected
    assert isinstance(env.unwrapped, SceneEnv)
    obs0, _ = env.reset(seed=3)
    assert obs0 in env.observation_space
    step = env.step(env.action_space.sample())
    assert isinstance(step[1], float) and isinstance(step[2], bool) and isinstance(step[3], bool)
    env.close()


def test_single_env_render_and_wrong_action(tiny_pendulum_cart):
    env = gym.make(SWINGUP_ID, scene=str(tiny_pendulum_cart(36, 12)), render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (12, 36, 3) and frame.dtype == np.uint8
    with pytest.raises(ValueError, match=r"expected \(1,\).*\['rail'\]"):
        env.step(np.zeros(2, dtype=np.float32))


# --------------------------------------------------------------------------- vector env
@pytest.mark.parametrize("obs", ["state", "pixels", "both"])
def test_vector_env_shapes_and_dtypes_match_the_spaces(obs, tiny_pendulum_cart):
    envs = gym.make_vec(SWINGUP_ID, num_envs=3, obs=obs, scene=str(tiny_pendulum_cart(36, 12)))
    assert isinstance(envs, SceneVectorEnv) and envs.num_envs == 3
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    assert envs.single_action_space.shape == (1,) and envs.action_space.shape == (3, 1)
    assert envs.single_action_space.high[0] == pytest.approx(30.0)  # the rail motor's max
    o, info = envs.reset(seed=0)
    assert o in envs.observation_space
    o, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
    assert o in envs.observation_space
    parts = o if obs == "both" else {obs: o}
    if "pixels" in parts:
        assert parts["pixels"].shape == (3, 12, 36, 3) and parts["pixels"].dtype == np.uint8
    if "state" in parts:
        assert parts["state"].shape == (3, 5) and parts["state"].dtype == np.float32
    assert reward.shape == (3,) and reward.dtype == np.float64 and np.all(reward <= 0)
    assert terminated.shape == truncated.shape == (3,) and terminated.dtype == bool
    assert info["upright_error"].shape == (3,) and info["_upright_error"].all()
    frames = envs.render()
    assert frames.shape == (3, 12, 36, 3) and frames.dtype == np.uint8

    # tensor mode: the same step on torch tensors, diffcam's image layout
    t_obs, t_reward, t_term, t_trunc, _ = envs.step_tensors(torch.zeros(3, 1))
    t_parts = t_obs if obs == "both" else {obs: t_obs}
    if "pixels" in t_parts:
        assert t_parts["pixels"].shape == (3, 3, 12, 36)
    if "state" in t_parts:
        assert t_parts["state"].shape == (3, 5)
    assert t_reward.shape == (3,) and t_term.dtype == torch.bool and t_trunc.shape == (3,)
    envs.close()


def test_reset_seed_reproduces_starts_and_autoresets(tiny_pendulum_cart):
    path = tiny_pendulum_cart(36, 12)

    def run(seed):
        envs = SceneVectorEnv(path, 3, task=SwingUpTask(seconds=0.06))  # 3 env steps
        first, _ = envs.reset(seed=seed)
        seen = [first]
        for _ in range(4):  # the 4th step restarts every world (next-step autoreset)
            seen.append(envs.step(np.full((3, 1), 5.0, dtype=np.float32))[0])
        again, _ = envs.reset()
        return np.stack(seen + [again])

    a, b, c = run(7), run(7), run(8)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[0], c[0])
    assert not np.allclose(a[4], a[0]) and not np.allclose(a[5], a[4])  # fresh starts differ


def test_truncation_at_the_episode_length_and_next_step_autoreset(tiny_pendulum_cart):
    task = SwingUpTask(seconds=0.1)  # 10 physics steps = 5 env steps of 2
    envs = SceneVectorEnv(tiny_pendulum_cart(36, 12), 2, task=task)
    assert envs.max_episode_steps == 5 == cartpole.episode_steps(0.01, 0.1, 2) // 2
    envs.reset(seed=0)
    zero = np.zeros((2, 1), dtype=np.float32)
    for t in range(1, 6):
        obs, reward, terminated, truncated, info = envs.step(zero)
        assert info["elapsed_steps"].tolist() == [t, t]
        assert truncated.tolist() == [t == 5] * 2 and not terminated.any()
    obs, reward, terminated, truncated, info = envs.step(zero)  # the autoreset step
    assert reward.tolist() == [0.0, 0.0] and not truncated.any()
    assert info["elapsed_steps"].tolist() == [0, 0]
    obs, reward, *_ = envs.step(zero)
    assert np.all(reward < 0)

    # same-step autoreset: the ended episode's last observation is in info["final_obs"]
    envs = SceneVectorEnv(tiny_pendulum_cart(36, 12), 2, task=task, autoreset_mode="same_step")
    envs.reset(seed=0)
    for _ in range(5):
        obs, reward, terminated, truncated, info = envs.step(zero)
    assert truncated.all() and info["_final_obs"].all() and np.all(reward < 0)
    assert info["final_obs"].shape == obs.shape and not np.allclose(info["final_obs"], obs)
    assert info["elapsed_steps"].tolist() == [0, 0]

    # the single env truncates too (and does not restart by itself)
    env = gym.make(SWINGUP_ID, scene=str(tiny_pendulum_cart(36, 12)), seconds=0.1)
    env.reset(seed=0)
    flags = [env.step(np.zeros(1, dtype=np.float32))[3] for _ in range(5)]
    assert flags == [False] * 4 + [True]


def test_reward_is_the_tasks_loss(tiny_pendulum_cart):
    """An episode's mean reward per env step is minus swingup.swingup_loss of its trajectory."""
    task = SwingUpTask(seconds=0.1)
    envs = SceneVectorEnv(tiny_pendulum_cart(36, 12), 2, task=task, dtype=torch.float64)
    envs.reset(seed=1)
    states, rewards = [envs.state], []
    actions = torch.tensor([[10.0], [-20.0]], dtype=torch.float64)
    for _ in range(5):
        rewards.append(envs.step(actions.numpy())[1])
    # replay the same physics by hand
    state = states[0]
    for _ in range(10):
        state = envs.scene.step(state, actions)
        states.append(state)
    for w in range(2):
        loss = swingup.swingup_loss(physics.State.stack(states)[:, w : w + 1], task.cartpole)
        assert np.mean([r[w] for r in rewards]) == pytest.approx(-float(loss), rel=1e-10)


# --------------------------------------------------------------------------- gradients
def test_differentiable_step_matches_central_differences(tiny_pendulum_cart):
    """float64: d(sum of rewards over 3 env steps + a state feature) / d(actions, a scene
    parameter) by autograd equals central differences."""
    path = tiny_pendulum_cart(36, 12)

    def make(damping):
        return SceneVectorEnv(
            path,
            2,
            task=SwingUpTask(),
            differentiable=True,
            dtype=torch.float64,
            overrides={"joints.hinge.damping": damping},
        )

    damping = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    envs = make(damping)
    envs.reset(seed=0)
    start = physics.State(*(t.detach().clone() for t in envs.state.tensors()))
    base = torch.tensor([[[3.0], [-2.0]], [[-4.0], [6.0]], [[1.0], [5.0]]], dtype=torch.float64)

    def objective(actions: torch.Tensor, envs=envs) -> torch.Tensor:
        envs.reset(options={"state": start})
        total = 0.0
        for t in range(3):
            obs, reward, *_ = envs.step(actions[t])
            total = total + reward.sum()
        return total + obs[:, 4].sum()  # + theta_dot after the last step

    actions = base.clone().requires_grad_(True)
    grad, grad_damping = torch.autograd.grad(objective(actions), (actions, damping))
    assert torch.isfinite(grad).all() and grad.abs().max() > 1e-4
    eps = 1e-6
    numeric = torch.zeros_like(base)
    with torch.no_grad():
        for index in np.ndindex(*base.shape):
            plus, minus = base.clone(), base.clone()
            plus[index] += eps
            minus[index] -= eps
            numeric[index] = (objective(plus) - objective(minus)) / (2 * eps)
        numeric_damping = (
            objective(base, make(0.05 + eps)) - objective(base, make(0.05 - eps))
        ) / (2 * eps)
    torch.testing.assert_close(grad, numeric, rtol=1e-5, atol=1e-7)
    assert abs(float(grad_damping)) > 1e-3
    assert float(grad_damping) == pytest.approx(float(numeric_damping), rel=1e-5)


def test_pixel_observations_carry_gradients_to_the_actions(tiny_pendulum_cart):
    envs = SceneVectorEnv(
        tiny_pendulum_cart(36, 12), 1, obs="both", task=SwingUpTask(), edge_softness=1.0
    )
    obs, _ = envs.reset_tensors(seed=0)
    assert not obs["pixels"].requires_grad or obs["pixels"].grad_fn is not None
    action = torch.full((1, 1), 10.0, requires_grad=True)
    obs, reward, *_ = envs.step_tensors(action)
    obs, reward, *_ = envs.step_tensors(action * 1.0)
    (g,) = torch.autograd.grad(obs["pixels"].sum(), action)
    assert torch.isfinite(g).all() and float(g.abs()) > 0
    envs.detach()
    assert envs.state.position.grad_fn is None
    # the default numpy mode keeps no graph
    numpy_envs = SceneVectorEnv(tiny_pendulum_cart(36, 12), 1, task=SwingUpTask())
    numpy_envs.reset(seed=0)
    numpy_envs.step(np.ones((1, 1), dtype=np.float32))
    assert numpy_envs.state.position.grad_fn is None


# --------------------------------------------------------------------------- any scene
def test_any_scene_file_with_the_generic_task(scene_tools, tmp_path):
    """The tiny test scene (a cart-pole and a free ball on a floor): jittered, joint-consistent
    starts, a 15-per-moving-body state observation, a user reward."""
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    task = SceneTask(noise=0.2, reward=lambda traj, action: -action.square().sum(-1))
    envs = gym.make_vec(SCENE_ID, num_envs=3, scene=str(path), obs="both", task=task)
    obs, _ = envs.reset(seed=0)
    assert obs["state"].shape == (3, 45) and obs["pixels"].shape == (3, 12, 24, 3)
    assert len(envs.feature_names) == 45 and envs.feature_names[0] == "cart.position.x"
    state, world = envs.state, envs.scene.world
    # the hinge's anchor is the same point seen from the cart and from the pole
    j = world.joint_names.index("hinge")
    ends = [
        state.position[:, b] + (state.rotation[:, b] @ world.__dict__[k][:, j, :, None])[..., 0]
        for b, k in (
            (world.joint_parent[j], "anchor_parent"),
            (world.joint_child[j], "anchor_child"),
        )
    ]
    torch.testing.assert_close(ends[0], ends[1], atol=1e-5, rtol=0)
    assert float(state.angular_velocity[:, 2].std(0).max()) > 0  # starts differ per world
    _, reward, *_ = envs.step(np.array([[1.0], [2.0], [0.0]], dtype=np.float32))
    np.testing.assert_allclose(reward, [-1.0, -4.0, 0.0])


# --------------------------------------------------------------------------- errors
def test_bad_inputs_give_clear_errors(tiny_pendulum_cart, scene_tools, tmp_path):
    path = tiny_pendulum_cart(36, 12)
    with pytest.raises(ValueError, match="obs is 'rgb'.*'state'.*'pixels'.*'both'"):
        SceneVectorEnv(path, 2, obs="rgb")
    data = scene_tools.tiny()
    del data["joints"][0]["motor"]
    no_motor = scene_tools.write_scene(data, tmp_path, "no_motor.toml")
    with pytest.raises(SceneError, match=r"no_motor.toml.*no motors.*motor = \{ type"):
        SceneVectorEnv(no_motor, 2)
    envs = SceneVectorEnv(path, 2, task=SwingUpTask())
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros((2, 1)))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2,\); expected \(2, 1\).*\['rail'\].*reshape"):
        envs.step(np.zeros(2))
    with pytest.raises(ValueError, match=r"not finite"):
        envs.step(np.array([[0.0], [np.nan]]))
    with pytest.raises(ValueError, match="unknown options"):
        envs.reset(options={"stat": None})
    with pytest.raises(TypeError, match="scene file path"):
        SceneVectorEnv(42, 2)
    with pytest.raises(ValueError, match="autoreset_mode"):
        SceneVectorEnv(path, 2, autoreset_mode="sometimes")


def test_reset_mask_restarts_only_those_worlds(tiny_pendulum_cart):
    envs = SceneVectorEnv(
        tiny_pendulum_cart(36, 12), 3, task=SwingUpTask(), autoreset_mode="disabled"
    )
    envs.reset(seed=0)
    obs, *_ = envs.step(np.full((3, 1), 10.0, dtype=np.float32))
    again, info = envs.reset(options={"reset_mask": np.array([False, True, False])})
    np.testing.assert_array_equal(again[[0, 2]], obs[[0, 2]])
    assert not np.allclose(again[1], obs[1])
    assert info["elapsed_steps"].tolist() == [1, 0, 1]


def test_example_help_runs_without_training():
    example = Path(__file__).resolve().parents[2] / "examples" / "gym_swingup.py"
    out = subprocess.run(
        [sys.executable, str(example), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout and "bptt" in out.stdout


def test_example_bptt_path_trains_and_evaluates(capsys):
    """The example's --algo bptt on a tiny budget (0.2 s episodes, 2 worlds, 2 iterations):
    the gradient through the env's differentiable step reaches the MLP, and the summary
    counts episodes and timesteps as the SAC path does."""
    import importlib.util

    example = Path(__file__).resolve().parents[2] / "examples" / "gym_swingup.py"
    spec = importlib.util.spec_from_file_location("gym_swingup_example", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = ["--algo", "bptt", "--seconds", "0.2", "--envs", "2", "--episodes", "4"]
    args += ["--eval-every", "4", "--eval-starts", "2", "--no-compile-physics"]
    summary = module.main(args)
    assert summary["algo"] == "bptt" and summary["training_episodes"] == 4
    assert summary["timesteps"] == 4 * 10  # 0.2 s = 10 env steps of 2 physics steps
    assert 0.0 <= summary["success_rate"] <= 1.0
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    norms = [entry["grad_norm"] for entry in logged if "iteration" in entry]
    assert len(norms) == 2 and all(n > 0 for n in norms)
