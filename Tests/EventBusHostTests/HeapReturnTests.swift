@testable import EventBusHost
import CMalloc
import Glibc
import Testing

/// ``HeapReturn`` against glibc itself: heap freed after a spike stays resident until it trims,
/// and then goes back to the kernel.
@Suite struct HeapReturnTests {
    /// This process's anonymous resident memory, from the kernel.
    private func anonymousKiB() -> Int {
        guard let rollup = try? String(contentsOfFile: "/proc/self/smaps_rollup", encoding: .utf8) else { return -1 }
        for text in rollup.split(separator: "\n") {
            if text.hasPrefix("Anonymous:") {
                return Int(text.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
            }
        }
        return -1
    }

    /// Whether glibc's malloc serves this process: a sanitizer's allocator replaces it (and
    /// `mallinfo2` then reports nothing), which leaves nothing for this test to observe.
    static var glibcAllocates: Bool { mallinfo2().arena > 0 }

    @Test(.enabled(if: glibcAllocates, "glibc's malloc is replaced (a sanitizer's allocator)"))
    func freeHeapLeftByASpikeIsGivenBack() {
        // A spike of small allocations (below the mmap threshold: they live in an arena), freed
        // but for one in 1024, which pins the arena's top so it cannot shrink by itself.
        let count = 256 * 1024
        var chunks = [UnsafeMutableRawPointer](repeating: UnsafeMutableRawPointer(bitPattern: 1)!, count: count)
        for i in 0..<count {
            chunks[i] = malloc(128)!
            memset(chunks[i], 1, 128)  // resident
        }
        for i in 0..<count where i % 1024 != 0 { free(chunks[i]) }
        let before = anonymousKiB()
        let held = HeapReturn.returnFreeHeap()
        let after = anonymousKiB()
        for i in stride(from: 0, to: count, by: 1024) { free(chunks[i]) }

        #expect(held > HeapReturn.slack, "glibc held \(held) bytes free")
        // 32 MiB were freed; at least half of it must have left the process.
        #expect(before - after >= 16 * 1024, "anonymous memory \(before) KiB → \(after) KiB")
    }

    /// A burst is trimmed once, at the first look after it stopped growing — not while it
    /// grows, not again and again while the size stays, and again after the next burst.
    @Test func aBurstIsTrimmedOnceWhenItStopsGrowing() {
        let mib = 1 << 20
        var watermark = HeapWatermark(slack: 4 * mib)
        var trims: [Int] = []
        let sizes = [22, 22, 60, 140, 200, 200, 90, 90, 90, 23, 23, 26, 80, 80, 80]
        for (look, size) in sizes.enumerated() where watermark.look(resident: size * mib) {
            trims.append(look)
            watermark.trimmed(resident: size == 200 ? 90 * mib : size * mib)  // what the trim left
        }
        #expect(trims == [5, 13], "trimmed at looks \(trims)")
    }
}
