//! boottime: an example Vigil monitor plugin in Rust. Copy it to start your own.
//!
//! What it does: every interval the host calls `poll`, which reads
//! `PROCFS/uptime` and `PROCFS/stat` (`procfs` is an option, "/proc" by
//! default) and emits one event of kind `sample`:
//!
//! ```text
//!     uptime      double  seconds since boot (first number of PROCFS/uptime)
//!     idle_ratio  double  idle / (uptime × cpus): the share of all CPU time
//!                         since boot that was idle, 0…1. The second number of
//!                         PROCFS/uptime is the idle time summed over every CPU,
//!                         hence the division by the CPU count.
//!     cpus        int     CPUs the kernel lists in PROCFS/stat (cpu0, cpu1, …)
//! ```
//!
//! With the option `report_boot: true`, the first poll after each start also
//! emits a `boot` event whose `boot_time` field is the boot time in seconds
//! since the Unix epoch (the `btime` line of PROCFS/stat).
//!
//! What it shows, with the reasons in the comments:
//!   - the self-description as `static` data (options with types, defaults
//!     and docs; event kinds with typed fields and units), valid for the life
//!     of the process as the ABI requires;
//!   - the entry point: negotiation in one call (`abi::negotiate`);
//!   - create: the size rule for what the host passes in, reading options by
//!     name, rejecting bad values with VIGIL_E_INVALID_CONFIG and a message
//!     that starts with the option's path ("options.procfs: ...");
//!   - the instance as a `Box` behind the opaque `void *`: any number of
//!     instances side by side, no global state;
//!   - statuses chosen by what went wrong: a missing file is UNAVAILABLE (the
//!     host reports the source absent, no error), bad content is TEMPORARY
//!     (counted, polling goes on), a bug is FATAL;
//!   - idempotent start and stop;
//!   - no panic ever unwinds into the host (undefined behaviour across
//!     `extern "C"`): every callback runs inside `catch_unwind`, and a panic
//!     becomes VIGIL_E_FATAL with the panic's message.
//!
//! Build: `cargo build --release --offline` gives `target/release/libboottime.so`;
//! the host finds a plugin by its file name, so install it as `boottime.so`
//! (`scripts/build-rust-plugins OUTDIR` does both). Rust 1.63 or later, std
//! only.

// Spell out every unsafe operation, even inside `unsafe fn` (the default from
// the 2024 edition on): each `unsafe { }` below marks one place where the ABI's
// rules, not the compiler, keep memory safe.
#![warn(unsafe_op_in_unsafe_fn)]

mod abi;

use std::any::Any;
use std::ffi::OsStr;
use std::io;
use std::mem::size_of;
use std::os::raw::c_void;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use abi::*;

// ---------------------------------------------------------- self-description
//
// Everything the descriptor points to is `static`: the host keeps pointers
// into it for the life of the process (plugins are never unloaded). Strings
// are pointer + length (`VigilStr`), so Rust string literals serve as they
// are, without a terminating NUL.

/// The default of `procfs`: the one place the plugin names /proc. Used in the
/// option's declaration, and by create if a host ever passes no value.
const PROCFS_DEFAULT: &str = "/proc";

static OPTIONS: [VigilOptionSpec; 2] = [
    VigilOptionSpec::new(
        VIGIL_TYPE_STRING,
        "procfs",
        PROCFS_DEFAULT,
        "Root of the proc filesystem; the plugin reads PROCFS/uptime and PROCFS/stat.",
    ),
    VigilOptionSpec::new(
        VIGIL_TYPE_BOOL,
        "report_boot",
        "false", // a default is written as YAML: false, 10s, 64MiB, /proc
        "Also emit a boot event with the boot time, once after each start.",
    ),
];

