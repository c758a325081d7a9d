"""`diffcam.plot.save_line_plot`: PNG line plots drawn with Pillow."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from diffcam.plot import _COLOURS, _ticks, save_line_plot


def test_plot_draws_each_series_in_its_colour(tmp_path):
    path = save_line_plot(
        tmp_path / "sub" / "curve.png",
        {"loss": [1.0, 0.5, 0.25, 0.1], "error": [0.3, float("nan"), 0.2, 0.1]},
        title="t",
        xlabel="iteration",
        log_y=True,
        size=(400, 300),
    )
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (300, 400, 3)
    for colour in _COLOURS[:2]:
        assert (image == np.array(colour, dtype=np.uint8)).all(-1).sum() > 20
    assert not list(path.parent.glob("*.tmp.png"))  # the temporary file was renamed


def test_plot_survives_empty_constant_and_nonpositive_series(tmp_path):
    save_line_plot(tmp_path / "a.png", {})
    save_line_plot(tmp_path / "b.png", {"flat": [2.0, 2.0, 2.0]})
    save_line_plot(tmp_path / "c.png", {"zeros": [0.0, 0.0]}, log_y=True)
    assert all((tmp_path / f"{n}.png").stat().st_size > 0 for n in "abc")


def test_ticks_are_round_and_cover_the_range():
    ticks = _ticks(0.13, 0.87)
    assert len(ticks) == 4
    assert all(math.isclose(a, b) for a, b in zip(ticks, [0.2, 0.4, 0.6, 0.8], strict=True))
