"""Independent reference solutions for testing the rigid-body physics engine.

Everything here is plain numpy/scipy, derived by hand from a Lagrangian and integrated with
``scipy.integrate.solve_ivp(method="DOP853", rtol=1e-10, atol=1e-12)``. Nothing in this module
imports the engine, so it can serve as ground truth for it.

Conventions shared by every function (SI units throughout):

* World frame: z up, gravity ``(0, 0, -g)``.
* Planar hinge angles are rotations about world **+y** (right-handed), with ``theta = 0`` meaning
  the body hangs straight down. ``R_y(theta) @ (0, 0, -1) = (-sin theta, 0, -cos theta)``, so a
  point at distance ``d`` down the body sits at ``pivot + (-d sin theta, 0, -d cos theta)``.
  A positive ``theta`` therefore swings the body toward **-x**.
* Time arrays ``t``: the initial state is given at ``t = 0``; ``t`` must be non-negative and
  non-decreasing (it may or may not contain 0). Outputs are sampled at exactly these times.
* Potential energy is measured from the height of the (first) pivot, so a hanging body has
  negative potential energy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.integrate import solve_ivp

RTOL = 1e-10
ATOL = 1e-12

__all__ = [
    "RTOL",
    "ATOL",
    "hinge_offset",
    "physical_pendulum",
    "physical_pendulum_energy",
    "small_angle_period",
    "cart_pole",
    "cart_pole_energy",
    "cart_pole_momentum_x",
    "double_pendulum",
    "double_pendulum_energy",
    "bouncing_ball_apexes",
    "bouncing_ball_impact_times",
    "sliding_box_distance",
]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _as_times(t) -> np.ndarray:
    t = np.atleast_1d(np.asarray(t, dtype=float))
    if t.ndim != 1:
        raise ValueError("t must be a scalar or a 1-D array of times")
    if np.any(t < 0.0):
        raise ValueError("times must be >= 0 (the initial state is given at t = 0)")
    if np.any(np.diff(t) < 0.0):
        raise ValueError("times must be non-decreasing")
    return t


def _integrate(rhs: Callable, y0, t) -> np.ndarray:
    """Integrate ``y' = rhs(t, y)`` from ``t = 0`` and return states at ``t``, shape (n, len(t))."""
    t = _as_times(t)
    y0 = np.asarray(y0, dtype=float)
    out = np.empty((y0.size, t.size))
    if t.size == 0:
        return out
    t_end = float(t[-1])
    if t_end == 0.0:
        out[:] = y0[:, None]
        return out
    sol = solve_ivp(
        rhs,
        (0.0, t_end),
        y0,
        method="DOP853",
        rtol=RTOL,
        atol=ATOL,
        t_eval=t,
    )
    if not sol.success:  # pragma: no cover - only on pathological inputs
        raise RuntimeError(f"solve_ivp failed: {sol.message}")
    return sol.y


def hinge_offset(theta, distance) -> np.ndarray:
    """World offset ``R_y(theta) @ (0, 0, -distance)`` = ``(-d sin theta, 0, -d cos theta)``.

    Vectorised over ``theta``; returns shape ``theta.shape + (3,)``.
    """
    theta = np.asarray(theta, dtype=float)
    return np.stack(
        [-distance * np.sin(theta), np.zeros_like(theta), -distance * np.cos(theta)], axis=-1
    )


# --------------------------------------------------------------------------------------------
# 1. physical (compound) pendulum
# --------------------------------------------------------------------------------------------


