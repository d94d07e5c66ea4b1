import Dispatch
import Logging
import SystemCalls

/// Gives back, once the host has started or reloaded, the library and executable pages that
/// only starting needed (``System/releaseCleanFilePages()`` says why they are resident at all):
/// an idle eventbusd then holds what it runs while idle — about 15 MB with the example config
/// instead of 35 (docs/benchmarks.md, "Idle eventbusd").
///
/// ## Threads
/// A global utility queue: reading `/proc/self/smaps` and the `madvise` calls take about a
/// millisecond, which the thread that reports "ready" need not wait for. Pages other threads
/// touch meanwhile are mapped again by a minor fault, as any page is on first use.
enum StartupPages {
    static func release(after step: String, logger: Logger) {
        DispatchQueue.global(qos: .utility).async {
            let released = System.releaseCleanFilePages()
            logger.debug("after \(step): gave back \(ByteSizeText.describe(released)) of code and constants mapped while it ran")
        }
    }
}
