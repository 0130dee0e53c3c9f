"""C-type helpers shared by pygpu.reduction and pygpu.scan.

dtype_to_ctype and context_dependent_memoize are pygpu.tools' (PyCUDA's
names); parse_arguments reads a C parameter list into pygpu.tools'
VectorArg/ScalarArg; complex_source() is the text of the complex type
generated kernels use (pycuda::complex<float> and <double>, NumPy's layout:
kernels/elementwise_complex.cuh).
"""

from pygpu import tools as _tools

__all__ = [
    "dtype_to_ctype",
    "parse_arguments",
    "context_dependent_memoize",
    "complex_source",
    "needs_complex",
    "is_vector",
]

dtype_to_ctype = _tools.dtype_to_ctype
context_dependent_memoize = _tools.context_dependent_memoize


# ---- kernel argument declarations ----


def _split(arguments):
    """Split a C argument list at the commas outside <...> and (...)."""
    parts, depth, cur = [], 0, []
    for ch in arguments:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (q.strip() for q in parts)]


def is_vector(arg):
    """Whether a parsed argument (a pygpu.tools VectorArg/ScalarArg) is a
    pointer."""
    return isinstance(arg, _tools.VectorArg)


def parse_arguments(arguments):
    """The arguments of a C parameter list (a str, or a list of str or of
    pygpu.tools VectorArg/ScalarArg): the list of VectorArg/ScalarArg, and
    the declaration text."""
    if isinstance(arguments, str):
        decls = _split(arguments)
        if any(not d for d in decls):
            raise ValueError("empty argument in the argument list %r" % arguments)
    elif isinstance(arguments, (list, tuple)):
        decls = list(arguments)
    else:
        raise TypeError(
            "arguments must be a str like 'const float *x, int n' or a list, "
            "not %s" % type(arguments).__name__
        )
    parsed, text = [], []
    for d in decls:
        if isinstance(d, str):
            a = _tools.parse_c_arg(d)
            text.append(d.strip())
        elif isinstance(d, _tools.Argument):
            a = d
            text.append(d.declarator())
        else:
            raise TypeError(
                "an argument must be a C declaration str or a VectorArg/ScalarArg, "
                "not %s" % type(d).__name__
            )
        parsed.append(a)
    return parsed, ", ".join(text)


# ---- the complex type ----

_complex_text = None


def complex_source():
    """The CUDA C text that defines pycuda::complex<T>
    (kernels/elementwise_complex.cuh)."""
    global _complex_text
    if _complex_text is None:
        from pygpu import compiler

        _complex_text = compiler.kernel_source("elementwise_complex.cuh")
    return _complex_text


def needs_complex(*texts):
    """Whether generated source mentioning these texts needs the complex type."""
    return any("complex<" in t for t in texts if t)
