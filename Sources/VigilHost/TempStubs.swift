import Foundation
import VigilCore

// TEMPORARY until branch iso-manifest lands.
public enum RestartPolicy: String, Sendable, CaseIterable { case onFailure = "on-failure", always, never }
public struct SupervisionConfig: Sendable, Equatable {
    public var restart: RestartPolicy = .onFailure
    public var backoffMin: Int64 = 1_000_000_000
    public var backoffMax: Int64 = 300_000_000_000
    public var maxRestarts: Int = 5
    public var restartWindow: Int64 = 600_000_000_000
    public init() {}
}
