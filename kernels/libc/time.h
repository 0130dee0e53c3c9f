/* pygpu: <time.h> for NVRTC, which has clock_t and clock() (the SM's cycle
 * counter; clock64() too) built in: time_t as CCCL declares it under NVRTC,
 * CLOCKS_PER_SEC and struct tm as names.  No calendar function: device code
 * has no wall clock (globaltimer is %globaltimer in PTX). */
#ifndef PYGPU_LIBC_TIME_H
#define PYGPU_LIBC_TIME_H
typedef long long int time_t;
#define CLOCKS_PER_SEC ((clock_t)1000000)
struct tm {
    int tm_sec;
    int tm_min;
    int tm_hour;
    int tm_mday;
    int tm_mon;
    int tm_year;
    int tm_wday;
    int tm_yday;
    int tm_isdst;
    long int tm_gmtoff;
    const char *tm_zone;
};
#endif
