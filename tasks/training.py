"""Generic machinery for long training runs: the loop, checkpoints, logs and torch.distributed.

`train` runs Adam on a module that maps a batch of samples to ``(loss, metrics)`` (one forward,
one backward per iteration), with gradient-norm clipping, a tqdm bar, per-iteration metrics in
``metrics.csv`` and ``metrics.jsonl``, a learning-curve PNG and atomic checkpoints
(``checkpoint.pt``: weights, optimizer, iteration, sampler RNG state, metrics, config) from which
an interrupted run resumes bit for bit on CPU.

Under ``torchrun`` (RANK and WORLD_SIZE in the environment) `init_distributed` joins the process
group (gloo on CPU, NCCL on CUDA) and `train` wraps the module in DistributedDataParallel: each
rank simulates its share of every batch, gradients are averaged, only rank 0 writes files.

Sampling: every rank draws the *whole* batch from one generator with the same seed and keeps its
own slice. The draws are cheap next to the episodes, every rank's generator stays in the same
state (so one saved RNG state resumes them all) and a run samples the same batches whatever the
number of processes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as torch_dist
from torch import nn
from tqdm import tqdm

from diffcam.plot import save_line_plot

__all__ = [
    "CHECKPOINT",
    "Distributed",
    "TrainConfig",
    "atomic_save",
    "atomic_write_text",
    "completed_iterations",
    "init_distributed",
    "plot_learning_curve",
    "train",
]

CHECKPOINT = "checkpoint.pt"
METRICS_CSV = "metrics.csv"
METRICS_JSONL = "metrics.jsonl"
LEARNING_CURVE = "learning_curve.png"
# Metrics that legitimately differ between an interrupted and an uninterrupted run.
WALL_CLOCK_KEYS = ("wall_seconds",)


# --------------------------------------------------------------------------- files
def _atomic(path: str | Path, write: Callable[[io.BufferedWriter], None]) -> Path:
    """Write through ``write(file)`` to a temporary file beside ``path``, then rename it: a
    crash never leaves a half-written file under ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_save(obj, path: str | Path) -> Path:
    """``torch.save(obj, path)``, atomically (temporary file + os.replace)."""
    return _atomic(path, lambda file: torch.save(obj, file))


def atomic_write_text(text: str, path: str | Path) -> Path:
    """Write ``text`` (UTF-8) to ``path``, atomically."""
    return _atomic(path, lambda file: file.write(text.encode("utf-8")))


