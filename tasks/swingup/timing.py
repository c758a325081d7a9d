"""`time_iteration`: where one training iteration's time goes (policy, physics, rendering)."""

from __future__ import annotations

import dataclasses
import time

import torch

import physics
from diffcam.cartpole import states_from_starts

from .episodes import SwingUpEpisodes


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
    from diffcam.profiling import Stopwatch, TimedModule, TimedScene, backward_seconds

    watch = Stopwatch()
    policy = TimedModule(episodes.policy, watch, "policy")
    config = episodes.config
    # The timed proxy wraps the scene the frames are drawn from (a downscaled view shares the
    # physics world), so that both its renders and its steps are timed.
    observed = TimedScene(episodes.observed_scene(), watch)
    timed = SwingUpEpisodes(observed, policy, dataclasses.replace(config, render_downscale=1))
    # compiled physics steps each held action as one rollout call (`policy_rollout`)
    chained = (
        config.compile_physics and config.control_every > 1 and hasattr(episodes.scene, "rollout")
    )
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
        if chained:
            held = action.clone().requires_grad_(True).expand(config.control_every, *action.shape)
            return episodes.scene.rollout(
                config.control_every, state=leaf_state(), actions=held, compile=True,
                gradient_decay=config.gradient_decay, check_finite=False,
            )[1:].tensors()  # fmt: skip
        return episodes.scene.step(
            leaf_state(), action.clone().requires_grad_(True), compile=config.compile_physics
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
        "physics": estimates["physics"] * counts.get("physics", 0),  # per call (see above)
    }
    # A checkpointed rollout runs its forward again inside the backward pass.
    backward_parts["recompute"] = forward if episodes.config.bptt_segment else 0.0
    ms.update({f"backward_{k}": 1e3 * v for k, v in backward_parts.items()})
    ms["backward_other"] = 1e3 * (backward - sum(backward_parts.values()))
    ms["backward_total"] = 1e3 * backward
    ms = {k: round(v, 1) for k, v in ms.items()}
    steps = counts.get("physics", 0) * (config.control_every if chained else 1)
    return {**ms, "control_steps": counts.get("policy", 0), "steps": steps}
