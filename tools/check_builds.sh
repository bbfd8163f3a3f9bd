#!/usr/bin/env bash
# Builds dmlq's C core with every compiler this Linux x86-64 machine can run, for every target it can
# cross-compile to, and runs the kernel tests (at every CPU level) against each native build.
#
#   tools/check_builds.sh            # from the repository root, in the environment of `pip install -e ".[test]"`
#
# Needs (Debian/Ubuntu): apt-get install gcc clang gcc-aarch64-linux-gnu libc6-dev-arm64-cross mingw-w64
# and a deb-src line in apt's sources (for the Windows Python headers, below).
# It installs nothing; a missing compiler is reported as a failure. Exit status: 0 when every check passed.
# Windows: the sources other than the Python bindings (py_*.c) are compiled and linked into a DLL (which
# catches functions Windows lacks). Then every source is compiled against the Windows headers of CPython
# (Include/ and PC/pyconfig.h, from Debian's source package of the Python minor version $PYTHON runs) and
# of NumPy (from the win_amd64 wheel of the NumPy version $PYTHON imports, from PyPI), and linked into
# _core.pyd against an import library of python3XY.dll. Both header sets are downloaded once into
# ${DMLQ_WINDOWS_HEADERS:-~/.cache/dmlq-windows-headers}; one that cannot be fetched is a failure.
# ARM64: every source is compiled; py_*.c against this machine's Python and NumPy headers (both LP64);
# the portable element-wise rows also run, in tools/portable_rows_check.c under qemu-aarch64-static
# (apt-get install qemu-user-static). Other cross-compiled code is compiled, not run.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
CORE=src/dmlq/_core
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FLAGS=(-std=gnu11 -O2 -ffp-contract=off -Werror=implicit-function-declaration -Wall -Werror -I"$CORE")
KERNEL_TESTS=(tests/test_kernels.py tests/test_one_step_calls.py tests/test_buffers.py tests/test_packed.py tests/test_family_kernels.py tests/test_gemm_kernels.py tests/test_activations.py tests/test_erf.py tests/test_platform_numbers.py)
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

# run_portable_rows_check NAME APT_PACKAGE CC...: tools/portable_rows_check.c built for ARM64 and run
# under qemu: the portable rows (what ARM64 runs) against their formulas, element by element.
run_portable_rows_check() {
    local name=$1 package=$2 program=$WORK/portable-rows-$((++OBJECT_DIRS)) output
    shift 2
    have "$1" "$package" "$name" && have qemu-aarch64-static qemu-user-static "$name" || return
    if ! "$@" -static "${FLAGS[@]}" -O3 -fwrapv tools/portable_rows_check.c "$CORE/rows_portable.c" \
        "$CORE/activations.c" -lm -o "$program" 2>"$program.log"; then
        record "$name" FAIL "build failed: $(grep -m1 error "$program.log")"
    elif output=$(qemu-aarch64-static "$program" 2>&1); then
        record "$name" PASS "$(echo "$output" | tail -n 1)"
    else
        record "$name" FAIL "$(echo "$output" | tail -n 1)"
    fi
}

# The objects of the last cross_compile linked into a Windows DLL: catches functions Windows lacks.
link_windows_dll() {
    if x86_64-w64-mingw32-gcc -shared -o "$OBJECTS/core.dll" "$OBJECTS"/*.o 2>"$OBJECTS/dll.log"; then
        record "$1" PASS
    else
        record "$1" FAIL "$(grep -m1 undefined "$OBJECTS/dll.log")"
    fi
}

# CPython's Include/ and PC/pyconfig.h (the one Windows builds use) from the upstream tarball of Debian's
# source package python<major>.<minor>. Prints why on failure.
fetch_cpython_windows_headers() {
    local into=$1 download=$WORK/cpython-source tarball
    [ -f "$into/PC/pyconfig.h" ] && return
    command -v apt-get >/dev/null || { echo "no apt-get for Debian's source package python$PYTHON_VERSION"; return 1; }
    mkdir -p "$download"
    # Only the upstream tarball is needed: a Debian patch set apt cannot fetch is no failure here.
    (cd "$download" && apt-get source --download-only "python$PYTHON_VERSION" >"$download.log" 2>&1)
    tarball=$(ls "$download/python${PYTHON_VERSION}_"*.orig.tar.* 2>/dev/null | head -n 1)
    if [ -z "$tarball" ]; then
        echo "no source package python$PYTHON_VERSION (apt needs a deb-src line): $(grep -m1 '^E:' "$download.log")"
        return 1
    fi
    rm -rf "$into.partial" && mkdir -p "$into.partial" &&
        tar -xf "$tarball" -C "$into.partial" --strip-components=1 --wildcards '*/Include/*' '*/PC/pyconfig.h' &&
        mv "$into.partial" "$into"
}

