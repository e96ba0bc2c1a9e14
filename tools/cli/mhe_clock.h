/* mhe_clock.h - wall-clock seconds and the peak resident memory of this
   process, for the mhe tool and the benchmarks (one copy, with its Windows
   branch). The including file defines _POSIX_C_SOURCE >= 199309L before its
   first #include, for clock_gettime; mingw has it in winpthread (-lpthread). */
#ifndef MHE_CLOCK_H
#define MHE_CLOCK_H
#include <time.h>
#ifdef _WIN32
#include <windows.h>
#include <psapi.h>
#else
#include <sys/resource.h>
#endif

/* monotonic: immune to the wall clock being set while a run is timed */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#ifdef _WIN32
/* no getrusage there: the peak working set */
static inline double peak_rss_mb(void) {
    PROCESS_MEMORY_COUNTERS pmc;
    return K32GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc) ? pmc.PeakWorkingSetSize / 1048576.0 : 0;
}
#else
/* Linux reports ru_maxrss in KiB */
static inline double peak_rss_mb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}
#endif
#endif
