"""The real kernel through the emulation on cases drawn from its own planner (tests/support/plan_cases.py),
bit for bit against the torch path and the scalar oracle. The cases run in worker processes
(tests/support/sweep.py), so a rule the emulation aborts on is a failure naming the case and the rule.

``make sweep`` runs every case; here CI runs a seeded sample bounded by its cost, and a few
structures on purpose.
"""

from __future__ import annotations

import os
import re

import pytest

import plan_cases
import sweep
from plan_cases import Case, Family

#: Seconds of worker time the CI sample may take (two workers: about half of it in wall time).
SAMPLE_BUDGET_S = 100.0
JOBS = 2


@pytest.fixture(scope="module")
def planner():
    from ascend_rmsnorm.backends import emu

    return plan_cases.Planner(emu.library())


@pytest.fixture(scope="module")
def all_cases(planner):
    return plan_cases.Cases(planner).all()


def _assert_none_failed(cases: list[Case]) -> None:
    failures = sweep.run(cases, JOBS)
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(map(str, failures[:20]))


def test_short_last_tiles_keep_every_operand_aligned(planner):
    """A last tile of 9..16 elements on the tiled and stream paths: the tree's first level adds
    element 8 onward, 16 bytes into a 32-byte block of a 16-bit row (every dtype, both directions)."""
    cases = []
    for fam in plan_cases.families():
        if fam.residual or (fam.direction == "bwd" and not fam.need_dx):
            continue
        keys = planner.scan(fam.plan_class(), 3)
        for path in ("tiled", "stream"):
            hs = [h for h in range(plan_cases.TILE + 9, len(keys) + 1)
                  if keys[h - 1][0] == path and 9 <= plan_cases.last_tile(h) <= 16]  # fmt: skip
            for h in hs[(len(cases) % 2) * (len(hs) - 1) :][:1]:  # the first or the last, in turn
                cases.append(Case(fam, fam.variants()[len(cases) % len(fam.variants())], h, 2, 1,
                                  why=f"{path}: last tile {plan_cases.last_tile(h)}"))  # fmt: skip
    assert {c.why.split(":")[0] for c in cases} == {"tiled", "stream"}
    _assert_none_failed(cases)


def test_last_tiles_shorter_than_the_lanes(planner):
    """A last tile of 1..7 elements on the tiled and stream paths: its tree has no level, and the lanes
    it does not have read the -0 cell (common/numerics.h OffsetsTiles, fwd/forward_stream.h,
    bwd/backward_stream.h PadLanes). Each direction and path takes every such length, the families in
    turn, at the path's first H with that last tile."""
    TILE = plan_cases.TILE
    cases = []
    for direction in ("fwd", "bwd"):
        fams = [f for f in plan_cases.families() if f.direction == direction and f.need_dx]
        for path in ("tiled", "stream"):
            for r in range(1, 8):
                for i in range(len(fams)):  # the next family (from a rotating start) with such an H
                    fam = fams[(len(cases) * 5 + i) % len(fams)]
                    keys = planner.scan(fam.plan_class(), 3)
                    hs = [h for h in range(TILE + r, len(keys) + 1, TILE) if keys[h - 1][0] == path]
                    if hs:
                        v = fam.variants()[r % len(fam.variants())]
                        cases.append(Case(fam, v, hs[0], 2, 1, why=f"{path}: last tile {r}"))
                        break
    assert len(cases) == 4 * 7, [c.label() for c in cases]
    _assert_none_failed(cases)


def _constant(name: str) -> int:
    """An integer constant of common/constants.h (``constexpr ... name = N;``)."""
    from ascend_rmsnorm.backends import emu

    src = (emu.KERNELS / "common" / "constants.h").read_text()
    return int(re.search(rf"\b{name} = (\d+);", src).group(1))


def test_group_stripes_end_at_the_repeat_stride_limit(planner):
    """A one-tile group is worked by 64-column stripes over its rows, the row pitch P (x's elements,
    32-byte aligned) a repeat stride of P / 8 blocks, while that fits kMaxRepStride (an 8-bit field;
    common/ub_plan.h PlanCommon); past it, row by row. The widest pitch with stripes and the next H,
    groups of several rows, in each direction and x dtype (the families in turn)."""
    limit = _constant("kMaxRepStride")
    cases = []
    for direction in ("fwd", "bwd"):
        for x in ("float32", "float16", "bfloat16"):
            fams = [f for f in plan_cases.families() if f.direction == direction and f.x == x]
            fam = fams[len(cases) % len(fams)]
            align = 32 // plan_cases.SIZE[x]
            widest = (8 * limit + 7) // align * align  # the widest pitch P with P / 8 <= limit
            for h in (widest, widest + 1):
                rows = 3 if direction == "fwd" else plan_cases.MIN_CHUNKS * 2 + 1  # dw chunks of 2 rows
                p = planner.plan(fam, h, rows, 1)
                assert p.path == "group" and p.G > 1, (fam.name, h, p)
                rows = max(rows, 2 * p.G + 1)
                cases.append(Case(fam, fam.variants()[len(cases) % len(fam.variants())], h, rows, 1,
                                  why=f"group stripes limit {widest}{h - widest:+d}"))  # fmt: skip
    _assert_none_failed(cases)


