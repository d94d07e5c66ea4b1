import Synchronization

/// How many log lines one module may write: a burst, then a steady rate (a token bucket).
///
/// Why: a module's lines go to eventbusd's own log, and journald rate-limits per service
/// (`RateLimitBurst=`, 10 000 lines per 30 s by default): a module that logs in a loop would get
/// eventbusd's own messages — a crash, a refusal, a stall — suppressed along with its own. Past
/// its limit a module's lines are counted, not written, and its next line that is allowed says
/// how many were left out.
struct ModuleLogLimit: Sendable {
    /// Lines written at once before the rate applies.
    var burst = 1_000
    /// Lines a second after that.
    var perSecond = 100

    /// The decision for one line at `now` (nanoseconds, monotonic).
    enum Decision: Equatable {
        case write
        /// Write it, after saying that `suppressed` lines before it were left out.
        case writeAfterSuppressed(Int)
        case suppress
    }

    /// A limit in use: the tokens left, when they were counted, and what was left out since.
    final class Bucket: Sendable {
        private let limit: ModuleLogLimit
        private let state: Mutex<(tokens: Double, at: UInt64, suppressed: Int)>

        init(_ limit: ModuleLogLimit, now: UInt64) {
            self.limit = limit
            state = Mutex((Double(limit.burst), now, 0))
        }

        func take(at now: UInt64) -> Decision {
            state.withLock { state in
                let elapsed = Double(now &- state.at) / 1e9
                state.tokens = min(Double(limit.burst), state.tokens + elapsed * Double(limit.perSecond))
                state.at = now
                guard state.tokens >= 1 else {
                    state.suppressed += 1
                    return .suppress
                }
                state.tokens -= 1
                defer { state.suppressed = 0 }
                return state.suppressed > 0 ? .writeAfterSuppressed(state.suppressed) : .write
            }
        }
    }
}
