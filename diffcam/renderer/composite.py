"""Front-to-back compositing of soft samples, with a hand-written backward.

A pixel holding samples 0..L-1 in depth order (coverage ``a_l``, colour ``c_l``) over the
background ``bg`` shows ``sum_l T_l a_l c_l + T_L bg`` with ``T_l = prod_{j<l} (1 - a_j)``,
and its coverage is ``1 - T_L``. Instead of recording that op by op (scatters into a dense
(pixel, primitive) table, sorting gathers, a cumulative product), `composite` runs the
recursion in one autograd node whose backward uses

    d image / d c_l = T_l a_l,    d image / d a_l = T_l (c_l - R_l),    d image / d bg = T_L,

with ``R_l`` the composite of the samples behind l over the background (back to front:
``R_L = bg``, ``R_{l-1} = a_l c_l + (1 - a_l) R_l``), no division by ``1 - a_l`` (which is 0
deep inside a silhouette). The coverage is the same recursion with colour 1 over 0.

Most pixels hold one sample: there the image is ``bg + a (c - bg)`` and no ordering is needed;
only pixels several samples share are sorted by depth (ties in primitive order, as the hard
test breaks them). Forward-mode AD and functorch transforms take the autograd-recorded
reference (`composite_reference`), which computes the same values.

Colours are handled channel by channel, as (3, n) rows (the transpose of the (n, 3)
arguments; the soft sampler's colours are stored that way): element-wise ops on (n, 3)
columns are strided passes that CPUs vectorise poorly.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..autodiff import plain_autograd

_FAR = 1e30  # depth of a primitive not evaluated at a pixel (sorts last; coverage 0 there)


class Plan(NamedTuple):
    """Where the samples go (no grad). one (n1,) samples alone at their pixel; many (m,)
    the others; slot (m,) each one's entry ``rank * N + row`` in the (L, N) depth-sorted
    table of the N shared pixels ``q`` (N,) (each once, in no particular order); pix
    (n1 + N,) the written flat pixels (singles first); chan (3, n1 + N) their flat
    (B, 3, P) image indices; winners (W,) the samples the hard test picks (the nearest hit
    per pixel); B, P, L."""

    one: torch.Tensor
    many: torch.Tensor
    slot: torch.Tensor
    q: torch.Tensor
    pix: torch.Tensor
    chan: torch.Tensor
    winners: torch.Tensor
    B: int
    P: int
    L: int


def make_plan(pid, prim, depth, hit, B: int, P: int, K: int, winners: bool = True) -> Plan:
    """The :class:`Plan` of samples at flat pixels ``pid`` (S,) of primitives ``prim`` (S,)
    with depths ``depth`` (S,) and hits ``hit`` (S,) bool, each primitive at a pixel at most
    once. Without ``winners`` the plan's winners are left empty (no hard test)."""
    with torch.no_grad():
        device = pid.device
        one, many, q, row = _shared_pixels(pid, prim, B * P, K)
        found = [one[hit.index_select(0, one)]] if winners else [one[:0]]
        slot = pid.new_empty(0)
        L = 0
        if many.numel():
            hits = hit[many] if winners else None
            slot, L, won = _sorted_slots(row, q.numel(), prim[many], depth[many], hits, K)
            if winners:
                found.append(many[won])
        pix = torch.cat([pid.index_select(0, one), q])
        base = pix + torch.div(pix, P, rounding_mode="floor") * (2 * P)  # b * 3P + p
        chan = base + torch.arange(0, 3 * P, P, device=device).unsqueeze(1)
        return Plan(one, many, slot, q, pix, chan, torch.cat(found), B, P, L)


