/* fakecuda: modules (a small PTX reader) and the JIT linker.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

/* ---- modules: a small PTX reader ---- */
static const char *
skip_ws(const char *p)
{
    for (;;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

static size_t
type_size(const char *t, size_t n)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        {".b8", 1},  {".u8", 1},   {".s8", 1},  {".b16", 2}, {".u16", 2},   {".s16", 2},
        {".f16", 2}, {".bf16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4},   {".f32", 4},
        {".b64", 8}, {".u64", 8},  {".s64", 8}, {".f64", 8}, {".f16x2", 4}, {".b128", 16},
    };
    size_t i;
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].name) == n && strncmp(t, types[i].name, n) == 0)
            return types[i].size;
    return 0;
}

/* One declaration: directives (.param/.global/.align N/.u64/.ptr ...), a
 * name, optional [N][M]...  Sets size and alignment; returns the end or NULL. */
static const char *
parse_decl(const char *p, char *name, size_t namecap, size_t *size, size_t *align)
{
    size_t tsize = 0, al = 0, count = 1;
    p = skip_ws(p);
    while (*p == '.') {
        const char *s = p;
        while (*p && !isspace((unsigned char)*p) && *p != ',' && *p != ')' && *p != ';')
            p++;
        if ((size_t)(p - s) == 6 && strncmp(s, ".align", 6) == 0) {
            p = skip_ws(p);
            al = (size_t)strtoul(p, (char **)&p, 10);
        } else {
            size_t ts = type_size(s, (size_t)(p - s));
            if (ts)
                tsize = ts;
        }
        p = skip_ws(p);
    }
    if (tsize == 0)
        return NULL;
    {
        size_t n = 0;
        while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || *p == '%'))
            if (n + 1 < namecap)
                name[n++] = *p++;
            else
                p++;
        name[n] = '\0';
        if (n == 0)
            return NULL;
    }
    while (*p == '[') {
        unsigned long long k = strtoull(p + 1, (char **)&p, 10);
        if (*p != ']')
            return NULL;
        p++;
        count *= (size_t)(k ? k : 1);
    }
    *size = tsize * count;
    *align = al ? al : tsize;
    return p;
}

void
fk_module_free(fake_module *m)
{
    fake_func *f;
    fake_global *g, *gn;
    for (f = m->funcs; f != NULL; f = f->next)
        f->alive = 0; /* functions stay, dead, to catch reuse */
    for (g = m->globals; g != NULL; g = gn) {
        gn = g->next;
        fk_drop_alloc(g->mem);
        free(g);
    }
    m->globals = NULL;
}

