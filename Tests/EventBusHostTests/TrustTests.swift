import EventBusHost
import Foundation
import ModuleLoading
import Testing

/// A config or module from a place another user can write is refused, with the reason.
@Suite struct TrustTests {
    @Test func aWorldWritableConfigIsRefused() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", "modules: {}\n")
        #expect(chmod(file, 0o666) == 0)
        do {
            _ = try HostConfig.load(from: file)
            Issue.record("a world-writable config was loaded")
        } catch {
            #expect(error.message.contains("config file refused"))
            #expect(error.message.contains("\(file) is writable by every user (mode 0666)"))
        }
    }

    @Test func aWorldWritableModuleIsRefused() throws {
        let directory = try TemporaryDirectory()
        let module = directory.path + "/libCounter.so"
        try FileManager.default.copyItem(atPath: BuildProducts.fixture("FixtureCounter"), toPath: module)
        #expect(chmod(module, 0o757) == 0)
        do {
            _ = try ModuleLoader().load(module)
            Issue.record("a world-writable module was loaded")
        } catch {
            #expect(error.kind == .untrusted)
            #expect(error.description.contains("writable by every user (mode 0757)"))
        }
    }

    @Test func aFileOwnedByAnotherUserIsRefused() throws {
        try #require(geteuid() == 0, "needs root to give a file away")
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", "modules: {}\n")
        #expect(chown(file, 65534, 65534) == 0)
        do {
            _ = try HostConfig.load(from: file)
            Issue.record("a config owned by another user was loaded")
        } catch {
            #expect(error.message.contains("owned by user id 65534, which is neither root nor the user eventbusd runs as (0)"))
        }
    }

    @Test func aWritableDirectoryOnTheWayIsRefused() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", "modules: {}\n")
        #expect(chmod(directory.path, 0o777) == 0)
        do {
            _ = try HostConfig.load(from: file)
            Issue.record("a config in a world-writable directory was loaded")
        } catch {
            #expect(error.message.contains("its directory \(directory.path) is writable by every user (mode 0777)"))
        }
        // The sticky bit (as on /tmp) makes such a directory safe: only owners rename or delete.
        #expect(chmod(directory.path, 0o1777) == 0)
        #expect(throws: Never.self) { try HostConfig.load(from: file) }
    }
}
