import EventBusKit
import Foundation
import Testing

/// The SDK's side of D-Bus watches: parsing matches, their rule text with hostile values, the
/// watch's source id, Codable, presets and their events.
struct DBusWatchTests {
    @Test func aMatchParsesFromItsText() throws {
        let match = try DBusMatch(parsing: "interface=org.freedesktop.login1.Manager,member=PrepareForSleep,arg0=x")
        #expect(match == DBusMatch(interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep", arguments: [0: "x"]))
        #expect(try DBusMatch(parsing: " sender=:1.42,  path_namespace='/org/freedesktop', arg12='a,b'")
                == DBusMatch(sender: ":1.42", pathNamespace: "/org/freedesktop", arguments: [12: "a,b"]))
        #expect(try DBusMatch(parsing: "type='signal'") == DBusMatch())
        #expect(try DBusMatch(parsing: "") == DBusMatch())
        #expect(try DBusMatch(pairs: [("member", "Lock"), ("arg63", "")]) == DBusMatch(member: "Lock", arguments: [63: ""]))
    }

    @Test func aMalformedMatchIsRefusedWithAReason() {
        let cases: [(String, String)] = [
            ("membr=Lock", "unknown key \"membr\" in the D-Bus match (keys: sender, path, path_namespace, interface, member, arg0…arg63)"),
            ("arg64=x", "unknown key \"arg64\""),
            ("arg01=x", "unknown key \"arg01\""),
            ("arg0path=/x", "unknown key \"arg0path\""),
            ("destination=:1.1", "unknown key \"destination\""),
            ("type=method_call", "takes signals only"),
            ("member=Lock,member=Unlock", "member is given twice"),
            ("interface", "has no '='"),
            ("=x", "a value without a key"),
            ("arg0='open", "opens a quote it never closes"),
            ("interface=login1", "is not an interface name (two or more elements"),
            ("interface=org.2x.Y", "an element starts with a digit"),
            ("member=Prepare-For", "is not a member name"),
            ("member=", "is not a member name: an empty element"),
            ("path=org/x", "must start with '/'"),
            ("path=/org/x/", "an empty element"),
            ("path_namespace=/a-b", "only ASCII letters, digits and '_'"),
            ("path=/a,path_namespace=/a", "path or path_namespace, not both"),
            ("sender=login1", "is not a bus name"),
            ("sender=org.1x.y", "starts with a digit"),
        ]
        for (text, reason) in cases {
            let error = #expect(throws: EventBusError.self) { try DBusMatch(parsing: text) }
            #expect(error?.code == .invalidDBusWatch)
            #expect(error?.message.contains(reason) == true, "\(text): \(error?.message ?? "")")
        }
        let nul = #expect(throws: EventBusError.self) { try DBusMatch(arguments: [0: "a\u{0}b"]).validate() }
        #expect(nul?.message.contains("NUL") == true)
    }

    /// Values are quoted as dbus-daemon reads them: inside apostrophes everything is itself, an
    /// apostrophe closes the quote and comes back as `\'`. Each rule reads back as its match.
    @Test func theRuleQuotesHostileValues() throws {
        #expect(DBusMatch(interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep").rule
                == "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForSleep'")
        #expect(DBusMatch().rule == "type='signal'")
        let cases: [(String, String)] = [
            ("it's", #"arg0='it'\''s'"#),
            ("a,b", "arg0='a,b'"),
            (#"back\slash"#, #"arg0='back\slash'"#),
            (#"\'"#, #"arg0='\'\'''"#),
            ("x',member='Other", #"arg0='x'\'',member='\''Other'"#),
            ("", "arg0=''"),
        ]
        for (value, expected) in cases {
            let match = DBusMatch(arguments: [0: value])
            #expect(match.rule == "type='signal'," + expected, "\(value)")
            #expect(try DBusMatch(parsing: match.rule) == match, "\(value) reads back from its rule")
            #expect(try DBusMatch(parsing: match.text) == match, "\(value) reads back from its text")
        }
        let every = DBusMatch(sender: "org.freedesktop.login1", path: "/org/freedesktop/login1", interface: "org.freedesktop.login1.Manager",
                              member: "SessionNew", arguments: [2: "c", 0: "a'b", 10: "x"])
        #expect(every.rule == #"type='signal',sender='org.freedesktop.login1',path='/org/freedesktop/login1',interface='org.freedesktop.login1.Manager',member='SessionNew',arg0='a'\''b',arg2='c',arg10='x'"#)
        #expect(every.text == #"sender=org.freedesktop.login1,path=/org/freedesktop/login1,interface=org.freedesktop.login1.Manager,member=SessionNew,arg0='a'\''b',arg2=c,arg10=x"#)
        #expect(try DBusMatch(parsing: every.text) == every)
    }

    @Test func equalWatchesHaveOneDescription() throws {
        let sleep = DBusMatch(interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep")
        let parsed = try DBusMatch(parsing: "member=PrepareForSleep,interface=org.freedesktop.login1.Manager")
        #expect(DBusWatch(match: sleep) == DBusWatch(match: parsed))
        #expect(DBusWatch(match: sleep).description == "bus=system match=interface=org.freedesktop.login1.Manager,member=PrepareForSleep")
        #expect(DBusWatch(bus: .address("unix:path=/run/x"), match: DBusMatch()).description == "bus=address:unix:path=/run/x match=*")
        #expect(DBusWatch(preset: .sleep).description == "bus=system preset=sleep")
        #expect(DBusWatch(preset: .sleep) != DBusWatch(match: DBusPreset.sleep.match))
        #expect(DBusWatch(preset: .network, bus: .user).description == "bus=user preset=network")
    }

    @Test func aWatchIsValidatedWhole() throws {
        var changed = DBusWatch(preset: .sleep)
        changed.match.member = "PrepareForShutdown"
        let error = #expect(throws: EventBusError.self) { try changed.validate() }
        #expect(error?.message.contains("the sleep preset takes its own match") == true)
        #expect(throws: EventBusError.self) { try DBusWatch(bus: .address("/run/bus"), match: DBusMatch()).validate() }
        for preset in DBusPreset.allCases { try DBusWatch(preset: preset).validate() }
        let unknown = #expect(throws: EventBusError.self) { try DBusPreset(named: "suspend") }
        #expect(unknown?.message == "no D-Bus preset \"suspend\" (presets: sleep, sessions, session-lock, network)")
    }

    @Test func busesParseFromConfigText() throws {
        #expect(try DBusBus(parsing: "system") == .system)
        #expect(try DBusBus(parsing: "user") == .user)
        #expect(try DBusBus(parsing: "unix:path=/run/dbus/system_bus_socket") == .address("unix:path=/run/dbus/system_bus_socket"))
        let error = #expect(throws: EventBusError.self) { try DBusBus(parsing: "/run/dbus/system_bus_socket") }
        #expect(error?.message.contains("is not a D-Bus address") == true)
        #expect(DBusBus.address("tcp:host=localhost,port=1").configText == "tcp:host=localhost,port=1")
    }

    /// What module workers forward: a watch encodes and decodes to an equal one, and a forged
    /// one is validated again on the way in.
    @Test func aWatchRoundTripsThroughCodable() throws {
        let watches = [
            DBusWatch(bus: .address("unix:path=/x"), match: DBusMatch(sender: ":1.2", interface: "a.b", arguments: [3: "it's, \\"])),
            DBusWatch(preset: .sessionLock), DBusWatch(bus: .user, match: DBusMatch()),
        ]
        for watch in watches {
            let data = try JSONEncoder().encode(watch)
            #expect(try JSONDecoder().decode(DBusWatch.self, from: data) == watch, "\(String(decoding: data, as: UTF8.self))")
        }
        let json = String(decoding: try JSONEncoder().encode(DBusWatch(preset: .sleep)), as: UTF8.self)
        #expect(json.contains("\"preset\":\"sleep\"") && json.contains("\"bus\":\"system\""))
        let forged = Data(#"{"bus":"system","match":{"member":"a-b"}}"#.utf8)
        #expect(throws: EventBusError.self) { try JSONDecoder().decode(DBusWatch.self, from: forged) }
        let changedPreset = Data(#"{"bus":"system","preset":"sleep","match":{"member":"Other"}}"#.utf8)
        #expect(throws: EventBusError.self) { try JSONDecoder().decode(DBusWatch.self, from: changedPreset) }
        #expect(!json.contains("match"), "a preset's match is its own: \(json)")
    }

    @Test func aPlainBusHasNoDBusSource() {
        let error = #expect(throws: EventBusError.self) { try Bus().dbus(preset: .sleep) }
        #expect(error?.code == .sourceUnavailable)
        let invalid = #expect(throws: EventBusError.self) { try Bus().dbus(matching: DBusMatch(member: "9")) }
        #expect(invalid?.code == .invalidDBusWatch)
    }

    @Test func presetsMakeTheirEventsFromSignals() {
        func signal(_ interface: String, _ member: String, path: String = "/org/freedesktop/login1", _ arguments: [String: FieldValue] = [:]) -> DBusSignal {
            DBusSignal(sender: ":1.5", path: path, interface: interface, member: member, signature: "", arguments: arguments)
        }
        func event(_ preset: DBusPreset, _ signal: DBusSignal) -> String? {
            DBusPresetEvents.event(of: preset, for: signal, source: "s").map { event in
                ([event.name] + event.fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }).joined(separator: " ")
            }
        }
        let manager = "org.freedesktop.login1.Manager"
        #expect(event(.sleep, signal(manager, "PrepareForSleep", ["arg0": true])) == "system.sleep")
        #expect(event(.sleep, signal(manager, "PrepareForSleep", ["arg0": false])) == "system.resume")
        #expect(event(.sleep, signal(manager, "PrepareForShutdown", ["arg0": true])) == nil)
        #expect(event(.sessions, signal(manager, "SessionNew", ["arg0": "3", "arg1": "/org/freedesktop/login1/session/_33"]))
                == "session.new id=3 path=/org/freedesktop/login1/session/_33")
        #expect(event(.sessions, signal(manager, "UserNew", ["arg0": 1000, "arg1": "/org/freedesktop/login1/user/_31000"])) == nil)
        #expect(event(.sessionLock, signal("org.freedesktop.login1.Session", "Lock", path: "/org/freedesktop/login1/session/_31_2ex"))
                == "session.lock id=1.x path=/org/freedesktop/login1/session/_31_2ex")
        #expect(event(.sessionLock, signal("org.freedesktop.login1.Session", "Unlock", path: "/org/freedesktop/login1/session/c2"))
                == "session.unlock id=c2 path=/org/freedesktop/login1/session/c2")
        let network = "org.freedesktop.NetworkManager"
        #expect(event(.network, signal(network, "StateChanged", path: "/org/freedesktop/NetworkManager", ["arg0": 20]))
                == "network.connectivity code=20 kind=state state=disconnected")
        #expect(event(.network, signal(network, "StateChanged", path: "/org/freedesktop/NetworkManager", ["arg0": 99]))
                == "network.connectivity code=99 kind=state state=unknown")
        #expect(event(.network, signal("org.freedesktop.DBus.Properties", "PropertiesChanged", path: "/org/freedesktop/NetworkManager",
                                       ["arg0": "org.freedesktop.NetworkManager", "arg1.Connectivity": 4])) == "network.connectivity code=4 kind=connectivity state=full")
        #expect(event(.network, signal("org.freedesktop.DBus.Properties", "PropertiesChanged", path: "/org/freedesktop/NetworkManager",
                                       ["arg0": "org.freedesktop.NetworkManager", "arg1.WirelessEnabled": true])) == nil)
        #expect(DBusPreset.allCases.flatMap(\.eventNames).count == 7)
    }

    @Test func typedViewsReadBackWhatTheSourceWrites() {
        let signal = DBusSignal(sender: ":1.9", path: "/a", interface: "a.b", member: "C", signature: "sh",
                                arguments: ["arg0": "x"], unrepresented: ["arg1 (unix fd)"])
        let event = signal.event(source: "dbus:x")
        #expect(event.name == "dbus.signal" && event["unrepresented"] == "arg1 (unix fd)")
        #expect(event.dbusSignal == signal)
        let gap = DBusGap(bus: "system", reason: "closed", lostAt: Date(timeIntervalSince1970: 1_700_000_000), downSeconds: 1.25)
        #expect(gap.event(source: "dbus:x").dbusGap == gap && event.dbusGap == nil && gap.event(source: "s").dbusSignal == nil)
    }
}
