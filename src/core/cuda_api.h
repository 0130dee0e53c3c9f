/* clang-format off */
/* Every CUDA driver and NVRTC entry point pygpu calls, as X-macro tables.
 *
 * CU_REQUIRED(name, version): resolved through cuGetProcAddress at first use;
 *     a driver that lacks it is reported as too old.
 * CU_OPTIONAL(name, version): may be missing (older drivers); the pointer is
 *     then NULL and the caller falls back or raises a clear error.
 * (The graph entry points are all optional: a driver without one loses
 * graphs, with a clear error, not pygpu; graph.c checks them.)
 * The version selects the ABI: the pointer's type is PFN_<name>_v<version>
 * from cudaTypedefs.h, so the type and the ABI asked for cannot disagree.
 */
/* cuProfilerStart/Stop's header (cudaProfiler.h) is not in NVIDIA's runtime
 * wheels, which a build without a toolkit uses: their pointer types, as in
 * the toolkit's cudaProfilerTypedefs.h, are declared here. */
typedef CUresult (CUDAAPI *PFN_cuProfilerStart_v4000)(void);
typedef CUresult (CUDAAPI *PFN_cuProfilerStop_v4000)(void);
/* cuProfilerInitialize's output mode is cudaProfiler.h's CUoutput_mode, an int */
typedef CUresult (CUDAAPI *PFN_cuProfilerInitialize_v4000)(const char *, const char *, int);

