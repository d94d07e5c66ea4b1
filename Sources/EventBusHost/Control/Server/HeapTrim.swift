import CMalloc

/// When to hand freed heap back to the kernel with `malloc_trim(0)`.
///
/// glibc keeps what the control socket frees in its arenas: measured on a release eventbusd,
/// after 80 stalled clients of 900 KB events left and the replay ring turned over to small
/// events, RSS stayed at 114 MB; one `malloc_trim(0)` took it to 52 MB. So the server counts the
/// large releases — events the ring evicts, a closing client's buffers — and once
/// ``threshold`` bytes were let go of, trims when the releasing has settled: no release during
/// ``quiet``. A steady stream of large events never settles and is never trimmed (its memory is
/// reused at once, and the budgets bound it); the end of a burst is trimmed once.
///
/// Not thread-safe: ``ControlServer`` guards it with its lock and runs the trim on its loop.
struct HeapTrim {
    static let threshold = 32 << 20
    static let quiet: Duration = .seconds(1)

    private var released = 0
    private var releases = 0
    private var releasesAtCheck = 0
    private var checking = false

    /// Counts `bytes` let go of; true when a check should be scheduled ``quiet`` from now.
    mutating func release(_ bytes: Int) -> Bool {
        released += bytes
        releases &+= 1
        guard released >= Self.threshold, !checking else { return false }
        checking = true
        releasesAtCheck = releases
        return true
    }

    /// At a check: true (trim now) when nothing was released since the last look; otherwise
    /// false, and the caller looks again ``quiet`` later.
    mutating func check() -> Bool {
        guard releases == releasesAtCheck else {
            releasesAtCheck = releases
            return false
        }
        released = 0
        checking = false
        return true
    }

    static func trim() {
        _ = malloc_trim(0)
    }
}
