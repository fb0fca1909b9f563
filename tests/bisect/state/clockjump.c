/* A wall-clock jump for one process tree (tests only): LD_PRELOAD this and every
 * clock_gettime(CLOCK_REALTIME) is shifted by the seconds written in $CLOCKJUMP_FILE, read
 * at each call (so a test moves the clock mid-run). CLOCK_MONOTONIC is left alone, as a
 * real clock step (NTP, settimeofday) leaves it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long offset(void) {
    const char *path = getenv("CLOCKJUMP_FILE");
    long s = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (f) {
        if (fscanf(f, "%ld", &s) != 1) s = 0;
        fclose(f);
    }
    return s;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *) = NULL;
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += offset();
    return r;
}
