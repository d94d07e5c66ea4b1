import Foundation
import Testing
import TestSupport

extension Production {
    /// The `.deb` from `packaging/deb/build-deb.sh`: its contents and fields, then installed with
    /// dpkg into a container of the suite's Debian root (minbase plus systemd and the package's
    /// Depends, no Swift), where the packaged eventbusd must check its packaged config and load a
    /// packaged module; then removed and purged — all in the container's throwaway overlay, so
    /// the cached root stays pristine.
    @Suite struct DebianPackage {
        @Test(.timeLimit(.minutes(30)))
        func installsChecksItsConfigAndRemovesCleanly() async throws {
            let prepared = try await ProductionRoot.shared()
            let package = prepared.package
            let contents = try await shell("dpkg-deb --contents \(package)").output
            for path in ["./usr/bin/eventbusd -> ../lib/eventbus/eventbusd", "./usr/lib/eventbus/libEventBusKit.so",
                         "./usr/lib/eventbus/libswiftCore.so", "./usr/lib/eventbus/eventbus-module-worker", "./usr/lib/eventbus/modules/libHello.so",
                         "./usr/lib/eventbus/eventbus-rule-runner", "./lib/systemd/system/eventbus-rule-runner.socket",
                         "./lib/systemd/system/eventbus-rule-runner@.service",
                         "./usr/share/eventbus/EventBusKit/Package.swift", "./usr/lib/eventbus/sdk/Modules/EventBusKit.swiftmodule",
                         "./usr/lib/eventbus/sdk/include/COpenCombineHelpers/module.modulemap", "./lib/systemd/system/eventbusd.service",
                         "./usr/share/man/man8/eventbusd.8.gz", "./usr/share/man/man1/eventbus-tail.1.gz",
                         "./usr/share/bash-completion/completions/eventbus", "./etc/eventbus/eventbus.yaml"] {
                #expect(contents.contains(path), "\(path) in the package")
            }
            let depends = try await shell("dpkg-deb --field \(package) Depends").output
            for library in ["libsystemd0", "libnats3.4", "libc6"] { #expect(depends.contains(library), "\(depends)") }
            #expect(try await shell("dpkg-deb --ctrl-tarfile \(package) | tar -xOf - ./conffiles").output == "/etc/eventbus/eventbus.yaml\n")
            let unit = try await shell("dpkg-deb --fsys-tarfile \(package) | tar -xOf - ./lib/systemd/system/eventbusd.service").output
            #expect(!unit.contains("/usr/local/bin/"), "the packaged unit runs /usr/bin/…, not /usr/local/bin/…: \(unit)")

            try await Container.withBooted { container in
                #expect(try await container.sh("test -e /opt/swift || command -v swift").status != 0, "the root has no Swift toolchain")
                let session = try await container.sh("""
                    set -e
                    dpkg -i \(Container.packageMount)/eventbus.deb
                    eventbusd --check-config --config /etc/eventbus/eventbus.yaml
                    eventbus --version
                    eventbus module sdk-path
                    eventbus module sdk-path --prebuilt
                    systemctl is-enabled eventbusd.socket eventbusd.service eventbus-rule-runner.socket
                    systemctl is-active eventbusd.service || true
                    # Run it by hand: the packaged hello module in its worker process, driven by the CLI.
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
                    test ! -e /lib/systemd/system/eventbusd.service && test ! -e /lib/systemd/system/eventbus-rule-runner.socket && echo "units gone"
                    getent passwd eventbus || echo "user removed"
                    """, timeout: 600)
                await check(session.status == 0, "the install session: \(session.output)", in: container)
                let modules = session.output.split(separator: "\n").first { $0.hasPrefix("hello") } ?? ""
                #expect(modules.contains("active") && modules.contains("process"), "hello runs in a worker: \(session.output)")
                for line in ["module hello: loads, ABI ok, config ok (/usr/lib/eventbus/modules/libHello.so)", "\nok\n",
                             "(control protocol", "/usr/share/eventbus/EventBusKit", "eventbus:x:", "\nenabled\nenabled\nenabled\n", "\ninactive\n",
                             "modules: /usr/lib/eventbus/sdk/Modules\nmodule map: /usr/lib/eventbus/sdk/include/COpenCombineHelpers/module.modulemap\nlibrary: /usr/lib/eventbus\n", "eventbusd exited 0",
                             "conffile kept on remove", "purged", "units gone", "user removed"] {
                    #expect(session.output.contains(line), "\(line) in: \(session.output)")
                }
            }
        }
    }
}
