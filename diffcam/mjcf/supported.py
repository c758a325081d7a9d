"""Which MJCF elements and attributes the importer handles, ignores (with a note) or refuses.

Anything not listed here is refused with an `MJCFError`.
"""

from __future__ import annotations

ORIENTATIONS = ("quat", "axisangle", "euler", "xyaxes", "zaxis")
POSE_ATTRS = ("pos", *ORIENTATIONS)

# Motor transmissions other than a joint (refused by `actuators`).
NON_JOINT_TARGETS = (
    "tendon",
    "site",
    "body",
    "jointinparent",
    "refsite",
    "cranksite",
    "slidersite",
)

# Attributes per element: (handled, ignored). Ignored ones are tuning that does not apply or is
# cosmetic; "handled" includes those that are read only to refuse a non-default value.
ELEMENT_ATTRS = {
    "body": ({"name", "childclass", "mocap", "gravcomp", *POSE_ATTRS}, {"user"}),
    "frame": ({"name", "childclass", *POSE_ATTRS}, set()),
    "geom": (
        {
            "name",
            "class",
            "type",
            "size",
            "fromto",
            "mass",
            "density",
            "rgba",
            "material",
            "contype",
            "conaffinity",
            "friction",
            "mesh",
            "hfield",
            "shellinertia",
            "fluidshape",
            *POSE_ATTRS,
        },
        {
            "group",
            "condim",
            "priority",
            "solmix",
            "solref",
            "solimp",
            "margin",
            "gap",
            "user",
            "fitscale",
            "fluidcoef",
        },
    ),  # fmt: skip
    "joint": (
        {
            "name",
            "class",
            "type",
            "pos",
            "axis",
            "range",
            "limited",
            "damping",
            "armature",
            "stiffness",
            "springref",
            "ref",
            "frictionloss",
            "springdamper",
            "actuatorfrclimited",
            "actuatorfrcrange",
        },
        {
            "group",
            "user",
            "margin",
            "solreflimit",
            "solimplimit",
            "solreffriction",
            "solimpfriction",
            "actuatorgravcomp",
        },
    ),  # fmt: skip
    "freejoint": ({"name", "align"}, {"group"}),
    "camera": (
        {"name", "class", "mode", "target", "fovy", "resolution", *POSE_ATTRS},
        {"ipd", "user", "focal", "focalpixel", "principal", "principalpixel", "sensorsize"},
    ),
    "motor": (
        {
            "name",
            "class",
            "joint",
            "gear",
            "ctrlrange",
            "ctrllimited",
            "forcerange",
            "forcelimited",
            *NON_JOINT_TARGETS,
        },
        {"group", "user", "actearly", "lengthrange", "cranklength"},
    ),  # fmt: skip
    # vertex, face, normal, texcoord, builtin, params, refpos, refquat, content_type and
    # inertia="shell" are read to be refused (diffcam.mjcf.meshes)
    "mesh": (
        {
            "name",
            "class",
            "file",
            "scale",
            "inertia",
            "vertex",
            "face",
            "normal",
            "texcoord",
            "builtin",
            "params",
            "refpos",
            "refquat",
            "content_type",
        },
        {"smoothnormal", "maxhullvert", "material"},
    ),
    "inertial": (
        {
            "pos",
            "quat",
            "axisangle",
            "euler",
            "xyaxes",
            "zaxis",
            "mass",
            "diaginertia",
            "fullinertia",
        },
        set(),
    ),  # fmt: skip
}

# The sections under <mujoco>.
TOP_LEVEL_ELEMENTS = {
    "compiler", "option", "default", "worldbody", "actuator", "asset", "size", "visual",
    "statistic", "custom", "sensor", "keyframe", "contact",
}  # fmt: skip
IGNORED_TOP_LEVEL = {
    "size": "memory sizes",
    "visual": "visualisation settings",
    "statistic": "model statistics for the viewer",
    "custom": "custom numeric/text data",
    "sensor": "sensors (they do not change the dynamics)",
    "keyframe": "keyframes (the scene starts at qpos = 0; set joint positions with overrides)",
}
UNSUPPORTED_TOP_LEVEL = {
    "tendon": "tendons",
    "equality": "equality constraints (use a joint between the bodies instead)",
    "include": "<include> (merge the included file into one MJCF file)",
    "deformable": "deformable objects",
    "extension": "plugins",
    "plugin": "plugins",
}

COMPILER_ATTRS = {
    "angle", "eulerseq", "inertiafromgeom", "coordinate", "autolimits", "settotalmass",
    "boundmass", "boundinertia", "balanceinertia", "meshdir", "texturedir", "assetdir",
    "discardvisual", "fusestatic", "strippath", "inertiagrouprange", "usethread", "alignfree",
    "convexhull", "exactmeshinertia", "saveinertial", "fitaabb", "modelfiledir",
}  # fmt: skip
OPTION_ATTRS = {"timestep", "gravity", "integrator", "wind", "density", "viscosity"}
IGNORED_OPTION_ATTRS = {
    "impratio", "tolerance", "ls_tolerance", "noslip_tolerance", "ccd_tolerance", "iterations",
    "ls_iterations", "noslip_iterations", "ccd_iterations", "sdf_iterations", "sdf_initpoints",
    "cone", "jacobian", "solver", "o_margin", "o_solref", "o_solimp", "o_friction",
    "apirate", "collision", "magnetic", "actuatorgroupdisable", "sleep_tolerance",
}  # fmt: skip
