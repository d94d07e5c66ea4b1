import EventBusKit
import Testing

@Suite struct EventPatternTests {
    @Test(arguments: [
        ("fs.created", "fs.created", true),
        ("fs.created", "fs.modified", false),
        ("fs.*", "fs.created", true),
        ("fs.*", "fs.created.dir", false),
        ("fs.*", "fs", false),
        ("fs.>", "fs.created", true),
        ("fs.>", "fs.created.dir", true),
        ("fs.>", "fs", false),
        ("*.tick", "timer.tick", true),
        ("*.tick", "timer.tock", false),
        ("*.*.done", "user.deploy.done", true),
        ("*.*.done", "user.done", false),
        (">", "anything.at.all", true),
        (">", "x", true),
        ("user.*.>", "user.deploy.done", true),
        ("user.*.>", "user.deploy", false),
        ("fs", "fs.created", false),
        ("fs.created", "fs.createdx", false),
    ])
    func matching(pattern: String, name: String, expected: Bool) throws {
        #expect(try EventPattern(pattern).matches(name) == expected)
    }

    @Test(arguments: [
        ("", "pattern is empty"),
        ("fs..created", "token 2 is empty"),
        (".fs", "token 1 is empty"),
        ("fs.", "token 2 is empty"),
        ("fs.>.created", "'>' must be the last token"),
        ("fs.cr*", "mixes a wildcard with text"),
        ("fs.>x", "mixes a wildcard with text"),
        ("fs.new file", "contains whitespace"),
    ])
    func malformedPatternsAreRejectedWithTheReason(pattern: String, reason: String) {
        #expect {
            try EventPattern(pattern)
        } throws: { error in
            guard let error = error as? EventBusError else { return false }
            return error.code == .invalidPattern && error.message.contains(reason)
        }
    }

    @Test func eventNamesAreValidatedWithoutWildcards() throws {
        try EventPattern.validate(eventName: "user.deploy.done")
        #expect(throws: EventBusError.self) { try EventPattern.validate(eventName: "user.*") }
        #expect(throws: EventBusError.self) { try EventPattern.validate(eventName: "user..x") }
    }

    @Test func busRejectsMalformedPatternsWhenSubscribing() {
        let bus = Bus()
        #expect(throws: EventBusError.self) { try bus.publisher(for: "ok.*", "bad..pattern") }
    }
}
