import Glibc

/// Replaces a small state file so that a crash at any instant leaves either the old contents or
/// the new, never a mix: write a temporary file, `fsync` it, `rename` it over the old one, then
/// `fsync` the folder so the rename itself survives power loss. The host's persisted positions
/// (journal consumers, the NATS bridge's consumer and instance) all go through it.
@_spi(EventBusHost) public enum DurableFile {
    /// What failed: the step (`create …`, `write …`, `rename …`, `fsync …`) and its `errno`.
    public struct Failure: Error, Sendable {
        public var doing: String
        public var errno: Int32
    }

    /// Writes `contents` to `directory/name` (creating `directory` and any missing parent, mode
    /// 0700; the file 0600).
    public static func replace(_ path: String, in directory: String, with contents: String) throws(Failure) {
        func fail(_ doing: String) -> Failure { Failure(doing: doing, errno: Glibc.errno) }
        try makeDirectory(directory)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw fail("create \(temporary)") }
        let bytes = Array(contents.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0 else {
            let error = fail("write \(temporary)")
            close(fd)
            throw error
        }
        close(fd)
        guard rename(temporary, path) == 0 else { throw fail("rename \(temporary) to \(path)") }
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw fail("open \(directory)") }
        defer { close(directoryFD) }
        guard fsync(directoryFD) == 0 else { throw fail("fsync \(directory)") }
    }

    /// `mkdir -p` with mode 0700: a state directory such as `~/.local/state/eventbus` may be the
    /// first of its parents to be needed.
    private static func makeDirectory(_ directory: String) throws(Failure) {
        if mkdir(directory, 0o700) == 0 || Glibc.errno == EEXIST { return }
        guard Glibc.errno == ENOENT, let slash = directory.lastIndex(of: "/"), slash != directory.startIndex else {
            throw Failure(doing: "create \(directory)", errno: Glibc.errno)
        }
        try makeDirectory(String(directory[..<slash]))
        if mkdir(directory, 0o700) != 0 && Glibc.errno != EEXIST { throw Failure(doing: "create \(directory)", errno: Glibc.errno) }
    }
}
