/* ring_scribbler.c — hostile fixture for isolation: under `isolation:
 * process` the plugin shares a memory ring with the host, and nothing stops
 * it from finding that mapping (/proc/self/maps names the memfd) and
 * writing into it. At its second poll this one publishes a record whose
 * length runs far past the data written. The host must call the channel
 * broken, end the runner and report it, never read past the record. In
 * process (no ring) it only emits. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"

/* The ring's layout (Ring.swift): a 256-byte header, the 64 KiB call area,
 * then the data; the write position at byte 64 of the header. */
#define FX_RING_DATA (256 + 65536)
#define FX_RING_HEAD 64

static int polls;

static void scribble(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    if (maps == NULL)
        return;
    while (fgets(line, sizeof line, maps) != NULL) {
        unsigned long start, end;
        if (strstr(line, "vigil-ring") == NULL || sscanf(line, "%lx-%lx", &start, &end) != 2)
            continue;
        {
            unsigned char *base = (unsigned char *)start;
            uint64_t capacity = *(uint64_t *)(base + 8); /* the header says */
            uint64_t head = __atomic_load_n((uint64_t *)(base + FX_RING_HEAD), __ATOMIC_ACQUIRE);
            uint32_t *record = (uint32_t *)(base + FX_RING_DATA + (head & (capacity - 1)));
            record[0] = 0x7fffffffu; /* a length far past anything written */
            record[1] = 1;           /* an event */
            __atomic_store_n((uint64_t *)(base + FX_RING_HEAD), head + 8, __ATOMIC_RELEASE);
        }
        break;
    }
    fclose(maps);
}

static vigil_status scribbling_poll(void *self, vigil_error *err) {
    if (++polls == 2) {
        /* No emit after it: the runner's next record would overwrite it. The
         * host reads the ring before the poll's reply. */
        scribble();
        return VIGIL_OK;
    }
    return fx_poll(self, err);
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("ring_scribbler"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: corrupts the isolation ring."),
    NULL, 0, fx_sample_events, 1,
    100000000,
    fx_create, fx_start, scribbling_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
