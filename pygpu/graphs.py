"""CUDA graphs: record work once, replay it with one launch.

The types live in the C extension and are re-exported by pygpu.driver:

    Graph          a graph being built: add_*_node(...) or Stream capture
    GraphNode      one node (pass it in another node's dependencies)
    GraphExec      Graph.instantiate(): launch(stream), update(graph),
                   set_kernel_node_params(node, *args, ...)

and this module adds capture_graph(), a context manager over
Stream.begin_capture()/end_capture() that ends a failed capture cleanly:

    with capture_graph(stream) as cap:
        kernel(a, b, block=(256, 1, 1), grid=(n // 256, 1), stream=stream)
    exe = cap.graph.instantiate()
    exe.launch(stream)

See the manual's "CUDA graphs" chapter (docs/graphs.md).
"""
from pygpu._driver import (  # noqa: F401  (re-exported API)
    Graph,
    GraphExec,
    GraphNode,
    capture_mode,
    graph_conditional_type,
    graph_instantiate_flags,
    graph_node_type,
)

__all__ = ["CONDITIONAL_PREAMBLE", "Graph", "GraphExec", "GraphNode", "Capture",
           "capture_graph", "capture_mode",
           "graph_conditional_type", "graph_instantiate_flags", "graph_node_type"]

#: Prepend to kernel source that sets a conditional node's value: under NVRTC
#: (which has no cuda_runtime.h) this declares the device runtime's
#: cudaGraphSetConditional; the driver resolves it when the module loads, as
#: it does printf's vprintf, so no libcudadevrt link is needed.
#: cudaGraphConditionalHandle (an unsigned long long) is predefined by NVRTC.
CONDITIONAL_PREAMBLE = (
    'extern "C" __device__ __cudart_builtin__ void '
    "cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);\n"
)


class Capture:
    """What capture_graph() yields: .stream, and .graph once the block ended."""

    __slots__ = ("stream", "graph", "mode")

    def __init__(self, stream, mode):
        self.stream = stream
        self.mode = mode
        self.graph = None

    def __enter__(self):
        self.stream.begin_capture(mode=self.mode)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.graph = self.stream.end_capture()
            return False
        # the block failed: end the capture (its graph, if any, is dropped)
        # and let the block's own exception through
        try:
            self.stream.end_capture()
        except Exception:
            pass
        return False

    def __repr__(self):
        return "<pygpu.graphs.Capture on %r: %r>" % (self.stream, self.graph)


def capture_graph(stream, mode=capture_mode.GLOBAL):
    """Capture the work queued on stream inside a with block into a Graph.

    with capture_graph(s) as cap: ...; then cap.graph.  If the block raises,
    the capture is ended (nothing is kept) and the exception propagates;
    an operation that is illegal while capturing raises a LogicError
    saying so, and ending the invalidated capture raises one too."""
    return Capture(stream, mode)
