//! Hand-written Rust bindings of `Sources/CVigilPlugin/include/vigil_plugin.h`
//! (Vigil plugin ABI 1.5: monitors, and outputs with `write` and `flush`).
//!
//! The header is the whole contract between the host and a plugin; this file
//! is a faithful, line-by-line transcription of it, so that a plugin needs no
//! build-time binding generator and no crate. Copy it unchanged into your own
//! plugin. When the header gains a minor version, append what it appends and
//! raise `ABI_MINOR`; never reorder or resize anything that is here.
//!
//! How C maps to Rust here:
//!   - every struct is `#[repr(C)]`, with the C field order and types, and its
//!     size is checked against the header's static asserts at compile time
//!     (the `const _: () = assert!(...)` lines), its offsets in `cargo test`;
//!   - C enums are 32-bit integers on the wire and a later minor may add
//!     values, so they are plain `u32` type aliases with constants, never Rust
//!     `enum`s (an unknown value in a Rust enum is undefined behaviour);
//!   - nullable function pointers are `Option<unsafe extern "C" fn ...>`, which
//!     Rust guarantees to have the size and representation of a C pointer
//!     (None is NULL);
//!   - `vigil_str` is pointer + length, NOT NUL-terminated: it maps to a byte
//!     slice, never to `CStr`.
//!
//! Names: C `vigil_foo` is Rust `VigilFoo`; constants keep their C names.
//! Works with Rust 1.63 (Debian bookworm) and later: no crates, std only.

#![allow(dead_code)] // a complete binding: not every item is used by every plugin

use std::mem::{size_of, MaybeUninit};
use std::os::raw::{c_char, c_void};
use std::ptr;

// ------------------------------------------------------------------ version

/// The major version these bindings speak.
pub const ABI_MAJOR: u16 = 1;
/// The minor version these bindings were written for: what the plugin answers
/// in negotiation. 1.2 added `VigilEventSpec::flags`, 1.3
/// `VigilOptionSpec::example_text`, 1.4 `VigilFieldSpec::flags`, 1.5 outputs
/// (`VIGIL_PLUGIN_OUTPUT`, the descriptor's `write` and `flush`, the batch
/// types and the output helpers at the end of this file).
pub const ABI_MINOR: u16 = 5;

/// Name of the one symbol every plugin exports (see `vigil_plugin_entry` in
/// lib.rs: `#[no_mangle] pub unsafe extern "C" fn vigil_plugin_entry`).
pub const ENTRY_SYMBOL: &str = "vigil_plugin_entry";

// ------------------------------------------------------------------- status

/// `vigil_status`: the result of every call that can fail. 0 is success.
pub type VigilStatus = u32;
/// Success.
pub const VIGIL_OK: VigilStatus = 0;
/// Failed this time; the host retries at the next interval.
pub const VIGIL_E_TEMPORARY: VigilStatus = 1;
/// Failed for good; the host stops and destroys the instance.
pub const VIGIL_E_FATAL: VigilStatus = 2;
/// An option value is unusable (create only). Start the message with the
/// option's path and ": " ("options.NAME: ...", "options.NAME[2]: ...",
/// "options.NAME[2].KEY: ...") so the host reports it at that place in the
/// manifest.
pub const VIGIL_E_INVALID_CONFIG: VigilStatus = 3;
/// The source does not exist on this machine (now). Not an error: the host
/// reports the instance unavailable, with the message as the reason.
pub const VIGIL_E_UNAVAILABLE: VigilStatus = 4;
/// Out of memory.
pub const VIGIL_E_NOMEM: VigilStatus = 5;
/// Plugin (entry only): no ABI version the host offers is spoken.
pub const VIGIL_E_UNSUPPORTED: VigilStatus = 6;
/// Host: the instance is stopped; the event was not accepted.
pub const VIGIL_E_STOPPED: VigilStatus = 7;
/// Host: an argument is malformed (NULL, a size field too small).
pub const VIGIL_E_INVALID_ARGUMENT: VigilStatus = 8;

/// `vigil_error`: room for a message explaining a non-zero status. Owned by
/// the host, valid for the call it is passed to. Write it with [`error_set`].
/// Frozen for all majors.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VigilError {
    /// sizeof(vigil_error) as the host compiled it.
    pub size: u32,
    /// 0.
    pub reserved: u32,
    /// Host-owned buffer, to receive NUL-terminated UTF-8.
    pub message: *mut c_char,
    /// Bytes in `message`, including room for the NUL.
    pub capacity: usize,
}

/// `vigil_error_set`: writes `message` into `err` (NULL-safe) and returns
/// `status`. The message is cut to fit the host's buffer, on a UTF-8
/// character boundary, and NUL-terminated.
///
/// # Safety
/// `err` is NULL or points to a `VigilError` the host passed to this call.
pub unsafe fn error_set(err: *mut VigilError, status: VigilStatus, message: &str) -> VigilStatus {
    if err.is_null() {
        return status;
    }
    // Through the raw pointer, field by field: the size check comes first.
    let (size, buffer, capacity) = unsafe {
        (
            ptr::read(ptr::addr_of!((*err).size)),
            ptr::read(ptr::addr_of!((*err).message)),
            ptr::read(ptr::addr_of!((*err).capacity)),
        )
    };
    if (size as usize) < size_of::<VigilError>() || buffer.is_null() || capacity == 0 {
        return status;
    }
    let mut len = message.len().min(capacity - 1);
    while !message.is_char_boundary(len) {
        len -= 1; // never cut a multi-byte character in half
    }
    unsafe {
        ptr::copy_nonoverlapping(message.as_ptr(), buffer as *mut u8, len);
        *buffer.add(len) = 0;
    }
    status
}

// ------------------------------------------------------------ field_end!

/// `field_end!(Type, field)`: offset of `field` in `Type` plus its size, i.e.
/// `offsetof(T, f) + sizeof(((T *)0)->f)` in C. A run-time value (computing
/// offsets in a `const` needs a newer Rust than 1.63); it is what
/// `VIGIL_HOST_HAS` and the header's `*_SIZE_1_0` macros are made of.
macro_rules! field_end {
    ($ty:ty, $field:ident) => {{
        let uninit = ::std::mem::MaybeUninit::<$ty>::uninit();
        let base = uninit.as_ptr();
        // Only the address is taken: nothing uninitialised is read.
        #[allow(unused_unsafe)]
        let field = unsafe { ::std::ptr::addr_of!((*base).$field) };
        (field as usize - base as usize) + $crate::abi::size_of_pointee(field)
    }};
}
#[allow(unused_imports)]
pub(crate) use field_end;

// ------------------------------------------------------------------ strings

/// `vigil_str`: UTF-8 text as pointer and length in bytes; not necessarily
/// NUL-terminated. `ptr` may be NULL only when `len` is 0. Frozen for major 1.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VigilStr {
    pub ptr: *const c_char,
    pub len: usize,
}

impl VigilStr {
    /// The empty string (NULL, 0).
    pub const EMPTY: VigilStr = VigilStr {
        ptr: ptr::null(),
        len: 0,
    };

    /// `VIGIL_STR(literal)`: usable in statics, for the self-description.
    pub const fn from_static(s: &'static str) -> VigilStr {
        VigilStr {
            ptr: s.as_ptr().cast::<c_char>(),
            len: s.len(),
        }
    }

    /// Borrows `s` (or any byte buffer): valid only while `s` is, which is
    /// enough for everything handed to the host, since the host copies what it
    /// keeps before the call returns.
    pub fn borrow(s: &[u8]) -> VigilStr {
        VigilStr {
            ptr: s.as_ptr().cast::<c_char>(),
            len: s.len(),
        }
    }

    /// The bytes (not necessarily UTF-8 if the host sent them unchecked; the
    /// host does repair what it hands to plugins, but be tolerant anyway).
    ///
    /// # Safety
    /// `self` must point to `len` readable bytes that outlive `'a`; strings
    /// the host passes in are borrowed for the duration of the call only.
    pub unsafe fn as_bytes<'a>(&self) -> &'a [u8] {
        if self.ptr.is_null() || self.len == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
        }
    }
}

// ------------------------------------------------------------------- values

