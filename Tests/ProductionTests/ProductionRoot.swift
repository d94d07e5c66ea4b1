import Foundation
import Testing
import TestSupport

/// What every production test shares, made once per test run: the `.deb` built from this
/// checkout's debug products, and a Debian 12 root (debootstrap, minbase plus systemd and every
/// `Depends:` of the package) cached in the build folder across runs.
///
/// The root is never booted or changed itself: each test boots a throwaway overlay of it
/// (``Container``), and the package test installs into a copy-on-write overlay as well.
struct ProductionRoot: Sendable {
    /// The `.deb`, and the folder it is in (bound read-only into containers at ``Container/packageMount``).
    var package: String
    var packageDirectory: String
    /// The pristine Debian root: `<build folder>/production-root/root`.
    var root: String
    /// The packages of the package's `Depends:` field (debootstrap installed them into the root).
    var depends: [String]
    /// build-deb.sh's output, for the package test's messages.
    var buildOutput: String

    /// The one preparation of this run (`static let` is initialized once, lazily, thread-safely).
    private static let prepared = Task<ProductionRoot, any Error> { try await prepare() }

    static func shared() async throws -> ProductionRoot { try await prepared.value }

    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The debug products `swift build --build-tests` made: the folder of the built eventbusd.
    static let products: String = {
        guard let eventbusd = BuiltExecutable.path(named: "eventbusd") else {
            fatalError("eventbusd is not built next to the test bundle; build with swift build --build-tests first")
        }
        return (eventbusd as NSString).deletingLastPathComponent
    }()

    /// The build folder the products are in (`.build`, or whatever `--scratch-path` named): the
    /// nearest ancestor of the products whose name starts with `.build`, else `<repo>/.build`.
    static let buildFolder: String = {
        var current = products
        while current != "/" {
            if (current as NSString).lastPathComponent.hasPrefix(".build") { return current }
            current = (current as NSString).deletingLastPathComponent
        }
        return repository + "/.build"
    }()

    /// The first `URIs:` of apt's Debian source, so debootstrap fetches where apt does.
    static func debianMirror() -> String {
        let sources = (try? String(contentsOfFile: "/etc/apt/sources.list.d/debian.sources", encoding: .utf8)) ?? ""
        for line in sources.split(separator: "\n") where line.hasPrefix("URIs:") {
            if let uri = line.split(separator: " ").last, !uri.contains("security") { return String(uri) }
        }
        return "http://deb.debian.org/debian"
    }

    /// What the root has besides minbase: systemd as PID 1 (and D-Bus, which systemctl and
    /// journald use), procps (pgrep, ps), util-linux is in minbase (runuser, nsenter, logger);
    /// polkit as Debian ships it (polkitd, and libpam-systemd for its logind dependency, which
    /// debootstrap does not resolve through the virtual package), which decides what the
    /// unprivileged eventbus user may ask of systemd (TransientUnits, docs/rules-privileges.md).
    static let basePackages = ["systemd", "systemd-sysv", "dbus", "procps", "polkitd", "libpam-systemd"]

