import Glibc

extension System {
    /// Takes out of this process's page tables the pages of its read-only private file mappings —
    /// the code and constants of the executable and its shared libraries — that hold nothing of
    /// their own; returns the resident bytes they had.
    ///
    /// Why: on a page fault in a file mapping the kernel maps the 64 KiB around the page too
    /// (fault-around) when they are in the page cache, as the Swift runtime's libraries always
    /// are on a machine that runs Swift. Starting touches code once in many places — config
    /// parsing, module loading, the dynamic linker's relocations of Foundation and ICU — so a
    /// process that has started holds tens of MB of library pages it never touches again, and
    /// its resident size says so. `MADV_DONTNEED` only unmaps them: the page cache keeps them,
    /// and a later access maps them again from it with a minor fault; nothing is read from disk
    /// and nothing changes for other processes.
    ///
    /// Only mappings with no anonymous pages are released: a private mapping's anonymous pages
    /// are its own copies (relocated constants, a debugger's breakpoints), which `MADV_DONTNEED`
    /// would discard. Shared mappings (`r--s`, such as the journal files sd-journal maps) and
    /// writable ones are left alone. A mapping that refuses (a locked one) is skipped.
    @discardableResult
    public static func releaseCleanFilePages() -> Int {
        guard let smaps = try? readFile("/proc/self/smaps") else { return 0 }
        var released = 0
        var current: (start: UInt, end: UInt)?
        var resident = 0
        var anonymous = 0

        func release() {
            defer { current = nil }
            guard let (start, end) = current, anonymous == 0, resident > 0 else { return }
            if madvise(UnsafeMutableRawPointer(bitPattern: start), Int(end - start), MADV_DONTNEED) == 0 { released += resident }
        }

        var lineStart = 0
        for index in smaps.indices where smaps[index] == 0x0A {
            let line = smaps[lineStart..<index]
            lineStart = index + 1
            if let mapping = Mapping(line) {
                release()
                current = mapping.isCleanCandidate ? (mapping.start, mapping.end) : nil
                resident = 0
                anonymous = 0
            } else if current != nil {
                if let kilobytes = Self.kilobytes(line, field: "Rss:") { resident = kilobytes * 1024 }
                if let kilobytes = Self.kilobytes(line, field: "Anonymous:") { anonymous = kilobytes }
            }
        }
        release()
        return released
    }

    /// A mapping's header line in `/proc/self/smaps`: `START-END PERMS OFFSET DEV INODE [PATH]`.
    private struct Mapping {
        var start: UInt
        var end: UInt
        var permissions: [UInt8]
        var path: ArraySlice<UInt8>

        init?(_ line: ArraySlice<UInt8>) {
            let fields = line.split(separator: 0x20, maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5, let dash = fields[0].firstIndex(of: UInt8(ascii: "-")),
                  let start = UInt(String(decoding: fields[0][..<dash], as: UTF8.self), radix: 16),
                  let end = UInt(String(decoding: fields[0][(dash + 1)...], as: UTF8.self), radix: 16),
                  fields[1].count == 4 else { return nil }
            self.start = start
            self.end = end
            permissions = Array(fields[1])
            path = fields.count > 5 ? fields[5].drop { $0 == 0x20 } : []
        }

        /// Readable, not writable, private, and a file's (not `[vdso]`, `[heap]` or anonymous).
        var isCleanCandidate: Bool {
            permissions[0] == UInt8(ascii: "r") && permissions[1] == UInt8(ascii: "-") && permissions[3] == UInt8(ascii: "p")
                && path.first == UInt8(ascii: "/")
        }
    }

    /// The number of `NAME:   123 kB`, when `line` is that field.
    private static func kilobytes(_ line: ArraySlice<UInt8>, field: StaticString) -> Int? {
        let name = UnsafeBufferPointer(start: field.utf8Start, count: field.utf8CodeUnitCount)
        guard line.starts(with: name) else { return nil }
        var value = 0
        for byte in line.dropFirst(name.count) where byte >= 0x30 && byte <= 0x39 { value = value * 10 + Int(byte - 0x30) }
        return value
    }
}
