"""The export reader takes any bytes a file can hold: a real library gives its symbols, and every header
field that holds an offset or a count, set to its extreme, is a ``NotELFError`` (the cache's "bad entry"),
never another exception escaping into a lookup or `cache verify`."""

from __future__ import annotations

import struct

import hostile
import pytest

from ascend_rmsnorm.jit.elf import NotELFError, symbols_in

pytestmark = pytest.mark.skipif(hostile.CC is None, reason="needs a C compiler to build a real library")

#: (offset, struct format) of the ELF64 header fields the reader follows: e_shoff, e_shentsize, e_shnum.
_HEADER_FIELDS = [(0x28, "<Q"), (0x3A, "<H"), (0x3C, "<H")]


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> bytes:
    return hostile.build_stub(tmp_path_factory.mktemp("elf") / "stub.so").read_bytes()


def test_a_real_library_gives_its_defined_exports(stub):
    assert "ascend_rmsnorm_abi_version" in symbols_in(stub)


@pytest.mark.parametrize("offset,fmt", _HEADER_FIELDS)
@pytest.mark.parametrize("extreme", ["max", "zero"])
def test_an_extreme_header_field_is_a_malformed_elf_never_another_error(stub, offset, fmt, extreme):
    data = bytearray(stub)
    value = 0 if extreme == "zero" else (1 << (8 * struct.calcsize(fmt))) - 1
    struct.pack_into(fmt, data, offset, value)
    if extreme == "max":  # past any index: malformed (a reader that swallowed it as "no symbols" passed here)
        with pytest.raises(NotELFError, match="malformed ELF"):
            symbols_in(bytes(data))
        return
    try:
        symbols_in(bytes(data))
    except NotELFError:
        pass  # the only failure allowed; a zero count may also simply find no symbols


def test_section_headers_that_point_past_any_index_are_malformed(stub):
    data = bytearray(stub)
    struct.pack_into("<Q", data, 0x28, (1 << 64) - 1)
    with pytest.raises(NotELFError, match="malformed ELF"):
        symbols_in(bytes(data))
