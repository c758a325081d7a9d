"""Self-checks of ``tests.physics.reference`` against independent physics.

Each reference solution is checked against something it was not built from: conserved
quantities, closed-form limits, an independently written textbook ODE, or an event-driven
simulation. These tests do not touch the engine.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import simpson, solve_ivp
from scipy.spatial.transform import Rotation
from scipy.special import ellipk

from tests.physics.reference import (
    bouncing_ball_apexes,
    bouncing_ball_impact_times,
    cart_pole,
    cart_pole_energy,
    cart_pole_momentum_x,
    double_pendulum,
    double_pendulum_energy,
    hinge_offset,
    physical_pendulum,
    physical_pendulum_energy,
    sliding_box_distance,
    small_angle_period,
)

G = 9.81

# A uniform rod of length 0.8 m hinged at one end, plus some extra COM inertia: generic body.
PEND = dict(mass=1.3, com_distance=0.4, inertia_com=1.3 * 0.8**2 / 12 + 0.01)
CART = dict(cart_mass=2.0, pole_mass=0.7, com_distance=0.5, pole_inertia_com=0.7 * 1.0**2 / 12)
DOUBLE = dict(m1=1.0, m2=0.6, d1=0.3, d2=0.25, l1=0.6, i1=0.03, i2=0.0125)


def _zero_crossings(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Times of sign changes of ``y`` (linear interpolation between samples)."""
    idx = np.nonzero(np.sign(y[:-1]) * np.sign(y[1:]) < 0)[0]
    return t[idx] - y[idx] * (t[idx + 1] - t[idx]) / (y[idx + 1] - y[idx])


def _period_from_crossings(t: np.ndarray, y: np.ndarray) -> float:
    tc = _zero_crossings(t, y)
    assert tc.size >= 5
    # successive zero crossings are half a period apart
    return 2.0 * (tc[-1] - tc[0]) / (tc.size - 1)


# --------------------------------------------------------------------------------------------
# sign conventions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("theta", [-2.5, -0.3, 0.0, 0.7, np.pi / 2, 3.0])
def test_hinge_offset_matches_rotation_about_plus_y(theta):
    expected = Rotation.from_rotvec([0.0, theta, 0.0]).apply([0.0, 0.0, -0.9])
    np.testing.assert_allclose(hinge_offset(theta, 0.9), expected, atol=1e-15)


def test_pendulum_positive_angle_is_restored():
    t = np.array([0.0, 0.01])
    theta, omega = physical_pendulum(0.3, 0.0, t, **PEND)
    assert omega[1] < 0.0 and theta[1] < 0.3
    theta, omega = physical_pendulum(-0.3, 0.0, t, **PEND)
    assert omega[1] > 0.0


def test_cart_pole_pushed_cart_leaves_pole_behind():
    # Push the cart along +x from rest: the cart accelerates +x and the pole COM lags toward -x,
    # i.e. theta becomes positive (COM offset x = -d sin theta < 0).
    out = cart_pole(0.0, 0.0, 0.0, 0.0, [0.0, 0.05], force=lambda _t: 5.0, **CART)
    assert out["xdot"][1] > 0.0
    assert out["theta"][1] > 0.0
    com_dx = hinge_offset(out["theta"][1], CART["com_distance"])[0]
    assert com_dx < 0.0


# --------------------------------------------------------------------------------------------
# 1. physical pendulum
# --------------------------------------------------------------------------------------------


def test_pendulum_energy_conserved():
    t = np.linspace(0.0, 10.0, 2001)
    theta, omega = physical_pendulum(2.0, 1.5, t, **PEND)
    e = physical_pendulum_energy(theta, omega, **PEND)
    scale = PEND["mass"] * G * PEND["com_distance"]
    assert np.max(np.abs(e - e[0])) / scale < 1e-8
    assert np.ptp(theta) > 1.0  # really swung


def test_pendulum_small_angle_period_from_zero_crossings():
    period = small_angle_period(**PEND, gravity=G)
    t = np.arange(0.0, 6.0 * period, 1e-3)
    theta, _ = physical_pendulum(1e-3, 0.0, t, **PEND)
    measured = _period_from_crossings(t, theta)
    # finite-amplitude correction is ~ theta0^2 / 16 = 6e-8
    assert measured == pytest.approx(period, rel=1e-6)


