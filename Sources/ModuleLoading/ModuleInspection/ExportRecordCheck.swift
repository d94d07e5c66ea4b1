import EventBusKit
import SystemCalls

/// Checks what a module's `eventbus_module` returned before the SDK reads it as an export record
/// (`ModuleFactory.open`): not NULL, readable, a tag that is a short printable C string, a
/// factory pointer that is not NULL and points at readable memory.
///
/// The entry is C; a module written in C (or a broken one) can return anything. The record is
/// read through ``System/readableBytes(from:count:)``, which copies memory through the kernel, so an unmapped address
/// is an error instead of a SIGSEGV. Runs on the loader's thread, once per library.
enum ExportRecordCheck {
    /// The longest tag the SDK writes is well under this; past it, the tag is not one.
    static let maximumTagLength = 256

    /// The record, checked, or why it is refused (a ``ModuleLoadError/Kind/badEntryRecord``).
    ///
    /// The factory word is checked only when the tag's binary interface is `expectedTag`'s: a module built for
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
        guard let words = System.readableBytes(from: record, count: 2 * MemoryLayout<UInt>.size) else {
            throw refuse("a pointer to unreadable memory (0x\(String(address, radix: 16)))")
        }
        let tagAddress = words.withUnsafeBytes { $0.load(fromByteOffset: 0, as: UInt.self) }
        let factoryAddress = words.withUnsafeBytes { $0.load(fromByteOffset: MemoryLayout<UInt>.size, as: UInt.self) }
        guard let tagPointer = UnsafeRawPointer(bitPattern: tagAddress) else { throw refuse("a record whose tag is NULL") }
        guard let tag = System.readableCString(at: tagPointer, maximumLength: maximumTagLength) else {
            throw refuse("a record whose tag is not a C string of at most \(maximumTagLength) bytes in readable memory")
        }
        guard tag.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw refuse("a record whose tag is not printable text")
        }
        guard ModuleABI.binaryInterface(of: String(decoding: tag, as: UTF8.self)) == ModuleABI.binaryInterface(of: expectedTag) else { return record }
        guard let factory = UnsafeRawPointer(bitPattern: factoryAddress) else { throw refuse("a record whose factory is NULL") }
        guard factoryAddress % UInt(MemoryLayout<UInt>.alignment) == 0,
              System.readableBytes(from: factory, count: 2 * MemoryLayout<UInt>.size) != nil else {
            throw refuse("a record whose factory points at unreadable memory (0x\(String(factoryAddress, radix: 16)))")
        }
        return record
    }
}
