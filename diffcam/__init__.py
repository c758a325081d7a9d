"""diffcam: a differentiable pinhole ray-caster (and scene layer) in plain PyTorch."""

from . import debug as debug
from . import swingup as swingup
from . import training as training
from .camera import PinholeCamera as PinholeCamera
from .errors import SceneError as SceneError
from .fit import FitResult as FitResult
from .fit import fit_scene as fit_scene
from .fit import render_rollout as render_rollout
from .policy import PixelPolicy as PixelPolicy
from .policy import PixelRollout as PixelRollout
from .policy import PolicyRollout as PolicyRollout
from .policy import StatePolicy as StatePolicy
from .policy import pixel_observer as pixel_observer
from .policy import pixel_rollout as pixel_rollout
from .policy import policy_rollout as policy_rollout
from .policy import push_frame as push_frame
from .primitives import Primitive as Primitive
from .render import Lighting as Lighting
from .render import RenderBuffers as RenderBuffers
from .render import render as render
from .render import render_buffers as render_buffers
from .scene import Scene as Scene
from .scene import load_scene as load_scene
from .textures import sample_texture as sample_texture
from .video import write_video as write_video
