"""The scene-file reference, generated from the schema the loader checks files with.

Every key of every section comes from `diffcam.scene.schema`'s ``*_FIELDS`` tables, with the
``accepted`` text of its field (what an error message says is accepted), whether an override
may replace it, and its default, read from `physics.Body`, `physics.Joint`, `physics.Motor`,
`physics.WorldSpec` and `diffcam.Lighting` where the key is theirs. The one thing written here
by hand is a sentence per key (``DESCRIBE``): a key of the schema without one, or a sentence
for a key the schema no longer has, fails the build. The contact rules' numbers are read from
a built world, the shape pairs that collide from `physics.collision_pairs`.

Run alone to print the Markdown: ``python docs/_gen/scene_reference.py``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# key -> one sentence (Markdown). Sections as in the file; "size" per shape comes from
# SIZE_ACCEPTED.
DESCRIBE = {
    "world": {
        "gravity": "Acceleration of gravity (m/s²), a world-frame vector.",
        "timestep": "The physics step (s). Structural: a plain number, never a tensor.",
        "solver_iterations": "Sweeps of the contact, limit and servo solver per step.",
        "coordinates": '`"maximal"`: every body integrated, joints and contacts as constraints '
        '(the general engine). `"reduced"`: joint coordinates, for trees of hinges, sliders '
        "and fixed joints (motors and limits allowed) where nothing collides: exact joints, "
        '4–10× faster; an error names what is in the way. `"auto"` picks reduced when the '
        "model allows it; `scene.world.coordinates` says which was taken.",
    },
    "camera": {
        "resolution": "Image size `[width, height]` in pixels.",
        "position": "The camera's centre in the world (m).",
        "look_at": "A point the optical axis passes through (m).",
        "up": "The world direction that appears up in the image (not along the view).",
        "fov_y_deg": "Vertical field of view in degrees. Give this or `focal`.",
        "focal": "`[fx, fy]` in pixels, instead of `fov_y_deg`.",
        "principal_point": "`[cx, cy]` in pixels (continuous coordinates: the image centre is "
        "`[W/2, H/2]`); only with `focal`.",
        "background": "What shows where no body is: a colour, or the name of a texture "
        "declared under `[textures]` (stretched over the image).",
    },
    "light": {
        "ambient": "Shade of a surface facing away from the light.",
        "direction": "World direction from the scene *towards* the light (need not be unit).",
        "intensity": "Added shade `intensity × max(0, n · l)` (Lambert, two-sided).",
    },
    "bodies": {
        "name": "Unique name: the key of the body's overrides and its place in the state.",
        "shape": "The body's shape.",
        "size": "Per shape, see *Shapes and sizes* below.",
        "mass": "kg. Give `mass` or `density` for a moving body; neither for a static one.",
        "density": "kg/m³; the mass follows from the shape's volume.",
        "static": "A fixed body (floor, wall): infinite mass, never moves. A plane must be static.",
        "position": "World position of the centre (m) in the initial configuration.",
        "quat": "World orientation `[w, x, y, z]` (MuJoCo order); normalised when loaded.",
        "velocity": "Initial world-frame linear velocity (m/s).",
        "angular_velocity": "Initial world-frame angular velocity (rad/s).",
        "texture": "Name of a texture declared under `[textures]`. Give `texture` or `color`.",
        "color": "A flat colour `[r, g, b]` in [0, 1], instead of a texture.",
        "uv_scale": "How many times the texture repeats along u and v.",
        "friction": "Coulomb friction coefficient. A contact uses the **geometric mean** of "
        "its two bodies' (see *Contact rules*).",
        "restitution": "Bounciness in [0, 1]. A contact uses the **larger** of its two "
        "bodies' (see *Contact rules*).",
        "collide": "Whether the body takes part in contacts at all.",
        "visible": "`false`: the body collides and moves but is not drawn: a floor or a wall "
        "that the video's own background already shows (the typical `diffcam fit` scene).",
        "mesh": '`shape = "mesh"` only: the triangle mesh file (`.obj`; `.gltf`, `.glb`, '
        "`.ply`, `.stl`, `.off` with the `mesh` extra, trimesh), in metres, looked for next "
        "to the scene file, then in `$DIFFCAM_ASSETS`, then among the bundled meshes "
        "(`diffcam/data/meshes/`, e.g. `torus.obj`). A moving mesh body's mass properties "
        "come from the closed mesh (its volume, centre of mass and inertia, for `density` or "
        "`mass`); its state is the pose of its centre of mass along its principal axes. It "
        "collides as its convex hull (against planes by the hull's points, against other "
        "bodies as the box that bounds the hull); a flat mesh cannot collide.",
        "scale": '`shape = "mesh"` only: scales the mesh about its origin, one number or one '
        "per axis.",
        "smooth": '`shape = "mesh"` only: shade with interpolated normals (the file\'s `vn`, '
        "else area-weighted vertex normals) instead of flat triangles.",
        "inertia": '`shape = "mesh"` only: principal moments `[Ixx, Iyy, Izz]` (kg m²) about '
        "the mesh's origin and axes, with `mass`, instead of the closed mesh's (an open mesh "
        "needs them).",
    },
    "joints": {
        "name": "Unique name: the key of the joint's overrides.",
        "type": "`hinge` (one rotation), `slider` (one translation), `ball` (three "
        "rotations), `fixed` (a weld).",
        "parent": 'A body name, or `"world"` for a joint to the fixed world.',
        "child": "A body name (not static).",
        "anchor": "The joint's point in world coordinates in the initial configuration (m).",
        "axis": "The hinge or slider axis in world coordinates (normalised when loaded).",
        "limits": "`[lower, upper]` on the joint coordinate (m or rad), lower < upper.",
        "damping": "Viscous damping on the joint coordinate (N·s/m or N·m·s/rad).",
        "motor": "An actuator on a hinge or a slider: a table, see `[joints.motor]` below. "
        "Each motor is one column of the action, in file order.",
        "position": "Start of the joint coordinate q (rad or m; hinges and sliders): the "
        "child's subtree starts this far from the drawn configuration, which stays q = 0.",
        "velocity": "Start of q' (rad/s or m/s; hinges and sliders).",
    },
    "motor": {
        "type": "`force`: the action is the force (N, slider) or torque (N·m, hinge), "
        "clipped to ±`max`. `servo`: the Degrave et al. servo (the action is a target).",
        "max": "Force motors: the largest force or torque (N or N·m) the action is clipped to; "
        "`inf` for none.",
        "gain": "Servo: velocity asked per unit of position error (1/s).",
        "max_torque": "Servo: the largest force or torque it may use.",
        "max_velocity": "Servo: the largest joint velocity it asks for.",
        "target": "Servo: whether the action is a target `position` (m or rad) or a target "
        "`velocity`.",
    },
}

# defaults that no dataclass holds (the loader's own)
SCENE_DEFAULTS = {
    ("world", "coordinates"): '`"auto"` (a `physics.WorldSpec`\'s is `"maximal"`)',
    ("camera", "up"): "`[0, 0, 1]`",
    ("camera", "principal_point"): "the image centre",
    ("camera", "background"): None,  # read from the Scene below
    ("bodies", "color"): None,  # the schema's _DEFAULT_COLOR
    ("bodies", "uv_scale"): "`[1, 1]`",
    ("bodies", "visible"): "`true`",
    ("bodies", "static"): "`false`",
    ("bodies", "quat"): "`[1, 0, 0, 0]`",
}


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float):
        if value == float("inf"):
            return "`inf`"
        return f"`{value:g}`"
    if isinstance(value, int):
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (list, tuple)):
        return "`[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + "]`"
    return f"`{value}`"


def _dataclass_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING and f.default is not None:
            out[f.name] = f.default
    return out


def _defaults() -> dict:
    import physics
    from diffcam import Lighting
    from diffcam.scene import schema

    defaults: dict[tuple[str, str], str] = {}
    for section, cls in (
        ("world", physics.WorldSpec),
        ("bodies", physics.Body),
        ("joints", physics.Joint),
        ("motor", physics.Motor),
        ("light", Lighting),
    ):
        for key, value in _dataclass_defaults(cls).items():
            defaults[(section, key)] = _fmt(value)
    defaults.update({k: v for k, v in SCENE_DEFAULTS.items() if v is not None})
    defaults[("bodies", "color")] = _fmt(list(schema.DEFAULT_COLOR)) + " (grey)"
    defaults[("camera", "background")] = _background_default()
    return defaults


def _background_default() -> str:
    import inspect

    from diffcam.scene import scene

    source = inspect.getsource(scene)
    marker = 'config.camera.get("background", '
    start = source.index(marker) + len(marker)
    return "`" + source[start : source.index("]", start) + 1] + "`"


def _table(section: str, fields: dict, required: tuple, overridable, defaults: dict) -> str:
    describe = DESCRIBE[section]
    missing = [k for k in fields if k not in describe]
    stale = [k for k in describe if k not in fields]
    if missing or stale:
        raise RuntimeError(
            f"docs/_gen/scene_reference.py: section {section!r}: keys without a description "
            f"{missing}, descriptions of keys the schema does not have {stale}"
        )
    rows = ["| key | accepted | default | override | what it is |", "|---|---|---|---|---|"]
    for key, field in fields.items():
        if key == "size":
            accepted = "per shape (below)"
        elif field is None:
            accepted = "a table"
        else:
            accepted = field.accepted.replace("|", "\\|")
        default = "**required**" if key in required else defaults.get((section, key), "—")
        over = "yes" if overridable(key, field) else "—"
        rows.append(f"| `{key}` | {accepted} | {default} | {over} | {describe[key]} |")
    return "\n".join(rows)


def _shape_pairs() -> str:
    from physics.collision_pairs import _pair_kind
    from physics.spec import Body

    shapes = ["sphere", "capsule", "box", "cylinder", "plane"]
    kinds = {
        "plane": "against the plane",
        "segment": "segment–segment",
        "box": "box–box",
        "box_segment": "box–segment",
    }
    rows = ["| | " + " | ".join(shapes) + " |", "|---" * (len(shapes) + 1) + "|"]
    for a in shapes:
        cells = []
        for b in shapes:
            kind = _pair_kind(Body("a", a, 1.0), Body("b", b, 1.0))
            cells.append(kinds[kind[0]] if kind else "—")
        rows.append(f"| **{a}** | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _contact_numbers() -> dict:
    import physics

    world = physics.build_world(
        physics.WorldSpec(bodies=[physics.Body("b", "sphere", 0.1, mass=1.0)]), batch_size=1
    )
    return {
        "threshold": world.restitution_threshold,
        "recovery": world.penetration_recovery,
    }


def _override_paths() -> list[str]:
    from diffcam.scene.overrides import override_paths

    data = {
        "textures": {"<texture>": "x.png"},
        "bodies": [{"name": "<body>"}, {"name": "<static body>", "static": True}],
        "joints": [
            {"name": "<joint>", "motor": {"type": "servo"}},
            {"name": "<forced joint>", "motor": {"type": "force"}},
        ],
    }
    return override_paths(data)


def generate() -> str:
    from diffcam.scene import schema

    defaults = _defaults()
    numeric = lambda key, field: field is not None and field.numeric  # noqa: E731
    paths = _override_paths()
    body_paths = {p.split(".")[2] for p in paths if p.startswith("bodies.<body>.")}
    joint_paths = {
        p.split(".")[2] for p in paths if p.startswith("joints.<joint>.") and p.count(".") == 2
    }
    motor_paths = {p.split(".")[3] for p in paths if p.startswith("joints.<joint>.motor.")}
    camera_paths = {p.split(".")[1] for p in paths if p.startswith("camera.")}
    world_paths = {p.split(".")[1] for p in paths if p.startswith("world.")}
    contact = _contact_numbers()

    out = []
    out.append("## Sections\n")
    out.append(
        "A scene file has the top-level tables "
        + ", ".join(f"`[{k}]`" for k in schema.TOP_LEVEL)
        + " (`[[bodies]]` and `[[joints]]` are arrays of tables). `[camera]` and at least one "
        "`[[bodies]]` are required. Any other key, in any table, is an error that names the "
        "file, the key path and what is accepted.\n"
    )
    out.append("## `[world]`\n")
    out.append(_table("world", schema.WORLD_FIELDS, (), lambda k, f: k in world_paths, defaults))
    out.append("\n## `[camera]`\n")
    out.append(
        "Required: `resolution`, `position`, `look_at`, and a field of view: `fov_y_deg` or "
        "`focal` (not both).\n"
    )
    out.append(
        _table(
            "camera",
            schema.CAMERA_FIELDS,
            ("resolution", "position", "look_at"),
            lambda k, f: k in camera_paths,
            defaults,
        )
    )
    out.append("\n## `[light]`\n")
    out.append(
        "Optional: without a `[light]` table the scene is drawn unlit (each surface its "
        "texture's colour). With one, a missing key takes the default below.\n"
    )
    out.append(_table("light", schema.LIGHT_FIELDS, (), numeric, defaults))
    out.append("\n## `[textures]`\n")
    out.append(
        '`name = "file.png"` pairs. Each name is '
        + schema.NameField.accepted
        + "; each value is "
        + schema.TexturePathField.accepted
        + ". A file is looked for next to the scene file, then in `$DIFFCAM_ASSETS`, then "
        "among the bundled textures (`diffcam/data/textures/`). An override "
        "`textures.<name>` may replace a texture by a (3, Ht, Wt) tensor in [0, 1] (which "
        "may require grad).\n"
    )
    out.append("## `[[bodies]]`\n")
    out.append(
        _table(
            "bodies",
            schema.BODY_FIELDS,
            ("name", "shape", "size"),
            lambda k, f: k in body_paths,
            defaults,
        )
    )
    out.append(
        "\nA static body takes no `mass`, `density`, `velocity` or `angular_velocity` "
        "(nor their overrides).\n"
    )
    out.append("### Shapes and sizes\n")
    out.append("| shape | `size` |\n|---|---|")
    for shape, text in schema.SIZE_ACCEPTED.items():
        out.append(f"| `{shape}` | {text.split(': ', 1)[1]} |")
    out.append(
        "\nA plane collides as the infinite plane through its position whose normal is the "
        "body's +z; its `size` is only the part that is drawn. A capsule's length is that of "
        "its cylindrical part, caps excluded.\n"
    )
    out.append("## `[[joints]]`\n")
    out.append(
        _table(
            "joints",
            schema.JOINT_FIELDS,
            ("name", "type", "parent", "child"),
            lambda k, f: k in joint_paths,
            defaults,
        )
    )
    out.append(
        "\nThe joint coordinate q is measured from the initial configuration: a hinge angle "
        "is right-handed about the axis, a slider displacement is along it.\n"
    )
    out.append("### `[joints.motor]`\n")
    out.append(
        'Written inline: `motor = { type = "force", max = 20.0 }`. A force motor takes only '
        '`type` and `max`; a servo takes every key. A servo with `target = "position"` asks '
        "for the joint velocity `clip(gain × (target − q), ±max_velocity)` and may use at most "
        "`max_torque` to reach it.\n"
    )
    out.append(
        _table("motor", schema.MOTOR_FIELDS, ("type",), lambda k, f: k in motor_paths, defaults)
    )
    out.append("\n## Contact rules\n")
    out.append(
        "What a contact between two bodies does is decided from both bodies' keys:\n\n"
        "- **Friction** is the **geometric mean** of the two bodies' `friction`: "
        "μ = √(μ₁ μ₂) (zero when either is zero). A block of friction 0.3 on a plank of "
        "friction 0.3 slides with μ = 0.3; on a plank of friction 0.5 with μ ≈ 0.39.\n"
        "- **Restitution** is the **larger** of the two bodies' `restitution`: a ball of "
        "restitution 0.7 bounces at 0.7 off a floor of restitution 0 (the floor's 0 does not "
        "damp it), and off a floor of 0.9 at 0.9.\n"
        f"- **No bounce below {contact['threshold']:g} m/s**: restitution acts only on an "
        f"impact whose normal approach speed exceeds {contact['threshold']:g} m/s; a slower "
        "contact is inelastic (so a bouncing ball settles instead of bouncing for ever).\n"
        "- Contacts are speculative: a body that would reach a surface within the step is "
        "stopped at it (nothing tunnels); an overlap is pushed out by "
        f"{contact['recovery']:g} of its depth per step.\n"
        "- Which bodies collide: two bodies joined by a joint never do, two static bodies "
        "never do, a body with `collide = false` never does. Shape pairs:\n"
    )
    out.append(_shape_pairs())
    out.append(
        "\n(*segment* shapes are spheres and capsules, treated as a segment with a radius; a "
        "cylinder collides with planes by its rims and with anything else as a box "
        "`[2r, 2r, length]`.) `diffcam.identify` reports the combined values it fitted under "
        "`contacts` (`<body>/<other>`).\n"
    )
    out.append("## Coordinates\n")
    out.append(
        "The world is right-handed, **z up**, SI units; gravity defaults to −z. Positions, "
        "anchors and axes in the file are world coordinates of the initial configuration; "
        "velocities are world-frame. Angles are radians, except keys ending in `_deg`. "
        "Quaternions are `[w, x, y, z]`. See [the design](../design.md#conventions) for the "
        "camera's and the textures' axes.\n"
    )
    out.append("## Overrides\n")
    out.append(
        "`diffcam.load_scene(file, overrides={path: value})` replaces keys of the file by "
        "numbers or tensors (tensors may require grad, and may carry a batch axis of the "
        "scene's batch size for per-world values); `fit_scene`, `diffcam.identify` and "
        "`diffcam fit --keys` take the same paths. A path that names nothing is an error that "
        "lists the paths near it. These are the paths a scene with a texture `<texture>`, a "
        "moving body `<body>`, a static body `<static body>`, a joint `<joint>` with a servo "
        "and a joint `<forced joint>` with a force motor accepts (generated from "
        "`diffcam.scene.overrides.override_paths`):\n"
    )
    out.append("```text\n" + "\n".join(paths) + "\n```\n")
    out.append(
        "`bodies.<body>.texture` takes a declared texture's name or a (3, Ht, Wt) tensor "
        "for the body to wear. `diffcam.identify` and `diffcam fit` also take one component "
        "of a vector key: `bodies.ball.position[2]`. `fit_scene` also fits the camera's "
        "image formation: `image.gain`, `image.gamma`, `image.distortion`, "
        "`image.exposure`, `image.time_offset` (`diffcam.ImageModel`).\n"
    )
    return "\n".join(out)


if __name__ == "__main__":
    print(generate())
