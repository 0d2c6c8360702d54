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

    /// The series of a request's body (snappy, then protobuf), for tests and
    /// a receiver of our own; refused when it is not one.
    package static func decode(_ body: [UInt8]) throws -> [Series] {
        let request = try Prometheus_WriteRequest(serializedBytes: try Snappy.uncompress(body))
        return request.timeseries.map { ts in
            Series(labels: ts.labels.map { ($0.name, $0.value) }, samples: ts.samples.map { ($0.value, $0.timestamp) })
        }
    }
}
