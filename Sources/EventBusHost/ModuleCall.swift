import Dispatch
@_spi(EventBusHost) import EventBusKit
import Synchronization

/// A call from the host into module code, run on the module's own serial queue (its mailbox),
/// which the host waits for — up to a time limit.
///
/// Why on the mailbox: module code must never run concurrently with itself, and its
/// subscriptions deliver on that queue; activating there means a subscription's first event
/// cannot overtake the rest of `activate`. Why a time limit: a module that blocks in `activate`
/// must not stop the host from starting, reloading or shutting down. A call that overruns is
/// *abandoned*: the host carries on without waiting, and `ifAbandoned` runs on the module's
/// queue with the result once the call does return, to undo what it did.
enum ModuleCall {
    /// Returns `body`'s result, or nil when it did not return within `timeout`.
    static func run<Result: Sendable>(
        on mailbox: Mailbox, timeout: Duration,
        _ body: @escaping @Sendable () -> Result,
        ifAbandoned: @escaping @Sendable (Result) -> Void
    ) -> Result? {
        let call = Pending<Result>()
        mailbox.perform {
            let result = body()
            if call.finish(with: result) { call.done.signal() } else { ifAbandoned(result) }
        }
        _ = call.done.wait(timeout: .now() + DispatchTimeInterval(timeout))
        return call.resultOrAbandon()
    }

    /// Where the queue and the waiting host meet: whichever comes second sees the other's word.
    private final class Pending<Result: Sendable>: Sendable {
        private enum State {
            case running
            case finished(Result)
            case abandoned
        }

        private let state = Mutex<State>(.running)
        let done = DispatchSemaphore(value: 0)

        /// On the module's queue: records the result; false if the host has given up waiting.
        func finish(with result: Result) -> Bool {
            state.withLock { state in
                if case .abandoned = state { return false }
                state = .finished(result)
                return true
            }
        }

        /// On the host's side, after waiting: the result, or nil — and from then on the call is
        /// abandoned.
        func resultOrAbandon() -> Result? {
            state.withLock { state in
                if case .finished(let result) = state { return result }
                state = .abandoned
                return nil
            }
        }
    }
}

/// Carries a module instance to its queue.
///
/// `@unchecked Sendable` because module objects are not `Sendable`, and need not be: the host
/// calls a module only through ``ModuleCall`` on the module's serial queue, which is what keeps
/// its calls from overlapping.
struct ModuleBox: @unchecked Sendable {
    let module: any EventBusModule
}

extension ModuleContext {
    /// Cancels and forgets every subscription the module stored; call on the module's queue.
    /// (The same two steps as the SDK's internal `cancelAll()`, through public API.)
    func cancelSubscriptions() {
        for cancellable in cancellables { cancellable.cancel() }
        cancellables.removeAll()
    }
}

