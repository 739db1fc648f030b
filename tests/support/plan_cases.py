"""Kernel test cases drawn from the kernels' own planner (``ascend_rmsnorm_plan2``), not typed by hand.

A *family* is what a kernel launch's plan and instruction stream depend on besides H and the rows:
the direction, the dtypes as the kernel sees them (x, weight or none, y / dy) and the launch flags
(the fused residual add; the backward's dx, dw and grad_residual_out). The user-level variants that
reach the same kernel instantiation (casting modes, offsets, a weight the host widens) rotate over
a family's cases. For each family the H and rows of its cases come from the plan:

- every H where the plan changes (path, rows per group, ring slots, sub-tile, fp32 weight held, dy
  slots, lag, dw accumulators), the H on both sides of it, and every path limit with one more on either side;
- every last-tile length that changes the tree's alignment or its sub-tile split: 4096k + r and
  4096k - r for r in 1..32, and 4096k + 2^j - 1, 2^j, 2^j + 1 (the sub-tiles are powers of two);
- rows around the block count, the group size, the ring's wrap and the dw-chunk boundaries at a few
  H per plan (for the backward's groups: rows = 128 G + 1, the fewest that give groups of G), and the
  fewest chunks whose dw reduce takes its stacked form, then a power of two of them and one more;
- the backward's plans at R = 2..64 rows per dw chunk (the H sweep's few rows make R = 1, one row a
  group): every change of its structure (groups of several rows, ring slots, lag, dw accumulators...)
  that no smaller R makes, both sides of it, at 128 R + 1 rows;
- the backward's row-at-a-time paths (tiled, stream), whose plan does not depend on R but whose chunk
  loop does: chunks of 2 rows and of 3, and the most rows a chunk the rules-only budget allows (the stream
  path's full 64-row chunks under a budget of their own), each with a short last chunk (``Cases.row_chunk_cases``);
- the H limit itself: plan statuses, and (``make sweep`` only) a forward and a backward run there in
  the emulation's rules-only mode.

``all_cases`` is what ``make sweep`` runs; ``sample`` draws a seeded, cost-bounded subset of it for CI.
"""

from __future__ import annotations

import ctypes
import functools
import random
from dataclasses import asdict, dataclass

from ascend_rmsnorm.contract import DW_CHUNK_ROWS, DW_MIN_CHUNKS

TILE = 4096
#: H values the plan scan covers: every resident path ends below 8 tiles; past that only the stream
#: path's tile count grows, which the tile-tail H (up to 8 tiles) already exercise.
H_SCAN = 8 * TILE + 64
#: The kernels' H limit (kMaxHidden).
MAX_HIDDEN = (1 << 31) - 1
#: Blocks of a full launch (the emu backend's default: an A2/A3 die's vector cores).
CORES = 48

DT_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
OTHER16 = {"bfloat16": "float16", "float16": "bfloat16"}
# launch flags of ascend_rmsnorm_plan2 (the kernels' kFlag*)
FLAG_LLAMA, FLAG_RESIDUAL, FLAG_WEIGHT, FLAG_DX, FLAG_DW = 1, 2, 4, 16, 32
PATHS = {0: "group", 1: "stream", 2: "group", 3: "stream", 4: "tiled", 5: "tiled"}


@dataclass(frozen=True)
class Variant:
    """How a caller reaches a family's kernel: the weight dtype it passes (None: no weight), the mode, the offset."""

    weight: str | None
    mode: str
    offset: float = 0.0


