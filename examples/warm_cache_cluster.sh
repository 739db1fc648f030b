#!/usr/bin/env bash
# Warm a shared, read-only kernel cache before a multi-node job, then point every rank at it.
#
# Run once, on one node that has CANN and the same software image as the job (the NPU itself is
# not needed: --arch says what to build for). Every rank then finds the library in the prebuilt
# tier and never compiles, even with a cold home directory or a read-only filesystem.
#
#   SHARED=/mnt/shared/ascend_rmsnorm ./examples/warm_cache_cluster.sh
#
# Who may load it: ascend-rmsnorm refuses to load a library from a file or directory that anyone but
# its owner can write, or that belongs to someone other than the loading user or root (loading a
# library runs its code). So lay the tier out as ssh wants key files:
#   - run this script as root (every user trusts root), or as the one user whose jobs use the tier;
#   - nothing in $SHARED, nor any directory above it, writable by group or others (this script
#     builds with umask 022 and runs `chmod -R go-w` on $SHARED; check the parents yourself, e.g.
#     `namei -l $SHARED`);
#   - on NFS with root_squash, files written by root belong to `nobody`: build on the NFS server,
#     or as the job user, or `chown -R root` there afterwards.
# `ascend-rmsnorm cache verify` below reports `unsafe <entry>: <why and the fix>` otherwise.
#
set -euo pipefail

SHARED="${SHARED:?set SHARED to a directory every node can read, e.g. on NFS}"
ARCHES="${ARCHES:-dav-2201}"   # Atlas A2 and A3 both run dav-2201 kernels
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

# 0. Work from / : an empty or relative entry of PATH, LD_LIBRARY_PATH or PYTHONPATH means the working
#    directory (anyone's, in /tmp), and set_env.sh leaves one and runs commands before step 1 drops them.
cd /

# 1. CANN's environment, so that bisheng and the CANN version are found. set_env.sh reads variables
#    a fresh node may not have set (`...:$LD_LIBRARY_PATH`), so `set -u` is off while it runs.
for env_script in /usr/local/Ascend/cann/set_env.sh /usr/local/Ascend/ascend-toolkit/set_env.sh; do
    if [ -z "${ASCEND_HOME_PATH:-}" ] && [ -f "$env_script" ]; then
        set +u
        # shellcheck disable=SC1090
        source "$env_script"
        set -u
    fi
done

#    set_env.sh puts its dirs before the old value (`...:$PYTHONPATH`): where that was unset, an empty
#    entry is left, which Python and the dynamic loader take as the working directory (anyone's, in
#    /tmp), and root would import and load what others put there. Keep the absolute entries only,
#    each whole (split by hand: `read` would stop at a newline in one, `$(...)` drop one's last newline).
absolute_entries() {  # sets kept
    local rest="$1:" entry
    kept=""
    while [ -n "$rest" ]; do
        entry="${rest%%:*}"
        rest="${rest#*:}"
        case "$entry" in /*) kept="${kept:+$kept:}$entry" ;; esac
    done
}
for var in PATH LD_LIBRARY_PATH PYTHONPATH; do
    if [ -n "${!var+set}" ]; then
        absolute_entries "${!var}"
        if [ -n "$kept" ]; then export "$var=$kept"; else unset "$var"; fi
    fi
done

# 2. Build into the shared directory. Safe to run from several nodes at once: each entry is
#    published by an atomic rename and concurrent builders of one key reuse the winner's entry.
umask 022
mkdir -p "$SHARED"
arch_args=()
for a in $ARCHES; do arch_args+=(--arch "$a"); done
ascend-rmsnorm warm --toolchain npu "${arch_args[@]}" --cache-dir "$SHARED"
chmod -R go-w "$SHARED"

# 3. Check what was built (re-hash, permission check and load test of every entry; non-zero exit if
#    one is bad or unsafe). On a login node without the NPU driver an entry is reported `untested`.
ascend-rmsnorm cache verify --cache-dir "$SHARED"

# 4. In the job script of every rank: read the shared tier first, never compile during the job.
cat <<MSG

Add to the job environment of every rank:
    export ASCEND_RMSNORM_PREBUILT_DIR=$SHARED
    export ASCEND_RMSNORM_JIT=off      # fail fast (KernelNotCachedError) instead of compiling
MSG
