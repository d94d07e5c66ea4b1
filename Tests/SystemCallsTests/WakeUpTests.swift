import Dispatch
import Glibc
import SystemCalls
import Testing

/// ``System/WakeUp`` against the real kernel: readable after a signal from any thread, however
/// many, and not after a drain.
@Suite struct WakeUpTests {
    private func isReadable(_ wake: System.WakeUp) throws -> Bool {
        var fds = [pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0)]
        return try System.poll(&fds, timeout: 0) == 1
    }

    @Test func aSignalMakesItReadableUntilDrained() throws {
        let wake = try System.WakeUp()
        #expect(try !isReadable(wake))
        wake.signal()
        #expect(try isReadable(wake))
        wake.drain()
        #expect(try !isReadable(wake))
        wake.drain()  // nothing signalled: no error, no block
        #expect(try !isReadable(wake))
    }

    /// A pipe fills at 64 KiB of wake-ups; an eventfd's counter does not.
    @Test func manySignalsFromManyThreadsAreOneWakeUp() throws {
        let wake = try System.WakeUp()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<100_000 { wake.signal() }
        }
        #expect(try isReadable(wake))
        wake.drain()
        #expect(try !isReadable(wake))
    }
}
