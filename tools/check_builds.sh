#!/usr/bin/env bash
# Builds dmlq's C core with every compiler this Linux x86-64 machine can run, for every target it can
# cross-compile to, and runs the kernel tests (at every CPU level) against each native build.
#
#   tools/check_builds.sh            # from the repository root, in the environment of `pip install -e ".[test]"`
#
# Needs (Debian/Ubuntu): apt-get install gcc clang gcc-aarch64-linux-gnu libc6-dev-arm64-cross mingw-w64
# It installs nothing; a missing compiler is reported as a failure. Exit status: 0 when every check passed.
# Windows: the Python bindings (py_*.c) need the Windows Python headers, so the other sources are compiled
# and linked into a DLL (which catches functions Windows lacks); py_*.c are left out there.
# ARM64: every source is compiled; py_*.c against this machine's Python and NumPy headers (both LP64).
# Cross-compiled code is compiled, not run.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
CORE=src/dmlq/_core
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FLAGS=(-std=gnu11 -O2 -ffp-contract=off -Werror=implicit-function-declaration -Wall -Werror -I"$CORE")
KERNEL_TESTS=(tests/test_kernels.py tests/test_one_step_calls.py tests/test_buffers.py tests/test_activations.py tests/test_erf.py tests/test_platform_numbers.py)
PYTHON=${PYTHON:-python}
SUMMARY=()
FAILED=0

record() { # record NAME STATUS [DETAIL]
    SUMMARY+=("$(printf '%-50s %-5s %s' "$1" "$2" "${3:-}")")
    [ "$2" = PASS ] || FAILED=1
}

have() { # have COMMAND APT_PACKAGE CHECK_NAME
    command -v "$1" >/dev/null && return 0
    record "$3" FAIL "no $1 (apt-get install $2)"
    return 1
}

# A native build with $1 as CC in a copy of the tree, then the kernel tests against it.
native_build_and_test() {
    local cc=$1 package=$2 copy="$WORK/native-$1"
    have "$cc" "$package" "build with $cc + kernel tests (every level)" || return
    mkdir -p "$copy" && cp -r setup.py pyproject.toml README.md src tests "$copy"/
    rm -f "$copy"/src/dmlq/_core.*.so "$copy"/src/dmlq/_core.*.pyd
    if ! (cd "$copy" && CC=$cc "$PYTHON" setup.py -q build_ext --inplace >"$WORK/$cc.log" 2>&1); then
        record "build with $cc + kernel tests (every level)" FAIL "build failed: $(grep -m1 'error' "$WORK/$cc.log")"
        return
    fi
    local levels result
    levels=$(cd "$copy" && PYTHONPATH=src "$PYTHON" -c \
        'import dmlq._core as c; print(" ".join(c.LEVELS[: c.LEVELS.index(c.detected_level()) + 1]))')
    if result=$(cd "$copy" && PYTHONPATH=src "$PYTHON" -m pytest -p no:cacheprovider -o addopts= -q \
        "${KERNEL_TESTS[@]}" 2>&1 | tail -n 1) && [[ $result == *passed* && $result != *failed* ]]; then
        record "build with $cc + kernel tests (every level)" PASS "levels: $levels; $result"
    else
        record "build with $cc + kernel tests (every level)" FAIL "levels: $levels; $result"
    fi
}

# cross_compile NAME APT_PACKAGE CC [FLAGS...] -- SOURCES...: each source compiled to an object in $WORK/<CC>.
cross_compile() {
    local name=$1 package=$2 command=()
    shift 2
    while [ "$1" != -- ]; do command+=("$1"); shift; done
    shift
    have "${command[0]}" "$package" "$name" || return 1
    OBJECTS=$WORK/objects-$((++OBJECT_DIRS))
    mkdir -p "$OBJECTS"
    local source log="$OBJECTS.log"
    for source in "$@"; do
        if ! "${command[@]}" "${FLAGS[@]}" -c "$source" -o "$OBJECTS/$(basename "${source%.c}").o" 2>>"$log"; then
            record "$name" FAIL "$(basename "$source"): $(grep -m1 error "$log")"
            return 1
        fi
    done
    record "$name" PASS "$# sources"
}

# The objects of the last cross_compile linked into a Windows DLL: catches functions Windows lacks.
link_windows_dll() {
    if x86_64-w64-mingw32-gcc -shared -o "$OBJECTS/core.dll" "$OBJECTS"/*.o 2>"$OBJECTS/dll.log"; then
        record "$1" PASS
    else
        record "$1" FAIL "$(grep -m1 undefined "$OBJECTS/dll.log")"
    fi
}

OBJECT_DIRS=0
KERNEL_SOURCES=($(ls "$CORE"/*.c | grep -v '/py_[^/]*\.c$'))
PY_INCLUDES=(-I"$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
             -I"$("$PYTHON" -c 'import numpy; print(numpy.get_include())')"
             -DNPY_NO_DEPRECATED_API=NPY_1_24_API_VERSION -DNPY_TARGET_VERSION=NPY_1_24_API_VERSION)

native_build_and_test gcc gcc
native_build_and_test clang clang

cross_compile "aarch64 Linux, GCC: compile every source" gcc-aarch64-linux-gnu \
    aarch64-linux-gnu-gcc "${PY_INCLUDES[@]}" -- "$CORE"/*.c
cross_compile "aarch64 Linux, clang: compile every source" "clang libc6-dev-arm64-cross" \
    clang --target=aarch64-linux-gnu "${PY_INCLUDES[@]}" -- "$CORE"/*.c

cross_compile "Windows x86-64, mingw-w64 GCC: compile" mingw-w64 \
    x86_64-w64-mingw32-gcc -- "${KERNEL_SOURCES[@]}" &&
    link_windows_dll "Windows x86-64, mingw-w64 GCC: link a DLL"
cross_compile "Windows x86-64, mingw-w64 GCC: OpenMP threads" mingw-w64 \
    x86_64-w64-mingw32-gcc -fopenmp -- "$CORE/parallel.c"
cross_compile "Windows x86-64, clang (mingw-w64): compile" "clang mingw-w64" \
    clang --target=x86_64-w64-mingw32 -- "${KERNEL_SOURCES[@]}" &&
    link_windows_dll "Windows x86-64, clang (mingw-w64): link a DLL"

# The build setup.py makes when its probe finds no usable AMX compiler or assembler.
if cross_compile "x86-64 Linux without AMX (DMLQ_NO_AMX)" gcc gcc -DDMLQ_NO_AMX -- "$CORE/gemm_amx.c"; then
    if objdump -d "$OBJECTS/gemm_amx.o" | grep -q tdpbusd; then
        record "  ... and no AMX instruction is left" FAIL "tdpbusd found"
    else
        record "  ... and no AMX instruction is left" PASS
    fi
fi

echo
echo "dmlq build checks ($(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -m)):"
printf '%s\n' "${SUMMARY[@]}"
exit "$FAILED"
