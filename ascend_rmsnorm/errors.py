"""The package's exception types, each with a message that says what to do next."""

from __future__ import annotations


class AscendRMSNormError(RuntimeError):
    """Base class of every error this package raises on purpose (besides bad-input TypeError/ValueError)."""


class ToolchainNotFoundError(AscendRMSNormError):
    """No usable compiler (CANN's bisheng, or the host C++ compiler for the emu backend) was found."""


class KernelCompileError(AscendRMSNormError):
    """The compiler ran and failed; the message quotes the command, its return code and output tail."""


class KernelNotCachedError(AscendRMSNormError):
    """JIT is off (ASCEND_RMSNORM_JIT=off) and no cached or prebuilt library matches."""


class LibraryLoadError(AscendRMSNormError):
    """A built library could not be loaded, lacks a symbol, or has another ABI version."""


class KernelLaunchError(AscendRMSNormError):
    """A host launcher returned a non-zero status."""


class UnsupportedArchError(AscendRMSNormError):
    """The NPU's arch is unknown, undetectable, or not one our kernels are written for."""


class CacheWriteError(AscendRMSNormError):
    """The kernel cache (or the temp dir a build needs) could not be written: full, read-only or not ours.

    The message names the path, the reason (and the free space when the disk is full) and what to do.
    """


class UnsafeLibraryError(LibraryLoadError):
    """A cached library sits in a file or directory that someone other than its owner may write, or that
    belongs to another user; loading it could run their code, so it is refused (see the README)."""