class MetricsLog:
    """Per-iteration metrics as CSV and JSON lines in ``folder``.

    `rewrite` replaces both files with the given rows (on resume: rows logged after the last
    checkpoint are dropped, so the logs match the restored run); `append` adds one row.
    """

    def __init__(self, folder: Path) -> None:
        self.csv, self.jsonl = folder / METRICS_CSV, folder / METRICS_JSONL

    def rewrite(self, rows: list[dict]) -> None:
        text = io.StringIO()
        if rows:
            writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        atomic_write_text(text.getvalue(), self.csv)
        atomic_write_text("".join(json.dumps(row) + "\n" for row in rows), self.jsonl)

    def append(self, row: dict) -> None:
        new = not self.csv.exists() or self.csv.stat().st_size == 0
        with open(self.csv, "a", encoding="utf-8", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(row), lineterminator="\n")
            if new:
                writer.writeheader()
            writer.writerow(row)
        with open(self.jsonl, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")


def plot_learning_curve(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """PNG of the loss and the other per-iteration metrics against training episodes."""
    skip = {"iteration", "episodes", "grad_norm", "skipped", *WALL_CLOCK_KEYS}
    names = [k for k in rows[0] if k not in skip] if rows else ["loss"]
    return save_line_plot(
        path,
        {name: [math.nan if row[name] is None else row[name] for row in rows] for name in names},
        x=[row["episodes"] for row in rows],
        title=title,
        xlabel="training episodes",
        ylabel="loss (m), rates",
    )


# --------------------------------------------------------------------------- distributed
@dataclasses.dataclass(frozen=True)
class Distributed:
    """This process's place in a (possibly one-process) run.

    rank, world_size: from torchrun's environment (0 and 1 without it).
    device: cuda:LOCAL_RANK when CUDA is available, else cpu.
    """

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")  # noqa: B008 (immutable)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """Average of ``values`` over the ranks (every rank gets it)."""
        if not self.active:
            return values
        values = values.clone()
        torch_dist.all_reduce(values)
        return values / self.world_size

    def barrier(self) -> None:
        if self.active:
            torch_dist.barrier()

    def close(self) -> None:
        """Leave the process group (after the last collective call)."""
        if self.active and torch_dist.is_initialized():
            torch_dist.destroy_process_group()


def init_distributed() -> Distributed:
    """Join the process group if launched by torchrun (RANK and WORLD_SIZE set), else a
    one-process `Distributed`. gloo on CPU, NCCL when CUDA is available."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend, rank=rank, world_size=world_size)
    return Distributed(rank, world_size, device)


# --------------------------------------------------------------------------- the loop
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings.

    iterations: total optimizer steps (a resumed run goes on to this number).
    batch_size: samples per iteration over all ranks (each rank runs batch_size / world_size).
    learning_rate: Adam's.
    clip_norm: gradients are rescaled to at most this L2 norm (the paper: 1).
    seed: seed of the sample generator (the model's initialisation is the caller's).
    save_every: iterations between checkpoints (one is also written at the end).
    final_learning_rate: if set, the learning rate follows a cosine from ``learning_rate`` at
        the first iteration to this at the last (`learning_rate_at`); None keeps it constant.
    """

    iterations: int = 200
    batch_size: int = 16
    learning_rate: float = 1e-3
    clip_norm: float = 1.0
    seed: int = 0
    save_every: int = 5
    final_learning_rate: float | None = None

    def learning_rate_at(self, iteration: int) -> float:
        """Adam's learning rate at ``iteration`` (1 ... iterations)."""
        if self.final_learning_rate is None or self.iterations <= 1:
            return self.learning_rate
        progress = min(max((iteration - 1) / (self.iterations - 1), 0.0), 1.0)
        weight = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.final_learning_rate + (self.learning_rate - self.final_learning_rate) * weight


def _check_resumable(saved: dict, current: dict, path: Path) -> None:
    """Raise if the checkpoint was made with other settings (the iteration count may grow)."""

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    old, new = flat(saved), flat(current)
    changed = [
        k
        for k in sorted(old.keys() | new.keys())
        if k != "train.iterations" and old.get(k) != new.get(k)
    ]
    if changed:
        diff = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed)
        raise ValueError(
            f"{path} was made with other settings ({diff}); resume with the same "
            "settings, or train into a new output folder"
        )


def _load_checkpoint(path: Path) -> dict:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file: say which and what to do
        raise ValueError(
            f"cannot read the checkpoint {path} ({e}); move it away to start over"
        ) from None
    keys = ("model", "optimizer", "iteration", "generator", "metrics", "config")
    missing = [k for k in keys if not isinstance(payload, dict) or k not in payload]
    if missing:
        raise ValueError(
            f"{path} is not a training checkpoint (missing {missing}); move it away to start over"
        )
    return payload


def completed_iterations(out: str | Path) -> int:
    """Iterations the run in ``out`` has checkpointed (0 when there is no checkpoint)."""
    path = Path(out) / CHECKPOINT
    return int(_load_checkpoint(path)["iteration"]) if path.exists() else 0


def train(
    model: nn.Module,
    sample: Callable[[torch.Generator, int], torch.Tensor],
    config: TrainConfig,
    out: str | Path,
    describe: dict | None = None,
    resume: bool = True,
    dist: Distributed | None = None,
    progress: bool = True,
    title: str = "",
    before_iteration: Callable[[int], None] | None = None,
    bar: tqdm | None = None,
    after_iteration: Callable[[int], None] | None = None,
) -> list[dict]:
    """Train ``model`` and return the metrics of every iteration (all of them, on resume).

    Args:
        model: maps a batch (this rank's slice of ``sample``'s output) to ``(loss, metrics)``,
            loss a scalar, metrics a dict of name -> detached scalar (e.g. success_rate); its
            parameters are what is optimised. Built for this rank's batch share.
        sample: ``sample(generator, n, iteration)`` -> (n, ...) tensor of batch inputs, drawn
            on the CPU; ``iteration`` (0-based) lets the distribution follow a curriculum.
        config: `TrainConfig`.
        out: folder for checkpoint.pt, metrics.csv, metrics.jsonl, learning_curve.png.
        describe: JSON-able settings of the caller (model, task) stored in the checkpoint; a
            resume with other settings is refused.
        resume: continue from ``out``/checkpoint.pt if it exists. False with a checkpoint there
            is an error (nothing is overwritten).
        dist: from `init_distributed` (default: one process).
        progress: show a tqdm bar (rank 0 only).
        title: the learning curve's title.
        before_iteration: called with each iteration's number (1-based) before it runs, e.g.
            to set a scheduled setting of ``model``. On resume only the remaining iterations
            are called, so it must set its state from the number, never accumulate it.
        bar: a tqdm bar of the caller's (e.g. one over several runs, its ``initial`` counting
            the iterations already done) to advance instead of a bar of this run's own; its
            description is set to ``title``, its postfix to the metrics; it is not closed.
        after_iteration: called with each iteration's number after its step, its log row and
            its checkpoint (if one was due), e.g. to judge the model as it is then. A resumed
            run calls it first with the iteration it resumed from (the model holds that
            checkpoint's weights), so a call the killed run missed can be made up: it must
            do nothing when called twice with the same number.

    Returns:
        list of per-iteration dicts: iteration, episodes (samples so far), loss, the model's
        metrics (averaged over ranks), grad_norm (before clipping), skipped (1 if the gradient
        was not finite and the step was skipped), wall_seconds (time of the iteration).
    """
    dist = Distributed() if dist is None else dist
    out = Path(out)
    if config.batch_size % dist.world_size:
        raise ValueError(
            f"batch_size {config.batch_size} is not divisible by the {dist.world_size} "
            "processes; choose a multiple"
        )
    share = config.batch_size // dist.world_size
    # Through JSON, so that it compares equal to what a checkpoint gives back.
    settings = json.loads(json.dumps({"train": dataclasses.asdict(config), "task": describe or {}}))
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(parameters, lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    rows: list[dict] = []
    start = 0
    checkpoint_path = out / CHECKPOINT
    if checkpoint_path.exists():
        if not resume:
            raise FileExistsError(
                f"{checkpoint_path} exists; resume it, or train into a new output folder"
            )
        saved = _load_checkpoint(checkpoint_path)
        _check_resumable(saved["config"], settings, checkpoint_path)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"])
        start, rows = int(saved["iteration"]), list(saved["metrics"])
    log = MetricsLog(out)
    if dist.is_main:
        out.mkdir(parents=True, exist_ok=True)
        log.rewrite(rows)  # drop rows logged after the checkpoint we resume from
    runner = nn.parallel.DistributedDataParallel(model) if dist.active else model

    def save(iteration: int) -> None:
        atomic_save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "iteration": iteration,
                "generator": generator.get_state(),
                "metrics": rows,
                "config": settings,
            },
            checkpoint_path,
        )
        plot_learning_curve(rows, out / LEARNING_CURVE, title)

    own_bar = bar is None
    if own_bar:
        bar = tqdm(
            total=config.iterations,
            initial=start,
            desc=title or "train",
            unit="it",
            disable=not (progress and dist.is_main),
        )
    else:
        bar.set_description(title or "train")
    if after_iteration is not None and start > 0:
        after_iteration(start)
    for iteration in range(start + 1, config.iterations + 1):
        began = time.perf_counter()
        if before_iteration is not None:
            before_iteration(iteration)
        batch = sample(generator, config.batch_size, iteration - 1)
        batch = batch[dist.rank * share : (dist.rank + 1) * share]
        optimizer.zero_grad(set_to_none=True)
        loss, metrics = runner(batch.to(dist.device))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, config.clip_norm)
        # DDP leaves identical gradients on every rank, so every rank decides alike.
        finite = bool(torch.isfinite(grad_norm))
        if finite:
            for group in optimizer.param_groups:
                group["lr"] = config.learning_rate_at(iteration)
            optimizer.step()
        averaged = dist.mean(torch.stack([loss.detach(), *metrics.values()]).to(dist.device))
        # JSON has no NaN: a non-finite value is logged as null (None).
        values = {
            name: value if math.isfinite(value) else None
            for name, value in zip(["loss", *metrics], averaged.tolist(), strict=True)
        }
        rows.append(
            {
                "iteration": iteration,
                "episodes": iteration * config.batch_size,
                **values,
                "grad_norm": float(grad_norm) if finite else None,
                "skipped": int(not finite),
                "wall_seconds": round(time.perf_counter() - began, 3),
            }
        )
        if dist.is_main:
            log.append(rows[-1])
            if iteration % config.save_every == 0 or iteration == config.iterations:
                save(iteration)
        if after_iteration is not None:
            after_iteration(iteration)
        bar.set_postfix({k: "nan" if v is None else f"{v:.3g}" for k, v in values.items()})
        bar.update(1)
    if own_bar:
        bar.close()
    if dist.is_main and start >= config.iterations and rows:
        plot_learning_curve(rows, out / LEARNING_CURVE, title)
    dist.barrier()
    return rows
