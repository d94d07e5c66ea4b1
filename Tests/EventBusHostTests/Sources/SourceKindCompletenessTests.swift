@testable import EventBusHost
@_spi(EventBusHost) import EventBusKit
import ControlProtocol
import EventSources
import Foundation
import ModuleIsolation
import Testing
import TestSupport

/// Every kind of the registry (``SourceKinds``) is offered by every part of the host that deals in
/// sources, and its folder holds what docs/adding-a-source.md asks for. A kind added to the
/// registry but missed somewhere fails here, naming the kind and the place.
@Suite struct SourceKindCompletenessTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    static func folder(of kind: any SourceKind.Type) -> URL {
        let name = String(describing: kind).replacingOccurrences(of: "Kind", with: "")
        return repository.appendingPathComponent("Sources/EventSources/\(name)")
    }

    /// The folder's README says what the kind's events are and how it loses and recovers, and
    /// its sample config is a valid config of the kind — whose every watch then round-trips
    /// through a module worker's request to the same source id.
    @Test(arguments: SourceKinds.all.map { $0.name })
    func theFolderHasItsReadmeAndAValidSampleConfig(kind name: String) throws {
        let kind = try #require(SourceKinds.kind(named: name))
        let folder = Self.folder(of: kind)
        let readme = try String(contentsOf: folder.appendingPathComponent("README.md"), encoding: .utf8)
        for section in ["## Events", "## Config", "## Loss"] {
            #expect(readme.contains(section), "\(folder.path)/README.md has no \"\(section)\" section")
        }
        let sample = folder.appendingPathComponent("sample.yaml").path
        let config = try HostConfig.load(from: sample)
        let watches = config.watches.filter { $0.source.kind == name }
        #expect(!watches.isEmpty, "\(sample) configures no \(name) watch")

        let bus = Bus()
        _ = SourceKinds.registerAll(on: bus, environment: SourceEnvironment(stateDirectory: "/nonexistent"))
        for watch in watches {
            let request = SourceRequest(id: "", options: watch.source.options) { preconditionFailure() }
            let spec = try #require(SourceSpec.encode(request), "\(name) options do not encode for a worker")
            let rebuilt = try bus.decodeSourceOptions(kind: name, from: Data(JSONWriter.line(try #require(spec["options"]))))
            #expect(ConfiguredSource(rebuilt) == watch.source, "\(name): \(rebuilt) came back for \(watch.source.options)")
        }
    }

    /// The config's `sources:`, a rule's `from:`, the worker's kinds, the metrics' labels and
    /// notices, and the docs name every kind.
    @Test func everyConsumerOffersEveryKind() throws {
        let directory = try TemporaryDirectory()
        let sources = try #require(Self.problem(loading: try directory.write("a.yaml", "sources:\n  nope: []\n")))
        let rules = try #require(Self.problem(loading: try directory.write("b.yaml", """
            rules:
              - name: r
                on: x
                from: { nope: x }
                log: x
            """)))
        let bus = Bus()
        _ = SourceKinds.registerAll(on: bus, environment: SourceEnvironment(stateDirectory: "/nonexistent"))
        let metricsDoc = try String(contentsOf: Self.repository.appendingPathComponent("docs/metrics.md"), encoding: .utf8)
        let runningRow = try #require(metricsDoc.split(separator: "\n").first { $0.contains("`eventbus_sources_running`") })
        let addingDoc = try String(contentsOf: Self.repository.appendingPathComponent("docs/adding-a-source.md"), encoding: .utf8)
        for kind in SourceKinds.all {
            #expect(sources.message.contains(kind.configSection), "sources: does not offer \(kind.configSection): \(sources.message)")
            #expect(rules.message.contains(kind.configSection), "from: does not offer \(kind.configSection): \(rules.message)")
            #expect(bus.sourceKinds.contains(kind.name), "a worker would not be offered \(kind.name)")
            #expect(PostCounts.kinds.contains(kind.name), "posts of \(kind.name) sources are not counted under their kind")
            for notice in kind.notices { #expect(PostCounts.notice(named: notice) != nil, "\(notice) is not counted") }
            #expect(runningRow.contains(kind.name), "docs/metrics.md's eventbus_sources_running row does not name \(kind.name)")
            #expect(addingDoc.contains(String(describing: kind)), "docs/adding-a-source.md does not list \(kind)")
        }
        let metrics = HostMetrics(bus: bus, bridge: { nil })
        let text = String(decoding: metrics.render(), as: UTF8.self)
        for name in SourceKinds.names { #expect(text.contains("eventbus_sources_running{kind=\"\(name)\"}"), "no running gauge for \(name)") }
    }

    static func problem(loading path: String) -> ConfigError? {
        do {
            _ = try HostConfig.load(from: path)
            return nil
        } catch {
            return error
        }
    }

    /// `eventbus tail` has each kind's option.
    @Test func theTailHasAnOptionForEveryKind() async throws {
        let directory = try TemporaryDirectory()
        let help = try await eventbus(["tail", "--help"], in: directory)
        for kind in SourceKinds.all {
            #expect(help.stdout.contains("--\(kind.tailOption.option)"), "eventbus tail has no --\(kind.tailOption.option)")
        }
    }
}

