import Glibc
import Testing

/// Tags for the slow suites, so a contributor can run the fast ones alone (docs/testing.md).
/// A suite's tags apply to every test in it.
extension Tag {
    /// Starts a real eventbusd process (and usually the `eventbus` CLI against it).
    @Tag public static var realDaemon: Self
    /// Starts a real nats-server.
    @Tag public static var nats: Self
    /// Boots systemd in a container root (systemd-nspawn) and installs the Debian package there.
    @Tag public static var container: Self
}

extension Trait where Self == ConditionTrait {
    /// Leaves the suite out when `EVENTBUS_SKIP_TAGS` (comma-separated tag names) names one of
    /// `tags`. Why beside the tags: `swift test` of Swift 6.3 cannot filter by tag on the command
    /// line (`--skip tag:NAME` arrives with a later toolchain), so the suites carry their own switch.
    public static func skippable(_ tags: Tag...) -> Self {
        let named = tags.map { String(describing: $0).trimmingPrefix(".") }
        return .disabled("EVENTBUS_SKIP_TAGS leaves out \(named.joined(separator: ", ")) suites") {
            guard let skipped = getenv("EVENTBUS_SKIP_TAGS").map({ String(cString: $0) }) else { return false }
            let names = skipped.split(separator: ",").map { $0.filter { $0 != " " } }
            return named.contains { names.contains(String($0)) }
        }
    }
}
