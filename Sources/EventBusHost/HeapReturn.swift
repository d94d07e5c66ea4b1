import CMalloc
import Dispatch
@_spi(EventBusHost) import EventBusKit

/// Gives the kernel back the heap glibc keeps free, every ``interval``, when there is more than
/// ``slack`` of it.
///
/// Why: what a spike allocates — a mailbox that queued 50 000 events through a stall, a tail's
/// backlog, a burst of large posts — is freed when it drains, but glibc keeps freed chunks
/// inside its arenas (only the top of an arena shrinks by itself), so the resident size stays
/// at the spike's high-water mark, and a new spike elsewhere in memory adds to it. Under steady
/// load that reads as growth that never stops. One `malloc_trim(0)` returns every free page;
/// `mallinfo2()` says first whether there is enough to bother. Both take microseconds to a
/// millisecond for a heap this size; twice a minute is nothing.
///
/// ``HeapTrim`` does the same at once after the control socket let go of large buffers.
///
/// ## Threads
/// A timer on a global utility queue (no thread of its own); glibc's malloc calls are
/// thread-safe.
final class HeapReturn: @unchecked Sendable {
    // @unchecked: `timer` is set once in `init`.
    static let interval: Duration = .seconds(30)
    static let slack = 4 << 20

    private let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))

    init() {
        timer.schedule(deadline: .now() + DispatchTimeInterval(Self.interval), repeating: DispatchTimeInterval(Self.interval),
                       leeway: .seconds(5))
        timer.setEventHandler { Self.returnFreeHeap() }
        timer.resume()
    }

    deinit { timer.cancel() }

    func cancel() {
        timer.cancel()
    }

    /// Trims when glibc holds more than ``slack`` free; returns the free bytes it saw.
    @discardableResult
    static func returnFreeHeap() -> Int {
        let free = Int(mallinfo2().fordblks)
        if free > slack { _ = malloc_trim(0) }
        return free
    }
}