/// `vigil_type`: the type of a value (event field, option, declared field).
pub type VigilType = u32;
/// No value (an option without a default).
pub const VIGIL_TYPE_NONE: VigilType = 0;
/// `as_.boolean`: 0 or 1.
pub const VIGIL_TYPE_BOOL: VigilType = 1;
/// `as_.i64`.
pub const VIGIL_TYPE_INT: VigilType = 2;
/// `as_.f64`; NaN and infinities allowed.
pub const VIGIL_TYPE_DOUBLE: VigilType = 3;
/// `as_.str`.
pub const VIGIL_TYPE_STRING: VigilType = 4;
/// Option only: `as_.i64`, nanoseconds (manifest "250ms", "5s").
pub const VIGIL_TYPE_DURATION: VigilType = 5;
/// Option only: `as_.i64`, bytes (manifest "64MiB", "1GB", "4096").
pub const VIGIL_TYPE_SIZE: VigilType = 6;
/// Option only: `as_.str`, any YAML value handed over as JSON text.
pub const VIGIL_TYPE_JSON: VigilType = 7;

/// The union inside `vigil_value`. Read the member `type_` names, only.
#[repr(C)]
#[derive(Clone, Copy)]
pub union VigilValueAs {
    pub i64: i64,
    pub f64: f64,
    pub boolean: i32,
    pub str: VigilStr,
}

/// `vigil_value`: a typed value. Frozen for major 1 (24 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilValue {
    /// A `VigilType` (C name: `type`).
    pub type_: u32,
    /// 0.
    pub reserved: u32,
    /// C name: `as`.
    pub as_: VigilValueAs,
}

impl VigilValue {
    pub const NONE: VigilValue = VigilValue {
        type_: VIGIL_TYPE_NONE,
        reserved: 0,
        as_: VigilValueAs { i64: 0 },
    };

    pub fn boolean(b: bool) -> VigilValue {
        VigilValue {
            type_: VIGIL_TYPE_BOOL,
            reserved: 0,
            as_: VigilValueAs { boolean: b as i32 },
        }
    }
    pub fn int(i: i64) -> VigilValue {
        VigilValue {
            type_: VIGIL_TYPE_INT,
            reserved: 0,
            as_: VigilValueAs { i64: i },
        }
    }
    pub fn double(d: f64) -> VigilValue {
        VigilValue {
            type_: VIGIL_TYPE_DOUBLE,
            reserved: 0,
            as_: VigilValueAs { f64: d },
        }
    }
    /// Borrows `s`: keep `s` alive until the call that takes the value returns.
    pub fn string(s: &[u8]) -> VigilValue {
        VigilValue {
            type_: VIGIL_TYPE_STRING,
            reserved: 0,
            as_: VigilValueAs {
                str: VigilStr::borrow(s),
            },
        }
    }
}

/// `vigil_field`: one named value of an event. Frozen for major 1.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilField {
    /// By convention [a-z0-9_.]+, declared in the kind's `VigilEventSpec`.
    pub name: VigilStr,
    /// BOOL, INT, DOUBLE or STRING.
    pub value: VigilValue,
}

// ------------------------------------------------------------------- events

/// `vigil_severity`: how bad an event is (ordered).
pub type VigilSeverity = u32;
pub const VIGIL_SEVERITY_DEBUG: VigilSeverity = 0;
pub const VIGIL_SEVERITY_INFO: VigilSeverity = 1;
pub const VIGIL_SEVERITY_NOTICE: VigilSeverity = 2;
pub const VIGIL_SEVERITY_WARNING: VigilSeverity = 3;
pub const VIGIL_SEVERITY_ERROR: VigilSeverity = 4;
pub const VIGIL_SEVERITY_CRITICAL: VigilSeverity = 5;

/// `vigil_event`: an event as a plugin hands it to `emit`, which copies it
/// before returning (the fields may live on the stack).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilEvent {
    /// `size_of::<VigilEvent>()`.
    pub size: u32,
    /// A `VigilSeverity`.
    pub severity: u32,
    /// One of the declared kinds, e.g. "sample".
    pub kind: VigilStr,
    /// CLOCK_REALTIME nanoseconds since the epoch; 0 = now (the host stamps it).
    pub time_ns: i64,
    /// `field_count` fields; may be NULL if 0.
    pub fields: *const VigilField,
    pub field_count: usize,
}

// --------------------------------------------------------------- host table

/// `vigil_host_ctx`: opaque handle for one instance, given by the host in
/// create. Only ever used behind a pointer.
#[repr(C)]
pub struct VigilHostCtx {
    _private: [u8; 0],
}

/// `vigil_log_level` (same order as severities).
pub type VigilLogLevel = u32;
pub const VIGIL_LOG_DEBUG: VigilLogLevel = 0;
pub const VIGIL_LOG_INFO: VigilLogLevel = 1;
pub const VIGIL_LOG_NOTICE: VigilLogLevel = 2;
pub const VIGIL_LOG_WARNING: VigilLogLevel = 3;
pub const VIGIL_LOG_ERROR: VigilLogLevel = 4;
pub const VIGIL_LOG_CRITICAL: VigilLogLevel = 5;

/// `vigil_host_api`: the functions the host offers. Const, host-owned, valid
/// until the process exits; it only grows at its end. A host of an older
/// minor sends a smaller table: copy it with [`read_sized`] (members it lacks
/// become None) or check [`VigilHostApi::has`] before calling a member added
/// after 1.0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilHostApi {
    /// sizeof(vigil_host_api) as the host compiled it.
    pub size: u32,
    /// The version this table implements: the major,
    pub abi_major: u16,
    /// and the highest minor of it (members up to `size`).
    pub abi_minor: u16,

    /// Hands an event to the host, which copies it before returning. Returns
    /// VIGIL_OK, VIGIL_E_STOPPED (instance not running) or
    /// VIGIL_E_INVALID_ARGUMENT.
    pub emit: Option<
        unsafe extern "C" fn(host: *mut VigilHostCtx, event: *const VigilEvent) -> VigilStatus,
    >,
    /// Writes one line to the host's log, attributed to the instance.
    pub log: Option<
        unsafe extern "C" fn(host: *mut VigilHostCtx, level: VigilLogLevel, message: VigilStr),
    >,
    /// Declares whether the instance's source exists now (`reason` says why not).
    pub set_availability:
        Option<unsafe extern "C" fn(host: *mut VigilHostCtx, available: i32, reason: VigilStr)>,
    /// CLOCK_REALTIME in nanoseconds, as the host sees it.
    pub now_ns: Option<unsafe extern "C" fn(host: *mut VigilHostCtx) -> i64>,

    // ---- ABI 1.1 (check `has(field_end!(VigilHostApi, finished))`) ----
    /// The instance has nothing more to emit (a bounded workload is done).
    pub finished: Option<unsafe extern "C" fn(host: *mut VigilHostCtx)>,
}

impl VigilHostApi {
    /// `VIGIL_HOST_HAS(api, member)`: true when the host's table is large
    /// enough to hold a member ending at `member_end`, e.g.
    /// `api.has(field_end!(VigilHostApi, finished))`.
    pub fn has(&self, member_end: usize) -> bool {
        self.size as usize >= member_end
    }
}

// --------------------------------------------------------- self-description

/// `VIGIL_OPTION_REQUIRED`: the manifest must give a value.
pub const VIGIL_OPTION_REQUIRED: u32 = 1 << 0;

/// `vigil_option_spec`: one option a plugin accepts in the manifest's `options:`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilOptionSpec {
    /// `size_of::<VigilOptionSpec>()`; the same for every element.
    pub size: u32,
    /// A `VigilType`: BOOL INT DOUBLE STRING DURATION SIZE JSON.
    pub type_: u32,
    /// [a-z][a-z0-9_]*
    pub name: VigilStr,
    /// The default as a plain YAML scalar of the option's type ("false",
    /// "/proc", "1s"); empty: no default.
    pub default_text: VigilStr,
    /// One sentence for `vigil plugins describe`.
    pub doc: VigilStr,
    /// VIGIL_OPTION_*.
    pub flags: u32,
    /// 0.
    pub reserved: u32,
    // ---- ABI 1.3 ----
    /// A value that works on any machine, written as `default_text` is:
    /// `vigil plugins check` with no --option takes it in place of the
    /// default, so that a plugin is checked as shipped. `vigil run` never
    /// uses it. Empty: none.
    pub example_text: VigilStr,
}

