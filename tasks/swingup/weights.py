"""The policy weights file the example ships: `save_policy`, `load_policy`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from .episodes import SwingUpConfig, make_policy


def save_policy(path: str | Path, policy: nn.Module, config: SwingUpConfig, **info) -> Path:
    """Write the policy's weights, its `SwingUpConfig` and ``info`` (e.g. training_episodes)
    to ``path``, atomically."""
    from ..training import atomic_save

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
                "a file written by tasks.swingup.save_policy"
            )
    try:
        config = SwingUpConfig(**payload["config"])
    except TypeError as e:
        raise ValueError(f"{path}: config: {e}") from None
    policy = make_policy(config, max_action)
    policy.load_state_dict(payload["policy"])
    info = {k: v for k, v in payload.items() if k not in ("policy", "config")}
    return policy, config, info