@dataclass(frozen=True)
class Family:
    direction: str  # "fwd" | "bwd"
    x: str
    w: str | None  # the weight's dtype as the kernel reads it (None: no weight)
    out: str  # the kernel's y (forward) or dy (backward) dtype
    residual: bool = False  # forward: the fused residual add; backward: grad_residual_out
    need_dx: bool = True
    need_dw: bool = False

    @property
    def name(self) -> str:
        w = self.w or "none"
        flags = ""
        if self.direction == "fwd":
            flags = "+res" if self.residual else ""
        else:
            on = (("+dx", self.need_dx), ("+dw", self.need_dw), ("+gro", self.residual))
            flags = "".join(f for f, want in on if want)
        return f"{self.direction} {self.x}/{w}/{self.out}{flags}"

    def plan_flags(self) -> int:
        f = FLAG_WEIGHT if self.w is not None else 0
        if self.residual:
            f |= FLAG_RESIDUAL
        if self.direction == "bwd":
            f |= (FLAG_DX if self.need_dx else 0) | (FLAG_DW if self.need_dw and self.w is not None else 0)
        return f

    def plan_class(self) -> tuple:
        """What the plan depends on (f16 and bf16 plan alike; modes do not enter it)."""
        sx = SIZE[self.x]
        return (self.direction, sx, SIZE[self.w] if self.w else sx, SIZE[self.out], self.w is not None,
                self.residual, self.need_dw and self.w is not None)  # fmt: skip

    def variants(self) -> list[Variant]:
        x, w, out = self.x, self.w, self.out
        if w is None:
            return [Variant(None, "fp32"), Variant(None, "llama"), Variant(None, "gemma")]
        if w == x:
            vs = [Variant(x, "fp32"), Variant(x, "llama"), Variant(x, "gemma"), Variant(x, "fp32", -0.5)]
            if x == "float32":  # a float64 weight: widened by the host (RNE), dw cast back
                vs += [Variant("float64", "fp32", 0.25), Variant("float64", "llama")]
            return vs
        if out == x:  # a 16-bit x with an fp32 weight (or one the host widens to fp32), y in x's dtype
            return [Variant("float32", "fp32"), Variant("float32", "gemma"), Variant(OTHER16[x], "fp32"),
                    Variant("float64", "fp32", 0.25)]  # fmt: skip
        # llama with a wider weight: y (and dy) float32, or float64 widened from the kernel's float32
        return [Variant("float32", "llama"), Variant(OTHER16[x], "llama"), Variant("float64", "llama", 1.0)]


@dataclass(frozen=True)
class Case:
    """One kernel run: a family, a variant, the shape and launch, and why it was drawn."""

    family: Family
    variant: Variant
    hidden: int
    rows: int
    blocks: int
    special: bool = False  # rows holding a NaN (odd payload) and an Inf
    why: str = ""
    fast: bool = False  # too large to compare: the emulation's counts-only mode checks its rules alone

    @property
    def elements(self) -> int:
        return self.rows * self.hidden

    def label(self) -> str:
        v = self.variant
        sp = (" special" if self.special else "") + (" (rules only)" if self.fast else "")
        return (f"{self.family.name} H={self.hidden} rows={self.rows} blocks={self.blocks} "
                f"w={v.weight} {v.mode} offset={v.offset}{sp} [{self.why}]")  # fmt: skip

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> Case:
        return Case(Family(**d["family"]), Variant(**d["variant"]), d["hidden"], d["rows"], d["blocks"],
                    d["special"], d["why"], d["fast"])  # fmt: skip


def leaves_dw_checked(hidden: int) -> bool:
    """Whether a special case (a NaN and an inf in rows 0 and 1, sweep.py) still leaves a dw column to
    compare: they make columns H - 1 and H / 2 NaN whatever the reduce does, which at H = 1 is all of dw."""
    return hidden > 1


def families() -> list[Family]:
    """Every kernel instantiation and launch-flag set: both directions, every dtype triple, with and
    without the residual; the backward's dx / dw / grad_residual_out combinations."""
    out = []
    for x in ("float32", "bfloat16", "float16"):
        triples = [(x, x, x), (x, None, x)]
        if x != "float32":
            triples += [(x, "float32", x), (x, "float32", "float32")]
        for t in triples:
            for residual in (False, True):
                out.append(Family("fwd", *t, residual=residual))
        bwd = list(triples) + ([(x, None, "float32")] if x != "float32" else [])
        for t in bwd:
            if t[1] is None:
                flag_sets = [(True, False, False), (True, False, True)]
            else:
                flag_sets = [(True, True, False), (True, True, True), (True, False, False), (False, True, False)]
            for need_dx, need_dw, gro in flag_sets:
                out.append(Family("bwd", *t, residual=gro, need_dx=need_dx, need_dw=need_dw))
    return out


