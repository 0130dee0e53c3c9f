/* graph/: Graph, GraphNode, GraphExec, stream capture and its safety rules.
 * Included by pygpu.h. */
#ifndef PYGPU_GRAPH_H
#define PYGPU_GRAPH_H

typedef struct pygpu_hostfn {
    PyObject *callable;        /* borrowed: kept alive by the graph's `keep` */
    PyObject *errors;          /* borrowed: the graph's `errors` list */
    int index;                 /* the node's number, for messages */
    struct pygpu_hostfn *next; /* owned: the graph's list */
} pygpu_hostfn;

typedef struct pygpu_Graph {
    PyObject_HEAD CUgraph handle; /* owned when owns (a conditional body is its node's) */
    pygpu_Context *context;       /* strong ref */
    PyObject *parent;             /* strong: a conditional body's graph, or NULL */
    PyObject *keep;               /* list, strong: what the nodes reference */
    PyObject *errors;             /* list, strong: exceptions raised by host callbacks */
    PyObject *nodes;              /* dict, strong: node handle (int) -> GraphNode */
    pygpu_hostfn *hostfns;        /* owned: callback records, freed at dealloc */
    int owns;
    int count; /* nodes numbered so far */
    PyObject *weakreflist;
} pygpu_Graph;

typedef struct {
    PyObject_HEAD CUgraphNode handle;       /* owned by the graph */
    pygpu_Graph *graph;                     /* strong ref */
    int index;                              /* its number in the graph (order of addition) */
    int type;                               /* CUgraphNodeType */
    pygpu_Function *function;               /* strong or NULL: a kernel node's Function */
    unsigned int block[3], grid[3], shared; /* a kernel node's configuration */
    int have_config;
    CUdeviceptr dptr; /* a mem-alloc node's address */
    size_t bytesize;
    PyObject *bodies; /* strong: a conditional node's body Graphs (tuple) */
} pygpu_GraphNode;

typedef struct {
    PyObject_HEAD CUgraphExec handle; /* owned */
    CUevent done;                     /* owned: recorded after each launch */
    pygpu_Graph *graph;               /* strong ref: the graph it was instantiated from */
    PyObject *keep;                   /* list, strong: graphs given to update() */
    PyObject *node_keep;              /* dict, strong: node handle -> what its update packed */
    PyObject *configs;                /* dict, strong: node handle -> bytes, a kernel node's
                                   configuration in this exec when it differs from the
                                   node's (set_kernel_node_params, update) */
    int launched;
} pygpu_GraphExec;

/* Shared by the area's files (graph.c, node.c, exec.c, capture.c).  GIL held. */
const char *pygpu_graph_node_type_name(int t);
PyObject *pygpu_graph_node_wrap(pygpu_state *st, pygpu_Graph *g, CUgraphNode h, int type);
int pygpu_graph_check(pygpu_state *st, pygpu_Graph *g);
PyObject *pygpu_graph_node_holds(pygpu_state *st, PyObject *const *args, Py_ssize_t n, int index,
                                 const char *kind, const char *name);
PyObject *pygpu_graph_args_tuple(PyObject *f, PyObject *const *args, Py_ssize_t n);
int pygpu_graph_pack_node(pygpu_state *st, pygpu_Function *f, PyObject *const *args,
                          Py_ssize_t nargs, int index, pygpu_argpack *pack);
void pygpu_graph_prefix_error(int index);
int pygpu_graph_parse_config(pygpu_state *st, pygpu_Function *f, PyObject *block, PyObject *grid,
                             PyObject *shared, pygpu_launch_config *cfg);
int pygpu_graph_update_kwargs(PyObject *kwnames, PyObject *const *kwargs, PyObject **block,
                              PyObject **grid, PyObject **shared, PyObject **function);
pygpu_Graph *pygpu_graph_alloc(pygpu_state *st, CUgraph h, pygpu_Context *ctx, int owns,
                               PyObject *parent);
int pygpu_graph_api_check(pygpu_state *st);
int pygpu_graph_node_check(pygpu_state *st, pygpu_GraphNode *n);
PyObject *pygpu_graph_exec_create(pygpu_state *st, pygpu_Graph *g, unsigned long long flags);

int pygpu_graph_parse_deps(pygpu_state *st, pygpu_Graph *g, PyObject *deps, CUgraphNode **out,
                           size_t *n, const char *what);

