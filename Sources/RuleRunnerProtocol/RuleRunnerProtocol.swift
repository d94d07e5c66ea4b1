/// Constants of the rule runner's protocol: how eventbusd asks `eventbus-rule-runner` (root,
/// socket-activated) to run one `run:` action of one rule as a transient unit
/// (docs/rules-privileges.md).
///
/// One connection is one run, in JSON lines: the client sends one ``RuleRunnerRequest/run(_:)``,
/// the runner answers ``RuleRunnerAnswer/started(_:)`` once the unit runs and
/// ``RuleRunnerAnswer/finished(_:)`` once it has ended, then closes. A
/// ``RuleRunnerRequest/stop`` (or the client closing its side) stops the unit. Anything wrong
/// is one ``RuleRunnerAnswer/error(_:)`` and the end of the connection.
public enum RuleRunnerProtocol {
    /// Where `eventbus-rule-runner.socket` listens: in /run itself, root's, so that no one but
    /// root can replace it (eventbusd's own /run/eventbus belongs to its user).
    public static let socketPath = "/run/eventbus-rule-runner.sock"

    /// The longest line either side reads. A request carries the triggering events, each at
    /// most a control-socket line (1 MiB); a `collect` of several large events beyond this is
    /// refused rather than buffered without bound by a root process.
    public static let maximumLineBytes = 4 << 20

    /// The most events one request may carry.
    public static let maximumEvents = 10_000

    /// A run id: what the rule engine writes (`LIFE-N`, hex and digits), in unit-name characters,
    /// since it becomes part of the unit's name.
    public static func isValidRunID(_ run: String) -> Bool {
        !run.isEmpty && run.utf8.count <= 64 && run.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-")
        }
    }
}
