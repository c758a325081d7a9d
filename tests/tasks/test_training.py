"""The training loop: logs, atomic checkpoints, bit-for-bit resume, DistributedDataParallel."""

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

import diffcam
from tasks import swingup, training

TINY = dict(
    observation="pixels", seconds=0.04, control_every=2, frames=2, bptt_segment=1, width=2, hidden=4
)


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def scene_path(tiny_pendulum_cart):
    return tiny_pendulum_cart(24, 8)


def tiny_episodes(scene_path, batch, observation="pixels"):
    scene = diffcam.load_scene(scene_path, batch_size=batch)
    config = swingup.SwingUpConfig(**{**TINY, "observation": observation})
    torch.manual_seed(0)
    return swingup.SwingUpEpisodes(scene, swingup.make_policy(config, 30.0), config)


def sample(generator, n, iteration):
    return swingup.random_starts(n, generator)


class Interrupt(Exception):
    pass


def stop_after(episodes, calls):
    """The episodes, interrupted (like a Ctrl-C) at forward call number ``calls + 1``."""
    forward, left = episodes.forward, [calls]

    def interrupted(starts):
        left[0] -= 1
        if left[0] < 0:
            raise Interrupt
        return forward(starts)

    episodes.forward = interrupted
    return episodes


def run(scene_path, out, iterations, model=None, **changes):
    model = tiny_episodes(scene_path, 2) if model is None else model
    config = training.TrainConfig(
        **{
            "iterations": iterations,
            "batch_size": 2,
            "learning_rate": 0.05,
            "save_every": 2,
            **changes,
        }
    )
    rows = training.train(model, sample, config, out, describe={"tiny": True}, progress=False)
    return model, rows


def deterministic(rows):
    return [{k: v for k, v in row.items() if k not in training.WALL_CLOCK_KEYS} for row in rows]


@pytest.mark.slow
def test_an_interrupted_run_resumes_bit_for_bit(tmp_path, scene_path):
    straight, straight_rows = run(scene_path, tmp_path / "straight", 4)

    interrupted = tmp_path / "interrupted"
    with pytest.raises(Interrupt):  # killed in iteration 3, after the checkpoint at 2
        run(scene_path, interrupted, 4, model=stop_after(tiny_episodes(scene_path, 2), 2))
    lines = (interrupted / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    checkpoint = torch.load(interrupted / "checkpoint.pt", weights_only=True)
    assert checkpoint["iteration"] == 2
    resumed, resumed_rows = run(scene_path, interrupted, 4)

    assert any(p.abs().sum() > 0 for p in straight.policy.output.parameters())  # it learned
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert deterministic(resumed_rows) == deterministic(straight_rows)
    logged = [json.loads(line) for line in (interrupted / "metrics.jsonl").read_text().splitlines()]
    assert deterministic(logged) == deterministic(straight_rows)
    csv_lines = (interrupted / "metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 5 and csv_lines[0].startswith("iteration,episodes,loss")
    assert (interrupted / "learning_curve.png").stat().st_size > 0


@pytest.mark.parametrize(
    "hook, interrupted, resumed",
    [
        # before: each iteration once; the resume continues the schedule
        ("before_iteration", [1, 2, 3], [3]),
        # after: each iteration's end; a resume first makes up the one it resumed from
        ("after_iteration", [1, 2], [2, 3]),
    ],
)
def test_iteration_hooks_see_each_iteration_and_a_resume(
    tmp_path, scene_path, hook, interrupted, resumed
):
    seen = []
    config = training.TrainConfig(iterations=3, batch_size=2, save_every=2)
    model = tiny_episodes(scene_path, 2, "state")
    with pytest.raises(Interrupt):  # killed in iteration 3, after the checkpoint at 2
        training.train(
            stop_after(model, 2), sample, config, tmp_path, progress=False, **{hook: seen.append}
        )
    assert seen == interrupted
    seen.clear()
    training.train(
        tiny_episodes(scene_path, 2, "state"), sample, config, tmp_path, progress=False,
        **{hook: seen.append},
    )  # fmt: skip
    assert seen == resumed


def test_resume_refuses_other_settings_and_never_overwrites(tmp_path, scene_path):
    run(scene_path, tmp_path / "out", 2, model=tiny_episodes(scene_path, 2, "state"))
    with pytest.raises(ValueError, match=r"train.learning_rate: 0.05 -> 0.1"):
        run(
            scene_path,
            tmp_path / "out",
            3,
            model=tiny_episodes(scene_path, 2, "state"),
            learning_rate=0.1,
        )
    config = training.TrainConfig(iterations=3, batch_size=2)
    with pytest.raises(FileExistsError, match="checkpoint.pt exists"):
        training.train(
            tiny_episodes(scene_path, 2, "state"),
            sample,
            config,
            tmp_path / "out",
            resume=False,
            progress=False,
        )


def test_a_truncated_checkpoint_is_named(tmp_path, scene_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"cannot read the checkpoint .*checkpoint.pt"):
        run(scene_path, tmp_path / "out", 2, model=tiny_episodes(scene_path, 2, "state"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_worker(rank, world_size, port, folder, scene_path):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    folder = Path(folder)
    dist = training.init_distributed()
    try:
        model = tiny_episodes(scene_path, 4 // world_size)
        if rank == 1:  # a different start: DDP must broadcast rank 0's weights
            torch.nn.init.normal_(model.policy.output.weight)
        config = training.TrainConfig(iterations=2, batch_size=4, learning_rate=0.05)
        training.train(model, sample, config, folder / "out", dist=dist, progress=False)
        torch.save(model.state_dict(), folder / f"rank{rank}.pt")
    finally:
        dist.close()


@pytest.mark.slow
def test_two_ddp_processes_end_with_identical_weights(tmp_path, scene_path):
    mp.spawn(ddp_worker, args=(2, free_port(), str(tmp_path), str(scene_path)), nprocs=2)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    for name, value in rank0.items():
        assert torch.equal(value, rank1[name]), name
    assert rank0["policy.output.weight"].abs().sum() > 0  # it trained
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert [row["episodes"] for row in rows] == [4, 8]


def test_cosine_learning_rate_reaches_the_final_rate(tmp_path, scene_path):
    config = training.TrainConfig(iterations=5, learning_rate=0.1, final_learning_rate=0.01)
    rates = [config.learning_rate_at(i) for i in range(1, 6)]
    assert rates[0] == pytest.approx(0.1) and rates[-1] == pytest.approx(0.01)
    assert rates[2] == pytest.approx(0.055)  # halfway down the cosine
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False))
    assert training.TrainConfig(iterations=5, learning_rate=0.1).learning_rate_at(5) == 0.1
    run(scene_path, tmp_path / "cosine", 3, learning_rate=0.05, final_learning_rate=0.005)
    saved = torch.load(tmp_path / "cosine" / "checkpoint.pt", weights_only=True)
    assert saved["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.005)