static SAMPLE_FIELDS: [VigilFieldSpec; 3] = [
    VigilFieldSpec::new(VIGIL_TYPE_DOUBLE, "uptime", "seconds", "Time since boot."),
    VigilFieldSpec::new(
        VIGIL_TYPE_DOUBLE,
        "idle_ratio",
        "ratio",
        "Idle CPU time since boot over uptime × cpus, 0…1.",
    ),
    VigilFieldSpec::new(
        VIGIL_TYPE_INT,
        "cpus",
        "count",
        "CPUs listed in PROCFS/stat.",
    ),
];

static BOOT_FIELDS: [VigilFieldSpec; 1] = [VigilFieldSpec::new(
    VIGIL_TYPE_INT,
    "boot_time",
    "seconds",
    "Boot time, seconds since the Unix epoch (btime in PROCFS/stat).",
)];

static EVENTS: [VigilEventSpec; 2] = [
    VigilEventSpec::new("sample", "One per poll.", &SAMPLE_FIELDS),
    VigilEventSpec::new(
        "boot",
        "Once after each start, with report_boot: true.",
        &BOOT_FIELDS,
    ),
];

static DESCRIPTOR: VigilPluginDescriptor = VigilPluginDescriptor {
    size: size_of::<VigilPluginDescriptor>() as u32,
    kind: VIGIL_PLUGIN_MONITOR,
    name: VigilStr::from_static("boottime"), // manifests say `plugin: boottime`
    version: VigilStr::from_static(env!("CARGO_PKG_VERSION")), // from Cargo.toml
    description: VigilStr::from_static(
        "Uptime and the idle share of CPU time since boot, from PROCFS/uptime.",
    ),
    options: OPTIONS.as_ptr(),
    option_count: OPTIONS.len(),
    events: EVENTS.as_ptr(),
    event_count: EVENTS.len(),
    default_interval_ns: 10_000_000_000, // 10 s when the manifest gives no interval
    create: Some(boottime_create),
    start: Some(boottime_start),
    poll: Some(boottime_poll), // None would make a push-only plugin
    stop: Some(boottime_stop),
    destroy: Some(boottime_destroy),
};

// ---------------------------------------------------------------- entry point

/// The one symbol the host looks up. `#[no_mangle]` keeps its C name and makes
/// a cdylib export it; nothing else of this crate is exported. (From the 2024
/// edition on, write `#[unsafe(no_mangle)]`.)
///
/// # Safety
/// Called by the host with the pointers the ABI describes.
#[no_mangle]
pub unsafe extern "C" fn vigil_plugin_entry(
    args: *const VigilEntryArgs,
    result: *mut VigilEntryResult,
) -> VigilStatus {
    // negotiate cannot panic short of running out of memory, but the rule
    // holds for every function the host calls: no unwinding across the ABI.
    match catch_unwind(AssertUnwindSafe(|| unsafe {
        negotiate(args, result, &DESCRIPTOR)
    })) {
        Ok(status) => status,
        Err(payload) => {
            discard(payload);
            VIGIL_E_FATAL
        }
    }
}

// The compiler checks that the signature is the header's vigil_plugin_entry_fn.
const _: VigilPluginEntryFn = vigil_plugin_entry;

// ------------------------------------------------------------------ instance

/// One instance: everything a monitor of the manifest needs, on the heap.
/// The host holds it as an opaque `void *` and passes it back to every call.
struct Uptime {
    /// The host's handle for this instance, valid until destroy.
    host: *mut VigilHostCtx,
    /// The host's function table, copied under the size rule: a member an
    /// older host does not have reads as None.
    api: VigilHostApi,
    /// Options, validated and copied in create (they are borrowed for the
    /// call only).
    uptime_path: PathBuf,
    stat_path: PathBuf,
    report_boot: bool,
    /// Only start and stop change these, and poll reads them. The host never
    /// makes two calls into one instance at once, so no lock is needed; a
    /// plugin with threads of its own would put shared state behind a Mutex.
    running: bool,
    boot_reported: bool,
}

/// Why a call failed: the status for the host and the message that goes
/// with it (copied into the host's `VigilError` buffer).
#[derive(Debug)]
struct Failure {
    status: VigilStatus,
    message: String,
}

fn failure(status: VigilStatus, message: String) -> Failure {
    Failure { status, message }
}

