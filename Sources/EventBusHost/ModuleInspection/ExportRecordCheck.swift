import EventBusKit
import Glibc

/// Checks what a module's `eventbus_module` returned before the SDK reads it as an export record
/// (`ModuleFactory.open`): not NULL, readable, a tag that is a short printable C string, a
/// factory pointer that is not NULL and points at readable memory.
///
/// The entry is C; a module written in C (or a broken one) can return anything. The record is
/// read through ``SafeMemory``, which copies memory through the kernel, so an unmapped address
/// is an error instead of a SIGSEGV. Runs on the loader's thread, once per library.
enum ExportRecordCheck {
    /// The longest tag the SDK writes is well under this; past it, the tag is not one.
    static let maximumTagLength = 256

    /// The record, checked, or why it is refused (a ``ModuleLoadError/Kind/badEntryRecord``).
    ///
    /// The factory word is checked only when the tag is `expectedTag`: a module built for
    /// another SDK is refused by the tag (`ModuleFactory.open` says which part differs) and its
    /// factory word, written by another SDK's code, is never read at all.
    static func validate(_ record: UnsafeRawPointer?, expectedTag: String) throws(ModulePreflight.Refusal) -> UnsafeRawPointer {
        func refuse(_ message: String) -> ModulePreflight.Refusal {
            ModulePreflight.Refusal(kind: .badEntryRecord, message: "its \(moduleEntrySymbol) returned \(message); not an export record written by exportModule")
        }
        guard let record else { throw refuse("NULL") }
        let address = UInt(bitPattern: record)
        guard address % UInt(MemoryLayout<UInt>.alignment) == 0 else {
            throw refuse("a misaligned pointer (0x\(String(address, radix: 16)))")
        }
        guard let words = SafeMemory.copy(from: record, count: 2 * MemoryLayout<UInt>.size) else {
            throw refuse("a pointer to unreadable memory (0x\(String(address, radix: 16)))")
        }
        let tagAddress = words.withUnsafeBytes { $0.load(fromByteOffset: 0, as: UInt.self) }
        let factoryAddress = words.withUnsafeBytes { $0.load(fromByteOffset: MemoryLayout<UInt>.size, as: UInt.self) }
        guard let tagPointer = UnsafeRawPointer(bitPattern: tagAddress) else { throw refuse("a record whose tag is NULL") }
        guard let tag = SafeMemory.cString(at: tagPointer, maximumLength: maximumTagLength) else {
            throw refuse("a record whose tag is not a C string of at most \(maximumTagLength) bytes in readable memory")
        }
        guard tag.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw refuse("a record whose tag is not printable text")
        }
        guard tag == Array(expectedTag.utf8) else { return record }
        guard let factory = UnsafeRawPointer(bitPattern: factoryAddress) else { throw refuse("a record whose factory is NULL") }
        guard factoryAddress % UInt(MemoryLayout<UInt>.alignment) == 0,
              SafeMemory.copy(from: factory, count: 2 * MemoryLayout<UInt>.size) != nil else {
            throw refuse("a record whose factory points at unreadable memory (0x\(String(factoryAddress, radix: 16)))")
        }
        return record
    }
}

/// Reads memory of this process that may not be mapped, without faulting: the bytes go through a
/// pipe, and `write(2)` from an unmapped address fails with `EFAULT` instead of raising SIGSEGV.
/// Each write stays within one page, so a page is either read whole or refused.
enum SafeMemory {
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
        var written = 0
        while written < count {
            let result = write(pipe[1], address + written, count - written)
            if result < 0 {
                if errno == EINTR { continue }
                return nil  // EFAULT: not readable
            }
            written += result
        }
        var bytes = [UInt8](repeating: 0, count: count)
        var read = 0
        while read < count {
            let result = bytes.withUnsafeMutableBytes { Glibc.read(pipe[0], $0.baseAddress! + read, count - read) }
            if result < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if result == 0 { return nil }
            read += result
        }
        return bytes
    }
}
