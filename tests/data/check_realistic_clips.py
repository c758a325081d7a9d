"""Check that the realistic clips' truth sits on what the decoded videos show.

Independent of the generator: it reads the videos with OpenCV and the truth JSON only.

* ``reprojection``: the truth's centres projected again with ``cv2.projectPoints`` from the
  truth's camera (intrinsics, distortion, pose) against the truth's ``centre_px`` (pixels).
* ``centroid``: a simple tracker: in a window around the truth's centre, background subtraction
  against the median of the decoded frames in which the body is elsewhere, a threshold, an
  opening and the connected component nearest the window's centre; its centroid against the
  truth's ``centre_px`` (pixels), on frames where the body is in frame, moving and unoccluded,
  split into ``clean`` frames (no nuisance in the picture) and ``nuisance_elsewhere`` (the hand
  or the person is in the picture but does not cover the body).
* ``double_pendulum``: the links are thin and touch each other, so instead: the share of points
  along each link's projected axis that fall on the foreground mask, and the mean distance of the
  foreground pixels near the links to the nearest projected axis (pixels).

Usage (from the repository root)::

    python tests/data/check_realistic_clips.py                 # the bundled clips
    python tests/data/check_realistic_clips.py /tmp/t.avi      # a clip with its .json beside it
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
CLIPS = (
    "bounce_realistic.mp4",
    "throw_realistic.avi",
    "incline_realistic.mp4",
    "double_pendulum_realistic.mp4",
    "tumble_realistic.mp4",
)


def read_frames(path) -> np.ndarray:
    """All frames (T, H, W, 3) uint8 BGR, in display order, with OpenCV."""
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        frames.append(img)
    cap.release()
    return np.stack(frames)


def project(truth: dict, pts: np.ndarray) -> np.ndarray:
    """World points (N, 3) -> pixels (N, 2) with OpenCV and the truth's camera."""
    cam = truth["camera"]
    rot = np.asarray(cam["world_from_camera_rotation"])  # columns: camera axes in the world
    pos = np.asarray(cam["position"])
    rvec, _ = cv2.Rodrigues(rot.T)
    tvec = -rot.T @ pos
    k = np.array([[cam["fx"], 0, cam["cx"]], [0, cam["fy"], cam["cy"]], [0, 0, 1.0]])
    d = cam["distortion"]
    dist = np.array([d["k1"], d["k2"], d["p1"], d["p2"], d["k3"]])
    px, _ = cv2.projectPoints(np.asarray(pts, float).reshape(-1, 1, 3), rvec, tvec, k, dist)
    return px.reshape(-1, 2)


THRESH = 22.0  # summed |BGR difference| for the foreground
KERNEL = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))


def foreground(frames: np.ndarray, thresh: float = THRESH) -> np.ndarray:
    """Boolean masks (T, H, W): the summed absolute BGR difference to the temporal median above
    ``thresh``, opened with a 3 x 3 cross."""
    plate = np.median(frames, axis=0)
    diff = np.abs(frames.astype(np.float32) - plate).sum(axis=-1)
    kernel = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))
    return np.stack(
        [cv2.morphologyEx((m > thresh).astype(np.uint8), cv2.MORPH_OPEN, kernel) > 0 for m in diff]
    )


def blob_centroid(mask: np.ndarray, centre, radius: float):
    """Centroid (u, v) (pixel centres at +0.5) of the connected component nearest ``centre``
    among those inside a square window of half-size ``radius``; None if there is none."""
    h, w = mask.shape
    j0, j1 = max(int(centre[0] - radius), 0), min(int(centre[0] + radius) + 1, w)
    i0, i1 = max(int(centre[1] - radius), 0), min(int(centre[1] + radius) + 1, h)
    if j0 >= j1 or i0 >= i1:
        return None
    sub = mask[i0:i1, j0:j1].astype(np.uint8)
    n, lab, stats, cents = cv2.connectedComponentsWithStats(sub, connectivity=8)
    best, best_d = None, np.inf
    for c in range(1, n):
        if stats[c, cv2.CC_STAT_AREA] < 3:
            continue
        u, v = cents[c] + [j0 + 0.5, i0 + 0.5]
        d = np.hypot(u - centre[0], v - centre[1])
        if d < best_d:
            best, best_d = (u, v), d
    return best


