//! influx: an example Vigil output plugin in Rust. Copy it to start your own.
//!
//! What it does: a sink of `type: plugin` with `plugin: influx` gives it
//! batches of events; it sends each event as one line of InfluxDB line
//! protocol (see line.rs for the exact form and escaping) over TCP to
//! `address` (HOST:PORT), as Telegraf's `socket_listener`, InfluxDB 1.x's
//! and VictoriaMetrics' TCP listeners and other line protocol receivers take
//! it. It answers for every event of a batch:
//!
//!   - OK once the kernel took the event's line (TCP gives no
//!     acknowledgement of its own; `flush` waits until the peer's TCP has
//!     acknowledged every byte);
//!   - RETRY, with `retry_after`, while the listener is away (it cannot be
//!     reached, or went away mid-batch: the events whose lines were sent
//!     whole are OK, the rest are retried, so none is lost and none but the
//!     one cut in half is sent twice);
//!   - REJECT for an event with no field line protocol can carry (no
//!     fields, or only NaN and infinite numbers), with the reason as the
//!     call's message: the host counts it lost as `rejected` and logs why.
//!
//! What it shows, with the reasons in the comments:
//!   - an output's self-description (`VigilOutputDescriptor::new`): options
//!     with defaults, examples and docs, no event kinds, no poll;
//!   - create: options read and checked (INVALID_CONFIG with the option's
//!     path), nothing opened yet: the connection is made when the first
//!     batch comes, and made again after the listener went away;
//!   - write: the batch read through `abi::Batch` (the size rule, the host's
//!     stride), an answer per event through `abi::answer`;
//!   - flush: a real one, bounded by the host's deadline;
//!   - no panic ever unwinds into the host: every callback runs inside
//!     `catch_unwind`, and a panic becomes VIGIL_E_FATAL with its message.
//!
//! Build: `cargo build --release --offline` gives `target/release/libinflux.so`;
//! install it as `influx.so` (`scripts/build-rust-plugins OUTDIR` does both).
//! Rust 1.63 or later, std only.

// Spell out every unsafe operation, even inside `unsafe fn` (the default from
// the 2024 edition on).
#![warn(unsafe_op_in_unsafe_fn)]

mod abi;
mod line;

use std::any::Any;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::raw::{c_int, c_ulong, c_void};
use std::os::unix::io::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use abi::*;

// ---------------------------------------------------------- self-description

/// The defaults: the one place each is written, used by the declarations
/// and by create if a host ever passes no value.
const ADDRESS_DEFAULT: &str = "127.0.0.1:8094"; // Telegraf's socket_listener, by convention
const TIMEOUT_DEFAULT_NS: i64 = 5_000_000_000; // "5s" below
const RETRY_AFTER_DEFAULT_NS: i64 = 1_000_000_000; // "1s" below

static OPTIONS: [VigilOptionSpec; 3] = [
    VigilOptionSpec::new(
        VIGIL_TYPE_STRING,
        "address",
        ADDRESS_DEFAULT,
        "The line protocol listener, HOST:PORT (a name, an IPv4 address, or [IPv6]:PORT).",
    )
    // What `vigil plugins check` connects to (with no listener there, it
    // is told RETRY, which is an answer like any other).
    .with_example("localhost:8094"),
    VigilOptionSpec::new(
        VIGIL_TYPE_DURATION,
        "timeout",
        "5s",
        "How long connecting, and sending one batch, may take before the batch is retried; 1ms to 1h.",
    )
    .with_example("2s"),
    VigilOptionSpec::new(
        VIGIL_TYPE_DURATION,
        "retry_after",
        "1s",
        "The least wait the host is asked for before writing again while the listener is away; 0s to 1h.",
    )
    .with_example("500ms"),
];

static DESCRIPTOR: VigilOutputDescriptor = VigilOutputDescriptor::new(
    "influx", // manifests say `plugin: influx`
    env!("CARGO_PKG_VERSION"),
    "Sends events as InfluxDB line protocol over TCP (Telegraf's socket_listener, InfluxDB-compatible listeners).",
    &OPTIONS,
    plugin_create,
    plugin_destroy,
    plugin_write,
    Some(plugin_flush), // None: nothing to flush
);

// ---------------------------------------------------------------- entry point

