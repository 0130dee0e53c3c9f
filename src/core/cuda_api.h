/* clang-format off */
/* Every CUDA driver and NVRTC entry point pygpu calls, as X-macro tables.
 *
 * CU_REQUIRED(name, version, class): resolved through cuGetProcAddress at
 *     first use; a driver that lacks it is reported as too old.
 * CU_OPTIONAL(name, version, class): may be missing (older drivers); the
 *     pointer is then NULL and the caller falls back or raises a clear error.
 * (The graph entry points are all optional: a driver without one loses
 * graphs, with a clear error, not pygpu; graph/graph.c checks them.)
 * The version selects the ABI: the pointer's type is PFN_<name>_v<version>
 * from cudaTypedefs.h, so the type and the ABI asked for cannot disagree.
 *
 * The class says what the entry point may do while a stream captures a
 * graph (docs/design.md, "Capture safety"), and pygpu.h names the table's
 * slot after it, so that the only way to call an entry point is the one its
 * class allows -- a binding cannot forget the rule:
 *   ANY     legal in a capture: a query, a handle's life, or work recorded
 *           on the stream it is given.  cu.<name>(...)
 *   STREAM  takes a stream: on the legacy default stream while a blocking
 *           stream of the context captures, or blocking on a capturing
 *           stream, the call would invalidate the capture: LogicError
 *           first.  PYGPU_CU_STREAM(st, name, stream, blocking, what)
 *           gives the pointer, or NULL with the LogicError set.
 *   LEGACY  runs on the legacy default stream (synchronous copies and
 *           fills, a context-wide synchronize): refused while a blocking
 *           stream of the current context captures.
 *           PYGPU_CU_LEGACY(st, name, what), as above.
 *   RELAX   unsafe during a global-mode capture though not part of it
 *           (allocation, free, module load): run with this thread's capture
 *           mode relaxed, PYGPU_CU_RELAX(rc, name, args...), so that nothing
 *           pygpu does implicitly invalidates a user's capture.
 */
/* cuProfilerStart/Stop's header (cudaProfiler.h) is not in NVIDIA's runtime
 * wheels, which a build without a toolkit uses: their pointer types, as in
 * the toolkit's cudaProfilerTypedefs.h, are declared here. */
typedef CUresult (CUDAAPI *PFN_cuProfilerStart_v4000)(void);
typedef CUresult (CUDAAPI *PFN_cuProfilerStop_v4000)(void);
/* cuProfilerInitialize's output mode is cudaProfiler.h's CUoutput_mode, an int */
typedef CUresult (CUDAAPI *PFN_cuProfilerInitialize_v4000)(const char *, const char *, int);

