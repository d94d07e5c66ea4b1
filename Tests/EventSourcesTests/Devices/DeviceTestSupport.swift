import EventBusKit
@testable import EventSources
import Foundation
import Synchronization
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

// Helpers of the device tests. Names carry a `Device` or `Loop` prefix: the file and journal
// tests share this test target.

/// Loop block devices made and removed through `/dev/loop-control` (`LOOP_CTL_ADD`,
/// `LOOP_CTL_REMOVE`): a real kernel `add` and `remove` uevent each, in every network namespace
/// (block devices belong to none). Numbers are picked at random from a range `losetup -f` does
/// not reach on this machine, so parallel tests do not meet.
enum LoopControl {
    private static let add: UInt = 0x4C80
    private static let remove: UInt = 0x4C81

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Makes a new loop device and returns its number; `announce` hears the number just before.
    static func make(announcing announce: (Int) -> Void = { _ in }) throws -> Int {
        let control = open("/dev/loop-control", O_RDWR | O_CLOEXEC)
        guard control >= 0 else { throw Failure(description: "cannot open /dev/loop-control: \(String(cString: strerror(errno)))") }
        defer { close(control) }
        for _ in 0..<64 {
            let number = Int.random(in: 300..<4000)
            announce(number)
            let result = ioctl(control, add, Int32(number))
            if result >= 0 { return Int(result) }
            if errno != EEXIST { throw Failure(description: "LOOP_CTL_ADD \(number): \(String(cString: strerror(errno)))") }
        }
        throw Failure(description: "no free loop number found")
    }

    /// Removes loop device `number` (it must not be attached). The kernel refuses with EBUSY
    /// while anything has the device open — a new block device is probed by whatever watches
    /// the machine's devices (another test's udevd, a container's), briefly — so EBUSY is asked
    /// again for the suite's patience.
    static func remove(_ number: Int) throws {
        let control = open("/dev/loop-control", O_RDWR | O_CLOEXEC)
        guard control >= 0 else { throw Failure(description: "cannot open /dev/loop-control: \(String(cString: strerror(errno)))") }
        defer { close(control) }
        let deadline = ContinuousClock.now + patience
        while ioctl(control, remove, Int32(number)) < 0 {
            guard errno == EBUSY, ContinuousClock.now < deadline else {
                throw Failure(description: "LOOP_CTL_REMOVE \(number): \(String(cString: strerror(errno)))")
            }
            usleep(20_000)
        }
    }

    static func syspath(_ number: Int) -> String { "/sys/devices/virtual/block/loop\(number)" }
}

/// Records the device events and notices a subscription receives, in order.
final class DeviceRecorder: @unchecked Sendable {
    private let events = Mutex<[Event]>([])
    var cancellable: AnyCancellable?

    func record(_ event: Event) {
        events.withLock { $0.append(event) }
    }

    var all: [Event] { events.withLock { $0 } }
    var changes: [DeviceChange] { all.compactMap(\.device) }
    var notices: [DeviceNotice] { all.compactMap(\.deviceNotice) }

    /// The changes of `kind` of the device at `syspath`.
    func changes(_ kind: DeviceChange.Kind, of syspath: String) -> [DeviceChange] {
        changes.filter { $0.kind == kind && $0.syspath == syspath }
    }

    func count(_ notice: DeviceNotice.Kind) -> Int { notices.filter { $0.kind == notice }.count }

    /// Waits until the first `devices.snapshot` arrived: changes made after it are live. False
    /// (with the watch's notices recorded as an issue) when the watch failed instead.
    func waitForSnapshot() async -> Bool {
        _ = await eventually { self.count(.snapshot) >= 1 || self.count(.error) >= 1 }
        if count(.snapshot) >= 1 { return true }
        Issue.record("no snapshot; notices: \(notices.map { "\($0.kind): \($0.message)" })")
        return false
    }
}