/// VIGIL_E_INVALID_CONFIG for option `name`, with the message starting with
/// its path so that the host reports it at that line of the manifest.
fn invalid_option(name: &str, why: &str) -> Failure {
    failure(VIGIL_E_INVALID_CONFIG, format!("options.{}: {}", name, why))
}

impl Uptime {
    /// create: reads and validates the options and builds the instance.
    /// No threads, no events, no I/O: a missing file is start's business.
    ///
    /// # Safety
    /// `args` is what the host passed to create.
    unsafe fn create(args: *const VigilCreateArgs) -> Result<Uptime, Failure> {
        // The size rule: copy what the host sent into a zeroed struct of our
        // layout; refuse what is smaller than the 1.0 struct.
        let args = unsafe { read_sized(args, CREATE_ARGS_SIZE_1_0) }.ok_or_else(|| {
            failure(
                VIGIL_E_FATAL,
                "create: no arguments, or smaller than ABI 1.0's".to_string(),
            )
        })?;
        let api = unsafe { read_sized(args.api, HOST_API_SIZE_1_0) }.ok_or_else(|| {
            failure(
                VIGIL_E_FATAL,
                "create: no host table, or smaller than ABI 1.0's".to_string(),
            )
        })?;
        if api.emit.is_none() || api.log.is_none() {
            return Err(failure(
                VIGIL_E_FATAL,
                "create: the host table lacks emit or log".to_string(),
            ));
        }
        let options: &[VigilOption] = if args.options.is_null() || args.option_count == 0 {
            &[]
        } else {
            // Every declared option, in declared order, defaults filled in.
            unsafe { std::slice::from_raw_parts(args.options, args.option_count) }
        };

        let procfs = option_string(options, "procfs", PROCFS_DEFAULT)?;
        if procfs.is_empty() {
            return Err(invalid_option("procfs", "must not be empty"));
        }
        if procfs.contains(&0) {
            return Err(invalid_option("procfs", "must not contain a NUL byte"));
        }
        // Paths are bytes on Linux: no UTF-8 requirement beyond the manifest's.
        let procfs = Path::new(OsStr::from_bytes(&procfs));
        let report_boot = option_bool(options, "report_boot", false)?;

        Ok(Uptime {
            host: args.host,
            api,
            uptime_path: procfs.join("uptime"),
            stat_path: procfs.join("stat"),
            report_boot,
            running: false,
            boot_reported: false,
        })
    }

    /// start: checks that the sources exist. A polled plugin needs no more:
    /// the host calls poll once right after a successful start (the snapshot),
    /// then every interval. Starting a started instance is harmless.
    fn start(&mut self) -> Result<(), Failure> {
        if self.running {
            return Ok(());
        }
        for path in [&self.uptime_path, &self.stat_path] {
            // Opened and closed again: only whether it can be read matters here.
            std::fs::File::open(path).map_err(|e| io_failure(path, e))?;
        }
        self.running = true;
        self.boot_reported = false; // report_boot: once after each start
        self.log(
            VIGIL_LOG_DEBUG,
            &format!("reading {}", self.uptime_path.display()),
        );
        Ok(())
    }

    /// poll: reads both files, then emits. Everything is parsed and checked
    /// before the first emit, so a poll emits all of its events or none.
    fn poll(&mut self) -> Result<(), Failure> {
        let (uptime, idle) = read_and_parse(&self.uptime_path, parse_uptime)?;
        let stat = read_and_parse(&self.stat_path, parse_stat)?;
        let boot_time = if self.report_boot && !self.boot_reported {
            match stat.btime {
                Some(btime) => Some(btime),
                None => {
                    return Err(failure(
                        VIGIL_E_TEMPORARY,
                        format!(
                            "{}: no 'btime' line (needed by report_boot)",
                            self.stat_path.display()
                        ),
                    ))
                }
            }
        } else {
            None
        };

        let idle_ratio = idle / (uptime * stat.cpus as f64);
        // The event and its fields live on the stack: emit copies them.
        self.emit(
            "sample",
            VIGIL_SEVERITY_INFO,
            &[
                field("uptime", VigilValue::double(uptime)),
                field("idle_ratio", VigilValue::double(idle_ratio)),
                field("cpus", VigilValue::int(stat.cpus as i64)),
            ],
        )?;
        if let Some(boot_time) = boot_time {
            self.emit(
                "boot",
                VIGIL_SEVERITY_INFO,
                &[field("boot_time", VigilValue::int(boot_time))],
            )?;
            self.boot_reported = true;
        }
        Ok(())
    }

