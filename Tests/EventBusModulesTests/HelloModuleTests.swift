import EventBusKit
import Foundation
import Testing

/// The `hello` module as the root package builds it (`libHello.so`, route 2 of docs/platform-facts.md, Loading modules).
@Suite struct HelloModuleTests {
    @Test func greetsUserEventsInTheLogAndOnTheBus() async throws {
        let harness = try ModuleHarness(library: BuildProducts.library("Hello"), config: ["greeting": .string("hi")])
        expectLoadedWithOneSDK(harness, name: "hello", type: "Hello.Hello")
        let greeted = try harness.record("hello.greeted")
        let users = try harness.record("user.>")
        try harness.activate()
        defer { harness.deactivate() }

        harness.bus.post("user.login")
        #expect(await eventually { greeted.count == 1 })
        harness.bus.post("fs.created", fields: ["path": "/tmp/x"])
        harness.bus.post("user.logout")
        #expect(await eventually { greeted.count == 2 })

        // Had `fs.created` been greeted, its answer would sit between these two.
        let answers = greeted.all
        #expect(answers.map { $0["event"]?.stringValue } == ["user.login", "user.logout"])
        #expect(answers.map { $0["event_sequence"]?.intValue } == users.all.map { Int64($0.sequence) })
        #expect(answers.allSatisfy { $0["greeting"] == "hi" && $0.source == "hello" })
        #expect(harness.logged("info: hi, user.login from user"))
    }

    @Test func refusesAConfigValueOfTheWrongType() throws {
        let harness = try ModuleHarness(library: BuildProducts.library("Hello"), config: ["greeting": .int(3)])
        #expect { try harness.activate() } throws: { ($0 as? EventBusError)?.code == .invalidModuleConfig }
    }
}