def test_every_path_once_per_family(planner):
    """The first H of every path of every family, a few rows over two blocks: e.g. the backward
    stream path's first pass, which once asked a default-constructed LocalTensor whether to add dw."""
    cases = []
    for fam in plan_cases.families():
        for path, h in plan_cases.path_starts(planner, fam).items():
            v = fam.variants()[len(cases) % len(fam.variants())]
            cases.append(Case(fam, v, h, 3, 2, special=len(cases) % 3 == 0, why=f"first H on {path}"))
    _assert_none_failed(cases)


def _ahead_slots() -> int:
    """kAheadSlots of common/ub_plan.h: the ring slots from which the forward looks ahead (16-bit x)."""
    from ascend_rmsnorm.backends import emu

    src = (emu.KERNELS / "common" / "ub_plan.h").read_text()
    return int(re.search(r"kAheadSlots = (\d+);", src).group(1))


def test_forward_look_ahead_in_every_16_bit_family(planner):
    """The forward group path with kAheadSlots ring slots or more issues a group's sums beside the group
    before's rstd chain (fwd/forward_group.h): every 16-bit family (residual, fp32 weight, fp32 y) at its
    smallest and largest such H, rows giving the ring a wrap and a short last group, on one and on two
    blocks. fp32 x never takes such a plan."""
    slots = _ahead_slots()
    cases = []
    for fam in plan_cases.families():
        if fam.direction != "fwd":
            continue
        keys = planner.scan(fam.plan_class(), 3, group_only=True)
        ahead = [h for h in range(1, len(keys) + 1) if keys[h - 1][2] >= slots]
        if fam.x == "float32":
            assert not ahead, fam.name
            continue
        assert ahead, fam.name
        for h in sorted({ahead[0], ahead[-1]}):
            p = planner.plan(fam, h, 3)
            for blocks in (1, 2):
                rows = blocks * (p.slots * p.G + p.G // 2 + 1)
                v = fam.variants()[len(cases) % len(fam.variants())]
                cases.append(Case(fam, v, h, rows, blocks, special=len(cases) % 2 == 0,
                                  why=f"look-ahead G={p.G} slots={p.slots}"))  # fmt: skip
    _assert_none_failed(cases)


def _add_lag_case(planner, cases: list, fam, h: int, rows: int, blocks: int, want) -> None:
    """One emulated case of ``fam`` at H ``h``, after checking that its plan is the lag ``want`` says."""
    p = planner.plan(fam, h, rows, blocks)
    assert want(p), (fam.name, h, p)
    v = fam.variants()[len(cases) % len(fam.variants())]
    cases.append(Case(fam, v, h, rows, blocks, special=len(cases) % 2 == 0,
                      why=f"lag {p.lag} G={p.G} slots={p.slots}"))  # fmt: skip


def _lag_families(planner, rows: int):
    """(family, plan keys of H 1..) of every 16-bit backward family with dx and no residual gradient,
    the ones whose plans may lag; asserts that no other family's plan lags."""
    for fam in plan_cases.families():
        if fam.direction != "bwd" or not fam.need_dx:
            continue
        keys = planner.scan(fam.plan_class(), rows, group_only=True)
        if "float32" in (fam.x, fam.out) or fam.residual:
            assert not any(k[6] for k in keys), fam.name
            continue
        yield fam, keys


def _bf16_with_dx_and_dw() -> plan_cases.Family:
    """The backward family of bf16 x, weight and dy with dx and dw (one of the drawn families)."""
    fam = plan_cases.Family("bwd", "bfloat16", "bfloat16", "bfloat16", need_dw=True)
    assert fam in plan_cases.families()
    return fam


def _by_turns(family: int, point: int) -> int:
    """Blocks for a family's ``point``-th H: one or two, swapped from one family to the next, so an H
    runs on one block (a block owns every dw chunk) in some families and on two (a heavy block that
    sheds dx, ShareDx) in others. The families' H points are not all alike (a family without a weight
    lags at other H), and a point one family alone has in a dtype runs on one block count in that dtype:
    bf16 and fp16 lag at the same H, and the two take it on different counts (``_assert_both_block_counts``)."""
    return 1 + (family + point) % 2


def _assert_both_block_counts(points: list[tuple[int, int]]) -> None:
    """Each H ran on one block and on two, in one family or another (of either 16-bit dtype)."""
    blocks: dict[int, set[int]] = {}
    for h, b in points:
        blocks.setdefault(h, set()).add(b)
    assert blocks and all(b == {1, 2} for b in blocks.values()), blocks


def test_backward_lag_over_groups_of_several_rows(planner):
    """The backward's lag (bwd/backward_group.h) with groups of several rows: a group's steps after its
    tree run in the next group's windows, the stripe tree's levels included. Every 16-bit family with
    dx at the smallest and largest H whose plan lags with G > 1, and the largest with stripes (a pitch
    of at most 2040 elements), at a row count of several dw chunks with a short last chunk, on one
    block or on two by turns (``_by_turns``). fp32 x or dy never lags."""
    rows = 8 * 128 + 5  # dw chunks of 8 rows (tiling.h DwChunkRows), the last one 5
    cases, points = [], []
    for n, (fam, keys) in enumerate(_lag_families(planner, rows)):
        lagged = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] and keys[h - 1][1] > 1]
        assert lagged, fam.name
        striped = [h for h in lagged if h <= 2040]
        for i, h in enumerate(sorted({lagged[0], lagged[-1], *striped[-1:]})):
            blocks = _by_turns(n, i)
            points.append((h, blocks))
            _add_lag_case(planner, cases, fam, h, rows, blocks, lambda p: p.lag and p.G > 1)
    _assert_both_block_counts(points)
    _assert_none_failed(cases)