    private static func prepare() async throws -> ProductionRoot {
        for program in ["/usr/bin/systemd-nspawn", "/usr/sbin/debootstrap", "/usr/bin/dpkg-deb"] where access(program, X_OK) != 0 {
            throw Failure("\(program) is missing (apt-get install systemd-container debootstrap; see .ci/setup)")
        }
        let folder = buildFolder + "/production-root"
        try FileManager.default.createDirectory(atPath: folder + "/package", withIntermediateDirectories: true)
        // One test process at a time per build folder: a second one would debootstrap into the
        // same root.partial, or replace the package under the first one's containers. Held
        // until this process exits (the descriptor is never closed).
        let lock = open(folder + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard lock >= 0 else { throw Failure("cannot open \(folder)/lock: \(String(cString: strerror(errno)))") }
        _ = try await blocking { flock(lock, LOCK_EX) }
        try? FileManager.default.removeItem(atPath: folder + "/package/eventbus.deb")
        // gzip -1 instead of xz: the same package for these tests, built in a fraction of the
        // time (xz took about two minutes of this machine's two cores).
        let built = try await shell("DPKG_DEB_COMPRESSOR_TYPE=gzip DPKG_DEB_COMPRESSOR_LEVEL=1 bash \(repository)/packaging/deb/build-deb.sh --products \(products) --output \(folder)/package-build 2>&1")
        guard built.status == 0, let package = built.output.split(separator: "\n").last.map(String.init), package.hasSuffix(".deb") else {
            throw Failure("build-deb.sh failed: \(built.output.suffix(3000))")
        }
        print("production root: build-deb.sh took \(Int(built.seconds)) s")
        // One stable name, bound into every container.
        try FileManager.default.copyItem(atPath: package, toPath: folder + "/package/eventbus.deb")
        try? FileManager.default.removeItem(atPath: package)
        let dependsField = try await shell("dpkg-deb --field \(folder)/package/eventbus.deb Depends").output
        // "libc6 (>= 2.34), libnats3.4, passwd" -> the names (the first of any alternatives).
        let depends = dependsField.split(separator: ",").compactMap { item -> String? in
            let first = item.split(separator: "|").first ?? item
            return first.split(whereSeparator: { $0 == " " || $0 == "\n" }).first.map(String.init)
        }.filter { !$0.isEmpty }

        let include = Array(Set(basePackages + depends)).sorted()
        let mirror = debianMirror()
        let stamp = "bookworm minbase \(mirror)\n" + include.joined(separator: ",") + "\n"
        let root = folder + "/root"
        let stampFile = folder + "/complete"
        if (try? String(contentsOfFile: stampFile, encoding: .utf8)) != stamp {
            try? FileManager.default.removeItem(atPath: stampFile)
            for stale in [root, folder + "/root.partial"] { try await removeRoot(stale) }
            let bootstrap = try await shell("debootstrap --variant=minbase --include=\(include.joined(separator: ",")) bookworm \(folder)/root.partial \(mirror) 2>&1")
            guard bootstrap.status == 0 else {
                throw Failure("debootstrap could not make a Debian root (\(bootstrap.seconds) s): \(bootstrap.output.suffix(3000))")
            }
            try FileManager.default.moveItem(atPath: folder + "/root.partial", toPath: root)
            try stamp.write(toFile: stampFile, atomically: true, encoding: .utf8)
            print("production root: debootstrap took \(Int(bootstrap.seconds)) s")
        }
        return ProductionRoot(package: folder + "/package/eventbus.deb", packageDirectory: folder + "/package",
                              root: root, depends: depends, buildOutput: built.output)
    }

    /// Removes a (partial) root, first unmounting whatever a failed debootstrap left mounted in
    /// it (its /proc, /sys): `rm -rf` must never walk into a mounted file system.
    private static func removeRoot(_ path: String) async throws {
        guard FileManager.default.fileExists(atPath: path) else { return }
        let mounts = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        let inside = mounts.split(separator: "\n").compactMap { line -> String? in
            let fields = line.split(separator: " ")
            return fields.count > 4 && (fields[4] == path || fields[4].hasPrefix(path + "/")) ? String(fields[4]) : nil
        }
        for mount in inside.sorted(by: { $0.count > $1.count }) { _ = try await shell("umount -l \(mount)") }
        let still = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        guard !still.contains(" \(path)/") else { throw Failure("\(path) still has mounts in it; not removing it") }
        _ = try await shell("rm -rf --one-file-system \(path)")
    }
}

/// A failure of the harness itself (not of an assertion): its message says what broke.
struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// `sh -c command` to its end, off the cooperative threads (``blocking(_:)``).
func shell(_ command: String) async throws -> ProcessResult {
    try await run("/bin/sh", ["-c", command])
}
