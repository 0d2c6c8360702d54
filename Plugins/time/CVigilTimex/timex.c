#include "vigil_timex.h"

#include <errno.h>
#include <string.h>
#include <sys/timex.h>

int vigil_timex_read(vigil_timex_reading *out) {
    struct timex t;
    memset(&t, 0, sizeof t);  /* modes 0: read only */
    int state = adjtimex(&t);
    if (state < 0) return -errno;
    out->offset = t.offset;
    out->freq = t.freq;
    out->maxerror = t.maxerror;
    out->esterror = t.esterror;
    out->status = t.status;
    out->constant = t.constant;
    out->tick = t.tick;
    out->ppsfreq = t.ppsfreq;
    out->jitter = t.jitter;
    out->shift = t.shift;
    out->stabil = t.stabil;
    out->jitcnt = t.jitcnt;
    out->calcnt = t.calcnt;
    out->errcnt = t.errcnt;
    out->stbcnt = t.stbcnt;
    out->tai = t.tai;
    return state;
}
