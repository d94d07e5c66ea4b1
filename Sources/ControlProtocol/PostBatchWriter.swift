/// Writes a batch `post` request (``PostRequest/batch(_:)``) from events a client already holds
/// as JSON object text, copying each one's bytes as they are: `eventbus post --stdin` reads a
/// line per event and need not decode and re-encode it. The head and tail come from the same
/// encoder as every other request (``ControlRequest/line``), so the wire form is written once.
public struct PostBatchWriter {
    /// The request so far; ``finish()`` closes it.
    public private(set) var bytes: [UInt8] = []
    /// How many events it holds.
    public private(set) var count = 0

    public init() {}

    /// The request line of an empty batch, split where the events go: `{"events":[` … `],"op":"post"}`.
    private static let (head, tail): ([UInt8], [UInt8]) = {
        let empty = ControlRequest(.post(.batch([]))).line
        let marker = Array("[]".utf8)
        let split = empty.indices.first { empty[$0...].starts(with: marker) }!
        return (Array(empty[...split]), Array(empty[(split + 1)...]))
    }()

    /// The bytes a batch of one event adds around it.
    public static var framing: Int { head.count + tail.count }

    /// Adds one event: `object` is the text of a `{"name": …, "fields": {…}}` object (the host
    /// checks it as it checks every batch item).
    public mutating func append(_ object: UnsafeBufferPointer<UInt8>) {
        bytes.append(contentsOf: count == 0 ? Self.head : [UInt8(ascii: ",")])
        bytes.append(contentsOf: object)
        count += 1
    }

    /// How long the request would be with `object` added and closed.
    public func length(adding object: Int) -> Int {
        (count == 0 ? Self.head.count : bytes.count + 1) + object + Self.tail.count
    }

    /// The whole request line (newline included); the writer starts anew.
    public mutating func finish() -> [UInt8] {
        defer { self = PostBatchWriter() }
        return bytes + Self.tail
    }
}
