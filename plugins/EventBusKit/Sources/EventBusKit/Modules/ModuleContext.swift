import Dispatch
import Synchronization

/// What the host gives a module: its view of the bus, its config section, a logger, and a place
/// for its subscriptions. Used only on the module's queue.
public final class ModuleContext: @unchecked Sendable {
    /// The bus, scoped to this module's mailbox: every subscription made through it delivers on
    /// the module's serial queue.
    public let bus: Bus
    /// The module's section of the host config (`modules.NAME.config`).
    /// The host replaces it when a reload changes the section and the module applied it.
    public var config: ModuleConfig
    public let log: ModuleLog
    /// Subscriptions live as long as they are kept here; the host cancels them on deactivation.
    public var cancellables = Set<AnyCancellable>()
    /// Hears how long calls of a ``OpenCombine/Publisher/handle(in:_:)`` handler took, in nanoseconds of
    /// `CLOCK_MONOTONIC` (the host's per-module histogram): one call in
    /// ``handlerTimingInterval`` of each handler is timed, since two clock reads per call would
    /// cost a cheap handler more than its delivery. Nil: handlers are not timed. The host sets it
    /// before activation; a handler takes the one set when it subscribed.
    public var handlerDuration: (@Sendable (_ nanoseconds: Int64) -> Void)?

    /// One call in this many is timed (the first of each run of calls is not).
    public static let handlerTimingInterval = 8

    private let errorCount = Atomic<Int>(0)

    public init(bus: Bus, config: ModuleConfig, log: ModuleLog) {
        precondition(bus.mailbox != nil, "a module's bus must be scoped to its mailbox")
        self.bus = bus
        self.config = config
        self.log = log
    }

    /// The module's serial queue; pass it as the scheduler of `debounce`, `throttle`, `delay`…
    /// so their output stays on the module's queue (`scheduler: context.queue.ocombine`).
    public var queue: DispatchQueue { bus.mailbox!.queue }

    /// Errors thrown by the module's handlers so far (see ``OpenCombine/Publisher/handle(in:_:)``).
    public var errors: Int { errorCount.load(ordering: .relaxed) }

    /// Records an error thrown by module code: logged with the module's name and counted; the
    /// module and the host keep running.
    public func report(_ error: any Error, while doing: String) {
        errorCount.add(1, ordering: .relaxed)
        log.error("\(doing) failed: \(error)")
    }

    /// Cancels and forgets every subscription the module stored.
    func cancelAll() {
        for cancellable in cancellables { cancellable.cancel() }
        cancellables.removeAll()
    }
}

extension Publisher where Failure == Never {
    /// Like `sink`, for handlers that can fail: an error thrown by `body` is caught, logged with
    /// the module's name and counted in ``ModuleContext/errors``; the subscription carries on.
    /// The subscription is stored in the context.
    /// When the host times handlers (``ModuleContext/handlerDuration``), one call in
    /// ``ModuleContext/handlerTimingInterval`` is measured with two `clock_gettime` reads.
    public func handle(in context: ModuleContext, _ body: @escaping (Output) throws -> Void) {
        if let record = context.handlerDuration {
            var calls = 0  // on the module's queue only, as every call of this sink
            sink { value in
                calls &+= 1
                guard calls % ModuleContext.handlerTimingInterval == 0 else {
                    do { try body(value) } catch { context.report(error, while: "handler") }
                    return
                }
                let start = MonotonicClock.now()
                do { try body(value) } catch { context.report(error, while: "handler") }
                record(Int64(bitPattern: MonotonicClock.now() &- start))
            }
            .store(in: &context.cancellables)
            return
        }
        sink { value in
            do { try body(value) } catch { context.report(error, while: "handler") }
        }
        .store(in: &context.cancellables)
    }
}
