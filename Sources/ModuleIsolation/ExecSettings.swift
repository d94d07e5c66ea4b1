/// What makes a module an exec module (`exec:` in its entry, docs/modules-any-language.md): a
/// program in any language, run as a worker is, speaking JSON lines on its standard input and
/// output instead of loading a `.so`.
public struct ExecSettings: Sendable, Hashable {
    /// The program (absolute path) and its arguments.
    public var program: [String]
    /// Subscribed before the program starts (`subscribe:`); it may add its own.
    public var subscriptions: [ExecSubscription]
    /// The most posts a second the program may make (`posts_per_second`), with as many at once:
    /// a program posting in a loop must not flood the bus for every other subscriber. What is
    /// over is dropped, counted and logged.
    public var postsPerSecond: Int

    public static let defaultPostsPerSecond = 10_000
    /// The line protocol's version, sent in the `hello` line; a change that would break a
    /// program written for an older one makes a new version.
    public static let protocolVersion = 1

    public init(program: [String], subscriptions: [ExecSubscription] = [],
                postsPerSecond: Int = ExecSettings.defaultPostsPerSecond) {
        self.program = program
        self.subscriptions = subscriptions
        self.postsPerSecond = postsPerSecond
    }
}
