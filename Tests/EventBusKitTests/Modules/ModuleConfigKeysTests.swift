import EventBusKit
import Testing

/// A module's declared config keys: what the host checks a section against, and how
/// `context.config` reads through them.
@Suite struct ModuleConfigKeysTests {
    static let keys: ModuleConfigKeys = [
        .string("greeting", default: "hello", help: "the word it greets with"),
        .int("interval_seconds", default: 10, minimum: 1, maximum: 3600),
        .double("ratio", minimum: 0),
        .bool("loud", default: false),
        .strings("match", default: ["user.>"]),
        .choice("mode", ["fast", "safe"], default: "safe"),
        .string("target", required: true),
        .table("limits", [.int("burst", required: true), .string("unit", default: "s")]),
        .list("routes", of: .table([.string("name", required: true)])),
    ]

    private func messages(_ values: [String: ConfigValue]) -> [String] {
        Self.keys.check(values).map(\.description)
    }

    @Test func aSectionThatFitsHasNoProblems() {
        #expect(messages([
            "target": "x", "greeting": "hi", "interval_seconds": 5, "ratio": 2, "loud": true,
            "match": .array(["a.>"]), "mode": "fast", "limits": .table(["burst": 3]),
            "routes": .array([.table(["name": "r1"])]),
        ]) == [])
        #expect(messages(["target": "x", "ratio": 0.5]) == [])  // a number may be written with or without a fraction
    }

    @Test func anUnknownKeyIsNamedWithTheClosestValidOnesAndAllValidOnes() {
        let problems = Self.keys.check(["target": "x", "greting": "hi"])
        #expect(problems.map(\.path) == [["greting"]])
        #expect(problems.first?.message == "unknown key (did you mean greeting?); expected one of: greeting, interval_seconds, ratio, loud, match, mode, target, limits, routes")
        #expect(messages(["target": "x", "zzz": 1]).first?.hasPrefix("zzz: unknown key; expected one of:") == true)
    }

    @Test func wrongTypesRangesChoicesAndMissingRequiredKeysAreEachReported() {
        #expect(messages(["interval_seconds": "ten"]) == [
            "the required key \"target\" is missing (a string)",
            "interval_seconds: expected an integer from 1 to 3600, found the string \"ten\"",
        ])
        #expect(messages(["target": "x", "interval_seconds": 0]) == ["interval_seconds: must be at least 1, found 0"])
        #expect(messages(["target": "x", "interval_seconds": 4000]) == ["interval_seconds: must be at most 3600, found 4000"])
        #expect(messages(["target": "x", "interval_seconds": 1.5]) == ["interval_seconds: expected an integer from 1 to 3600, found the number 1.5"])
        #expect(messages(["target": "x", "ratio": -1]) == ["ratio: must be at least 0, found -1"])
        #expect(messages(["target": "x", "loud": "yes"]) == ["loud: expected true or false, found the string \"yes\""])
        #expect(messages(["target": "x", "mode": "slow"]) == ["mode: expected one of: fast, safe, found \"slow\""])
        #expect(messages(["target": "x", "match": "user.>"]) == ["match: expected a list of strings, found the string \"user.>\""])
    }

    @Test func nestedTablesAndListItemsAreCheckedWithTheirPath() {
        #expect(messages(["target": "x", "match": .array(["a", 3]), "limits": .table(["brust": 1]),
                          "routes": .array([.table(["name": "a"]), .table(["nmae": "b"])])]) == [
            "limits: the required key \"burst\" is missing (an integer)",
            "limits.brust: unknown key (did you mean burst?); expected one of: burst, unit",
            "match[1]: expected a string, found the integer 3",
            "routes[1]: the required key \"name\" is missing (a string)",
            "routes[1].nmae: unknown key (did you mean name?); expected one of: name",
        ])
    }

    @Test func aModuleThatDeclaresNothingHasNothingChecked() {
        #expect(ModuleConfigKeys.undeclared.check(["anything": 1]).isEmpty)
        #expect(!ModuleConfigKeys.undeclared.isDeclared)
        let none: ModuleConfigKeys = []
        #expect(none.isDeclared)
        #expect(none.check(["anything": 1]).map(\.description) == ["anything: unknown key; this section takes no keys"])
    }

    @Test func mistakesInTheDeclarationItselfAreReported() {
        let keys: ModuleConfigKeys = [
            .int("a", default: 0, minimum: 1),
            .string("b", default: "x", required: true),
            .bool("a"),
            .table("t", [.string("c"), .string("c")]),
        ]
        #expect(keys.check([:]).contains { $0.description == "the required key \"b\" is missing (a string)" })
        let declaration = keys.check([:]).map(\.message).filter { $0.contains("fix its configKeys") }
        #expect(declaration == [
            "the module's default for \"a\", 0, is not an integer ≥ 1 (fix its configKeys)",
            "the module declares \"b\" both required and with a default (fix its configKeys)",
            "the module declares the key \"a\" twice (fix its configKeys)",
            "the module declares the key \"t.c\" twice (fix its configKeys)",
        ])
    }

    @Test func theSummaryListsEveryKeyWithTypeDefaultAndHelp() {
        let keys: ModuleConfigKeys = [
            .string("greeting", default: "hello", help: "the word it greets with"),
            .double("seconds", default: 10, minimum: 0.001),
            .table("limits", [.int("burst", required: true)]),
        ]
        #expect(keys.summary == "greeting (a string, default \"hello\": the word it greets with), seconds (a number ≥ 0.001, default 10.0), limits (a table {burst (an integer, required)})")
    }

    @Test func theConfigReadsThroughTheDeclaration() throws {
        let config = ModuleConfig(["target": "x", "interval_seconds": 5, "limits": .table(["burst": 2])], keys: Self.keys)
        #expect(try config.string("greeting") == "hello")            // the declared default
        #expect(try config.string("greeting", default: "other") == "hello")  // the declaration wins
        #expect(try config.int("interval_seconds") == 5)
        #expect(try config.strings("match") == ["user.>"])
        #expect(try config.bool("loud") == false)
        #expect(try config.double("ratio", default: 0.25) == 0.25)   // no declared default: the call's
        #expect(try config.table("limits").int("burst") == 2)
        #expect(try config.table("limits").string("unit") == "s")
        #expect { try config.string("greting") } throws: { error in
            (error as? EventBusError)?.code == .invalidModuleConfig
                && "\(error)".contains("key \"greting\" is read but not declared in the module's configKeys")
        }
        #expect(throws: EventBusError.self) { try config.table("limits").int("brust") }
    }

    @Test func anUndeclaredConfigReadsValuesAsTheyAre() throws {
        let config = ModuleConfig(["n": 3])
        #expect(try config.int("n") == 3)
        #expect(try config.int("missing", default: 7) == 7)
        #expect(try config.table("nested").values.isEmpty)
    }
}
