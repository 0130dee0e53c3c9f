/* The plain-C floor: the same work as benchmarks/run.py, straight on the
 * driver API and NVRTC.  Prints one JSON object of figures.
 * Built and run by run.py:  cc floor.c -lcuda -lnvrtc
 *   floor [LS_SOURCE LS_DATA NX NF LS_OUT]
 * With the Lomb-Scargle arguments it also compiles LS_SOURCE (the kernel of
 * examples/lombscargle.py) as run.py does, runs it on the float64 data in
 * LS_DATA (x[NX], y[NX], freqs[NF]) in float64 and float32, times it with
 * events and writes both periodograms to LS_OUT (float64[NF], float32[NF])
 * for run.py to check against SciPy. */
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    const char *s_; cuGetErrorName(r_, &s_); fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)
#define NK(x) do { nvrtcResult r_ = (x); if (r_ != NVRTC_SUCCESS) { \
    fprintf(stderr, "%s: %s\n", #x, nvrtcGetErrorString(r_)); exit(1); } } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

static const char *SRC =
    "extern \"C\" __global__ void args3(float *p, int n, float a) { if (n < 0) p[0] = a; }\n"
    "extern \"C\" __global__ void empty() { }\n";
const char *SAXPY = "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n";

static char *compile_opts(const char *src, int nopts, const char **opts, size_t *size)
{
    nvrtcProgram p;
    NK(nvrtcCreateProgram(&p, src, "k.cu", 0, NULL, NULL));
    if (nvrtcCompileProgram(p, nopts, opts) != NVRTC_SUCCESS) {
        size_t n;
        nvrtcGetProgramLogSize(p, &n);
        char *log = malloc(n + 1);
        nvrtcGetProgramLog(p, log);
        fprintf(stderr, "NVRTC: %s\n", log);
        exit(1);
    }
    NK(nvrtcGetCUBINSize(p, size));
    char *b = malloc(*size);
    NK(nvrtcGetCUBIN(p, b));
    nvrtcDestroyProgram(&p);
    return b;
}

static char *compile(const char *src, const char *arch, size_t *size)
{
    const char *opts[1] = {arch};
    return compile_opts(src, 1, opts, size);
}

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) {
        perror(path);
        exit(1);
    }
    b[*len] = 0;
    fclose(f);
    return b;
}

/* The Lomb-Scargle kernel in one precision: compile with the benchmark's
 * options, upload, launch SMs x 20 blocks of 128, median of 15 event-timed
 * runs; the periodogram is copied into out. */
