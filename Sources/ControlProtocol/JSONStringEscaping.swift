/// JSON's string rule, written once for both of the project's JSON writers (``JSONWriter``,
/// which appends to an array, and the host's tail encoder, which writes through a pointer):
/// quotes; `"`, `\` and control characters escaped (`\n`, `\r`, `\t`, else `\u00XX`); other
/// UTF-8 copied as is (JSON text is UTF-8).
///
/// `run` receives the runs of bytes that need no escape — a string without any is one call —
/// and `byte` the quotes and escapes. Inlinable, so each writer's calls become its own appends.
@inlinable
public func writeJSONString(_ utf8: UnsafeBufferPointer<UInt8>,
                            byte: (UInt8) -> Void, run: (UnsafeBufferPointer<UInt8>) -> Void) {
    byte(UInt8(ascii: "\""))
    var clean = 0  // start of the run of bytes that need no escape
    for index in 0..<utf8.count {
        let next = utf8[index]
        guard next < 0x20 || next == UInt8(ascii: "\"") || next == UInt8(ascii: "\\") else { continue }
        if clean < index { run(UnsafeBufferPointer(rebasing: utf8[clean..<index])) }
        clean = index + 1
        byte(UInt8(ascii: "\\"))
        switch next {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): byte(next)
        case 0x0A: byte(UInt8(ascii: "n"))
        case 0x0D: byte(UInt8(ascii: "r"))
        case 0x09: byte(UInt8(ascii: "t"))
        default:
            let hex: StaticString = "0123456789abcdef"
            byte(UInt8(ascii: "u"))
            byte(UInt8(ascii: "0"))
            byte(UInt8(ascii: "0"))
            byte(hex.utf8Start[Int(next >> 4)])
            byte(hex.utf8Start[Int(next & 0xF)])
        }
    }
    if clean < utf8.count { run(UnsafeBufferPointer(rebasing: utf8[clean...])) }
    byte(UInt8(ascii: "\""))
}
