"""Make the bundled textures procedurally: ``python diffcam/data/textures/make_textures.py``.

Every texture is drawn from a fixed random seed with numpy (and Pillow for the lettering), so
running the script again gives the same PNGs. Textures are small (128 or 256 pixels a side) and
tile seamlessly where it matters (wood, metal, bricks, floor, checker), so ``uv_scale`` can
repeat them.

Written textures:
    wood.png         warm wood grain with growth rings and a few knots
    metal.png        brushed steel: fine horizontal streaks and a soft sheen
    bricks.png       a red brick wall with mortar, for backdrops
    floor.png        grey stone tiles with grout, for floors
    checker.png      an 8x8 two-tone checkerboard
    beachball.png    six coloured segments around u, white poles: shows a ball's spin
    stripes.png      yellow and black bands across v (a measuring rod / hazard tape)
    plaster.png      a light plaster wall with faint panel seams, for calm backdrops
    test_pattern.png a 4x4 grid of coloured cells lettered A..P (A at the top left of the PNG)
                     with an arrow pointing up: shows orientation and mirroring at a glance
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent


def _periodic_noise(rng: np.random.Generator, size: int, octaves: int = 4, base: int = 4):
    """Seamless value noise in [0, 1]: sums of bilinearly upsampled periodic random grids."""
    out = np.zeros((size, size))
    amp, total = 1.0, 0.0
    for o in range(octaves):
        cells = base * 2**o
        grid = rng.random((cells, cells))
        coords = np.arange(size) * cells / size
        i0 = np.floor(coords).astype(int)
        f = coords - i0
        f = f * f * (3 - 2 * f)  # smoothstep
        i1 = (i0 + 1) % cells
        rows0, rows1 = grid[i0], grid[i1]
        rows = rows0 * (1 - f)[:, None] + rows1 * f[:, None]
        layer = rows[:, i0] * (1 - f)[None, :] + rows[:, i1] * f[None, :]
        out += amp * layer
        total += amp
        amp *= 0.5
    return out / total


def _to_png(rgb: np.ndarray, name: str) -> None:
    rgb = np.clip(rgb, 0.0, 1.0)
    Image.fromarray((rgb * 255 + 0.5).astype(np.uint8), "RGB").save(HERE / name, optimize=True)


def _mix(a, b, t):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a + (b - a) * t[..., None]


def wood(size: int = 128) -> np.ndarray:
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:size, 0:size] / size
    warp = _periodic_noise(rng, size, octaves=3, base=2)
    # rings run along x (the grain), bent by noise; periodic in y by using whole cycles
    rings = np.sin(2 * np.pi * (6 * y + 0.6 * warp)) * 0.5 + 0.5
    rings = rings**3
    fine = _periodic_noise(rng, size, octaves=4, base=8)
    streak = np.sin(2 * np.pi * (40 * y + 3 * fine)) * 0.5 + 0.5
    t = 0.55 * rings + 0.25 * streak * 0.5 + 0.2 * fine
    # a couple of knots
    for cx, cy in [(0.3, 0.35), (0.75, 0.8)]:
        dx = np.minimum(abs(x - cx), 1 - abs(x - cx)) * 1.8
        dy = np.minimum(abs(y - cy), 1 - abs(y - cy))
        d = np.sqrt(dx**2 + dy**2)
        t += 0.5 * np.exp(-((d / 0.05) ** 2)) + 0.15 * (np.sin(d * 90) * 0.5 + 0.5) * (d < 0.12)
    t = np.clip(t, 0, 1)
    return _mix([0.80, 0.58, 0.36], [0.45, 0.27, 0.13], t)


def metal(size: int = 128) -> np.ndarray:
    rng = np.random.default_rng(2)
    # streaks: noise stretched along x
    streaks = rng.random((size, 8))
    streaks = np.repeat(streaks, size // 8, axis=1)
    streaks = np.roll(streaks, rng.integers(0, size), axis=1)
    kernel = np.ones(size // 4) / (size // 4)

    def blur_rows(a, k):  # circular blur along x, so the texture still tiles
        return np.array([np.convolve(np.tile(r, 3), k, "same")[size : 2 * size] for r in a])

    smooth = blur_rows(streaks, kernel)
    fine = blur_rows(rng.random((size, size)), np.ones(9) / 9)
    y = np.arange(size) / size
    sheen = 0.5 + 0.5 * np.cos(2 * np.pi * (y - 0.3))
    t = 0.45 * smooth + 0.35 * fine + 0.2 * sheen[:, None]
    return _mix([0.42, 0.44, 0.47], [0.86, 0.87, 0.89], t)


def bricks(size: int = 256) -> np.ndarray:
    rng = np.random.default_rng(3)
    rows, cols = 8, 4
    bh, bw = size // rows, size // cols
    mortar = 3
    img = np.zeros((size, size, 3))
    noise = _periodic_noise(rng, size, octaves=5, base=8)
    img[:] = np.array([0.86, 0.84, 0.80]) * (0.85 + 0.3 * noise[..., None])  # mortar
    for r in range(rows):
        offset = (bw // 2) * (r % 2)
        for c in range(cols + 1):
            base = np.array([0.74, 0.42, 0.33]) * rng.uniform(0.85, 1.12)
            base = base + rng.uniform(-0.04, 0.04, 3)
            y0, y1 = r * bh + mortar // 2 + 1, (r + 1) * bh - mortar // 2
            x0, x1 = c * bw + offset + mortar // 2 + 1, (c + 1) * bw + offset - mortar // 2
            xs = np.arange(x0, x1) % size
            img[y0:y1, xs] = base * (0.8 + 0.35 * noise[y0:y1][:, xs, None])
    return img


def floor(size: int = 128) -> np.ndarray:
    rng = np.random.default_rng(4)
    n = 4
    cell = size // n
    noise = _periodic_noise(rng, size, octaves=5, base=4)
    img = np.zeros((size, size, 3))
    for r in range(n):
        for c in range(n):
            shade = rng.uniform(0.55, 0.75)
            tint = np.array([shade, shade * 0.98, shade * 0.94])
            sl = (slice(r * cell, (r + 1) * cell), slice(c * cell, (c + 1) * cell))
            img[sl] = tint * (0.85 + 0.3 * noise[sl][..., None])
    yy = np.arange(size) % cell
    grout = (yy < 2)[:, None] | (yy < 2)[None, :]
    img[grout] = [0.30, 0.29, 0.28]
    return img


def checker(size: int = 128, n: int = 8) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size] * n // size
    t = ((x + y) % 2).astype(float)
    return _mix([0.93, 0.93, 0.90], [0.20, 0.22, 0.28], t)


def beachball(size: int = 128) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size] / size
    colours = np.array(
        [
            [0.90, 0.16, 0.16],
            [0.98, 0.85, 0.15],
            [0.15, 0.45, 0.85],
            [0.95, 0.95, 0.95],
            [0.15, 0.70, 0.30],
            [0.98, 0.55, 0.10],
        ]
    )
    img = colours[(x * 6).astype(int) % 6]
    pole = (y < 0.12) | (y > 0.88)
    img[pole] = [0.97, 0.97, 0.97]
    return img


def stripes(size: int = 64, bands: int = 4) -> np.ndarray:
    rng = np.random.default_rng(5)
    y, x = np.mgrid[0:size, 0:size] / size
    t = (np.floor(y * 2 * bands) % 2).astype(float)
    img = _mix([0.98, 0.80, 0.10], [0.08, 0.08, 0.09], t)
    grain = _periodic_noise(rng, size, octaves=3, base=4)
    return img * (0.92 + 0.12 * grain[..., None])


def plaster(size: int = 128) -> np.ndarray:
    rng = np.random.default_rng(6)
    noise = _periodic_noise(rng, size, octaves=6, base=4)
    img = np.array([0.86, 0.85, 0.80]) * (0.93 + 0.1 * noise[..., None])
    seam = (np.arange(size) % (size // 2)) < 1
    img[seam, :] *= 0.9
    img[:, seam] *= 0.9
    return img


def test_pattern(size: int = 128) -> np.ndarray:
    n = 4
    cell = size // n
    img = Image.new("RGB", (size, size))
    draw = ImageDraw.Draw(img)
    try:
        font = ImageFont.load_default(size=cell * 0.6)
    except TypeError:  # Pillow < 10.1
        font = ImageFont.load_default()
    for r in range(n):
        for c in range(n):
            hue = (r * n + c) / (n * n)
            rgb = np.array([0.5 + 0.4 * np.cos(2 * np.pi * (hue + k / 3)) for k in range(3)])
            fill = tuple(int(v * 255) for v in rgb)
            draw.rectangle([c * cell, r * cell, (c + 1) * cell - 1, (r + 1) * cell - 1], fill=fill)
            letter = chr(ord("A") + r * n + c)
            draw.text(
                (c * cell + cell / 2, r * cell + cell / 2),
                letter,
                fill=(20, 20, 20),
                font=font,
                anchor="mm",
            )
    # an arrow pointing up (towards row 0 of the PNG, i.e. towards v = 1) in the middle
    m = size // 2
    draw.polygon([(m, m - cell // 2), (m - cell // 4, m), (m + cell // 4, m)], fill=(255, 255, 255))
    draw.rectangle([m - 3, m, m + 3, m + cell // 3], fill=(255, 255, 255))
    return np.asarray(img, dtype=float) / 255.0


TEXTURES = {
    "wood.png": wood,
    "metal.png": metal,
    "bricks.png": bricks,
    "floor.png": floor,
    "checker.png": checker,
    "beachball.png": beachball,
    "stripes.png": stripes,
    "plaster.png": plaster,
    "test_pattern.png": test_pattern,
}


def main() -> None:
    for name, make in TEXTURES.items():
        _to_png(make(), name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