/// `VIGIL_FIELD_IDENTITY` (ABI 1.4): the field says which thing the event is
/// about (an interface's name, a CPU number); a STRING or INT field only.
pub const VIGIL_FIELD_IDENTITY: u32 = 1 << 0;
/// `VIGIL_FIELD_COUNTER` (ABI 1.4): the field only grows, but for resets of
/// its source; an INT or DOUBLE field only, never an identity.
pub const VIGIL_FIELD_COUNTER: u32 = 1 << 1;

/// `vigil_field_spec`: one field of a declared event kind.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilFieldSpec {
    /// `size_of::<VigilFieldSpec>()`; the same for every element.
    pub size: u32,
    /// A `VigilType`: BOOL INT DOUBLE STRING.
    pub type_: u32,
    /// Non-empty, unique within the kind.
    pub name: VigilStr,
    /// "ratio", "bytes", "seconds"...; may be empty.
    pub unit: VigilStr,
    pub doc: VigilStr,
    // ---- ABI 1.4 ----
    /// VIGIL_FIELD_*.
    pub flags: u32,
    /// 0.
    pub reserved: u32,
}

/// `VIGIL_EVENT_DYNAMIC_FIELDS` (ABI 1.2): the kind's fields are named by the
/// instance's options; `fields` lists only those always present.
pub const VIGIL_EVENT_DYNAMIC_FIELDS: u32 = 1 << 0;
/// `VIGIL_EVENT_ON_CHANGE` (ABI 1.4): events of the kind come as a snapshot
/// on start, then only when something changed.
pub const VIGIL_EVENT_ON_CHANGE: u32 = 1 << 1;

/// `vigil_event_spec`: one kind of event a plugin emits, with its fields.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilEventSpec {
    /// `size_of::<VigilEventSpec>()`; the same for every element.
    pub size: u32,
    /// VIGIL_EVENT_* (ABI 1.2; it was `reserved`, 0, before).
    pub flags: u32,
    /// [a-z][a-z0-9_]*, e.g. "sample".
    pub kind: VigilStr,
    pub doc: VigilStr,
    /// `field_count` fields.
    pub fields: *const VigilFieldSpec,
    pub field_count: usize,
}

/// Constructors for the self-description, usable in `static`s: they fill in
/// `size` and the reserved fields, so a spec is one line per element.
impl VigilOptionSpec {
    pub const fn new(
        type_: VigilType,
        name: &'static str,
        default_text: &'static str,
        doc: &'static str,
    ) -> Self {
        VigilOptionSpec {
            size: size_of::<VigilOptionSpec>() as u32,
            type_,
            name: VigilStr::from_static(name),
            default_text: VigilStr::from_static(default_text),
            doc: VigilStr::from_static(doc),
            flags: 0,
            reserved: 0,
            example_text: VigilStr::EMPTY,
        }
    }
    /// The same, with VIGIL_OPTION_* flags.
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
    /// The same, with an example value (ABI 1.3), written as a default is.
    pub const fn with_example(mut self, example_text: &'static str) -> Self {
        self.example_text = VigilStr::from_static(example_text);
        self
    }
}

impl VigilFieldSpec {
    pub const fn new(
        type_: VigilType,
        name: &'static str,
        unit: &'static str,
        doc: &'static str,
    ) -> Self {
        VigilFieldSpec {
            size: size_of::<VigilFieldSpec>() as u32,
            type_,
            name: VigilStr::from_static(name),
            unit: VigilStr::from_static(unit),
            doc: VigilStr::from_static(doc),
            flags: 0,
            reserved: 0,
        }
    }
    /// The same, with VIGIL_FIELD_* flags (ABI 1.4).
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
}

impl VigilEventSpec {
    pub const fn new(
        kind: &'static str,
        doc: &'static str,
        fields: &'static [VigilFieldSpec],
    ) -> Self {
        VigilEventSpec {
            size: size_of::<VigilEventSpec>() as u32,
            flags: 0,
            kind: VigilStr::from_static(kind),
            doc: VigilStr::from_static(doc),
            fields: fields.as_ptr(),
            field_count: fields.len(),
        }
    }
    /// The same, with VIGIL_EVENT_* flags.
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
}

/// `vigil_plugin_kind`: monitors emit events; outputs (ABI 1.5) take them
/// and send them on (a sink of `type: plugin` in the manifest).
pub type VigilPluginKind = u32;
pub const VIGIL_PLUGIN_MONITOR: VigilPluginKind = 1;
pub const VIGIL_PLUGIN_OUTPUT: VigilPluginKind = 2;

/// `vigil_option`: one option value as the host passes it to create. Frozen
/// for major 1.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilOption {
    pub name: VigilStr,
    /// The declared type; VIGIL_TYPE_NONE if unset and without a default.
    pub value: VigilValue,
}

/// `vigil_create_args`: the arguments of create, borrowed for the call (copy
/// what you keep), except `host` and `api`, valid for the life of the instance.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilCreateArgs {
    pub size: u32,
    pub reserved: u32,
    /// The manifest's monitor name.
    pub instance_name: VigilStr,
    /// Pass to every host function.
    pub host: *mut VigilHostCtx,
    /// The host's function table.
    pub api: *const VigilHostApi,
    /// Every declared option, in declared order, defaults filled in.
    pub options: *const VigilOption,
    pub option_count: usize,
    /// Poll interval; 0 for push-only plugins.
    pub interval_ns: i64,
}

// ------------------------------------------------------- outputs (ABI 1.5)

/// `vigil_output_event`: an event as the host hands it to an output, with
/// the host's stamps. Borrowed for the `write` call, like everything in the
/// batch; `time_ns` is always set. Read it through [`Batch`], which steps
/// by the batch's `event_size` and applies the size rule.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilOutputEvent {
    /// sizeof(vigil_output_event) as the host compiled it.
    pub size: u32,
    /// A `VigilSeverity`.
    pub severity: u32,
    pub kind: VigilStr,
    /// CLOCK_REALTIME nanoseconds since the epoch.
    pub time_ns: i64,
    /// `field_count` fields.
    pub fields: *const VigilField,
    pub field_count: usize,
    /// The host's name.
    pub host: VigilStr,
    /// The monitor (instance) that emitted it.
    pub monitor: VigilStr,
    /// The monitor's plugin.
    pub plugin: VigilStr,
    /// The host's sequence number, per host run.
    pub seq: u64,
}

/// `vigil_batch`: the events of one `write` call. Borrowed for the call; the
/// host keeps the events until the plugin answered for each.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilBatch {
    /// sizeof(vigil_batch).
    pub size: u32,
    /// 1 the first time these events are written, then 2, 3...
    pub attempt: u32,
    pub events: *const VigilOutputEvent,
    /// At least 1.
    pub count: usize,
    /// The stride of `events`: sizeof(vigil_output_event) as the host
    /// compiled it. Step by it, never by `size_of::<VigilOutputEvent>()`.
    pub event_size: usize,
}

/// `vigil_write_verdict`: an output's answer for an event. A plain `u32`: an
/// unknown value counts as RETRY.
pub type VigilWriteVerdict = u32;
/// Delivered.
pub const VIGIL_WRITE_OK: VigilWriteVerdict = 0;
/// Not delivered, may be later: the host keeps it and writes it again (after
/// `retry_after_ns`, or its own backoff).
pub const VIGIL_WRITE_RETRY: VigilWriteVerdict = 1;
/// Never deliverable: the host counts it lost as `rejected`, with the call's
/// error message as the reason.
pub const VIGIL_WRITE_REJECT: VigilWriteVerdict = 2;

