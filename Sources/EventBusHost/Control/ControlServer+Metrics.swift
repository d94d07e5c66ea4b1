import ControlProtocol

extension ControlServer {
    /// The `metrics` answer: the same Prometheus text `/metrics` serves, in one JSON string, so
    /// a host without `metrics.listen` can be read too (`eventbus metrics`, `eventbus top`).
    func metrics() -> JSON {
        .object([
            "type": "metrics",
            "content_type": "text/plain; version=0.0.4",
            "text": .string(String(decoding: metricsText(), as: UTF8.self)),
        ])
    }
}