def test_pendulum_large_amplitude_period_matches_elliptic_integral():
    theta0 = 2.5
    i_pivot = PEND["inertia_com"] + PEND["mass"] * PEND["com_distance"] ** 2
    omega_n = np.sqrt(PEND["mass"] * G * PEND["com_distance"] / i_pivot)
    exact = 4.0 / omega_n * ellipk(np.sin(theta0 / 2.0) ** 2)
    t = np.arange(0.0, 4.5 * exact, 2e-4)
    theta, _ = physical_pendulum(theta0, 0.0, t, **PEND)
    assert _period_from_crossings(t, theta) == pytest.approx(exact, rel=1e-7)
    assert exact > 1.5 * small_angle_period(**PEND)  # non-trivial anharmonic regime


def test_damped_pendulum_small_angle_matches_linear_oscillator():
    c = 0.05
    theta0, omega0 = 1e-4, -2e-4
    i_pivot = PEND["inertia_com"] + PEND["mass"] * PEND["com_distance"] ** 2
    w0 = np.sqrt(PEND["mass"] * G * PEND["com_distance"] / i_pivot)
    zeta = c / (2.0 * i_pivot * w0)
    wd = w0 * np.sqrt(1.0 - zeta**2)
    t = np.linspace(0.0, 8.0, 801)
    theta, _ = physical_pendulum(theta0, omega0, t, **PEND, damping=c)
    b = (omega0 + zeta * w0 * theta0) / wd
    lin = np.exp(-zeta * w0 * t) * (theta0 * np.cos(wd * t) + b * np.sin(wd * t))
    assert np.max(np.abs(theta - lin)) < 1e-6 * theta0
    assert abs(theta[-1]) < 0.5 * np.max(np.abs(theta))  # visibly decayed, zeta ~ 0.02


def test_damped_pendulum_energy_balance():
    c = 0.2
    t = np.linspace(0.0, 4.0, 4001)
    theta, omega = physical_pendulum(1.2, 0.0, t, **PEND, damping=c)
    e = physical_pendulum_energy(theta, omega, **PEND)
    dissipated = simpson(c * omega**2, x=t)
    assert dissipated > 0.1 * abs(e[0])
    assert e[-1] - e[0] == pytest.approx(-dissipated, rel=1e-8)


# --------------------------------------------------------------------------------------------
# 2. cart-pole
# --------------------------------------------------------------------------------------------


def test_cart_pole_energy_conserved():
    t = np.linspace(0.0, 10.0, 2001)
    out = cart_pole(0.1, 2.5, 0.4, -1.0, t, **CART)
    e = cart_pole_energy(out["x"], out["theta"], out["xdot"], out["thetadot"], **CART)
    scale = CART["pole_mass"] * G * CART["com_distance"]
    assert np.max(np.abs(e - e[0])) / scale < 1e-8
    assert np.ptp(out["x"]) > 0.05  # the cart really moved


def test_cart_pole_horizontal_momentum_conserved_and_com_drifts_uniformly():
    M, m, d = CART["cart_mass"], CART["pole_mass"], CART["com_distance"]
    x0, th0, xd0, thd0 = -0.2, 1.9, 0.3, 2.0
    t = np.linspace(0.0, 8.0, 1601)
    out = cart_pole(x0, th0, xd0, thd0, t, **CART)
    # Momentum from first principles at t=0: cart M*xd0, pole COM velocity xd0 - d cos th0 thd0.
    p0 = M * xd0 + m * (xd0 - d * np.cos(th0) * thd0)
    p = cart_pole_momentum_x(
        out["theta"], out["xdot"], out["thetadot"], cart_mass=M, pole_mass=m, com_distance=d
    )
    np.testing.assert_allclose(p, p0, rtol=0, atol=1e-8 * max(abs(p0), 1.0))
    # x_com from the geometry only: it must move at constant velocity p0 / (M + m).
    x_com = (M * out["x"] + m * (out["x"] - d * np.sin(out["theta"]))) / (M + m)
    expected = x_com[0] + p0 / (M + m) * t
    np.testing.assert_allclose(x_com, expected, rtol=0, atol=1e-8)
    assert np.ptp(out["x"] - expected) > 0.05  # the cart itself does not move uniformly


