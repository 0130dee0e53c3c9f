/* pygpu: <assert.h> for NVRTC: assert(e) in device code calls the device
 * runtime's __assertfail (NVRTC declares it), which prints the failed
 * expression with its file and line and traps: the launch then fails with
 * CUDA_ERROR_ASSERT (pygpu.driver.LaunchError).  NDEBUG turns it off.
 * Like the C library's, this header may be included again after NDEBUG
 * changes. */
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, \
                                                 sizeof(char)))
#endif
