import Glibc
import SystemCalls
import Testing
import TestSupport

/// ``System/releaseCleanFilePages()`` against the real kernel: a read-only file mapping's pages
/// leave the page tables and read back the same, and a read-only private mapping that holds
/// its own copy of a page (as relocated constants do) is left alone, copy intact.
@Suite struct MappedFilePagesTests {
    private static let pageCount = 64

    /// A file of `pageCount` pages, each filled with its index, and its path.
    private func pagesFile(in directory: TemporaryDirectory) throws -> (path: String, size: Int) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        var bytes: [UInt8] = []
        for index in 0..<Self.pageCount { bytes += [UInt8](repeating: UInt8(index), count: page) }
        let path = try directory.write("pages", "")
        let fd = open(path, O_WRONLY | O_TRUNC)
        try #require(fd >= 0)
        defer { close(fd) }
        try bytes.withUnsafeBytes { try System.writeAll(fd, $0, path: path) }
        return (path, bytes.count)
    }

    private func map(_ path: String, size: Int, protection: Int32) throws -> UnsafeMutableRawPointer {
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        let address = mmap(nil, size, protection, MAP_PRIVATE, fd, 0)
        try #require(address != MAP_FAILED)
        return address!
    }

    /// Whether the page at `address` is in this process's page tables (`mincore` says whether
    /// it is in the page cache, so the resident count comes from /proc/self/smaps instead).
    private func residentKilobytes(of address: UnsafeMutableRawPointer) throws -> Int {
        let smaps = String(decoding: try System.readFile("/proc/self/smaps"), as: UTF8.self)
        let start = String(UInt(bitPattern: address), radix: 16)
        var inMapping = false
        for line in smaps.split(separator: "\n") {
            if line.first?.isHexDigit == true, line.contains("-"), line.split(separator: " ").count >= 5 {
                inMapping = line.hasPrefix(start + "-")
            } else if inMapping, line.hasPrefix("Rss:") {
                return Int(line.split(separator: " ")[1]) ?? -1
            }
        }
        return -1
    }

    @Test func cleanPagesLeaveThePageTablesAndReadBackTheSame() throws {
        let directory = try TemporaryDirectory()
        let (path, size) = try pagesFile(in: directory)
        let mapped = try map(path, size: size, protection: PROT_READ)
        defer { munmap(mapped, size) }
        let page = size / Self.pageCount
        var sum = 0
        for index in 0..<Self.pageCount { sum += Int(mapped.load(fromByteOffset: index * page, as: UInt8.self)) }
        #expect(sum == (0..<Self.pageCount).reduce(0, +))
        #expect(try residentKilobytes(of: mapped) > 0, "touched pages are resident")

        #expect(System.releaseCleanFilePages() > 0)
        #expect(try residentKilobytes(of: mapped) == 0, "released from the page tables")
        for index in 0..<Self.pageCount {
            #expect(mapped.load(fromByteOffset: index * page + page / 2, as: UInt8.self) == UInt8(index), "page \(index) reads back from the file")
        }
    }

    @Test func aReadOnlyMappingWithItsOwnCopyOfAPageIsLeftAlone() throws {
        let directory = try TemporaryDirectory()
        let (path, size) = try pagesFile(in: directory)
        // Written while writable, then made read-only: as the dynamic linker leaves relocated
        // constants (RELRO), a private copy in an `r--p` mapping.
        let mapped = try map(path, size: size, protection: PROT_READ | PROT_WRITE)
        defer { munmap(mapped, size) }
        mapped.storeBytes(of: 0xEE, toByteOffset: 0, as: UInt8.self)
        try #require(mprotect(mapped, size, PROT_READ) == 0)

        System.releaseCleanFilePages()
        #expect(mapped.load(fromByteOffset: 0, as: UInt8.self) == 0xEE, "the private copy survives")
        #expect(try residentKilobytes(of: mapped) > 0)
    }
}