def test_cart_pole_massless_pole_limit():
    # With a (nearly) massless pole the cart obeys x'' = F / M exactly, and the pole, being a
    # pendulum in a frame accelerating at a, rests at tan(theta) = a / g if started there.
    M, F = 3.0, 4.5
    eps = 1e-12
    a = F / M
    theta_eq = np.arctan2(a, G)
    t = np.linspace(0.0, 3.0, 301)
    out = cart_pole(
        0.5,
        theta_eq,
        -0.7,
        0.0,
        t,
        cart_mass=M,
        pole_mass=eps,
        com_distance=0.6,
        pole_inertia_com=eps * 0.05,
        force=lambda _t: F,
    )
    np.testing.assert_allclose(out["x"], 0.5 - 0.7 * t + 0.5 * a * t**2, rtol=0, atol=1e-9)
    np.testing.assert_allclose(out["xdot"], -0.7 + a * t, rtol=0, atol=1e-9)
    np.testing.assert_allclose(out["theta"], theta_eq, rtol=0, atol=1e-8)


def test_cart_pole_massless_pole_swings_like_pendulum_in_accelerating_frame():
    # Small oscillation about tan(theta) = a/g has effective gravity sqrt(g^2 + a^2).
    M, F, d, eps = 3.0, 4.5, 0.6, 1e-12
    ic_ratio = 0.05  # I_c / m
    a = F / M
    theta_eq = np.arctan2(a, G)
    g_eff = np.hypot(G, a)
    period = 2 * np.pi * np.sqrt((ic_ratio + d**2) / (g_eff * d))
    t = np.arange(0.0, 6.0 * period, 1e-3)
    out = cart_pole(
        0.0,
        theta_eq + 1e-3,
        0.0,
        0.0,
        t,
        cart_mass=M,
        pole_mass=eps,
        com_distance=d,
        pole_inertia_com=eps * ic_ratio,
        force=lambda _t: F,
    )
    assert _period_from_crossings(t, out["theta"] - theta_eq) == pytest.approx(period, rel=1e-6)


def test_cart_pole_constant_force_coaccelerating_equilibrium():
    # Finite pole mass: the rigidly co-accelerating state a = F/(M+m), tan(theta) = a/g is exact.
    F = 6.0
    a = F / (CART["cart_mass"] + CART["pole_mass"])
    theta_eq = np.arctan2(a, G)
    t = np.linspace(0.0, 3.0, 61)
    out = cart_pole(0.0, theta_eq, 0.0, 0.0, t, force=lambda _t: F, **CART)
    np.testing.assert_allclose(out["theta"], theta_eq, rtol=0, atol=1e-8)
    np.testing.assert_allclose(out["x"], 0.5 * a * t**2, rtol=1e-8, atol=1e-10)
    # and a slightly different angle does not stay put (the check above can fail)
    off = cart_pole(0.0, theta_eq + 0.05, 0.0, 0.0, t, force=lambda _t: F, **CART)
    assert np.max(np.abs(off["theta"] - theta_eq)) > 0.04


def test_cart_pole_with_held_cart_is_physical_pendulum():
    t = np.linspace(0.0, 6.0, 601)
    theta0, omega0 = 2.2, -0.5
    out = cart_pole(
        0.0,
        theta0,
        0.0,
        omega0,
        t,
        cart_mass=1e12,
        pole_mass=PEND["mass"],
        com_distance=PEND["com_distance"],
        pole_inertia_com=PEND["inertia_com"],
    )
    theta, omega = physical_pendulum(theta0, omega0, t, **PEND)
    np.testing.assert_allclose(out["theta"], theta, rtol=0, atol=1e-8)
    np.testing.assert_allclose(out["thetadot"], omega, rtol=0, atol=1e-8)
    assert np.max(np.abs(out["x"])) < 1e-9


def test_cart_pole_held_cart_with_hinge_damping_is_damped_pendulum():
    t = np.linspace(0.0, 4.0, 401)
    c = 0.15
    out = cart_pole(
        0.0,
        1.0,
        0.0,
        0.0,
        t,
        cart_mass=1e12,
        pole_mass=PEND["mass"],
        com_distance=PEND["com_distance"],
        pole_inertia_com=PEND["inertia_com"],
        hinge_damping=c,
    )
    theta, _ = physical_pendulum(1.0, 0.0, t, **PEND, damping=c)
    np.testing.assert_allclose(out["theta"], theta, rtol=0, atol=1e-8)


