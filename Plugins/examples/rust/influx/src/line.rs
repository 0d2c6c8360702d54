//! InfluxDB line protocol: one event as one line, written into a buffer.
//!
//! ```text
//! PLUGIN_KIND,host=H,monitor=M,plugin=P,severity=S FIELD=VALUE,... TIME_NS\n
//! ```
//!
//! - measurement: the plugin's name and the event's kind joined by `_`
//!   (`cpu_sample`): every instance of a plugin shares the schema of each of
//!   its kinds, and the `monitor` tag tells the instances apart;
//! - tags, in key order: `host`, `monitor`, `plugin`, `severity` (`debug` …
//!   `critical`); a tag whose value is empty is left out (line protocol has
//!   no empty tag values);
//! - fields: INT as `5i`, DOUBLE as a decimal (`0.25`, `3`: a float without
//!   the `i`), BOOL as `true`/`false`, STRING as a quoted string field (never
//!   a tag: a string such as a message would make a series per value). A
//!   NaN or infinite DOUBLE, which line protocol cannot carry, and a value of
//!   a type newer than this plugin are left out; an event left with no field
//!   is refused ([`Unwritable`]), since a point needs at least one;
//! - the timestamp: the event's time in nanoseconds since the epoch (the
//!   default precision of InfluxDB's and Telegraf's listeners).
//!
//! Escaping: in the measurement, `,` and space; in tag keys, tag values and
//! field keys, also `=`; in all of them a backslash is doubled, so that one
//! never escapes what follows it. In string field values, `"` and backslash.
//! Everywhere, tab, newline, form feed and carriage return become the two
//! characters `\t`, `\n`, `\f`, `\r`: a raw newline would end the line.

use crate::abi::{FieldValue, OutputEvent};

/// Why an event has no line: no field line protocol can carry.
#[derive(Debug, PartialEq)]
pub struct Unwritable {
    /// Fields the event had (all of them left out).
    pub fields: usize,
}

/// Appends the event's line (with its `\n`) to `out`, or leaves `out` as it
/// was and says why there is none.
pub fn encode(event: &OutputEvent, out: &mut Vec<u8>) -> Result<(), Unwritable> {
    let start = out.len();
    escape(event.plugin, Element::Measurement, out);
    out.push(b'_');
    escape(event.kind, Element::Measurement, out);
    for (key, value) in [
        ("host", event.host),
        ("monitor", event.monitor),
        ("plugin", event.plugin),
        ("severity", severity_name(event.severity)),
    ] {
        if value.is_empty() {
            continue;
        }
        out.push(b',');
        out.extend_from_slice(key.as_bytes());
        out.push(b'=');
        escape(value, Element::Key, out);
    }
    let mut separator = b' ';
    for field in event.fields {
        // SAFETY: the event is the host's, read during its write call.
        let (name, value) = unsafe { (field.name_bytes(), field.read()) };
        let mark = out.len();
        out.push(separator);
        escape(name, Element::Key, out);
        out.push(b'=');
        let written = match value {
            FieldValue::Int(i) => {
                out.extend_from_slice(format!("{}i", i).as_bytes());
                true
            }
            FieldValue::Double(d) if d.is_finite() => {
                // Display: the shortest text that reads back as the same
                // double, never an exponent, the same in every Rust version.
                out.extend_from_slice(format!("{}", d).as_bytes());
                true
            }
            FieldValue::Bool(b) => {
                out.extend_from_slice(if b { b"true" } else { b"false" });
                true
            }
            FieldValue::Str(s) => {
                out.push(b'"');
                escape(s, Element::StringValue, out);
                out.push(b'"');
                true
            }
            FieldValue::Double(_) | FieldValue::Unknown(_) => false,
        };
        if written {
            separator = b',';
        } else {
            out.truncate(mark);
        }
    }
    if separator == b' ' {
        out.truncate(start);
        return Err(Unwritable {
            fields: event.fields.len(),
        });
    }
    out.push(b' ');
    out.extend_from_slice(event.time_ns.to_string().as_bytes());
    out.push(b'\n');
    Ok(())
}

/// Where a text goes, which decides what is escaped.
#[derive(Clone, Copy, PartialEq)]
enum Element {
    Measurement,
    /// Tag keys, tag values, field keys.
    Key,
    /// Inside the quotes of a string field.
    StringValue,
}

fn escape(text: &[u8], element: Element, out: &mut Vec<u8>) {
    for &byte in text {
        match byte {
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' if element == Element::StringValue => out.extend_from_slice(b"\\\""),
            b',' | b' ' if element != Element::StringValue => {
                out.push(b'\\');
                out.push(byte);
            }
            b'=' if element == Element::Key => out.extend_from_slice(b"\\="),
            _ => out.push(byte),
        }
    }
}

