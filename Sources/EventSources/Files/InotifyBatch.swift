#if canImport(Glibc)
import Glibc
#endif

/// The events of one or more reads of an inotify descriptor, with their names' bytes kept
/// together in one array.
///
/// Why not a `String` per name: making one cost an allocation and a UTF-8 validation per event
/// (~500 instructions, callgrind), and a name is only ever copied once more, into the path the
/// event is about (``HashedPath``). The monitor keeps one batch and empties it between reads, so
/// once it has grown to a storm's size a read costs no allocation.
struct InotifyBatch {
    private(set) var events: [InotifyEvent] = []
    private var names: [UInt8] = []

    var count: Int { events.count }

    subscript(index: Int) -> InotifyEvent { events[index] }

    /// Marks the event at `index` as handled already (the second half of a move, handled with
    /// its first): its mask becomes 0.
    mutating func markHandled(_ index: Int) {
        events[index].mask = 0
    }

    mutating func removeAll(keepingCapacity: Bool) {
        events.removeAll(keepingCapacity: keepingCapacity)
        names.removeAll(keepingCapacity: keepingCapacity)
    }

    /// Appends the events in `buffer[0..<count]` as `read(2)` on an inotify descriptor returns
    /// them (`struct inotify_event` followed by a NUL-padded name).
    mutating func append(parsing buffer: UnsafeRawBufferPointer, count: Int) {
        let header = MemoryLayout<inotify_event>.size
        var offset = 0
        while offset + header <= count {
            let length = Int(buffer.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
            let padded = UnsafeRawBufferPointer(rebasing: buffer[(offset + header)..<(offset + header + length)])
            let name = padded[..<(padded.firstIndex(of: 0) ?? length)]
            events.append(InotifyEvent(
                wd: buffer.loadUnaligned(fromByteOffset: offset, as: Int32.self),
                mask: buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                cookie: buffer.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self),
                name: names.count..<(names.count + name.count)))
            names.append(contentsOf: UnsafeRawBufferPointer(rebasing: name))
            offset += header + length
        }
    }

    /// Runs `body` with the name of `event` (an event of this batch; empty when it is about the
    /// watched object itself). The bytes are valid only inside `body`.
    func withName<Result>(of event: InotifyEvent, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        names.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[event.name])) }
    }

    /// Runs `body` with the names of the halves of a move (events of this batch), as
    /// ``withName(of:_:)`` does.
    func withNames<Result>(of first: InotifyEvent?, _ second: InotifyEvent?,
                           _ body: (UnsafeRawBufferPointer?, UnsafeRawBufferPointer?) -> Result) -> Result {
        names.withUnsafeBytes { all in
            body(first.map { UnsafeRawBufferPointer(rebasing: all[$0.name]) },
                 second.map { UnsafeRawBufferPointer(rebasing: all[$0.name]) })
        }
    }
}