    /// stop: nothing to close or join (no files stay open, no threads). After
    /// stop returns, the instance must not emit. Stopping a stopped instance
    /// is harmless.
    fn stop(&mut self) -> Result<(), Failure> {
        self.running = false;
        Ok(())
    }

    /// Hands one event to the host, which copies it before returning.
    fn emit(
        &self,
        kind: &'static str,
        severity: VigilSeverity,
        fields: &[VigilField],
    ) -> Result<(), Failure> {
        let event = VigilEvent {
            size: size_of::<VigilEvent>() as u32,
            severity,
            kind: VigilStr::from_static(kind),
            time_ns: 0, // 0: the host stamps the event with its clock
            fields: fields.as_ptr(),
            field_count: fields.len(),
        };
        let status = match self.api.emit {
            Some(emit) => unsafe { emit(self.host, &event) },
            None => VIGIL_E_UNSUPPORTED, // checked in create; never happens
        };
        if status != VIGIL_OK {
            return Err(failure(
                VIGIL_E_TEMPORARY,
                format!("the host refused a {} event (status {})", kind, status),
            ));
        }
        Ok(())
    }

    /// One line in the host's log, attributed to this instance.
    fn log(&self, level: VigilLogLevel, message: &str) {
        if let Some(log) = self.api.log {
            unsafe { log(self.host, level, VigilStr::borrow(message.as_bytes())) };
        }
    }
}

/// A field for an event; `name` is static, `value` may borrow (see
/// `VigilValue::string`).
fn field(name: &'static str, value: VigilValue) -> VigilField {
    VigilField {
        name: VigilStr::from_static(name),
        value,
    }
}

// ------------------------------------------------------------------- options

fn find_option<'a>(options: &'a [VigilOption], name: &str) -> Option<&'a VigilOption> {
    options
        .iter()
        .find(|o| unsafe { o.name.as_bytes() } == name.as_bytes())
}

/// A STRING option, copied (the host's bytes are borrowed for the call).
/// NONE (no value and no default; not possible for our options with this
/// host, but a reader must accept it) gives `default`.
fn option_string(options: &[VigilOption], name: &str, default: &str) -> Result<Vec<u8>, Failure> {
    match find_option(options, name) {
        None => Ok(default.as_bytes().to_vec()),
        Some(o) => match o.value.type_ {
            VIGIL_TYPE_NONE => Ok(default.as_bytes().to_vec()),
            // Read only the union member that `type_` names.
            VIGIL_TYPE_STRING => Ok(unsafe { o.value.as_.str.as_bytes() }.to_vec()),
            other => Err(invalid_option(
                name,
                &format!("expected a string, got a value of type {}", other),
            )),
        },
    }
}

/// A BOOL option; NONE gives `default`.
fn option_bool(options: &[VigilOption], name: &str, default: bool) -> Result<bool, Failure> {
    match find_option(options, name) {
        None => Ok(default),
        Some(o) => match o.value.type_ {
            VIGIL_TYPE_NONE => Ok(default),
            VIGIL_TYPE_BOOL => Ok(unsafe { o.value.as_.boolean } != 0),
            other => Err(invalid_option(
                name,
                &format!("expected a bool, got a value of type {}", other),
            )),
        },
    }
}

// ------------------------------------------------------------------- reading

