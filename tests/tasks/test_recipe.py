"""The pixel recipe as a list of phases, its one-go runner and its resume after a kill; frames
rendered through a downscaled camera; held actions stepped as one rollout call."""

import dataclasses
import json

import pytest
import torch

import diffcam
from diffcam.policy import pixel_observer, policy_rollout
from tasks import swingup, training

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = swingup.SwingUpConfig(
    observation="pixels",
    seconds=0.04,
    control_every=2,
    frames=2,
    bptt_segment=None,
    width=2,
    hidden=4,
    render_downscale=2,
    downsample=1,
)
PHASES = (
    swingup.Phase("a", 2, 0.05, 0.01, 0.9, batch=2, seconds=0.04),
    swingup.Phase("b", 2, 0.01, 0.01, 0.95, batch=2, seconds=0.04),
    swingup.Phase("c", 2, 0.01, 0.01, 0.98, edge_softness=1.0, batch=2, seconds=0.04),
)


@pytest.fixture
def scene_path(tiny_pendulum_cart):
    return tiny_pendulum_cart(24, 8)


def test_the_pixel_recipe_is_a_typed_list_of_phases():
    recipe = swingup.PIXEL_RECIPE
    assert all(isinstance(p, swingup.Phase) for p in recipe)
    assert len({p.name for p in recipe}) == len(recipe)  # each its own folder
    assert all(p.iterations > 0 and p.batch > 0 for p in recipe)
    decays = [p.gradient_decay for p in recipe]
    assert decays == sorted(decays) and decays[0] < decays[-1]  # short horizon first
    assert recipe[0].edge_softness in (0.0, "antialias")  # not soft: cheaper
    assert isinstance(recipe[-1].edge_softness, float) and recipe[-1].edge_softness > 0.0
    # the last phase: starts near upright scored by the balance loss, its best weights kept
    last = recipe[-1]
    assert last.balance_share == last.starts.upright_share == 1.0 and last.check_every > 0
    base = swingup.PIXEL_BASE
    assert base.observation == "pixels" and base.render_downscale == 2
    config = recipe[-1].config(base)
    assert (config.gradient_decay, config.edge_softness) == (
        recipe[-1].gradient_decay,
        recipe[-1].edge_softness,
    )
    assert config.render_downscale == base.render_downscale  # the rest is the base's


def run_recipe(scene_path, out, calls=None, phases=PHASES, balance_check=None):
    """Train a fresh tiny policy through ``phases`` into ``out``; with ``calls``, interrupted (a
    KeyboardInterrupt, as Ctrl-C) at episode batch number ``calls + 1``; ``balance_check`` in
    place of `swingup.balance_check` when given. Returns the policy, the result and the number
    of batches run."""
    torch.manual_seed(0)
    policy = swingup.make_policy(TINY, 30.0)
    count = [0]
    forward = swingup.SwingUpEpisodes.forward

    def counted(self, starts):
        count[0] += 1
        if calls is not None and count[0] > calls:
            raise KeyboardInterrupt
        return forward(self, starts)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(swingup.SwingUpEpisodes, "forward", counted)
        if balance_check is not None:
            patch.setattr(swingup.recipe, "balance_check", balance_check)
        result = swingup.train_recipe(
            lambda batch: diffcam.load_scene(scene_path, batch_size=batch),
            policy,
            phases,
            out,
            base=TINY,
            save_every=1,
            progress=False,
        )
    return policy, result, count[0]


def deterministic(rows):
    return [{k: v for k, v in r.items() if k not in training.WALL_CLOCK_KEYS} for r in rows]


@pytest.mark.slow
def test_an_interrupted_recipe_resumes_at_its_phase_and_iteration(scene_path, tmp_path):
    straight, straight_result, batches = run_recipe(scene_path, tmp_path / "straight")
    assert batches == 6
    rows = straight_result.rows
    assert [r["phase"] for r in rows] == ["a", "a", "b", "b", "c", "c"]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["episodes"] for r in rows] == [2, 4, 6, 8, 10, 12]
    assert straight_result.episodes == 12
    assert straight_result.config == PHASES[-1].config(TINY)
    curve = (tmp_path / "straight" / swingup.recipe.CURVE).read_text().splitlines()
    assert deterministic([json.loads(line) for line in curve]) == deterministic(rows)

    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):  # killed in phase b's second iteration
        run_recipe(scene_path, out, calls=3)
    assert training.completed_iterations(out / "phases" / "1-a") == 2
    assert training.completed_iterations(out / "phases" / "2-b") == 1
    assert not (out / "phases" / "3-c").exists()
    resumed, resumed_result, batches = run_recipe(scene_path, out)
    assert batches == 3  # b's second iteration and c's two: nothing done twice

    assert any(p.abs().sum() > 0 for p in straight.output.parameters())  # it learned
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert deterministic(resumed_result.rows) == deterministic(rows)


def test_a_resumed_recipe_refuses_other_phase_settings(scene_path, tmp_path):
    run_recipe(scene_path, tmp_path)
    policy = swingup.make_policy(TINY, 30.0)
    changed = (dataclasses.replace(PHASES[0], learning_rate=0.1), *PHASES[1:])
    with pytest.raises(ValueError, match="other settings"):
        swingup.train_recipe(
            lambda batch: diffcam.load_scene(scene_path, batch_size=batch),
            policy,
            changed,
            tmp_path,
            base=TINY,
            progress=False,
        )


