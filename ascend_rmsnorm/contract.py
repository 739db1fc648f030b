"""The constants of the numerics contract (DESIGN.md §3), shared by every backend.

Changing any value here changes the bits every backend produces, so the kernel source
repeats them and a test checks the two agree.
"""

from __future__ import annotations

import math
import struct

import torch

#: Row tile for the sum of squares: a row is cut into tiles of this many elements.
TILE = 4096
#: Rows per dw chunk: chunk partials are summed in row order, then combined by the tree.
DW_CHUNK_ROWS = 64
#: Integer first guess of 1/sqrt(a): f32_from_bits(RSQRT_MAGIC - (bits(a) >> 1)).
RSQRT_MAGIC = 0x5F375A86
#: Newton steps after the first guess: t = y*y; t = h*t; t = 1.5 - t; y = y*t.
NEWTON_STEPS = 3

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Integer dtype codes of the kernel ABI (DESIGN.md §4).
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def to_f32(value: float) -> float:
    """Round a Python float to the nearest float32 (RNE) and return it as a Python float."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def inv_hidden(hidden: int) -> float:
    """float32(1/H): computed once on the host and passed to every backend."""
    return to_f32(1.0 / hidden)


def largest_pow2_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def dw_chunks(rows: int) -> int:
    """Number of fixed-size row chunks whose partials the dw tree combines."""
    return math.ceil(rows / DW_CHUNK_ROWS)