#define PYGPU_CUDA_API(CU_REQUIRED, CU_OPTIONAL)                 \
    CU_REQUIRED(cuInit, 2000)                                    \
    CU_REQUIRED(cuDriverGetVersion, 2020)                        \
    CU_REQUIRED(cuGetErrorName, 6000)                            \
    CU_REQUIRED(cuGetErrorString, 6000)                          \
    CU_REQUIRED(cuDeviceGet, 2000)                               \
    CU_REQUIRED(cuDeviceGetCount, 2000)                          \
    CU_REQUIRED(cuDeviceGetName, 2000)                           \
    CU_REQUIRED(cuDeviceGetAttribute, 2000)                      \
    CU_REQUIRED(cuDeviceTotalMem, 3020)                          \
    CU_REQUIRED(cuDeviceGetPCIBusId, 4010)                       \
    CU_REQUIRED(cuDeviceGetByPCIBusId, 4010)                     \
    CU_REQUIRED(cuDeviceGetUuid, 11040)                          \
    CU_REQUIRED(cuDeviceCanAccessPeer, 4000)                     \
    CU_REQUIRED(cuDevicePrimaryCtxRetain, 7000)                  \
    CU_REQUIRED(cuDevicePrimaryCtxRelease, 11000)                \
    CU_REQUIRED(cuCtxCreate, 3020)                               \
    CU_REQUIRED(cuCtxDestroy, 4000)                              \
    CU_REQUIRED(cuCtxPushCurrent, 4000)                          \
    CU_REQUIRED(cuCtxPopCurrent, 4000)                           \
    CU_REQUIRED(cuCtxGetCurrent, 4000)                           \
    CU_REQUIRED(cuCtxSetCurrent, 4000)                           \
    CU_REQUIRED(cuCtxGetDevice, 2000)                            \
    CU_REQUIRED(cuCtxSynchronize, 2000)                          \
    CU_REQUIRED(cuCtxSetLimit, 3010)                             \
    CU_REQUIRED(cuCtxGetLimit, 3010)                             \
    CU_REQUIRED(cuCtxSetCacheConfig, 3020)                       \
    CU_REQUIRED(cuCtxGetCacheConfig, 3020)                       \
    CU_REQUIRED(cuCtxEnablePeerAccess, 4000)                     \
    CU_REQUIRED(cuCtxDisablePeerAccess, 4000)                    \
    CU_REQUIRED(cuMemAlloc, 3020)                                \
    CU_REQUIRED(cuMemAllocPitch, 3020)                           \
    CU_REQUIRED(cuMemFree, 3020)                                 \
    CU_REQUIRED(cuMemGetInfo, 3020)                              \
    CU_REQUIRED(cuMemHostAlloc, 2020)                            \
    CU_REQUIRED(cuMemFreeHost, 2000)                             \
    CU_REQUIRED(cuMemHostGetDevicePointer, 3020)                 \
    CU_REQUIRED(cuMemHostRegister, 6050)                         \
    CU_REQUIRED(cuMemHostUnregister, 4000)                       \
    CU_REQUIRED(cuMemAllocManaged, 6000)                         \
    CU_REQUIRED(cuMemcpyHtoD, 3020)                              \
    CU_REQUIRED(cuMemcpyDtoH, 3020)                              \
    CU_REQUIRED(cuMemcpyDtoD, 3020)                              \
    CU_REQUIRED(cuMemcpyHtoDAsync, 3020)                         \
    CU_REQUIRED(cuMemcpyDtoHAsync, 3020)                         \
    CU_REQUIRED(cuMemcpyDtoDAsync, 3020)                         \
    CU_REQUIRED(cuMemcpyPeer, 4000)                              \
    CU_REQUIRED(cuMemcpyPeerAsync, 4000)                         \
    CU_REQUIRED(cuMemcpy2D, 3020)                                \
    CU_REQUIRED(cuMemcpy2DAsync, 3020)                           \
    CU_REQUIRED(cuMemsetD8, 3020)                                \
    CU_REQUIRED(cuMemsetD16, 3020)                               \
    CU_REQUIRED(cuMemsetD32, 3020)                               \
    CU_REQUIRED(cuMemsetD8Async, 3020)                           \
    CU_REQUIRED(cuMemsetD16Async, 3020)                          \
    CU_REQUIRED(cuMemsetD32Async, 3020)                          \
    CU_REQUIRED(cuMemsetD2D8, 3020)                              \
    CU_REQUIRED(cuMemsetD2D16, 3020)                             \
    CU_REQUIRED(cuMemsetD2D32, 3020)                             \
    CU_REQUIRED(cuMemsetD2D8Async, 3020)                         \
    CU_REQUIRED(cuMemsetD2D16Async, 3020)                        \
    CU_REQUIRED(cuMemsetD2D32Async, 3020)                        \
    CU_REQUIRED(cuPointerGetAttribute, 4000)                     \
    CU_REQUIRED(cuModuleLoadDataEx, 2010)                        \
    CU_REQUIRED(cuModuleUnload, 2000)                            \
    CU_REQUIRED(cuModuleGetFunction, 2000)                       \
    CU_REQUIRED(cuModuleGetGlobal, 3020)                         \
    CU_REQUIRED(cuFuncGetAttribute, 2020)                        \
    CU_REQUIRED(cuFuncSetAttribute, 9000)                        \
    CU_REQUIRED(cuFuncSetCacheConfig, 3000)                      \
    CU_REQUIRED(cuLaunchKernel, 4000)                            \
    CU_REQUIRED(cuLaunchCooperativeKernel, 9000)                 \
    CU_REQUIRED(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050) \
    CU_REQUIRED(cuOccupancyMaxPotentialBlockSize, 6050)          \
    CU_REQUIRED(cuStreamCreate, 2000)                            \
    CU_REQUIRED(cuStreamCreateWithPriority, 5050)                \
    CU_REQUIRED(cuStreamDestroy, 4000)                           \
    CU_REQUIRED(cuStreamSynchronize, 2000)                       \
    CU_REQUIRED(cuStreamQuery, 2000)                             \
    CU_REQUIRED(cuStreamWaitEvent, 3020)                         \
    CU_REQUIRED(cuStreamGetPriority, 5050)                       \
    CU_REQUIRED(cuStreamGetFlags, 5050)                          \
    CU_REQUIRED(cuEventCreate, 2000)                             \
    CU_REQUIRED(cuEventDestroy, 4000)                            \
    CU_REQUIRED(cuEventRecord, 2000)                             \
    CU_REQUIRED(cuEventSynchronize, 2000)                        \
    CU_REQUIRED(cuEventQuery, 2000)                              \
    CU_REQUIRED(cuEventElapsedTime, 2000)                        \
    CU_REQUIRED(cuLinkCreate, 6050)                              \
    CU_REQUIRED(cuLinkAddData, 6050)                             \
    CU_REQUIRED(cuLinkAddFile, 6050)                             \
    CU_REQUIRED(cuLinkComplete, 5050)                            \
    CU_REQUIRED(cuLinkDestroy, 5050)                             \
    CU_REQUIRED(cuArrayCreate, 3020)                             \
    CU_REQUIRED(cuArray3DCreate, 3020)                           \
    CU_REQUIRED(cuArrayDestroy, 2000)                            \
    CU_REQUIRED(cuArrayGetDescriptor, 3020)                      \
    CU_REQUIRED(cuArray3DGetDescriptor, 3020)                    \
    CU_REQUIRED(cuMemcpy3D, 3020)                                \
    CU_REQUIRED(cuMemcpy3DAsync, 3020)                           \
    CU_REQUIRED(cuMemcpyDtoA, 3020)                              \
    CU_REQUIRED(cuMemcpyAtoD, 3020)                              \
    CU_REQUIRED(cuMemcpyAtoA, 3020)                              \
    CU_REQUIRED(cuMemcpy3DPeer, 4000)                            \
    CU_REQUIRED(cuMemcpy3DPeerAsync, 4000)                       \
    CU_REQUIRED(cuTexObjectCreate, 5000)                         \
    CU_REQUIRED(cuTexObjectDestroy, 5000)                        \
    CU_REQUIRED(cuSurfObjectCreate, 5000)                        \
    CU_REQUIRED(cuSurfObjectDestroy, 5000)                       \
    CU_OPTIONAL(cuMemAllocAsync, 11020)                          \
    CU_OPTIONAL(cuMemFreeAsync, 11020)                           \
    CU_OPTIONAL(cuDeviceGetDefaultMemPool, 11020)                \
    CU_OPTIONAL(cuMemPoolSetAttribute, 11020)                    \
    CU_OPTIONAL(cuMemPrefetchAsync, 12020)                       \
    CU_OPTIONAL(cuLaunchKernelEx, 11060)                         \
    CU_OPTIONAL(cuFuncGetParamInfo, 12040)                       \
    CU_OPTIONAL(cuFuncGetName, 12030)                            \
    CU_OPTIONAL(cuTensorMapEncodeTiled, 12000)                   \
    CU_OPTIONAL(cuTensorMapEncodeIm2col, 12000)                  \
    CU_OPTIONAL(cuStreamBeginCapture, 10010)                     \
    CU_OPTIONAL(cuStreamEndCapture, 10000)                       \
    CU_OPTIONAL(cuThreadExchangeStreamCaptureMode, 10010)        \
    CU_OPTIONAL(cuStreamIsCapturing, 10000)                      \
    CU_OPTIONAL(cuGraphCreate, 10000)                            \
    CU_OPTIONAL(cuGraphDestroy, 10000)                           \
    CU_OPTIONAL(cuGraphAddKernelNode, 10000)                     \
    CU_OPTIONAL(cuGraphAddMemcpyNode, 10000)                     \
    CU_OPTIONAL(cuGraphAddMemsetNode, 10000)                     \
    CU_OPTIONAL(cuGraphAddHostNode, 10000)                       \
    CU_OPTIONAL(cuGraphAddChildGraphNode, 10000)                 \
    CU_OPTIONAL(cuGraphAddEmptyNode, 10000)                      \
    CU_OPTIONAL(cuGraphAddEventRecordNode, 11010)                \
    CU_OPTIONAL(cuGraphAddEventWaitNode, 11010)                  \
    CU_OPTIONAL(cuGraphAddMemAllocNode, 11040)                   \
    CU_OPTIONAL(cuGraphAddMemFreeNode, 11040)                    \
    CU_OPTIONAL(cuGraphAddDependencies, 10000)                   \
    CU_OPTIONAL(cuGraphGetNodes, 10000)                          \
    CU_OPTIONAL(cuGraphNodeGetType, 10000)                       \
    CU_OPTIONAL(cuGraphNodeGetDependencies, 10000)               \
    CU_OPTIONAL(cuGraphKernelNodeGetParams, 10000)               \
    CU_OPTIONAL(cuGraphInstantiateWithFlags, 11040)              \
    CU_OPTIONAL(cuGraphExecDestroy, 10000)                       \
    CU_OPTIONAL(cuGraphLaunch, 10000)                            \
    CU_OPTIONAL(cuGraphUpload, 11010)                            \
    CU_OPTIONAL(cuGraphExecUpdate, 10020)                        \
    CU_OPTIONAL(cuGraphExecKernelNodeSetParams, 10010)           \
    CU_OPTIONAL(cuGraphDebugDotPrint, 11030)                     \
    CU_OPTIONAL(cuGraphAddNode, 12020)                           \
    CU_OPTIONAL(cuGraphConditionalHandleCreate, 12030)           \
    CU_OPTIONAL(cuProfilerStart, 4000)                           \
    CU_OPTIONAL(cuProfilerStop, 4000)                            \
    CU_OPTIONAL(cuProfilerInitialize, 4000)                      \
    CU_OPTIONAL(cuMemGetAddressRange, 3020)                 \
    CU_OPTIONAL(cuIpcGetMemHandle, 4010)                    \
    CU_OPTIONAL(cuIpcOpenMemHandle, 11000)                  \
    CU_OPTIONAL(cuIpcCloseMemHandle, 4010)                  \
    CU_OPTIONAL(cuIpcGetEventHandle, 4010)                  \
    CU_OPTIONAL(cuIpcOpenEventHandle, 4010)                 \
    CU_OPTIONAL(cuMemPoolCreate, 11020)                     \
    CU_OPTIONAL(cuMemPoolDestroy, 11020)                    \
    CU_OPTIONAL(cuMemPoolExportToShareableHandle, 11020)    \
    CU_OPTIONAL(cuMemPoolImportFromShareableHandle, 11020)  \
    CU_OPTIONAL(cuMemPoolExportPointer, 11020)              \
    CU_OPTIONAL(cuMemPoolImportPointer, 11020)              \
    CU_OPTIONAL(cuMemAllocFromPoolAsync, 11020)             \
    CU_OPTIONAL(cuMemPoolSetAccess, 11020)                  \
    CU_OPTIONAL(cuMemPoolGetAccess, 11020)                  \
    CU_OPTIONAL(cuMemAddressReserve, 10020)                 \
    CU_OPTIONAL(cuMemAddressFree, 10020)                    \
    CU_OPTIONAL(cuMemCreate, 10020)                         \
    CU_OPTIONAL(cuMemRelease, 10020)                        \
    CU_OPTIONAL(cuMemMap, 10020)                            \
    CU_OPTIONAL(cuMemUnmap, 10020)                          \
    CU_OPTIONAL(cuMemSetAccess, 10020)                      \
    CU_OPTIONAL(cuMemGetAllocationGranularity, 10020)       \
    CU_OPTIONAL(cuMemExportToShareableHandle, 10020)        \
    CU_OPTIONAL(cuMemImportFromShareableHandle, 10020)      \
    CU_OPTIONAL(cuGraphicsGLRegisterBuffer, 3000)           \
    CU_OPTIONAL(cuGraphicsGLRegisterImage, 3000)            \
    CU_OPTIONAL(cuGraphicsMapResources, 3000)               \
    CU_OPTIONAL(cuGraphicsUnmapResources, 3000)             \
    CU_OPTIONAL(cuGraphicsResourceGetMappedPointer, 3020)   \
    CU_OPTIONAL(cuGraphicsSubResourceGetMappedArray, 3000)  \
    CU_OPTIONAL(cuGraphicsUnregisterResource, 3000)         \
    CU_OPTIONAL(cuStreamAttachMemAsync, 6000)               \
    CU_OPTIONAL(cuMemHostGetFlags, 2030)                    \
    CU_OPTIONAL(cuCtxGetApiVersion, 3020)                   \
    CU_OPTIONAL(cuCtxGetSharedMemConfig, 4020)              \
    CU_OPTIONAL(cuCtxSetSharedMemConfig, 4020)

