"""Which autodiff mode is active: the hand-written backward passes and compiled graphs serve
plain reverse mode only."""

from __future__ import annotations

import torch


def plain_autograd() -> bool:
    """False inside forward-mode AD or a functorch transform (vmap, jacfwd...), which
    hand-written backward passes and torch.compile'd steps do not serve; True otherwise."""
    from torch.autograd import forward_ad

    if getattr(forward_ad, "_current_level", -1) >= 0:
        return False
    stack = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return stack is None or stack() is None
