/// A handler module: a Swift shared object the host loads at run time.
///
/// The host calls everything here on the module's own serial queue (its ``Mailbox``), the same
/// queue its subscriptions deliver on, so module code never runs concurrently with itself.
///
/// ```swift
/// import EventBusKit
///
/// final class Hello: EventBusModule {
///     let name = "hello"
///     let version = "1.0.0"
///     static let configKeys: ModuleConfigKeys = [.string("greeting", default: "hello")]
///     func activate(_ context: ModuleContext) throws {
///         let greeting = try context.config.string("greeting")
///         try context.bus.publisher(for: "user.>")
///             .sink { event in context.log.info("\(greeting), \(event.name)") }
///             .store(in: &context.cancellables)
///     }
/// }
///
/// @_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Hello.init) }
/// ```
public protocol EventBusModule: AnyObject {
    var name: String { get }
    var version: String { get }

    /// The keys the module reads from its config section, with types and defaults. The host
    /// checks the section against it before `activate` and `reconfigure` (and in
    /// `eventbusd --check-config`) and refuses a wrong one naming file, line and key. The
    /// default, ``ModuleConfigKeys/undeclared``, checks nothing (the host warns about that when
    /// the module is given a section). Declare it as `static let configKeys: ModuleConfigKeys = […]`.
    static var configKeys: ModuleConfigKeys { get }

    /// Subscribe and start work. Throwing refuses the module: the host logs the error, cancels
    /// whatever the module subscribed to so far, and keeps running without it.
    func activate(_ context: ModuleContext) throws

    /// The module's config section changed on reload. The default asks the host to deactivate
    /// and activate the module again with the new section.
    func reconfigure(_ config: ModuleConfig, context: ModuleContext) throws -> ReconfigureResult

    /// Called before the host drops the module; its cancellables are cancelled right after.
    func deactivate()
}

public enum ReconfigureResult: Sendable {
    /// The module applied the new section itself.
    case applied
    /// The host should deactivate the module and activate it again with the new section.
    case reactivate
}

extension EventBusModule {
    public static var configKeys: ModuleConfigKeys { .undeclared }
    public func reconfigure(_ config: ModuleConfig, context: ModuleContext) throws -> ReconfigureResult { .reactivate }
    public func deactivate() {}
}
