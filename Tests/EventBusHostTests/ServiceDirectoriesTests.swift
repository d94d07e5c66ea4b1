import ControlProtocol
@testable import EventBusHost
import Testing

/// The folders systemd gives a service (`StateDirectory=` …) win over guesses from the user.
@Suite struct ServiceDirectoriesTests {
    @Test func theFirstAbsolutePathOfSystemdsListIsTaken() {
        #expect(ServiceDirectories.first(of: "/var/lib/eventbus:/var/lib/other") == "/var/lib/eventbus")
        #expect(ServiceDirectories.first(of: "relative:/var/lib/eventbus") == "/var/lib/eventbus")
        #expect(ServiceDirectories.first(of: "") == nil)
        #expect(ServiceDirectories.first(of: nil) == nil)
    }

    /// The packaged unit runs as user `eventbus`, whose home does not exist: its state must go to
    /// the folder systemd made, not under `$HOME/.local/state`.
    @Test func stateGoesWhereSystemdSaysThenWhereTheUserKeepsIt() {
        let service = ["STATE_DIRECTORY": "/var/lib/eventbus", "HOME": "/var/lib/eventbus", "XDG_STATE_HOME": "/x/state"]
        #expect(HostConfig.defaultStateDirectory(environment: service, userID: 998) == "/var/lib/eventbus")
        #expect(HostConfig.defaultStateDirectory(environment: ["STATE_DIRECTORY": "/srv/state"], userID: 0) == "/srv/state")
        #expect(HostConfig.defaultStateDirectory(environment: [:], userID: 0) == "/var/lib/eventbus")
        #expect(HostConfig.defaultStateDirectory(environment: ["XDG_STATE_HOME": "/x/state", "HOME": "/home/a"], userID: 1000) == "/x/state/eventbus")
        #expect(HostConfig.defaultStateDirectory(environment: ["HOME": "/home/a"], userID: 1000) == "/home/a/.local/state/eventbus")
    }
}
