//! Hand-written Rust bindings of `Sources/CVigilPlugin/include/vigil_plugin.h`
//! (Vigil plugin ABI 1.2).
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
/// in negotiation. 1.2 is the first with `VigilEventSpec::flags`.
pub const ABI_MINOR: u16 = 2;

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
}

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
}

/// `VIGIL_EVENT_DYNAMIC_FIELDS` (ABI 1.2): the kind's fields are named by the
/// instance's options; `fields` lists only those always present.
pub const VIGIL_EVENT_DYNAMIC_FIELDS: u32 = 1 << 0;

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
        }
    }
    /// The same, with VIGIL_OPTION_* flags.
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
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
        }
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

/// `vigil_plugin_kind`.
pub type VigilPluginKind = u32;
pub const VIGIL_PLUGIN_MONITOR: VigilPluginKind = 1;

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

/// `vigil_plugin_descriptor`: what a plugin is. It, and everything it points
/// to, must stay valid and unchanged until the process exits: make it a
/// `static` (see lib.rs). The lifecycle rules are in the header, above the C
/// struct: read them.
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

// The self-description holds raw pointers, which Rust does not let a `static`
// share between threads unless told it is safe. It is: the data is immutable
// and 'static, and the host only reads it.
unsafe impl Sync for VigilOptionSpec {}
unsafe impl Sync for VigilFieldSpec {}
unsafe impl Sync for VigilEventSpec {}
unsafe impl Sync for VigilPluginDescriptor {}

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

// ------------------------------------------------------------- sizes, reads

/// `size_of` the type a pointer points to (helper of `field_end!`).
pub fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// The 1.0 size of every struct that may grow (`VIGIL_*_SIZE_1_0`): the least
/// a reader accepts. Everything but the host table is still at its 1.0 layout.
pub const EVENT_SIZE_1_0: usize = size_of::<VigilEvent>();
pub const HOST_API_SIZE_1_0: usize = size_of::<VigilHostApi>() - size_of::<usize>(); // without `finished`
pub const OPTION_SPEC_SIZE_1_0: usize = size_of::<VigilOptionSpec>();
pub const FIELD_SPEC_SIZE_1_0: usize = size_of::<VigilFieldSpec>();
pub const EVENT_SPEC_SIZE_1_0: usize = size_of::<VigilEventSpec>();
pub const CREATE_ARGS_SIZE_1_0: usize = size_of::<VigilCreateArgs>();
pub const DESCRIPTOR_SIZE_1_0: usize = size_of::<VigilPluginDescriptor>();

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
    const _: () = assert!(
        size_of::<VigilOptionSpec>() == 64,
        "vigil_option_spec 1.0 layout"
    );
    const _: () = assert!(
        size_of::<VigilFieldSpec>() == 56,
        "vigil_field_spec 1.0 layout"
    );
    const _: () = assert!(
        size_of::<VigilEventSpec>() == 56,
        "vigil_event_spec 1.0 layout"
    );
    const _: () = assert!(
        size_of::<VigilCreateArgs>() == 64,
        "vigil_create_args 1.0 layout"
    );
    const _: () = assert!(
        size_of::<VigilPluginDescriptor>() == 136,
        "descriptor 1.0 layout"
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
        assert_eq!(offset!(VigilFieldSpec, unit), 24);
        assert_eq!(field_end!(VigilFieldSpec, doc), FIELD_SPEC_SIZE_1_0);
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
            "plugin speaks Vigil ABI 1.2; the host offers no major 1 (it offers: 2.1)"
        );
    }
}
