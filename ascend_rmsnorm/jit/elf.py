"""Read an ELF shared object's exported symbol names without loading it.

The cache checks a fresh build this way before publishing it: dlopen would run the library's
constructors (bisheng's kernel registration) on a build host that may have no NPU, and would pin the
mapping to the temporary path. Only the dynamic symbol table is read.
"""

from __future__ import annotations

import struct

ELF_MAGIC = b"\x7fELF"
_SHT_DYNSYM = 11


class NotELFError(ValueError):
    """The file is not a well-formed ELF shared object."""


def symbols_in(data: bytes) -> set[str]:
    """Names of the defined symbols in the ``.dynsym`` of a shared object's bytes (the cache reads them once,
    from the fd it checked); raises ``NotELFError`` on anything malformed."""
    if data[:4] != ELF_MAGIC:
        raise NotELFError("no ELF magic")
    if len(data) < 64:
        raise NotELFError("truncated ELF header")
    is64 = {1: False, 2: True}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if is64 is None or order is None:
        raise NotELFError("unknown ELF class or byte order")
    try:
        if is64:
            (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        else:
            (shoff,) = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        sections = []
        for i in range(shnum):
            base = shoff + i * shentsize
            if is64:
                _, sh_type, _, _, off, size, link, _, _, entsize = struct.unpack_from(order + "IIQQQQIIQQ", data, base)
            else:
                _, sh_type, _, _, off, size, link, _, _, entsize = struct.unpack_from(order + "IIIIIIIIII", data, base)
            sections.append((sh_type, off, size, link, entsize))
        names: set[str] = set()
        for sh_type, off, size, link, entsize in sections:
            if sh_type != _SHT_DYNSYM or not entsize:
                continue
            _, str_off, str_size, _, _ = sections[link]
            if off + size > len(data) or str_off + str_size > len(data):
                raise NotELFError("section past the end of the file")
            strtab = data[str_off : str_off + str_size]
            for j in range(size // entsize):
                base = off + j * entsize
                if is64:
                    st_name, _, _, st_shndx = struct.unpack_from(order + "IBBH", data, base)
                else:
                    st_name, _, _, _, _, st_shndx = struct.unpack_from(order + "IIIBBH", data, base)
                if st_name and st_shndx != 0:  # 0 = SHN_UNDEF: imported, not defined here
                    end = strtab.find(b"\0", st_name)
                    names.add(strtab[st_name:end].decode(errors="replace"))
        return names
    except (struct.error, IndexError, OverflowError) as err:  # offsets past any index (a hostile header)
        raise NotELFError(f"malformed ELF: {err}") from err
