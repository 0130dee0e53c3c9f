#!/usr/bin/env bash
# make sanitize: the C extension and the driver stand-in built with
# AddressSanitizer and UndefinedBehaviorSanitizer, then the CPU suite and the
# stand-in pass (the fuzz test and the failure injection included) run under
# them.  The normal build is put back afterwards, whatever happened.
# Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CC=${CC:-cc}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
libasan=$($CC -print-file-name=libasan.so)
if [ ! -e "$libasan" ]; then
    echo "sanitize: $CC has no libasan.so" >&2
    exit 1
fi

restore() {
    echo "sanitize: rebuilding the normal extension"
    $PYTHON setup.py -q build_ext --inplace --force >/dev/null 2>&1
}
trap restore EXIT

CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" \
    $PYTHON setup.py -q build_ext --inplace --force >/dev/null || exit 1
lib=$(FAKECUDA_CFLAGS="$flags" $PYTHON tests/support/fakecuda.py build build/asan/libfakecuda.so) || exit 1

# PYTHONMALLOC=malloc: every Python allocation is checked, not only pygpu's.
# Leaks of CUDA handles are the stand-in's counts; CPython's own exit-time
# allocations would drown LeakSanitizer, so it is off.
export LD_PRELOAD="$libasan" PYTHONMALLOC=malloc
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:exitcode=86
export UBSAN_OPTIONS=print_stacktrace=1
$PYTHON -m pytest -q -p no:cacheprovider "$@" || exit 1
PYGPU_LIBCUDA="$PWD/$lib" $PYTHON -m pytest -q -p no:cacheprovider -m "driver or standin" "$@" || exit 1
echo "sanitize: clean"
