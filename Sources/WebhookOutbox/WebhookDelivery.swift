import Foundation

/// One HTTP request a rule asks for, as the outbox stores and sends it: everything the request
/// needs is here, already expanded by the rule engine, so a later life of the host sends it the
/// same way without the rule or its event.
public struct WebhookDelivery: Codable, Sendable, Equatable {
    /// The idempotency key: chosen once by the rule engine, kept across retries and restarts and
    /// sent as the `Idempotency-Key` header, so a receiver that sees a delivery twice (at least
    /// once means it can) counts it once.
    public var id: String
    /// The rule that asked for it: for reports and logs.
    public var rule: String
    /// The run of the rule that asked for it: for reports and logs.
    public var runID: String
    /// `http://` or `https://`; anything else is refused at ``WebhookOutbox/enqueue(_:)``.
    public var url: String
    public var method: String
    /// Sent in this order. A header named `Idempotency-Key` is replaced by the outbox's own.
    public var headers: [WebhookHeader]
    public var body: [UInt8]
    /// How long one attempt may take, from asking for a connection to the response's last byte.
    public var attemptTimeout: Duration
    /// Attempts in one life of the outbox before it gives up (at least 1).
    public var maxAttempts: Int

    public init(id: String, rule: String, runID: String, url: String, method: String = "POST",
                headers: [WebhookHeader] = [], body: [UInt8] = [], attemptTimeout: Duration = .seconds(10),
                maxAttempts: Int = 8) {
        self.id = id
        self.rule = rule
        self.runID = runID
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.attemptTimeout = attemptTimeout
        self.maxAttempts = maxAttempts
    }

    // The stored form: the body as base64 (a byte array would be a JSON number per byte), the
    // timeout in whole milliseconds (`Duration`'s own coding is two integers nobody reads).
    private enum CodingKeys: String, CodingKey {
        case id, rule, runID = "run_id", url, method, headers, body = "body_base64"
        case attemptTimeout = "attempt_timeout_ms", maxAttempts = "max_attempts"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        rule = try container.decode(String.self, forKey: .rule)
        runID = try container.decode(String.self, forKey: .runID)
        url = try container.decode(String.self, forKey: .url)
        method = try container.decode(String.self, forKey: .method)
        headers = try container.decode([WebhookHeader].self, forKey: .headers)
        let base64 = try container.decode(String.self, forKey: .body)
        guard let bytes = Data(base64Encoded: base64) else {
            throw DecodingError.dataCorruptedError(forKey: .body, in: container, debugDescription: "not base64")
        }
        body = Array(bytes)
        attemptTimeout = .milliseconds(try container.decode(Int64.self, forKey: .attemptTimeout))
        maxAttempts = try container.decode(Int.self, forKey: .maxAttempts)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(rule, forKey: .rule)
        try container.encode(runID, forKey: .runID)
        try container.encode(url, forKey: .url)
        try container.encode(method, forKey: .method)
        try container.encode(headers, forKey: .headers)
        try container.encode(Data(body).base64EncodedString(), forKey: .body)
        try container.encode(attemptTimeout.milliseconds, forKey: .attemptTimeout)
        try container.encode(maxAttempts, forKey: .maxAttempts)
    }
}

/// One request header, as configured: a list of these keeps order and repeated names.
public struct WebhookHeader: Codable, Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}
