import EventBusKit
import Foundation
import Testing

/// `request(.none)` is a programming error wherever a subscriber asks a bus publisher for it:
/// it traps, as Combine's subjects and operators do, on every path — the bare bus subscription,
/// a mailbox's lane, the bus's fast-path operators, and OpenCombine's operators (those that hand
/// the bus subscription through, as `Filter` and `Map` do, and those with a subscription of their own).
/// Each case runs the misuse in a child process (operator-trap-fixture), never in the test runner.
@Suite struct RequestNoneTests {
    static let paths = ["bus", "mailbox", "filter", "map", "compactMap", "removeDuplicates",
                        "combine-filter", "combine-map", "combine-compactMap", "combine-removeDuplicates"]

    @Test(arguments: paths)
    func requestingNoneTrapsOnEveryPath(_ path: String) throws {
        let fixture = try #require(BuiltExecutable.path(named: "operator-trap-fixture"),
                                   "build with swift build --build-tests first")
        let trapped = try runFixture(fixture, "\(path)-request-none")
        #expect(trapped.output.contains("subscribed"), "\(trapped.output)")
        #expect(!trapped.output.contains("returned"), "\(trapped.output)")
        #expect(!trapped.output.contains("value"), "\(trapped.output)")
        #expect(trapped.reason == .uncaughtSignal, "\(trapped.output)")
        #expect([SIGILL, SIGTRAP].contains(trapped.status))
        // Where the bus's own subscription is the one asked, it says so. (OpenCombine's operators
        // with a subscription of their own trap first, with their own message.)
        if path != "combine-removeDuplicates" {
            #expect(trapped.output.contains("requested .none"), "\(trapped.output)")
        }

        // The control: the same program with a legal request gets the waiting event and ends.
        let control = try runFixture(fixture, "\(path)-request-one")
        #expect(control.reason == .exit && control.status == 0, "\(control.output)")
        #expect(control.output.contains("value 7"), "\(control.output)")
        #expect(control.output.contains("returned"), "\(control.output)")
    }
}