def test_cart_pole_work_energy_balance_with_force_and_damping():
    # dE/dt = F xdot - c_x xdot^2 - c_th thetadot^2 (power of the generalised forces)
    cx, cth = 0.4, 0.08

    def force(tt):
        return 3.0 * np.sin(2.0 * tt)

    t = np.linspace(0.0, 5.0, 5001)
    out = cart_pole(
        0.0,
        0.5,
        0.0,
        1.0,
        t,
        force=force,
        slider_damping=cx,
        hinge_damping=cth,
        **CART,
    )
    e = cart_pole_energy(out["x"], out["theta"], out["xdot"], out["thetadot"], **CART)
    power = force(t) * out["xdot"] - cx * out["xdot"] ** 2 - cth * out["thetadot"] ** 2
    work = simpson(power, x=t)
    assert abs(work) > 0.05
    assert e[-1] - e[0] == pytest.approx(work, rel=1e-7, abs=1e-9)


def test_cart_pole_slider_damping_kills_momentum():
    t = np.linspace(0.0, 20.0, 201)
    out = cart_pole(0.0, 0.3, 1.0, 0.0, t, slider_damping=2.0, hinge_damping=0.5, **CART)
    p = cart_pole_momentum_x(
        out["theta"],
        out["xdot"],
        out["thetadot"],
        cart_mass=CART["cart_mass"],
        pole_mass=CART["pole_mass"],
        com_distance=CART["com_distance"],
    )
    assert abs(p[0]) > 2.0 and abs(p[-1]) < 1e-3


# --------------------------------------------------------------------------------------------
# 3. double pendulum
# --------------------------------------------------------------------------------------------


def test_double_pendulum_energy_conserved_chaotic():
    t = np.linspace(0.0, 10.0, 2001)
    out = double_pendulum(2.0, -1.0, 0.5, 3.0, t, **DOUBLE)
    e = double_pendulum_energy(out["theta1"], out["theta2"], out["omega1"], out["omega2"], **DOUBLE)
    scale = (DOUBLE["m1"] * DOUBLE["d1"] + DOUBLE["m2"] * (DOUBLE["l1"] + DOUBLE["d2"])) * G
    assert np.max(np.abs(e - e[0])) / scale < 1e-8
    assert np.ptp(out["theta2"]) > 2.0


def _textbook_point_mass_double_pendulum(y, m1, m2, L1, L2, g):  # noqa: N803
    """Classic point-mass double pendulum (e.g. myphysicslab), angles from the downward vertical.

    Written for x = L sin(theta); the ODE is odd in all angles, so it holds verbatim for the
    mirrored convention x = -L sin(theta) used by the reference.
    """
    th1, th2, w1, w2 = y
    den = 2 * m1 + m2 - m2 * np.cos(2 * th1 - 2 * th2)
    a1 = (
        -g * (2 * m1 + m2) * np.sin(th1)
        - m2 * g * np.sin(th1 - 2 * th2)
        - 2 * np.sin(th1 - th2) * m2 * (w2**2 * L2 + w1**2 * L1 * np.cos(th1 - th2))
    ) / (L1 * den)
    a2 = (
        2
        * np.sin(th1 - th2)
        * (
            w1**2 * L1 * (m1 + m2)
            + g * (m1 + m2) * np.cos(th1)
            + w2**2 * L2 * m2 * np.cos(th1 - th2)
        )
    ) / (L2 * den)
    return [w1, w2, a1, a2]


def test_double_pendulum_point_masses_match_textbook_equations():
    m1, m2, L1, L2 = 1.2, 0.8, 0.7, 0.5
    y0 = [1.4, -0.6, 0.2, 1.1]
    t = np.linspace(0.0, 3.0, 301)
    out = double_pendulum(*y0, t, m1=m1, m2=m2, d1=L1, d2=L2, l1=L1, i1=0.0, i2=0.0)
    ref = solve_ivp(
        lambda _t, y: _textbook_point_mass_double_pendulum(y, m1, m2, L1, L2, G),
        (0.0, t[-1]),
        y0,
        method="DOP853",
        rtol=1e-11,
        atol=1e-12,
        t_eval=t,
    ).y
    for i, key in enumerate(["theta1", "theta2", "omega1", "omega2"]):
        np.testing.assert_allclose(out[key], ref[i], rtol=0, atol=1e-6, err_msg=key)