/// The status for a file that cannot be read: a file that is not there (or
/// not for us) means the source is absent on this machine, which the host
/// reports as unavailability and retries; anything else is a failure of
/// this attempt.
fn io_failure(path: &Path, error: io::Error) -> Failure {
    let status = match error.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => VIGIL_E_UNAVAILABLE,
        _ => VIGIL_E_TEMPORARY,
    };
    failure(status, format!("cannot read {}: {}", path.display(), error))
}

/// Reads a small text file and parses it; malformed content is TEMPORARY
/// (the host counts and logs it, and polling goes on), with the path.
fn read_and_parse<T>(path: &Path, parse: fn(&str) -> Result<T, String>) -> Result<T, Failure> {
    let bytes = std::fs::read(path).map_err(|e| io_failure(path, e))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        failure(
            VIGIL_E_TEMPORARY,
            format!("{}: not UTF-8 text", path.display()),
        )
    })?;
    parse(text).map_err(|why| failure(VIGIL_E_TEMPORARY, format!("{}: {}", path.display(), why)))
}

/// The first characters of `text`, quoted, for error messages.
fn excerpt(text: &str) -> String {
    let short: String = text.chars().take(40).collect();
    if short.len() < text.len() {
        format!("{:?}…", short)
    } else {
        format!("{:?}", short)
    }
}

/// PROCFS/uptime: "UPTIME IDLE\n", both in seconds with two decimals, e.g.
/// "350735.47 1234567.89". IDLE is summed over all CPUs.
fn parse_uptime(text: &str) -> Result<(f64, f64), String> {
    let mut words = text.split_ascii_whitespace();
    let (uptime, idle) = match (words.next(), words.next(), words.next()) {
        (Some(uptime), Some(idle), None) => (uptime, idle),
        _ => {
            return Err(format!(
                "expected two numbers, uptime and idle seconds, found {}",
                excerpt(text)
            ))
        }
    };
    let seconds = |word: &str| -> Result<f64, String> {
        match word.parse::<f64>() {
            Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
            _ => Err(format!(
                "expected a number of seconds, found {}",
                excerpt(word)
            )),
        }
    };
    let (uptime, idle) = (seconds(uptime)?, seconds(idle)?);
    if uptime == 0.0 {
        return Err("uptime is 0".to_string()); // and idle_ratio would divide by it
    }
    Ok((uptime, idle))
}

/// What the plugin needs from PROCFS/stat.
#[derive(Debug, PartialEq)]
struct Stat {
    /// Lines "cpuN ..." (the aggregate "cpu ..." line is not counted).
    cpus: u32,
    /// "btime N": boot time, seconds since the epoch; None if absent.
    btime: Option<i64>,
}

fn parse_stat(text: &str) -> Result<Stat, String> {
    let mut stat = Stat {
        cpus: 0,
        btime: None,
    };
    for (index, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("cpu") {
            if rest.starts_with(|c: char| c.is_ascii_digit()) {
                stat.cpus += 1;
            }
        } else if let Some(rest) = line.strip_prefix("btime ") {
            match rest.trim().parse::<i64>() {
                Ok(btime) => stat.btime = Some(btime),
                Err(_) => {
                    return Err(format!(
                        "line {}: expected 'btime SECONDS', found {}",
                        index + 1,
                        excerpt(line)
                    ))
                }
            }
        }
    }
    if stat.cpus == 0 {
        return Err("no 'cpuN' lines".to_string());
    }
    Ok(stat)
}

// ----------------------------------------------------------------- callbacks
//
// The functions the descriptor points to. Each one converts the opaque
// pointer back to `&mut Uptime` and runs the method inside `guarded`, which
// turns a `Failure` into a status plus message, and a panic into
// VIGIL_E_FATAL. (A panic must never unwind into the host's C frames; with
// `panic = "abort"` in Cargo.toml the process would abort instead, taking the
// host down with it, so this crate keeps the default, `unwind`.)

