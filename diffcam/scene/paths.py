"""Where the bundled scenes and textures are: the repository's ``scenes/`` and
``assets/textures/``, found from this file's place in the checkout."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # diffcam/scene/paths.py -> the repository
ASSETS_DIR = ROOT / "assets" / "textures"
SCENES_DIR = ROOT / "scenes"