# numpy/_core/include (numpy/core/include before NumPy 2) of the win_amd64 wheel. Prints why on failure.
fetch_numpy_windows_headers() {
    local into=$1 download=$WORK/numpy-wheel
    [ -d "$into/numpy" ] && return
    if ! "$PYTHON" -m pip download -q "numpy==$NUMPY_VERSION" --platform win_amd64 \
        --python-version "$PYTHON_VERSION" --only-binary=:all: --no-deps -d "$download" >"$download.log" 2>&1; then
        echo "no NumPy $NUMPY_VERSION win_amd64 wheel from PyPI:" \
            "$(grep -m1 ERROR "$download.log" | sed 's/ (from versions.*//')"
        return 1
    fi
    rm -rf "$into.partial" &&
        "$PYTHON" -c 'import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
wheel.extractall(sys.argv[2], [name for name in wheel.namelist() if "/include/" in name])' \
            "$download"/numpy-*.whl "$into.partial" &&
        mv "$into.partial" "$into"
}

# The names python3XY.dll exports, as far as the bindings can see them: CPython's headers declare what its
# DLL exports with PyAPI_FUNC / PyAPI_DATA (dllimport when an extension includes them), and these are
# those declarations as py_arrays.h sees them (PY_SSIZE_T_CLEAN renames some). A declaration whose
# definition Windows builds leave out would pass unnoticed. One line per name, "NAME" or "NAME DATA",
# as a module-definition file lists them.
python_dll_exports() { # python_dll_exports COMPILER_FLAGS...
    x86_64-w64-mingw32-gcc "$@" -E -x c "$CORE/py_arrays.h" |
        awk -v include="$CPYTHON_HEADERS/Include/" '
            /^# [0-9]+ "/ { file = $3; gsub(/"/, "", file); python = index(file, include) == 1; next }
            python { printf "%s ", $0 }' |
        tr ';{}' '\n\n\n' | grep dllimport |
        sed -E 's/__attribute__ *\(\(([^()]|\([^()]*\))*\)\)//g
                s/\( *\* *([A-Za-z_][A-Za-z0-9_]*) *\) *\(.*$/\1/
                /\(/ {
                    s/^([^(]*[^A-Za-z0-9_(])?([A-Za-z_][A-Za-z0-9_]*) *\(.*$/\2/
                    b
                }
                s/^.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*) *(\[.*)?$/\1 DATA/' |
        sort -u
}

# The objects of the last cross_compile linked into _core.pyd against an import library of python3XY.dll
# made from python_dll_exports: catches a function that neither Windows nor CPython's DLL has.
link_windows_module() { # link_windows_module NAME COMPILER_FLAGS...
    local name=$1 dll=python${PYTHON_VERSION/./} log=$OBJECTS/module.log
    shift
    { echo "LIBRARY $dll.dll"; echo EXPORTS; python_dll_exports "$@"; } >"$OBJECTS/$dll.def"
    if ! x86_64-w64-mingw32-dlltool -d "$OBJECTS/$dll.def" -l "$OBJECTS/lib$dll.a" 2>"$log" ||
        ! x86_64-w64-mingw32-gcc -shared -o "$OBJECTS/_core.pyd" "$OBJECTS"/*.o -L"$OBJECTS" -l"$dll" 2>>"$log"; then
        record "$name" FAIL "$(grep -m1 -e undefined -e error "$log")"
    elif ! x86_64-w64-mingw32-objdump -p "$OBJECTS/_core.pyd" | grep -q 'PyInit__core$'; then
        record "$name" FAIL "PyInit__core is not exported"
    else
        record "$name" PASS "imports $(x86_64-w64-mingw32-objdump -p "$OBJECTS/_core.pyd" |
            sed -n 's/^[[:space:]]*DLL Name: //p' | paste -s -d ' ')"
    fi
}

# Every source compiled against CPython's and NumPy's Windows headers and linked into _core.pyd.
windows_python_bindings() {
    local name="Windows x86-64 Python bindings: fetch headers" why numpy_include flags
    have x86_64-w64-mingw32-gcc mingw-w64 "$name" || return
    if ! why=$(fetch_cpython_windows_headers "$CPYTHON_HEADERS") ||
        ! why=$(fetch_numpy_windows_headers "$NUMPY_HEADERS"); then
        record "$name" FAIL "${why:-unpacking failed}"
        return
    fi
    numpy_include=$(ls -d "$NUMPY_HEADERS"/numpy/{_core,core}/include 2>/dev/null | head -n 1)
    record "$name" PASS "CPython $(sed -n 's/^#define PY_VERSION *"\(.*\)"/\1/p' \
        "$CPYTHON_HEADERS/Include/patchlevel.h"), NumPy $NUMPY_VERSION win_amd64"
    # PC/pyconfig.h defines MS_WIN64 for MSVC only: other compilers are to define it for 64-bit Windows.
    flags=(-DMS_WIN64 -I"$CPYTHON_HEADERS/PC" -I"$CPYTHON_HEADERS/Include" -I"$numpy_include" "${NUMPY_API[@]}")
    cross_compile "  ... mingw-w64 GCC: compile every source" mingw-w64 \
        x86_64-w64-mingw32-gcc "${flags[@]}" -- "$CORE"/*.c &&
        link_windows_module "  ... mingw-w64 GCC: link _core.pyd" "${flags[@]}"
    cross_compile "  ... clang (mingw-w64): compile every source" "clang mingw-w64" \
        clang --target=x86_64-w64-mingw32 "${flags[@]}" -- "$CORE"/*.c &&
        link_windows_module "  ... clang (mingw-w64): link _core.pyd" "${flags[@]}"
}

OBJECT_DIRS=0
KERNEL_SOURCES=($(ls "$CORE"/*.c | grep -v '/py_[^/]*\.c$'))
NUMPY_API=(-DNPY_NO_DEPRECATED_API=NPY_1_24_API_VERSION -DNPY_TARGET_VERSION=NPY_1_24_API_VERSION)
PY_INCLUDES=(-I"$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
             -I"$("$PYTHON" -c 'import numpy; print(numpy.get_include())')" "${NUMPY_API[@]}")
PYTHON_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
NUMPY_VERSION=$("$PYTHON" -c 'import numpy; print(numpy.__version__)')
WINDOWS_HEADERS=${DMLQ_WINDOWS_HEADERS:-$HOME/.cache/dmlq-windows-headers}
CPYTHON_HEADERS=$WINDOWS_HEADERS/cpython-$PYTHON_VERSION
NUMPY_HEADERS=$WINDOWS_HEADERS/numpy-$NUMPY_VERSION-win_amd64

native_build_and_test gcc gcc
native_build_and_test clang clang

cross_compile "aarch64 Linux, GCC: compile every source" gcc-aarch64-linux-gnu \
    aarch64-linux-gnu-gcc "${PY_INCLUDES[@]}" -- "$CORE"/*.c
cross_compile "aarch64 Linux, clang: compile every source" "clang libc6-dev-arm64-cross" \
    clang --target=aarch64-linux-gnu "${PY_INCLUDES[@]}" -- "$CORE"/*.c
run_portable_rows_check "aarch64 Linux, GCC: portable rows under qemu" gcc-aarch64-linux-gnu aarch64-linux-gnu-gcc
run_portable_rows_check "aarch64 Linux, clang: portable rows under qemu" "clang libc6-dev-arm64-cross" \
    clang --target=aarch64-linux-gnu

cross_compile "Windows x86-64, mingw-w64 GCC: compile" mingw-w64 \
    x86_64-w64-mingw32-gcc -- "${KERNEL_SOURCES[@]}" &&
    link_windows_dll "Windows x86-64, mingw-w64 GCC: link a DLL"
cross_compile "Windows x86-64, mingw-w64 GCC: OpenMP threads" mingw-w64 \
    x86_64-w64-mingw32-gcc -fopenmp -- "$CORE/parallel.c"
cross_compile "Windows x86-64, clang (mingw-w64): compile" "clang mingw-w64" \
    clang --target=x86_64-w64-mingw32 -- "${KERNEL_SOURCES[@]}" &&
    link_windows_dll "Windows x86-64, clang (mingw-w64): link a DLL"
windows_python_bindings

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
