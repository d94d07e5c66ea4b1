import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One event read from an inotify descriptor, into an ``InotifyBatch``.
struct InotifyEvent {
    /// The watch it concerns (-1 for `IN_Q_OVERFLOW`).
    var wd: Int32
    var mask: UInt32
    /// Pairs `IN_MOVED_FROM` with `IN_MOVED_TO` of one rename.
    var cookie: UInt32
    /// Where the name of the entry in the watched directory is in its batch's name bytes (see
    /// ``InotifyBatch/withName(of:_:)``); empty when the event is about the watched object itself.
    var name: Range<Int>

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

/// Reads a small integer from a `/proc/sys` file, such as `fs/inotify/max_user_watches`.
func readProcInteger(_ path: String) -> Int? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
    return Int(text.trimmingCharacters(in: .whitespacesAndNewlines))
}

/// `strerror`, as a Swift string.
func errorText(_ code: Int32) -> String {
    String(cString: strerror(code))
}