def _shared_pixels(pid, prim, n_pix: int, K: int):
    """The samples alone at their pixel one (n1,) and the others many (m,) (indices into
    the samples), the pixels several share q (N,) (each once, in no particular order), and
    the rows in q of the many's pixels (m,).

    A count per pixel in bytes (K primitives, each at a pixel at most once, so counts stay
    at most K); q lists each shared pixel at its sample of the lowest primitive there (the
    count map, reset at the shared pixels, then holds that primitive); a pixel-sized row
    map written only at q (never cleared, never read elsewhere): a few linear passes over
    the samples, no sort or search of them all."""
    device = pid.device
    count_type = torch.uint8 if K < 256 else torch.int32
    count = torch.zeros(n_pix, dtype=count_type, device=device)
    count.index_add_(0, pid, torch.ones((), dtype=count_type, device=device).expand_as(pid))
    single = count.index_select(0, pid) == 1
    one = single.nonzero().squeeze(1)
    many = (~single).nonzero().squeeze(1)
    if many.numel() == 0:
        return one, many, pid.new_empty(0), pid.new_empty(0)
    shared, shared_prim = pid.index_select(0, many), prim.index_select(0, many)
    lowest = count.index_fill_(0, shared, K)
    lowest.scatter_reduce_(0, shared, shared_prim.to(count_type), "amin")
    q = shared[lowest.index_select(0, shared) == shared_prim]
    rows = torch.empty(n_pix, dtype=torch.long, device=device)
    rows.index_copy_(0, q, torch.arange(q.numel(), device=device))
    return one, many, q, rows.index_select(0, shared)


def _sorted_slots(row, N: int, prim, depth, hit, K: int):
    """Samples of N pixels that hold several, at rows ``row`` (m,) of those pixels: each
    sample's slot ``rank * N + row`` in the (L, N) table sorted by depth (ties in primitive
    order), L, and the winners (the first hit of each pixel) as indices into the samples
    (None when ``hit`` is None)."""
    device = row.device
    at = prim * N + row
    table = torch.full((K * N,), _FAR, dtype=depth.dtype, device=device)
    table = table.index_copy_(0, at, depth).view(K, N)
    # rank = how many primitives lie in front (nearer, or as near with a lower index): K^2 / 2
    # comparisons of rows, where sorting N rows of K is slow on CPU
    count = torch.uint8 if K <= 255 else torch.int32  # ranks reach K - 1
    ranks = torch.zeros(K, N, dtype=count, device=device)
    for k in range(K):
        for j in range(k):
            ahead = table[j] <= table[k]  # j before k
            ranks[k] += ahead.to(count)
            ranks[j] += (~ahead).to(count)
    rank = ranks.view(-1).index_select(0, at)
    L = int(rank.max()) + 1
    if hit is None:
        return rank.long() * N + row, L, None
    # each pixel's nearest hit: the lowest rank among its hits (L: none)
    hit_rows = row[hit]
    first = torch.full((N,), L, dtype=count, device=device)
    first.scatter_reduce_(0, hit_rows, rank[hit], "amin")
    won = (hit & (rank == first.index_select(0, row))).nonzero().squeeze(1)
    return rank.long() * N + row, L, won


def _background_at(bg, plan: Plan):
    """The background (B|1, P, 3) at the plan's written pixels -> (3, n1 + N).

    A pre-rendered layer arrives as a channels-first image seen as (B|1, P, 3) (channel
    stride P): there one gather along its pixels reads it in place, where a gather of 3-wide
    rows of that strided view (or of a copy) costs the whole image's size."""
    P = plan.P
    first = bg.transpose(1, 2)  # (B|1, 3, P)
    if first.is_contiguous():
        if bg.shape[0] == 1:
            return first[0].index_select(1, plan.pix % P)
        return first.reshape(-1).index_select(0, plan.chan.view(-1)).view(3, -1)
    if bg.shape[0] == 1:
        return bg[0].index_select(0, plan.pix % P).t()
    return bg.reshape(-1, 3).index_select(0, plan.pix).t()


