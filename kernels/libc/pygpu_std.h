/* pygpu: the C++ library headers of this folder (<type_traits>, <tuple>,
 * ...) are CCCL's <cuda/std/...>; this puts their names in namespace std as
 * well, so std::is_same and std::tuple compile as under nvcc.  Qualified
 * lookup (std::get) finds a name std declares itself first (pygpu's
 * <cmath> functions), else the one of cuda::std.  <complex> is pygpu's
 * (see complex here): CCCL's declares cuda::std::sqrt(float), which with
 * "using namespace std;" would make sqrt(x) ambiguous with NVRTC's own. */
#ifndef PYGPU_STD_H
#define PYGPU_STD_H
namespace cuda {
namespace std {
}
}  // namespace cuda
namespace std {
using namespace ::cuda::std;
}
#endif