def physical_pendulum(
    theta0: float,
    omega0: float,
    t,
    *,
    mass: float,
    com_distance: float,
    inertia_com: float,
    gravity: float = 9.81,
    damping: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Rigid body on a frictionless hinge about world +y; returns ``(theta(t), omega(t))``.

    Derivation. With the pivot at the origin the COM is at ``(-d sin th, 0, -d cos th)`` and the
    body's angular velocity is ``omega = th'`` about +y. Kinetic energy (König / parallel axis)
    ``T = 1/2 m d^2 th'^2 + 1/2 I_c th'^2 = 1/2 I_p th'^2`` with ``I_p = I_c + m d^2``; potential
    ``V = m g z_com = -m g d cos th``. The viscous hinge torque ``-c th'`` is the generalised
    force, so Euler-Lagrange gives

        I_p th'' = -m g d sin th - c th'.

    ``inertia_com`` is the moment of inertia about the COM around the hinge axis.
    """
    i_pivot = inertia_com + mass * com_distance**2
    if i_pivot <= 0.0:
        raise ValueError("inertia about the pivot must be positive")
    k = mass * gravity * com_distance

    def rhs(_t, y):
        th, om = y
        return [om, (-k * np.sin(th) - damping * om) / i_pivot]

    y = _integrate(rhs, [theta0, omega0], t)
    return y[0], y[1]


def physical_pendulum_energy(
    theta,
    omega,
    *,
    mass: float,
    com_distance: float,
    inertia_com: float,
    gravity: float = 9.81,
) -> np.ndarray:
    """``E = 1/2 (I_c + m d^2) omega^2 - m g d cos theta`` (zero potential at pivot height)."""
    theta = np.asarray(theta, dtype=float)
    omega = np.asarray(omega, dtype=float)
    i_pivot = inertia_com + mass * com_distance**2
    return 0.5 * i_pivot * omega**2 - mass * gravity * com_distance * np.cos(theta)


def small_angle_period(
    mass: float, com_distance: float, inertia_com: float, gravity: float = 9.81
) -> float:
    """Linearised period ``2 pi sqrt(I_p / (m g d))`` with ``I_p = I_c + m d^2``."""
    i_pivot = inertia_com + mass * com_distance**2
    return float(2.0 * np.pi * np.sqrt(i_pivot / (mass * gravity * com_distance)))


# --------------------------------------------------------------------------------------------
# 2. cart-pole
# --------------------------------------------------------------------------------------------


def _cart_pole_accel(th, xd, thd, f, *, M, m, d, i_pivot, g, c_x, c_th) -> tuple[float, float]:
    s, c = np.sin(th), np.cos(th)
    # [ M+m        -m d c ] [x''ddot ]   [ F - c_x x' - m d s th'^2 ]
    # [ -m d c      I_p   ] [th''    ] = [ -m g d s - c_th th'        ]
    a11, a12, a22 = M + m, -m * d * c, i_pivot
    b1 = f - c_x * xd - m * d * s * thd**2
    b2 = -m * g * d * s - c_th * thd
    det = a11 * a22 - a12 * a12
    if det <= 0.0:
        raise ValueError("cart-pole mass matrix is singular (need pole inertia about pivot > 0)")
    xdd = (a22 * b1 - a12 * b2) / det
    thdd = (a11 * b2 - a12 * b1) / det
    return xdd, thdd


def cart_pole(
    x0: float,
    theta0: float,
    xdot0: float,
    thetadot0: float,
    t,
    *,
    cart_mass: float,
    pole_mass: float,
    com_distance: float,
    pole_inertia_com: float,
    gravity: float = 9.81,
    force: Callable[[float], float] | None = None,
    slider_damping: float = 0.0,
    hinge_damping: float = 0.0,
) -> dict[str, np.ndarray]:
    """Cart on a +x slider with a pole hinged at the cart centre about world +y.

    Returns ``{"t", "x", "theta", "xdot", "thetadot"}`` sampled at ``t``.

    Geometry: the pivot is at ``(x, 0, z_pivot)``; ``theta`` is the pole's rotation about +y,
    ``theta = 0`` hanging down, so the pole COM is at ``(x - d sin th, 0, z_pivot - d cos th)``
    (positive theta swings the COM toward -x; the upright pole is ``theta = pi``).

    Derivation. COM velocity ``(x' - d cos th th', 0, d sin th th')``, pole angular velocity
    ``th'`` about +y, cart translates only:

        T = 1/2 (M + m) x'^2 - m d cos th x' th' + 1/2 I_p th'^2,   I_p = I_c + m d^2
        V = -m g d cos th   (+ const)

    Generalised forces: ``Q_x = F(t) - c_x x'``; the hinge torque ``-c_th th'`` acts on the
    pole and its reaction on the cart does no virtual work (the cart cannot rotate), so
    ``Q_th = -c_th th'``. Euler-Lagrange:

        (M + m) x'' - m d cos th th'' + m d sin th th'^2 = F - c_x x'
        -m d cos th x'' + I_p th''                     = -m g d sin th - c_th th'

    With ``F = c_x = 0`` the momentum ``dL/dx' = (M+m) x' - m d cos th th'`` is conserved;
    it equals ``(M + m) * d/dt x_com``.

    ``force`` is ``None`` (zero) or a callable ``f(t)`` (N along +x). For discontinuous forces
    the integrator still works but accuracy near jumps is reduced.
    """
    M, m, d = float(cart_mass), float(pole_mass), float(com_distance)
    i_pivot = pole_inertia_com + m * d**2
    fn = force if force is not None else (lambda _t: 0.0)

    def rhs(tt, y):
        _x, th, xd, thd = y
        xdd, thdd = _cart_pole_accel(
            th,
            xd,
            thd,
            float(fn(tt)),
            M=M,
            m=m,
            d=d,
            i_pivot=i_pivot,
            g=gravity,
            c_x=slider_damping,
            c_th=hinge_damping,
        )
        return [xd, thd, xdd, thdd]

    tt = _as_times(t)
    y = _integrate(rhs, [x0, theta0, xdot0, thetadot0], tt)
    return {"t": tt, "x": y[0], "theta": y[1], "xdot": y[2], "thetadot": y[3]}


def cart_pole_energy(
    x,
    theta,
    xdot,
    thetadot,
    *,
    cart_mass: float,
    pole_mass: float,
    com_distance: float,
    pole_inertia_com: float,
    gravity: float = 9.81,
) -> np.ndarray:
    """``T + V`` of the cart-pole (potential zero at pivot height; ``x`` is unused)."""
    del x
    theta = np.asarray(theta, dtype=float)
    xdot = np.asarray(xdot, dtype=float)
    thetadot = np.asarray(thetadot, dtype=float)
    m, d = pole_mass, com_distance
    i_pivot = pole_inertia_com + m * d**2
    kin = (
        0.5 * (cart_mass + m) * xdot**2
        - m * d * np.cos(theta) * xdot * thetadot
        + 0.5 * i_pivot * thetadot**2
    )
    return kin - m * gravity * d * np.cos(theta)


def cart_pole_momentum_x(
    theta, xdot, thetadot, *, cart_mass: float, pole_mass: float, com_distance: float
) -> np.ndarray:
    """Total linear momentum along x: ``M x' + m (x' - d cos th th')``."""
    theta = np.asarray(theta, dtype=float)
    xdot = np.asarray(xdot, dtype=float)
    thetadot = np.asarray(thetadot, dtype=float)
    return (cart_mass + pole_mass) * xdot - pole_mass * com_distance * np.cos(theta) * thetadot


# --------------------------------------------------------------------------------------------
# 3. double compound pendulum
# --------------------------------------------------------------------------------------------


def _double_pendulum_terms(m1, m2, d1, d2, l1, i1, i2, g):
    a = i1 + m1 * d1**2 + m2 * l1**2
    b = i2 + m2 * d2**2
    c = m2 * l1 * d2
    k1 = (m1 * d1 + m2 * l1) * g
    k2 = m2 * d2 * g
    return a, b, c, k1, k2


def double_pendulum(
    theta1_0: float,
    theta2_0: float,
    omega1_0: float,
    omega2_0: float,
    t,
    *,
    m1: float,
    m2: float,
    d1: float,
    d2: float,
    l1: float,
    i1: float,
    i2: float,
    gravity: float = 9.81,
) -> dict[str, np.ndarray]:
    """Two rigid bodies in the x-z plane, hinged about world +y; absolute angles.

    Returns ``{"t", "theta1", "theta2", "omega1", "omega2"}``. Body 1 is hinged to the world
    at the origin; body 2 is hinged to body 1 at ``p2 = l1 * (-sin th1, 0, -cos th1)``. Both
    angles are absolute (measured from hanging down, rotation about +y), so

        com1 = d1 (-sin th1, 0, -cos th1),   com2 = p2 + d2 (-sin th2, 0, -cos th2).

    ``d1, d2`` are COM distances from each body's own pivot, ``i1, i2`` inertias about the COMs
    around the hinge axis.

    Derivation. ``|v_com1|^2 = d1^2 w1^2``; ``|v_com2|^2 = l1^2 w1^2 + d2^2 w2^2
    + 2 l1 d2 cos(th1 - th2) w1 w2``. With ``A = i1 + m1 d1^2 + m2 l1^2``, ``B = i2 + m2 d2^2``,
    ``C = m2 l1 d2``:

        T = 1/2 A w1^2 + 1/2 B w2^2 + C cos(th1 - th2) w1 w2
        V = -(m1 d1 + m2 l1) g cos th1 - m2 d2 g cos th2

    Euler-Lagrange (``D = th1 - th2``):

        A th1'' + C cos D th2'' = -C sin D w2^2 - (m1 d1 + m2 l1) g sin th1
        C cos D th1'' + B th2'' =  C sin D w1^2 - m2 d2 g sin th2
    """
    a, b, c, k1, k2 = _double_pendulum_terms(m1, m2, d1, d2, l1, i1, i2, gravity)

    def rhs(_t, y):
        th1, th2, w1, w2 = y
        dd = th1 - th2
        cd, sd = np.cos(dd), np.sin(dd)
        r1 = -c * sd * w2**2 - k1 * np.sin(th1)
        r2 = c * sd * w1**2 - k2 * np.sin(th2)
        a12 = c * cd
        det = a * b - a12 * a12
        if det <= 0.0:
            raise ValueError("double-pendulum mass matrix is singular")
        return [w1, w2, (b * r1 - a12 * r2) / det, (a * r2 - a12 * r1) / det]

    tt = _as_times(t)
    y = _integrate(rhs, [theta1_0, theta2_0, omega1_0, omega2_0], tt)
    return {"t": tt, "theta1": y[0], "theta2": y[1], "omega1": y[2], "omega2": y[3]}


def double_pendulum_energy(
    theta1,
    theta2,
    omega1,
    omega2,
    *,
    m1: float,
    m2: float,
    d1: float,
    d2: float,
    l1: float,
    i1: float,
    i2: float,
    gravity: float = 9.81,
) -> np.ndarray:
    """``T + V`` of :func:`double_pendulum` (potential zero at the first pivot's height)."""
    th1, th2 = np.asarray(theta1, dtype=float), np.asarray(theta2, dtype=float)
    w1, w2 = np.asarray(omega1, dtype=float), np.asarray(omega2, dtype=float)
    a, b, c, k1, k2 = _double_pendulum_terms(m1, m2, d1, d2, l1, i1, i2, gravity)
    kin = 0.5 * a * w1**2 + 0.5 * b * w2**2 + c * np.cos(th1 - th2) * w1 * w2
    return kin - k1 * np.cos(th1) - k2 * np.cos(th2)


# --------------------------------------------------------------------------------------------
# 4. bouncing ball, 5. sliding box (closed form)
# --------------------------------------------------------------------------------------------


def bouncing_ball_apexes(
    h0: float, restitution: float, gravity: float = 9.81, *, n: int = 5
) -> np.ndarray:
    """Apex heights ``h_k = h0 * e^(2k)`` for ``k = 0 .. n`` (length ``n + 1``).

    ``h_0 = h0`` is the release height (ball dropped from rest); ``h_k`` is the apex after the
    k-th bounce. Derivation: impact speed ``v = sqrt(2 g h)``, rebound speed ``e v``, new apex
    ``(e v)^2 / (2 g) = e^2 h``. Heights are of the ball's lowest point above the floor (i.e.
    of the centre above its resting height). ``gravity`` does not affect the result.
    """
    del gravity
    if n < 0:
        raise ValueError("n must be >= 0")
    k = np.arange(n + 1, dtype=float)
    return float(h0) * float(restitution) ** (2.0 * k)


def bouncing_ball_impact_times(
    h0: float, restitution: float, gravity: float = 9.81, *, n: int = 5
) -> np.ndarray:
    """Times of the first ``n`` floor impacts for a ball dropped from rest at height ``h0``.

    ``t_1 = sqrt(2 h0 / g)``; after impact k the rebound speed is ``e^k sqrt(2 g h0)`` and the
    flight lasts ``2 e^k sqrt(2 h0 / g)``, so ``t_{k+1} = t_k + 2 e^k t_1``.
    """
    t1 = np.sqrt(2.0 * h0 / gravity)
    k = np.arange(n, dtype=float)
    flights = np.concatenate([[t1], 2.0 * restitution ** k[1:] * t1])
    return np.cumsum(flights)


def sliding_box_distance(v0: float, mu: float, gravity: float = 9.81) -> tuple[float, float]:
    """Stopping ``(distance, time)`` of a box sliding on a flat floor with Coulomb friction.

    Deceleration ``mu g`` while sliding, so ``s = v0^2 / (2 mu g)`` and ``t = v0 / (mu g)``.
    """
    v0 = abs(float(v0))
    decel = mu * gravity
    if decel <= 0.0:
        raise ValueError("mu * gravity must be positive")
    return v0**2 / (2.0 * decel), v0 / decel


def free_rigid_body(moments, spin, times) -> tuple[np.ndarray, np.ndarray]:
    """A torque-free rigid body: Euler's equations and the rotation's kinematics.

    Args:
        moments: (3,) principal moments of inertia (kg m^2), body frame.
        spin: (3,) angular velocity at t = 0 (rad/s); the rotation at t = 0 is the identity.
        times: (T,) seconds at which to report.

    Returns:
        rotations (T, 3, 3) and world-frame angular velocities (T, 3) (rad/s).
    """
    moments = np.asarray(moments, dtype=float)

    def rates(_, y):
        rotation, body_spin = y[:9].reshape(3, 3), y[9:]
        wx, wy, wz = rotation @ body_spin
        skew = np.array([[0.0, -wz, wy], [wz, 0.0, -wx], [-wy, wx, 0.0]])
        body_spin_rate = -np.cross(body_spin, moments * body_spin) / moments
        return np.concatenate([(skew @ rotation).ravel(), body_spin_rate])

    y = _integrate(rates, np.concatenate([np.eye(3).ravel(), np.asarray(spin, float)]), times)
    rotations = y[:9].T.reshape(-1, 3, 3)
    return rotations, np.einsum("tij,tj->ti", rotations, y[9:].T)
