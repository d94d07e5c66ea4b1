import Glibc
import SystemCalls

// The operating-system calls of the module inspection, kept with the other libc calls in
// `System` (in their own file, beside the code that uses them): `errno` is read right after the
// call that set it, and the rest works with Swift values.
extension System {
    /// An open file read with `pread(2)`; its size is `fstat`'s at open, so a file that shrinks
    /// while it is read gives a short read (an error), not a fault. Closed at deinit.
    final class ReadOnlyFile: ELFByteSource {
        let size: UInt64
        private let descriptor: Int32

        init(path: String) throws(ELFError) {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw ELFError(.unreadable, "open: \(String(cString: strerror(errno)))") }
            var info = stat()
            guard fstat(descriptor, &info) == 0 else {
                let reason = String(cString: strerror(errno))
                close(descriptor)
                throw ELFError(.unreadable, "fstat: \(reason)")
            }
            self.descriptor = descriptor
            size = UInt64(max(0, info.st_size))
        }

        deinit { close(descriptor) }

        func bytes(at offset: UInt64, count: Int) throws(ELFError) -> [UInt8] {
            guard count > 0 else { return [] }
            var buffer = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let got: Int
                do throws(System.CallError) {
                    got = try System.call("pread") {
                        buffer.withUnsafeMutableBytes { raw in
                            pread(descriptor, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done))
                        }
                    }
                } catch {
                    throw ELFError(.unreadable, "read at offset \(offset): \(error.reason)")
                }
                if got == 0 {
                    throw ELFError(.truncated, "the file ended at byte \(offset + UInt64(done)) while \(count) bytes at offset \(offset) were read (it shrank while it was checked)")
                }
                done += got
            }
            return buffer
        }
    }

    /// `count` bytes of this process's memory at `address`, or nil if any is not mapped readable
    /// (see ``ReadableMemory``).
    static func readableBytes(from address: UnsafeRawPointer, count: Int) -> [UInt8]? {
        ReadableMemory.copy(from: address, count: count)
    }

    /// The NUL-terminated string at `address` without its NUL, or nil if it is not readable or
    /// longer than `maximumLength`.
    static func readableCString(at address: UnsafeRawPointer, maximumLength: Int) -> [UInt8]? {
        ReadableMemory.cString(at: address, maximumLength: maximumLength)
    }

    /// Reads memory of this process that may not be mapped, without faulting: the bytes go through a
    /// pipe, and `write(2)` from an unmapped address fails with `EFAULT` instead of raising SIGSEGV.
    /// Each write stays within one page, so a page is either read whole or refused.
    enum ReadableMemory {
        private static let pageSize = max(4096, Int(sysconf(Int32(_SC_PAGESIZE))))

        /// `count` bytes at `address`, or nil if any of them is not readable.
        static func copy(from address: UnsafeRawPointer, count: Int) -> [UInt8]? {
            guard let descriptors = openPipe() else { return nil }
            defer { close(descriptors[0]); close(descriptors[1]) }
            var result: [UInt8] = []
            var offset = 0
            while offset < count {
                let here = address + offset
                let toPageEnd = pageSize - Int(UInt(bitPattern: here) % UInt(pageSize))
                let chunk = min(count - offset, toPageEnd)
                guard let bytes = transfer(here, count: chunk, through: descriptors) else { return nil }
                result += bytes
                offset += chunk
            }
            return result
        }

        /// The bytes of the NUL-terminated string at `address` (without the NUL), or nil if it is
        /// unreadable or has no NUL within `maximumLength` bytes.
        static func cString(at address: UnsafeRawPointer, maximumLength: Int) -> [UInt8]? {
            guard let descriptors = openPipe() else { return nil }
            defer { close(descriptors[0]); close(descriptors[1]) }
            var result: [UInt8] = []
            while result.count <= maximumLength {
                let here = address + result.count
                let toPageEnd = pageSize - Int(UInt(bitPattern: here) % UInt(pageSize))
                let chunk = min(maximumLength + 1 - result.count, toPageEnd)
                guard let bytes = transfer(here, count: chunk, through: descriptors) else { return nil }
                if let end = bytes.firstIndex(of: 0) { return result + bytes[..<end] }
                result += bytes
            }
            return nil
        }

        /// A pipe, close-on-exec (Glibc's Swift module has no `pipe2`).
        private static func openPipe() -> [Int32]? {
            var descriptors: [Int32] = [-1, -1]
            guard pipe(&descriptors) == 0 else { return nil }
            for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
            return descriptors
        }

        /// Writes `count` bytes (at most a page, within one page) into the pipe and reads them back.
        private static func transfer(_ address: UnsafeRawPointer, count: Int, through pipe: [Int32]) -> [UInt8]? {
            // EFAULT from the write: not readable.
            guard (try? System.writeAll(pipe[1], UnsafeRawBufferPointer(start: address, count: count))) != nil else { return nil }
            var bytes = [UInt8](repeating: 0, count: count)
            var read = 0
            while read < count {
                let result = try? System.call("read") { bytes.withUnsafeMutableBytes { Glibc.read(pipe[0], $0.baseAddress! + read, count - read) } }
                guard let result, result > 0 else { return nil }
                read += result
            }
            return bytes
        }
    }
}
