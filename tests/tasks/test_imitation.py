"""The pixel controller taught by a state controller (`tasks.swingup.imitation`): the data
set's frame stacks, DAgger's rounds, their resume after a kill (plain and randomised), and
the refusal of other settings."""

import dataclasses

import pytest
import torch

import diffcam
from diffcam.policy import push_frame
from diffcam.randomize import Randomization
from tasks import swingup, training
from tasks.swingup import imitation

pytestmark = pytest.mark.usefixtures("single_thread")

STUDENT = swingup.SwingUpConfig(
    observation="pixels", control_every=2, frames=3, bptt_segment=None, width=2, hidden=4,
    render_downscale=2, edge_softness="antialias",
)  # fmt: skip
TEACHER = swingup.SwingUpConfig(observation="state", control_every=2, hidden=8)
DAGGER = swingup.DaggerConfig(rounds=3, episodes=3, seconds=0.12, fit_steps=4, minibatch=5)


@pytest.fixture
def scene_path(tiny_pendulum_cart):
    return tiny_pendulum_cart(24, 8)


def a_teacher() -> torch.nn.Module:
    """A state policy that pushes (its output layer not zero, unlike a fresh policy's)."""
    torch.manual_seed(1)
    teacher = swingup.make_policy(TEACHER, 30.0)
    torch.nn.init.normal_(teacher.output.weight, std=0.5)
    return teacher.eval()


def run_dagger(scene_path, out, stop_after=None, config=DAGGER, randomization=None):
    """A fresh tiny student taught by `a_teacher` into ``out``; with ``stop_after``, killed (a
    KeyboardInterrupt, as Ctrl-C) once that many progress units were reported."""
    torch.manual_seed(0)
    student = swingup.make_policy(STUDENT, 30.0)
    units = [0]

    def progress(what, loss, count):
        units[0] += count
        if stop_after is not None and units[0] >= stop_after:
            raise KeyboardInterrupt

    rows = swingup.dagger(
        diffcam.load_scene(scene_path, batch_size=config.episodes), student, a_teacher(),
        STUDENT, TEACHER, config, out, seed=3, randomization=randomization, progress=progress,
    )  # fmt: skip
    return student, rows


def test_convention_stacks_are_the_frame_stacks_the_policy_saw():
    # step t's stack is frames t-2, t-1, t (oldest first), the first frame repeated before
    # the start: what push_frame built while the rollout ran
    frames = torch.randint(0, 256, (2, 5, 3, 4, 6), dtype=torch.uint8)
    data = swingup.Demonstrations(frames, torch.zeros(2, 5, 1))
    for episode in range(2):
        stack = None
        for t in range(5):
            stack = push_frame(stack, frames[episode, t][None].float() / 255, 3)
            got = data.stacks(torch.tensor([episode]), torch.tensor([t]), 3)
            assert torch.equal(got, stack), (episode, t)


@pytest.mark.slow
def test_rounds_label_the_students_states_and_fit_the_teacher(scene_path, tmp_path):
    student, rows = run_dagger(scene_path, tmp_path)
    assert [r["round"] for r in rows] == [1, 2, 3]
    steps = round(DAGGER.seconds / 0.01) // STUDENT.control_every  # control steps per rollout
    assert [r["data"] for r in rows] == [DAGGER.episodes * steps * k for k in (1, 2, 3)]
    assert rows[0]["student_upright"] is None  # the first round is all the teacher's
    assert all(0.0 <= r["student_upright"] <= 1.0 for r in rows[1:])
    assert all(r["loss"] >= 0.0 for r in rows)
    assert any(p.abs().sum() > 0 for p in student.output.parameters())  # it learned
    # each round's file: its control states, the teacher's actions on them, no frames
    kept = torch.load(tmp_path / "rounds" / "1.pt", weights_only=True)
    assert kept["actions"].shape == (DAGGER.episodes, steps, 1)
    assert kept["states"][0].shape[:2] == (steps, DAGGER.episodes)
    for t in kept["states"]:  # the control steps alone, not the trajectory's storage
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
    assert kept["actions"].abs().max() <= 1.0 and kept["seeds"] is None
    cartpole = swingup.CartPole.from_scene(diffcam.load_scene(scene_path))
    import physics

    states = physics.State(*kept["states"])
    with torch.no_grad():
        labels = a_teacher()(swingup.state_features(states, cartpole)) / 30.0
    torch.testing.assert_close(kept["actions"], labels.transpose(0, 1))


@pytest.mark.slow
@pytest.mark.parametrize("randomized", [False, True])
def test_an_interrupted_dagger_resumes_bit_for_bit(scene_path, tmp_path, randomized):
    # killed in round 2's fit, started again: the frames of round 1 are drawn again from its
    # states (a randomised scene's noise in the same order) and the run ends as one that was
    # never stopped
    randomization = Randomization.moderate() if randomized else None
    straight, straight_rows = run_dagger(scene_path, tmp_path / "a", randomization=randomization)
    per_round = DAGGER.fit_steps // 2 + DAGGER.fit_steps
    with pytest.raises(KeyboardInterrupt):
        run_dagger(scene_path, tmp_path / "b", per_round + 3, randomization=randomization)
    saved = torch.load(tmp_path / "b" / training.CHECKPOINT, weights_only=True)
    assert saved["round"] == 1
    resumed, resumed_rows = run_dagger(scene_path, tmp_path / "b", randomization=randomization)
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name

    def deterministic(rows):
        return [{k: v for k, v in r.items() if not k.endswith("_seconds")} for r in rows]

    assert deterministic(resumed_rows) == deterministic(straight_rows)
    if randomized:
        seeds = torch.load(tmp_path / "b" / "rounds" / "0.pt", weights_only=True)["seeds"]
        assert seeds.shape == (DAGGER.episodes,)


def test_dagger_refuses_a_run_of_other_settings(scene_path, tmp_path):
    small = dataclasses.replace(DAGGER, rounds=1, fit_steps=1)
    run_dagger(scene_path, tmp_path, config=small)
    with pytest.raises(ValueError, match="other settings") as error:
        run_dagger(scene_path, tmp_path, config=dataclasses.replace(small, learning_rate=0.1))
    assert str(tmp_path / training.CHECKPOINT) in str(error.value)


def test_dagger_refuses_different_control_rates(scene_path, tmp_path):
    scene = diffcam.load_scene(scene_path, batch_size=DAGGER.episodes)
    student = swingup.make_policy(STUDENT, 30.0)
    other = dataclasses.replace(TEACHER, control_every=4)
    with pytest.raises(ValueError, match="every 2 physics steps, the teacher every 4"):
        swingup.dagger(scene, student, a_teacher(), STUDENT, other, DAGGER, tmp_path)


def test_dagger_config_refuses_nonsense():
    with pytest.raises(ValueError, match="teacher_share"):
        swingup.DaggerConfig(teacher_share=1.5)
    with pytest.raises(ValueError, match="rounds"):
        swingup.DaggerConfig(rounds=0)


def test_the_teacher_recipe_acts_at_the_pixel_controllers_rate():
    assert imitation.TEACHER_BASE.observation == "state"
    assert imitation.TEACHER_BASE.control_every == swingup.PIXEL_BASE.control_every
    assert imitation.TEACHER_RECIPE[-1].check_every > 0  # it ends with its best checked weights