/// `vigil_write_result`: where `write` answers; host-owned, valid for the
/// call. Write it with [`answer`], which keeps to the size rule.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilWriteResult {
    /// sizeof(vigil_write_result) as the host compiled it.
    pub size: u32,
    /// A `VigilWriteVerdict` for every event; host preset: VIGIL_WRITE_OK.
    pub verdict: u32,
    /// With RETRY: wait at least this long (0: the host's backoff).
    pub retry_after_ns: i64,
    /// `count` bytes, host preset to VIGIL_WRITE_OK.
    pub per_event: *mut u8,
    /// 1: `per_event` holds the answers.
    pub per_event_used: u32,
    /// 0.
    pub reserved: u32,
}

/// create: reads and validates options, allocates the instance, sets
/// `*instance`. No threads, no events yet.
pub type CreateFn = unsafe extern "C" fn(
    args: *const VigilCreateArgs,
    instance: *mut *mut c_void,
    err: *mut VigilError,
) -> VigilStatus;
/// start, poll and stop.
pub type InstanceFn =
    unsafe extern "C" fn(instance: *mut c_void, err: *mut VigilError) -> VigilStatus;
/// destroy: frees the instance; never fails.
pub type DestroyFn = unsafe extern "C" fn(instance: *mut c_void);
/// write (outputs, ABI 1.5): sends a batch and answers for every event in
/// `result`. Returns VIGIL_OK with the answer, or an error for the whole
/// batch (TEMPORARY: retried like RETRY; FATAL: the sink fails).
pub type WriteFn = unsafe extern "C" fn(
    instance: *mut c_void,
    batch: *const VigilBatch,
    result: *mut VigilWriteResult,
    err: *mut VigilError,
) -> VigilStatus;
/// flush (outputs, ABI 1.5): sends what the plugin buffered, giving up at
/// `deadline_ns` (CLOCK_MONOTONIC nanoseconds).
pub type FlushFn = unsafe extern "C" fn(
    instance: *mut c_void,
    deadline_ns: i64,
    err: *mut VigilError,
) -> VigilStatus;

/// `vigil_plugin_descriptor`: what a plugin is. It, and everything it points
/// to, must stay valid and unchanged until the process exits: make it a
/// `static` (see lib.rs). The lifecycle rules are in the header, above the C
/// struct: read them.
///
/// These are the members up to ABI 1.4, a monitor's whole descriptor; an
/// output's is [`VigilOutputDescriptor`], which appends 1.5's `write` and
/// `flush`. (In C one struct grows and a designated initialiser zeroes what
/// it does not name; a Rust struct literal must name every field, so each
/// appended group is a struct of its own, and no descriptor written for an
/// older minor stops compiling. A host reads members only up to `size`.)
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilPluginDescriptor {
    /// `size_of::<VigilPluginDescriptor>()`.
    pub size: u32,
    /// A `VigilPluginKind`.
    pub kind: u32,
    /// [a-z][a-z0-9_-]*, the name manifests use.
    pub name: VigilStr,
    /// The plugin's own version, e.g. "1.2.0".
    pub version: VigilStr,
    /// One line.
    pub description: VigilStr,
    pub options: *const VigilOptionSpec,
    pub option_count: usize,
    pub events: *const VigilEventSpec,
    pub event_count: usize,
    /// Poll interval when the manifest gives none; 0: the host's default.
    pub default_interval_ns: i64,
    pub create: Option<CreateFn>,
    pub start: Option<InstanceFn>,
    /// None: push only.
    pub poll: Option<InstanceFn>,
    pub stop: Option<InstanceFn>,
    pub destroy: Option<DestroyFn>,
}

/// `vigil_plugin_descriptor` as an output (ABI 1.5) fills it: the members
/// every plugin has, then `write` and `flush`, laid out as the C struct is.
/// An output declares options and no event kinds, has no `poll`, and gives
/// `create` (open, with its options), `destroy` (close) and `write`; `start`
/// and `stop` may be None. Build one with [`VigilOutputDescriptor::new`],
/// answer negotiation with [`negotiate_output`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilOutputDescriptor {
    /// `base.size` is `size_of::<VigilOutputDescriptor>()` (at least
    /// DESCRIPTOR_SIZE_1_5), `base.kind` VIGIL_PLUGIN_OUTPUT.
    pub base: VigilPluginDescriptor,
    /// Sends a batch and answers for each event; from the sink's thread, one
    /// call at a time, between start and stop.
    pub write: Option<WriteFn>,
    /// Sends what the plugin buffered, by a CLOCK_MONOTONIC deadline; on the
    /// same thread, never beside write. None: nothing buffered.
    pub flush: Option<FlushFn>,
}

impl VigilOutputDescriptor {
    /// An output's descriptor, for a `static`: no event kinds, no poll, no
    /// start or stop (set `base.start`/`base.stop` if it needs them).
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        name: &'static str,
        version: &'static str,
        description: &'static str,
        options: &'static [VigilOptionSpec],
        create: CreateFn,
        destroy: DestroyFn,
        write: WriteFn,
        flush: Option<FlushFn>,
    ) -> Self {
        VigilOutputDescriptor {
            base: VigilPluginDescriptor {
                size: size_of::<VigilOutputDescriptor>() as u32,
                kind: VIGIL_PLUGIN_OUTPUT,
                name: VigilStr::from_static(name),
                version: VigilStr::from_static(version),
                description: VigilStr::from_static(description),
                options: options.as_ptr(),
                option_count: options.len(),
                events: ptr::null(),
                event_count: 0,
                default_interval_ns: 0,
                create: Some(create),
                start: None,
                poll: None,
                stop: None,
                destroy: Some(destroy),
            },
            write: Some(write),
            flush,
        }
    }
}

// The self-description holds raw pointers, which Rust does not let a `static`
// share between threads unless told it is safe. It is: the data is immutable
// and 'static, and the host only reads it.
unsafe impl Sync for VigilOptionSpec {}
unsafe impl Sync for VigilFieldSpec {}
unsafe impl Sync for VigilEventSpec {}
unsafe impl Sync for VigilPluginDescriptor {}
unsafe impl Sync for VigilOutputDescriptor {}

// -------------------------------------------------------------- entry point

/// `vigil_abi_version`: one ABI version, a major and the highest minor of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VigilAbiVersion {
    pub major: u16,
    pub minor: u16,
}

/// `vigil_entry_args`: what the host offers. Frozen for all majors.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilEntryArgs {
    pub size: u32,
    /// Entries in `versions`.
    pub version_count: u32,
    /// The majors the host speaks, each with its highest minor, best first.
    pub versions: *const VigilAbiVersion,
}

/// `vigil_entry_result`: what the plugin answers. Host-owned; frozen for all
/// majors. The plugin writes no field beyond `size`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VigilEntryResult {
    /// Set by the HOST.
    pub size: u32,
    /// The version the plugin chose: a major offered,
    pub abi_major: u16,
    /// and the minor the plugin was built for.
    pub abi_minor: u16,
    /// Plugin-owned, static.
    pub descriptor: *const VigilPluginDescriptor,
    /// Host-owned buffer for a refusal message.
    pub error: VigilError,
}

/// `vigil_plugin_entry_fn`: the type of the one exported symbol.
pub type VigilPluginEntryFn =
    unsafe extern "C" fn(args: *const VigilEntryArgs, result: *mut VigilEntryResult) -> VigilStatus;

