import SystemdBus
import Testing
@testable import TransientUnits

/// When a run's unit is over and how it ended (``UnitRunState``), fed the signals systemd sends,
/// in the orders it sends them, without D-Bus. (The same against a real systemd:
/// ProductionTests' TransientUnits.)
struct UnitRunStateTests {
    private let unit = "eventbus-rule-r-1.service"
    private let job = "/org/freedesktop/systemd1/job/42"

    private func started() -> UnitRunState {
        var state = UnitRunState(unit: unit)
        state.jobPath = job
        return state
    }

    /// A new unit may report `inactive` before its start job ran: that is no end.
    @Test func theInactiveOfANewUnitIsNoEnd() {
        var state = started()
        state.propertiesChanged(["ActiveState": .string("inactive")])
        #expect(!state.isOver)
        state.jobRemoved(path: job, unit: unit, result: "done")
        #expect(!state.isOver, "the job is done, but the unit was never seen running")
        state.propertiesChanged(["ActiveState": .string("active"), "MainPID": .unsigned(812)])
        #expect(!state.isOver && state.mainPID == 812)
        state.propertiesChanged(["ActiveState": .string("inactive"), "Result": .string("success"),
                                 "ExecMainCode": .int(1), "ExecMainStatus": .int(0), "MainPID": .unsigned(0)])
        #expect(state.isOver && state.termination(stopRequested: false) == .exited(0))
        #expect(state.mainPID == 812, "a main PID of 0 after the exit does not forget the one it had")
    }

    /// A command that ends between two of systemd's signal batches: only `inactive` is heard,
    /// but its main process exited, and the unit is removed.
    @Test func aQuickCommandIsOverByItsExitOrItsRemoval() {
        var byExit = started()
        byExit.jobRemoved(path: job, unit: unit, result: "done")
        byExit.propertiesChanged(["ActiveState": .string("inactive"), "ExecMainCode": .int(1), "ExecMainStatus": .int(4),
                                  "Result": .string("exit-code")])
        #expect(byExit.isOver && byExit.termination(stopRequested: false) == .exited(4))

        var byRemoval = started()
        byRemoval.jobRemoved(path: job, unit: unit, result: "done")
        byRemoval.unitRemoved("another.service")
        #expect(!byRemoval.isOver)
        byRemoval.unitRemoved(unit)
        #expect(byRemoval.isOver)
    }

    /// The end heard before the start job's end (signals of two kinds, queued apart): over only
    /// once both are in.
    @Test func theEndWaitsForTheStartJob() {
        var state = started()
        state.propertiesChanged(["ActiveState": .string("active")])
        state.propertiesChanged(["ActiveState": .string("failed"), "Result": .string("signal"), "ExecMainCode": .int(2), "ExecMainStatus": .int(9)])
        #expect(!state.isOver)
        state.jobRemoved(path: "/org/freedesktop/systemd1/job/43", unit: unit, result: "done")
        #expect(!state.isOver, "another job's end")
        state.jobRemoved(path: job, unit: unit, result: "done")
        #expect(state.isOver && state.termination(stopRequested: false) == .signalled(9))
    }

    @Test func aTimeoutIsATimeoutAndAStopIsAStop() {
        var state = started()
        state.jobRemoved(path: job, unit: unit, result: "done")
        state.propertiesChanged(["ActiveState": .string("active")])
        state.propertiesChanged(["ActiveState": .string("failed"), "Result": .string("timeout"), "ExecMainCode": .int(2), "ExecMainStatus": .int(15)])
        #expect(state.isOver && state.termination(stopRequested: false) == .timedOut)
        #expect(state.termination(stopRequested: true) == .stopped, "a stop the run asked for is a stop, whatever systemd says")
        // The stop job's own end changes nothing.
        state.jobRemoved(path: "/org/freedesktop/systemd1/job/44", unit: unit, result: "done")
        #expect(state.jobResult == "done")
    }

    /// A process systemd could not set up (its own statuses 200–243) is a failed start, named;
    /// a command that exits before systemd saw its execve succeed fails the start job too, but
    /// its status is its own.
    @Test func aFailedStartJobIsAFailedStartOnlyWhenTheCommandNeverRan() {
        var unknownUser = started()
        unknownUser.jobRemoved(path: job, unit: unit, result: "failed")
        unknownUser.propertiesChanged(["ActiveState": .string("failed"), "Result": .string("exit-code"),
                                       "ExecMainCode": .int(1), "ExecMainStatus": .int(217)])
        #expect(unknownUser.isOver && unknownUser.startJobFailed)
        #expect(unknownUser.termination(stopRequested: false)
                == .failedToStart("systemd could not start \(unit): job failed, result exit-code, status 217/USER"))

        var quickExit = started()
        quickExit.jobRemoved(path: job, unit: unit, result: "failed")
        quickExit.propertiesChanged(["ActiveState": .string("failed"), "Result": .string("exit-code"),
                                     "ExecMainCode": .int(1), "ExecMainStatus": .int(1)])
        #expect(quickExit.termination(stopRequested: false) == .exited(1))

        var noProcess = started()
        noProcess.jobRemoved(path: job, unit: unit, result: "dependency")
        noProcess.unitRemoved(unit)
        #expect(noProcess.termination(stopRequested: false) == .failedToStart("systemd could not start \(unit): job dependency"))
    }
}