def test_backward_lag_with_one_widened_dy(planner):
    """The lag where a second group's widened dy does not fit (kernels/common/ub_plan.h LAG_ONE_DY): the
    next group widens its dy only once the tail before has read its g there, so its front waits for
    that tail's Sub. Every 16-bit family with dx at the smallest and largest H whose plan lags so with
    groups of several rows, and with groups of one, on one block or on two by turns (``_by_turns``),
    at a row count of several dw chunks with a short last chunk."""
    rows = 8 * 128 + 5
    cases, points = [], []
    for n, (fam, keys) in enumerate(_lag_families(planner, rows)):
        one_dy = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] == 2]
        several = [h for h in one_dy if keys[h - 1][1] > 1]
        single = [h for h in one_dy if keys[h - 1][1] == 1]
        assert several and single, fam.name
        for i, h in enumerate(sorted({several[0], several[-1], single[0], single[-1]})):
            blocks = _by_turns(n, i)
            points.append((h, blocks))
            _add_lag_case(planner, cases, fam, h, rows, blocks, lambda p: p.lag == 2)
    _assert_both_block_counts(points)
    _assert_none_failed(cases)


def test_backward_lag_with_one_widened_dy_on_two_ring_slots(planner):
    """LAG_ONE_DY with groups of several rows on two ring slots (tiling.h BwdChoose: one slot fewer than
    the group plan's three), which only dw chunks of 11 rows or more reach, so neither the test above
    (8-row chunks) nor the planner-drawn sweep runs it: a slot's next group loads only once this group
    has widened its dy, after the tail before's Sub. Every 16-bit family with dx at 23-row chunks, at
    the smallest H so planned (stripe groups that make their own gather, EarlySteps) and the largest
    (groups that do not), on one block and on two (one of them heavy: it sheds dx, ShareDx)."""
    rows = 23 * 128 + 5  # dw chunks of 23 rows (tiling.h DwChunkRows), the last one 5
    cases = []
    for fam, keys in _lag_families(planner, rows):
        two = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] == 2 and keys[h - 1][1] > 1 and keys[h - 1][2] == 2]
        assert two, fam.name
        for i, h in enumerate(sorted({two[0], two[-1]})):
            blocks = 1 + (len(cases) // 2 + i) % 2
            _add_lag_case(planner, cases, fam, h, rows, blocks, lambda p: p.lag == 2 and p.G > 1 and p.slots == 2)
    assert cases
    _assert_none_failed(cases)


def shed_groups(chunks: int, blocks: int, gpc: int, rows: int, G: int, sx: int, sdy: int) -> int:
    """The groups of each heavy block whose dx the light blocks make (docs/design.md, "dx shared out"),
    restated from the design's rule: a group without dx costs a heavy block half a group, and the rows
    read twice move at most 1/21 of the backward's least bytes."""
    heavy, light = chunks % blocks, blocks - chunks % blocks
    if chunks < blocks or heavy == 0:
        return 0
    even = 2 * gpc * light // (light + 2 * heavy)
    cap = rows * (2 * sx + sdy) // (21 * (sx + sdy) * heavy * G)
    return min(even, cap, (chunks // blocks + 1) * gpc)


def test_backward_lag_at_fewer_rows_per_group(planner):
    """Where neither lag fits at the host's group size and the group plan has three ring slots or fewer,
    the host lags at fewer rows per group (tiling.h BwdChoose): design.md's example, bf16 with a weight
    and dw at H 3072 and 4096 rows, lags with one row a group (two without the lag). Then every 16-bit
    family with dx at 23-row chunks (a prime: several-row groups never divide it evenly), on
    one block and on two: the smallest H of its one-row lag, and the largest H up to 1024 whose lag has
    several rows a group on two ring slots."""
    p = planner.plan(_bf16_with_dx_and_dw(), 3072, 4096)
    assert p.path == "group" and p.lag == 1 and p.G == 1, p
    rows = 23 * 128 + 5
    cases = []
    for fam, keys in _lag_families(planner, rows):
        one = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] == 1 and keys[h - 1][1] == 1]
        two = [
            h
            for h in range(1, min(len(keys), 1024) + 1)
            if keys[h - 1][6] == 1 and keys[h - 1][1] > 1 and keys[h - 1][2] == 2
        ]
        assert one and two, fam.name
        for i, h in enumerate((one[0], two[-1])):
            blocks = 1 + (len(cases) // 2 + i) % 2
            _add_lag_case(planner, cases, fam, h, rows, blocks, lambda p: p.lag == 1)
    assert cases
    _assert_none_failed(cases)


def test_backward_lag_takes_a_second_dw_accumulator_before_a_fourth_ring_slot(planner):
    """Under the lag two dw accumulators come before a fourth ring slot (tiling.h BwdChoose, lagAt):
    bf16 with a weight and dw at 1024x2048 lags with three slots and two accumulators where four slots
    and one fit too. Then every 16-bit family with dx and dw, at 8-row chunks with a short last one:
    the smallest H whose lag plan has two accumulators on three ring slots with groups of several rows
    (G 8 at H 545, four slots and one accumulator before), and the largest with groups of one (H 3840,
    likewise), one on one block and the other on two (a heavy block then sheds dx, ShareDx): a chunk's
    partial leaves while the next one adds up."""
    p = planner.plan(_bf16_with_dx_and_dw(), 2048, 1024)
    assert p.path == "group" and p.lag == 1 and p.slots == 3 and p.accs == 2, p
    rows = 8 * 128 + 5
    cases = []
    for fam, keys in _lag_families(planner, rows):
        if not fam.need_dw:
            continue
        two = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] and keys[h - 1][7] == 2 and keys[h - 1][2] == 3]
        several = [h for h in two if keys[h - 1][1] > 1]
        single = [h for h in two if keys[h - 1][1] == 1]
        assert several and single, fam.name
        for i, h in enumerate((several[0], single[-1])):
            blocks = 1 + (len(cases) // 2 + i) % 2
            _add_lag_case(planner, cases, fam, h, rows, blocks, lambda p: p.lag and p.accs == 2 and p.slots == 3)
    assert {c.blocks for c in cases} == {1, 2}
    _assert_none_failed(cases)


def test_backward_shares_dx_out_of_heavy_blocks(planner):
    """When the blocks do not divide the dw chunks, the heavy blocks' dx is partly made by the light
    ones (bwd/backward_base.h, ShareDx): every family with dx and dw and no residual gradient, at
    the group path's first lag H, its last lag H with G > 1 and its last H (no lag), and at the tiled
    path's first H (fewer dy slots than x slots there), on 6 blocks (each light block takes one heavy
    block's groups) and 7 (a light block's share spans two heavy blocks), with a short last chunk.
    The bits are the torch path's; the rows read twice are the ones the rule names, counted by the
    model's fast mode."""
    from ascend_rmsnorm.perf import model as perf_model

    rows = 8 * 128 + 5  # 129 dw chunks of 8 rows, the last one 5
    cases, counted = [], 0
    for fam in plan_cases.families():
        if fam.direction != "bwd" or not (fam.need_dx and fam.need_dw and fam.w) or fam.residual:
            continue
        keys = planner.scan(fam.plan_class(), rows, group_only=True)
        lag1 = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] and keys[h - 1][1] == 1]
        lagG = [h for h in range(1, len(keys) + 1) if keys[h - 1][6] and keys[h - 1][1] > 1]
        tiled = plan_cases.path_starts(planner, fam)["tiled"]
        for h in sorted({*lag1[:1], *lagG[-1:], len(keys), tiled}):
            blocks = 6 + len(cases) % 2
            p = planner.plan(fam, h, rows, blocks)
            assert p.path == ("tiled" if h == tiled else "group"), (fam.name, h, p)
            gpc = -(-p.chunk_rows // p.G)
            shed = shed_groups(p.chunks, blocks, gpc, rows, p.G, plan_cases.SIZE[fam.x], plan_cases.SIZE[fam.out])
            assert shed > 0, (fam.name, h, p)
            v = fam.variants()[len(cases) % len(fam.variants())]
            cases.append(Case(fam, v, h, rows, blocks, special=len(cases) % 3 == 0,
                              why=f"dx shared: {shed} groups of {p.G} a heavy block, lag {p.lag}"))  # fmt: skip
            if fam.x == fam.w == fam.out and fam.x != "float16":
                counted += 1
                rec = perf_model.model(rows, h, fam.x, "bwd", cores=blocks, fast=True, ablate=False)
                twice = shed * (p.chunks % blocks) * p.G  # heavy blocks' groups are whole: no short last chunk
                n = rows * h * plan_cases.SIZE[fam.x]
                assert rec.launches[0].gm["x"].read == n + twice * h * plan_cases.SIZE[fam.x], (fam.name, h)
                assert rec.launches[0].gm["rstd"].read == 4 * (rows + twice), (fam.name, h)
    assert {c.family.x for c in cases} == {"float32", "bfloat16", "float16"} and counted >= 6
    _assert_none_failed(cases)


BUDGET = 188160  # dav-2201: 192 KB - 256 B - 8 KB reserved


def _classes():
    return sorted({fam.plan_class(): fam for fam in plan_cases.families()}.items())


def test_no_plan_exceeds_the_ub_budget(planner):
    """InitBuffer checks nothing on the NPU (asc-devkit impl/basic_api/kernel_tpipe_impl.h checks the
    pool only under ASCENDC_CPU_DEBUG): the host plan is the only guard. Every plan the planner makes,
    of every class and H up to the scan's end and at every chunk size (the group path's, the only one
    that R changes), fits; so does every dw reduce."""
    for pc, fam in _classes():
        worst = max(key[-1] for key in planner.scan(pc, 3))
        assert 0 < worst <= BUDGET, (fam.name, worst)
        for r in range(2, plan_cases.MAX_CHUNK_ROWS + 1) if fam.direction == "bwd" else ():
            worst = max(key[-1] for key in planner.scan(pc, plan_cases.MIN_CHUNKS * r, group_only=True))
            assert 0 < worst <= BUDGET, (fam.name, r, worst)
        for h in (plan_cases.H_SCAN * 4 + 13, (1 << 30) + 1, plan_cases.MAX_HIDDEN):  # streamed
            assert 0 < planner.plan(fam, h, 3).ub <= BUDGET
        assert planner.plan(fam, plan_cases.MAX_HIDDEN + 1, 3).status == 5  # above the limit: refused
        if fam.direction == "bwd" and fam.need_dw:
            for rows in (2, 129, 256, 4095 * 64 + 1, 1 << 22):
                for h in (1, 100, 4097, 1 << 20, plan_cases.MAX_HIDDEN):
                    d = planner.dw(fam, h, rows)
                    assert d["status"] == 0 and 0 < d["ub"] <= BUDGET, (fam.name, h, rows, d)


#: DataCopyExtParams' blockCount range, [0, 4095] (asc-devkit DataCopyPad（GMToUB非对齐数据搬运）.md 表5;
#: the kernels' kMaxBursts).
MAX_BURSTS = 4095


def test_dw_reduce_of_more_chunks_than_one_dma_has_bursts(planner):
    """The dw reduce's all-at-once form reads a slice whose width is not a whole number of 32-byte blocks
    one burst per chunk (bwd/dw_reduce.h ReduceAll), 4095 bursts per DMA at most: past that many chunks a
    slice takes two DMAs, the second into UB and from GM at its first chunk's place. The fewest chunks
    that do it, at the family's smallest H with such a slice beside a whole one, while the planner still
    reads the slice at once (the drawn cases have at most 255 chunks in the all-at-once form). The reduce
    reads fp32 partials whatever the weight: one 16-bit family and the fp32 one."""
    cases = []
    for fam in plan_cases.families():
        if fam.direction != "bwd" or not fam.need_dw or fam.w != fam.x or fam.residual or not fam.need_dx:
            continue
        if fam.x == "float16":
            continue
        rows = (MAX_BURSTS + 1) * plan_cases.MAX_CHUNK_ROWS + 1  # 4097 chunks, the last of one row
        h = next(h for h in range(9, 64) if h % 8 and planner.dw(fam, h, rows)["stack"] == 0)
        d = planner.dw(fam, h, rows)
        assert d["status"] == 0 and d["slice"] % 8 == 0 < h % d["slice"] and d["blocks"] >= 2, (fam.name, h, d)
        why = f"dw reduce at once: {rows // 64 + 1} chunks, a slice of {h % d['slice']} columns"
        cases.append(Case(fam, fam.variants()[len(cases) % len(fam.variants())], h, rows, 7, why=why))
    assert {c.family.x for c in cases} == {"float32", "bfloat16"}
    _assert_none_failed(cases)


def test_no_whole_row_copy_exceeds_a_16_bit_burst(planner):
    """The group path copies whole rows (common/copy.h LoadRows/StoreRows), one burst a row whose byte
    length is DataCopyParams' uint16_t blockLen: a row of 65536 bytes or more would be cut short with no
    error anywhere (the cast happens before the struct exists). The UB keeps every group path's H below
    that at the widest element it copies a row of (x, y, dy, dx, the residual and its gradient: x's or
    the output's dtype); the weight and the other paths' rows go in tiles of at most 4096 elements."""
    for pc, fam in _classes():
        width = max(plan_cases.SIZE[fam.x], plan_cases.SIZE[fam.out])
        for rows in (3, 8192) if fam.direction == "bwd" else (3,):
            group_h = [h for h, key in enumerate(planner.scan(pc, rows), start=1) if key[0] == "group"]
            assert group_h and max(group_h) * width <= 0xFFFF, (fam.name, rows, max(group_h), width)


def test_each_paths_largest_plan_is_what_a_block_reserves(planner):
    """For every class and path, the H with the largest UB plan: the emulation's record of what a block
    reserved (InitBuffer by InitBuffer, rounded as the TPipe rounds) equals the planner's figure."""
    import torch

    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as torch_backend

    from helpers import make_input, make_weight

    for pc, fam in _classes():
        if fam.residual and fam.direction == "bwd":
            continue  # the backward op takes the gradient; the rest of the plan is the same code
        keys = planner.scan(pc, 3)
        best: dict[str, int] = {}
        for h, key in enumerate(keys, 1):
            if key[-1] > keys[best.get(key[0], h) - 1][-1] or key[0] not in best:
                best[key[0]] = h
        for path, h in best.items():
            rows = 130 if fam.direction == "bwd" and h <= 8192 else 3  # several dw chunks: the reduce runs
            x = make_input(rows, h, getattr(torch, fam.x), seed=1, scale_rows=False)
            w = make_weight(h, getattr(torch, fam.w)) if fam.w else None
            mode = "llama" if fam.out != fam.x else "fp32"
            emu.reset_stats()
            k = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
            kw = k[fam.w] if fam.w else (k[fam.out] if fam.out != fam.x else k[fam.x])
            name = f"rmsnorm_{fam.direction}_{k[fam.x]}_{kw}_{k[fam.out]}"
            if fam.direction == "fwd":
                res = make_input(rows, h, x.dtype, seed=2) if fam.residual else None
                emu.BACKEND.forward(x, w, 1e-6, casting_mode=mode, residual=res)
            else:
                rstd = torch_backend.forward(x, w, 1e-6)[1]
                dy = make_input(rows, h, torch.float32, seed=3).to(getattr(torch, fam.out))
                emu.BACKEND.backward(dy, x, w, rstd, need_dx=fam.need_dx, need_dw=fam.need_dw)
                if fam.need_dw and w is not None and rows > 1:
                    assert emu.peak_ub(f"rmsnorm_dw_{kw}") == planner.dw(fam, h, rows)["ub"] <= BUDGET
            plan = planner.plan(fam, h, rows)
            assert plan.path == path
            assert emu.peak_ub(name) == plan.ub <= BUDGET, (fam.name, path, h)


def test_stacked_dw_reduce_reserves_what_the_planner_says(planner):
    """The dw reduce sizes its buffers itself (bwd/dw_reduce.h Process); the stacked form's, its two
    double-buffered loads and a stack row per tree level above the nodes and one more, are the
    planner's figure (DwPlanBytes) byte for byte: at the fewest rows that take that form, H = 1 (a slice
    of 8 columns), for an fp32 and a 16-bit weight (only the output buffer's bytes differ)."""
    import torch

    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as torch_backend

    from helpers import make_input, make_weight

    for w_dtype in ("float32", "bfloat16"):
        fam = next(f for f in plan_cases.families() if f.direction == "bwd" and f.x == f.w == f.out == w_dtype
                   and f.need_dw and not f.need_dx)  # fmt: skip
        rows = plan_cases.Cases(planner)._first_stacked_rows(fam, 1)
        d = planner.dw(fam, 1, rows)
        assert d["status"] == 0 and d["stack"] >= 2, d
        x = make_input(rows, 1, getattr(torch, w_dtype), seed=1, scale_rows=False)
        w = make_weight(1, getattr(torch, w_dtype))
        rstd = torch_backend.forward(x, w, 1e-6)[1]
        dy = make_input(rows, 1, torch.float32, seed=3).to(x.dtype)
        emu.reset_stats()
        emu.BACKEND.backward(dy, x, w, rstd, need_dx=False, need_dw=True)
        kw = {"float32": "f32", "bfloat16": "bf16"}[w_dtype]
        assert emu.peak_ub(f"rmsnorm_dw_{kw}") == d["ub"] <= BUDGET, (fam.name, rows, d)


def test_stacked_dw_reduce_folds_a_whole_node(planner):
    """The stacked dw reduce's node j holds tree leaves j, j + M, ... (M = leaves / group) and, where a
    partial lies a whole tree of leaves further on, that partial folded into its leaf: a node whose
    every leaf has one (bwd/dw_reduce.h Folded at the group) needs chunks > leaves + M (group - 1). The
    fewest such chunks with the stacked form, H = 1 (a slice of 8 columns), a one-row chunk last, dw bits
    against the torch path, for an fp32 and a 16-bit weight (the drawn and stacked cases stop short)."""
    import torch

    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as torch_backend

    from helpers import assert_same_bits, make_input, make_weight

    for w_dtype in ("float32", "bfloat16"):
        fam = next(f for f in plan_cases.families() if f.direction == "bwd" and f.x == f.w == f.out == w_dtype
                   and f.need_dw and not f.need_dx)  # fmt: skip
        first = plan_cases.Cases(planner)._first_stacked_rows(fam, 1) // plan_cases.MAX_CHUNK_ROWS
        for chunks in range(first, 4 * first):
            group = planner.dw(fam, 1, chunks * plan_cases.MAX_CHUNK_ROWS)["stack"]
            leaves = 1 << (chunks.bit_length() - 1)
            if group and chunks - leaves > leaves // group * (group - 1):
                break
        else:
            pytest.fail(f"no chunk count from {first} folds a whole node ({fam.name})")
        rows = (chunks - 1) * plan_cases.MAX_CHUNK_ROWS + 1
        d = planner.dw(fam, 1, rows)
        assert d["status"] == 0 and d["stack"] == group >= 2 and leaves // group >= 2, (chunks, d)
        dt = getattr(torch, w_dtype)
        x = make_input(rows, 1, dt, seed=5, scale_rows=False)
        w = make_weight(1, dt)
        rstd = torch_backend.forward(x, w, 1e-6)[1]
        dy = make_input(rows, 1, torch.float32, seed=6).to(dt)
        got = emu.BACKEND.backward(dy, x, w, rstd, need_dx=False, need_dw=True)
        want = torch_backend.backward(dy, x, w, rstd, need_dx=False, need_dw=True)
        assert_same_bits(got[1], want[1], f"dw of {chunks} chunks, {group} leaves a load ({w_dtype})")


def test_the_sample_is_seeded_bounded_and_spread(all_cases):
    picked = plan_cases.sample(all_cases, sweep.DEFAULT_SEED, SAMPLE_BUDGET_S)
    assert picked == plan_cases.sample(all_cases, sweep.DEFAULT_SEED, SAMPLE_BUDGET_S)
    assert sum(plan_cases.cost(c) for c in picked) <= SAMPLE_BUDGET_S
    assert {c.family for c in picked} == {c.family for c in all_cases}  # every family
    reasons = " ".join(c.why for c in picked)
    for word in ("limit", "last tile", "change", "rows", "chunks of"):
        assert word in reasons


def test_the_sample_runs_dw_chunks_of_several_rows_on_every_path(planner, all_cases):
    """The backward's tiled and stream paths take chunks of several rows only from 2 MIN_CHUNKS rows on
    (``Cases.row_chunk_cases``): the sample draws each kind of them, whatever its seed, so CI runs every
    path's chunk loop with full chunks of several rows and a short last one."""
    for seed in (sweep.DEFAULT_SEED, 0, 1, 2):
        picked = plan_cases.sample(all_cases, seed, SAMPLE_BUDGET_S)
        reached = set()
        for c in picked:
            if c.family.direction == "bwd":
                p = planner.plan(c.family, c.hidden, c.rows, c.blocks)
                last = c.rows - (p.chunks - 1) * p.chunk_rows
                if p.chunk_rows > 1 and last < p.chunk_rows:
                    reached.add((p.path, "one row last" if last == 1 else "several rows last"))
        want = {(path, last) for path in ("tiled", "stream") for last in ("one row last", "several rows last")}
        assert want <= reached, (seed, sorted(want - reached))


def test_the_sweep_runs_the_stream_path_at_full_dw_chunks_rules_only(planner, all_cases):
    """The stream path at MAX_CHUNK_ROWS rows per dw chunk (a chunk's rstd fills the kernel's per-row rstd
    buffers to their end) needs MIN_CHUNKS MAX_CHUNK_ROWS rows at H = 8705 and more, past FAST_MAX_ELEMENTS:
    ``make sweep`` draws it rules only (STREAM_FULL_CHUNK_MAX_ELEMENTS), with a short last chunk, and the
    CI sample never does (tens of millions of elements)."""
    full = []
    for c in all_cases:
        if c.family.direction == "bwd":
            p = planner.plan(c.family, c.hidden, c.rows, c.blocks)
            if p.path == "stream" and p.chunk_rows == plan_cases.MAX_CHUNK_ROWS:
                assert c.fast and c.rows % p.chunk_rows != 0, c.label()
                full.append(c)
    assert full
    # rules-only cases are never drawn (``plan_cases.sample``), whatever the seed
    assert set(full).isdisjoint(plan_cases.sample(all_cases, sweep.DEFAULT_SEED, SAMPLE_BUDGET_S))


def test_chunk_cases_reach_every_structure_a_dw_chunk_size_gives(planner, all_cases):
    """The backward's group plans at every R = 1..64 rows per dw chunk: each structure any of them takes
    (``plan_cases.structure``: several rows a group or one, ring slots, lag, dw accumulators...) is the
    plan of a drawn case, and each chunk case's own plan (its family, rows and blocks) is the one the
    scan at its R gave at its H."""
    drawn: dict[tuple, set] = {}
    for c in all_cases:
        if c.family.direction == "bwd":
            key = planner.plan(c.family, c.hidden, c.rows, c.blocks).key()
            drawn.setdefault(c.family.plan_class(), set()).add(plan_cases.structure(key))
        if c.why.startswith("chunks of"):
            r = c.rows // plan_cases.MIN_CHUNKS
            want = planner.scan(c.family.plan_class(), plan_cases.MIN_CHUNKS * r, group_only=True)[c.hidden - 1]
            assert planner.plan(c.family, c.hidden, c.rows, c.blocks).key() == want[:8], c.label()
    for pc, _ in _classes():
        if pc[0] != "bwd":
            continue
        taken = set()
        for r in range(1, plan_cases.MAX_CHUNK_ROWS + 1):
            taken |= {
                plan_cases.structure(k) for k in planner.scan(pc, max(3, plan_cases.MIN_CHUNKS * r), group_only=True)
            }
        assert taken <= drawn[pc], (pc, sorted(taken - drawn[pc]))


def test_the_sample_seed_set_for_the_run_survives_the_conftest(monkeypatch):
    """README: ASCEND_RMSNORM_SWEEP_SEED=N make test draws another sample. tests/conftest.py clears every
    ASCEND_RMSNORM_* variable before each test, so a seed read while the sample test runs was always
    the default: the other draw passed without running. sweep reads it as the run begins (at import)."""
    import importlib.util
    import sys

    assert "ASCEND_RMSNORM_SWEEP_SEED" not in os.environ  # what the conftest leaves a test
    monkeypatch.setenv("ASCEND_RMSNORM_SWEEP_SEED", "5")  # set for the run, as the README says
    spec = importlib.util.spec_from_file_location("sweep_imported_with_a_seed", sweep.__file__)
    fresh = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, fresh)  # its dataclasses look their module up
    spec.loader.exec_module(fresh)
    monkeypatch.delenv("ASCEND_RMSNORM_SWEEP_SEED")  # then cleared for the test, as the conftest does
    assert fresh.sample_seed() == 5 != sweep.DEFAULT_SEED


