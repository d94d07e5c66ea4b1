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
///     func activate(_ context: ModuleContext) throws {
///         try context.bus.publisher(for: "user.>")
///             .sink { event in context.log.info("got \(event.name)") }
///             .store(in: &context.cancellables)
///     }
/// }
///
/// @_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Hello.init) }
/// ```
public protocol EventBusModule: AnyObject {
    var name: String { get }
    var version: String { get }

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
    public func reconfigure(_ config: ModuleConfig, context: ModuleContext) throws -> ReconfigureResult { .reactivate }
    public func deactivate() {}
}
