import EventBusKit
import Synchronization

/// What the host hands the source kinds when it registers them: where state lives and where
/// sources report what the host's metrics and status read.
public final class SourceEnvironment: Sendable {
    private let state: Mutex<String>
    /// Where a journal source reports its lag while it runs (the host's metrics read it).
    public let journalLags: JournalLags?
    /// Where a journal source keeps its last status while it runs.
    public let journalStatuses: JournalStatuses

    public init(stateDirectory: String, journalLags: JournalLags? = nil, journalStatuses: JournalStatuses = JournalStatuses()) {
        state = Mutex(stateDirectory)
        self.journalLags = journalLags
        self.journalStatuses = journalStatuses
    }

    /// Where sources persist what must survive a restart (journal consumers' positions). Set
    /// from the config at start and by a reload; a source reads it when it starts, so running
    /// sources keep the folder they started with.
    public var stateDirectory: String {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}