/// Runs one callback body: no panic leaves it.
fn guarded<F>(call: &str, err: *mut VigilError, body: F) -> VigilStatus
where
    F: FnOnce() -> Result<(), Failure>,
{
    // AssertUnwindSafe: after a panic the instance may be half-updated, but
    // FATAL makes the host stop using it (it only calls stop and destroy).
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => VIGIL_OK,
        Ok(Err(failure)) => unsafe { error_set(err, failure.status, &failure.message) },
        Err(payload) => {
            let message = format!("panic in {}: {}", call, panic_message(&*payload));
            discard(payload);
            unsafe { error_set(err, VIGIL_E_FATAL, &message) }
        }
    }
}

/// The text of a panic (`panic!("...")` carries a &str or a String).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Drops a panic payload; dropping one can itself panic (a payload with a
/// panicking Drop), so that is caught too and forgotten.
fn discard(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// The instance behind the host's opaque pointer.
///
/// # Safety
/// `instance` is NULL or a pointer create returned and destroy has not freed.
/// The host never calls into one instance twice at once, so the `&mut` is
/// unique for the duration of the call.
unsafe fn instance<'a>(instance: *mut c_void) -> Result<&'a mut Uptime, Failure> {
    if instance.is_null() {
        return Err(failure(
            VIGIL_E_FATAL,
            "the host passed a NULL instance".to_string(),
        ));
    }
    Ok(unsafe { &mut *(instance as *mut Uptime) })
}

extern "C" fn boottime_create(
    args: *const VigilCreateArgs,
    instance: *mut *mut c_void,
    err: *mut VigilError,
) -> VigilStatus {
    guarded("create", err, || {
        if instance.is_null() {
            return Err(failure(
                VIGIL_E_FATAL,
                "create: the host passed no place for the instance".to_string(),
            ));
        }
        let uptime = unsafe { Uptime::create(args) }?;
        // Box on the heap, hand the raw pointer to the host; destroy takes it
        // back with Box::from_raw. Set *instance only on success.
        unsafe { *instance = Box::into_raw(Box::new(uptime)) as *mut c_void };
        Ok(())
    })
}

extern "C" fn boottime_start(raw: *mut c_void, err: *mut VigilError) -> VigilStatus {
    guarded("start", err, || unsafe { instance(raw) }?.start())
}

extern "C" fn boottime_poll(raw: *mut c_void, err: *mut VigilError) -> VigilStatus {
    guarded("poll", err, || unsafe { instance(raw) }?.poll())
}

extern "C" fn boottime_stop(raw: *mut c_void, err: *mut VigilError) -> VigilStatus {
    guarded("stop", err, || unsafe { instance(raw) }?.stop())
}

extern "C" fn boottime_destroy(raw: *mut c_void) {
    if raw.is_null() {
        return;
    }
    // destroy cannot report anything; a panic in a Drop is caught and dropped.
    let dropped = catch_unwind(AssertUnwindSafe(|| {
        drop(unsafe { Box::from_raw(raw as *mut Uptime) })
    }));
    if let Err(payload) = dropped {
        discard(payload);
    }
}

// --------------------------------------------------------------------- tests
//
// `cargo test` runs these without a host: a fake host table records events.

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::raw::c_char;
    use std::sync::Mutex;

    #[derive(Debug, Clone, PartialEq)]
    enum Value {
        Int(i64),
        Double(f64),
    }

    /// An event as recorded: kind, then the fields' names and values.
    type Recorded = (String, Vec<(String, Value)>);

    /// The fake host: `VigilHostCtx *` is really a `*const Recorder`.
    #[derive(Default)]
    struct Recorder {
        events: Mutex<Vec<Recorded>>,
    }

    unsafe fn text(s: VigilStr) -> String {
        String::from_utf8(unsafe { s.as_bytes() }.to_vec()).unwrap()
    }

    unsafe extern "C" fn fake_emit(
        host: *mut VigilHostCtx,
        event: *const VigilEvent,
    ) -> VigilStatus {
        let recorder = unsafe { &*(host as *const Recorder) };
        let event = unsafe { &*event };
        let fields = unsafe { std::slice::from_raw_parts(event.fields, event.field_count) };
        let fields = fields
            .iter()
            .map(|f| {
                let value = match f.value.type_ {
                    VIGIL_TYPE_INT => Value::Int(unsafe { f.value.as_.i64 }),
                    VIGIL_TYPE_DOUBLE => Value::Double(unsafe { f.value.as_.f64 }),
                    other => panic!("unexpected type {}", other),
                };
                (unsafe { text(f.name) }, value)
            })
            .collect();
        recorder
            .events
            .lock()
            .unwrap()
            .push((unsafe { text(event.kind) }, fields));
        VIGIL_OK
    }

    unsafe extern "C" fn fake_log(_: *mut VigilHostCtx, _: VigilLogLevel, _: VigilStr) {}

    /// A 1.0 host: its table has no `finished` (size 40 on LP64).
    fn host_table() -> VigilHostApi {
        VigilHostApi {
            size: HOST_API_SIZE_1_0 as u32,
            abi_major: 1,
            abi_minor: 0,
            emit: Some(fake_emit),
            log: Some(fake_log),
            set_availability: None,
            now_ns: None,
            finished: None,
        }
    }

    /// A fresh directory holding `uptime` and `stat` (None: no such file).
    fn proc_tree(tag: &str, uptime: Option<&str>, stat: Option<&str>) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vigil-uptime-test-{}-{}", std::process::id(), tag));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(uptime) = uptime {
            std::fs::write(dir.join("uptime"), uptime).unwrap();
        }
        if let Some(stat) = stat {
            std::fs::write(dir.join("stat"), stat).unwrap();
        }
        dir
    }

    const STAT: &str = "cpu  1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 2 3 4\nintr 5\nbtime 1700000000\n";

    struct Call {
        status: VigilStatus,
        message: String,
    }

    fn call(body: impl FnOnce(*mut VigilError) -> VigilStatus) -> Call {
        let mut buffer = [0u8; 256];
        let mut err = VigilError {
            size: size_of::<VigilError>() as u32,
            reserved: 0,
            message: buffer.as_mut_ptr() as *mut c_char,
            capacity: buffer.len(),
        };
        let status = body(&mut err);
        let end = buffer.iter().position(|&b| b == 0).unwrap();
        Call {
            status,
            message: String::from_utf8(buffer[..end].to_vec()).unwrap(),
        }
    }

    /// Runs create with `procfs` (STRING) and `report_boot` (BOOL).
    fn create(recorder: &Recorder, procfs: &str, report_boot: bool) -> (Call, *mut c_void) {
        let api = host_table();
        let options = [
            VigilOption {
                name: VigilStr::from_static("procfs"),
                value: VigilValue::string(procfs.as_bytes()),
            },
            VigilOption {
                name: VigilStr::from_static("report_boot"),
                value: VigilValue::boolean(report_boot),
            },
        ];
        let args = VigilCreateArgs {
            size: size_of::<VigilCreateArgs>() as u32,
            reserved: 0,
            instance_name: VigilStr::from_static("m"),
            host: recorder as *const Recorder as *mut VigilHostCtx,
            api: &api,
            options: options.as_ptr(),
            option_count: options.len(),
            interval_ns: 1_000_000_000,
        };
        let mut handle: *mut c_void = std::ptr::null_mut();
        let result = call(|err| boottime_create(&args, &mut handle, err));
        (result, handle)
    }

    #[test]
    fn parses_uptime() {
        assert_eq!(parse_uptime("12345.50 37036.50\n"), Ok((12345.5, 37036.5)));
        assert!(parse_uptime("").is_err());
        assert!(parse_uptime("1.0").is_err());
        assert!(parse_uptime("1.0 2.0 3.0").is_err());
        assert!(parse_uptime("1.0 x").unwrap_err().contains("\"x\""));
        assert!(parse_uptime("inf 1").is_err());
        assert!(parse_uptime("0.00 0.00").is_err());
    }

    #[test]
    fn parses_stat() {
        assert_eq!(
            parse_stat(STAT),
            Ok(Stat {
                cpus: 2,
                btime: Some(1_700_000_000)
            })
        );
        assert_eq!(
            parse_stat("cpu0 1\n"),
            Ok(Stat {
                cpus: 1,
                btime: None
            })
        );
        assert!(parse_stat("cpu 1 2 3\n").is_err());
        assert!(parse_stat("cpu0 1\nbtime soon\n")
            .unwrap_err()
            .starts_with("line 2:"));
    }

    #[test]
    fn lifecycle_with_a_fake_host() {
        let dir = proc_tree("lifecycle", Some("100.00 50.00\n"), Some(STAT));
        let recorder = Recorder::default();
        let (created, handle) = create(&recorder, dir.to_str().unwrap(), true);
        assert_eq!((created.status, created.message.as_str()), (VIGIL_OK, ""));
        // Start twice, poll twice, stop twice: start and stop are idempotent.
        for _ in 0..2 {
            assert_eq!(call(|err| boottime_start(handle, err)).status, VIGIL_OK);
        }
        for _ in 0..2 {
            assert_eq!(call(|err| boottime_poll(handle, err)).status, VIGIL_OK);
        }
        for _ in 0..2 {
            assert_eq!(call(|err| boottime_stop(handle, err)).status, VIGIL_OK);
        }
        boottime_destroy(handle);
        let events = recorder.events.lock().unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(kinds, ["sample", "boot", "sample"]); // boot once per start
        assert_eq!(
            events[0].1,
            [
                ("uptime".to_string(), Value::Double(100.0)),
                ("idle_ratio".to_string(), Value::Double(0.25)),
                ("cpus".to_string(), Value::Int(2)),
            ]
        );
        assert_eq!(
            events[1].1,
            [("boot_time".to_string(), Value::Int(1_700_000_000))]
        );
    }

    #[test]
    fn statuses_say_what_went_wrong() {
        let recorder = Recorder::default();
        let (empty, _) = create(&recorder, "", false);
        assert_eq!(
            (empty.status, empty.message.as_str()),
            (VIGIL_E_INVALID_CONFIG, "options.procfs: must not be empty")
        );

        let missing = proc_tree("missing", None, Some(STAT));
        let (created, handle) = create(&recorder, missing.to_str().unwrap(), false);
        assert_eq!(created.status, VIGIL_OK);
        let started = call(|err| boottime_start(handle, err));
        assert_eq!(started.status, VIGIL_E_UNAVAILABLE);
        assert!(started.message.starts_with("cannot read ") && started.message.contains("uptime"));
        boottime_destroy(handle);

        let broken = proc_tree("broken", Some("soon\n"), Some(STAT));
        let (_, handle) = create(&recorder, broken.to_str().unwrap(), false);
        assert_eq!(call(|err| boottime_start(handle, err)).status, VIGIL_OK);
        let polled = call(|err| boottime_poll(handle, err));
        assert_eq!(polled.status, VIGIL_E_TEMPORARY);
        assert!(polled
            .message
            .ends_with("uptime: expected two numbers, uptime and idle seconds, found \"soon\\n\""));
        assert_eq!(call(|err| boottime_stop(handle, err)).status, VIGIL_OK);
        boottime_destroy(handle);
        assert!(recorder.events.lock().unwrap().is_empty());
    }

    #[test]
    fn a_panic_becomes_fatal_with_its_message() {
        let result = call(|err| guarded("poll", err, || panic!("sensor on fire")));
        assert_eq!(
            (result.status, result.message.as_str()),
            (VIGIL_E_FATAL, "panic in poll: sensor on fire")
        );
    }

    #[test]
    fn the_descriptor_is_consistent() {
        assert_eq!(unsafe { text(DESCRIPTOR.name) }, "boottime");
        assert_eq!(DESCRIPTOR.option_count, 2);
        assert_eq!(
            unsafe { text((*DESCRIPTOR.options).default_text) },
            PROCFS_DEFAULT
        );
        assert_eq!(unsafe { (*DESCRIPTOR.events.add(1)).field_count }, 1);
    }
}
