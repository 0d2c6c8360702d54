import SwiftProtobuf
import VigilCore
import VigilOTLP

/// Events as OTLP export requests (the generated messages of VigilOTLP).
///
/// Logs: one `LogRecord` per event, under one resource (`service.name`
/// vigil, `host.name`) and one scope (`vigil`, its version): the event's time
/// as `time_unix_nano`, its severity mapped to `severity_number` (debug 5,
/// info 9, notice 10, warning 13, error 17, critical 21) and named in
/// `severity_text`, its kind as `event_name`, `MONITOR/KIND` as the body, and
/// as attributes `vigil.monitor`, `vigil.plugin`, `vigil.kind`, `vigil.seq`
/// and each field under its own name, with its type (int, double, bool,
/// string).
///
/// Metrics: each numeric or boolean field a data point, named and scaled as
/// the `prometheus` sink names it (PrometheusNaming), a gauge, or a
/// cumulative monotonic sum for a field the plugin marks as a counter; its
/// attributes `vigil.monitor` and the plugin's identity fields.
package enum OTLPMessages {
    package typealias LogsRequest = Opentelemetry_Proto_Collector_Logs_V1_ExportLogsServiceRequest
    package typealias LogsResponse = Opentelemetry_Proto_Collector_Logs_V1_ExportLogsServiceResponse
    package typealias MetricsRequest = Opentelemetry_Proto_Collector_Metrics_V1_ExportMetricsServiceRequest
    package typealias MetricsResponse = Opentelemetry_Proto_Collector_Metrics_V1_ExportMetricsServiceResponse
    package typealias KeyValue = Opentelemetry_Proto_Common_V1_KeyValue
    package typealias AnyValue = Opentelemetry_Proto_Common_V1_AnyValue

    static func severityNumber(_ s: Severity) -> Opentelemetry_Proto_Logs_V1_SeverityNumber {
        switch s {
        case .debug: .debug
        case .info: .info
        case .notice: .info2
        case .warning: .warn
        case .error: .error
        case .critical: .fatal
        }
    }

    static func attribute(_ key: String, _ value: FieldValue) -> KeyValue {
        var kv = KeyValue()
        kv.key = key
        var any = AnyValue()
        switch value {
        case .int(let i): any.intValue = i
        case .double(let d): any.doubleValue = d
        case .bool(let b): any.boolValue = b
        case .string(let s): any.stringValue = s
        }
        kv.value = any
        return kv
    }

    static func resource(host: String) -> Opentelemetry_Proto_Resource_V1_Resource {
        var resource = Opentelemetry_Proto_Resource_V1_Resource()
        resource.attributes = [attribute("service.name", .string("vigil")), attribute("host.name", .string(host))]
        return resource
    }

    static var scope: Opentelemetry_Proto_Common_V1_InstrumentationScope {
        var scope = Opentelemetry_Proto_Common_V1_InstrumentationScope()
        scope.name = "vigil"
        scope.version = vigilVersion
        return scope
    }

    /// Nanoseconds since the epoch as OTLP's unsigned field; a time before
    /// 1970 (a plugin may send one) is 0, "unknown".
    static func unixNano(_ ns: Int64) -> UInt64 { ns > 0 ? UInt64(ns) : 0 }

    static func logs(_ events: ArraySlice<Event>, host: String, observed: Int64) -> LogsRequest {
        var scopeLogs = Opentelemetry_Proto_Logs_V1_ScopeLogs()
        scopeLogs.scope = scope
        scopeLogs.logRecords.reserveCapacity(events.count)
        for event in events {
            var record = Opentelemetry_Proto_Logs_V1_LogRecord()
            record.timeUnixNano = unixNano(event.time)
            record.observedTimeUnixNano = unixNano(observed)
            record.severityNumber = severityNumber(event.severity)
            record.severityText = "\(event.severity)"
            record.eventName = event.kind
            var body = AnyValue()
            body.stringValue = "\(event.monitor)/\(event.kind)"
            record.body = body
            var attributes: [KeyValue] = [
                attribute("vigil.monitor", .string(event.monitor)), attribute("vigil.plugin", .string(event.plugin)),
                attribute("vigil.kind", .string(event.kind)), attribute("vigil.seq", .int(Int64(clamping: event.seq))),
            ]
            for field in event.fields { attributes.append(attribute(field.name, field.value)) }
            record.attributes = attributes
            scopeLogs.logRecords.append(record)
        }
        var resourceLogs = Opentelemetry_Proto_Logs_V1_ResourceLogs()
        resourceLogs.resource = resource(host: host)
        resourceLogs.scopeLogs = [scopeLogs]
        var request = LogsRequest()
        request.resourceLogs = [resourceLogs]
        return request
    }

    /// The unit of a base-unit suffix, as UCUM says it (OTel's practice).
    static func ucum(_ suffix: String?) -> String {
        switch suffix {
        case "bytes": "By"
        case "seconds": "s"
        case "ratio": "1"
        case "celsius": "Cel"
        case "pascals": "Pa"
        case "hertz": "Hz"
        case "bytes_per_second": "By/s"
        case "meters": "m"
        case "volts": "V"
        case "amperes": "A"
        case "watts": "W"
        case "joules": "J"
        default: ""
        }
    }

    /// Metrics from the events' numbers; `spec(monitor, kind)` is the
    /// plugin's declaration of the kind, when known. Events without numbers
    /// add nothing; the count of data points is returned with the request.
    static func metrics(_ events: ArraySlice<Event>, host: String,
                        spec: (String, String) -> EventSpec?) -> (MetricsRequest, points: Int) {
        var metrics: [Opentelemetry_Proto_Metrics_V1_Metric] = []
        var index: [String: Int] = [:]
        var points = 0
        for event in events {
            let kind = spec(event.monitor, event.kind)
            var specs: [String: FieldSpec] = [:]
            for field in kind?.fields ?? [] { specs[field.name] = field }
            var attributes = [attribute("vigil.monitor", .string(event.monitor))]
            for field in kind?.fields ?? [] where field.identity {
                if let value = event[field: field.name] { attributes.append(attribute(field.name, value)) }
            }
            for field in event.fields {
                let isBool: Bool = if case .bool = field.value { true } else { false }
                if case .string = field.value { continue }
                guard let shape = PrometheusNaming.shape(plugin: event.plugin, kind: event.kind, field: field.name,
                                                         spec: specs[field.name], valueIsBool: isBool) else { continue }
                var point = Opentelemetry_Proto_Metrics_V1_NumberDataPoint()
                point.timeUnixNano = unixNano(event.time)
                point.attributes = attributes
                switch field.value {
                case .int(let i) where shape.scale == 1: point.asInt = i
                case .int(let i): point.asDouble = Double(i) * shape.scale
                case .double(let d): point.asDouble = d * shape.scale
                case .bool(let b): point.asInt = b ? 1 : 0
                case .string: continue
                }
                let slot: Int
                if let known = index[shape.family] {
                    slot = known
                } else {
                    var metric = Opentelemetry_Proto_Metrics_V1_Metric()
                    metric.name = shape.family
                    metric.description_p = shape.help
                    metric.unit = ucum(PrometheusNaming.baseUnit(specs[field.name]?.unit ?? "").suffix)
                    if shape.kind == .counter {
                        var sum = Opentelemetry_Proto_Metrics_V1_Sum()
                        sum.isMonotonic = true
                        sum.aggregationTemporality = .cumulative
                        metric.sum = sum
                    } else {
                        metric.gauge = Opentelemetry_Proto_Metrics_V1_Gauge()
                    }
                    slot = metrics.count
                    index[shape.family] = slot
                    metrics.append(metric)
                }
                if shape.kind == .counter {
                    metrics[slot].sum.dataPoints.append(point)
                } else {
                    metrics[slot].gauge.dataPoints.append(point)
                }
                points += 1
            }
        }
        var scopeMetrics = Opentelemetry_Proto_Metrics_V1_ScopeMetrics()
        scopeMetrics.scope = scope
        scopeMetrics.metrics = metrics
        var resourceMetrics = Opentelemetry_Proto_Metrics_V1_ResourceMetrics()
        resourceMetrics.resource = resource(host: host)
        resourceMetrics.scopeMetrics = [scopeMetrics]
        var request = MetricsRequest()
        request.resourceMetrics = [resourceMetrics]
        return (request, points)
    }

    /// OTLP/JSON: the protobuf JSON mapping with enums as integers, as the
    /// OTLP specification asks.
    static var jsonOptions: JSONEncodingOptions {
        var options = JSONEncodingOptions()
        options.alwaysPrintEnumsAsInts = true
        return options
    }
}
