import SwiftProtobuf
import VigilPrompb

/// One request of Prometheus' remote write 1.0: a `prometheus.WriteRequest`
/// of time series (labels sorted by name, `__name__` among them; samples
/// oldest first, times in ms), serialized by swift-protobuf and compressed
/// as one snappy block, with the headers the protocol asks for.
package struct RemoteWriteRequest {
    package struct Series: Sendable, Equatable {
        /// Name and value of each label, `__name__` included.
        package var labels: [(name: String, value: String)]
        package var samples: [(value: Double, time: Int64)]

        package init(labels: [(name: String, value: String)], samples: [(value: Double, time: Int64)]) {
            self.labels = labels
            self.samples = samples
        }

        package static func == (a: Series, b: Series) -> Bool {
            a.labels.elementsEqual(b.labels) { $0 == $1 }
                && a.samples.elementsEqual(b.samples) { $0.time == $1.time && $0.value.bitPattern == $1.value.bitPattern }
        }
    }

    /// The value that ends a series (Prometheus' stale marker): a NaN the
    /// receivers tell from any other.
    package static let staleMarker = Double(bitPattern: 0x7FF0_0000_0000_0002)

    /// What every request carries beside its body.
    package static let headers: [(String, String)] = [
        ("Content-Type", "application/x-protobuf"),
        ("Content-Encoding", "snappy"),
        ("X-Prometheus-Remote-Write-Version", "0.1.0"),
    ]

    /// The snappy-compressed protobuf of `series`.
    package static func body(_ series: [Series]) throws -> [UInt8] {
        var request = Prometheus_WriteRequest()
        request.timeseries.reserveCapacity(series.count)
        for s in series {
            var out = Prometheus_TimeSeries()
            // The protocol asks for labels sorted by name (bytewise).
            out.labels = s.labels.sorted { Array($0.name.utf8).lexicographicallyPrecedes(Array($1.name.utf8)) }.map {
                var label = Prometheus_Label()
                label.name = $0.name
                label.value = $0.value
                return label
            }
            out.samples = s.samples.map {
                var sample = Prometheus_Sample()
                sample.value = $0.value
                sample.timestamp = $0.time
                return sample
            }
            request.timeseries.append(out)
        }
        let bytes: [UInt8] = try request.serializedBytes()
        return try Snappy.compress(bytes)
    }

    /// A request built of series whose labels were serialized once (the
    /// sink's way: a series' labels are the bulk of each request, and
    /// swift-protobuf sizes every nested message again at each level).
    /// Each entry of `timeseries` (field 1) is the series' labels, as
    /// swift-protobuf serialized a `TimeSeries` holding only them, followed
    /// by a `TimeSeries` holding only the samples, as it serializes them:
    /// two serialized messages one after the other are the two merged
    /// (protobuf's rule), so the entry is the whole series. Only the field's
    /// tag and length are written here.
    package struct Builder {
        package private(set) var bytes: [UInt8] = []
        private var samples = Prometheus_TimeSeries()

        package init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

        /// `labels` serialized as a `TimeSeries` of them alone.
        package static func labelBytes(_ labels: [Prometheus_Label]) throws -> [UInt8] {
            var series = Prometheus_TimeSeries()
            series.labels = labels
            return try series.serializedBytes()
        }

        /// One series: its labels (`labelBytes`) and these samples, oldest first.
        package mutating func append(labels: [UInt8], samples: [Prometheus_Sample]) throws {
            self.samples.samples = samples
            let tail: [UInt8] = try self.samples.serializedBytes()
            bytes.append(0x0A)  // field 1 (timeseries), length-delimited
            var n = UInt64(labels.count + tail.count)
            while n >= 0x80 {
                bytes.append(UInt8(truncatingIfNeeded: n) | 0x80)
                n >>= 7
            }
            bytes.append(UInt8(n))
            bytes += labels
            bytes += tail
        }
    }

    /// The series of a request's body (snappy, then protobuf), for tests and
    /// a receiver of our own; refused when it is not one.
    package static func decode(_ body: [UInt8]) throws -> [Series] {
        let request = try Prometheus_WriteRequest(serializedBytes: try Snappy.uncompress(body))
        return request.timeseries.map { ts in
            Series(labels: ts.labels.map { ($0.name, $0.value) }, samples: ts.samples.map { ($0.value, $0.timestamp) })
        }
    }
}
