// PyCUDA's <pycuda-complex.hpp>, which PyCUDA's SourceModule puts on every
// kernel's include path: pycuda::complex<T> (pygpu::complex<T>, NumPy's
// layout) with its arithmetic and functions, from pygpu's own header; C++
// linkage inside SourceModule's extern "C" block, as PyCUDA's header does.
#pragma once
extern "C++" {
#include "../elementwise_complex.cuh"
}
