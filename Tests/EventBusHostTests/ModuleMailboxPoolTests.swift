@testable import EventBusHost
import Dispatch
import EventBusKit
import Foundation
import ModuleIsolation
import Synchronization
import Testing

/// Which of Dispatch's thread pools a module's mailbox runs on. A process-isolated module's
/// mailbox only forwards to its worker's socket and never blocks, so it runs on the pool as wide
/// as the CPUs; on the overcommitting pool every burst that found its threads busy left another
/// idle thread behind for good (the host's memory grew with the load). An in-process module's
/// mailbox runs module code, which may block, so it keeps the overcommitting pool.
///
/// The pool is read from the name Linux's libdispatch gives its worker threads
/// (`com.apple.root.default-qos` and `….overcommit`, of which the kernel keeps the last 15
/// characters).
@Suite struct ModuleMailboxPoolTests {
    func threadName(runningOn slot: ModuleSlot) -> String {
        let name = Mutex("")
        let done = DispatchSemaphore(value: 0)
        slot.mailbox.perform {
            var buffer = [UInt8](repeating: 0, count: 64)
            let file = open("/proc/thread-self/comm", O_RDONLY)
            let count = read(file, &buffer, buffer.count)
            close(file)
            name.withLock { $0 = String(decoding: buffer.prefix(max(0, count)), as: UTF8.self) }
            done.signal()
        }
        #expect(done.wait(timeout: patienceDeadline()) == .success)
        return name.withLock { $0 }
    }

    func slot(_ isolation: IsolationMode) -> ModuleSlot {
        var entry = ModuleEntry(name: "m", path: "/m.so", location: "test:1")
        entry.isolation = isolation
        return ModuleSlot(entry: entry, mailbox: MailboxLimits(events: 10, bytes: 1 << 20))
    }

    @Test func aProcessIsolatedModulesMailboxRunsOnThePoolAsWideAsTheCPUs() {
        let name = threadName(runningOn: slot(.process))
        #expect(name.contains("default-qos") && !name.contains("overcommit"), "\(name)")
    }

    @Test func anInProcessModulesMailboxRunsOnTheOvercommittingPool() {
        let name = threadName(runningOn: slot(.none))
        #expect(name.contains("overcommit"), "\(name)")
    }
}
