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
            do { descriptor = try System.openFile(path, O_RDONLY) } catch {
                throw ELFError(.unreadable, "open: \(error.reason)")
            }
            do { size = UInt64(max(0, try System.size(of: descriptor, path: path))) } catch {
                System.close(descriptor)
                throw ELFError(.unreadable, "fstat: \(error.reason)")
            }
        }

        deinit { System.close(descriptor) }

        func bytes(at offset: UInt64, count: Int) throws(ELFError) -> [UInt8] {
            guard count > 0 else { return [] }
            var buffer = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let got: Int
                do throws(System.CallError) {
                    got = try buffer.withUnsafeMutableBytes { raw in
                        Result { () throws(System.CallError) in
                            try System.read(descriptor, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]), at: Int64(offset) + Int64(done))
                        }
                    }.get()
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
            guard let pipe = try? System.makePipe() else { return nil }
            defer { System.close(pipe.read); System.close(pipe.write) }
            var result: [UInt8] = []
            var offset = 0
            while offset < count {
                let here = address + offset
                let toPageEnd = pageSize - Int(UInt(bitPattern: here) % UInt(pageSize))
                let chunk = min(count - offset, toPageEnd)
                guard let bytes = transfer(here, count: chunk, through: pipe) else { return nil }
                result += bytes
                offset += chunk
            }
            return result
        }

        /// The bytes of the NUL-terminated string at `address` (without the NUL), or nil if it is
        /// unreadable or has no NUL within `maximumLength` bytes.
        static func cString(at address: UnsafeRawPointer, maximumLength: Int) -> [UInt8]? {
            guard let pipe = try? System.makePipe() else { return nil }
            defer { System.close(pipe.read); System.close(pipe.write) }
            var result: [UInt8] = []
            while result.count <= maximumLength {
                let here = address + result.count
                let toPageEnd = pageSize - Int(UInt(bitPattern: here) % UInt(pageSize))
                let chunk = min(maximumLength + 1 - result.count, toPageEnd)
                guard let bytes = transfer(here, count: chunk, through: pipe) else { return nil }
                if let end = bytes.firstIndex(of: 0) { return result + bytes[..<end] }
                result += bytes
            }
            return nil
        }

        /// Writes `count` bytes (at most a page, within one page) into the pipe and reads them back.
        private static func transfer(_ address: UnsafeRawPointer, count: Int, through pipe: (read: Int32, write: Int32)) -> [UInt8]? {
            // EFAULT from the write: not readable.
            guard (try? System.writeAll(pipe.write, UnsafeRawBufferPointer(start: address, count: count))) != nil else { return nil }
            var bytes = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let result = try? bytes.withUnsafeMutableBytes { (raw) throws(System.CallError) in
                    try System.read(pipe.read, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]))
                }
                guard let result, result > 0 else { return nil }
                done += result
            }
            return bytes
        }
    }
}