int pygpu_graphnode_setup(PyObject *m, pygpu_state *st);
int pygpu_graphexec_setup(PyObject *m, pygpu_state *st);

/* graph.c: stream capture.  The Stream methods begin_capture/end_capture/
 * is_capturing; pygpu_capture_note keeps a captured launch's Function and
 * arguments alive with the graph (0 or -1); pygpu_stream_capture_abort
 * ends a capture at the stream's release (the context is current). */
PyObject *pygpu_stream_begin_capture(pygpu_Stream *self, PyObject *args, PyObject *kwds);
PyObject *pygpu_stream_end_capture(pygpu_Stream *self, PyObject *unused);
PyObject *pygpu_stream_is_capturing(pygpu_Stream *self, PyObject *unused);
int pygpu_capture_note(pygpu_state *st, PyObject *stream_obj, PyObject *f, PyObject *const *args,
                       Py_ssize_t nargs);
void pygpu_stream_capture_abort(pygpu_Stream *self);
/* the same without ending it (not our handle, or the context is gone) */
void pygpu_stream_capture_drop(pygpu_Stream *self);
/* graph.c: run a driver call that is unsafe during stream capture (cuMemFree,
 * cuMemAlloc, a pool attribute) with this thread's capture mode relaxed, so
 * that nothing pygpu does implicitly invalidates a user's capture. */
CUstreamCaptureMode pygpu_capture_relax(void);
void pygpu_capture_restore(CUstreamCaptureMode mode);
/* graph.c: 1 when stream_obj is a pygpu Stream that pygpu is capturing */
int pygpu_stream_capturing(pygpu_state *st, PyObject *stream_obj);
/* graph.c, capture safety: before a call that would break a capture pygpu
 * runs, a LogicError naming `what` (0 or -1): a blocking call (blocking)
 * on a capturing stream, or work on the legacy default stream (sobj None,
 * 0 or 1, or NULL) while a blocking stream of the current context
 * captures.  No driver call while nothing captures.  GIL held. */
int pygpu_capture_check(pygpu_state *st, PyObject *sobj, int blocking, const char *what);
/* graph.c, the default stream inside a capture (docs/graphs.md): how many
 * captures pygpu runs (0: none, the only test the quick paths make). */
extern Py_ssize_t pygpu_captures_active;
/* This thread's newest capture (in ctx, or any when ctx is NULL): the
 * Stream, borrowed, or NULL.  GIL held; no driver call. */
pygpu_Stream *pygpu_capture_current(pygpu_Context *ctx);
/* sobj (NULL, None, 0, 1, a Stream of the NULL or legacy handle) names the
 * default stream */
int pygpu_capture_is_default(pygpu_state *st, PyObject *sobj);
/* *sobj names the default stream and this thread captures in the current
 * context: a blocking call gets a LogicError naming `what` (and `instead`,
 * or "use the _async form"), -1; otherwise *sobj becomes the capturing
 * Stream (borrowed), 1.  0: unchanged. */
int pygpu_capture_default(pygpu_state *st, PyObject **sobj, int blocking, const char *what,
                          const char *instead);
/* A stream handle about to be destroyed (its context current): the frees
 * deferred on it until the captures end (pygpu_capture_defer_free) wait
 * for its work now and run on the legacy stream then, instead of on a dead
 * (or reused) handle.  GIL held. */
void pygpu_capture_stream_dying(CUstream h);
/* pygpu_capture_check's refusal of work on the legacy default stream, for
 * the context ctx the work runs in (not the current one): 0 or -1. */
int pygpu_capture_legacy_check(pygpu_state *st, pygpu_Context *ctx, const char *what);
/* A launch on the legacy stream while a blocking stream of ctx captures (in
 * another thread): LogicError naming the kernel, -1. */
int pygpu_capture_legacy_launch(pygpu_state *st, pygpu_Context *ctx, const char *kernel);
/* A call that waits for the whole context (Context.synchronize, a zeroed
 * managed array) while a stream of ctx captures: LogicError, -1. */
int pygpu_capture_context_check(pygpu_state *st, pygpu_Context *ctx, const char *what);
/* A stream-ordered free on s that would break a capture (s captures, or s
 * is the legacy stream and a blocking stream of ctx captures): kept, and
 * queued when the last capture ends; 1.  0: free it now. */
int pygpu_capture_defer_free(pygpu_Context *ctx, CUdeviceptr p, CUstream s, PyObject *owner);

int pygpu_graph_setup(PyObject *m, pygpu_state *st);

#endif
