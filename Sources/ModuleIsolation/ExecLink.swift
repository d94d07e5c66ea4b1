@_spi(EventBusHost) import EventBusKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls
import Synchronization

/// What an exec module's session holds beyond a worker's: the program's output and error
/// descriptors, its line translation, the ids of its subscriptions and its post allowance.
final class ExecLink: @unchecked Sendable {
    // @unchecked: `allowance` is the output reader thread's only; the rest is immutable or
    // guarded by its own lock.
    let program: ExecProcess
    let settings: ExecSettings
    let lines: ExecLines
    let output: ReadEnd
    let errors: ReadEnd
    var allowance: PostAllowance
    /// Posts dropped over the allowance, over the session.
    var postsDropped = 0
    /// Left when each reader has ended.
    let readers = DispatchGroup()
    /// The subscriptions made for this program: one it asks for again (its config's, or twice)
    /// is not made twice.
    let made = Mutex<Set<ExecSubscription>>([])

    /// The longest line the program may write on standard output (as a control socket request),
    /// and on standard error (longer ones are left out, said in the log).
    static let maximumLine = 1 << 20
    static let maximumErrorLine = 4 << 10

    init(program: ExecProcess, settings: ExecSettings, format: ExecLineFormat, subscriptions: ExecSubscriptions) {
        self.program = program
        self.settings = settings
        self.lines = ExecLines(format: format, subscriptions: subscriptions)
        self.output = ReadEnd(program.output)
        self.errors = ReadEnd(program.errors)
        self.allowance = PostAllowance(rate: settings.postsPerSecond)
    }

    /// The program ended: its readers get what it wrote before (at most `grace`), then stop —
    /// a child it left behind may hold its output open.
    func programEnded(grace: Duration) {
        if readers.wait(timeout: .now() + DispatchTimeInterval(grace)) == .timedOut {
            output.stop()
            errors.stop()
        }
    }

    /// One read end: read by one thread until its end of file, stopped from another.
    final class ReadEnd: @unchecked Sendable {
        // @unchecked: `fd` is immutable; `closed` is under `lock`.
        private let fd: Int32
        private let lock = NSLock()
        private var closed = false

        init(_ fd: Int32) {
            self.fd = fd
        }

        /// Reads into `buffer`: the byte count, or 0 at the end (or after ``stop()``).
        func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
            (try? System.read(fd, into: buffer)) ?? 0
        }

        /// Makes a blocked ``read(into:)`` return its end, whoever else holds the other end open.
        func stop() {
            lock.withLock { if !closed { try? System.shutdown(fd, .both) } }
        }

        /// By the reader, once it is done.
        func close() {
            lock.withLock {
                if !closed { System.close(fd) }
                closed = true
            }
        }
    }
}
