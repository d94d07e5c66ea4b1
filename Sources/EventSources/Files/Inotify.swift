import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One event read from an inotify descriptor.
struct InotifyEvent {
    /// The watch it concerns (-1 for `IN_Q_OVERFLOW`).
    var wd: Int32
    var mask: UInt32
    /// Pairs `IN_MOVED_FROM` with `IN_MOVED_TO` of one rename.
    var cookie: UInt32
    /// The entry in the watched directory; empty when the event is about the watched object itself.
    var name: String

    func has(_ bits: UInt32) -> Bool { mask & bits != 0 }
}

/// The inotify constants as `UInt32` masks (Glibc imports them as `Int32`).
enum InotifyMask {
    static let create = UInt32(IN_CREATE)
    static let modify = UInt32(IN_MODIFY)
    static let closeWrite = UInt32(IN_CLOSE_WRITE)
    static let delete = UInt32(IN_DELETE)
    static let attrib = UInt32(IN_ATTRIB)
    static let movedFrom = UInt32(IN_MOVED_FROM)
    static let movedTo = UInt32(IN_MOVED_TO)
    static let deleteSelf = UInt32(IN_DELETE_SELF)
    static let moveSelf = UInt32(IN_MOVE_SELF)
    static let unmount = UInt32(IN_UNMOUNT)
    static let ignored = UInt32(IN_IGNORED)
    static let overflow = UInt32(IN_Q_OVERFLOW)
    static let isDirectory = UInt32(IN_ISDIR)
    static let onlyDirectory = UInt32(IN_ONLYDIR)
    static let dontFollow = UInt32(IN_DONT_FOLLOW)
    static let excludeUnlinked = UInt32(IN_EXCL_UNLINK)

    /// What every watch asks for — one mask for all, so a kernel watch shared by several sources
    /// never needs its mask merged or narrowed. `IN_EXCL_UNLINK`: no events for files that are
    /// already unlinked but still open (their path is gone; reporting them would be noise).
    static let watched = create | modify | closeWrite | delete | attrib | movedFrom | movedTo
        | deleteSelf | moveSelf | excludeUnlinked
}

/// Parses the events in `buffer[0..<count]` as `read(2)` on an inotify descriptor returns them
/// (`struct inotify_event` followed by a NUL-padded name), appending to `events`.
func parseInotifyEvents(_ buffer: UnsafeRawBufferPointer, count: Int, into events: inout [InotifyEvent]) {
    let header = MemoryLayout<inotify_event>.size
    var offset = 0
    while offset + header <= count {
        let wd = buffer.loadUnaligned(fromByteOffset: offset, as: Int32.self)
        let mask = buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
        let cookie = buffer.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
        let length = Int(buffer.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
        var name = ""
        if length > 0 {
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[(offset + header)..<(offset + header + length)])
            let used = bytes.firstIndex(of: 0) ?? length
            name = String(decoding: bytes[..<used], as: UTF8.self)
        }
        events.append(InotifyEvent(wd: wd, mask: mask, cookie: cookie, name: name))
        offset += header + length
    }
}

/// Reads a small integer from a `/proc/sys` file, such as `fs/inotify/max_user_watches`.
func readProcInteger(_ path: String) -> Int? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
    return Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
}

/// `strerror`, as a Swift string.
func errorText(_ code: Int32) -> String {
    String(cString: strerror(code))
}