# ---- the planner ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    status: int
    path: str
    G: int
    slots: int
    sub: int
    wide: bool
    blocks: int
    ub: int
    chunk_rows: int
    dy_slots: int
    chunks: int
    lag: int  # the kernels' PlanLag: 0 none, 1 a widened dy per group in flight, 2 one for both
    accs: int  # backward: dw accumulators (0 without dw)

    def key(self) -> tuple:
        """The plan as the kernel's structure sees it (UB bytes change with every H)."""
        return (self.path, self.G, self.slots, self.sub, self.wide, self.dy_slots, self.lag, self.accs)


class Planner:
    """``ascend_rmsnorm_plan2`` of a loaded kernel library, called raw (a plan scan makes ~10^6 calls)."""

    def __init__(self, library) -> None:
        self._fn = library._lib.ascend_rmsnorm_plan2
        self._out = (ctypes.c_int64 * 12)()

    def plan(self, fam: Family, hidden: int, rows: int, blocks: int = CORES) -> Plan:
        direction = 0 if fam.direction == "fwd" else 1
        wcode = DT_CODE[fam.w] if fam.w is not None else DT_CODE[fam.x]
        out = self._out
        st = self._fn(direction, DT_CODE[fam.x], wcode, DT_CODE[fam.out], fam.plan_flags(), rows, hidden, blocks, out)
        v = list(out) if st == 0 else [0] * 12
        return Plan(st, PATHS.get(v[0], "?"), v[1], v[2], v[3], bool(v[4]), v[5], v[6], v[7], v[8], v[9], v[10], v[11])

    def dw(self, fam: Family, hidden: int, rows: int, blocks: int = CORES) -> dict:
        """The dw reduce's plan: slice, stacked form, blocks, UB bytes."""
        wcode = DT_CODE[fam.w] if fam.w is not None else DT_CODE[fam.x]
        out = self._out
        st = self._fn(2, DT_CODE[fam.x], wcode, DT_CODE[fam.out], fam.plan_flags(), rows, hidden, blocks, out)
        return {"status": st, "slice": out[1], "stack": out[2], "blocks": out[5], "ub": out[6]}

    @functools.cache  # noqa: B019 - one planner per library, kept for the session
    def scan(self, plan_class: tuple, rows: int, group_only: bool = False) -> tuple[tuple, ...]:
        """The plan key (``Plan.key``) and UB bytes of every H in 1..H_SCAN (index H - 1) for a plan class at
        ``rows`` rows; ``group_only``: stop after the group path's last H (only it has groups of several rows)."""
        fam = _family_of_class(plan_class)
        fn, out = self._fn, self._out
        direction = 0 if fam.direction == "fwd" else 1
        wcode = DT_CODE[fam.w] if fam.w is not None else DT_CODE[fam.x]
        args = (direction, DT_CODE[fam.x], wcode, DT_CODE[fam.out], fam.plan_flags(), rows)
        keys = []
        for h in range(1, H_SCAN + 1):
            if fn(*args, h, CORES, out) != 0:
                raise AssertionError(f"ascend_rmsnorm_plan2 refused H={h} of {plan_class} at {rows} rows")
            v = out[:]  # one copy out of the ctypes array: ~8 * 10^6 calls at every R (chunk_points)
            key = (PATHS.get(v[0], "?"), v[1], v[2], v[3], v[4] != 0, v[8], v[10], v[11], v[6])
            if group_only and key[0] != "group":
                break
            keys.append(key)
        return tuple(keys)

    @functools.cache  # noqa: B019 - one planner per library, kept for the session
    def chunk_points(self, plan_class: tuple) -> tuple[tuple[int, int, str], ...]:
        """(H, R, why) where the backward's group path changes its structure (``structure``) at R rows
        per dw chunk, R in 2..64, in a way the H sweep (R = 1) and no smaller R shows: the H on both
        sides of each such change, at the smallest R that makes it (the fewest rows) and its first H there."""
        seen = set(_structure_changes(self.scan(plan_class, 3, group_only=True)))
        found: dict[tuple, tuple[int, int]] = {}
        for r in range(2, MAX_CHUNK_ROWS + 1):
            for change, h in _structure_changes(self.scan(plan_class, MIN_CHUNKS * r, group_only=True)).items():
                if change not in seen and change not in found:
                    found[change] = (h, r)
        out = []
        for (a, b), (h, r) in found.items():
            what = "/".join(n for n, p, q in zip(STRUCTURE, a, b) if p != q)
            out += [
                (h - 1, r, f"chunks of {r} rows: {what} change at {h} -1"),
                (h, r, f"chunks of {r} rows: {what} change at {h}"),
            ]
        return tuple(out)