def test_planned_sample_equals_torch_and_oracle(all_cases):
    """The seeded CI sample (ASCEND_RMSNORM_SWEEP_SEED draws another)."""
    _assert_none_failed(plan_cases.sample(all_cases, sweep.sample_seed(), SAMPLE_BUDGET_S))


FAKE_WORKER = """
import json, os, sys, threading
P = "@sweep "
for line in sys.stdin:
    item = json.loads(line)
    why = item["case"]["why"]
    print(P + "start", item["i"], flush=True)
    if why == "chatty":
        print("a stray print on stdout", flush=True)
    if why == "hangs":
        threading.Event().wait()
    if why == "bad":
        sys.stderr.write("ascend-rmsnorm emu: rule violated: UB alignment\\n  Cast: src starts at UB byte 16\\n")
        sys.stderr.flush()
        os.abort()
    print(P + "ok", item["i"], flush=True)
    if why == "dies after":
        sys.stderr.write("abort at exit\\n")
        sys.exit(3)
"""


def test_a_dead_worker_names_its_case_and_the_rest_still_run(tmp_path):
    import sys

    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    fam = Family("fwd", "float32", "float32", "float32")
    cases = [Case(fam, fam.variants()[0], 100, 3, 2, why=w) for w in ("a", "bad", "b", "bad", "c")]
    seen = []
    failures = sweep.run(cases, 1, progress=lambda *a: seen.append(a), command=[sys.executable, str(script)])
    assert seen[-1] == (5, 5, 2)
    assert [f.case.why for f in failures] == ["bad", "bad"]
    assert all("rule violated: UB alignment" in f.message and "UB byte 16" in f.message for f in failures)