/// `vigil_negotiate`: picks ABI `ABI_MAJOR.ABI_MINOR` from what the host
/// offers and answers with `descriptor`, or refuses with VIGIL_E_UNSUPPORTED
/// and a message naming both sides. It answers with the minor these bindings
/// were written for even when the host offers a lower one; the host then
/// refuses the plugin, naming both versions.
///
/// # Safety
/// `args` and `result` are the pointers the host passed to the entry point.
pub unsafe fn negotiate(
    args: *const VigilEntryArgs,
    result: *mut VigilEntryResult,
    descriptor: &'static VigilPluginDescriptor,
) -> VigilStatus {
    if args.is_null() || result.is_null() {
        return VIGIL_E_INVALID_ARGUMENT;
    }
    // Sizes first: never read or write beyond what the host says it has.
    // Every access goes through the raw pointers, one field at a time.
    let (args_size, result_size) = unsafe {
        (
            ptr::read(ptr::addr_of!((*args).size)) as usize,
            ptr::read(ptr::addr_of!((*result).size)) as usize,
        )
    };
    if args_size < field_end!(VigilEntryArgs, versions)
        || result_size < field_end!(VigilEntryResult, descriptor)
    {
        return VIGIL_E_INVALID_ARGUMENT;
    }
    let offered: &[VigilAbiVersion] = unsafe {
        let count = ptr::read(ptr::addr_of!((*args).version_count)) as usize;
        let versions = ptr::read(ptr::addr_of!((*args).versions));
        if versions.is_null() || count == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(versions, count)
        }
    };
    if offered.iter().any(|v| v.major == ABI_MAJOR) {
        unsafe {
            ptr::addr_of_mut!((*result).abi_major).write(ABI_MAJOR);
            ptr::addr_of_mut!((*result).abi_minor).write(ABI_MINOR);
            ptr::addr_of_mut!((*result).descriptor).write(descriptor);
        }
        return VIGIL_OK;
    }
    // The error buffer is the last field: write it only if the host has it.
    if result_size >= size_of::<VigilEntryResult>() {
        let list: Vec<String> = offered
            .iter()
            .map(|v| format!("{}.{}", v.major, v.minor))
            .collect();
        let message = format!(
            "plugin speaks Vigil ABI {}.{}; the host offers no major {} (it offers: {})",
            ABI_MAJOR,
            ABI_MINOR,
            ABI_MAJOR,
            if list.is_empty() {
                "nothing".to_string()
            } else {
                list.join(", ")
            }
        );
        unsafe {
            error_set(
                ptr::addr_of_mut!((*result).error),
                VIGIL_E_UNSUPPORTED,
                &message,
            )
        };
    }
    VIGIL_E_UNSUPPORTED
}

/// `vigil_negotiate` for an output: the same answer, with the output's
/// descriptor (the host reads `write` and `flush` because its `size` covers
/// them).
///
/// # Safety
/// As for [`negotiate`].
pub unsafe fn negotiate_output(
    args: *const VigilEntryArgs,
    result: *mut VigilEntryResult,
    descriptor: &'static VigilOutputDescriptor,
) -> VigilStatus {
    // The whole struct's address, as the host reads it: `base` comes first.
    let whole = descriptor as *const VigilOutputDescriptor as *const VigilPluginDescriptor;
    unsafe { negotiate(args, result, &*whole) }
}

// ------------------------------------------------------------- sizes, reads

/// `size_of` the type a pointer points to (helper of `field_end!`).
pub fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// The 1.0 size of every struct that may grow (`VIGIL_*_SIZE_1_0`): the least
/// a reader accepts; and the sizes with what later minors appended. (Written
/// as sizes minus the appended members: computing an offset in a `const`
/// needs a newer Rust than 1.63. The tests check each against `field_end!`.)
pub const EVENT_SIZE_1_0: usize = size_of::<VigilEvent>();
pub const HOST_API_SIZE_1_0: usize = size_of::<VigilHostApi>() - size_of::<usize>(); // without `finished`
pub const OPTION_SPEC_SIZE_1_0: usize = size_of::<VigilOptionSpec>() - size_of::<VigilStr>(); // without `example_text`
/// `vigil_option_spec` with `example_text` (ABI 1.3).
pub const OPTION_SPEC_SIZE_1_3: usize = size_of::<VigilOptionSpec>();
pub const FIELD_SPEC_SIZE_1_0: usize = size_of::<VigilFieldSpec>() - 2 * size_of::<u32>(); // without `flags`, `reserved`
/// `vigil_field_spec` with `flags` (ABI 1.4).
pub const FIELD_SPEC_SIZE_1_4: usize = size_of::<VigilFieldSpec>();
pub const EVENT_SPEC_SIZE_1_0: usize = size_of::<VigilEventSpec>();
pub const CREATE_ARGS_SIZE_1_0: usize = size_of::<VigilCreateArgs>();
pub const DESCRIPTOR_SIZE_1_0: usize = size_of::<VigilPluginDescriptor>();
/// The descriptor with `write` and `flush` (ABI 1.5): an output's least.
pub const DESCRIPTOR_SIZE_1_5: usize = size_of::<VigilOutputDescriptor>();
/// The output structs, new in 1.5.
pub const OUTPUT_EVENT_SIZE_1_5: usize = size_of::<VigilOutputEvent>();
pub const BATCH_SIZE_1_5: usize = size_of::<VigilBatch>();
pub const WRITE_RESULT_SIZE_1_5: usize = size_of::<VigilWriteResult>();

/// The size rule for a struct the host fills in (create args, the host
/// table): copies min(its `size`, ours) bytes into a zeroed struct of our
/// layout, so that a field an older host did not send reads as zero (None for
/// function pointers) and nothing beyond its size is read. None when the
/// pointer is NULL or the size is below `min_size` (the 1.0 size).
///
/// # Safety
/// `p` is NULL or points to a struct that starts with a `u32` size field and
/// has at least that many readable bytes. `T` must be valid when all-zero
/// (true of every struct in this file).
pub unsafe fn read_sized<T: Copy>(p: *const T, min_size: usize) -> Option<T> {
    if p.is_null() {
        return None;
    }
    let size = unsafe { ptr::read_unaligned(p as *const u32) } as usize;
    if size < min_size {
        return None;
    }
    let mut out = MaybeUninit::<T>::zeroed();
    unsafe {
        ptr::copy_nonoverlapping(
            p as *const u8,
            out.as_mut_ptr() as *mut u8,
            size.min(size_of::<T>()),
        );
        Some(out.assume_init())
    }
}

// ----------------------------------------------------------- output helpers
//
// What an output needs on top of the structs, as `read_sized`, `error_set`
// and `negotiate` are for a monitor: the batch read under the size rule and
// stepped by its stride, field values as a Rust enum, and the answer written
// where the host can read it.

/// A field's value as an output reads it. `Unknown` is a type newer than
/// these bindings (a later minor may add one): skip or reject it, never
/// guess.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FieldValue<'a> {
    Bool(bool),
    Int(i64),
    Double(f64),
    /// UTF-8 bytes (the host repairs invalid UTF-8), not NUL-terminated.
    Str(&'a [u8]),
    Unknown(u32),
}

impl VigilField {
    /// The field's name.
    ///
    /// # Safety
    /// The field is one the host passed in, read during that call; the
    /// bytes are valid for `'a` only if `'a` ends with the call.
    pub unsafe fn name_bytes<'a>(&self) -> &'a [u8] {
        unsafe { self.name.as_bytes() }
    }

    /// The field's value, by its type.
    ///
    /// # Safety
    /// As for [`VigilField::name_bytes`].
    pub unsafe fn read<'a>(&self) -> FieldValue<'a> {
        match self.value.type_ {
            VIGIL_TYPE_BOOL => FieldValue::Bool(unsafe { self.value.as_.boolean } != 0),
            VIGIL_TYPE_INT => FieldValue::Int(unsafe { self.value.as_.i64 }),
            VIGIL_TYPE_DOUBLE => FieldValue::Double(unsafe { self.value.as_.f64 }),
            VIGIL_TYPE_STRING => FieldValue::Str(unsafe { self.value.as_.str.as_bytes() }),
            other => FieldValue::Unknown(other),
        }
    }
}

/// One event of a batch, its strings and fields borrowed from the host for
/// the `write` call: copy what you keep beyond it.
#[derive(Clone, Copy)]
pub struct OutputEvent<'a> {
    /// A `VigilSeverity`.
    pub severity: VigilSeverity,
    pub kind: &'a [u8],
    /// CLOCK_REALTIME nanoseconds since the epoch.
    pub time_ns: i64,
    pub fields: &'a [VigilField],
    pub host: &'a [u8],
    pub monitor: &'a [u8],
    pub plugin: &'a [u8],
    pub seq: u64,
}

/// A batch as `write` receives it, checked once: its events are stepped
/// through by the host's `event_size` and each read under the size rule.
pub struct Batch<'a> {
    attempt: u32,
    events: *const u8,
    count: usize,
    stride: usize,
    _borrowed: std::marker::PhantomData<&'a VigilBatch>,
}

