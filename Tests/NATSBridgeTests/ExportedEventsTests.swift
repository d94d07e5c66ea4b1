import EventBusKit
@testable import NATSBridge
import Testing

/// What the bridge's bus subscription hands to the exporter (``Exporter/isExported(_:)``): no
/// import (it carries `@origin.host`) and no `bridge.*` report, whatever the number of fields —
/// the check compares keys for a few fields and looks the key up for many.
@Suite struct ExportedEventsTests {
    static func fields(_ count: Int, origin: Bool) -> [String: FieldValue] {
        var fields: [String: FieldValue] = [:]
        for index in 0..<count { fields["@f\(index)"] = .int(Int64(index)) }
        if origin { fields.merge(EventOrigin(host: "alpha", sequence: 1, instance: 1).fields) { $1 } }
        return fields
    }

    @Test func importsAreNeverExportedWhateverTheirFields() {
        for count in 0...12 {
            #expect(Exporter.isExported(Event(name: "app.x", fields: Self.fields(count, origin: false))), "\(count) fields")
            #expect(!Exporter.isExported(Event(name: "app.x", fields: Self.fields(count, origin: true))), "\(count) fields and an origin")
        }
        // The host field alone is what makes an import.
        #expect(!Exporter.isExported(Event(name: "app.x", fields: [EventOrigin.hostField: "alpha", "a": 1, "b": 2])))
        #expect(Exporter.isExported(Event(name: "app.x", fields: [EventOrigin.sequenceField: 1, EventOrigin.instanceField: 1, "a": 1])))
    }

    @Test func theBridgesOwnReportsStayHome() {
        #expect(!Exporter.isExported(Event(name: "bridge.gap")))
        #expect(!Exporter.isExported(Event(name: "bridge.anything.else")))
        #expect(Exporter.isExported(Event(name: "bridge")))
        #expect(Exporter.isExported(Event(name: "bridges.gap")))
        #expect(Exporter.isExported(Event(name: "app.bridge.gap")))
        #expect(Exporter.isExported(Event(name: "b")))
    }
}
