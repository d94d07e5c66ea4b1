import Testing
@testable import EventBusHost

/// The values a tail's `FIELD=VALUE` accepts, without a host: exact texts as journalctl compares
/// them, globs of `*` and `?`, escapes, and a pattern built to make a backtracking matcher slow.
@Suite struct FieldMatchTests {
    private func accepts(_ values: [String], _ text: String) -> Bool {
        var match = FieldMatch()
        for value in values { match.add(value) }
        return match.accepts(text)
    }

    @Test func aValueWithoutStarOrQuestionMarkIsExact() {
        #expect(accepts(["/etc/nginx/nginx.conf"], "/etc/nginx/nginx.conf"))
        #expect(!accepts(["/etc/nginx"], "/etc/nginx/nginx.conf"))
        #expect(accepts(["C:\\temp"], "C:\\temp"), "a backslash before anything but * or ? is itself")
        var match = FieldMatch()
        match.add("prod")
        match.add("dev")
        #expect(match.globs.isEmpty && match.exact == ["prod", "dev"])
    }

    @Test(arguments: [
        ("/etc/*.conf", "/etc/nginx.conf", true),
        ("/etc/*.conf", "/etc/nginx/sites/a.conf", true),
        ("/etc/*.conf", "/etc/nginx.conf.bak", false),
        ("*", "", true),
        ("*", "anything", true),
        ("a*", "a", true),
        ("*a", "", false),
        ("app-?.service", "app-1.service", true),
        ("app-?.service", "app-10.service", false),
        ("app-?.service", "app-é.service", true),
        ("*err*or*", "an error occurred", true),
        ("*err*or*", "or err", false),
        ("a*b*c", "abc", true),
        ("a*b*c", "acb", false),
        ("a*a", "a", false),
        ("a*a", "aa", true),
        ("*ab*ab", "xabyab", true),
        ("*ab*ab", "xab", false),
        ("??", "ab", true),
        ("??", "abc", false),
    ])
    func aGlobMatchesAsTheShellDoesForStarAndQuestionMark(pattern: String, text: String, expected: Bool) {
        #expect(accepts([pattern], text) == expected, "\(pattern) against \(text)")
    }

    @Test func anEscapedStarOrQuestionMarkIsLiteral() {
        #expect(accepts(["\\*"], "*"))
        #expect(!accepts(["\\*"], "anything"))
        #expect(accepts(["why\\?"], "why?"))
        #expect(!accepts(["why\\?"], "why!"))
        #expect(accepts(["\\**"], "*star"))
        #expect(!accepts(["\\**"], "star"))
    }

    @Test func alternativesMixExactTextsAndGlobs() {
        #expect(accepts(["prod", "stage-*"], "prod"))
        #expect(accepts(["prod", "stage-*"], "stage-eu"))
        #expect(!accepts(["prod", "stage-*"], "dev"))
    }

    /// `a*a*a*…b` against a long run of `a`: a backtracking matcher tries every split of the run
    /// (exponential in the stars); the segment scan looks for each segment once.
    @Test func aPatternThatWouldMakeBacktrackingExplodeIsAnsweredInOnePass() {
        let pattern = String(repeating: "a*", count: 30) + "b"
        let text = String(repeating: "a", count: 100_000)
        #expect(!accepts([pattern], text))
        #expect(accepts([pattern], text + "b"))
    }
}
