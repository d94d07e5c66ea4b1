import Glibc
import SystemCalls
import Testing
import TestSupport

/// The file calls of ``System`` against a real file system: each failure is a ``System/CallError``
/// naming the call, the path and the `errno`.
@Suite struct FileCallTests {
    @Test func aFolderLockedOnceIsRefusedToASecondOpening() throws {
        let folder = try TemporaryDirectory()
        let first = try System.openFile(folder.path, O_RDONLY | O_DIRECTORY)
        defer { System.close(first) }
        let second = try System.openFile(folder.path, O_RDONLY | O_DIRECTORY)
        defer { System.close(second) }
        try System.lockExclusively(first)
        let refusal = try #require(throws: System.CallError.self) { try System.lockExclusively(second, path: folder.path) }
        #expect(refusal.call == "flock" && refusal.errno == EWOULDBLOCK && refusal.path == folder.path)
    }

    @Test func writtenBytesAreReadBackAtTheirOffsetAndTruncated() throws {
        let folder = try TemporaryDirectory()
        let path = folder.at("segment")
        let fd = try System.openFile(path, O_RDWR | O_CREAT | O_EXCL, mode: 0o600)
        defer { System.close(fd) }
        try Array("0123456789".utf8).withUnsafeBytes { try System.writeAll(fd, $0) }
        try System.syncData(fd)
        var buffer = [UInt8](repeating: 0, count: 4)
        let got = try buffer.withUnsafeMutableBytes { try System.read(fd, into: $0, at: 3) }
        #expect(got == 4 && buffer == Array("3456".utf8))
        try System.truncate(fd, to: 5)
        #expect(try System.size(of: fd) == 5)
        #expect(try System.status(of: path).permissions == "0600")
    }

    @Test func missingPathsAreNamedInTheirErrors() throws {
        let folder = try TemporaryDirectory()
        let missing = folder.at("missing")
        #expect(!System.isAccessible(missing))
        let access = try #require(throws: System.CallError.self) { try System.checkAccess(missing, .readable) }
        #expect(access.call == "access" && access.path == missing && access.isNoSuchFile)
        let rename = try #require(throws: System.CallError.self) { try System.rename(missing, to: folder.at("other")) }
        #expect(rename.errno == ENOENT)
        #expect(throws: System.CallError.self) { try System.directoryEntries(missing) }
        try System.makeDirectory(folder.at("made"), mode: 0o700)
        _ = try folder.write("made/a", "a")
        #expect(try System.directoryEntries(folder.at("made")) == ["a"])
        try System.removeFile(folder.at("made/a"))
        #expect(try System.directoryEntries(folder.at("made")).isEmpty)
    }
}
