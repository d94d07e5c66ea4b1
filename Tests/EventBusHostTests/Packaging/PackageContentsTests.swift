import Foundation
import Testing
import TestSupport

/// What is in the `.deb` of `packaging/deb/build-deb.sh`, looked at without installing it (the
/// install is DebianPackageTests'): lintian passes; man pages for eventbusd, eventbus, every
/// subcommand and the config file, titled by their command, with every option and examples,
/// rendering UTF-8; stripped
/// binaries that still load their modules; units and README whose references resolve inside
/// the package; the crash reporter, copyright and changelog; a development build's version.
///
/// The package is built once, from the products of this build (as DebianPackageTests does), and
/// unpacked with `dpkg-deb -x` into `package-contents-test` in the build folder (replaced by the
/// next run, so one run's ~150 MB stay at most); each test looks at one aspect of it.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct PackageContentsTests {
    private static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The built package and the folder it is unpacked in.
    struct Built: Sendable {
        let directory: String
        let package: String
        var root: String { directory + "/root" }
        var lib: String { root + "/usr/lib/eventbus" }
    }

    private static let built = Task<Built, any Error> {
        let directory = BuildProducts.directory + "/package-contents-test"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let build = try await shell("bash \(repository)/packaging/deb/build-deb.sh --products \(BuildProducts.directory) --output \(directory)/out")
        guard build.status == 0, let last = build.output.split(separator: "\n").last, last.hasSuffix(".deb") else {
            throw PackageBuildFailed(description: "build-deb.sh failed: \(build.output.suffix(3000))")
        }
        let package = String(last)
        let unpacked = try await shell("dpkg-deb -x \(package) \(directory)/root")
        guard unpacked.status == 0 else { throw PackageBuildFailed(description: "dpkg-deb -x: \(unpacked.output)") }
        return Built(directory: directory, package: package)
    }

    struct PackageBuildFailed: Error, CustomStringConvertible { var description: String }

    @Test(.timeLimit(.minutes(20)))
    func lintianFindsNoErrorsOrWarnings() async throws {
        let built = try await Self.built.value
        let lintian = try await Self.shell("lintian --fail-on error,warning \(built.package)")
        #expect(lintian.status == 0, "\(lintian.output)")
        #expect(!lintian.output.contains("\nE: ") && !lintian.output.contains("\nW: ") && !lintian.output.hasPrefix("E: ")
                && !lintian.output.hasPrefix("W: "), "\(lintian.output)")
    }

    /// Every subcommand `eventbus --help` lists (and theirs: `module new`) has a page named
    /// after it, whose title and NAME line name the command (generate-manual writes mdoc: `.Dt`,
    /// and NAME as the command is typed, `eventbus module new — …`).
    @Test(.timeLimit(.minutes(20)))
    func everyCommandHasAManPageTitledByItsName() async throws {
        let built = try await Self.built.value
        var pages: [(file: String, command: String, section: String)] = [
            ("man8/eventbusd.8.gz", "eventbusd", "8"), ("man1/eventbus.1.gz", "eventbus", "1"),
            ("man5/eventbus.yaml.5.gz", "eventbus.yaml", "5"),
        ]
        let environment = ["LD_LIBRARY_PATH": built.lib]
        func subcommands(_ words: [String]) async throws -> [String] {
            let help = try await run(built.lib + "/eventbus", words + ["--help"], environment: environment).output
            guard let list = help.components(separatedBy: "SUBCOMMANDS:\n").dropFirst().first else { return [] }
            return list.split(separator: "\n", omittingEmptySubsequences: false).prefix { !$0.isEmpty }
                .filter { $0.hasPrefix("  ") && !$0.hasPrefix("   ") }
                .compactMap { $0.split(separator: " ").first.map(String.init) }
                .filter { $0 != "help" }
        }
        var queue = try await subcommands([]).map { [$0] }
        #expect(Set(queue.map { $0[0] }).isSuperset(of: ["tail", "post", "status", "modules", "files", "metrics", "top", "module"]),
                "\(queue)")
        while let words = queue.first {
            queue.removeFirst()
            let command = "eventbus-" + words.joined(separator: "-")
            pages.append(("man1/\(command).1.gz", command, "1"))
            queue += try await subcommands(words).map { words + [$0] }
        }
        #expect(pages.contains { $0.command == "eventbus-module-new" }, "nested subcommands get pages too")
        for page in pages {
            let path = built.root + "/usr/share/man/" + page.file
            guard FileManager.default.fileExists(atPath: path) else {
                Issue.record("no man page \(page.file) for \(page.command)")
                continue
            }
            let source = try await Self.shell("zcat \(path)").output
            let title = source.split(separator: "\n").first { $0.hasPrefix(".TH ") || $0.hasPrefix(".Dt ") } ?? ""
            #expect(title.hasPrefix(".TH \(page.command.uppercased()) \"\(page.section)\"")
                    || title.hasPrefix(".TH \(page.command.uppercased()) \(page.section) ")
                    || title == ".Dt \(page.command.uppercased()) \(page.section)", "\(page.file): \(title)")
            let rendered = try await Self.render(path)
            // mdoc shortens a long title in the 80-column header: EVENTBUS-MODULE-SDK-PA...
            let header = "\(page.command.uppercased())(\(page.section))"
            #expect(rendered.hasPrefix(header) || header.count > 24 && rendered.hasPrefix(header.prefix(22) + "..."),
                    "\(page.file): \(rendered.prefix(200))")
            #expect(!rendered.hasPrefix("0.") && !title.contains(".TH 0."), "\(page.file) is titled by its version: \(title)")
            // NAME's line, its spaces as justified collapsed: "eventbus-tail - follow the events …".
            let name = (rendered.components(separatedBy: "NAME\n").dropFirst().first?.split(separator: "\n").first ?? "")
                .split(whereSeparator: \.isWhitespace).joined(separator: " ")
            #expect(name.hasPrefix("\(page.command) - ") || name.hasPrefix("\(page.command) \u{2014} "), "\(page.file) NAME: \(name)")
            #expect(!rendered.contains("???"), "\(page.file) has text lost to ???")
        }
    }

    /// Each page has every option its command's --help lists (the pages are generated from the
    /// commands), EXAMPLES where the package has them, and SEE ALSO.
    @Test(.timeLimit(.minutes(20)))
    func manPagesHaveEveryOptionAndExamples() async throws {
        let built = try await Self.built.value
        let environment = ["LD_LIBRARY_PATH": built.lib]
        for command in ["tail", "post", "reload", "modules", "rules", "status", "module new"] {
            let words = command.split(separator: " ").map(String.init)
            let page = built.root + "/usr/share/man/man1/eventbus-\(words.joined(separator: "-")).1.gz"
            let rendered = try await Self.render(page)
            let help = try await run(built.lib + "/eventbus", words + ["--help"], environment: environment).output
            let options = help.split(separator: "\n").compactMap { line -> String? in
                let trimmed = line.drop { $0 == " " }
                guard trimmed.hasPrefix("--") || trimmed.hasPrefix("-") && trimmed.dropFirst().first?.isLetter == true else { return nil }
                return trimmed.split(separator: " ").first.map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: ",")) }
            }
            #expect(!options.isEmpty, "\(command): \(help)")
            for option in options { #expect(rendered.contains(option), "eventbus-\(command)(1) has \(option)") }
            #expect(rendered.contains("\nSEE ALSO\n"), "eventbus-\(command)(1)")
            #expect(rendered.contains("SYNOPSIS\n     eventbus \(command) "), "typed as a command: \(rendered.prefix(600))")
            if ["tail", "post", "reload", "modules", "rules"].contains(command) {
                #expect(rendered.contains("\nEXAMPLES\n") && rendered.contains("eventbus \(command)"), "eventbus-\(command)(1): \(rendered.suffix(800))")
            }
        }
    }

    /// eventbus.yaml(5) names every top-level key of the config, and the sections' keys.
    @Test(.timeLimit(.minutes(20)))
    func theConfigFileHasAManPageWithEveryTopLevelKey() async throws {
        let built = try await Self.built.value
        let rendered = try await Self.render(built.root + "/usr/share/man/man5/eventbus.yaml.5.gz")
        for key in ["sources", "modules", "module_mailbox_capacity", "module_mailbox_bytes", "module_isolation",
                    "shutdown_timeout", "control", "state_directory", "bridge", "metrics",
                    "tail_group", "post_group", "client_buffer", "replay_events", "journal_groups", "watch_entries",
                    "heartbeat_timeout", "missed_runs", "export_buffer", "js_domain", "listen"] {
            #expect(rendered.contains(key), "eventbus.yaml(5) names \(key)")
        }
    }

    /// An em dash (in `eventbus tail --help` and eventbus.yaml(5)) and × come out as themselves in
    /// a UTF-8 terminal, not as `???`.
    @Test(.timeLimit(.minutes(20)))
    func manPagesRenderUTF8() async throws {
        let built = try await Self.built.value
        let tail = try await Self.render(built.root + "/usr/share/man/man1/eventbus-tail.1.gz")
        #expect(tail.contains("\u{2014}"), "an em dash in eventbus-tail(1): \(tail.prefix(1500))")
        let config = try await Self.render(built.root + "/usr/share/man/man5/eventbus.yaml.5.gz")
        #expect(config.contains("\u{2014}") && config.contains("\u{00D7}"), "em dash and × in eventbus.yaml(5)")
        // The sources are ASCII (groff escapes), so they render in any locale.
        for page in ["man1/eventbus-tail.1.gz", "man5/eventbus.yaml.5.gz", "man8/eventbusd.8.gz"] {
            let source = try await Self.shell("zcat \(built.root)/usr/share/man/\(page)").output
            let ascii = source.unicodeScalars.allSatisfy { $0.isASCII }
            #expect(ascii, "\(page) source is ASCII")
        }
    }

    /// Every ELF file is stripped (`file` says so), and the stripped host still loads the
    /// stripped modules and passes their ABI check (Swift's metadata survives stripping).
    @Test(.timeLimit(.minutes(20)))
    func binariesAreStrippedAndStillLoadModules() async throws {
        let built = try await Self.built.value
        let elves = try await Self.shell("find \(built.lib) -type f \\( -name '*.so' -o -perm -0100 \\) -exec file {} +").output
            .split(separator: "\n").filter { $0.contains("ELF") }
        #expect(elves.count >= 10, "\(elves)")
        // EventBus's own files keep their symbol table, for crash reports; the runtime is stripped.
        let own = ["/eventbusd:", "/eventbus:", "/eventbus-module-worker:", "/eventbus-rule-runner:", "/libEventBusKit.so:", "/modules/"]
        for line in elves {
            if own.contains(where: line.contains) {
                #expect(line.hasSuffix(", not stripped"), "\(line)")
            } else {
                #expect(line.hasSuffix(", stripped") && !line.contains("not stripped"), "\(line)")
            }
        }
        for binary in ["eventbusd", "eventbus", "eventbus-module-worker", "libEventBusKit.so", "modules/libHello.so"] {
            let sections = try await Self.shell("readelf -SW \(built.lib)/\(binary)").output
            #expect(sections.contains(".symtab") && !sections.contains(".debug_"), "\(binary): a symbol table, no debug information")
        }
        for binary in ["eventbusd", "eventbus", "eventbus-module-worker", "eventbus-rule-runner", "libEventBusKit.so", "modules/libHello.so"] {
            let runpath = try await Self.shell("readelf -d \(built.lib)/\(binary) | grep -i runpath").output
            #expect(!runpath.contains("/opt/") && runpath.contains("$ORIGIN"), "\(binary): \(runpath)")
        }
        let config = built.directory + "/check.yaml"
        try """
            modules:
              hello:
                path: \(built.lib)/modules/libHello.so
                config: {greeting: hi}
              follower:
                path: \(built.lib)/modules/libFollower.so
                config: {target: "app.>"}
              rate-summary:
                path: \(built.lib)/modules/libRateSummary.so
                config: {match: ["user.>"], interval_seconds: 5}
            """.write(toFile: config, atomically: false, encoding: .utf8)
        // No LD_LIBRARY_PATH: RUNPATH $ORIGIN must find the bundled runtime.
        var environment = ProcessInfo.processInfo.environment
        environment["LD_LIBRARY_PATH"] = nil
        let check = try await run(built.lib + "/eventbusd", ["--check-config", "--config", config], environment: environment)
        #expect(check.status == 0, "\(check.output)")
        for module in ["hello", "follower", "rate-summary"] {
            #expect(check.output.contains("module \(module): loads, ABI ok, config ok"), "\(check.output)")
        }
    }

    /// The units' Documentation= and ExecStart= name what the package ships, not /usr/local.
    @Test(.timeLimit(.minutes(20)))
    func unitsReferToFilesInThePackage() async throws {
        let built = try await Self.built.value
        for unit in ["eventbusd.service", "eventbusd.socket", "eventbus-rule-runner.socket", "eventbus-rule-runner@.service"] {
            let text = try String(contentsOfFile: built.root + "/lib/systemd/system/" + unit, encoding: .utf8)
            #expect(!text.contains("/usr/local/"), "\(unit) names /usr/local")
            let documentation = text.split(separator: "\n").filter { $0.hasPrefix("Documentation=") }
            #expect(!documentation.isEmpty, "\(unit) has Documentation=")
            for line in documentation {
                for reference in line.dropFirst("Documentation=".count).split(separator: " ") {
                    if reference.hasPrefix("file://") {
                        let path = String(reference.dropFirst("file://".count))
                        #expect(FileManager.default.fileExists(atPath: built.root + path), "\(unit): \(reference) is not in the package")
                    } else if reference.hasPrefix("man:") {
                        // man:eventbusd(8)
                        let page = reference.dropFirst(4).replacingOccurrences(of: "(", with: ".").replacingOccurrences(of: ")", with: "")
                        let section = page.split(separator: ".").last ?? ""
                        #expect(FileManager.default.fileExists(atPath: "\(built.root)/usr/share/man/man\(section)/\(page).gz"),
                                "\(unit): \(reference) is not in the package")
                    }
                }
            }
            for line in text.split(separator: "\n") where line.hasPrefix("ExecStart=") {
                let program = line.dropFirst("ExecStart=".count).split(separator: " ").first.map(String.init) ?? ""
                #expect(FileManager.default.fileExists(atPath: built.root + program), "\(unit): \(line)")
            }
        }
    }

    /// Every relative link of the shipped Markdown (README, docs/, the modules' READMEs) resolves
    /// to a file shipped beside it.
    @Test(.timeLimit(.minutes(20)))
    func shippedDocumentationLinksResolve() async throws {
        let built = try await Self.built.value
        let doc = built.root + "/usr/share/doc/eventbus"
        let pages = try await Self.shell("cd \(doc) && find . -name '*.md'").output.split(separator: "\n").map { String($0.dropFirst(2)) }
        #expect(pages.contains("README.md") && pages.contains("docs/modules.md") && pages.contains("docs/PROTOCOL.md")
                && pages.contains("plugins/hello/README.md"), "\(pages)")
        let link = try Regex(#"\]\(([^)#:\s]+)(#[^)]*)?\)"#)
        var checked = 0
        for page in pages {
            let text = try String(contentsOfFile: doc + "/" + page, encoding: .utf8)
            let folder = URL(fileURLWithPath: doc + "/" + page).deletingLastPathComponent()
            for match in text.matches(of: link) {
                guard let target = match.output[1].substring.map(String.init) else { continue }
                let resolved = folder.appendingPathComponent(target).standardizedFileURL.path
                #expect(resolved.hasPrefix(doc + "/") && FileManager.default.fileExists(atPath: resolved),
                        "\(page) links \(target), which is not in /usr/share/doc/eventbus")
                checked += 1
            }
        }
        #expect(checked >= 20, "links checked: \(checked)")
    }

    /// The alert rules and the dashboard, where docs/metrics.md says they are; the installed
    /// rules pass their own promtool tests there (MonitoringTests holds them to a real host).
    @Test(.timeLimit(.minutes(20)))
    func alertRulesAndDashboardAreShippedAndTheirTestsPassInPlace() async throws {
        let built = try await Self.built.value
        let folder = built.root + "/usr/share/eventbus/monitoring"
        for file in ["eventbus-alerts.yml", "eventbus-alerts.test.yml", "eventbus-dashboard.json"] {
            #expect(FileManager.default.fileExists(atPath: folder + "/" + file), "\(file) is not shipped")
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool") else { return }
        let tests = try await Self.shell("cd \(folder) && promtool test rules eventbus-alerts.test.yml 2>&1")
        #expect(tests.status == 0, "\(tests.output)")
    }

    /// The crash reporter the Swift runtime of a crashing worker runs: shipped, executable,
    /// self-contained (no Swift runtime needed), and it runs.
    @Test(.timeLimit(.minutes(20)))
    func swiftBacktraceIsShippedAndRuns() async throws {
        let built = try await Self.built.value
        let path = built.lib + "/swift-backtrace"
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o755)
        let ldd = try await Self.shell("ldd \(path)").output
        #expect(!ldd.contains("libswift") && !ldd.contains("not found"), "\(ldd)")
        let help = try await run(path, ["--help"], environment: [:])
        #expect(help.status == 0 && help.output.contains("usage: swift-backtrace"), "\(help.output.prefix(500))")
    }

    /// A crash of a packaged binary is reported with the names of its functions (the symbol
    /// table is kept), where a fully stripped one showed only `<unknown>`: the packaged
    /// `eventbus tail`, following a real host, is sent SIGSEGV with the packaged backtracer set
    /// as eventbusd sets it for its workers. (It is killed once the report is out: after a
    /// signal that did not come from a fault, the crashed process does not end by itself.)
    @Test(.timeLimit(.minutes(20)))
    func aCrashReportNamesTheFunctions() async throws {
        let built = try await Self.built.value
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control: {socket: \(socket)}\n", in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let report = try directory.write("report.txt", "")
        let tail = Process()
        tail.executableURL = URL(fileURLWithPath: built.lib + "/eventbus")
        tail.arguments = ["tail", "--socket", socket]
        tail.environment = ["LD_LIBRARY_PATH": built.lib,
                            "SWIFT_BACKTRACE": "enable=yes,interactive=no,format=text,swift-backtrace=\(built.lib)/swift-backtrace"]
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: report))
        tail.standardOutput = output
        tail.standardError = output
        try tail.run()
        defer { if tail.isRunning { kill(tail.processIdentifier, SIGKILL) } }
        #expect(await waitForTailing(socket, count: 1))
        kill(tail.processIdentifier, SIGSEGV)
        let text = { (try? String(contentsOfFile: report, encoding: .utf8)) ?? "" }
        #expect(await eventually { text().contains("Registers:") }, "\(text())")
        #expect(text().contains("TailCommand.run()") && text().contains(" in eventbus"), "\(text().prefix(3000))")
        #expect(!text().contains("<unknown> in eventbus\n"), "\(text().prefix(3000))")
    }

    /// A machine-readable copyright and a changelog whose version is the package's.
    @Test(.timeLimit(.minutes(20)))
    func copyrightAndChangelogAreShipped() async throws {
        let built = try await Self.built.value
        let doc = built.root + "/usr/share/doc/eventbus"
        let copyright = try String(contentsOfFile: doc + "/copyright", encoding: .utf8)
        #expect(copyright.hasPrefix("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"))
        #expect(copyright.contains("Files: *") && copyright.contains("Runtime Library exception"), "\(copyright.prefix(500))")
        let version = try await Self.shell("dpkg-deb --field \(built.package) Version").output.trimmingCharacters(in: .whitespacesAndNewlines)
        let changelog = try await Self.shell("zcat \(doc)/changelog.gz").output
        #expect(changelog.hasPrefix("eventbus (\(version)) "), "\(changelog)")
    }

    /// A build of a commit that is not tagged v<release> is `<release>~git<YYYYMMDD>.<hash>`.
    @Test(.timeLimit(.minutes(20)))
    func aDevelopmentBuildIsVersionedByItsCommit() async throws {
        let built = try await Self.built.value
        let version = try await Self.shell("dpkg-deb --field \(built.package) Version").output.trimmingCharacters(in: .whitespacesAndNewlines)
        let release = try await run(built.lib + "/eventbus", ["--version"], environment: ["LD_LIBRARY_PATH": built.lib]).output
            .split(separator: " ").dropFirst().first.map(String.init) ?? "?"
        let git = "git -C \(Self.repository)"
        let hash = try await Self.shell("\(git) rev-parse --short=7 HEAD").output.trimmingCharacters(in: .whitespacesAndNewlines)
        let tags = try await Self.shell("\(git) tag --points-at HEAD").output.split(separator: "\n")
        if tags.contains(Substring("v" + release)) {
            #expect(version == release)
        } else {
            let date = try await Self.shell("TZ=UTC \(git) log -1 --format=%cd --date=format-local:%Y%m%d HEAD").output
                .trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(version == "\(release)~git\(date).\(hash)")
        }
        #expect(built.package.hasSuffix("/eventbus_\(version)_\(try await Self.shell("dpkg --print-architecture").output.trimmingCharacters(in: .whitespacesAndNewlines)).deb"))
    }

    /// A man page as `man` shows it in a UTF-8 terminal, 80 columns, without highlighting.
    private static func render(_ page: String) async throws -> String {
        try await shell("LC_ALL=C.UTF-8 MANWIDTH=80 MAN_KEEP_FORMATTING= man --warnings -l \(page) 2>&1 | col -bx").output
    }

    /// The Python helper for exec modules is shipped where `eventbus module new --lang python`
    /// looks for it next to the installed CLI, which copies it beside the module it scaffolds:
    /// a program that compiles, with the helper it imports.
    @Test(.timeLimit(.minutes(20)))
    func thePythonHelperIsShippedWhereTheScaffoldFindsIt() async throws {
        let built = try await Self.built.value
        let helper = built.root + "/usr/share/eventbus/python/eventbus_module.py"
        let shipped = try String(contentsOfFile: helper, encoding: .utf8)
        #expect(shipped == (try String(contentsOfFile: Self.repository + "/examples/modules/eventbus_module.py", encoding: .utf8)))
        let folder = built.directory + "/python-scaffold"
        try? FileManager.default.removeItem(atPath: folder)
        let scaffold = try await Self.shell("\(built.lib)/eventbus module new --lang python greeter --path \(folder) 2>&1")
        #expect(scaffold.status == 0, "\(scaffold.output)")
        #expect(try String(contentsOfFile: folder + "/greeter/eventbus_module.py", encoding: .utf8) == shipped)
        let compiles = try await Self.shell("cd \(folder)/greeter && python3 -c 'import ast, sys; ast.parse(open(\"greeter.py\").read()); sys.path.insert(0, \".\"); import eventbus_module' 2>&1")
        #expect(compiles.status == 0, "\(compiles.output)")
    }

    private static func shell(_ command: String) async throws -> (status: Int32, output: String) {
        let result = try await run("/bin/sh", ["-c", command])
        return (result.status, result.output)
    }
}
