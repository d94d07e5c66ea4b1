/// A response line that does not have the shape its `type` promises.
public struct ResponseDecodingError: Error, CustomStringConvertible {
    public var description: String
}

/// Reading the members of a response object: required ones throw when missing or mistyped.
struct Members {
    let object: [String: JSON]
    let type: String

    init(_ json: JSON, type: String) throws(ResponseDecodingError) {
        guard case .object(let object) = json else {
            throw ResponseDecodingError(description: "a \(type) answer is an object, found \(json.kindName)")
        }
        self.object = object
        self.type = type
    }

    subscript(_ name: String) -> JSON? { object[name] }

    func int(_ name: String) throws(ResponseDecodingError) -> Int64 {
        guard let value = object[name]?.intValue else { throw missing(name, "an integer") }
        return value
    }

    func string(_ name: String) throws(ResponseDecodingError) -> String {
        guard let value = object[name]?.stringValue else { throw missing(name, "a string") }
        return value
    }

    func array(_ name: String) throws(ResponseDecodingError) -> [JSON] {
        guard let value = object[name]?.arrayValue else { throw missing(name, "a list") }
        return value
    }

    private func missing(_ name: String, _ kind: String) -> ResponseDecodingError {
        ResponseDecodingError(description: "a \(type) answer needs \"\(name)\", \(kind)")
    }
}