def test_a_hung_case_fails_as_hung_and_the_rest_still_run(tmp_path):
    """A case that never ends (a kernel looping for good) fails once past its limit, its worker killed;
    the cases after it run in a new worker. Only the hung case has a short limit here."""
    import sys

    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    fam = Family("fwd", "float32", "float32", "float32")
    cases = [Case(fam, fam.variants()[0], 100, 3, 2, why=w) for w in ("a", "hangs", "b", "c")]
    failures = sweep.run(
        cases, 1, command=[sys.executable, str(script)], limit=lambda c: 1.0 if c.why == "hangs" else 600.0
    )
    assert [(f.case.why, f.message) for f in failures] == [("hangs", "hung: no result after 1 s, its worker killed")]


def test_the_harness_reports_a_case_it_got_no_result_for(tmp_path):
    """No case passes unless its worker said so: a stray print is passed over, a worker that dies between
    cases fails the case before, one that cannot start fails every case, and an error in the harness
    itself leaves its cases failed, not dropped."""
    import sys

    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    fam = Family("fwd", "float32", "float32", "float32")
    cases = [Case(fam, fam.variants()[0], 100, 3, 2, why=w) for w in ("chatty", "a", "dies after", "b")]
    failures = sweep.run(cases, 1, command=[sys.executable, str(script)])
    assert [(f.case.why, "exited with 3 after this case" in f.message) for f in failures] == [("dies after", True)]
    failures = sweep.run(cases, 2, command=[sys.executable, "-c", "import sys; sys.exit(1)"])
    assert [f.case.why for f in failures] == [c.why for c in cases]
    assert all("exited with 1 before this case" in f.message for f in failures)
    failures = sweep.run(cases, 1, command=[sys.executable, "-c", "pass"])  # exits 0 having run nothing
    assert len(failures) == len(cases)
    failures = sweep.run(cases, 1, command=[str(tmp_path / "no-such-worker")])
    assert len(failures) == len(cases) and all("no result: FileNotFoundError" in f.message for f in failures)