/// The one symbol the host looks up; `#[no_mangle]` makes the cdylib export
/// it, and nothing else of this crate is exported.
///
/// # Safety
/// Called by the host with the pointers the ABI describes.
#[no_mangle]
pub unsafe extern "C" fn vigil_plugin_entry(
    args: *const VigilEntryArgs,
    result: *mut VigilEntryResult,
) -> VigilStatus {
    match catch_unwind(AssertUnwindSafe(|| unsafe {
        negotiate_output(args, result, &DESCRIPTOR)
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

/// One output: a sink of the manifest. The host holds it as an opaque
/// `void *`, calls create and destroy on one thread and write and flush on
/// the sink's, never two at once, so it needs no lock.
struct LineOutput {
    /// For log lines; valid until destroy.
    host: *mut VigilHostCtx,
    api: VigilHostApi,
    address: String,
    timeout: Duration,
    retry_after_ns: i64,
    /// None until the first batch, and after the listener went away.
    stream: Option<TcpStream>,
    /// Said once per outage, not at every retry.
    away: bool,
}

/// Why a call failed: the status for the host and the message with it.
#[derive(Debug)]
struct Failure {
    status: VigilStatus,
    message: String,
}

fn failure(status: VigilStatus, message: String) -> Failure {
    Failure { status, message }
}

fn invalid_option(name: &str, why: &str) -> Failure {
    failure(VIGIL_E_INVALID_CONFIG, format!("options.{}: {}", name, why))
}

/// What `write` tells the host: the verdicts, and the call's message (the
/// reason of the rejects, else why events are retried).
struct Written {
    answer: WriteAnswer,
    message: String,
}

impl LineOutput {
    /// create: reads and checks the options. Connects to nothing: a
    /// listener that is not up yet is not a configuration error, and the
    /// host creates an output before its first events come.
    ///
    /// # Safety
    /// `args` is what the host passed to create.
    unsafe fn create(args: *const VigilCreateArgs) -> Result<LineOutput, Failure> {
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
        let options: &[VigilOption] = if args.options.is_null() || args.option_count == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(args.options, args.option_count) }
        };

        let address = match find_option(options, "address") {
            Some(o) if o.value.type_ == VIGIL_TYPE_STRING => {
                String::from_utf8_lossy(unsafe { o.value.as_.str.as_bytes() }).into_owned()
            }
            _ => ADDRESS_DEFAULT.to_string(),
        };
        check_address(&address).map_err(|why| invalid_option("address", &why))?;
        let timeout = option_duration(options, "timeout", TIMEOUT_DEFAULT_NS);
        if !(1_000_000..=3_600_000_000_000).contains(&timeout) {
            return Err(invalid_option("timeout", "must be 1ms to 1h"));
        }
        let retry_after_ns = option_duration(options, "retry_after", RETRY_AFTER_DEFAULT_NS);
        if !(0..=3_600_000_000_000).contains(&retry_after_ns) {
            return Err(invalid_option("retry_after", "must be 0s to 1h"));
        }
        Ok(LineOutput {
            host: args.host,
            api,
            address,
            timeout: Duration::from_nanos(timeout as u64),
            retry_after_ns,
            stream: None,
            away: false,
        })
    }

    /// write: encodes every event, sends the lines in one go, and answers
    /// for each event.
    fn write(&mut self, batch: &Batch) -> Written {
        let mut verdicts = vec![VIGIL_WRITE_OK; batch.len()];
        let mut lines: Vec<u8> = Vec::new();
        // (event index, end of its line in `lines`), for the events that have one.
        let mut ends: Vec<(usize, usize)> = Vec::with_capacity(batch.len());
        let mut rejected: Vec<String> = Vec::new();
        for (i, event) in batch.iter().enumerate() {
            let why = match event {
                None => format!("event {} of the batch is malformed", i),
                Some(e) => match line::encode(&e, &mut lines) {
                    Ok(()) => {
                        ends.push((i, lines.len()));
                        continue;
                    }
                    Err(unwritable) => format!(
                        "seq {} ({}/{}) has no field line protocol can carry ({} field{}: none, NaN or infinite)",
                        e.seq,
                        String::from_utf8_lossy(e.monitor),
                        String::from_utf8_lossy(e.kind),
                        unwritable.fields,
                        if unwritable.fields == 1 { "" } else { "s" }
                    ),
                },
            };
            verdicts[i] = VIGIL_WRITE_REJECT;
            rejected.push(why);
        }
        let reason = match rejected.len() {
            0 => String::new(),
            1 => rejected.remove(0),
            n => format!("{} (and {} more)", rejected[0], n - 1),
        };
        if ends.is_empty() {
            return Written {
                answer: WriteAnswer {
                    verdicts,
                    retry_after_ns: 0,
                },
                message: reason,
            };
        }

        let sent = self.send(&lines);
        let mut retry_after_ns = 0;
        let mut message = reason;
        if let Err(error) = sent.result {
            // Lines sent whole are delivered; the rest are written again.
            for &(i, end) in &ends {
                if end > sent.bytes {
                    verdicts[i] = VIGIL_WRITE_RETRY;
                }
            }
            retry_after_ns = self.retry_after_ns;
            if message.is_empty() {
                message = error;
            }
        }
        Written {
            answer: WriteAnswer {
                verdicts,
                retry_after_ns,
            },
            message,
        }
    }

    /// Sends `bytes` on the connection, connecting first if need be.
    fn send(&mut self, bytes: &[u8]) -> Sent {
        if self.stream.as_ref().map_or(false, peer_closed) {
            self.gone(&format!("{} closed the connection", self.address));
        }
        if self.stream.is_none() {
            match connect(&self.address, self.timeout) {
                Ok(stream) => {
                    self.log(VIGIL_LOG_INFO, &format!("connected to {}", self.address));
                    self.stream = Some(stream);
                    self.away = false;
                }
                Err(why) => {
                    let message = format!("cannot connect to {}: {}", self.address, why);
                    if !self.away {
                        self.log(VIGIL_LOG_WARNING, &format!("{}; retrying", message));
                        self.away = true;
                    }
                    return Sent {
                        bytes: 0,
                        result: Err(message),
                    };
                }
            }
        }
        let stream = self.stream.as_mut().expect("connected above");
        let mut sent = 0;
        while sent < bytes.len() {
            match stream.write(&bytes[sent..]) {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let message = format!("sending to {}: {}", self.address, e);
                    self.gone(&message);
                    return Sent {
                        bytes: sent,
                        result: Err(message),
                    };
                }
            }
        }
        if sent < bytes.len() {
            let message = format!("{} took no more bytes", self.address);
            self.gone(&message);
            return Sent {
                bytes: sent,
                result: Err(message),
            };
        }
        Sent {
            bytes: sent,
            result: Ok(()),
        }
    }

    /// The connection is lost: drop it (the next batch connects again).
    fn gone(&mut self, why: &str) {
        self.stream = None;
        if !self.away {
            self.log(VIGIL_LOG_WARNING, &format!("{}; reconnecting", why));
            self.away = true;
        }
    }

    /// flush: the lines are written to the socket in `write`, so nothing is
    /// buffered here; what flush adds is waiting until the peer's TCP has
    /// acknowledged every byte sent (the socket's send queue is empty), by
    /// `deadline_ns` on CLOCK_MONOTONIC. TEMPORARY when bytes are still
    /// unacknowledged then: the host logs it and goes on.
    fn flush(&mut self, deadline_ns: i64) -> Result<(), Failure> {
        let stream = match self.stream.as_mut() {
            Some(stream) => stream,
            None => return Ok(()),
        };
        stream
            .flush()
            .map_err(|e| failure(VIGIL_E_TEMPORARY, format!("flush: {}", e)))?;
        loop {
            let queued = unsent_bytes(stream)
                .map_err(|e| failure(VIGIL_E_TEMPORARY, format!("flush: SIOCOUTQ: {}", e)))?;
            if queued == 0 {
                return Ok(());
            }
            let left = deadline_ns - monotonic_ns();
            if left <= 0 {
                return Err(failure(
                    VIGIL_E_TEMPORARY,
                    format!(
                        "{} has not acknowledged {} bytes by the flush deadline",
                        self.address, queued
                    ),
                ));
            }
            std::thread::sleep(Duration::from_nanos(left.min(1_000_000) as u64));
        }
    }

    /// One line in the host's log, attributed to this sink.
    fn log(&self, level: VigilLogLevel, message: &str) {
        if let Some(log) = self.api.log {
            unsafe { log(self.host, level, VigilStr::borrow(message.as_bytes())) };
        }
    }
}

/// How much of a batch went out, and whether all of it did.
struct Sent {
    bytes: usize,
    result: Result<(), String>,
}

/// HOST:PORT with a port from 1 to 65535 (the name is resolved when
/// connecting, so that a listener's address may change).
fn check_address(address: &str) -> Result<(), String> {
    let (host, port) = match address.rfind(':') {
        Some(colon) => (&address[..colon], &address[colon + 1..]),
        None => return Err(format!("'{}' is not HOST:PORT", address)),
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("'{}' has no host", address));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(format!(
            "'{}': write an IPv6 address in brackets, [::1]:8094",
            address
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("'{}': the port must be 1 to 65535", address)),
    }
}

/// Connects to the first address `address` resolves to that answers
/// within `timeout`; writes give up after `timeout` too.
fn connect(address: &str, timeout: Duration) -> io::Result<TcpStream> {
    let candidates: Vec<SocketAddr> = address.to_socket_addrs()?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address");
    for candidate in candidates {
        match TcpStream::connect_timeout(&candidate, timeout) {
            Ok(stream) => {
                stream.set_write_timeout(Some(timeout))?;
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Whether the peer closed the connection since the last batch: a write
/// into a closed connection succeeds once (into the kernel's buffer) and
/// is lost, so look before writing. A listener does not talk back; bytes it
/// sends anyway are left unread.
fn peer_closed(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let closed = match stream.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    closed || stream.set_nonblocking(false).is_err()
}

// Two Linux calls std does not wrap; libc is linked into every Rust program.
extern "C" {
    fn ioctl(fd: c_int, request: c_ulong, ...) -> c_int;
    fn clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int;
}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// `SIOCOUTQ` (= TIOCOUTQ) on a TCP socket: bytes sent but not yet
/// acknowledged by the peer, plus those not sent yet.
const SIOCOUTQ: c_ulong = 0x5411;
const CLOCK_MONOTONIC: c_int = 1;

fn unsent_bytes(stream: &TcpStream) -> io::Result<usize> {
    let mut queued: c_int = 0;
    if unsafe { ioctl(stream.as_raw_fd(), SIOCOUTQ, &mut queued as *mut c_int) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(queued.max(0) as usize)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of flush's deadline.
fn monotonic_ns() -> i64 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

// ------------------------------------------------------------------- options

fn find_option<'a>(options: &'a [VigilOption], name: &str) -> Option<&'a VigilOption> {
    options
        .iter()
        .find(|o| unsafe { o.name.as_bytes() } == name.as_bytes())
}

/// A DURATION option in nanoseconds; `default` when the host gave none.
fn option_duration(options: &[VigilOption], name: &str, default: i64) -> i64 {
    match find_option(options, name) {
        Some(o) if o.value.type_ == VIGIL_TYPE_DURATION => unsafe { o.value.as_.i64 },
        _ => default,
    }
}

// ----------------------------------------------------------------- callbacks
//
// The functions the descriptor points to. Each converts the opaque pointer
// back to `&mut LineOutput` and runs inside `guarded`: a `Failure` becomes a
// status plus message, a panic VIGIL_E_FATAL (it must never unwind into the
// host's C frames).

/// Runs one callback body: no panic leaves it.
fn guarded<F>(call: &str, err: *mut VigilError, body: F) -> VigilStatus
where
    F: FnOnce() -> Result<(), Failure>,
{
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

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Drops a panic payload; a panic while dropping it is caught and forgotten.
fn discard(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// The instance behind the host's opaque pointer.
///
/// # Safety
/// `instance` is NULL or a pointer create returned and destroy has not freed;
/// the host never calls into one instance twice at once.
unsafe fn instance<'a>(instance: *mut c_void) -> Result<&'a mut LineOutput, Failure> {
    if instance.is_null() {
        return Err(failure(
            VIGIL_E_FATAL,
            "the host passed a NULL instance".to_string(),
        ));
    }
    Ok(unsafe { &mut *(instance as *mut LineOutput) })
}

extern "C" fn plugin_create(
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
        let output = unsafe { LineOutput::create(args) }?;
        unsafe { *instance = Box::into_raw(Box::new(output)) as *mut c_void };
        Ok(())
    })
}

extern "C" fn plugin_write(
    raw: *mut c_void,
    batch: *const VigilBatch,
    result: *mut VigilWriteResult,
    err: *mut VigilError,
) -> VigilStatus {
    guarded("write", err, || {
        let output = unsafe { instance(raw) }?;
        let batch = unsafe { Batch::read(batch) }.ok_or_else(|| {
            failure(
                VIGIL_E_FATAL,
                "write: no batch, or one smaller than ABI 1.5's".to_string(),
            )
        })?;
        let written = output.write(&batch);
        let status = unsafe { answer(result, batch.len(), &written.answer) };
        if status != VIGIL_OK {
            return Err(failure(
                VIGIL_E_FATAL,
                "write: the host's result is smaller than ABI 1.5's".to_string(),
            ));
        }
        // The message goes with an OK status: it is the rejects' reason (or
        // why events are retried), which the host reads whatever the status.
        unsafe { error_set(err, VIGIL_OK, &written.message) };
        Ok(())
    })
}

extern "C" fn plugin_flush(
    raw: *mut c_void,
    deadline_ns: i64,
    err: *mut VigilError,
) -> VigilStatus {
    guarded("flush", err, || {
        unsafe { instance(raw) }?.flush(deadline_ns)
    })
}

extern "C" fn plugin_destroy(raw: *mut c_void) {
    if raw.is_null() {
        return;
    }
    // Dropping the instance closes the connection; what the kernel still
    // holds is sent after the close.
    let dropped = catch_unwind(AssertUnwindSafe(|| {
        drop(unsafe { Box::from_raw(raw as *mut LineOutput) })
    }));
    if let Err(payload) = dropped {
        discard(payload);
    }
}

// --------------------------------------------------------------------- tests
//
// `cargo test` runs these without a host: create with a fake host table,
// write batches laid out as the host lays them out, read the verdicts back.

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::mem::size_of;
    use std::net::TcpListener;
    use std::os::raw::c_char;
    use std::sync::mpsc;

    unsafe extern "C" fn fake_log(_: *mut VigilHostCtx, _: VigilLogLevel, _: VigilStr) {}

    fn host_table() -> VigilHostApi {
        VigilHostApi {
            size: size_of::<VigilHostApi>() as u32,
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            emit: None,
            log: Some(fake_log),
            set_availability: None,
            now_ns: None,
            finished: None,
        }
    }

    struct Call {
        status: VigilStatus,
        message: String,
    }

    fn call(body: impl FnOnce(*mut VigilError) -> VigilStatus) -> Call {
        let mut buffer = [0u8; 512];
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

    /// create with `address` and `retry_after` (the other option defaulted).
    fn create(address: &str, retry_after_ns: i64) -> (Call, *mut c_void) {
        let api = host_table();
        let options = [
            VigilOption {
                name: VigilStr::from_static("address"),
                value: VigilValue::string(address.as_bytes()),
            },
            VigilOption {
                name: VigilStr::from_static("timeout"),
                value: VigilValue {
                    type_: VIGIL_TYPE_DURATION,
                    reserved: 0,
                    as_: VigilValueAs {
                        i64: TIMEOUT_DEFAULT_NS,
                    },
                },
            },
            VigilOption {
                name: VigilStr::from_static("retry_after"),
                value: VigilValue {
                    type_: VIGIL_TYPE_DURATION,
                    reserved: 0,
                    as_: VigilValueAs {
                        i64: retry_after_ns,
                    },
                },
            },
        ];
        let args = VigilCreateArgs {
            size: size_of::<VigilCreateArgs>() as u32,
            reserved: 0,
            instance_name: VigilStr::from_static("out"),
            host: std::ptr::null_mut(),
            api: &api,
            options: options.as_ptr(),
            option_count: options.len(),
            interval_ns: 0,
        };
        let mut handle: *mut c_void = std::ptr::null_mut();
        let result = call(|err| plugin_create(&args, &mut handle, err));
        (result, handle)
    }

    /// An event of the test batches: seq, and its fields.
    fn event(seq: u64, fields: &[VigilField]) -> VigilOutputEvent {
        VigilOutputEvent {
            size: size_of::<VigilOutputEvent>() as u32,
            severity: VIGIL_SEVERITY_INFO,
            kind: VigilStr::from_static("sample"),
            time_ns: 1_000 + seq as i64,
            fields: fields.as_ptr(),
            field_count: fields.len(),
            host: VigilStr::from_static("h"),
            monitor: VigilStr::from_static("m"),
            plugin: VigilStr::from_static("p"),
            seq,
        }
    }

    /// What write answered: the status, one verdict per event, the
    /// retry-after and the message.
    struct Answered {
        status: VigilStatus,
        verdicts: Vec<VigilWriteVerdict>,
        retry_after_ns: i64,
        message: String,
    }

    /// Calls write as the host does: the result preset to OK for the batch
    /// and per event, and read back the same way.
    fn write(handle: *mut c_void, events: &[VigilOutputEvent]) -> Answered {
        let batch = VigilBatch {
            size: size_of::<VigilBatch>() as u32,
            attempt: 1,
            events: events.as_ptr(),
            count: events.len(),
            event_size: size_of::<VigilOutputEvent>(),
        };
        let mut per_event = vec![VIGIL_WRITE_OK as u8; events.len()];
        let mut result = VigilWriteResult {
            size: size_of::<VigilWriteResult>() as u32,
            verdict: VIGIL_WRITE_OK,
            retry_after_ns: 0,
            per_event: per_event.as_mut_ptr(),
            per_event_used: 0,
            reserved: 0,
        };
        let called = call(|err| plugin_write(handle, &batch, &mut result, err));
        let verdicts = if result.per_event_used != 0 {
            per_event.iter().map(|&v| v as u32).collect()
        } else {
            vec![result.verdict; events.len()]
        };
        Answered {
            status: called.status,
            verdicts,
            retry_after_ns: result.retry_after_ns,
            message: called.message,
        }
    }

    /// A listener on loopback that hands what its first connection sent to
    /// the test when the connection closes.
    fn listener() -> (String, mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            tx.send(text).unwrap();
        });
        (address, rx)
    }

    /// A port nothing listens on (bound, then let go).
    fn closed_port() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    }

    #[test]
    fn options_are_checked_at_their_path() {
        for (address, why) in [
            ("localhost", "options.address: 'localhost' is not HOST:PORT"),
            (":8094", "options.address: ':8094' has no host"),
            (
                "::1:8094",
                "options.address: '::1:8094': write an IPv6 address in brackets, [::1]:8094",
            ),
            ("h:0", "options.address: 'h:0': the port must be 1 to 65535"),
            (
                "h:70000",
                "options.address: 'h:70000': the port must be 1 to 65535",
            ),
        ] {
            let (created, handle) = create(address, 0);
            assert_eq!(
                (created.status, created.message.as_str()),
                (VIGIL_E_INVALID_CONFIG, why)
            );
            assert!(handle.is_null());
        }
        let (created, handle) = create("127.0.0.1:8094", -1);
        assert_eq!(
            (created.status, created.message.as_str()),
            (
                VIGIL_E_INVALID_CONFIG,
                "options.retry_after: must be 0s to 1h"
            )
        );
        assert!(handle.is_null());
        let (created, handle) = create("[::1]:8094", 0);
        assert_eq!(created.status, VIGIL_OK);
        plugin_destroy(handle);
    }

    /// Every event delivered is OK; the one with nothing to carry is
    /// REJECTed, with a reason naming it; the lines arrive in order.
    #[test]
    fn verdicts_per_event() {
        let (address, received) = listener();
        let (created, handle) = create(&address, 0);
        assert_eq!(created.status, VIGIL_OK);
        let good = [VigilField {
            name: VigilStr::from_static("n"),
            value: VigilValue::int(7),
        }];
        let nan = [VigilField {
            name: VigilStr::from_static("x"),
            value: VigilValue::double(f64::NAN),
        }];
        let events = [event(1, &good), event(2, &nan), event(3, &good)];
        let answered = write(handle, &events);
        assert_eq!(answered.status, VIGIL_OK);
        assert_eq!(
            answered.verdicts,
            [VIGIL_WRITE_OK, VIGIL_WRITE_REJECT, VIGIL_WRITE_OK]
        );
        assert_eq!(
            answered.message,
            "seq 2 (m/sample) has no field line protocol can carry (1 field: none, NaN or infinite)"
        );
        // All rejected: nothing is sent, and no connection is needed for it.
        let answered = write(handle, &[event(4, &nan), event(5, &[])]);
        assert_eq!(answered.verdicts, [VIGIL_WRITE_REJECT, VIGIL_WRITE_REJECT]);
        assert!(
            answered.message.ends_with("(and 1 more)"),
            "{}",
            answered.message
        );
        assert_eq!(
            call(|err| plugin_flush(handle, monotonic_ns() + 1_000_000_000, err)).status,
            VIGIL_OK
        );
        plugin_destroy(handle);
        let text = received.recv().unwrap();
        assert_eq!(
            text,
            "p_sample,host=h,monitor=m,plugin=p,severity=info n=7i 1001\n\
             p_sample,host=h,monitor=m,plugin=p,severity=info n=7i 1003\n"
        );
    }

    /// No listener: RETRY for every event that has a line, with the
    /// retry-after asked for and the reason; a listener later: delivered.
    #[test]
    fn a_listener_away_means_retry_then_delivery() {
        let address = closed_port();
        let (created, handle) = create(&address, 250_000_000);
        assert_eq!(created.status, VIGIL_OK);
        let good = [VigilField {
            name: VigilStr::from_static("ok"),
            value: VigilValue::boolean(true),
        }];
        let events = [event(1, &good), event(2, &[]), event(3, &good)];
        let answered = write(handle, &events);
        assert_eq!(answered.status, VIGIL_OK);
        assert_eq!(
            answered.verdicts,
            [VIGIL_WRITE_RETRY, VIGIL_WRITE_REJECT, VIGIL_WRITE_RETRY]
        );
        assert_eq!(answered.retry_after_ns, 250_000_000);
        // The rejects' reason wins the one message.
        assert!(
            answered.message.starts_with("seq 2 (m/sample)"),
            "{}",
            answered.message
        );
        let answered = write(handle, &[event(1, &good)]);
        assert_eq!(answered.verdicts, [VIGIL_WRITE_RETRY]);
        assert!(
            answered
                .message
                .starts_with(&format!("cannot connect to {}: ", address)),
            "{}",
            answered.message
        );

        // The listener comes up on that port.
        let listener = TcpListener::bind(&address).unwrap();
        let answered = write(handle, &[event(1, &good), event(3, &good)]);
        assert_eq!(answered.verdicts, [VIGIL_WRITE_OK, VIGIL_WRITE_OK]);
        assert_eq!(answered.retry_after_ns, 0);
        plugin_destroy(handle);
        let (mut stream, _) = listener.accept().unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with("ok=true 1003\n"), "{}", text);
    }

    /// The listener closes between batches: the next batch notices before
    /// writing into the dead connection, reconnects, and loses nothing.
    #[test]
    fn a_listener_gone_between_batches_is_noticed_before_writing() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (created, handle) = create(&address, 0);
        assert_eq!(created.status, VIGIL_OK);
        let good = [VigilField {
            name: VigilStr::from_static("s"),
            value: VigilValue::string(b"a \"b\""),
        }];
        assert_eq!(write(handle, &[event(1, &good)]).verdicts, [VIGIL_WRITE_OK]);
        let (mut first, _) = listener.accept().unwrap();
        let mut line = [0u8; 256];
        let n = first.read(&mut line).unwrap();
        assert_eq!(
            std::str::from_utf8(&line[..n]).unwrap(),
            "p_sample,host=h,monitor=m,plugin=p,severity=info s=\"a \\\"b\\\"\" 1001\n"
        );
        drop(first); // the listener closes this connection
        std::thread::sleep(Duration::from_millis(50)); // the FIN arrives
        assert_eq!(write(handle, &[event(2, &good)]).verdicts, [VIGIL_WRITE_OK]);
        let (mut second, _) = listener.accept().unwrap();
        plugin_destroy(handle);
        let mut text = String::new();
        second.read_to_string(&mut text).unwrap();
        assert!(
            text.ends_with(" 1002\n") && text.lines().count() == 1,
            "{}",
            text
        );
    }

    #[test]
    fn a_panic_becomes_fatal_with_its_message() {
        let result = call(|err| guarded("write", err, || panic!("disk on fire")));
        assert_eq!(
            (result.status, result.message.as_str()),
            (VIGIL_E_FATAL, "panic in write: disk on fire")
        );
    }

    #[test]
    fn the_descriptor_is_an_output() {
        let d = &DESCRIPTOR.base;
        assert_eq!(unsafe { d.name.as_bytes() }, b"influx");
        assert_eq!(d.kind, VIGIL_PLUGIN_OUTPUT);
        assert_eq!(d.size as usize, DESCRIPTOR_SIZE_1_5);
        assert!(d.poll.is_none() && d.event_count == 0);
        assert!(DESCRIPTOR.write.is_some() && DESCRIPTOR.flush.is_some());
        assert_eq!(
            unsafe { OPTIONS[0].default_text.as_bytes() },
            ADDRESS_DEFAULT.as_bytes()
        );
    }
}