#define PYGPU_CUDA_API(CU_REQUIRED, CU_OPTIONAL)                 \
    CU_REQUIRED(cuInit, 2000, ANY)                                   \
    CU_REQUIRED(cuDriverGetVersion, 2020, ANY)                       \
    CU_REQUIRED(cuGetErrorName, 6000, ANY)                           \
    CU_REQUIRED(cuGetErrorString, 6000, ANY)                         \
    CU_REQUIRED(cuDeviceGet, 2000, ANY)                              \
    CU_REQUIRED(cuDeviceGetCount, 2000, ANY)                         \
    CU_REQUIRED(cuDeviceGetName, 2000, ANY)                          \
    CU_REQUIRED(cuDeviceGetAttribute, 2000, ANY)                     \
    CU_REQUIRED(cuDeviceTotalMem, 3020, ANY)                         \
    CU_REQUIRED(cuDeviceGetPCIBusId, 4010, ANY)                      \
    CU_REQUIRED(cuDeviceGetByPCIBusId, 4010, ANY)                    \
    CU_REQUIRED(cuDeviceGetUuid, 11040, ANY)                         \
    CU_REQUIRED(cuDeviceCanAccessPeer, 4000, ANY)                    \
    CU_REQUIRED(cuDevicePrimaryCtxRetain, 7000, ANY)                 \
    CU_REQUIRED(cuDevicePrimaryCtxRelease, 11000, ANY)               \
    CU_REQUIRED(cuCtxCreate, 3020, ANY)                              \
    CU_REQUIRED(cuCtxDestroy, 4000, ANY)                             \
    CU_REQUIRED(cuCtxPushCurrent, 4000, ANY)                         \
    CU_REQUIRED(cuCtxPopCurrent, 4000, ANY)                          \
    CU_REQUIRED(cuCtxGetCurrent, 4000, ANY)                          \
    CU_REQUIRED(cuCtxSetCurrent, 4000, ANY)                          \
    CU_REQUIRED(cuCtxGetDevice, 2000, ANY)                           \
    CU_REQUIRED(cuCtxSynchronize, 2000, LEGACY)                      \
    CU_REQUIRED(cuCtxSetLimit, 3010, ANY)                            \
    CU_REQUIRED(cuCtxGetLimit, 3010, ANY)                            \
    CU_REQUIRED(cuCtxSetCacheConfig, 3020, ANY)                      \
    CU_REQUIRED(cuCtxGetCacheConfig, 3020, ANY)                      \
    CU_REQUIRED(cuCtxEnablePeerAccess, 4000, ANY)                    \
    CU_REQUIRED(cuCtxDisablePeerAccess, 4000, ANY)                   \
    CU_REQUIRED(cuMemAlloc, 3020, RELAX)                             \
    CU_REQUIRED(cuMemAllocPitch, 3020, RELAX)                        \
    CU_REQUIRED(cuMemFree, 3020, RELAX)                              \
    CU_REQUIRED(cuMemGetInfo, 3020, RELAX)                           \
    CU_REQUIRED(cuMemHostAlloc, 2020, RELAX)                         \
    CU_REQUIRED(cuMemFreeHost, 2000, RELAX)                          \
    CU_REQUIRED(cuMemHostGetDevicePointer, 3020, ANY)                \
    CU_REQUIRED(cuMemHostRegister, 6050, RELAX)                      \
    CU_REQUIRED(cuMemHostUnregister, 4000, RELAX)                    \
    CU_REQUIRED(cuMemAllocManaged, 6000, RELAX)                      \
    CU_REQUIRED(cuMemcpyHtoD, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemcpyDtoH, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemcpyDtoD, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemcpyHtoDAsync, 3020, STREAM)                     \
    CU_REQUIRED(cuMemcpyDtoHAsync, 3020, STREAM)                     \
    CU_REQUIRED(cuMemcpyDtoDAsync, 3020, STREAM)                     \
    CU_REQUIRED(cuMemcpyPeer, 4000, LEGACY)                          \
    CU_REQUIRED(cuMemcpyPeerAsync, 4000, STREAM)                     \
    CU_REQUIRED(cuMemcpy2D, 3020, LEGACY)                            \
    CU_REQUIRED(cuMemcpy2DAsync, 3020, STREAM)                       \
    CU_REQUIRED(cuMemsetD8, 3020, LEGACY)                            \
    CU_REQUIRED(cuMemsetD16, 3020, LEGACY)                           \
    CU_REQUIRED(cuMemsetD32, 3020, LEGACY)                           \
    CU_REQUIRED(cuMemsetD8Async, 3020, STREAM)                       \
    CU_REQUIRED(cuMemsetD16Async, 3020, STREAM)                      \
    CU_REQUIRED(cuMemsetD32Async, 3020, STREAM)                      \
    CU_REQUIRED(cuMemsetD2D8, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemsetD2D16, 3020, LEGACY)                         \
    CU_REQUIRED(cuMemsetD2D32, 3020, LEGACY)                         \
    CU_REQUIRED(cuMemsetD2D8Async, 3020, STREAM)                     \
    CU_REQUIRED(cuMemsetD2D16Async, 3020, STREAM)                    \
    CU_REQUIRED(cuMemsetD2D32Async, 3020, STREAM)                    \
    CU_REQUIRED(cuPointerGetAttribute, 4000, ANY)                    \
    CU_REQUIRED(cuModuleLoadDataEx, 2010, RELAX)                     \
    CU_REQUIRED(cuModuleUnload, 2000, RELAX)                         \
    CU_REQUIRED(cuModuleGetFunction, 2000, ANY)                      \
    CU_REQUIRED(cuModuleGetGlobal, 3020, ANY)                        \
    CU_REQUIRED(cuFuncGetAttribute, 2020, ANY)                       \
    CU_REQUIRED(cuFuncSetAttribute, 9000, ANY)                       \
    CU_REQUIRED(cuFuncSetCacheConfig, 3000, ANY)                     \
    CU_REQUIRED(cuLaunchKernel, 4000, ANY)                           \
    CU_REQUIRED(cuLaunchCooperativeKernel, 9000, ANY)                \
    CU_REQUIRED(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, ANY) \
    CU_REQUIRED(cuOccupancyMaxPotentialBlockSize, 6050, ANY)         \
    CU_REQUIRED(cuStreamCreate, 2000, ANY)                           \
    CU_REQUIRED(cuStreamCreateWithPriority, 5050, ANY)               \
    CU_REQUIRED(cuStreamDestroy, 4000, ANY)                          \
    CU_REQUIRED(cuStreamSynchronize, 2000, ANY)                      \
    CU_REQUIRED(cuStreamQuery, 2000, ANY)                            \
    CU_REQUIRED(cuStreamWaitEvent, 3020, ANY)                        \
    CU_REQUIRED(cuStreamGetPriority, 5050, ANY)                      \
    CU_REQUIRED(cuStreamGetFlags, 5050, ANY)                         \
    CU_REQUIRED(cuEventCreate, 2000, ANY)                            \
    CU_REQUIRED(cuEventDestroy, 4000, ANY)                           \
    CU_REQUIRED(cuEventRecord, 2000, ANY)                            \
    CU_REQUIRED(cuEventSynchronize, 2000, ANY)                       \
    CU_REQUIRED(cuEventQuery, 2000, ANY)                             \
    CU_REQUIRED(cuEventElapsedTime, 2000, ANY)                       \
    CU_REQUIRED(cuLinkCreate, 6050, ANY)                             \
    CU_REQUIRED(cuLinkAddData, 6050, ANY)                            \
    CU_REQUIRED(cuLinkAddFile, 6050, ANY)                            \
    CU_REQUIRED(cuLinkComplete, 5050, ANY)                           \
    CU_REQUIRED(cuLinkDestroy, 5050, ANY)                            \
    CU_REQUIRED(cuArrayCreate, 3020, ANY)                            \
    CU_REQUIRED(cuArray3DCreate, 3020, ANY)                          \
    CU_REQUIRED(cuArrayDestroy, 2000, ANY)                           \
    CU_REQUIRED(cuArrayGetDescriptor, 3020, ANY)                     \
    CU_REQUIRED(cuArray3DGetDescriptor, 3020, ANY)                   \
    CU_REQUIRED(cuMemcpy3D, 3020, LEGACY)                            \
    CU_REQUIRED(cuMemcpy3DAsync, 3020, STREAM)                       \
    CU_REQUIRED(cuMemcpyDtoA, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemcpyAtoD, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemcpyAtoA, 3020, LEGACY)                          \
    CU_REQUIRED(cuMemcpy3DPeer, 4000, LEGACY)                        \
    CU_REQUIRED(cuMemcpy3DPeerAsync, 4000, STREAM)                   \
    CU_REQUIRED(cuTexObjectCreate, 5000, ANY)                        \
    CU_REQUIRED(cuTexObjectDestroy, 5000, ANY)                       \
    CU_REQUIRED(cuSurfObjectCreate, 5000, ANY)                       \
    CU_REQUIRED(cuSurfObjectDestroy, 5000, ANY)                      \
    CU_OPTIONAL(cuMemAllocAsync, 11020, ANY)                         \
    CU_OPTIONAL(cuMemFreeAsync, 11020, ANY)                          \
    CU_OPTIONAL(cuDeviceGetDefaultMemPool, 11020, ANY)               \
    CU_OPTIONAL(cuMemPoolSetAttribute, 11020, RELAX)                 \
    CU_OPTIONAL(cuMemPrefetchAsync, 12020, STREAM)                   \
    CU_OPTIONAL(cuLaunchKernelEx, 11060, ANY)                        \
    CU_OPTIONAL(cuFuncGetParamInfo, 12040, ANY)                      \
    CU_OPTIONAL(cuFuncGetName, 12030, ANY)                           \
    CU_OPTIONAL(cuTensorMapEncodeTiled, 12000, ANY)                  \
    CU_OPTIONAL(cuTensorMapEncodeIm2col, 12000, ANY)                 \
    CU_OPTIONAL(cuStreamBeginCapture, 10010, ANY)                    \
    CU_OPTIONAL(cuStreamEndCapture, 10000, ANY)                      \
    CU_OPTIONAL(cuThreadExchangeStreamCaptureMode, 10010, ANY)       \
    CU_OPTIONAL(cuStreamIsCapturing, 10000, ANY)                     \
    CU_OPTIONAL(cuGraphCreate, 10000, ANY)                           \
    CU_OPTIONAL(cuGraphDestroy, 10000, ANY)                          \
    CU_OPTIONAL(cuGraphAddKernelNode, 10000, ANY)                    \
    CU_OPTIONAL(cuGraphAddMemcpyNode, 10000, ANY)                    \
    CU_OPTIONAL(cuGraphAddMemsetNode, 10000, ANY)                    \
    CU_OPTIONAL(cuGraphAddHostNode, 10000, ANY)                      \
    CU_OPTIONAL(cuGraphAddChildGraphNode, 10000, ANY)                \
    CU_OPTIONAL(cuGraphAddEmptyNode, 10000, ANY)                     \
    CU_OPTIONAL(cuGraphAddEventRecordNode, 11010, ANY)               \
    CU_OPTIONAL(cuGraphAddEventWaitNode, 11010, ANY)                 \
    CU_OPTIONAL(cuGraphAddMemAllocNode, 11040, ANY)                  \
    CU_OPTIONAL(cuGraphAddMemFreeNode, 11040, ANY)                   \
    CU_OPTIONAL(cuGraphAddDependencies, 10000, ANY)                  \
    CU_OPTIONAL(cuGraphGetNodes, 10000, ANY)                         \
    CU_OPTIONAL(cuGraphNodeGetType, 10000, ANY)                      \
    CU_OPTIONAL(cuGraphNodeGetDependencies, 10000, ANY)              \
    CU_OPTIONAL(cuGraphKernelNodeGetParams, 10000, ANY)              \
    CU_OPTIONAL(cuGraphInstantiateWithFlags, 11040, ANY)             \
    CU_OPTIONAL(cuGraphExecDestroy, 10000, ANY)                      \
    CU_OPTIONAL(cuGraphLaunch, 10000, ANY)                           \
    CU_OPTIONAL(cuGraphUpload, 11010, ANY)                           \
    CU_OPTIONAL(cuGraphExecUpdate, 10020, ANY)                       \
    CU_OPTIONAL(cuGraphExecKernelNodeSetParams, 10010, ANY)          \
    CU_OPTIONAL(cuGraphDebugDotPrint, 11030, ANY)                    \
    CU_OPTIONAL(cuGraphAddNode, 12020, ANY)                          \
    CU_OPTIONAL(cuGraphConditionalHandleCreate, 12030, ANY)          \
    CU_OPTIONAL(cuProfilerStart, 4000, ANY)                          \
    CU_OPTIONAL(cuProfilerStop, 4000, ANY)                           \
    CU_OPTIONAL(cuProfilerInitialize, 4000, ANY)                     \
    CU_OPTIONAL(cuMemGetAddressRange, 3020, ANY)                     \
    CU_OPTIONAL(cuIpcGetMemHandle, 4010, ANY)                        \
    CU_OPTIONAL(cuIpcOpenMemHandle, 11000, ANY)                      \
    CU_OPTIONAL(cuIpcCloseMemHandle, 4010, ANY)                      \
    CU_OPTIONAL(cuIpcGetEventHandle, 4010, ANY)                      \
    CU_OPTIONAL(cuIpcOpenEventHandle, 4010, ANY)                     \
    CU_OPTIONAL(cuMemPoolCreate, 11020, ANY)                         \
    CU_OPTIONAL(cuMemPoolDestroy, 11020, ANY)                        \
    CU_OPTIONAL(cuMemPoolExportToShareableHandle, 11020, ANY)        \
    CU_OPTIONAL(cuMemPoolImportFromShareableHandle, 11020, ANY)      \
    CU_OPTIONAL(cuMemPoolExportPointer, 11020, ANY)                  \
    CU_OPTIONAL(cuMemPoolImportPointer, 11020, ANY)                  \
    CU_OPTIONAL(cuMemAllocFromPoolAsync, 11020, ANY)                 \
    CU_OPTIONAL(cuMemPoolSetAccess, 11020, ANY)                      \
    CU_OPTIONAL(cuMemPoolGetAccess, 11020, ANY)                      \
    CU_OPTIONAL(cuMemAddressReserve, 10020, ANY)                     \
    CU_OPTIONAL(cuMemAddressFree, 10020, ANY)                        \
    CU_OPTIONAL(cuMemCreate, 10020, ANY)                             \
    CU_OPTIONAL(cuMemRelease, 10020, ANY)                            \
    CU_OPTIONAL(cuMemMap, 10020, ANY)                                \
    CU_OPTIONAL(cuMemUnmap, 10020, ANY)                              \
    CU_OPTIONAL(cuMemSetAccess, 10020, ANY)                          \
    CU_OPTIONAL(cuMemGetAllocationGranularity, 10020, ANY)           \
    CU_OPTIONAL(cuMemExportToShareableHandle, 10020, ANY)            \
    CU_OPTIONAL(cuMemImportFromShareableHandle, 10020, ANY)          \
    CU_OPTIONAL(cuGraphicsGLRegisterBuffer, 3000, ANY)               \
    CU_OPTIONAL(cuGraphicsGLRegisterImage, 3000, ANY)                \
    CU_OPTIONAL(cuGraphicsMapResources, 3000, ANY)                   \
    CU_OPTIONAL(cuGraphicsUnmapResources, 3000, ANY)                 \
    CU_OPTIONAL(cuGraphicsResourceGetMappedPointer, 3020, ANY)       \
    CU_OPTIONAL(cuGraphicsSubResourceGetMappedArray, 3000, ANY)      \
    CU_OPTIONAL(cuGraphicsUnregisterResource, 3000, ANY)             \
    CU_OPTIONAL(cuStreamAttachMemAsync, 6000, STREAM)                \
    CU_OPTIONAL(cuMemHostGetFlags, 2030, ANY)                        \
    CU_OPTIONAL(cuCtxGetApiVersion, 3020, ANY)                       \
    CU_OPTIONAL(cuCtxGetSharedMemConfig, 4020, ANY)                  \
    CU_OPTIONAL(cuCtxSetSharedMemConfig, 4020, ANY)                  \
    CU_OPTIONAL(cuDeviceGetDevResource, 12040, ANY)                  \
    CU_OPTIONAL(cuDevSmResourceSplitByCount, 12040, ANY)             \
    CU_OPTIONAL(cuDevResourceGenerateDesc, 12040, ANY)               \
    CU_OPTIONAL(cuGreenCtxCreate, 12040, ANY)                        \
    CU_OPTIONAL(cuGreenCtxDestroy, 12040, ANY)                       \
    CU_OPTIONAL(cuCtxFromGreenCtx, 12040, ANY)                       \
    CU_OPTIONAL(cuGreenCtxGetDevResource, 12040, ANY)                \
    CU_OPTIONAL(cuGreenCtxStreamCreate, 12050, ANY)                  \
    CU_OPTIONAL(cuCheckpointProcessGetState, 12080, ANY)             \
    CU_OPTIONAL(cuCheckpointProcessGetRestoreThreadId, 12080, ANY)   \
    CU_OPTIONAL(cuCheckpointProcessLock, 12080, ANY)                 \
    CU_OPTIONAL(cuCheckpointProcessCheckpoint, 12080, ANY)           \
    CU_OPTIONAL(cuCheckpointProcessRestore, 12080, ANY)              \
    CU_OPTIONAL(cuCheckpointProcessUnlock, 12080, ANY)

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
