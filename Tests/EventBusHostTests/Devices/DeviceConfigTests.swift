import EventBusHost
import EventBusKit
import Foundation
import Testing

/// `sources.devices` in the host config: device watches the host keeps running, with errors
/// naming file, line and key like every other key.
@Suite struct DeviceConfigTests {
    private func load(_ yaml: String) throws -> Result<HostConfig, ConfigError> {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", yaml)
        do throws(ConfigError) {
            return .success(try HostConfig.load(from: file))
        } catch {
            return .failure(error)
        }
    }

    @Test func deviceWatchesBecomeWatchConfigs() throws {
        let config = try load("""
            sources:
              devices:
                - {name: nets, subsystem: net}
                - {name: disks, subsystem: block, devtype: disk, layer: kernel}
                - name: seats
                  tag: seat
                  layer: udev
            """).get()
        #expect(config.watches == [
            WatchConfig(name: "nets", source: DeviceWatch(subsystem: "net")),
            WatchConfig(name: "disks", source: DeviceWatch(subsystem: "block", devtype: "disk", layer: .kernel)),
            WatchConfig(name: "seats", source: DeviceWatch(tag: "seat", layer: .udev)),
        ])
    }

    @Test func mistakesNameTheLineAndTheReason() throws {
        let cases: [(String, Int, String)] = [
            ("    - {name: a, devtype: disk}", 3, "needs a subsystem"),
            ("    - {name: a, subsystem: net, layer: sideways}", 3, "expected one of: automatic, udev, kernel"),
            ("    - {name: a, subsystem: net, colour: red}", 3, "colour"),
            ("    - {subsystem: net}", 3, "needs a name"),
            ("    - {name: a, tag: seat, layer: kernel}", 3, "needs the udev layer"),
            ("    - {name: a, subsystem: \"net work\"}", 3, "not a device subsystem name"),
        ]
        for (line, number, reason) in cases {
            let result = try load("sources:\n  devices:\n\(line)\n")
            guard case .failure(let error) = result else {
                Issue.record("accepted: \(line)")
                continue
            }
            #expect(error.line == number, "\(line): \(error)")
            #expect("\(error)".contains(reason), "\(line): \(error)")
        }
    }
}