static CUresult
parse_ptx(fake_module *m, const char *src, char *err, size_t errcap)
{
    const char *p = src;
    if (strstr(src, ".version") == NULL || strstr(src, ".target") == NULL) {
        snprintf(err, errcap,
                 "stand-in: the image is neither PTX text (.version, .target) "
                 "nor anything else the stand-in loads");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    while ((p = strchr(p, '.')) != NULL) {
        if (strncmp(p, ".entry", 6) == 0 && isspace((unsigned char)p[6])) {
            fake_func *f;
            { /* ".extern .entry name ( ... );" declares a kernel of another input */
                const char *b = p;
                while (b > src && b[-1] != '\n')
                    b--;
                if (memmem(b, (size_t)(p - b), ".extern", 7) != NULL) {
                    p += 6;
                    continue;
                }
            }
            f = calloc(1, sizeof *f);
            size_t n = 0, off = 0;
            if (f == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
            f->magic = MAGIC_FUNC;
            f->alive = 1;
            fk_remember(f);
            f->module = m;
            f->maxntid = 1024;
            f->max_dynamic_shared = 49152;
            f->next = m->funcs;
            m->funcs = f;
            p = skip_ws(p + 6);
            while (*p && *p != '(' && *p != '{' && !isspace((unsigned char)*p))
                if (n + 1 < sizeof f->name)
                    f->name[n++] = *p++;
                else
                    p++;
            f->name[n] = '\0';
            p = skip_ws(p);
            if (*p == '(') {
                p = skip_ws(p + 1);
                while (*p != ')') {
                    char pname[256];
                    size_t size, align;
                    p = parse_decl(p, pname, sizeof pname, &size, &align);
                    if (p == NULL || f->nparams >= MAXPARAMS) {
                        snprintf(err, errcap, "stand-in: cannot read the parameters of %s",
                                 f->name);
                        return CUDA_ERROR_INVALID_PTX;
                    }
                    off = (off + align - 1) / align * align;
                    f->offset[f->nparams] = off;
                    f->size[f->nparams] = size;
                    f->nparams++;
                    off += size;
                    p = skip_ws(p);
                    if (*p == ',')
                        p = skip_ws(p + 1);
                    else if (*p != ')') {
                        snprintf(err, errcap, "stand-in: bad parameter list in %s", f->name);
                        return CUDA_ERROR_INVALID_PTX;
                    }
                }
                p++;
            }
            f->param_bytes = off;
            /* performance directives before the body */
            for (;;) {
                p = skip_ws(p);
                if (strncmp(p, ".maxntid", 8) == 0 || strncmp(p, ".reqntid", 8) == 0) {
                    long x = 1, y = 1, z = 1;
                    const char *q = p + 8;
                    x = strtol(q, (char **)&q, 10);
                    q = skip_ws(q);
                    if (*q == ',') {
                        y = strtol(q + 1, (char **)&q, 10);
                        q = skip_ws(q);
                    }
                    if (*q == ',') {
                        z = strtol(q + 1, (char **)&q, 10);
                    }
                    if (x * y * z > 0 && x * y * z < f->maxntid)
                        f->maxntid = (int)(x * y * z);
                    p = q;
                } else if (*p == '.') {
                    while (*p && *p != '\n' && *p != '{')
                        p++;
                } else {
                    break;
                }
            }
            if (*p == '{') { /* skip the body, adding up its .shared */
                int depth = 0;
                for (; *p; p++) {
                    if (*p == '{')
                        depth++;
                    else if (*p == '}' && --depth == 0) {
                        p++;
                        break;
                    } else if (strncmp(p, ".shared", 7) == 0 && isspace((unsigned char)p[7])) {
                        char sname[256];
                        size_t size, align;
                        const char *q = parse_decl(p + 7, sname, sizeof sname, &size, &align);
                        if (q != NULL) {
                            f->static_shared += size;
                            p = q - 1;
                        }
                    }
                }
            }
            continue;
        }
        if ((strncmp(p, ".global", 7) == 0 || strncmp(p, ".const", 6) == 0
             || strncmp(p, ".shared", 7) == 0)
            && isspace((unsigned char)p[strncmp(p, ".const", 6) == 0 ? 6 : 7])) {
            /* module scope only: the bodies are skipped above */
            int shared = strncmp(p, ".shared", 7) == 0;
            const char *line = p;
            char gname[256];
            size_t size, align;
            int is_extern = 0;
            /* ".extern" or ".weak" before the state space */
            {
                const char *b = p;
                while (b > src && b[-1] != '\n')
                    b--;
                if (strstr(b, ".extern") != NULL && strstr(b, ".extern") < p)
                    is_extern = 1;
            }
            p = parse_decl(p + (shared || strncmp(p, ".global", 7) == 0 ? 7 : 6), gname,
                           sizeof gname, &size, &align);
            if (p == NULL) {
                p = line + 1;
                continue;
            }
            if (shared) {
                if (!is_extern)
                    m->static_shared += size;
            } else if (!is_extern) {
                fake_global *g = calloc(1, sizeof *g);
                void *mem = fk_fill_alloc(size);
                if (g == NULL || mem == NULL) {
                    free(g);
                    free(mem);
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
                memset(mem, 0, size);
                snprintf(g->name, sizeof g->name, "%s", gname);
                g->mem = fk_add_alloc(mem, size, K_GLOBAL, 0, NULL);
                if (g->mem == NULL) {
                    free(g);
                    free(mem);
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
                g->mem->module = m;
                g->next = m->globals;
                m->globals = g;
            }
            continue;
        }
        p++;
    }
    return CUDA_SUCCESS;
}

static void
write_log(void *buf, size_t cap, const char *text)
{
    if (buf != NULL && cap > 0)
        snprintf(buf, cap, "%s", text);
}

CUresult
fake_cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned int nopts, CUjit_option *opts,
                        void **vals)
{
    CUresult rc = fk_enter(F_cuModuleLoadDataEx);
    void *info = NULL, *errbuf = NULL;
    size_t info_cap = 0, err_cap = 0;
    char err[512] = "";
    fake_module *m;
    fake_ctx *c;
    unsigned i;
    if (rc)
        return rc;
    if (out == NULL || image == NULL || (nopts && (opts == NULL || vals == NULL)))
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < nopts; i++) {
        if ((int)opts[i] < 0 || opts[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
            info = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            errbuf = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
            info_cap = (size_t)(uintptr_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            err_cap = (size_t)(uintptr_t)vals[i];
    }
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c == NULL) {
        fk_unlock();
        return rc;
    }
    if (strncmp(image,
                "\x7f"
                "ELF",
                4)
            == 0
        || ((const unsigned char *)image)[0] == 0x50) {
        fk_unlock();
        write_log(errbuf, err_cap, "stand-in: loads PTX only, not cubin or fatbin");
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    m = calloc(1, sizeof *m);
    if (m == NULL) {
        fk_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = MAGIC_MODULE;
    m->alive = 1;
    fk_remember(m);
    m->ctx = c;
    rc = parse_ptx(m, image, err, sizeof err);
    if (rc != CUDA_SUCCESS) {
        fk_module_free(m);
        m->alive = 0; /* kept (dead), with its dead functions */
        fk_unlock();
        write_log(errbuf, err_cap, err);
        return rc;
    }
    fk_live_modules++;
    m->next_all = fk_all_modules;
    fk_all_modules = m;
    *out = (CUmodule)m;
    fk_unlock();
    write_log(info, info_cap, "stand-in: PTX read; nothing was compiled");
    return CUDA_SUCCESS;
}

int
fk_module_ok(fake_module *m)
{
    if (!fk_known(m) || m->magic != MAGIC_MODULE)
        return 0;
    if (!m->alive || !m->ctx->alive) {
        fk_stale_uses++;
        return 0;
    }
    return 1;
}

CUresult
fake_cuModuleUnload(CUmodule h)
{
    CUresult rc = fk_enter(F_cuModuleUnload);
    fake_module *m = (fake_module *)h;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (!fk_module_ok(m)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        fk_module_free(m);
        m->alive = 0;
        fk_live_modules--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name)
{
    CUresult rc = fk_enter(F_cuModuleGetFunction);
    fake_module *m = (fake_module *)h;
    fake_func *f;
    if (rc)
        return rc;
    if (out == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (!fk_module_ok(m)) {
        fk_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    rc = CUDA_ERROR_NOT_FOUND;
    for (f = m->funcs; f != NULL; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            *out = (CUfunction)f;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule h, const char *name)
{
    CUresult rc = fk_enter(F_cuModuleGetGlobal);
    fake_module *m = (fake_module *)h;
    fake_global *g;
    if (rc)
        return rc;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (!fk_module_ok(m)) {
        fk_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    rc = CUDA_ERROR_NOT_FOUND;
    for (g = m->globals; g != NULL; g = g->next) {
        if (strcmp(g->name, name) == 0) {
            if (dptr)
                *dptr = (CUdeviceptr)g->mem->base;
            if (bytes)
                *bytes = g->mem->size;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    fk_unlock();
    return rc;
}

/* ---- the JIT linker: PTX inputs are concatenated into one PTX image (the
 * module loader parses PTX), binary inputs are checked by their magic and
 * contribute nothing; cuLinkComplete resolves every .extern .entry against
 * the .entry definitions of the inputs, and the device runtime's
 * __cudaCDP2* functions against a LIBRARY input ---- */

typedef struct fake_link {
    unsigned magic;
    int alive;
    fake_ctx *ctx;
    char *ptx; /* the PTX inputs, concatenated, NUL-terminated */
    size_t ptx_len;
    int ninputs, nlibraries;
    char *image;      /* cuLinkComplete's output, owned by the state */
    char *info, *err; /* the log buffers given at cuLinkCreate */
    size_t info_cap, err_cap;
} fake_link;

long fk_live_links;

static fake_link *
link_ok(CUlinkState h)
{
    fake_link *l = (fake_link *)h;
    if (!fk_known(l) || l->magic != MAGIC_LINK)
        return NULL;
    if (!l->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return l;
}

/* Read the log buffer options; CUDA_ERROR_INVALID_VALUE for a bad one. */
static CUresult
link_options(unsigned n, CUjit_option *opts, void **vals, char **info, size_t *info_cap, char **err,
             size_t *err_cap)
{
    unsigned i;
    if (n && (opts == NULL || vals == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < n; i++) {
        if ((int)opts[i] < 0 || opts[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER && info)
            *info = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER && err)
            *err = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES && info_cap)
            *info_cap = (size_t)(uintptr_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES && err_cap)
            *err_cap = (size_t)(uintptr_t)vals[i];
    }
    return CUDA_SUCCESS;
}

CUresult
fake_cuLinkCreate(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
    CUresult rc = fk_enter(F_cuLinkCreate);
    fake_link *l;
    fake_ctx *c;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    l = calloc(1, sizeof *l);
    if (l == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = link_options(n, opts, vals, &l->info, &l->info_cap, &l->err, &l->err_cap);
    if (rc != CUDA_SUCCESS) {
        free(l);
        return rc;
    }
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c == NULL) {
        fk_unlock();
        free(l);
        return rc;
    }
    l->magic = MAGIC_LINK;
    l->alive = 1;
    l->ctx = c;
    fk_remember(l);
    fk_live_links++;
    *out = (CUlinkState)l;
    fk_unlock();
    return CUDA_SUCCESS;
}

/* Add one input's bytes.  Lock held. */
static CUresult
link_add(fake_link *l, CUjitInputType type, const char *data, size_t size, const char *name)
{
    static const unsigned char fatbin_magic[4] = {0x50, 0xed, 0x55, 0xba};
    const char *what = NULL;
    if (data == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    switch (type) {
    case CU_JIT_INPUT_PTX: {
        const char *nul = memchr(data, '\0', size);
        size_t len = nul != NULL ? (size_t)(nul - data) : size;
        char *grown;
        if ((nul != NULL && len != size - 1) || memmem(data, len, ".version", 8) == NULL
            || memmem(data, len, ".target", 7) == NULL) {
            write_log(l->err, l->err_cap,
                      "stand-in: a PTX input is not PTX text "
                      "(.version and .target, no NUL before its end)");
            return CUDA_ERROR_INVALID_PTX;
        }
        grown = realloc(l->ptx, l->ptx_len + len + 2);
        if (grown == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        l->ptx = grown;
        memcpy(l->ptx + l->ptx_len, data, len);
        l->ptx_len += len;
        l->ptx[l->ptx_len++] = '\n';
        l->ptx[l->ptx_len] = '\0';
        break;
    }
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_OBJECT:
        if (size < 4
            || memcmp(data,
                      "\x7f"
                      "ELF",
                      4)
                   != 0)
            what = "stand-in: a CUBIN/OBJECT input is not an ELF image";
        break;
    case CU_JIT_INPUT_FATBINARY:
        if (size < 4 || memcmp(data, fatbin_magic, 4) != 0)
            what = "stand-in: a FATBINARY input has no fatbin header";
        break;
    case CU_JIT_INPUT_LIBRARY:
        if (size < 8 || memcmp(data, "!<arch>\n", 8) != 0)
            what = "stand-in: a LIBRARY input is not an ar archive";
        else
            l->nlibraries++;
        break;
    default:
        write_log(l->err, l->err_cap,
                  "stand-in: NVVM input needs LTO, which the stand-in "
                  "does not link");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (what != NULL) {
        write_log(l->err, l->err_cap, what);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    (void)name;
    l->ninputs++;
    return CUDA_SUCCESS;
}

CUresult
fake_cuLinkAddData(CUlinkState h, CUjitInputType type, void *data, size_t size, const char *name,
                   unsigned int n, CUjit_option *opts, void **vals)
{
    CUresult rc = fk_enter(F_cuLinkAddData);
    fake_link *l;
    if (rc)
        return rc;
    if ((rc = link_options(n, opts, vals, NULL, NULL, NULL, NULL)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((l = link_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (l->image != NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = link_add(l, type, data, size, name);
    fk_unlock();
    return rc;
}

CUresult
fake_cuLinkAddFile(CUlinkState h, CUjitInputType type, const char *path, unsigned int n,
                   CUjit_option *opts, void **vals)
{
    CUresult rc = fk_enter(F_cuLinkAddFile);
    fake_link *l;
    FILE *f;
    char *data = NULL;
    long size;
    if (rc)
        return rc;
    if (path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = link_options(n, opts, vals, NULL, NULL, NULL, NULL)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((l = link_ok(h)) == NULL || l->image != NULL) {
        fk_unlock();
        return l == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        write_log(l->err, l->err_cap, "stand-in: cannot open the input file");
        fk_unlock();
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0
        && (data = malloc((size_t)size)) != NULL && fread(data, 1, (size_t)size, f) == (size_t)size)
        rc = link_add(l, type, data, (size_t)size, path);
    else
        rc = data == NULL && size > 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    fclose(f);
    free(data);
    fk_unlock();
    return rc;
}

/* Whether `name` (of length n) is defined as ".entry name" in the PTX. */
static int
ptx_defines_entry(const char *ptx, const char *name, size_t n)
{
    const char *p = ptx;
    while ((p = strstr(p, ".entry")) != NULL) {
        const char *b = p, *q = skip_ws(p + 6);
        while (b > ptx && b[-1] != '\n')
            b--;
        p += 6;
        if (memmem(b, (size_t)(q - b), ".extern", 7) != NULL)
            continue;
        if (strncmp(q, name, n) == 0 && (isspace((unsigned char)q[n]) || q[n] == '('))
            return 1;
    }
    return 0;
}

/* The first unresolved reference of the concatenated PTX into buf (empty:
 * none).  Lock held. */
static void
link_unresolved(fake_link *l, char *buf, size_t cap)
{
    const char *p = l->ptx;
    buf[0] = '\0';
    while (p != NULL && (p = strstr(p, ".extern")) != NULL) {
        const char *q = skip_ws(p + 7);
        char name[256];
        size_t n = 0;
        p += 7;
        if (strncmp(q, ".entry", 6) == 0) {
            q = skip_ws(q + 6);
            while (q[n] && !isspace((unsigned char)q[n]) && q[n] != '(' && n + 1 < sizeof name)
                n++;
            memcpy(name, q, n);
            name[n] = '\0';
            if (!ptx_defines_entry(l->ptx, name, n)) {
                snprintf(buf, cap, "stand-in: undefined reference to kernel '%s'", name);
                return;
            }
        } else if (strncmp(q, ".func", 5) == 0 && l->nlibraries == 0) {
            const char *cdp = strstr(q, "__cudaCDP");
            const char *eol = strchr(q, '\n');
            if (cdp != NULL && (eol == NULL || cdp < eol)) {
                snprintf(buf, cap,
                         "stand-in: undefined reference to the device runtime "
                         "(__cudaCDP*): link libcudadevrt.a as a LIBRARY input");
                return;
            }
        }
    }
}

CUresult
fake_cuLinkComplete(CUlinkState h, void **cubin, size_t *size)
{
    CUresult rc = fk_enter(F_cuLinkComplete);
    fake_link *l;
    char why[512];
    if (rc)
        return rc;
    if (cubin == NULL || size == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((l = link_ok(h)) == NULL) {
        fk_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (l->image == NULL) {
        if (l->ptx == NULL) {
            write_log(l->err, l->err_cap,
                      l->ninputs ? "stand-in: no PTX input; the "
                                   "stand-in links PTX only"
                                 : "stand-in: nothing to link");
            fk_unlock();
            return CUDA_ERROR_INVALID_VALUE;
        }
        link_unresolved(l, why, sizeof why);
        if (why[0] != '\0') {
            write_log(l->err, l->err_cap, why);
            fk_unlock();
            return CUDA_ERROR_INVALID_IMAGE;
        }
        l->image = malloc(l->ptx_len + 1);
        if (l->image == NULL) {
            fk_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(l->image, l->ptx, l->ptx_len + 1);
        write_log(l->info, l->info_cap,
                  "stand-in: PTX inputs concatenated; nothing was "
                  "compiled");
    }
    *cubin = l->image;
    *size = l->ptx_len + 1;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuLinkDestroy(CUlinkState h)
{
    CUresult rc = fk_enter(F_cuLinkDestroy);
    fake_link *l;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((l = link_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        free(l->ptx);
        free(l->image);
        l->ptx = l->image = NULL;
        l->alive = 0; /* kept, dead, to catch reuse */
        fk_live_links--;
    }
    fk_unlock();
    return rc;
}
