import EventBusKit
import Glibc

/// Test fixture: an export record as a module built for another SDK would return — word 0 a tag
/// that is not this host's, word 1 a pointer the host must never touch once the tag disagrees.
@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer {
    let record = UnsafeMutablePointer<UnsafeRawPointer>.allocate(capacity: 2)
    record[0] = UnsafeRawPointer(strdup("eventbuskit-abi-0 swift-5.9")!)
    record[1] = UnsafeRawPointer(bitPattern: 0xDEAD)!
    return UnsafeRawPointer(record)
}
