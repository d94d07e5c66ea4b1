import Foundation
import Glibc
import SystemCalls
import Testing
import TestSupport

/// The OS boundary's one wrapper against the real kernel: a signal that interrupts a blocked call
/// (a handler installed without `SA_RESTART`, so the kernel returns `EINTR` instead of restarting
/// it) is invisible to the caller, and a real failure arrives as a `CallError` with its errno.
@Suite(.serialized) struct SystemCallTests {
    /// Installs a do-nothing SIGUSR1 handler without SA_RESTART for the test's duration.
    private static func withInterruptingSignal<R>(_ body: () async throws -> R) async rethrows -> R {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        action.sa_flags = 0
        sigemptyset(&action.sa_mask)
        var previous = sigaction()
        sigaction(SIGUSR1, &action, &previous)
        defer { sigaction(SIGUSR1, &previous, nil) }
        return try await body()
    }

    /// The test runner may start threads with signals blocked; the signalled thread takes SIGUSR1.
    private static func unblockInterruptingSignal() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGUSR1)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// A thread blocked in `read` on an empty pipe is signalled until the read has been
    /// interrupted and made again at least once; then a byte arrives and the read returns it.
    @Test func anInterruptedReadIsMadeAgainAndReturnsTheData() async throws {
        try await Self.withInterruptingSignal {
            var pipeEnds: [Int32] = [-1, -1]
            #expect(pipe(&pipeEnds) == 0)
            defer { close(pipeEnds[0]); close(pipeEnds[1]) }
            let reader = pipeEnds[0]
            let attempts = Collected(0)
            let thread = Collected<pthread_t?>(nil)
            let outcome = Collected<Result<[UInt8], System.CallError>?>(nil)
            let worker = Thread {
                Self.unblockInterruptingSignal()
                thread.update { $0 = pthread_self() }
                var byte: UInt8 = 0
                do throws(System.CallError) {
                    let count = try System.call("read", "test pipe") {
                        attempts.update { $0 += 1 }
                        return read(reader, &byte, 1)
                    }
                    outcome.update { $0 = .success(Array([byte].prefix(count))) }
                } catch {
                    outcome.update { $0 = .failure(error) }
                }
            }
            worker.start()
            // Until the read has been made twice: signals that arrive before the thread blocks
            // interrupt nothing, so keep sending.
            let interrupted = await eventually {
                if let target = thread.value { pthread_kill(target, SIGUSR1) }
                return attempts.value >= 2
            }
            #expect(interrupted, "the blocked read was never interrupted and made again")
            var byte: UInt8 = 42
            #expect(write(pipeEnds[1], &byte, 1) == 1)
            #expect(await eventually { outcome.value != nil })
            let result = try #require(outcome.value)
            #expect(try result.get() == [42])
        }
    }

    @Test func aFailedCallThrowsItsNameSubjectAndErrno() throws {
        var byte: UInt8 = 0
        let error = #expect(throws: System.CallError.self) {
            _ = try System.call("read", "fd -1") { read(-1, &byte, 1) }
        }
        #expect(error?.call == "read")
        #expect(error?.path == "fd -1")
        #expect(error?.errno == EBADF)
        #expect(error?.description == "read(fd -1): Bad file descriptor")
    }

    /// An interrupted `poll` goes on waiting for what is left of its timeout rather than
    /// returning early: nothing is ready, so it returns 0 only after the whole timeout.
    @Test func anInterruptedPollWaitsOutItsTimeout() async throws {
        try await Self.withInterruptingSignal {
            var pipeEnds: [Int32] = [-1, -1]
            #expect(pipe(&pipeEnds) == 0)
            defer { close(pipeEnds[0]); close(pipeEnds[1]) }
            let reader = pipeEnds[0]
            let thread = Collected<pthread_t?>(nil)
            let outcome = Collected<(ready: Int, waited: Duration)?>(nil)
            // The thread outlives the signalling: `pthread_kill` on a thread that has ended is
            // undefined (glibc may read the freed thread's descriptor and crash the runner).
            let signallingDone = DispatchSemaphore(value: 0)
            let worker = Thread {
                Self.unblockInterruptingSignal()
                thread.update { $0 = pthread_self() }
                var descriptors = [pollfd(fd: reader, events: Int16(POLLIN), revents: 0)]
                let start = ContinuousClock.now
                let ready = (try? System.poll(&descriptors, timeout: 1_000)) ?? -1
                outcome.update { $0 = (ready, ContinuousClock.now - start) }
                signallingDone.wait()
            }
            worker.start()
            // Signals all through the wait; a lower bound only, never an upper one.
            let finished = await eventually {
                guard outcome.value == nil else { return true }
                if let target = thread.value { pthread_kill(target, SIGUSR1) }
                return false
            }
            signallingDone.signal()
            #expect(finished)
            let result = try #require(outcome.value)
            #expect(result.ready == 0)
            #expect(result.waited >= .milliseconds(990))
        }
    }
}
