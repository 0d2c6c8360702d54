/* Functions for the ffi plugin's tests (Tests/VigilHostTests/FFIPluginTests.swift),
 * which compile this file with cc -shared -fPIC and call each function through
 * the plugin: one or more per type, with values that show sign and zero
 * extension, truncation and argument order. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int64_t vt_add(int32_t a, int64_t b) { return (int64_t)a + b; }
/* Arguments in order: a - b (an exchange would show). */
int32_t vt_sub(int32_t a, int32_t b) { return a - b; }

int8_t vt_i8(int8_t x) { return (int8_t)(x - 1); }
int16_t vt_i16(int16_t x) { return (int16_t)(x * 2); }
int32_t vt_neg(void) { return -42; }
int64_t vt_i64(int64_t x) { return -x; }
uint8_t vt_u8(void) { return 250; }
uint16_t vt_u16(uint16_t x) { return (uint16_t)(x + 1); }
uint32_t vt_u32max(void) { return UINT32_MAX; }
uint32_t vt_u32(uint32_t x) { return x; }
uint64_t vt_u64(uint64_t x) { return x * 2; }
uint64_t vt_u64max(void) { return UINT64_MAX; }

float vt_half(float f) { return f / 2; }
double vt_scale(float f, double d) { return (double)f * d; }

bool vt_flag(bool b) { return !b; }

const char *vt_name(void) { return "vigil"; }
const char *vt_null(void) { return NULL; }
int vt_strlen(const char *s) { return s ? (int)strlen(s) : -1; }
/* 1 when given the same pointer, to the same text, as at the previous call:
 * the plugin copies a string argument once and passes that copy every time. */
static const char *previous;
static char previous_text[64];
int vt_same(const char *s) {
    int same = s != NULL && s == previous && strcmp(s, previous_text) == 0;
    previous = s;
    if (s) { strncpy(previous_text, s, sizeof previous_text - 1); }
    return same;
}

void vt_fill(int64_t out[2]) { out[0] = -7; out[1] = (int64_t)1 << 40; }
/* Several out-arguments of several types between in-arguments. */
int32_t vt_outs(int8_t *a, int32_t base, uint16_t b[2], float *c, double d[3], uint64_t *e) {
    *a = -3;
    b[0] = 65535; b[1] = 7;
    *c = 0.25f;
    d[0] = base + 0.5; d[1] = base + 1.5; d[2] = base + 2.5;
    *e = UINT64_MAX;
    return base;
}
/* Writes nothing: the plugin zeroes out-buffers before each call. */
void vt_untouched(int32_t out[2]) { (void)out; }

static int counter;
int vt_count(void) { return ++counter; }
void vt_nothing(void) {}
