"""``<actuator>``: each ``<motor>`` on a hinge or slide joint becomes a force motor whose action
is the force itself, ``gear * ctrl``, clipped to ``gear * ctrlrange`` and ``forcerange``."""

from __future__ import annotations

import math

from .context import ConversionContext
from .defaults import class_attrs
from .supported import NON_JOINT_TARGETS
from .xmltree import Node


def read_actuators(ctx: ConversionContext, node: Node) -> list[dict]:
    """Give each motorised joint its ``motor`` table; returns per actuator, in order,
    ``{"name", "joint" (scene name), "gear"}``."""
    out = []
    for child in node.children:
        if child.tag != "motor":
            raise ctx.error(
                child, f"<{child.tag}> actuators are not supported",
                "<motor> (a force or torque on a hinge or slide joint)",
            )  # fmt: skip
        out.append(_read_motor(ctx, child, len(out)))
    return out


def _read_motor(ctx: ConversionContext, node: Node, index: int) -> dict:
    a = class_attrs(ctx, node, None, "motor")
    ctx.check_attrs(node, a)
    for key in NON_JOINT_TARGETS:
        if key in a:
            raise ctx.error(node, f"a motor on a {key} is not supported", 'joint="..."')
    jname = a.get("joint")
    if jname is None:
        raise ctx.error(node, "the motor names no joint", 'joint="..."')
    if jname not in ctx.joint_nodes:
        known = [k for k in ctx.joint_nodes]
        raise ctx.error(
            node, f"joint {jname!r} is not a hinge or slide joint of the model",
            ", ".join(known) or "no joints",
        )  # fmt: skip
    _, kind, joint = ctx.joint_nodes[jname]
    if kind == "ball":
        raise ctx.error(node, "a motor on a ball joint is not supported", "hinge or slide")
    if "motor" in joint:
        raise ctx.error(node, f"joint {jname!r} already has a motor", "one motor per joint")
    gear = ctx.floats(node, a, "gear", range(1, 7), [1.0])
    if any(gear[1:]):
        raise ctx.error(node, "only the first gear component is supported for a joint")
    gear = gear[0]
    if gear == 0:
        raise ctx.error(node, "gear is zero")
    limit = _force_limit(ctx, node, a, gear)
    joint["motor"] = {"type": "force"} if math.isinf(limit) else {"type": "force", "max": limit}
    return {"name": a.get("name") or f"actuator{index}", "joint": joint["name"], "gear": gear}


def _force_limit(ctx: ConversionContext, node: Node, a: dict, gear: float) -> float:
    """The largest force the motor can apply (inf when unlimited): the smaller of
    ``|gear| * ctrlrange`` and ``forcerange``, each only when limited; ranges must be
    symmetric about 0."""
    limit = math.inf
    for key, limited_key, scale in (
        ("ctrlrange", "ctrllimited", abs(gear)),
        ("forcerange", "forcelimited", 1.0),
    ):
        limited = ctx.boolean(node, a, limited_key, ("true", "false", "auto")) or "auto"
        if limited == "auto":
            limited = "true" if (key in a and ctx.autolimits) else "false"
        if limited != "true":
            continue
        rng = ctx.floats(node, a, key, (2,), None)
        if rng is None:
            raise ctx.error(node, f'{limited_key}="true" needs {key}', f'{key}="lower upper"')
        if not (rng[0] < 0 < rng[1] and abs(rng[0] + rng[1]) <= 1e-9 * abs(rng[1])):
            raise ctx.error(
                node, f'{key}="{a[key]}" is not symmetric about 0: diffcam clips a '
                "motor's force to +-max", f'{key}="-m m"',
            )  # fmt: skip
        limit = min(limit, rng[1] * scale)
    return limit


def order_motors(ctx: ConversionContext, actuators: list[dict]) -> None:
    """Put the motorised joints in MuJoCo's actuator order (the scene's actions follow the
    joints' order); the other joints keep their places."""
    slots = [i for i, j in enumerate(ctx.joints) if "motor" in j]
    by_name = {j["name"]: j for j in ctx.joints}
    for slot, act in zip(slots, actuators, strict=True):
        ctx.joints[slot] = by_name[act["joint"]]
