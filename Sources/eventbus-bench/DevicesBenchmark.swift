import EventBusKit
import EventSources
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Devices benchmark: the latency of a device event, from the write that asks the kernel for a
// `change` uevent of a loop device (`change` into its sysfs `uevent` file: the uevent is sent
// within the write, with none of the work of making a device) to its receipt, one at a time — by
// a bus subscriber of the devices source (kernel layer, subsystem block) and, in the same run,
// by `udevadm monitor --kernel --subsystem-match=block`, whose own receipt stamp
// (`KERNEL[monotonic seconds]`, taken when it read the message) is used, so the pipe to this
// process is not counted against it. The loop device is made for the run and removed after it.

/// The benchmark's loop device, number 5000 up (clear of `losetup -f`), and its `change` trigger.
private struct BenchLoop {
    let number: Int
    private let control: Int32
    private let trigger: Int32

    init?() {
        control = open("/dev/loop-control", O_RDWR | O_CLOEXEC)
        guard control >= 0 else { return nil }
        var made: Int32 = -1
        for candidate in 5000..<6000 where made < 0 { made = ioctl(control, 0x4C80, Int32(candidate)) }
        guard made >= 0 else {
            close(control)
            return nil
        }
        number = Int(made)
        trigger = open("/sys/devices/virtual/block/loop\(made)/uevent", O_WRONLY | O_CLOEXEC)
    }

    var syspath: String { "/sys/devices/virtual/block/loop\(number)" }

    /// Asks the kernel for a `change` uevent now.
    func change() -> Bool { write(trigger, "change", 6) == 6 }

    func remove() {
        close(trigger)
        _ = ioctl(control, 0x4C81, Int32(number))
        close(control)
    }
}

private func percentiles(_ nanoseconds: [UInt64]) -> String {
    guard !nanoseconds.isEmpty else { return "no samples" }
    let sorted = nanoseconds.sorted()
    func at(_ p: Double) -> Double { Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e3 }
    return String(format: "p50 %.0f µs  p90 %.0f µs  p99 %.0f µs  (n=%d)", at(0.5), at(0.9), at(0.99), sorted.count)
}

func devicesBenchmark(rounds: Int) {
    print("devices: a loop device's `change` uevent → receipt, \(rounds) one at a time")
    guard let loop = BenchLoop() else {
        print("  cannot make a loop device: \(String(cString: strerror(errno))) (needs root)")
        return
    }
    defer { loop.remove() }
    // Alternating, so a change in the machine's load reaches both.
    var bus: [UInt64] = [], anchor: [UInt64] = []
    for _ in 0..<4 {
        bus += busDeviceLatencies(rounds: rounds / 4, loop: loop) ?? []
        anchor += udevadmLatencies(rounds: rounds / 4, loop: loop) ?? []
    }
    print("  bus (devices source, kernel layer):  " + percentiles(bus))
    print("  udevadm monitor --kernel (anchor):   " + percentiles(anchor))
}

/// The bus subscriber's latencies.
private func busDeviceLatencies(rounds: Int, loop: BenchLoop) -> [UInt64]? {
    let bus = Bus()
    DeviceSources.register(on: bus)
    let received = DispatchSemaphore(value: 0)
    let stamp = LockedValue<UInt64>(0)
    let latencies = LockedValue<[UInt64]>([])
    let ready = DispatchSemaphore(value: 0)
    let subscription: AnyCancellable
    do {
        subscription = try bus.devices(subsystem: "block", layer: .kernel).sink { event in
            if event.name == "devices.snapshot" { ready.signal() }
            guard let device = event.device, device.kind == .changed, device.syspath == loop.syspath else { return }
            let now = MonotonicClock.now()
            latencies.update { $0.append(now &- stamp.get()) }
            received.signal()
        }
    } catch {
        print("  bus: \(error)")
        return nil
    }
    defer { subscription.cancel() }
    ready.wait()
    for _ in 0..<rounds {
        stamp.set(MonotonicClock.now())
        guard loop.change() else { continue }
        _ = received.wait(timeout: .now() + 5)
    }
    return latencies.get()
}

/// `udevadm monitor --kernel`'s latencies, from its own receipt stamps.
private func udevadmLatencies(rounds: Int, loop: BenchLoop) -> [UInt64]? {
    guard let udevadm = ["/opt/eventbus-test/udev/bin/udevadm", "/bin/udevadm", "/usr/bin/udevadm"]
        .first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
        print("  udevadm: not found (bash .ci/setup unpacks it into /opt/eventbus-test/udev)")
        return nil
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: udevadm)
    process.arguments = ["monitor", "--kernel", "--subsystem-match=block"]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    do { try process.run() } catch {
        print("  udevadm: \(error)")
        return nil
    }
    defer {
        process.terminate()
        process.waitUntilExit()
    }
    let reader = output.fileHandleForReading
    var pending = ""
    /// The next line of udevadm's output (nil at its end).
    func nextLine() -> String? {
        while true {
            if let newline = pending.firstIndex(of: "\n") {
                let line = String(pending[..<newline])
                pending.removeSubrange(...newline)
                return line
            }
            let chunk = reader.availableData
            if chunk.isEmpty { return nil }
            pending += String(decoding: chunk, as: UTF8.self)
        }
    }
    // It prints a banner once its socket is bound.
    while let line = nextLine(), !line.contains("KERNEL - the kernel uevent") {}
    var latencies: [UInt64] = []
    let wanted = " change   /devices/virtual/block/loop\(loop.number) (block)"
    for _ in 0..<rounds {
        let stamp = MonotonicClock.now()
        guard loop.change() else { continue }
        while let line = nextLine() {
            // KERNEL[1234.567890] change   /devices/virtual/block/loop5001 (block)
            guard line.hasPrefix("KERNEL["), line.hasSuffix(wanted), let close = line.firstIndex(of: "]") else { continue }
            let seconds = line[line.index(line.startIndex, offsetBy: 7)..<close]
            if let value = Double(seconds) {
                let received = UInt64((value * 1e6).rounded()) * 1000
                latencies.append(received > stamp ? received - stamp : 0)
            }
            break
        }
    }
    return latencies
}

/// A value behind a lock, for the benchmark's threads.
private final class LockedValue<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func get() -> Value { lock.withLock { value } }
    func set(_ new: Value) { lock.withLock { value = new } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&value) } }
}