def test_dw_of_negative_zero_terms_is_plus_zero_on_every_path(planner):
    """dy = +0 against an x < 0 in every element: each dw term dy * (x * rstd) is -0.0, and dw is +0.0
    (every dw chunk's sum starts from +0.0, docs/design.md §3; the torch path's bits), on every path of
    every family with dw, from one block (one chunk: dw is stored by the backward itself) and from two
    (the dw workspace and its reduce). A kernel that started a chunk's sum from the first term itself,
    or from -0.0, would give -0.0 here and nowhere in the random data the other cases draw."""
    import torch

    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as reference

    from helpers import assert_same_bits

    checked = 0
    for fam in plan_cases.families():
        if fam.direction != "bwd" or not (fam.need_dw and fam.w):
            continue
        for path, h in plan_cases.path_starts(planner, fam).items():
            v = fam.variants()[checked % len(fam.variants())]
            x = -(torch.rand(3, h, generator=torch.Generator().manual_seed(h)) + 0.5)
            x = x.to(getattr(torch, fam.x))
            w = torch.ones(h, dtype=getattr(torch, v.weight))
            rstd = reference.forward(x, w, 1e-6, casting_mode=v.mode, offset=v.offset)[1]
            case = Case(fam, v, h, 3, 1)
            dy = torch.zeros(3, h, dtype=sweep._dy_dtype(case, x, w))
            kw = {"casting_mode": v.mode, "offset": v.offset, "need_dx": fam.need_dx, "need_dw": True}
            if fam.residual:
                kw["grad_residual"] = torch.zeros_like(x)
            want = reference.backward(dy, x, w, rstd, **kw)[1]
            assert not torch.signbit(want.float()).any(), (fam.name, path)
            for blocks in (1, 2):
                got = emu.with_block_dim(blocks).backward(dy, x, w, rstd, **kw)[1]
                assert_same_bits(got, want, f"dw of -0.0 terms, {fam.name} H={h} ({path}) on {blocks} blocks")
            checked += 1
    assert checked >= 12