#: What in a group plan changes the backward kernel's structure (not the exact G, whose first H each
#: ``Cases.rows_cases`` runs, nor the sub-tile, which follows from G).
STRUCTURE = ("path", "several rows", "slots", "wide", "dy", "lag", "accs")
#: dw chunks: R = clamp(N // MIN_CHUNKS, 1, MAX_CHUNK_ROWS) rows each (the contract's, the kernels' too).
MIN_CHUNKS, MAX_CHUNK_ROWS = DW_MIN_CHUNKS, DW_CHUNK_ROWS


def structure(key: tuple) -> tuple:
    """A ``Planner.scan`` key as STRUCTURE names it."""
    return (key[0], key[1] > 1, key[2], key[4], key[5], key[6], key[7])


def _structure_changes(keys: tuple[tuple, ...]) -> dict[tuple, int]:
    """(structure before, structure after) -> the first H where the scan makes that change."""
    found: dict[tuple, int] = {}
    for i in range(1, len(keys)):
        a, b = structure(keys[i - 1]), structure(keys[i])
        if a != b:
            found.setdefault((a, b), i + 1)
    return found


def _family_of_class(pc: tuple) -> Family:
    direction, sx, sw, so, weight, residual, dw = pc
    name = {4: "float32", 2: "bfloat16"}
    return Family(direction, name[sx], name[sw] if weight else None, name[so], residual=residual,
                  need_dx=True, need_dw=dw)  # fmt: skip


def path_starts(planner: Planner, fam: Family) -> dict[str, int]:
    """The first H of every path the family's plan takes (at the H sweep's rows), in H order."""
    firsts: dict[str, int] = {}
    for h, key in enumerate(planner.scan(fam.plan_class(), 3), 1):
        firsts.setdefault(key[0], h)
    return firsts


def change_points(keys: tuple[tuple, ...]) -> dict[int, str]:
    """H -> why, for the H on both sides of every plan change, and each path limit +-1."""
    found: dict[int, str] = {}
    for i in range(1, len(keys)):
        a, b = keys[i - 1][:8], keys[i][:8]  # not the UB bytes, which change with every H
        if a == b:
            continue
        h = i + 1  # the first H with the new plan
        if a[0] != b[0]:
            for d in (-2, -1, 0, 1):
                found.setdefault(h + d, f"{a[0]} limit {h - 1}{d + 1:+d}")
        else:
            what = [n for n, p, q in zip(("G", "slots", "sub", "wide", "dy", "lag", "accs"), a[1:], b[1:]) if p != q]
            for d in (-1, 0):
                found.setdefault(h + d, f"{a[0]} {','.join(what)} change at {h}{'' if d == 0 else ' -1'}")
    return found


def tail_points() -> dict[int, str]:
    """H whose last 4096-tile length changes the alignment or the sub-tile split of the tile's tree."""
    found: dict[int, str] = {}
    for k in range(0, 9):
        for r in range(1, 33):
            found.setdefault(TILE * k + r, f"last tile {r}")
            if k > 0:
                found.setdefault(TILE * k - r, f"last tile {TILE - r}")
        for j in range(3, 13):
            for d in (-1, 0, 1):
                last = (1 << j) + d
                if 0 < last <= TILE:
                    found.setdefault(TILE * k + last, f"last tile {last}")
    return {h: w for h, w in found.items() if 1 <= h <= H_SCAN}


#: A long streamed row (17 tiles) with these last tiles: the one place the cases pass the scan's end.
LONG_TILES = 17
LONG_LAST_TILES = (1, 9, 16, TILE)


def last_tile(hidden: int) -> int:
    return hidden - (hidden - 1) // TILE * TILE


# ---- the cases --------------------------------------------------------------------------------------