impl<'a> Batch<'a> {
    /// Reads the batch the host passed to `write`. None when it is NULL,
    /// smaller than ABI 1.5's, or its events' stride is smaller than a 1.5
    /// event: answer such a call with an error, not with verdicts.
    ///
    /// # Safety
    /// `batch` is the pointer the host passed to `write`, and `'a` ends
    /// when that call returns.
    pub unsafe fn read(batch: *const VigilBatch) -> Option<Batch<'a>> {
        let batch = unsafe { read_sized(batch, BATCH_SIZE_1_5) }?;
        if batch.event_size < OUTPUT_EVENT_SIZE_1_5 || (batch.events.is_null() && batch.count > 0) {
            return None;
        }
        Some(Batch {
            attempt: batch.attempt,
            events: batch.events as *const u8,
            count: batch.count,
            stride: batch.event_size,
            _borrowed: std::marker::PhantomData,
        })
    }

    /// 1 the first time these events are written, then 2, 3...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Events in the batch: the number of verdicts to give.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Event `index`, or None when it is out of range or malformed (its own
    /// `size` below 1.5's, a NULL pointer with a length): reject such an
    /// event.
    pub fn get(&self, index: usize) -> Option<OutputEvent<'a>> {
        if index >= self.count {
            return None;
        }
        // SAFETY: `read` was promised `count` events `stride` bytes apart,
        // valid for 'a; `read_sized` copies no more than each one's size.
        let e = unsafe {
            read_sized(
                self.events.add(index * self.stride) as *const VigilOutputEvent,
                OUTPUT_EVENT_SIZE_1_5,
            )
        }?;
        let strings = [e.kind, e.host, e.monitor, e.plugin];
        if strings.iter().any(|s| s.ptr.is_null() && s.len > 0)
            || (e.fields.is_null() && e.field_count > 0)
        {
            return None;
        }
        let fields: &'a [VigilField] = if e.field_count == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(e.fields, e.field_count) }
        };
        Some(unsafe {
            OutputEvent {
                severity: e.severity,
                kind: e.kind.as_bytes(),
                time_ns: e.time_ns,
                fields,
                host: e.host.as_bytes(),
                monitor: e.monitor.as_bytes(),
                plugin: e.plugin.as_bytes(),
                seq: e.seq,
            }
        })
    }

    /// Every event in order; None for a malformed one (see [`Batch::get`]).
    pub fn iter<'b>(&'b self) -> impl Iterator<Item = Option<OutputEvent<'a>>> + 'b {
        (0..self.count).map(move |i| self.get(i))
    }
}

/// What `write` answers: a verdict per event of the batch, in order, and
/// with RETRY the least time the host should wait before writing again.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteAnswer {
    pub verdicts: Vec<VigilWriteVerdict>,
    /// Nanoseconds; 0: the host's own backoff.
    pub retry_after_ns: i64,
}

impl WriteAnswer {
    /// The same verdict for all `count` events.
    pub fn all(count: usize, verdict: VigilWriteVerdict) -> WriteAnswer {
        WriteAnswer {
            verdicts: vec![verdict; count],
            retry_after_ns: 0,
        }
    }

    /// RETRY for all `count` events, after at least `after_ns`.
    pub fn retry_all(count: usize, after_ns: i64) -> WriteAnswer {
        WriteAnswer {
            verdicts: vec![VIGIL_WRITE_RETRY; count],
            retry_after_ns: after_ns,
        }
    }
}

/// Writes `answer` into the host's `result`: one verdict for the batch when
/// every event has the same, else one per event (`per_event`,
/// `per_event_used = 1`). Returns VIGIL_OK, or VIGIL_E_INVALID_ARGUMENT when
/// `result` is NULL or smaller than ABI 1.5's, or the answer does not have
/// exactly one verdict per event (`count`, the batch's length). Give it the
/// reason of any REJECT through `error_set(err, VIGIL_OK, reason)`: the
/// message is read whatever the status.
///
/// # Safety
/// `result` is the pointer the host passed to `write`, with the batch of
/// `count` events.
pub unsafe fn answer(
    result: *mut VigilWriteResult,
    count: usize,
    answer: &WriteAnswer,
) -> VigilStatus {
    if result.is_null() || answer.verdicts.len() != count {
        return VIGIL_E_INVALID_ARGUMENT;
    }
    let size = unsafe { ptr::read(ptr::addr_of!((*result).size)) } as usize;
    if size < WRITE_RESULT_SIZE_1_5 {
        return VIGIL_E_INVALID_ARGUMENT;
    }
    let first = answer.verdicts.first().copied().unwrap_or(VIGIL_WRITE_OK);
    let uniform = answer.verdicts.iter().all(|&v| v == first);
    let per_event = unsafe { ptr::read(ptr::addr_of!((*result).per_event)) };
    unsafe {
        ptr::addr_of_mut!((*result).retry_after_ns).write(answer.retry_after_ns.max(0));
        if uniform || per_event.is_null() {
            // Without room per event (never so from a 1.5 host), RETRY
            // everything rather than claim what was not delivered.
            let verdict = if uniform { first } else { VIGIL_WRITE_RETRY };
            ptr::addr_of_mut!((*result).verdict).write(verdict);
        } else {
            for (i, &verdict) in answer.verdicts.iter().enumerate() {
                *per_event.add(i) = verdict as u8;
            }
            ptr::addr_of_mut!((*result).per_event_used).write(1);
        }
    }
    VIGIL_OK
}

// ------------------------------------------------------------- layout pins
//
// The header's static asserts, checked when this file compiles: a mistake in
// a binding fails the build instead of corrupting memory at run time.

const _: () = assert!(
    size_of::<VigilStatus>() == 4,
    "enums are 32-bit on the wire"
);
const _: () = assert!(size_of::<VigilType>() == 4, "enums are 32-bit on the wire");
const _: () = assert!(
    size_of::<VigilLogLevel>() == 4,
    "enums are 32-bit on the wire"
);
const _: () = assert!(
    size_of::<Option<InstanceFn>>() == size_of::<*const c_void>(),
    "None is NULL"
);

#[cfg(target_pointer_width = "64")]
mod layout_pins {
    use super::*;
    const _: () = assert!(size_of::<VigilStr>() == 16, "vigil_str is frozen");
    const _: () = assert!(size_of::<VigilValue>() == 24, "vigil_value is frozen");
    const _: () = assert!(size_of::<VigilField>() == 40, "vigil_field is frozen");
    const _: () = assert!(size_of::<VigilOption>() == 40, "vigil_option is frozen");
    const _: () = assert!(size_of::<VigilEvent>() == 48, "vigil_event 1.0 layout");
    const _: () = assert!(size_of::<VigilError>() == 24, "vigil_error 1.0 layout");
    const _: () = assert!(size_of::<VigilHostApi>() == 48, "vigil_host_api 1.1 layout");
    const _: () = assert!(HOST_API_SIZE_1_0 == 40, "vigil_host_api 1.0 size");
    const _: () = assert!(OPTION_SPEC_SIZE_1_0 == 64, "vigil_option_spec 1.0 size");
    const _: () = assert!(
        size_of::<VigilOptionSpec>() == 80,
        "vigil_option_spec 1.3 layout"
    );
    const _: () = assert!(FIELD_SPEC_SIZE_1_0 == 56, "vigil_field_spec 1.0 size");
    const _: () = assert!(
        size_of::<VigilFieldSpec>() == 64,
        "vigil_field_spec 1.4 layout"
    );
    const _: () = assert!(
        size_of::<VigilEventSpec>() == 56,
        "vigil_event_spec 1.0 layout"
    );
    const _: () = assert!(
        size_of::<VigilCreateArgs>() == 64,
        "vigil_create_args 1.0 layout"
    );
    const _: () = assert!(DESCRIPTOR_SIZE_1_0 == 136, "descriptor 1.0 size");
    const _: () = assert!(
        size_of::<VigilOutputDescriptor>() == 152,
        "descriptor 1.5 layout"
    );
    const _: () = assert!(
        size_of::<VigilOutputEvent>() == 104,
        "vigil_output_event 1.5 layout"
    );
    const _: () = assert!(size_of::<VigilBatch>() == 32, "vigil_batch 1.5 layout");
    const _: () = assert!(
        size_of::<VigilWriteResult>() == 32,
        "vigil_write_result 1.5 layout"
    );
    const _: () = assert!(
        size_of::<Option<WriteFn>>() == size_of::<*const c_void>(),
        "None is NULL"
    );
    const _: () = assert!(
        size_of::<VigilAbiVersion>() == 4,
        "vigil_abi_version is frozen"
    );
    const _: () = assert!(
        size_of::<VigilEntryArgs>() == 16,
        "vigil_entry_args 1.0 layout"
    );
    const _: () = assert!(
        size_of::<VigilEntryResult>() == 40,
        "vigil_entry_result 1.0 layout"
    );
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    macro_rules! offset {
        ($ty:ty, $field:ident) => {{
            let uninit = MaybeUninit::<$ty>::uninit();
            let base = uninit.as_ptr();
            let field = unsafe { ptr::addr_of!((*base).$field) };
            field as usize - base as usize
        }};
    }