def check(video: Path) -> dict:
    truth = json.loads(video.with_suffix(".json").read_text())
    frames = read_frames(video)
    n = truth["video"]["n_frames"]
    out = {"clip": video.name, "decoded_frames": len(frames), "truth_frames": n}
    fr = truth["frames"]
    nuisance = np.zeros(n, bool)
    for g in fr["nuisance_samples"].values():
        nuisance |= np.asarray(g) > 0
    # the truth's projections against OpenCV's
    rep = []
    for b in fr["bodies"].values():
        rep.append(np.abs(project(truth, b["position"]) - np.asarray(b["centre_px"])).max())
    out["reprojection_max_px"] = float(max(rep))
    fx = truth["camera"]["fx"]
    depth = np.linalg.norm(
        np.asarray(next(iter(fr["bodies"].values()))["position"]) - truth["camera"]["position"],
        axis=1,
    )
    if truth["kind"] == "double_pendulum":
        return out | _check_links(truth, foreground(frames[:n]), fx)
    name = next(iter(fr["bodies"]))
    b = fr["bodies"][name]
    size = truth["physics"][name].get("radius") or 0.5 * max(truth["physics"][name]["size"])
    speed = np.linalg.norm(b["velocity"], axis=1)
    px = np.asarray(b["centre_px"])
    h, w = frames.shape[1:3]
    res = {"clean": [], "nuisance_elsewhere": []}
    radii = []
    for k in range(n):
        vis = b["visible_fraction"][k]
        if not b["in_frame"][k] or vis is None or vis < 0.99 or speed[k] < 0.05:
            continue
        c = px[k]
        r_px = size * fx / depth[k]
        half = int(1.6 * r_px + 3)
        # a clean plate for this window: the median of the frames where the body is elsewhere
        far = np.flatnonzero(np.abs(px - c).max(axis=1) > 2 * half + 2)
        if len(far) < 5:
            continue
        j0, j1 = max(int(c[0]) - half, 0), min(int(c[0]) + half + 1, w)
        i0, i1 = max(int(c[1]) - half, 0), min(int(c[1]) + half + 1, h)
        win = frames[:, i0:i1, j0:j1].astype(np.float32)
        plate = np.median(win[far], axis=0)
        m = np.abs(win[k] - plate).sum(axis=-1) > THRESH
        m = cv2.morphologyEx(m.astype(np.uint8), cv2.MORPH_OPEN, KERNEL) > 0
        found = blob_centroid(m, c - [j0, i0], half)
        err = np.inf if found is None else float(np.hypot(*(np.asarray(found) + [j0, i0] - c)))
        res["nuisance_elsewhere" if nuisance[k] else "clean"].append(err)
        radii.append(r_px)
    out |= {"body": name, "radius_px_mean": float(np.mean(radii))}
    for key, errs in res.items():
        e = np.asarray(errs)
        ok = np.isfinite(e)
        if not len(e):
            continue
        out |= {
            f"{key}_frames": len(e),
            f"{key}_no_blob": int((~ok).sum()),
            f"{key}_err_mean_px": float(e[ok].mean()),
            f"{key}_err_median_px": float(np.median(e[ok])),
            f"{key}_err_p90_px": float(np.percentile(e[ok], 90)),
            f"{key}_err_max_px": float(e[ok].max()),
        }
    return out


def _check_links(truth: dict, masks: np.ndarray, fx: float) -> dict:
    fr = truth["frames"]
    ph = truth["physics"]
    pivot = np.asarray(ph["pivot"])
    l2 = fr["bodies"]["link2"]
    hinge = np.asarray(l2["hinge_position"])
    tip = np.asarray(l2["tip_position"])
    n = len(hinge)
    cover, dists = [], []
    s = np.linspace(0.08, 0.92, 15)[:, None]
    for k in range(n):
        segs = []
        for a, b in ((pivot, hinge[k]), (hinge[k], tip[k])):
            segs.append(project(truth, a + s * (b - a)))
        pts = np.concatenate(segs)
        h, w = masks[k].shape
        ii = np.clip(pts[:, 1].astype(int), 0, h - 1)
        jj = np.clip(pts[:, 0].astype(int), 0, w - 1)
        # the axis point's pixel or a 4-neighbour is foreground (the links are 3-6 px wide)
        m = masks[k]
        hit = m[ii, jj] | m[np.clip(ii + 1, 0, h - 1), jj] | m[np.clip(ii - 1, 0, h - 1), jj]
        hit |= m[ii, np.clip(jj + 1, 0, w - 1)] | m[ii, np.clip(jj - 1, 0, w - 1)]
        cover.append(hit.mean())
        # foreground pixels within 12 px of the axes: their distance to the nearest axis point
        dense = np.concatenate(
            [
                project(truth, a + np.linspace(0, 1, 60)[:, None] * (b - a))
                for a, b in ((pivot, hinge[k]), (hinge[k], tip[k]))
            ]
        )
        fi, fj = np.nonzero(m)
        if len(fi):
            fp = np.stack([fj + 0.5, fi + 0.5], axis=1)
            d = np.sqrt(((fp[:, None, :] - dense[None, :, :]) ** 2).sum(-1)).min(axis=1)
            dists.append(d[d < 12].mean() if (d < 12).any() else np.nan)
    link_r_px = ph["link1"]["radius"] * fx / np.linalg.norm(pivot - truth["camera"]["position"])
    return {
        "body": "link1+link2",
        "link1_radius_px": float(link_r_px),
        "frames_checked": n,
        "axis_on_foreground_mean": float(np.mean(cover)),
        "axis_on_foreground_min": float(np.min(cover)),
        "foreground_to_axis_mean_px": float(np.nanmean(dists)),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("videos", nargs="*", default=[str(HERE / c) for c in CLIPS])
    a = p.parse_args(argv)
    for v in a.videos:
        res = check(Path(v))
        print(
            ", ".join(
                f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()
            )
        )


if __name__ == "__main__":
    main()
