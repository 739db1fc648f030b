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


def _dynsym_header(data: bytes) -> int:
    """Where the .dynsym section's header starts in an ELF64 little-endian file."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    return next(
        at for at in (shoff + i * shentsize for i in range(shnum)) if struct.unpack_from("<I", data, at + 4)[0] == 11
    )


def test_imports_are_not_exports_and_each_field_the_reader_trusts_is_checked(stub):
    """Only defined symbols count (an undefined one, SHN_UNDEF, is an import); a file shorter than an ELF
    header, one that is not ELF64/32 of a known byte order, a .dynsym whose string table lies past the end
    or whose link names no section, is a ``NotELFError``; a .dynsym with entry size 0 holds no symbols
    (never a division by zero)."""
    names = symbols_in(stub)
    assert "ascend_rmsnorm_abi_version" in names
    assert not names & {"__cxa_finalize", "__gmon_start__", "_ITM_registerTMCloneTable"}  # gcc's weak imports
    for data in (stub[:4], stub[:63]):  # magic, then less than a whole ELF64 header
        with pytest.raises(NotELFError, match="truncated ELF header"):
            symbols_in(data)
    for offset, value, why in (
        (0, 0, "no ELF magic"),
        (4, 3, "unknown ELF class"),
        (5, 0, "unknown ELF class or byte"),
    ):
        data = bytearray(stub)
        data[offset] = value
        with pytest.raises(NotELFError, match=why):
            symbols_in(bytes(data))
    dynsym = _dynsym_header(stub)
    (link,) = struct.unpack_from("<I", stub, dynsym + 0x28)
    (shoff,) = struct.unpack_from("<Q", stub, 0x28)
    (shentsize,) = struct.unpack_from("<H", stub, 0x3A)
    for at, fmt, value, why in (
        (shoff + link * shentsize + 0x20, "<Q", 1 << 40, "past the end"),  # the string table's size
        (dynsym + 0x28, "<I", 0xFFFF, "malformed ELF"),  # its link: no such section
    ):
        data = bytearray(stub)
        struct.pack_into(fmt, data, at, value)
        with pytest.raises(NotELFError, match=why):
            symbols_in(bytes(data))
    data = bytearray(stub)
    struct.pack_into("<Q", data, dynsym + 0x38, 0)
    assert symbols_in(bytes(data)) == set()
