/// The one error type of the SDK. A `Code` says what kind of failure it is (stable, for code that
/// branches on it); `message` says what exactly went wrong (for people).
public struct EventBusError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Hashable, Sendable {
            case invalidPattern, invalidEventName, invalidCalendarSpec, invalidTimerInterval
            case sourceUnavailable, busFinished
            case invalidFilePath
            case invalidModuleConfig, moduleABIMismatch, duplicateSDK, notAModule
            case invalidJournalWatch, acknowledgementFailed
            case invalidDeviceWatch
            case invalidUnitWatch
            case invalidDBusWatch
        }
        fileprivate let base: Base

        /// A subscription pattern is malformed (empty segment, `>` not last, wildcard inside a segment…).
        public static let invalidPattern = Code(base: .invalidPattern)
        /// An event name is malformed (empty segment, wildcard, whitespace…).
        public static let invalidEventName = Code(base: .invalidEventName)
        /// A calendar schedule does not parse.
        public static let invalidCalendarSpec = Code(base: .invalidCalendarSpec)
        /// A timer interval or tolerance is zero, negative or out of range.
        public static let invalidTimerInterval = Code(base: .invalidTimerInterval)
        /// No driver is registered for the kind of source asked for (e.g. `files` outside the host).
        public static let sourceUnavailable = Code(base: .sourceUnavailable)
        /// The bus has been finished; it takes no new subscriptions or sources.
        public static let busFinished = Code(base: .busFinished)
        /// A file watch was asked for with an unusable path (empty).
        public static let invalidFilePath = Code(base: .invalidFilePath)

        /// A module's config section lacks a key or has one of the wrong type.
        public static let invalidModuleConfig = Code(base: .invalidModuleConfig)
        /// A module was built against another SDK version or another compiler.
        public static let moduleABIMismatch = Code(base: .moduleABIMismatch)
        /// A module's objects are not the host's SDK types: it carries its own SDK copy.
        public static let duplicateSDK = Code(base: .duplicateSDK)
        /// A file is not a loadable EventBus module.
        public static let notAModule = Code(base: .notAModule)

        /// A journal watch's options are malformed (field name, consumer name, directory, a match
        /// that can never hold).
        public static let invalidJournalWatch = Code(base: .invalidJournalWatch)
        /// A journal entry could not be acknowledged: its watch has no consumer name or is no
        /// longer running, or the position could not be persisted.
        public static let acknowledgementFailed = Code(base: .acknowledgementFailed)
        /// A unit watch's options are malformed (an empty or impossible unit name pattern, a bus
        /// address that is not one).
        public static let invalidUnitWatch = Code(base: .invalidUnitWatch)

        /// A device watch's options are malformed (a name, a devtype without a subsystem, a tag
        /// on the kernel layer).
        public static let invalidDeviceWatch = Code(base: .invalidDeviceWatch)

        /// A D-Bus watch's options are malformed (an unknown match key, a name D-Bus would refuse,
        /// a bus address that is not one, a preset's match changed).
        public static let invalidDBusWatch = Code(base: .invalidDBusWatch)

        public var description: String { base.rawValue }
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
