"""diffcam: a differentiable pinhole ray-caster (and scene layer) in plain PyTorch."""

from . import debug, imaging
from .camera import PinholeCamera
from .errors import SceneError
from .fit import FitError, FitResult, fit_scene, render_rollout
from .formation import ImageModel, estimate_color, render_video
from .policy import (
    PixelPolicy,
    PixelRollout,
    PolicyRollout,
    StatePolicy,
    pixel_observer,
    pixel_rollout,
    policy_rollout,
    push_frame,
)
from .primitives import Primitive
from .renderer import (
    ANTIALIAS,
    DEFAULT_EDGE_SOFTNESS,
    Lighting,
    RenderBuffers,
    render,
    render_buffers,
)
from .scene import Scene, load_scene
from .textures import sample_texture
from .video import Video, VideoError, read_video, write_video

__all__ = [
    "debug",
    "imaging",
    "PinholeCamera",
    "SceneError",
    "FitError",
    "FitResult",
    "fit_scene",
    "render_rollout",
    "ImageModel",
    "estimate_color",
    "render_video",
    "PixelPolicy",
    "PixelRollout",
    "PolicyRollout",
    "StatePolicy",
    "pixel_observer",
    "pixel_rollout",
    "policy_rollout",
    "push_frame",
    "Primitive",
    "ANTIALIAS",
    "DEFAULT_EDGE_SOFTNESS",
    "Lighting",
    "RenderBuffers",
    "render",
    "render_buffers",
    "Scene",
    "load_scene",
    "sample_texture",
    "Video",
    "VideoError",
    "read_video",
    "write_video",
]
