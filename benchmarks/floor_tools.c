/* NVRTC and nvJitLink called from C, as a shared library that run.py and
 * linking.py load (ctypes) into the process they measure pygpu in, linked
 * against the very library files pygpu loaded: rounds of the C calls and of
 * pygpu's then alternate, so the machine's drift (a link took 0.8 ms at the
 * start of one process and 0.5 ms a few seconds later) hits both alike.
 * Built by benchmarks/inproc.py:  cc -shared -fPIC floor_tools.c LIBNVRTC LIBNVJITLINK */
#include <nvrtc.h>
#include <nvJitLink.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* one compile of src to a cubin with the option arch ("-arch=sm_90"):
 * seconds, or -1 on failure */
double nvrtc_cubin_once(const char *src, const char *arch)
{
    nvrtcProgram p;
    size_t n;
    char *b;
    double t = now();
    if (nvrtcCreateProgram(&p, src, "k.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return -1;
    if (nvrtcCompileProgram(p, 1, &arch) != NVRTC_SUCCESS
        || nvrtcGetCUBINSize(p, &n) != NVRTC_SUCCESS || (b = malloc(n)) == NULL) {
        nvrtcDestroyProgram(&p);
        return -1;
    }
    nvrtcGetCUBIN(p, b);
    free(b);
    nvrtcDestroyProgram(&p);
    return now() - t;
}

/* one link of two LTO-IR inputs to a cubin (-arch=..., -lto): seconds, or
 * -1 on failure */
double jl_lto_once(const char *a, size_t na, const char *b, size_t nb, const char *arch)
{
    const char *opts[2] = {arch, "-lto"};
    nvJitLinkHandle h;
    size_t n;
    char *cubin;
    double t = now();
    if (nvJitLinkCreate(&h, 2, opts) != NVJITLINK_SUCCESS)
        return -1;
    if (nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, a, na, "lib.ltoir") != NVJITLINK_SUCCESS
        || nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, b, nb, "app.ltoir") != NVJITLINK_SUCCESS
        || nvJitLinkComplete(h) != NVJITLINK_SUCCESS
        || nvJitLinkGetLinkedCubinSize(h, &n) != NVJITLINK_SUCCESS
        || (cubin = malloc(n)) == NULL) {
        nvJitLinkDestroy(&h);
        return -1;
    }
    nvJitLinkGetLinkedCubin(h, cubin);
    free(cubin);
    nvJitLinkDestroy(&h);
    return now() - t;
}
