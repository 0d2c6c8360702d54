import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `sensors` plugin, built as libsensors.so, against the sysfs fixtures in
/// Tests/Fixtures/sys/sensors (see the README there for the expected figures).
@Suite(.serialized) struct SensorsPluginTests {
    static let fixtures = repoRoot + "/Tests/Fixtures/sys/sensors"
    static let devices = "/bus/iio/devices/"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libsensors.so") }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "sensors" && d.polled && d.defaultInterval == 1_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["sysfs:string:/sys", "proximity_near:int:-", "proximity_hysteresis:int:0"])
        #expect(d.events.map(\.kind) == ["accelerometer", "gyroscope", "magnetometer", "orientation", "proximity",
                                         "pressure", "relative_altitude", "light", "temperature"])
        #expect(d.events[0].fields.map(\.name) == ["device", "name", "x", "y", "z"])
        #expect(d.events[0].fields[2].unit == "m/s²")
        #expect(d.events[1].fields[2].unit == "rad/s")
        #expect(d.events[2].fields[2].unit == "gauss")
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func tabletSnapshotHasExactScaledValues() throws {
        let instance = try host().instance(options: "{ sysfs: \(machines)/laptop/sys }", interval: .seconds(1))
        try instance.start()
        let accel = try #require(instance.events(kind: "accelerometer").first)
        #expect(accel.string("device") == "iio:device0" && accel.string("name") == "accel_3d")
        #expect(accel.double("x") == -12.0 * 0.009806650)
        #expect(accel.double("y") == 1000.0 * 0.009806650)
        #expect(accel.double("z") == 35.0 * 0.009806650)
        #expect(instance.events(kind: "orientation").map { $0.string("orientation") } == ["portrait"])

        let light = try #require(instance.events(kind: "light").first)
        #expect(light.string("name") == "als" && light.double("illuminance") == 2345.0 * 0.1)

        let prox = try #require(instance.events(kind: "proximity").first)
        #expect(prox.string("name") == "prox" && prox.bool("near") == false && prox.int("raw") == 12)
        #expect(prox.int("near_level") == 100)  // the device's in_proximity_nearlevel

        let pressure = try #require(instance.events(kind: "pressure").first)
        #expect(pressure.string("name") == "bmp280" && pressure.double("pressure") == 100.837890625)
        let altitude = try #require(instance.events(kind: "relative_altitude").first)
        #expect(altitude.double("altitude") == 0 && altitude.double("reference_pressure") == 100.837890625)
        #expect(instance.events(kind: "temperature").first?.double("temperature") == 23.45)

        let gyro = try #require(instance.events(kind: "gyroscope").first)
        #expect(gyro.string("name") == "gyro_3d")
        #expect(gyro.double("x") == 10.0 * 0.017453292 && gyro.double("y") == -20.0 * 0.017453292 && gyro.double("z") == 0)
        let magn = try #require(instance.events(kind: "magnetometer").first)
        #expect(magn.double("x") == 215.0 * 0.001 && magn.double("y") == -48.0 * 0.001 && magn.double("z") == -410.0 * 0.001)
        #expect(instance.events.count == 9)  // trigger0 is not a device

        // Motion is sampled; the rest is reported on change only.
        try instance.advance(by: .seconds(3))
        for kind in ["accelerometer", "gyroscope", "magnetometer"] { #expect(instance.events(kind: kind).count == 4) }
        #expect(instance.events.count == 9 + 3 * 3)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func offsetsPerAxisScalesAndRawPressure() throws {
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let accel = tree.path + Self.devices + "iio:device0/"
        let baro = tree.path + Self.devices + "iio:device3/"
        try tree.write(accel + "in_accel_offset", "2")
        try tree.write(accel + "in_accel_x_scale", "0.01")
        try tree.remove(baro + "in_pressure_input")
        try tree.write(baro + "in_pressure_raw", "25812")
        try tree.write(baro + "in_pressure_scale", "0.00390625")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        let a = try #require(instance.events(kind: "accelerometer").first)
        #expect(a.double("x") == (-12.0 + 2) * 0.01)
        #expect(a.double("y") == (1000.0 + 2) * 0.009806650)
        #expect(a.double("z") == (35.0 + 2) * 0.009806650)
        #expect(instance.events(kind: "pressure").first?.double("pressure") == 25812.0 * 0.00390625)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func orientationFollowsTheGravityAxis() throws {
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let accel = tree.path + Self.devices + "iio:device0/"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        func orientations() -> [String?] { instance.events(kind: "orientation").map { $0.string("orientation") } }
        #expect(orientations() == ["portrait"])

        try instance.advance(by: .seconds(2))  // unchanged: no event
        #expect(orientations() == ["portrait"])

        // Turned counterclockwise: +x up.
        try tree.write(accel + "in_accel_x_raw", "995")
        try tree.write(accel + "in_accel_y_raw", "40")
        try instance.advance(by: .seconds(1))
        #expect(orientations() == ["portrait", "left"])

        // Halfway between x and z (within the margin): the last one stands.
        try tree.write(accel + "in_accel_x_raw", "700")
        try tree.write(accel + "in_accel_z_raw", "690")
        try instance.advance(by: .seconds(1))
        #expect(orientations() == ["portrait", "left"])

        // Laid flat, screen up.
        try tree.write(accel + "in_accel_x_raw", "8")
        try tree.write(accel + "in_accel_z_raw", "1003")
        try instance.advance(by: .seconds(1))
        #expect(orientations() == ["portrait", "left", "face_up"])

        try tree.write(accel + "in_accel_z_raw", "-1003")
        try instance.advance(by: .seconds(1))
        try tree.write(accel + "in_accel_z_raw", "10")
        try tree.write(accel + "in_accel_x_raw", "-990")
        try instance.advance(by: .seconds(1))
        try tree.write(accel + "in_accel_x_raw", "3")
        try tree.write(accel + "in_accel_y_raw", "-990")
        try instance.advance(by: .seconds(1))
        #expect(orientations() == ["portrait", "left", "face_up", "face_down", "right", "upside_down"])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func proximityWithHysteresis() throws {
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let raw = tree.path + Self.devices + "iio:device2/in_proximity_raw"
        let instance = try host().instance(
            options: "{ sysfs: \(tree.path), proximity_near: 200, proximity_hysteresis: 20 }", interval: .seconds(1))
        try instance.start()
        func states() -> [String] {
            instance.events(kind: "proximity").map { "\($0.bool("near")!):\($0.int("raw")!)" }
        }
        #expect(states() == ["false:12"])
        #expect(instance.events(kind: "proximity").first?.int("near_level") == 200)  // the option wins
        for (value, expected) in [("150", ["false:12"]),                 // raw moved, still far: no event
                                  ("200", ["false:12", "true:200"]),     // at the level: near
                                  ("185", ["false:12", "true:200"]),     // within the hysteresis: still near
                                  ("179", ["false:12", "true:200", "false:179"]),  // below 200 - 20: far
                                  ("195", ["false:12", "true:200", "false:179"])] {  // below the level: still far
            try tree.write(raw, value)
            try instance.advance(by: .seconds(1))
            #expect(states() == expected, "raw \(value)")
        }
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func relativeAltitudeFromAPressureChange() throws {
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let pressure = tree.path + Self.devices + "iio:device3/in_pressure_input"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        // Up one floor or so: 0.04 kPa less.
        try tree.write(pressure, "100.797890625")
        try instance.advance(by: .seconds(1))
        let events = instance.events(kind: "relative_altitude")
        #expect(events.count == 2)
        let expected = 44330 * (1 - pow(100.797890625 / 100.837890625, 1 / 5.255))
        let h = try #require(events.last?.double("altitude"))
        #expect(abs(h - expected) < 1e-9)
        #expect(h > 3.3 && h < 3.4)
        #expect(events.last?.double("reference_pressure") == 100.837890625)
        #expect(instance.events(kind: "pressure").map { $0.double("pressure") } == [100.837890625, 100.797890625])

        // Below 0.1 m of change: no event of either kind... pressure moves by 0.0005 kPa (< 1 Pa).
        try tree.write(pressure, "100.797390625")
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "relative_altitude").count == 2)
        #expect(instance.events(kind: "pressure").count == 2)

        // A restart takes a new reference.
        try instance.stop()
        try instance.start()
        #expect(instance.events(kind: "relative_altitude").last?.double("altitude") == 0)
        #expect(instance.events(kind: "relative_altitude").last?.double("reference_pressure") == 100.797390625)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func lightReportsChangesOfFiveLux() throws {
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let raw = tree.path + Self.devices + "iio:device1/in_illuminance_raw"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        try tree.write(raw, "2380")  // 3.5 lux more
        try instance.advance(by: .seconds(1))
        try tree.write(raw, "2400")  // 5.5 lux more than reported
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "light").map { $0.double("illuminance") } == [2345.0 * 0.1, 2400.0 * 0.1])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func aFailingChannelSkipsTheDevice() throws {
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let accel = tree.path + Self.devices + "iio:device0/"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        #expect(instance.events(kind: "accelerometer").count == 1)

        // A read that fails (EISDIR here; EIO or EAGAIN from a driver).
        try tree.remove(accel + "in_accel_y_raw")
        #expect(mkdir(accel + "in_accel_y_raw", 0o755) == 0)
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "accelerometer").count == 1)
        #expect(instance.events(kind: "gyroscope").count == 2)
        #expect(instance.logs.contains { $0.message.contains("skipping IIO device iio:device0") })

        // Content that does not parse, and a file listed but gone (a dangling link).
        try tree.remove(accel + "in_accel_y_raw")
        try tree.write(accel + "in_accel_y_raw", "n/a")
        try instance.advance(by: .seconds(1))
        try tree.remove(accel + "in_accel_y_raw")
        #expect(symlink(accel + "gone", accel + "in_accel_y_raw") == 0)
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "accelerometer").count == 1)

        // A device that vanished: the others go on.
        try tree.remove(tree.path + Self.devices + "iio:device4")
        try tree.remove(accel + "in_accel_y_raw")
        try tree.write(accel + "in_accel_y_raw", "1000")
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "accelerometer").count == 2)
        #expect(instance.events(kind: "gyroscope").count == 4)
        #expect(instance.events(kind: "magnetometer").count == 5)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutAnIIODevice() throws {
        for root in [Self.fixtures + "/empty", Self.fixtures + "/no-such-tree"] {
            let instance = try host().instance(options: "{ sysfs: \(root) }", interval: .seconds(1))
            do {
                try instance.start()
                Issue.record("start succeeded on \(root)")
            } catch {
                #expect(error.status == "unavailable")
                #expect(error.description.contains("no IIO sensor in \(root)/bus/iio/devices"))
            }
            #expect(instance.events.isEmpty)
            #expect(instance.violations.isEmpty)
        }

        // Every device gone mid-run: unavailable from the poll, not a failure.
        let tree = try SensorsTempTree(copying: machines + "/laptop/sys")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        try tree.remove(tree.path + "/bus")
        do {
            try instance.advance(by: .seconds(1))
            Issue.record("a poll without any IIO device succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func refusesBadOptions() throws {
        for (options, message) in [("{ sysfs: '' }", "options.sysfs: must not be empty"),
                                   ("{ proximity_near: -1 }", "options.proximity_near: must not be negative"),
                                   ("{ proximity_hysteresis: -5 }", "options.proximity_hysteresis: must not be negative")] {
            do {
                _ = try host().instance(options: options)
                Issue.record("\(options) accepted")
            } catch let error as PluginTestError {
                #expect(error.status == "invalid configuration")
                #expect(error.description.contains(message))
            }
        }
    }
}

private typealias SensorsTempTree = TempTree