    /// The offsets of the C layout on LP64, field by field (the header's
    /// `*_SIZE_1_0` macros and a C compiler agree with these).
    #[test]
    fn offsets_match_the_c_layout() {
        assert_eq!(offset!(VigilValue, as_), 8);
        assert_eq!(offset!(VigilField, value), 16);
        assert_eq!(offset!(VigilError, message), 8);
        assert_eq!(offset!(VigilError, capacity), 16);
        assert_eq!(offset!(VigilEvent, kind), 8);
        assert_eq!(offset!(VigilEvent, time_ns), 24);
        assert_eq!(offset!(VigilEvent, fields), 32);
        assert_eq!(field_end!(VigilEvent, field_count), 48);
        assert_eq!(offset!(VigilHostApi, abi_minor), 6);
        assert_eq!(offset!(VigilHostApi, emit), 8);
        assert_eq!(field_end!(VigilHostApi, now_ns), HOST_API_SIZE_1_0);
        assert_eq!(field_end!(VigilHostApi, finished), 48);
        assert_eq!(offset!(VigilOptionSpec, name), 8);
        assert_eq!(offset!(VigilOptionSpec, flags), 56);
        assert_eq!(field_end!(VigilOptionSpec, reserved), OPTION_SPEC_SIZE_1_0);
        assert_eq!(offset!(VigilOptionSpec, example_text), 64);
        assert_eq!(
            field_end!(VigilOptionSpec, example_text),
            OPTION_SPEC_SIZE_1_3
        );
        assert_eq!(offset!(VigilFieldSpec, unit), 24);
        assert_eq!(field_end!(VigilFieldSpec, doc), FIELD_SPEC_SIZE_1_0);
        assert_eq!(offset!(VigilFieldSpec, flags), 56);
        assert_eq!(field_end!(VigilFieldSpec, reserved), FIELD_SPEC_SIZE_1_4);
        assert_eq!(offset!(VigilEventSpec, flags), 4);
        assert_eq!(offset!(VigilEventSpec, fields), 40);
        assert_eq!(field_end!(VigilEventSpec, field_count), EVENT_SPEC_SIZE_1_0);
        assert_eq!(offset!(VigilOption, value), 16);
        assert_eq!(offset!(VigilCreateArgs, host), 24);
        assert_eq!(offset!(VigilCreateArgs, options), 40);
        assert_eq!(
            field_end!(VigilCreateArgs, interval_ns),
            CREATE_ARGS_SIZE_1_0
        );
        assert_eq!(offset!(VigilPluginDescriptor, options), 56);
        assert_eq!(offset!(VigilPluginDescriptor, default_interval_ns), 88);
        assert_eq!(offset!(VigilPluginDescriptor, create), 96);
        assert_eq!(
            field_end!(VigilPluginDescriptor, destroy),
            DESCRIPTOR_SIZE_1_0
        );
        assert_eq!(offset!(VigilOutputDescriptor, write), 136);
        assert_eq!(
            field_end!(VigilOutputDescriptor, flush),
            DESCRIPTOR_SIZE_1_5
        );
        assert_eq!(offset!(VigilOutputEvent, kind), 8);
        assert_eq!(offset!(VigilOutputEvent, time_ns), 24);
        assert_eq!(offset!(VigilOutputEvent, fields), 32);
        assert_eq!(offset!(VigilOutputEvent, host), 48);
        assert_eq!(offset!(VigilOutputEvent, monitor), 64);
        assert_eq!(offset!(VigilOutputEvent, plugin), 80);
        assert_eq!(field_end!(VigilOutputEvent, seq), OUTPUT_EVENT_SIZE_1_5);
        assert_eq!(offset!(VigilBatch, attempt), 4);
        assert_eq!(offset!(VigilBatch, events), 8);
        assert_eq!(offset!(VigilBatch, count), 16);
        assert_eq!(field_end!(VigilBatch, event_size), BATCH_SIZE_1_5);
        assert_eq!(offset!(VigilWriteResult, verdict), 4);
        assert_eq!(offset!(VigilWriteResult, retry_after_ns), 8);
        assert_eq!(offset!(VigilWriteResult, per_event), 16);
        assert_eq!(offset!(VigilWriteResult, per_event_used), 24);
        assert_eq!(
            field_end!(VigilWriteResult, reserved),
            WRITE_RESULT_SIZE_1_5
        );
        assert_eq!(offset!(VigilEntryArgs, versions), 8);
        assert_eq!(offset!(VigilEntryResult, abi_minor), 6);
        assert_eq!(offset!(VigilEntryResult, descriptor), 8);
        assert_eq!(offset!(VigilEntryResult, error), 16);
    }

    fn error_with(buffer: &mut [u8]) -> VigilError {
        VigilError {
            size: size_of::<VigilError>() as u32,
            reserved: 0,
            message: buffer.as_mut_ptr() as *mut c_char,
            capacity: buffer.len(),
        }
    }

    #[test]
    fn error_set_truncates_on_a_character_boundary() {
        let mut buffer = [0xffu8; 6];
        let mut err = error_with(&mut buffer);
        let status = unsafe { error_set(&mut err, VIGIL_E_FATAL, "abcé!") }; // é is 2 bytes: 3..5
        assert_eq!(status, VIGIL_E_FATAL);
        assert_eq!(&buffer, b"abc\xc3\xa9\0");
        let mut small = [0xffu8; 5];
        let mut err = error_with(&mut small);
        unsafe { error_set(&mut err, VIGIL_E_FATAL, "abcé!") };
        assert_eq!(&small[..4], b"abc\0"); // not half of é
        assert_eq!(
            unsafe { error_set(ptr::null_mut(), VIGIL_E_TEMPORARY, "x") },
            VIGIL_E_TEMPORARY
        );
    }

    static DUMMY: VigilPluginDescriptor = VigilPluginDescriptor {
        size: size_of::<VigilPluginDescriptor>() as u32,
        kind: VIGIL_PLUGIN_MONITOR,
        name: VigilStr::from_static("dummy"),
        version: VigilStr::EMPTY,
        description: VigilStr::EMPTY,
        options: ptr::null(),
        option_count: 0,
        events: ptr::null(),
        event_count: 0,
        default_interval_ns: 0,
        create: None,
        start: None,
        poll: None,
        stop: None,
        destroy: None,
    };

    fn negotiate_with(
        offered: &[VigilAbiVersion],
        message: &mut [u8],
    ) -> (VigilStatus, VigilEntryResult) {
        let args = VigilEntryArgs {
            size: size_of::<VigilEntryArgs>() as u32,
            version_count: offered.len() as u32,
            versions: offered.as_ptr(),
        };
        let mut result = VigilEntryResult {
            size: size_of::<VigilEntryResult>() as u32,
            abi_major: 0,
            abi_minor: 0,
            descriptor: ptr::null(),
            error: error_with(message),
        };
        let status = unsafe { negotiate(&args, &mut result, &DUMMY) };
        (status, result)
    }

    #[test]
    fn negotiate_answers_the_minor_it_was_written_for() {
        let mut message = [0u8; 128];
        let offered = [
            VigilAbiVersion { major: 2, minor: 0 },
            VigilAbiVersion { major: 1, minor: 7 },
        ];
        let (status, result) = negotiate_with(&offered, &mut message);
        assert_eq!(status, VIGIL_OK);
        assert_eq!((result.abi_major, result.abi_minor), (1, ABI_MINOR));
        assert_eq!(result.descriptor, &DUMMY as *const _);
    }