/// The `severity` tag: the header's names, or the number of one this plugin
/// does not know.
fn severity_name(severity: u32) -> &'static [u8] {
    match severity {
        0 => b"debug",
        1 => b"info",
        2 => b"notice",
        3 => b"warning",
        4 => b"error",
        5 => b"critical",
        _ => b"unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::*;

    fn event<'a>(fields: &'a [VigilField]) -> OutputEvent<'a> {
        OutputEvent {
            severity: VIGIL_SEVERITY_INFO,
            kind: b"sample",
            time_ns: 1_700_000_000_123_456_789,
            fields,
            host: b"web-1",
            monitor: b"root fs",
            plugin: b"storage",
            seq: 1,
        }
    }

    fn field(name: &'static str, value: VigilValue) -> VigilField {
        VigilField {
            name: VigilStr::from_static(name),
            value,
        }
    }

    fn line(event: &OutputEvent) -> Result<String, Unwritable> {
        let mut out = b"before|".to_vec();
        let result = encode(event, &mut out);
        let text = String::from_utf8(out).unwrap();
        match result {
            Ok(()) => Ok(text.strip_prefix("before|").unwrap().to_string()),
            Err(why) => {
                assert_eq!(text, "before|", "nothing is left behind");
                Err(why)
            }
        }
    }

    #[test]
    fn every_type_of_field() {
        let fields = [
            field("used", VigilValue::int(-42)),
            field("ratio", VigilValue::double(0.25)),
            field("whole", VigilValue::double(3.0)),
            field("tiny", VigilValue::double(1e-7)),
            field("ok", VigilValue::boolean(true)),
            field("no", VigilValue::boolean(false)),
            field("mount", VigilValue::string(b"/srv/data")),
        ];
        assert_eq!(
            line(&event(&fields)).unwrap(),
            "storage_sample,host=web-1,monitor=root\\ fs,plugin=storage,severity=info \
             used=-42i,ratio=0.25,whole=3,tiny=0.0000001,ok=true,no=false,mount=\"/srv/data\" \
             1700000000123456789\n"
        );
    }

    #[test]
    fn escaping_per_element() {
        let fields = [
            field(
                "a b,c=d\\",
                VigilValue::string(b"say \"hi\", a=b\\c\nnext\ttab"),
            ),
            field("n", VigilValue::int(1)),
        ];
        let mut e = event(&fields);
        e.plugin = b"my plugin,x=y";
        e.kind = b"k\r";
        e.host = b"h=1";
        e.monitor = b"a\\";
        e.severity = VIGIL_SEVERITY_CRITICAL;
        assert_eq!(
            line(&e).unwrap(),
            "my\\ plugin\\,x=y_k\\r,host=h\\=1,monitor=a\\\\,plugin=my\\ plugin\\,x\\=y,severity=critical \
             a\\ b\\,c\\=d\\\\=\"say \\\"hi\\\", a=b\\\\c\\nnext\\ttab\",n=1i 1700000000123456789\n"
        );
    }

    #[test]
    fn empty_tags_are_left_out_and_unknown_severities_named() {
        let fields = [field("n", VigilValue::int(1))];
        let mut e = event(&fields);
        e.host = b"";
        e.severity = 77;
        assert_eq!(
            line(&e).unwrap(),
            "storage_sample,monitor=root\\ fs,plugin=storage,severity=unknown n=1i 1700000000123456789\n"
        );
    }

    #[test]
    fn numbers_line_protocol_cannot_carry_are_left_out() {
        let fields = [
            field("nan", VigilValue::double(f64::NAN)),
            field("n", VigilValue::int(i64::MIN)),
            field("inf", VigilValue::double(f64::INFINITY)),
            field(
                "future",
                VigilValue {
                    type_: 42,
                    reserved: 0,
                    as_: VigilValueAs { i64: 0 },
                },
            ),
            field("big", VigilValue::double(-1.5e300)),
        ];
        let text = line(&event(&fields)).unwrap();
        assert!(
            text.starts_with("storage_sample,host=web-1,monitor=root\\ fs,plugin=storage,severity=info n=-9223372036854775808i,big=-15"),
            "{}",
            text
        );
        assert!(text.ends_with("0 1700000000123456789\n"), "{}", text);
        let big = text
            .split("big=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        assert_eq!(big.parse::<f64>().unwrap(), -1.5e300);
    }

    #[test]
    fn an_event_with_nothing_to_carry_has_no_line() {
        let nan = [field("nan", VigilValue::double(f64::NAN))];
        assert_eq!(line(&event(&nan)), Err(Unwritable { fields: 1 }));
        assert_eq!(line(&event(&[])), Err(Unwritable { fields: 0 }));
    }
}