@pytest.mark.slow
def test_a_checked_phase_ends_with_its_best_checked_weights_and_resumes_its_checks(
    scene_path, tmp_path
):
    phases = (
        PHASES[0],
        swingup.Phase(
            "balance", 3, 0.05, 0.05, 0.98, edge_softness=1.0, batch=2, seconds=0.04,
            starts=swingup.StartRanges(upright_share=0.5, upright_theta=0.3),
            balance_share=0.5, check_every=2,
        ),
    )  # fmt: skip
    assert phases[1].config(TINY).balance_share == 0.5
    assert phases[1].ranges().upright_share == 0.5
    checked = []

    def fake_check(scene, policy, config, **options):
        # a stand-in judged by the weights: the smaller the output bias, the stiller
        checked.append(config.balance_share)
        lean = float(policy.output.bias.detach().abs().sum())
        return swingup.BalanceCheck(worst=lean, rms=lean / 2, cart_max=0.0)

    def run(out, calls=None):
        policy, result, _ = run_recipe(scene_path, out, calls, phases, fake_check)
        return policy, result

    policy, result = run(tmp_path / "straight")
    checks = result.checks
    assert [c["phase_iteration"] for c in checks] == [0, 2, 3]  # before, every 2, the end
    assert all(c["phase"] == "balance" for c in checks) and set(checked) == {0.5}
    best = min(checks, key=lambda c: c["worst"])
    assert [c["chosen"] for c in checks] == [c is best for c in checks]
    assert float(policy.output.bias.detach().abs().sum()) == pytest.approx(best["worst"])

    checked.clear()
    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):  # killed in the balance phase's third iteration
        run(out, calls=4)
    assert checked == [0.5, 0.5]  # at 0 and 2
    checked.clear()
    resumed, resumed_result = run(out)
    assert len(checked) == 1  # the end's: none twice
    assert resumed_result.checks == checks
    for a, b in zip(policy.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_frames_are_rendered_through_the_downscaled_camera(scene_path):
    scene = diffcam.load_scene(scene_path, batch_size=2)
    policy = swingup.make_policy(TINY, 30.0)
    assert policy.downsample == 2  # render downscale x downsample: the first layer's input
    episodes = swingup.SwingUpEpisodes(scene, policy, TINY)
    observed = episodes.observed_scene()
    assert (observed.camera.width, observed.camera.height) == (12, 4)
    assert episodes.observed_scene() is observed  # made once
    state = scene.initial_state()
    stack, _, frame = episodes.observer()(state, None)
    assert frame.shape == (2, 3, 4, 12) and stack.shape == (2, 6, 4, 12)
    torch.testing.assert_close(frame, observed.render(state, edge_softness=0.0))
    loss, _ = episodes(swingup.random_starts(2, torch.Generator().manual_seed(0)))
    assert torch.isfinite(loss)


class EagerSteps:
    """A scene without ``rollout`` whose steps run eagerly: `policy_rollout` steps it one
    physics step at a time."""

    def __init__(self, scene):
        self.scene = scene

    def initial_state(self):
        return self.scene.initial_state()

    def step(self, state, action, **options):
        return self.scene.step(state, action, compile=False)


class EagerRollout(EagerSteps):
    """A scene whose compiled rollout is run eagerly: the held-action chaining of
    `policy_rollout` is checked here in seconds; that the ahead-of-time rollout gives the
    eager rollout's values and gradients (decay, actions) is tests/physics/test_ahead_of_time's."""

    def rollout(self, steps, **options):
        return self.scene.rollout(steps, **{**options, "compile": False})


def test_a_held_action_stepped_as_one_rollout_gives_the_per_step_gradient(scene_path):
    # Compiled physics: each control step's held action runs as one `Scene.rollout` call
    # (one node through the libraries built ahead of time) instead of control_every steps.
    scene = diffcam.load_scene(scene_path, batch_size=3)
    cartpole = swingup.CartPole.from_scene(scene)
    starts = swingup.random_starts(3, torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    policy = swingup.make_policy(TINY, 30.0)
    torch.nn.init.normal_(policy.output.weight, std=0.5)
    observe = pixel_observer(scene, 2, 1.0)
    results = []
    for stepped in (EagerRollout(scene), EagerSteps(scene)):
        policy.zero_grad()
        state = swingup.states_from_starts(scene, starts, cartpole)
        rollout = policy_rollout(
            stepped, policy, observe, 24, state, control_every=4, gradient_decay=0.9,
            keep_records=False, compile_physics=True,
        )  # fmt: skip
        loss = swingup.swingup_loss(rollout.trajectory, cartpole)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in policy.parameters()])
        results.append((rollout.trajectory.position, grads))
    (positions, grads), (stepped_positions, stepped_grads) = results
    assert positions.shape == (25, 3, *positions.shape[2:])
    torch.testing.assert_close(positions, stepped_positions)
    assert grads.abs().max() > 0
    torch.testing.assert_close(grads, stepped_grads, rtol=1e-4, atol=1e-7)