    #[test]
    fn negotiate_refuses_other_majors_naming_both() {
        let mut message = [0u8; 128];
        let (status, result) =
            negotiate_with(&[VigilAbiVersion { major: 2, minor: 1 }], &mut message);
        assert_eq!(status, VIGIL_E_UNSUPPORTED);
        assert!(result.descriptor.is_null());
        let end = message.iter().position(|&b| b == 0).unwrap();
        assert_eq!(
            std::str::from_utf8(&message[..end]).unwrap(),
            "plugin speaks Vigil ABI 1.5; the host offers no major 1 (it offers: 2.1)"
        );
    }

    unsafe extern "C" fn no_create(
        _: *const VigilCreateArgs,
        _: *mut *mut c_void,
        _: *mut VigilError,
    ) -> VigilStatus {
        VIGIL_E_FATAL
    }
    unsafe extern "C" fn no_destroy(_: *mut c_void) {}
    unsafe extern "C" fn no_write(
        _: *mut c_void,
        _: *const VigilBatch,
        _: *mut VigilWriteResult,
        _: *mut VigilError,
    ) -> VigilStatus {
        VIGIL_E_FATAL
    }

    static OUTPUT: VigilOutputDescriptor = VigilOutputDescriptor::new(
        "out",
        "1.0.0",
        "An output.",
        &[],
        no_create,
        no_destroy,
        no_write,
        None,
    );

    /// The host reads an output's descriptor from its start, 152 bytes of
    /// it: the size says so, and `write` lies where the C struct has it.
    #[test]
    fn an_output_descriptor_is_the_c_struct_with_write_and_flush() {
        assert_eq!(OUTPUT.base.size as usize, DESCRIPTOR_SIZE_1_5);
        assert_eq!(OUTPUT.base.kind, VIGIL_PLUGIN_OUTPUT);
        assert!(OUTPUT.base.poll.is_none() && OUTPUT.base.event_count == 0);
        let mut message = [0u8; 128];
        let args = VigilEntryArgs {
            size: size_of::<VigilEntryArgs>() as u32,
            version_count: 1,
            versions: &VigilAbiVersion { major: 1, minor: 5 },
        };
        let mut result = VigilEntryResult {
            size: size_of::<VigilEntryResult>() as u32,
            abi_major: 0,
            abi_minor: 0,
            descriptor: ptr::null(),
            error: error_with(&mut message),
        };
        assert_eq!(
            unsafe { negotiate_output(&args, &mut result, &OUTPUT) },
            VIGIL_OK
        );
        assert_eq!(result.descriptor as usize, &OUTPUT as *const _ as usize);
        let write =
            unsafe { *((result.descriptor as *const u8).add(136) as *const Option<WriteFn>) };
        assert_eq!(
            write.map(|f| f as usize),
            Some(no_write as WriteFn as usize)
        );
    }

    /// A batch as a newer host may lay it out: events with 16 bytes more
    /// than a 1.5 event (a later minor's members), stepped by `event_size`.
    #[test]
    fn a_batch_is_stepped_by_the_hosts_stride_and_read_by_the_size_rule() {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Newer {
            event: VigilOutputEvent,
            later: [u64; 2],
        }
        let fields = [
            VigilField {
                name: VigilStr::from_static("n"),
                value: VigilValue::int(-3),
            },
            VigilField {
                name: VigilStr::from_static("s"),
                value: VigilValue::string(b"x y"),
            },
            VigilField {
                name: VigilStr::from_static("u"),
                value: VigilValue {
                    type_: 99,
                    reserved: 0,
                    as_: VigilValueAs { i64: 0 },
                },
            },
        ];
        let event = |seq: u64, size: usize, fields: &[VigilField]| Newer {
            event: VigilOutputEvent {
                size: size as u32,
                severity: VIGIL_SEVERITY_WARNING,
                kind: VigilStr::from_static("sample"),
                time_ns: 1_700_000_000_123_456_789,
                fields: fields.as_ptr(),
                field_count: fields.len(),
                host: VigilStr::from_static("h"),
                monitor: VigilStr::from_static("m"),
                plugin: VigilStr::from_static("p"),
                seq,
            },
            later: [7, 7],
        };
        let events = [
            event(1, size_of::<Newer>(), &fields),
            event(2, OUTPUT_EVENT_SIZE_1_5 - 8, &[]), // too small: malformed
            event(3, size_of::<Newer>(), &[]),
        ];
        let batch = VigilBatch {
            size: size_of::<VigilBatch>() as u32,
            attempt: 2,
            events: events.as_ptr() as *const VigilOutputEvent,
            count: events.len(),
            event_size: size_of::<Newer>(),
        };
        let read = unsafe { Batch::read(&batch) }.unwrap();
        assert_eq!((read.attempt(), read.len()), (2, 3));
        let all: Vec<Option<OutputEvent>> = read.iter().collect();
        let first = all[0].unwrap();
        assert_eq!(
            (first.seq, first.kind, first.monitor),
            (1, &b"sample"[..], &b"m"[..])
        );
        assert_eq!(first.severity, VIGIL_SEVERITY_WARNING);
        assert_eq!(first.time_ns, 1_700_000_000_123_456_789);
        let values: Vec<FieldValue> = first.fields.iter().map(|f| unsafe { f.read() }).collect();
        assert_eq!(
            values,
            [
                FieldValue::Int(-3),
                FieldValue::Str(b"x y"),
                FieldValue::Unknown(99)
            ]
        );
        assert!(all[1].is_none());
        assert_eq!(all[2].unwrap().seq, 3);
        assert!(all[2].unwrap().fields.is_empty());
        assert!(read.get(3).is_none());

        let mut short = batch;
        short.event_size = OUTPUT_EVENT_SIZE_1_5 - 8;
        assert!(unsafe { Batch::read(&short) }.is_none());
        short = batch;
        short.size = 16;
        assert!(unsafe { Batch::read(&short) }.is_none());
        assert!(unsafe { Batch::read(ptr::null()) }.is_none());
    }

    fn result_with(per_event: &mut [u8]) -> VigilWriteResult {
        VigilWriteResult {
            size: size_of::<VigilWriteResult>() as u32,
            verdict: VIGIL_WRITE_OK,
            retry_after_ns: 0,
            per_event: per_event.as_mut_ptr(),
            per_event_used: 0,
            reserved: 0,
        }
    }

    #[test]
    fn an_answer_is_one_verdict_when_all_agree_else_one_per_event() {
        let mut bytes = [0u8; 3];
        let mut result = result_with(&mut bytes);
        let retry = WriteAnswer::retry_all(3, 1_000);
        assert_eq!(unsafe { answer(&mut result, 3, &retry) }, VIGIL_OK);
        assert_eq!(
            (result.verdict, result.retry_after_ns, result.per_event_used),
            (VIGIL_WRITE_RETRY, 1_000, 0)
        );

        let mut bytes = [0u8; 3];
        let mut result = result_with(&mut bytes);
        let mixed = WriteAnswer {
            verdicts: vec![VIGIL_WRITE_OK, VIGIL_WRITE_REJECT, VIGIL_WRITE_RETRY],
            retry_after_ns: -5,
        };
        assert_eq!(unsafe { answer(&mut result, 3, &mixed) }, VIGIL_OK);
        assert_eq!((result.per_event_used, result.retry_after_ns), (1, 0));
        assert_eq!(bytes, [0, 2, 1]);

        let mut bytes = [0u8; 3];
        let mut result = result_with(&mut bytes);
        assert_eq!(
            unsafe { answer(&mut result, 2, &mixed) },
            VIGIL_E_INVALID_ARGUMENT
        );
        result.size = 16;
        assert_eq!(
            unsafe { answer(&mut result, 3, &mixed) },
            VIGIL_E_INVALID_ARGUMENT
        );
        assert_eq!(bytes, [0, 0, 0]);
        assert_eq!(
            unsafe { answer(ptr::null_mut(), 3, &mixed) },
            VIGIL_E_INVALID_ARGUMENT
        );
    }
}
