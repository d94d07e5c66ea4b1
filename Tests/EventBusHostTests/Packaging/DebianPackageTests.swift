import Foundation
import Testing
import TestSupport

/// The `.deb` from `packaging/deb/build-deb.sh`, installed with apt into a clean Debian root
/// made by debootstrap (minbase: no Swift, no systemd), where the packaged eventbusd must check
/// its packaged config and load a packaged module; then removed and purged.
///
/// debootstrap fetches the base system from the Debian archive the machine's apt uses; on a
/// machine without it the test fails saying so (the project's machines all reach it).
@Suite struct DebianPackageTests {
    private static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    @Test(.timeLimit(.minutes(20)))
    func installsChecksItsConfigAndRemovesCleanlyInAFreshDebianRoot() async throws {
        let directory = try TemporaryDirectory()
        let built = try await shell("bash \(Self.repository)/packaging/deb/build-deb.sh --products \(BuildProducts.directory) --output \(directory.path)/out")
        #expect(built.status == 0, "\(built.output)")
        let package = try #require(built.output.split(separator: "\n").last.map(String.init))
        #expect(package.hasSuffix(".deb"), "\(built.output)")

        let contents = try await shell("dpkg-deb --contents \(package)").output
        for path in ["./usr/bin/eventbusd -> ../lib/eventbus/eventbusd", "./usr/lib/eventbus/libEventBusKit.so",
                     "./usr/lib/eventbus/libswiftCore.so", "./usr/lib/eventbus/eventbus-module-worker", "./usr/lib/eventbus/modules/libHello.so",
                     "./usr/share/eventbus/EventBusKit/Package.swift", "./usr/lib/eventbus/sdk/Modules/EventBusKit.swiftmodule",
                     "./usr/lib/eventbus/sdk/include/COpenCombineHelpers/module.modulemap", "./lib/systemd/system/eventbusd.service",
                     "./usr/share/man/man8/eventbusd.8.gz", "./usr/share/man/man1/eventbus-tail.1.gz",
                     "./usr/share/bash-completion/completions/eventbus", "./etc/eventbus/eventbus.yaml"] {
            #expect(contents.contains(path), "\(path) in the package")
        }
        let depends = try await shell("dpkg-deb --field \(package) Depends").output
        for library in ["libsystemd0", "libnats3.4", "libc6"] { #expect(depends.contains(library), "\(depends)") }
        #expect(try await shell("dpkg-deb --ctrl-tarfile \(package) | tar -xOf - ./conffiles").output == "/etc/eventbus/eventbus.yaml\n")

        let root = directory.path + "/root"
        let bootstrap = try await shell("debootstrap --variant=minbase bookworm \(root) \(Self.debianMirror())")
        try #require(bootstrap.status == 0, "debootstrap could not make a Debian root: \(bootstrap.output.suffix(2000))")
        #expect(!FileManager.default.fileExists(atPath: root + "/opt/swift"), "the root has no Swift toolchain")
        try FileManager.default.copyItem(atPath: package, toPath: root + "/tmp/eventbus.deb")
        // apt in the root fetches the package's dependencies (libnats3.4 is not in minbase).
        try? FileManager.default.copyItem(atPath: "/etc/resolv.conf", toPath: root + "/etc/resolv.conf.host")

        let session = try await shell("""
            unshare --mount --pid --fork --mount-proc=\(root)/proc chroot \(root) /bin/sh -c '
              set -e
              cp /etc/resolv.conf.host /etc/resolv.conf 2>/dev/null || true
              apt-get update -qq
              DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/eventbus.deb
              eventbusd --check-config --config /etc/eventbus/eventbus.yaml
              eventbus --version
              eventbus module sdk-path
              eventbus module sdk-path --prebuilt
              # Run it: the packaged hello module in its worker process, driven by the CLI.
              eventbusd --config /etc/eventbus/eventbus.yaml --socket /tmp/control.sock > /tmp/eventbusd.log 2>&1 &
              daemon=$!
              for i in $(seq 300); do eventbus status --socket /tmp/control.sock >/dev/null 2>&1 && break; sleep 0.1; done
              eventbus modules --socket /tmp/control.sock
              eventbus post --socket /tmp/control.sock user.packaged --print-seq
              kill -TERM $daemon; wait $daemon; echo "eventbusd exited $?"
              getent passwd eventbus
              echo "# local change" >> /etc/eventbus/eventbus.yaml
              apt-get remove -y -qq eventbus
              test -f /etc/eventbus/eventbus.yaml && echo "conffile kept on remove"
              apt-get purge -y -qq eventbus
              test ! -e /etc/eventbus/eventbus.yaml && test ! -e /usr/lib/eventbus && echo "purged"
              getent passwd eventbus || echo "user removed"'
            """)
        #expect(session.status == 0, "\(session.output)")
        let modules = session.output.split(separator: "\n").first { $0.hasPrefix("hello") } ?? ""
        #expect(modules.contains("active") && modules.contains("process"), "hello runs in a worker: \(session.output)")
        for line in ["module hello: loads, ABI ok, config ok (/usr/lib/eventbus/modules/libHello.so)", "\nok\n",
                     "(control protocol", "/usr/share/eventbus/EventBusKit", "eventbus:x:",
                     "modules: /usr/lib/eventbus/sdk/Modules\nmodule map: /usr/lib/eventbus/sdk/include/COpenCombineHelpers/module.modulemap\nlibrary: /usr/lib/eventbus\n", "eventbusd exited 0",
                     "conffile kept on remove", "purged", "user removed"] {
            #expect(session.output.contains(line), "\(line) in: \(session.output)")
        }
    }

    /// The first `URIs:` of apt's Debian source, so debootstrap fetches where apt does.
    private static func debianMirror() -> String {
        let sources = (try? String(contentsOfFile: "/etc/apt/sources.list.d/debian.sources", encoding: .utf8)) ?? ""
        for line in sources.split(separator: "\n") where line.hasPrefix("URIs:") {
            if let uri = line.split(separator: " ").last, !uri.contains("security") { return String(uri) }
        }
        return "http://deb.debian.org/debian"
    }

    /// `sh -c command` to its end, off Swift Testing's cooperative threads: the build and the
    /// debootstrap take minutes.
    private func shell(_ command: String) async throws -> (status: Int32, output: String) {
        let result = try await run("/bin/sh", ["-c", command])
        return (result.status, result.output)
    }
}
