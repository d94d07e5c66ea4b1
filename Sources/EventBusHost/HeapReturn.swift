import CMalloc
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation

/// Gives the kernel back the heap glibc keeps free once a burst is over: when the resident size
/// has grown ``slack`` beyond what the last trim left and stopped growing, at a look every
/// ``interval``.
///
/// Why: what a spike allocates — a mailbox that queued 50 000 events through a stall, a tail's
/// backlog, a flood of imports held in the bridge's origin queues — is freed when it drains,
/// but glibc keeps freed chunks inside its arenas (only the top of an arena shrinks by itself),
/// so the resident size stays at the spike's high-water mark, and a new spike elsewhere in
/// memory adds to it. Under steady load that reads as growth that never stops. One
/// `malloc_trim(0)` returns every free page; `mallinfo2()` says first whether there is enough
/// to bother.
///
/// When: a look reads the resident size (`/proc/self/statm`, microseconds); only a size
/// ``slack`` above the last trim's that did not grow since the previous look — the burst has
/// ended, or growth has settled — is worth the walk through the arenas (`mallinfo2`, up to a
/// millisecond after a burst) and the trim. So a burst is given back a second or two after it
/// ends, a steady process is not trimmed again and again, and a burst is never trimmed while
/// it grows (its memory would be taken again at once).
///
/// ``HeapTrim`` does the same at once after the control socket let go of large buffers.
///
/// ## Threads
/// A timer on a global utility queue (no thread of its own); dispatch never runs a source's
/// handler concurrently with itself, so the sizes it remembers need no lock. glibc's malloc
/// calls are thread-safe.
final class HeapReturn: @unchecked Sendable {
    // @unchecked: `timer` is set once in `init`; `watermark` is touched by the timer's handler only.
    static let interval: Duration = .seconds(1)
    static let slack = 4 << 20

    private let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
    private var watermark = HeapWatermark(slack: HeapReturn.slack)

    init() {
        timer.schedule(deadline: .now() + DispatchTimeInterval(Self.interval), repeating: DispatchTimeInterval(Self.interval),
                       leeway: .milliseconds(250))
        timer.setEventHandler { [weak self] in self?.look() }
        timer.resume()
    }

    deinit { timer.cancel() }

    func cancel() {
        timer.cancel()
    }

    /// The timer's handler.
    private func look() {
        guard let resident = Self.residentBytes(), watermark.look(resident: resident) else { return }
        Self.returnFreeHeap()
        watermark.trimmed(resident: Self.residentBytes() ?? resident)
    }

    /// Trims when glibc holds more than ``slack`` free; returns the free bytes it saw.
    @discardableResult
    static func returnFreeHeap() -> Int {
        let free = Int(mallinfo2().fordblks)
        if free > slack { _ = malloc_trim(0) }
        return free
    }

    /// The resident size of this process (`/proc/self/statm`'s second field, in pages).
    static func residentBytes() -> Int? {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .ascii),
              let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}

/// When ``HeapReturn`` trims: once the resident size has grown `slack` beyond what the last trim
/// left (or the lowest seen since) and did not grow since the previous look.
struct HeapWatermark {
    let slack: Int
    /// The resident size the last trim left, or the lowest seen since.
    private(set) var floor = Int.max
    /// The resident size at the previous look.
    private var previous = 0

    init(slack: Int) { self.slack = slack }

    /// Takes in the resident size now; true when the heap should be trimmed.
    mutating func look(resident: Int) -> Bool {
        defer { previous = resident }
        floor = min(floor, resident)
        return resident > floor + slack && resident <= previous
    }

    /// Takes in the resident size a trim left.
    mutating func trimmed(resident: Int) {
        floor = resident
        previous = resident
    }
}
