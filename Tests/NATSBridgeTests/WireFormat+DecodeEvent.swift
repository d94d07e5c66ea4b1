import EventBusKit
@testable import NATSBridge

extension WireFormat {
    /// The event a payload decodes to, its header left aside: what most tests look at.
    static func decodeEvent(_ bytes: UnsafeRawBufferPointer, name: String, host: String,
                            shapes: ShapeCache? = nil) throws(DecodeError) -> Event {
        var header = Header(instance: 0, sequence: 0)
        return try decode(bytes, name: name, host: host, shapes: shapes, header: &header)
    }
}