def channels_first(bg, B: int):
    """A new (B, 3, P) image of the background ``bg`` (B|1, P, 3). (A copy into a new tensor:
    ``clone()`` of an expanded tensor is several times slower in torch 2.13.)"""
    image = bg.new_empty(B, 3, bg.shape[1])
    return image.copy_(bg.transpose(1, 2).expand(B, -1, -1))


class _Composite(torch.autograd.Function):
    """image (B, 3, P), coverage (B, P) (None unless ``with_coverage``) of samples' coverage
    ``alpha`` (S,) and colours ``colour`` (S, 3) over ``bg`` (B|1, P, 3), placed by a
    :class:`Plan`. The colours' gradient is the (S, 3) transpose of a (3, S) tensor."""

    @staticmethod
    def forward(ctx, alpha, colour, bg, plan: Plan, with_coverage: bool = True):
        ctx.set_materialize_grads(False)  # no (B, P) zeros for an unused coverage
        B, P, L = plan.B, plan.P, plan.L
        n1 = plan.one.numel()
        colour = colour.t()  # (3, S)
        a1 = alpha.index_select(0, plan.one)
        c1 = colour.index_select(1, plan.one)
        bg_at = _background_at(bg, plan)
        bg1, bgq = bg_at[:, :n1], bg_at[:, n1:]
        out1 = torch.addcmul(bg1, a1, c1 - bg1)
        N = plan.q.numel()
        A = alpha.new_zeros(L * N).index_copy_(0, plan.slot, alpha.index_select(0, plan.many))
        C = colour.new_zeros(3, L * N)
        C.index_copy_(1, plan.slot, colour.index_select(1, plan.many))
        A, C = A.view(L, N), C.view(3, L, N)
        T = alpha.new_ones(L + 1, N)  # T[l] = prod_{j<l} (1 - a_j)
        acc = alpha.new_zeros(3, N)
        for i in range(L):
            acc.addcmul_(A[i] * T[i], C[:, i])
            torch.mul(T[i], 1.0 - A[i], out=T[i + 1])
        outq = torch.addcmul(acc, T[L], bgq)
        image = channels_first(bg, B)
        image.view(-1).index_copy_(0, plan.chan.view(-1), torch.cat([out1, outq], 1).view(-1))
        behind = torch.cat([1.0 - a1, T[L]])  # what shows of the background
        coverage = None
        if with_coverage:
            coverage = alpha.new_zeros(B * P).index_copy_(0, plan.pix, 1.0 - behind).view(B, P)
        ctx.plan = plan
        ctx.bg_shape = bg.shape
        ctx.tensors = (a1, c1, bg1, bgq, A, C, T, behind)
        return image, coverage

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_image, g_coverage):
        plan = ctx.plan
        a1, c1, bg1, bgq, A, C, T, behind = ctx.tensors
        n1, L = a1.shape[0], plan.L
        # gradients not materialised: None for an output that no loss used
        if g_image is None:
            g_image = A.new_zeros(plan.B, 3, plan.P)
        g_px = g_image.reshape(-1).index_select(0, plan.chan.view(-1)).view(3, -1)
        if g_coverage is None:
            gc_px = A.new_zeros(plan.pix.numel())
        else:
            gc_px = g_coverage.reshape(-1).index_select(0, plan.pix)
        g1, gq = g_px[:, :n1], g_px[:, n1:]
        g_alpha = g_colour = g_bg = None
        need_a, need_c, need_bg = ctx.needs_input_grad[:3]
        n_all = plan.one.numel() + plan.many.numel()
        if need_a or need_c:
            g_alpha = A.new_zeros(n_all)
            g_colour = A.new_zeros(3, n_all)
            # one sample: image = bg + a (c - bg), coverage = a
            g_alpha.index_copy_(0, plan.one, _dot3(c1 - bg1, g1) + gc_px[:n1])
            g_colour.index_copy_(1, plan.one, a1 * g1)
            if L:
                gA, gC = _sorted_backward(A, C, T, bgq, gq, gc_px[n1:])
                g_alpha.index_copy_(0, plan.many, gA.view(-1).index_select(0, plan.slot))
                g_colour.index_copy_(1, plan.many, gC.view(3, -1).index_select(1, plan.slot))
            g_colour = g_colour.t()
        if need_bg:
            shown = g_image.new_ones(plan.B * plan.P).index_copy_(0, plan.pix, behind)
            g_bg = (g_image.reshape(plan.B, 3, -1) * shown.view(plan.B, 1, -1)).transpose(1, 2)
            if ctx.bg_shape[0] == 1:
                g_bg = g_bg.sum(0, keepdim=True)
        return (g_alpha if need_a else None), (g_colour if need_c else None), g_bg, None, None


