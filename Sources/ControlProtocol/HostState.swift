/// The `state` member of the `status` and `stats` answers: `running`, or `stopping` while the
/// host shuts down (the answer's ``StoppingReport`` then says what it still has to do).
public enum HostState: String, Codable, Sendable {
    case running
    case stopping

    /// The state that goes with `report`: stopping when there is one.
    init(_ report: StoppingReport?) {
        self = report == nil ? .running : .stopping
    }
}