#: Elements a case may have to be run in full (with data, compared bit for bit). Larger ones, up to
#: FAST_MAX_ELEMENTS, run in the performance model's fast mode (no data moves, no arithmetic: every
#: operand, sync, queue and UB rule is still checked; GM ordering and Gather bounds are not); the CI
#: sample draws no fast case.
SWEEP_MAX_ELEMENTS = 3_000_000
FAST_MAX_ELEMENTS = 48_000_000
#: The stream path's dw chunks of MAX_CHUNK_ROWS rows (``Cases.row_chunk_cases``), rules only, past
#: FAST_MAX_ELEMENTS: the chunk whose rstd fills the kernel's per-row rstd buffers to their end (one gv
#: vector of MAX_CHUNK_ROWS floats, broadcast 8 floats a row) needs MIN_CHUNKS MAX_CHUNK_ROWS rows and
#: more, and the stream path's first H is 8705 at the least over the families (71 M elements and more),
#: so FAST_MAX_ELEMENTS alone draws it nowhere. The fast mode's cost follows the instructions (rows x
#: tiles), not the bytes: 2 to 7 s a case on this machine, so this boundary alone gets a limit that takes
#: the plan classes whose stream path starts below H = 11,630 (three of them).
STREAM_FULL_CHUNK_MAX_ELEMENTS = 96_000_000
#: The H sweep's rows x H budget: its rows are reduced (to 2 at least) to stay under it.
H_SWEEP_ELEMENTS = 32 * 1024


