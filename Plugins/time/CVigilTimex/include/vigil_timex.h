/* vigil_timex.h — adjtimex(2) for the time plugin: Swift's Glibc module does
 * not declare <sys/timex.h>. The reading is copied into fixed-width members
 * so that Swift sees one layout whatever the C library's `long` is. */
#ifndef VIGIL_TIMEX_H
#define VIGIL_TIMEX_H

#include <stdint.h>

/** The members of `struct timex` the plugin reports, in the kernel's units. */
typedef struct vigil_timex_reading {
    int64_t offset;    /* µs, or ns when status has STA_NANO */
    int64_t freq;      /* ppm × 2^16 */
    int64_t maxerror;  /* µs */
    int64_t esterror;  /* µs */
    int64_t status;    /* STA_* bits */
    int64_t constant;  /* PLL time constant */
    int64_t tick;      /* µs between ticks */
    int64_t ppsfreq;   /* ppm × 2^16 */
    int64_t jitter;    /* µs, or ns with STA_NANO */
    int64_t shift;     /* log2 of the PPS interval, seconds */
    int64_t stabil;    /* ppm × 2^16 */
    int64_t jitcnt;
    int64_t calcnt;
    int64_t errcnt;
    int64_t stbcnt;
    int64_t tai;       /* seconds */
} vigil_timex_reading;

_Static_assert(sizeof(vigil_timex_reading) == 16 * 8, "vigil_timex_reading is 16 int64 members");

/** adjtimex(2) with modes 0 (read only: needs no privilege). Returns the
 *  clock state (TIME_OK 0 … TIME_ERROR 5) and fills `out`, or returns
 *  -errno and leaves `out` alone. */
int vigil_timex_read(vigil_timex_reading *out);

#endif