def test_double_pendulum_light_second_body_leaves_first_a_physical_pendulum():
    eps = 1e-12
    t = np.linspace(0.0, 5.0, 501)
    out = double_pendulum(
        1.7,
        0.3,
        0.0,
        0.0,
        t,
        m1=PEND["mass"],
        m2=eps,
        d1=PEND["com_distance"],
        d2=0.3,
        l1=0.8,
        i1=PEND["inertia_com"],
        i2=eps * 0.01,
    )
    theta, omega = physical_pendulum(1.7, 0.0, t, **PEND)
    np.testing.assert_allclose(out["theta1"], theta, rtol=0, atol=1e-8)
    np.testing.assert_allclose(out["omega1"], omega, rtol=0, atol=1e-8)


# --------------------------------------------------------------------------------------------
# 4. bouncing ball, 5. sliding box
# --------------------------------------------------------------------------------------------


def _simulate_bounces(h0, e, g, n):
    """Event-driven free fall with velocity reversal; returns apex heights and impact times."""

    def ground(_t, y):
        return y[0]

    ground.terminal = True
    ground.direction = -1

    apexes, impacts = [h0], []
    t0, y = 0.0, [h0, 0.0]
    for _ in range(n):
        sol = solve_ivp(
            lambda _t, s: [s[1], -g],
            (t0, t0 + 100.0),
            y,
            events=ground,
            method="DOP853",
            rtol=1e-12,
            atol=1e-14,
        )
        t0 = sol.t_events[0][0]
        v_in = sol.y_events[0][0][1]
        impacts.append(t0)
        y = [0.0, -e * v_in]
        apexes.append(y[1] ** 2 / (2 * g) if y[1] > 0 else 0.0)
    return np.array(apexes), np.array(impacts)


def test_bouncing_ball_apexes_and_impacts_match_event_simulation():
    h0, e, n = 1.5, 0.8, 6
    sim_apex, sim_impacts = _simulate_bounces(h0, e, G, n)
    apex = bouncing_ball_apexes(h0, e, G, n=n)
    assert apex.shape == (n + 1,)
    np.testing.assert_allclose(apex, sim_apex, rtol=1e-9)
    np.testing.assert_allclose(bouncing_ball_impact_times(h0, e, G, n=n), sim_impacts, rtol=1e-9)
    assert apex[0] == h0 and apex[1] == pytest.approx(h0 * e**2)


def test_sliding_box_matches_integrated_friction():
    v0, mu = 3.2, 0.35

    def stopped(_t, y):
        return y[1]

    stopped.terminal = True
    sol = solve_ivp(
        lambda _t, y: [y[1], -mu * G],
        (0.0, 100.0),
        [0.0, v0],
        events=stopped,
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
    )
    dist, time = sliding_box_distance(v0, mu, G)
    assert time == pytest.approx(sol.t_events[0][0], rel=1e-10)
    assert dist == pytest.approx(sol.y_events[0][0][0], rel=1e-10)


# --------------------------------------------------------------------------------------------
# time-argument handling
# --------------------------------------------------------------------------------------------


def test_times_not_starting_at_zero_are_measured_from_zero():
    full = np.linspace(0.0, 2.0, 21)
    theta_full, _ = physical_pendulum(0.5, 0.0, full, **PEND)
    theta_part, _ = physical_pendulum(0.5, 0.0, full[5:], **PEND)
    np.testing.assert_allclose(theta_part, theta_full[5:], rtol=0, atol=1e-9)
    theta_zero, omega_zero = physical_pendulum(0.5, 0.25, [0.0], **PEND)
    assert theta_zero[0] == 0.5 and omega_zero[0] == 0.25
    with pytest.raises(ValueError):
        physical_pendulum(0.5, 0.0, [1.0, 0.5], **PEND)