static double lombscargle(const char *src, const char *arch, int fast_math, int dbl,
                          const double *data, int nx, int nf, void *out)
{
    const char *opts[3] = {arch, "-DLOMBSCARGLE_BOUNDS=128", "-use_fast_math"};
    size_t size, es = dbl ? 8 : 4;
    char *cubin = compile_opts(src, fast_math ? 3 : 2, opts, &size);
    CUmodule m;
    CUfunction f;
    CUdevice dev;
    CUevent e0, e1;
    CUdeviceptr dx, dy, df, dp;
    int sms, i;
    double v[16];
    CK(cuModuleLoadData(&m, cubin));
    free(cubin);
    CK(cuModuleGetFunction(&f, m, dbl ? "lombscargle_float64" : "lombscargle_float32"));
    CK(cuCtxGetDevice(&dev));
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    char *host = malloc((size_t)(2 * nx + nf) * es);
    for (i = 0; i < 2 * nx + nf; i++) {
        if (dbl)
            ((double *)host)[i] = data[i];
        else
            ((float *)host)[i] = (float)data[i];
    }
    CK(cuMemAlloc(&dx, nx * es));
    CK(cuMemAlloc(&dy, nx * es));
    CK(cuMemAlloc(&df, nf * es));
    CK(cuMemAlloc(&dp, nf * es));
    CK(cuMemcpyHtoD(dx, host, nx * es));
    CK(cuMemcpyHtoD(dy, host + nx * es, nx * es));
    CK(cuMemcpyHtoD(df, host + 2 * nx * es, nf * es));
    float y32 = 0;
    double y64 = 0;
    void *params[7] = {&nx, &nf, &dx, &dy, &df, &dp, dbl ? (void *)&y64 : (void *)&y32};
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    for (i = 0; i < 2; i++)
        CK(cuLaunchKernel(f, sms * 20, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    for (i = 0; i < 15; i++) {
        float ms;
        CK(cuEventRecord(e0, NULL));
        CK(cuLaunchKernel(f, sms * 20, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
        CK(cuEventRecord(e1, NULL));
        CK(cuEventSynchronize(e1));
        CK(cuEventElapsedTime(&ms, e0, e1));
        v[i] = ms;
    }
    CK(cuMemcpyDtoH(out, dp, nf * es));
    CK(cuEventDestroy(e0));
    CK(cuEventDestroy(e1));
    CK(cuMemFree(dx));
    CK(cuMemFree(dy));
    CK(cuMemFree(df));
    CK(cuMemFree(dp));
    CK(cuModuleUnload(m));
    free(host);
    return median(v, 15);
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction args3, empty;
    CUdeviceptr d;
    int major, minor, i, r;
    double t, v[64];
    char arch[32];

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    size_t size;
    char *cubin = compile(SRC, arch, &size);
    CK(cuModuleLoadData(&mod, cubin));
    CK(cuModuleGetFunction(&args3, mod, "args3"));
    CK(cuModuleGetFunction(&empty, mod, "empty"));
    CK(cuMemAlloc(&d, 1 << 20));
    printf("{\n");

    /* launch enqueue: burst of 500, median of 20 */
    int n = 1000;
    float a = 2.0f;
    void *params[3] = {&d, &n, &a};
    for (i = 0; i < 2000; i++)
        CK(cuLaunchKernel(args3, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    CK(cuCtxSynchronize());
    for (r = 0; r < 20; r++) {
        t = now();
        for (i = 0; i < 500; i++)
            CK(cuLaunchKernel(args3, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        v[r] = (now() - t) / 500 * 1e6;
        CK(cuCtxSynchronize());
    }
    printf("  \"launch_enqueue_us\": %.3f,\n", median(v, 20));

    /* empty kernel throughput: 20000 launches then one synchronize */
    for (r = 0; r < 5; r++) {
        t = now();
        for (i = 0; i < 20000; i++)
            CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        CK(cuCtxSynchronize());
        v[r] = (now() - t) / 20000 * 1e6;
    }
    printf("  \"launch_throughput_us\": %.3f,\n", median(v, 5));

    /* round trip */
    for (r = 0; r < 20; r++) {
        t = now();
        for (i = 0; i < 200; i++) {
            CK(cuLaunchKernel(args3, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
            CK(cuCtxSynchronize());
        }
        v[r] = (now() - t) / 200 * 1e6;
    }
    printf("  \"round_trip_us\": %.3f,\n", median(v, 20));

    /* alloc + free 1 MiB */
    for (r = 0; r < 20; r++) {
        CUdeviceptr p;
        t = now();
        for (i = 0; i < 1000; i++) {
            CK(cuMemAlloc(&p, 1 << 20));
            CK(cuMemFree(p));
        }
        v[r] = (now() - t) / 1000 * 1e6;
    }
    printf("  \"alloc_free_us\": %.3f,\n", median(v, 20));

    /* transfers, 256 MiB */
    size_t big = 256u << 20;
    CUdeviceptr db, db2;
    void *pinned, *pageable = malloc(big);
    memset(pageable, 1, big);
    CK(cuMemAlloc(&db, big));
    CK(cuMemAlloc(&db2, big));
    CK(cuMemHostAlloc(&pinned, big, 0));
    memset(pinned, 1, big);
#define BW(name, stmt) do { stmt; CK(cuCtxSynchronize()); \
        for (r = 0; r < 5; r++) { t = now(); stmt; CK(cuCtxSynchronize()); v[r] = big / (now() - t) / 1e9; } \
        printf("  \"%s\": %.2f,\n", name, median(v, 5)); } while (0)
    BW("htod_pinned_gbs", CK(cuMemcpyHtoD(db, pinned, big)));
    BW("dtoh_pinned_gbs", CK(cuMemcpyDtoH(pinned, db, big)));
    BW("htod_pageable_gbs", CK(cuMemcpyHtoD(db, pageable, big)));
    BW("dtoh_pageable_gbs", CK(cuMemcpyDtoH(pageable, db, big)));
    /* D->D counts bytes read plus written */
    for (r = 0; r < 5; r++) {
        t = now();
        CK(cuMemcpyDtoD(db2, db, big));
        CK(cuCtxSynchronize());
        v[r] = 2.0 * big / (now() - t) / 1e9;
    }
    printf("  \"dtod_gbs\": %.1f,\n", median(v, 5));

    /* NVRTC compile of saxpy to cubin, and module load */
    free(compile(SAXPY, arch, &size));
    for (r = 0; r < 7; r++) {
        t = now();
        char *c = compile(SAXPY, arch, &size);
        v[r] = (now() - t) * 1e3;
        free(c);
    }
    printf("  \"compile_ms\": %.3f,\n", median(v, 7));
    char *sc = compile(SAXPY, arch, &size);
    for (r = 0; r < 21; r++) {
        CUmodule m;
        t = now();
        CK(cuModuleLoadData(&m, sc));
        v[r] = (now() - t) * 1e3;
        CK(cuModuleUnload(m));
    }
    printf("  \"module_load_ms\": %.4f", median(v, 21));

    if (argc == 6) {
        size_t len, dlen;
        char *src = read_file(argv[1], &len);
        double *data = read_file(argv[2], &dlen);
        int nx = atoi(argv[3]), nf = atoi(argv[4]);
        if (dlen != (size_t)(2 * nx + nf) * sizeof(double)) {
            fprintf(stderr, "%s: %zu bytes, expected %zu\n", argv[2], dlen,
                    (size_t)(2 * nx + nf) * sizeof(double));
            return 1;
        }
        void *out = malloc((size_t)nf * 12);
        printf(",\n  \"lombscargle64_ms\": %.4f", lombscargle(src, arch, 0, 1, data, nx, nf, out));
        printf(",\n  \"lombscargle_ms\": %.4f",
               lombscargle(src, arch, 1, 0, data, nx, nf, (char *)out + (size_t)nf * 8));
        FILE *f = fopen(argv[5], "wb");
        if (f == NULL || fwrite(out, 12, (size_t)nf, f) != (size_t)nf) {
            perror(argv[5]);
            return 1;
        }
        fclose(f);
        free(out);
        free(src);
        free(data);
    }
    printf("\n}\n");
    return 0;
}
