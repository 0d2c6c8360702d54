/* CFFI: libffi for Swift, through the system's <ffi.h> (Debian/Ubuntu:
 * libffi-dev). The accessors below give the addresses of libffi's global
 * type descriptors as plain functions, which Swift 6 can call from any
 * context (a mutable C global it would not let code touch concurrently). */
#ifndef VIGIL_CFFI_SHIM_H
#define VIGIL_CFFI_SHIM_H

#include <ffi.h>

static inline ffi_type *vigil_ffi_type_void(void) { return &ffi_type_void; }
static inline ffi_type *vigil_ffi_type_uint8(void) { return &ffi_type_uint8; }
static inline ffi_type *vigil_ffi_type_sint8(void) { return &ffi_type_sint8; }
static inline ffi_type *vigil_ffi_type_uint16(void) { return &ffi_type_uint16; }
static inline ffi_type *vigil_ffi_type_sint16(void) { return &ffi_type_sint16; }
static inline ffi_type *vigil_ffi_type_uint32(void) { return &ffi_type_uint32; }
static inline ffi_type *vigil_ffi_type_sint32(void) { return &ffi_type_sint32; }
static inline ffi_type *vigil_ffi_type_uint64(void) { return &ffi_type_uint64; }
static inline ffi_type *vigil_ffi_type_sint64(void) { return &ffi_type_sint64; }
static inline ffi_type *vigil_ffi_type_float(void) { return &ffi_type_float; }
static inline ffi_type *vigil_ffi_type_double(void) { return &ffi_type_double; }
static inline ffi_type *vigil_ffi_type_pointer(void) { return &ffi_type_pointer; }

/** ffi_prep_cif with the platform's default calling convention. */
static inline ffi_status vigil_ffi_prep_cif(ffi_cif *cif, unsigned int nargs, ffi_type *rtype, ffi_type **atypes) {
    return ffi_prep_cif(cif, FFI_DEFAULT_ABI, nargs, rtype, atypes);
}

/** Calls `fn` (a function pointer as dlsym returns it) through `cif`. */
static inline void vigil_ffi_call(ffi_cif *cif, void *fn, void *rvalue, void **avalue) {
    ffi_call(cif, (void (*)(void))fn, rvalue, avalue);
}

#endif