class Cases:
    """The cases of every family, drawn from ``planner``."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def _variant(self, fam: Family, i: int) -> Variant:
        vs = fam.variants()
        return vs[i % len(vs)]

    def h_points(self, fam: Family) -> dict[int, str]:
        """Every structural H of the family (plan changes at the H sweep's rows, tile tails)."""
        pts = change_points(self.planner.scan(fam.plan_class(), 3))
        for h, why in tail_points().items():
            pts.setdefault(h, why)
        for last in LONG_LAST_TILES:  # past the scan only the stream path's tile count grows
            pts.setdefault(LONG_TILES * TILE + last, f"long row: last tile {last}")
        return dict(sorted(pts.items()))

    def h_sweep(self, fam: Family) -> list[Case]:
        """Each structural H with a few rows: the ring wraps once (a group short at the end) on one or two blocks."""
        out = []
        for i, (h, why) in enumerate(self.h_points(fam).items()):
            blocks = 1 + i % 2
            p = self.planner.plan(fam, h, 3)
            per_block = p.G * p.slots if fam.direction == "fwd" else p.slots
            rows = blocks * per_block + 1
            if rows * h > H_SWEEP_ELEMENTS:
                rows = max(2, H_SWEEP_ELEMENTS // h)
            if fam.direction == "bwd":
                rows = min(rows, 255)  # one row per dw chunk: the H sweep's plans (R = 1)
            special = i % 4 == 1 and leaves_dw_checked(h)
            out.append(Case(fam, self._variant(fam, i), h, rows, blocks, special=special, why=why))
        return out

    def _representatives(self, fam: Family, rows: int) -> list[int]:
        """A few H per path of the family: the path's first and last H, and one in between."""
        spans: dict[str, list[int]] = {}
        for i, key in enumerate(self.planner.scan(fam.plan_class(), rows)):
            spans.setdefault(key[0], []).append(i + 1)
        out = []
        for hs in spans.values():
            out += sorted({hs[0], hs[len(hs) // 2], hs[-1]})
        return out

    def _first_stacked_rows(self, fam: Family, h: int) -> int:
        """The fewest rows (whole 64-row chunks) whose dw reduce at H = h takes the stacked form."""
        lo, hi = 128, 1 << 22  # chunk counts: lo fits at once, hi does not
        assert not self.planner.dw(fam, h, lo * 64)["stack"] and self.planner.dw(fam, h, hi * 64)["stack"]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.planner.dw(fam, h, mid * 64)["stack"] else (mid, hi)
        return hi * 64

    def rows_cases(self, fam: Family, groups: bool = True) -> list[Case]:
        """Rows and blocks around the block count, the group size, the ring and the dw chunks.

        ``groups`` (the backward, once per plan class): the first H of every group size the plan
        takes with 64-row chunks, at 128 G + 1 rows (R = G: groups of G rows, a 1-row chunk last)."""
        out: list[Case] = []
        i = 0

        def add(h, rows, blocks, why):
            nonlocal i
            if rows >= 1 and rows * h <= FAST_MAX_ELEMENTS:
                fast = rows * h > SWEEP_MAX_ELEMENTS
                special = i % 5 == 2 and not fast and leaves_dw_checked(h)
                out.append(Case(fam, self._variant(fam, i), h, rows, blocks, special=special, why=why, fast=fast))
                i += 1

        if fam.direction == "fwd":
            for h in self._representatives(fam, 3):
                p = self.planner.plan(fam, h, 3)
                g, nb = p.G, p.slots
                for k, rows in enumerate(sorted({1, 2, g - 1, g, g + 1, nb * g - 1, nb * g, nb * g + 1, 2 * nb * g + 1,
                                                 CORES - 1, CORES, CORES + 1, CORES * g + 1})):  # fmt: skip
                    add(h, rows, (1, 7, CORES)[k % 3], f"{p.path} G={g} slots={nb}: rows {rows}")
            return out
        # backward: one row per chunk below 256 rows (R 1 -> 2 at 256), then R = N // 128 rows per chunk up to
        # 64 at 8192; the larger R (groups within chunks) below. Long rows with many rows: rules only.
        for j, h in enumerate(self._representatives(fam, 3)):
            group = self.planner.plan(fam, h, 3).path == "group"
            for k, rows in enumerate((1, 2, CORES - 1, CORES, CORES + 1, 255, 256, 257, 8191, 8192, 8193)):
                # R = 64 at the family's first H (a few elements a row); long rows: one dw chunk a row
                if rows < CORES + 2 or (group and (rows < 8191 or j == 0)):
                    add(h, rows, (1, 7, CORES)[(j + k) % 3], f"dw chunks: rows {rows}")
        if fam.need_dw and fam.w is not None:
            # the dw reduce's stacked form (a slice's partials do not fit at once): its first chunk count
            h = self._representatives(fam, 3)[0]
            rows = self._first_stacked_rows(fam, h)
            add(h, rows, CORES, f"dw reduce stacked: rows {rows}")
            # its tree with no partial folded into the leaves (chunks a power of two), and with one
            leaves = 1 << ((rows // 64).bit_length() - 1)
            for chunks, folded in ((2 * leaves, "none"), (2 * leaves + 1, "one")):
                add(h, chunks * 64, CORES, f"dw reduce stacked, {folded} folded: rows {chunks * 64}")
        if groups:
            first: dict[int, int] = {}  # group size -> its first H with 64-row chunks
            last: dict[int, int] = {}  # and its last
            for j, key in enumerate(self.planner.scan(fam.plan_class(), 8192, group_only=True)):
                first.setdefault(key[1], j + 1)
                last[key[1]] = j + 1
            for g, h in first.items():
                if g > 1:
                    add(h, 128 * g + 1, (2, CORES)[g % 2], f"group of {g} rows: rows {128 * g + 1}")
            # several groups in a chunk (made even: 64 rows as ceil(64 / G) groups) need R = 64, 8193 rows:
            # too many to run at every size; four group sizes that do not divide 64, at their last H
            uneven = [g for g in first if 64 % g != 0]
            for g in uneven[:: max(1, len(uneven) // 4)][:4]:
                add(last[g], 8193, CORES, f"groups of {g} rows in 64-row chunks: rows 8193")
        return out

    def chunk_cases(self, fam: Family) -> list[Case]:
        """The backward's structures at R rows per dw chunk (``Planner.chunk_points``), at 128 R + 1 rows
        (R rows a chunk, a 1-row chunk last). Each change goes to one family of the plan class in turn,
        both its sides to the same one: the families of a class share the plan."""
        if fam.direction != "bwd":
            return []
        peers = [f for f in families() if f.plan_class() == fam.plan_class()]
        out: list[Case] = []
        points = self.planner.chunk_points(fam.plan_class())
        for i, (h, r, why) in enumerate(points):
            if (i // 2) % len(peers) != peers.index(fam):
                continue
            rows = MIN_CHUNKS * r + 1
            fast = rows * h > SWEEP_MAX_ELEMENTS
            special = i % 8 == 1 and not fast and leaves_dw_checked(h)
            out.append(Case(fam, self._variant(fam, i // 2), h, rows, (2, 7)[(i // 2) % 2], special=special, why=why,
                            fast=fast))  # fmt: skip
        return out

    def row_chunk_cases(self, fam: Family) -> list[Case]:
        """The backward's row-at-a-time paths (tiled, stream: ``path_starts`` past the group path) at dw
        chunks of several rows, whose plan does not depend on the chunk rows R: only the row count makes
        R > 1 (rows >= 2 MIN_CHUNKS), which the H sweep's and ``rows_cases``' few rows never reach there.
        At the path's first H (its fewest elements), MIN_CHUNKS R + R - 1 rows (MIN_CHUNKS chunks of R
        rows and a short one of R - 1) on 2, 7 or CORES blocks by turns (129 chunks: the first blocks sum
        one chunk more, so the tiled path sheds dx):

        - R = 2, a one-row chunk last, in every family, in full (the fewest rows that do it, whatever H);
        - R = 3, a chunk of two rows last, in full, and the largest R (MAX_CHUNK_ROWS at most) whose rows
          stay within FAST_MAX_ELEMENTS, rules only: each in one family of the plan class in turn;
        - the stream path at R = MAX_CHUNK_ROWS where that largest R is less, rules only, within the larger
          STREAM_FULL_CHUNK_MAX_ELEMENTS (``make sweep`` only: the CI sample draws no rules-only case)."""
        if fam.direction != "bwd":
            return []
        peers = [f for f in families() if f.plan_class() == fam.plan_class()]
        turn = peers.index(fam)
        out: list[Case] = []
        for path, h in path_starts(self.planner, fam).items():
            if path == "group":
                continue
            r_max = min(MAX_CHUNK_ROWS, (FAST_MAX_ELEMENTS // h + 1) // (MIN_CHUNKS + 1))
            picks = [(2, False)]
            if turn == (path == "stream") % len(peers):
                picks.append((3, False))
            if turn == (1 + (path == "stream")) % len(peers) and r_max > 3:
                picks.append((r_max, True))
            full_rows = MIN_CHUNKS * MAX_CHUNK_ROWS + MAX_CHUNK_ROWS - 1
            if (path == "stream" and r_max < MAX_CHUNK_ROWS and turn == 3 % len(peers)
                    and full_rows * h <= STREAM_FULL_CHUNK_MAX_ELEMENTS):  # fmt: skip
                picks.append((MAX_CHUNK_ROWS, True))
            for r, fast in picks:
                rows = MIN_CHUNKS * r + r - 1
                i = len(out) + turn
                blocks = (2, 7, CORES)[i % 3]
                p = self.planner.plan(fam, h, rows, blocks)
                assert p.path == path and p.chunk_rows == r and p.chunks == MIN_CHUNKS + 1, (fam.name, h, rows, p)
                # a plan that R changed would need its changes drawn, as chunk_cases draws the group path's
                assert p.key() == self.planner.plan(fam, h, 3).key(), (fam.name, h, rows, p)
                special = i % 4 == 1 and not fast and leaves_dw_checked(h)
                why = f"{path}: dw chunks of {r} rows, the last of {r - 1}"
                out.append(Case(fam, self._variant(fam, i), h, rows, blocks, special=special, why=why, fast=fast))
        return out

    def all(self) -> list[Case]:
        out, classes = [], set()
        for fam in families():
            first = fam.plan_class() not in classes
            classes.add(fam.plan_class())
            out += self.h_sweep(fam) + self.rows_cases(fam, groups=first) + self.chunk_cases(fam)
            out += self.row_chunk_cases(fam)
        return out + self.limit_cases()

    def limit_cases(self) -> list[Case]:
        """The H limit itself, rules only (minutes each: the stream path's 2^19 tiles a row), 2 rows (two
        dw chunks: the workspace and the dw reduce run too): a 16-bit forward and backward with a weight,
        dx and dw. Too large for any data; the emulation's counts-only mode needs none."""
        picked = [f for f in families() if f.x == f.w == "bfloat16" and not f.residual
                  and (f.direction == "fwd" or (f.need_dx and f.need_dw))]  # fmt: skip
        why = "the H limit (kMaxHidden): rules only"
        return [Case(f, f.variants()[0], MAX_HIDDEN, 2, CORES, why=why, fast=True) for f in picked]


#: Rows of at most this many elements are always checked against the scalar oracle;
#: longer ones in one case of ORACLE_EVERY (the oracle is scalar Python: ~10 us an element).
ORACLE_ALWAYS_H = 1024
ORACLE_EVERY = 8
#: dw is checked against the oracle where all rows hold at most this many elements.
ORACLE_DW_ELEMENTS = 8_192


def oracle_rows(case: Case) -> list[int]:
    """The rows of ``case`` whose outputs are also held to the scalar oracle."""
    if case.hidden > ORACLE_ALWAYS_H and (case.hidden * 31 + case.rows) % ORACLE_EVERY != 0:
        return []
    return sorted({case.rows - 1, 0 if case.special else case.rows - 1})


def cost(case: Case) -> float:
    """Seconds a case takes in a worker on this CPU, roughly (emu, torch path, compares, oracle rows)."""
    bwd = case.family.direction == "bwd"
    if case.fast:
        return 0.5 + case.elements * (0.3e-6 if bwd else 0.15e-6)
    seconds = 0.02 + case.elements * 0.5e-6
    oracle_elements = len(oracle_rows(case)) * case.hidden
    if bwd and case.family.need_dw and case.variant.weight is not None and case.elements <= ORACLE_DW_ELEMENTS:
        oracle_elements += case.elements
    return seconds + oracle_elements * (5e-6 if bwd else 8e-6)


def row_chunk_kind(case: Case) -> str | None:
    """A ``Cases.row_chunk_cases`` case's path and chunk rows ("stream: dw chunks of 2 rows"), else None."""
    head, sep, _ = case.why.partition(", the last of ")
    return head if sep and ": dw chunks of " in head else None


def sample(cases: list[Case], seed: int, budget_s: float) -> list[Case]:
    """A seeded subset of ``cases`` within ``budget_s`` (by ``cost``), spread over families and over what
    the cases were drawn for. First one random case of each kind of ``row_chunk_kind`` (path and chunk
    rows: the tiled and stream backward at dw chunks of several rows, which need 2 MIN_CHUNKS rows and
    more, seconds a case: one each, not one per family); then round-robin over the families, each turn
    a random case of a stratum (path limit, plan change, tile tail, rows, group chunks) not drawn yet
    for that family."""
    rng = random.Random(seed)
    by_family: dict[Family, dict[str, list[Case]]] = {}
    by_kind: dict[str, list[Case]] = {}
    for c in cases:
        if c.fast:
            continue
        kind = row_chunk_kind(c)
        if kind is not None:
            by_kind.setdefault(kind, []).append(c)
            continue
        stratum = ("limit" if "limit" in c.why else "tail" if c.why.startswith("last tile")
                   else "chunks" if c.why.startswith("chunks of") else "rows" if "rows" in c.why
                   else "change")  # fmt: skip
        by_family.setdefault(c.family, {}).setdefault(stratum, []).append(c)
    for strata in by_family.values():
        for lst in strata.values():
            rng.shuffle(lst)
    picked: list[Case] = []
    for kind in sorted(by_kind):  # a quarter of the budget at most for them all
        fits = [c for c in by_kind[kind] if cost(c) <= budget_s / (4 * len(by_kind))]
        if fits:
            picked.append(rng.choice(fits))
    spent = sum(cost(c) for c in picked)
    fams = list(by_family)
    rng.shuffle(fams)
    turn = 0
    while fams:
        for fam in list(fams):
            strata = by_family[fam]
            names = [n for n in ("limit", "tail", "change", "rows", "chunks") if strata.get(n)]
            if not names:
                fams.remove(fam)
                continue
            c = strata[names[turn % len(names)]].pop()
            if spent + cost(c) > budget_s:
                continue
            picked.append(c)
            spent += cost(c)
        turn += 1
        if spent >= budget_s * 0.999 or turn > 10_000:
            break
    return picked