def _sorted_backward(A, C, T, bgq, g, gc):
    """Gradients (L, N), (3, L, N) of the sorted table's coverage A (L, N) and colours C
    (3, L, N) given the transmittances T (L + 1, N), the background bgq (3, N) and the
    gradients of the pixels' colour g (3, N) and coverage gc (N,)."""
    L, N = A.shape
    gA = torch.empty_like(A)
    gC = torch.empty_like(C)
    R = bgq.clone()  # what lies behind sample l, composited: colour
    Rc = A.new_zeros(N)  # and coverage
    for i in range(L - 1, -1, -1):
        a, c, t = A[i], C[:, i], T[i]
        torch.mul(t, _dot3(c - R, g) + gc * (1.0 - Rc), out=gA[i])
        torch.mul(g, a * t, out=gC[:, i])
        R.addcmul_(a, c - R)
        Rc.addcmul_(a, 1.0 - Rc)
    return gA, gC


def _dot3(a, b):
    """Column dot products (n,) of a, b (3, n)."""
    return torch.addcmul(torch.addcmul(a[0] * b[0], a[1], b[1]), a[2], b[2])


def composite(alpha, colour, bg, plan: Plan, with_coverage: bool = True):
    """Front-to-back composite of samples ``alpha`` (S,), ``colour`` (S, 3) over ``bg``
    (B|1, P, 3) placed by ``plan`` -> image (B, 3, P), coverage (B, P) (None unless
    ``with_coverage``). The hand-written backward, unless forward-mode AD or a functorch
    transform is active (the reference)."""
    if plain_autograd():
        return _Composite.apply(alpha, colour, bg, plan, with_coverage)
    return composite_reference(alpha, colour, bg, plan, with_coverage)


def composite_reference(alpha, colour, bg, plan: Plan, with_coverage: bool = True):
    """`composite` recorded op by op by autograd (any AD mode)."""
    B, P, L = plan.B, plan.P, plan.L
    n1 = plan.one.numel()
    colour = colour.t()  # (3, S)
    a1 = alpha.index_select(0, plan.one)
    bg_at = _background_at(bg, plan)
    out1 = bg_at[:, :n1] + a1 * (colour.index_select(1, plan.one) - bg_at[:, :n1])
    N = plan.q.numel()
    A = alpha.new_zeros(L * N).index_copy(0, plan.slot, alpha.index_select(0, plan.many))
    C = colour.new_zeros(3, L * N).index_copy(1, plan.slot, colour.index_select(1, plan.many))
    A, C = A.view(L, N), C.view(3, L, N)
    trans = torch.cumprod(1.0 - A, dim=0)
    before = torch.cat([torch.ones_like(trans[:1]), trans[:-1]], 0)
    shown = trans[-1] if L else A.new_ones(N)
    outq = (A * before * C).sum(1) + shown * bg_at[:, n1:]
    behind = torch.cat([1.0 - a1, shown])
    flat = channels_first(bg, B).view(-1)
    image = flat.index_put((plan.chan.view(-1),), torch.cat([out1, outq], 1).view(-1))
    if not with_coverage:
        return image.view(B, 3, P), None
    coverage = alpha.new_zeros(B * P).index_put((plan.pix,), 1.0 - behind)
    return image.view(B, 3, P), coverage.view(B, P)