/* NVRTC: every entry is required once the library is found. */
#define PYGPU_NVRTC_API(NV)                                                   \
    NV(nvrtcResult, nvrtcVersion, (int *, int *))                             \
    NV(const char *, nvrtcGetErrorString, (nvrtcResult))                      \
    NV(nvrtcResult, nvrtcGetNumSupportedArchs, (int *))                       \
    NV(nvrtcResult, nvrtcGetSupportedArchs, (int *))                          \
    NV(nvrtcResult, nvrtcCreateProgram,                                       \
       (nvrtcProgram *, const char *, const char *, int,                      \
        const char *const *, const char *const *))                            \
    NV(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram *))                    \
    NV(nvrtcResult, nvrtcAddNameExpression, (nvrtcProgram, const char *))     \
    NV(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram, int, const char *const *)) \
    NV(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram, size_t *))         \
    NV(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram, char *))               \
    NV(nvrtcResult, nvrtcGetPTXSize, (nvrtcProgram, size_t *))                \
    NV(nvrtcResult, nvrtcGetPTX, (nvrtcProgram, char *))                      \
    NV(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t *))              \
    NV(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char *))                    \
    NV(nvrtcResult, nvrtcGetLoweredName, (nvrtcProgram, const char *, const char **)) \
    NV(nvrtcResult, nvrtcGetLTOIRSize, (nvrtcProgram, size_t *))              \
    NV(nvrtcResult, nvrtcGetLTOIR, (nvrtcProgram, char *))

/* OpenGL interop (graphics.c): the two GL registration entry points' pointer
 * types, as in the toolkit's cudaGLTypedefs.h, whose header needs GL/gl.h
 * (not on every build machine, nor in NVIDIA's wheels); GLuint and GLenum
 * are unsigned int. */
typedef CUresult (CUDAAPI *PFN_cuGraphicsGLRegisterBuffer_v3000)(CUgraphicsResource *pCudaResource,
                                                                 unsigned int buffer,
                                                                 unsigned int Flags);
typedef CUresult (CUDAAPI *PFN_cuGraphicsGLRegisterImage_v3000)(CUgraphicsResource *pCudaResource,
                                                                unsigned int image,
                                                                unsigned int target,
                                                                unsigned int Flags);
